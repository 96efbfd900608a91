"""C++ for a row reduction's loop over its elements with several vectors of partial states.

``#pragma omp simd reduction(+:acc)`` over a row gives one vector of partial sums: each vector
add waits for the one before (4 cycles on AVX-512 cores), so a sum over a row in L1 or L2
reads 16 floats every 4 cycles where the core could load 32 per cycle. Here the loop runs in
steps of ``ROW_LANES`` elements over lane arrays of that many partial states, which g++ keeps in
``ROW_LANES / 16`` independent vector registers; the lanes are combined into the scalar state
after the loop, and the elements after the last full step run through the reduction's plain
``omp simd`` loop. Sums add in another order (as ``omp simd`` already allows), max, min and the
NaN flags are exact.

Measured on the 2-core AVX-512 Xeon (2026-12-04): a layernorm's kernel over 512 x 2048 float32
(rows in L1) 173 -> see bench/RESULTS.md.
"""
from __future__ import annotations

from .accumulators import Accumulator

ROW_LANES = 64  # partial states per reduction: four 16-float vectors


def lane_accumulators(own: list[Accumulator]) -> dict[str, Accumulator]:
    """A lane-array twin (``<var>_l[j]``) of each accumulator the phase declares itself."""
    return {a.r.name: Accumulator(a.r, a.var + "_l", "[j]", a.wide) for a in own}


def write_lanes(w, indent: str, accs: dict, mine: list, stores: list, pre, r0: str, lo: str, hi: str) -> str:
    """Write the loop over ``[lo, hi)`` in full steps of ``ROW_LANES`` onto ``w`` (a KernelWriter)
    and fold its lanes into the scalar states; returns where the rest of the row starts (a
    variable declared at ``indent``, in the block the caller has opened)."""
    own = w.own(mine)
    lanes = lane_accumulators(own)
    start = f"{r0}l_"
    for a in lanes.values():
        w.out(indent, *a.declare(str(ROW_LANES)))
    w.out(indent, f"int64_t {start} = {lo};", f"for (; {start} + {ROW_LANES} <= {hi}; {start} += {ROW_LANES}) {{")
    pragma_at, deferred = len(w.lines), []
    w.out(indent + "  ", "#pragma omp simd", f"for (int64_t j = 0; j < {ROW_LANES}; ++j) {{",
          f"  const int64_t {r0} = {start} + j;")
    lane_mine = [lanes.get(a.r.name, a) for a in mine]
    w.body(indent + "    ", {**accs, **lanes}, lane_mine, stores, w.flat_r(), per_row=True, pre=pre, deferred=deferred)
    w.out(indent + "  ", "}")
    w.finish_deferred(deferred, pragma_at, indent + "  ")
    w.out(indent, "}")
    for a in own:
        w.out(indent, f"#pragma omp simd {' '.join(a.simd_clauses())}",
              f"for (int64_t j = 0; j < {ROW_LANES}; ++j) {{", *("  " + s for s in a.combine(lanes[a.r.name])), "}")
    return start
