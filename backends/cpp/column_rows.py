"""C++ for the loop over rows of a column reduction (``x.sum(0)``), several rows per pass.

A column reduction updates the partial state of every column of its chunk once per row. Where
those states outgrow L1 beside the streaming rows (16 KB of float sums over 4096 columns), every
row reads and writes them again from L2, and those misses take the line-fill buffers the rows'
own reads need. Folding ``ROWS_PER_PASS`` rows per pass over the states, one after another in the
same column iteration, lets the compiler keep each state in a register across those rows: the
states move a quarter as often, and the rows are read as that many concurrent streams. The
additions still run row after row, so results are bit-identical to one row per pass.

Measured on 2 Zen 4 cores (2026-12-04, kernel time of x.sum(0) in float32, medians of 9
interleaved rounds, ms, one row per pass -> four): chunks of columns (8192, 4096) 6.2 -> 4.8,
(2048, 16384) 6.4 -> 4.1, (32768, 1024) 7.3 -> 5.4; rows split across threads (8192, 4096)
5.7 -> 5.1, (5003, 3001) 2.3 -> 2.0, against 4.6-5.4 and 1.8 for half a copy of the input. Rows
split whose partials take at most ``split_rows.SMALL_PARTIALS_BYTES`` stay at one row per pass:
four were 0-8% slower there (512-2048 columns), their states already being in L1.

A kernel of several passes over each outer index's slab (a softmax over dim 1: max, sum of exps,
stores) reads the slab from memory in its first pass and from L2 after; its second pass computes,
and the memory idles. Where every slab is one contiguous block that the thread's next work item
follows, the second pass prefetches into L2, beside each group of rows it reads, the same rows of
the next slab (``next_slab``).
Measured on 2 Zen 4 cores (2026-12-07, ms, medians of 11 interleaved rounds, without -> with):
softmax over dim 1 of 128 x 64 x 500 2.19 -> 1.84 and of 256 x 50 x 256 1.50 -> 1.05; a
standardization over dim 1 of 64 x 100 x 333 1.02 -> 0.75; log_softmax of 64 x 100 x 333 1.35 ->
1.16 in one run, 1.02 -> 1.00 in another. Slabs of 512 KB beside their prefetched successors
outgrow a 1 MB L2 (32 x 64 x 2000: 2.01 -> 2.26), hence ``PREFETCH_SLAB_BYTES``. Prefetching into
L1 instead gained less, and not in every run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ...ir.expr import loads
from ...ir.index import as_var, stride_along
from ..names import BUFFER, mangle
from .streaming import LINE

ROWS_PER_PASS = 4
PREFETCH_SLAB_BYTES = 256 << 10  # slabs up to this size (all inputs) prefetch the next one


@dataclass(frozen=True)
class SlabPrefetch:
    """The inputs a column kernel's second pass prefetches from the next outer index's slab:
    (buffer, a load's index into it, the slab's elements); ``outer``: that index's count."""

    loads: tuple[tuple[str, tuple, int], ...]
    outer: str


def next_slab(w, width: int) -> SlabPrefetch | None:
    """The ``SlabPrefetch`` of the column kernel ``w`` writes (chunks of ``width`` columns), or
    None where it does not apply: fewer than two passes, not exactly one outer and one column
    variable, columns in more than one chunk (the thread's next item would be the next chunk),
    an input not read as contiguous slabs of rows, or slabs above ``PREFETCH_SLAB_BYTES``."""
    k = w.k
    pv, rv = k.pvars(), k.rvars()
    if k.num_phases < 2 or len(pv) != 2 or len(rv) != 1:
        return None
    outer, columns, rows = k.pdomain[0].as_int(), k.pdomain[1].as_int(), k.rdomain[0].as_int()
    if outer is None or columns is None or rows is None or columns > width or outer < 2:
        return None
    found, total = {}, 0
    for ld in (ld for e in k.expressions() for ld in loads(e)):
        buf = k.buffers[ld.buffer]
        if ld.buffer in found or len(buf.sizes) < 2:
            continue
        flat = buf.layout.flat_index(ld.index)
        strides = [stride_along(flat, as_var(v)) for v in (pv[0], rv[0], pv[1])]
        if strides != [rows * columns, columns, 1]:
            return None
        found[ld.buffer] = (ld.buffer, ld.index, rows * columns)
        total += rows * columns * buf.dtype.itemsize
    if not found or total > PREFETCH_SLAB_BYTES:
        return None
    return SlabPrefetch(tuple(found.values()), w.c(k.pdomain[0]))


def slab_prefetch_lines(w, indent: str, slab: SlabPrefetch, row: str, count: int) -> list[str]:
    """Lines prefetching into L2 rows ``[row, row + count)`` of every ``slab`` input's next slab,
    one per cache line (the column variable bound to 0: the chunk starts the row)."""
    pv, rv = w.k.pvars(), w.k.rvars()
    first, last, r = (as_var(v).name for v in (pv[0], pv[1], rv[0]))
    em = w.emitter(indent + "    ", {})
    out = [f"if ({first} + 1 < {slab.outer}) {{", f"  const int64_t {r} = {row}, {last} = 0;"]
    for buffer, index, elements in slab.loads:
        step = max(1, LINE // w.k.buffers[buffer].dtype.itemsize)
        span = count * w.k.pdomain[1].as_int()
        at = f"{mangle(BUFFER, buffer)}[{em.offset(buffer, index)} + {elements} + q_]"
        out += [f"  for (int64_t q_ = 0; q_ < {span}; q_ += {step})", f"    __builtin_prefetch(&{at}, 0, 2);"]
    return out + ["}"]


def write_rows(w, indent: str, row: str, lo: str, hi: str, head: Sequence[str],
               body: Callable[[str], None], per_pass: int, slab: SlabPrefetch | None = None) -> None:
    """Rows ``[lo, hi)`` as ``per_pass`` per pass, then the rest one at a time. ``head`` opens the
    loop over columns (closed here); ``body(indent)`` writes one row's updates for the row index
    named ``row``, which each copy binds in a block of its own. ``slab``: prefetch the next
    slab's rows of each pass before it (``next_slab``)."""
    if per_pass > 1:
        # A block of its own: a kernel may reduce several groups of columns in one scope.
        w.out(indent, "{", f"  int64_t {row}p_ = {lo};",
              f"  for (; {row}p_ + {per_pass} <= {hi}; {row}p_ += {per_pass}) {{")
        if slab is not None:
            w.out(indent + "    ", *slab_prefetch_lines(w, indent + "    ", slab, f"{row}p_", per_pass))
        w.out(indent + "    ", *head)
        for k in range(per_pass):
            w.out(indent + "      ", f"{{ const int64_t {row} = {row}p_ + {k};")
            body(indent + "        ")
            w.out(indent + "      ", "}")
        w.out(indent + "    ", "}")
        w.out(indent + "  ", "}")
        _write_one_per_pass(w, indent + "  ", row, f"{row}p_", hi, head, body)
        w.out(indent, "}")
    else:
        _write_one_per_pass(w, indent, row, lo, hi, head, body)


def _write_one_per_pass(w, indent: str, row: str, lo: str, hi: str, head: Sequence[str],
                        body: Callable[[str], None]) -> None:
    w.out(indent, f"for (int64_t {row} = {lo}; {row} < {hi}; ++{row}) {{")
    w.out(indent + "  ", *head)
    body(indent + "    ")
    w.out(indent + "  ", "}")
    w.out(indent, "}")
