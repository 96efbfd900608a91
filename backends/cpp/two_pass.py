"""Welford reductions of row kernels as two passes over a row that stays in cache.

Welford's update divides per element and carries three dependent states, so a C++ loop of it
runs on lane arrays that live in memory. When a row is small enough to stay in L2 between
passes, its mean and m2 come cheaper and at least as accurate from two plain sums: the sum of
the elements (mean = sum / n), then the sum of the squared deviations from that mean, each a
vectorized ``omp simd`` reduction in registers. Later phases shift by one; every read of the
Welford results reads the sums instead. Rows over several reduced dims (a batch norm's (N, H*W)
over NCHW, whose dims do not merge) take two passes whatever their size: there Welford has no
lane arrays and ran one scalar division per element (64 channels of 32 x 3136, 2 cores: 17.4
-> 7.2 ms).
"""
from __future__ import annotations

from dataclasses import replace

from ...ir import dtypes as dt
from ...ir.expr import AccRef, Apply, Expr, IndexValue, rewrite
from ...ir.index import product
from ...ir.nodes import KReduction, KStore
from ...ir.ops import Op, ReduceOp
from ...scheduler.kernel import Kernel

MAX_ROW_BYTES = 256 << 10  # rows up to this size are read twice from cache; longer ones keep Welford


def two_pass_welford(kernel: Kernel) -> Kernel:
    """``kernel`` with each Welford reduction over short rows as two sums (see the module
    docstring); ``kernel`` itself when it has none."""
    count = product(kernel.rdomain)
    n = count.as_int()
    welford = [r for r in kernel.reductions if r.op is ReduceOp.WELFORD and not r.across]
    if not welford or not kernel.pdomain or n is None:
        return kernel
    if len(kernel.rdomain) == 1 and n * max(r.dtype.itemsize for r in welford) > MAX_ROW_BYTES:
        return kernel  # a long one-dim row keeps Welford's lane arrays; over several dims it runs scalar
    for name in [w.name for w in welford]:
        w = next(r for r in kernel.reductions if r.name == name)  # its level moved with earlier splits
        reductions, stores, rows, cols = _split(kernel, w, count)
        kernel = replace(kernel, reductions=reductions, elem_stores=stores, row_stores=rows, col_stores=cols)
    return kernel


def _split(kernel: Kernel, w: KReduction, count) -> tuple:
    """The kernel's statements with ``w`` as a sum at its level and a sum of squared deviations
    at the next, later levels and phases shifted by one."""
    total = KReduction(f"{w.name}__sum", ReduceOp.SUM, w.body, w.dtype, w.level)
    compute = dt.compute_dtype(w.dtype)
    n = Apply(Op.CAST, (IndexValue(count, dt.int64),), compute)
    mean = Apply(Op.TRUEDIV, (AccRef(total.name, 0, compute), n), compute)
    deviation = Apply(Op.SUB, (Apply(Op.CAST, (w.body,), compute) if w.body.dtype != compute else w.body, mean), compute)
    squares = KReduction(f"{w.name}__m2", ReduceOp.SUM, Apply(Op.MUL, (deviation, deviation), compute), compute,
                         w.level + 1)
    results = {0: mean, 1: AccRef(squares.name, 0, compute)}

    def reread(e: Expr) -> Expr:
        def fn(node, _):
            if isinstance(node, AccRef) and node.name == w.name:
                value = results[node.output]
                return value if value.dtype == node.dtype else Apply(Op.CAST, (value,), node.dtype)
            return None
        return rewrite(e, fn)

    def later(level: int) -> int:
        return level + 1 if level > w.level else level

    reductions = []
    for r in kernel.reductions:
        if r is w:
            reductions += [total, squares]
        else:
            reductions.append(replace(r, body=reread(r.body), level=later(r.level)))
    stores = [KStore(s.buffer, s.index, reread(s.value), later(s.phase)) for s in kernel.elem_stores]
    rows = [replace(s, value=reread(s.value)) for s in kernel.row_stores]
    cols = [replace(s, value=reread(s.value)) for s in kernel.col_stores]
    return reductions, stores, rows, cols
