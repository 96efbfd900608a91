"""C++ for a row reduction's loop over its elements with several vectors of partial states.

``#pragma omp simd reduction(+:acc)`` over a row gives one vector of partial sums: each vector
add waits for the one before (4 cycles on AVX-512 cores), so a sum over a row in L1 or L2
reads 16 floats every 4 cycles where the core could load 32 per cycle. Here the loop runs in
steps of several vectors over lane arrays of that many partial states, as many independent
chains of vector adds; the elements after the last full step update one lane each, and the
lanes fold into the scalar state in halving steps (lane j takes lane j + half: log2 of the lane
count dependent operations, where ``omp simd reduction`` merges its 16 per-lane copies one after
another, 16 dependent adds per row). Sums add in another order (as ``omp simd`` already
allows); max, min and NaN flags are exact.

Measured on the 2-core AVX-512 Xeon (2026-12-04, kernel time, four vectors against one): at
cache sizes layernorm 1.05x, rmsnorm_bf16 1.14x, var_mean 1.18x, full_absmax 1.19x, softmax
0.99x; layernorm over 256-4096 rows of 2048 (4-67 MB) 1.13x-1.01x, but over 8192 rows (134 MB,
from memory) 0.73x, where one vector runs at the copy bandwidth. On a 2-core AMD EPYC (Zen 4, AVX-512,
32 MB L3; 2026-12-06, kernel time, four vectors against one) layernorm over 128-1024 rows of
2048 (2-17 MB moved) gained 1.12-1.15x, var_mean over 2000 x 1500 (12 MB) 1.43x, a row sum over
3000 x 1111 1.08x, logsumexp over 1800 x 1800 1.07x; over 2048-8192 rows of 2048 (34-134 MB
moved) layernorm lost, 0.80-0.93x. So by default (``vectors``) a kernel keeps four vectors where
what it moves fits in half the last-level cache, one otherwise (a quarter, before, left the
cache-size suite rows of 8.4 MB at one vector on a 32 MB L3); ``CppConfig.row_vectors`` is a
tuner knob.

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

Short rows (``SHORT_ROW``) take the lane arrays at one vector too: there the serial merge of
``omp simd reduction`` costs more than the row's loads. Eager / loopnest on the same host (one
thread, ``compile_fx``, two runs; before the halving fold and short rows -> after): sum over
65536 x 32 1.00 -> 1.42, over 2M x 32 (256 MB) 1.06-1.09 -> 1.54-1.60, layernorm over 16384 x 64
1.67-1.70 -> 2.32-2.34, softmax over 16384 x 64 1.04-1.09 -> 1.45-1.49; rows of 256-2048 within
the noise.

A row of known length updates the lanes with the whole vectors of its rest after the last full
step, and folds what is left, less than a vector, into the scalar states (``_scalar_tail``):
updating the first lanes with it, g++ wrote them with narrower stores (4 floats, then 1), and
the fold's first vector load of the array waited for them (a failed store-to-load forward, 41%
of a row sum's samples at 200000 x 37). Same host (2026-12-06, two threads, 7.4M floats, ms
before -> after): sum over rows of 37 1.65 -> 0.63, of 77 0.90 -> 0.61, of 100 0.72 -> 0.57;
amax of 37 2.20 -> 0.86, of 100 1.05 -> 0.68; layernorm of 37 5.8 -> 1.6, of 77 3.1 -> 1.3, of
100 2.5 -> 1.15; softmax of 37 6.9 -> 3.4, of 100 3.7 -> 2.0; logsumexp of 37 9.1 -> 6.4, of
100 4.7 -> 2.8; rows of 300 and 1000, from memory, unchanged. Rows of a whole number of steps
keep their (empty) rest loop: removing it measured 4% slower on the suite's softmax.
"""
from __future__ import annotations

from ...scheduler.kernel import Kernel
from . import half_blocks, vector_blocks
from .accumulators import Accumulator
from .params import CppConfig
from .streaming import last_level_cache_bytes

CACHED_VECTORS = 4  # vectors of partial states where the kernel's data stays in cache
SHORT_ROW = 1024  # elements: up to this, a row's reductions take lane arrays whatever the vectors


def vectors(kernel: Kernel, config: CppConfig) -> int:
    """Vectors of partial states each row reduction of ``kernel`` keeps under ``config``."""
    if config.row_vectors:
        return config.row_vectors
    moved = kernel.bytes_moved().as_int()
    return CACHED_VECTORS if moved is not None and moved <= last_level_cache_bytes() // 2 else 1


def inner_extent(kernel: Kernel) -> int | None:
    """Elements of the innermost reduced dim (the row a lane loop runs over), if known."""
    return kernel.rdomain[-1].as_int()


def takes_lanes(kernel: Kernel, config: CppConfig, calls: list, staged: bool = False) -> bool:
    """Whether a 1-D row phase with reductions of its own runs in lane arrays: where it keeps
    several vectors, where it calls vector math (``vector_blocks``), where it converts halves
    (``staged``: the pass would run in blocks, ``row_blocks.py``, with one ``omp simd reduction``
    per block of 32), and where its rows are short: ``omp simd reduction`` merges its per-lane
    copies one after another (16 dependent adds on AVX-512), which costs more than reading a
    short row or a block."""
    rnumel = inner_extent(kernel)
    return (vectors(kernel, config) > 1 or bool(calls) or staged
            or (rnumel is not None and rnumel <= SHORT_ROW))


def inner_lanes(kernel: Kernel, config: CppConfig, calls: list) -> bool:
    """Whether a phase reducing several dims runs its innermost in lane arrays, inside loops over
    the others: where it calls vector math at least a vector's worth of elements per row. In
    one ``omp simd`` loop, g++ moved a call under ``where(p == 0, 0, p * log(p))`` into a branch
    and left the loop scalar (a KL divergence over 64 x 1000 ran at 10 ns per element)."""
    rnumel = inner_extent(kernel)
    return bool(calls) and (rnumel is None or rnumel >= config.vector_width // 32)


def lane_count(kernel: Kernel, config: CppConfig) -> int:
    """Partial states per reduction: ``vectors`` of floats as wide as ``config.vector_width``, but
    no more vectors than a row of known length fills, and at least a vector of the kernel's
    narrowest elements (``vector_blocks.block_size``): a row of 37 floats in 64 lanes spent more
    on setting up and folding the lanes than on its loads."""
    floats = config.vector_width // 32
    count = vectors(kernel, config) * floats
    rnumel = inner_extent(kernel)
    if rnumel is not None:
        count = min(count, max(floats, 1 << (max(rnumel, 1).bit_length() - 1)))  # a power of two <= rnumel
    return max(count, vector_blocks.block_size(kernel) * floats // vector_blocks.BLOCK)


def lane_accumulators(own: list[Accumulator]) -> dict[str, Accumulator]:
    """A lane-array twin (``<var>_l[j]``) of each accumulator the phase declares itself."""
    return {a.r.name: Accumulator(a.r, a.var + "_l", "[j]", a.wide) for a in own}


def write_lanes(w, indent: str, accs: dict, mine: list, stores: list, pre, r0: str, lo: str, hi: str,
                count: int, calls: list, staging: half_blocks.Staging) -> None:
    """Write the loop over ``[lo, hi)`` onto ``w`` (a KernelWriter), each reduction in ``count``
    partial states: full steps of ``count`` elements, then the rest of the row (element j in
    lane j; in a row of known length, only its whole vectors, the last few elements going into
    the scalar states), then the lanes folded into the scalar states. The math ``calls``
    (``vector_blocks.math_calls``) of each full step run inline on arrays of ``count``
    arguments; the halves of ``staging`` (``half_blocks.plan`` along the innermost reduced dim)
    convert a step at a time."""
    own = w.own(mine)
    states = lane_accumulators(own)
    start = f"{r0}l_"
    for a in states.values():
        w.out(indent, *a.declare(str(count)))
    w.out(indent, f"int64_t {start} = {lo};", f"for (; {start} + {count} <= {hi}; {start} += {count}) {{")
    half_blocks.convert_loads(w, indent + "  ", staging, r0, start, count)
    staged = half_blocks.staged_emitter(vector_blocks.emitter_from(w, indent + "  ", pre), staging, "j")
    step_pre = vector_blocks.write_blocks(w, indent + "  ", calls, r0, start, staged, accs, count, lane="j")
    lane_accs, lane_mine = {**accs, **states}, [states.get(a.r.name, a) for a in mine]
    _lane_loop(w, indent + "  ", str(count), start, r0, lane_accs, lane_mine, stores, step_pre)
    half_blocks.convert_stores(w, indent + "  ", staging, r0, start, count)
    w.out(indent, "}")
    rest = int(hi) % count if lo == "0" and hi.isdigit() else None
    if calls and rest != 0:
        _rest_in_blocks(w, indent, calls, r0, start, hi, count, rest, (accs, mine), (lane_accs, lane_mine), stores, pre)
    elif not rest:
        _lane_loop(w, indent, f"({hi}) - {start}", start, r0, lane_accs, lane_mine, stores, pre)
    else:  # a row of known length: whole vectors of its rest into lanes, the rest of those into the states
        tail = rest % (w.cfg.vector_width // 32)
        if rest > tail:
            _lane_loop(w, indent, str(rest - tail), str(int(hi) - rest), r0, lane_accs, lane_mine, stores, pre)
        if tail:
            _scalar_tail(w, indent, accs, mine, stores, pre, r0, int(hi) - tail, int(hi))
    for a in own:
        fold_lanes(w, indent, a, states[a.r.name], count)


def _rest_in_blocks(w, indent: str, calls, r0: str, start: str, hi: str, count: int, rest: int | None,
                    scalar: tuple, lanes: tuple, stores, pre) -> None:
    """The elements of a row after its last full step, where the phase calls math: the math of
    all of them in one block round (``vector_blocks.write_blocks``, arrays rounded up to whole
    vectors) instead of out of line or per element (rows of 100 spent 25% of a masked softmax's
    samples in the calls of their last 36 elements). Whole vectors go into the lanes; in a row of
    known length, the last partial vector goes into the scalar states (``_scalar_tail``)."""
    width = w.cfg.vector_width // 32
    if rest is None:
        base, size, n, tail = start, count, f"({hi}) - {start}", 0
    else:
        base, size, n, tail = str(int(hi) - rest), -(-rest // width) * width, str(rest), rest % width
    w.out(indent, "{")
    inner = indent + "  "
    results = vector_blocks.write_blocks(w, inner, calls, r0, base, pre, scalar[0], size, lane="j", used=n)
    whole = n if rest is None else str(rest - tail)
    if whole != "0":
        _lane_loop(w, inner, whole, base, r0, *lanes, stores, results)
    if tail:
        w.out(inner, f"for (int64_t j = {rest - tail}; j < {rest}; ++j) {{", f"  const int64_t {r0} = {base} + j;")
        w.body(inner + "  ", scalar[0], scalar[1], stores, w.flat_r(), per_row=True, pre=results)
        w.out(inner, "}")
    w.out(indent, "}")


def _scalar_tail(w, indent: str, accs, mine, stores, pre, r0: str, lo: int, hi: int) -> None:
    """The elements ``[lo, hi)`` of a row, fewer than a vector, into the scalar states: a plain
    loop (g++ unrolls it)."""
    w.out(indent, f"for (int64_t {r0} = {lo}; {r0} < {hi}; ++{r0}) {{")
    w.body(indent + "  ", accs, mine, stores, w.flat_r(), per_row=True, pre=pre)
    w.out(indent, "}")


def _lane_loop(w, indent: str, n: str, start: str, r0: str, accs: dict, mine: list, stores: list, pre) -> None:
    """A vectorized loop over the ``n`` elements from ``start``, element j updating lane j."""
    w.simd_loop(indent, [f"for (int64_t j = 0; j < {n}; ++j) {{", f"  const int64_t {r0} = {start} + j;"],
                accs, mine, stores, w.flat_r(), pre, per_row=True)


def fold_lanes(w, indent: str, a: Accumulator, lanes: Accumulator, count: int) -> None:
    """Fold the ``count`` lane states ``lanes`` into ``a`` in halving steps: lane j takes lane
    j + half, a vector operation per step, so the fold waits on log2(count) operations where
    ``omp simd reduction`` merges its per-lane copies one after another."""
    half = count // 2
    while half:
        w.out(indent, *(["#pragma omp simd"] if half >= 4 else []), f"for (int64_t j = 0; j < {half}; ++j) {{",
              *("  " + s for s in lanes.combine(lanes, f"[j + {half}]")), "}")
        half //= 2
    w.out(indent, *a.combine(lanes, "[0]"))
