"""C++ for a row reduction's loop over its elements with several vectors of partial states.

``#pragma omp simd reduction(+:acc)`` over a row gives one vector of partial sums: each vector
add waits for the one before (4 cycles on AVX-512 cores), so a sum over a row in L1 or L2
reads 16 floats every 4 cycles where the core could load 32 per cycle. Here the loop runs in
steps of several vectors over lane arrays of that many partial states, as many independent
chains of vector adds; the lanes are combined into the scalar state after the loop,
and the elements after the last full step run through the reduction's plain ``omp simd`` loop.
Sums add in another order (as ``omp simd`` already allows); max, min and NaN flags are exact.

Measured on the 2-core AVX-512 Xeon (2026-12-04, kernel time, four vectors against one): at
cache sizes layernorm 1.05x, rmsnorm_bf16 1.14x, var_mean 1.18x, full_absmax 1.19x, softmax
0.99x; layernorm over 256-4096 rows of 2048 (4-67 MB) 1.13x-1.01x, but over 8192 rows (134 MB,
from memory) 0.73x, where one vector runs at the copy bandwidth. So by default (``vectors``)
a kernel keeps four vectors where what it moves fits in a quarter of the last-level cache, one
otherwise; ``CppConfig.row_vectors`` is a tuner knob.

Where the row's length is a constant, g++ keeps the lane arrays on the stack, not in registers:
each step loads, adds and stores them, so a lane's chain waits on store-to-load forwarding as
well as the add (seen in the assembly of layernorm's kernel, 512- and 256-bit alike). Eight
vectors hide more of it: at cache sizes (12-04, same host) layernorm 187 -> 181 µs, softmax 231
-> 217, full_absmax 49.8 -> 45.0, logsumexp_ce 214 -> 201, add_layernorm 138 -> 142; at CPU
sizes, from memory, -6% to +6% across rows. So eight is a tuner choice, not the default. Lanes
kept in registers (the loop bound hidden from g++) gained on some rows and lost on others (-6%
to +7%), so they stay arrays.

A phase whose elements call vecmath.h (softmax's sum of exps, cross-entropy's logsumexp) takes
the lane arrays even at one vector: each step computes its math inline on an array of the step's
arguments (``vector_blocks.py``) instead of calling the vector variant out of line. Measured on
the 2-core AVX-512 Xeon (2026-12-05, one thread, time after / before): logsumexp_ce 0.86,
ce_vocab_bf16 0.84, wide_softmax 0.88 at CPU sizes; 0.93, 0.88, 0.86 at cache sizes; softmax
1.00 and 0.97-1.01; few_rows_logsoftmax 1.04-1.06 (its sum keeps four vectors and stores nothing).
"""
from __future__ import annotations

from ...scheduler.kernel import Kernel
from . import vector_blocks
from .accumulators import Accumulator
from .params import CppConfig
from .streaming import last_level_cache_bytes

CACHED_VECTORS = 4  # vectors of partial states where the kernel's data stays in cache


def vectors(kernel: Kernel, config: CppConfig) -> int:
    """Vectors of partial states each row reduction of ``kernel`` keeps under ``config``."""
    if config.row_vectors:
        return config.row_vectors
    moved = kernel.bytes_moved().as_int()
    return CACHED_VECTORS if moved is not None and moved <= last_level_cache_bytes() // 4 else 1


def lane_count(kernel: Kernel, config: CppConfig) -> int:
    """Partial states per reduction: ``vectors`` of floats as wide as ``config.vector_width``."""
    return vectors(kernel, config) * config.vector_width // 32


def lane_accumulators(own: list[Accumulator]) -> dict[str, Accumulator]:
    """A lane-array twin (``<var>_l[j]``) of each accumulator the phase declares itself."""
    return {a.r.name: Accumulator(a.r, a.var + "_l", "[j]", a.wide) for a in own}


def write_lanes(w, indent: str, accs: dict, mine: list, stores: list, pre, r0: str, lo: str, hi: str,
                count: int, calls: list) -> str:
    """Write the loop over ``[lo, hi)`` in full steps of ``count`` elements, each reduction in
    ``count`` partial states, onto ``w`` (a KernelWriter), and fold those into the scalar states;
    returns where the rest of the row starts (a variable declared at ``indent``, in the block the
    caller has opened). The math ``calls`` (``vector_blocks.math_calls``) of each step run
    inline on arrays of ``count`` arguments."""
    own = w.own(mine)
    states = lane_accumulators(own)
    start = f"{r0}l_"
    for a in states.values():
        w.out(indent, *a.declare(str(count)))
    w.out(indent, f"int64_t {start} = {lo};", f"for (; {start} + {count} <= {hi}; {start} += {count}) {{")
    if calls:
        pre = vector_blocks.write_blocks(w, indent + "  ", calls, r0, start, pre, accs, count, lane="j")
    pragma_at, deferred = len(w.lines), []
    w.out(indent + "  ", "#pragma omp simd", f"for (int64_t j = 0; j < {count}; ++j) {{",
          f"  const int64_t {r0} = {start} + j;")
    lane_mine = [states.get(a.r.name, a) for a in mine]
    w.body(indent + "    ", {**accs, **states}, lane_mine, stores, w.flat_r(), per_row=True, pre=pre,
           deferred=deferred)
    w.out(indent + "  ", "}")
    w.finish_deferred(deferred, pragma_at, indent + "  ")
    w.out(indent, "}")
    for a in own:
        w.out(indent, f"#pragma omp simd {' '.join(a.simd_clauses())}",
              f"for (int64_t j = 0; j < {count}; ++j) {{", *("  " + s for s in a.combine(states[a.r.name])), "}")
    return start
