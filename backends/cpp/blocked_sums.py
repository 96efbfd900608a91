"""Blocked float sums: a float32 sum folds blocks of elements into a double total.

A vectorized float sum keeps one partial per vector lane, and each partial adds its elements in
sequence: over a row of 1M elements, 65536 float additions per lane erred by 1.2e-6 (relative)
where eager's cascade sum erred by 1e-7, and a column sum over 1M rows (one sequential partial
per column) by 7e-6 (2026-12-02). Here the reduced loop runs in blocks: each block sums in float,
on the vectors the loop had before, then adds its sum into a double total, so no float partial
adds more than a block's elements. After the last block the total is rounded to float once.

Blocks hold ``ROW_BLOCK`` elements of a row, or ``BLOCK_ROWS`` rows of a column (the limit that
reductions across rows keep, ``across.py``). Only the float sums of reductions that vectorize
with a clause or per column are blocked; Welford's mean and the other joint reductions keep their
own (stable) updates, and max, min and the flags are exact.
"""
from __future__ import annotations

from ...ir.index import product
from ...ir.reductions import Combine
from .accumulators import Accumulator
from .across import BLOCK_ROWS

ROW_BLOCK = 2048  # elements of one row a float sum (16 or 8 lanes) adds before its double total


class BlockedSums:
    """The float sums among ``accs`` (each a scalar, or an element of lane arrays ``lanes`` long,
    of which the first ``used`` are in use) and the C++ that folds them into double totals block
    by block."""

    def __init__(self, accs: list[Accumulator], lanes: str | None = None, used: str | None = None):
        self.lanes, self.used = lanes, used or lanes
        self.parts = [(a, c.suffix, init) for a in accs if a.spec.joint is None
                      for c, (t, _, init) in zip(a.state(), a.parts()) if c.combine is Combine.ADD and t == "float"]

    def __bool__(self) -> bool:
        return bool(self.parts)

    def _each(self, stmts: list[str]) -> list[str]:
        """``stmts`` once for scalars, or in a vectorized loop over the lanes."""
        if self.lanes is None or not stmts:
            return stmts
        return ["#pragma omp simd", f"for (int64_t j = 0; j < {self.used}; ++j) {{", *("  " + s for s in stmts), "}"]

    def declare(self) -> list[str]:
        """The double totals, zero."""
        if self.lanes is None:
            return [f"double {a.var}{s}_t = 0;" for a, s, _ in self.parts]
        return [f"double {a.var}{s}_t[{self.lanes}];" for a, s, _ in self.parts] + self._each(
            [f"{a.var}{s}_t[j] = 0;" for a, s, _ in self.parts])

    def fold(self) -> list[str]:
        """At a block's end: each float sum added into its total and started again."""
        return self._each([f"{a.var}{s}_t{a.index} += {a.ref(s)}; {a.ref(s)} = {init};" for a, s, init in self.parts])

    def finish(self) -> list[str]:
        """After the last block: each sum is its total, rounded once."""
        return self._each([f"{a.ref(s)} = (float){a.var}{s}_t{a.index};" for a, s, _ in self.parts])


def block_step(printer, rdomain, elements: int) -> str | None:
    """Iterations of the outermost reduced dim per block of at least ``elements`` points (one
    when an inner dim alone is that large), in C; None when the whole reduced range fits in one
    block, so there is nothing to fold."""
    total, inner = product(rdomain).as_int(), product(rdomain[1:])
    if total is not None and total <= elements:
        return None
    n = inner.as_int()
    if n is not None:
        return str(max(1, elements // max(n, 1)))
    return f"std::max<int64_t>(1, {elements} / std::max<int64_t>(1, {printer(inner)}))"


def column_step(printer, rdomain) -> str | None:
    """``block_step`` for a column reduction: blocks of BLOCK_ROWS points per column."""
    return block_step(printer, rdomain, BLOCK_ROWS)


def row_step(printer, rdomain) -> str | None:
    """``block_step`` for a reduction along a row: blocks of ROW_BLOCK elements."""
    return block_step(printer, rdomain, ROW_BLOCK)


def open_blocks(w, indent: str, lo: str, hi: str, step: str) -> tuple[str, str, str]:
    """Open the loop over blocks of ``step`` iterations of [lo, hi) in writer ``w``; returns the
    indent, first and end of the block's own loop (``rb_ + 1`` for blocks of one iteration,
    which ``block_loop`` recognizes)."""
    if step == "1":
        w.out(indent, f"for (int64_t rb_ = {lo}; rb_ < {hi}; ++rb_) {{")
        return indent + "  ", "rb_", "rb_ + 1"
    w.out(indent, f"for (int64_t rb_ = {lo}; rb_ < {hi}; rb_ += {step}) {{",
          f"  const int64_t re_ = std::min<int64_t>(rb_ + {step}, {hi});")
    return indent + "  ", "rb_", "re_"


def block_loop(var: str, lo: str, hi: str) -> str:
    """The head of the loop of ``var`` over [lo, hi), a block's own loop: an assignment when the
    block is one iteration (``open_blocks``). g++ 12 keeps an ``omp simd`` loop nested in a loop
    of one trip scalar (a mean over (N, H, W) of 32 x 64 x 56 x 56 activations, whose runs of 3136
    make blocks of one, ran scalar at 8.8 ms; with 28 x 28 images, blocks of two, at 1.0 ms)."""
    if hi == f"{lo} + 1":
        return f"{{ const int64_t {var} = {lo};"
    return f"for (int64_t {var} = {lo}; {var} < {hi}; ++{var}) {{"
