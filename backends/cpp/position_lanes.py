"""Reductions over short runs keep one partial per position of the run, across runs.

A reduction over (N, H, W) of NCHW activations with small images (7 x 7: runs of 49) reduces
each row as N runs of 49 contiguous elements. One ``omp simd`` reduction per run ends every run
with a horizontal sum of the vector partials and a scalar tail: 32 of them per row and pass, for
49 elements each. Here each position of the run keeps its own partial (``acc[r1]``, a few
vectors), the loop over a run is plain vector arithmetic, and the positions are combined once
per row. A C++ loop over batch-norm statistics of 32 x 512 x 7 x 7 took 0.47 ms the first way
and 0.12 ms this way (2026-12-06).
"""
from __future__ import annotations

from ...ir.index import as_var
from .accumulators import Accumulator

MAX_POSITIONS = 64  # four AVX-512 vectors of float partials per reduction
MAX_RUNS = 2048     # float partials each add at most this many elements (``blocked_sums.ROW_BLOCK``)


def positions(kernel, mine: list[Accumulator], stores: list) -> int | None:
    """The run length when this phase of ``kernel`` takes position partials: two reduced dims of
    known sizes, the inner at most ``MAX_POSITIONS`` and the outer at most ``MAX_RUNS``, only
    elementwise reductions (sums, max, min, flags) and no element stores; else None."""
    sizes = [d.as_int() for d in kernel.rdomain]
    if len(sizes) != 2 or None in sizes or stores or not mine:
        return None
    runs, n = sizes
    if not (1 < n <= MAX_POSITIONS and runs <= MAX_RUNS):
        return None
    if any(a.r.across or a.spec.joint is not None for a in mine):
        return None
    return n


def write(w, indent: str, accs: dict, mine: list[Accumulator], pre, lo: str, hi: str, n: int) -> None:
    """The phase's loop with one partial per position, combined into ``mine`` after the runs."""
    r0, r1 = (as_var(v).name for v in w.k.rvars())
    lanes = [Accumulator(a.r, f"{a.var}_at", f"[{r1}]") for a in mine]
    w.out(indent, "{")
    inner = indent + "  "
    for lane in lanes:
        w.out(inner, *lane.declare(str(n)))
    w.out(inner, f"for (int64_t {r0} = {lo}; {r0} < {hi}; ++{r0}) {{")
    w.simd_loop(inner + "  ", [f"for (int64_t {r1} = 0; {r1} < {n}; ++{r1}) {{"],
                {**accs, **{lane.r.name: lane for lane in lanes}}, lanes, [], w.flat_r(), pre, per_row=True)
    w.out(inner, "}")
    for a, lane in zip(mine, lanes):
        w.out(inner, f"for (int64_t j = 0; j < {n}; ++j) {{", *("  " + s for s in a.combine(lane, "[j]")), "}")
    w.out(indent, "}")
