"""C++ for a pass over a one-dim row in blocks: halves converted a vector at a time, math inline.

A pass of a row kernel is one ``omp simd`` loop over the row (``KernelWriter.row_loop``). Where
it reads or writes float16, writes bfloat16 (``half_blocks.py``) or calls vector math
(``vector_blocks.py``), it runs in blocks of ``BLOCK`` elements instead: the block's halves are
converted into float arrays, its math calls computed inline on arrays of their arguments, its
lane loop does the pass's work, and its stored floats are rounded to halves after it; the
elements after the last block take the plain loop.

The last pass of rows that prefetch or stream (``streaming.py``, whose text rewrite of a plain
loop this replaces) prefetches, in each block, the same elements of the next row of every input
it reads along the row, and where the rows stream (rows of whole blocks), writes its halves as
non-temporal lines. A pass that streams float32 stores keeps the plain loop and that rewrite.

Measured on the 2-core AVX-512 Xeon (2026-12-06, 3000 x 3008, two threads, ms, eager / loopnest
before / after): float16 layernorm 1.40 / 2.87 / 0.82, float16 softmax 2.56 / 2.60 / 2.21.
"""
from __future__ import annotations

from ...ir.expr import Load, walk
from ...ir.index import as_var, stride_along
from ..names import BUFFER, mangle
from . import half_blocks, vector_blocks
from .streaming import LINE

BLOCK = half_blocks.BLOCK


def wanted(w, mine, stores, staging: half_blocks.Staging, calls: list) -> bool:
    """Whether the pass (``w``: the KernelWriter) runs in blocks: it stages halves or calls math,
    and no float32 store of it would have streamed."""
    if not (staging or calls):
        return False
    streams = not mine and w.streaming
    return not (streams and any((s.buffer, s.index) not in staging.stores for s in stores))


def write(w, indent: str, accs, mine, stores, pre, pragma: str, lo: str, hi: str,
          staging: half_blocks.Staging, calls: list) -> None:
    """The pass's loop over ``[lo, hi)`` in blocks (the arguments as ``KernelWriter.row_loop``;
    ``calls``: its ``vector_blocks.math_calls``)."""
    r0, start = as_var(w.k.rvars()[0]).name, "r0b_"
    last = not mine and (w.streaming or w.prefetching)
    whole = lo == "0" and hi.isdigit() and int(hi) % BLOCK == 0  # no element left after the blocks
    stream = last and w.streaming and whole and BLOCK * 2 == LINE and not _reads_stored(stores)
    outer, indent = indent, indent + "  "  # a scope of its own: a row may run several passes in blocks
    w.out(outer, "{")
    w.out(indent, f"int64_t {start} = {lo};", f"for (; {start} + {BLOCK} <= {hi}; {start} += {BLOCK}) {{")
    inner = indent + "  "
    if last:
        _prefetch_next_row(w, inner, w.phase_exprs(mine, stores), r0, start)
    half_blocks.convert_loads(w, inner, staging, r0, start, BLOCK)
    staged = half_blocks.staged_emitter(vector_blocks.emitter_from(w, inner, pre), staging, "j")
    step_pre = vector_blocks.write_blocks(w, inner, calls, r0, start, staged, accs, BLOCK, lane="j")
    w.simd_loop(inner, [f"for (int64_t j = 0; j < {BLOCK}; ++j) {{", f"  const int64_t {r0} = {start} + j;"],
                accs, mine, stores, w.flat_r(), step_pre, per_row=True, pragma=pragma.rstrip())
    half_blocks.convert_stores(w, inner, staging, r0, start, BLOCK, stream=stream)
    w.out(indent, "}")
    if stream and staging.stores:
        w.out(indent, "ln_stream_fence();")
    if not whole:
        w.simd_loop(indent, [f"for (int64_t {r0} = {start}; {r0} < {hi}; ++{r0}) {{"], accs, mine, stores,
                    w.flat_r(), pre, per_row=True, pragma=pragma.rstrip())
    w.out(outer, "}")


def _reads_stored(stores) -> bool:
    """Whether the pass reads a buffer it stores (softmax rescaling its exponentials in place):
    those lines are in cache, and streaming them out lost 2.3x (``streaming.py``)."""
    stored = {s.buffer for s in stores}
    return any(isinstance(n, Load) and n.buffer in stored for s in stores for n in walk(s.value))


def _prefetch_next_row(w, indent: str, exprs, var: str, start: str) -> None:
    """Prefetch the block's elements of the next row (the kernel's one row variable plus one) of
    each buffer ``exprs`` load along the row, one per cache line."""
    pv = w.k.pvars()
    if len(pv) != 1:
        return
    em, seen = w.emitter(indent + "  ", {}), set()
    lines = []
    for node in (n for root in exprs for n in walk(root)):
        if not isinstance(node, Load) or node.buffer in seen:
            continue
        buf = w.k.buffers[node.buffer]
        flat = buf.layout.flat_index(node.index)
        row = stride_along(flat, as_var(pv[0]))
        if stride_along(flat, as_var(w.k.rvars()[0])) != 1 or not isinstance(row, int) or row <= 0:
            continue
        seen.add(node.buffer)
        at = f"{mangle(BUFFER, node.buffer)}[{em.offset(node.buffer, node.index)} + {row}"
        lines += [f"__builtin_prefetch(&{at}{f' + {k}' if k else ''}]);"
                  for k in range(0, BLOCK, max(1, LINE // buf.dtype.itemsize))]
    if lines:
        w.out(indent, "{", f"  const int64_t {var} = {start};", *("  " + s for s in lines), "}")
