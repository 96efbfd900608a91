"""Sums of a one-hot row, folded into a row value: no pass over the row for them.

The backward of ``nll_loss`` (cross-entropy's, after log_softmax's) scatters each row's gradient
into a one-hot row, and log_softmax's backward sums that row. Lowered, the sum's body is
``f(where(r == t, a, b))`` with ``t``, ``a``, ``b`` and ``f`` the same along the row: a loop of
pure arithmetic over every column (128256 of them for the Llama-3 vocabulary) before the pass
that reads the logits. The sum over ``n`` columns is known without it:

    hit + (n - 1) * miss    where 0 <= t < n,   else   n * miss

with ``hit = f(a)`` and ``miss = f(b)``: exact, NaN and inf included (``miss`` is a constant of
the row, and adding it ``n - 1`` times is one multiply). A kernel left without reductions and row
results becomes a pointwise kernel over its rows and columns.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import dtypes as dt
from ..ir.expr import AccRef, Apply, Const, Expr, IndexValue, Load, rewrite, substitute_vars, walk
from ..ir.index import Index, as_var
from ..ir.nodes import KReduction, domain_vars
from ..ir.ops import Op, ReduceOp
from .kernel import Kernel, relevel, rewrite_kernel


def fold_one_hot_sums(kernel: Kernel) -> Kernel:
    """``kernel`` with each sum of a one-hot row replaced by its row value; ``kernel`` itself
    when it has none."""
    if len(kernel.rdomain) != 1:
        return kernel
    (rvar,) = kernel.rvars()
    values = {}
    for r in kernel.reductions:
        value = _row_value(r, rvar, kernel.rdomain[0])
        if value is not None:
            values[r.name] = value
    if not values:
        return kernel

    def reread(node: Expr, _) -> Expr | None:
        if isinstance(node, AccRef) and node.name in values:
            value = values[node.name]
            return value if value.dtype == node.dtype else Apply(Op.CAST, (value,), node.dtype)
        return None

    folded = rewrite_kernel(kernel, reread, keep=lambda r: r.name not in values)
    if not folded.reductions:
        return _pointwise(folded) if not (folded.row_stores or folded.col_stores) else kernel
    return relevel(folded)


def _row_value(r: KReduction, rvar: Index, n: Index) -> Expr | None:
    """The value of ``r`` for a row when it sums a one-hot row, else None."""
    if r.op is not ReduceOp.SUM or r.across or r.dtype not in (dt.float32, dt.float64):
        return None  # a 16-bit (n - 1) * miss would round n, or overflow past 65504
    var = as_var(rvar)
    position = IndexValue(rvar, dt.int64)
    hits = {node for node in walk(r.body) if isinstance(node, Apply) and node.op is Op.EQ and position in node.args}
    if len(hits) != 1:
        return None
    (eq,) = hits
    target = eq.args[1] if eq.args[0] is position else eq.args[0]
    hit, miss = (rewrite(r.body, lambda node, _, v=v: Const(v, dt.bool_) if node is eq else None) for v in (True, False))
    if any(_along(e, var) for e in (target, hit, miss)):
        return None
    count = IndexValue(n, dt.int64)
    inside = Apply(Op.AND, (Apply(Op.GE, (target, Const(0, target.dtype)), dt.bool_),
                            Apply(Op.LT, (target, count), dt.bool_)), dt.bool_)

    def times(k: Index) -> Expr:
        return Apply(Op.MUL, (Apply(Op.CAST, (IndexValue(k, dt.int64),), r.dtype), miss), r.dtype)

    return Apply(Op.WHERE, (inside, Apply(Op.ADD, (hit, times(n - 1)), r.dtype), times(n)), r.dtype)


def _along(e: Expr, var) -> bool:
    """Whether ``e`` varies along the reduced loop variable ``var``."""
    return any(isinstance(node, (Load, IndexValue)) and any(var in i.free_vars() for i in _indices(node))
               for node in walk(e))


def _indices(node: Load | IndexValue) -> tuple[Index, ...]:
    return node.index if isinstance(node, Load) else (node.index,)


def _pointwise(kernel: Kernel) -> Kernel:
    """A kernel without reductions over rows x columns as a pointwise kernel over both."""
    pvars = domain_vars(kernel.pdomain + kernel.rdomain, "p")
    mapping = {as_var(r): pvars[len(kernel.pdomain) + k] for k, r in enumerate(kernel.rvars())}
    memo: dict = {}
    stores = [replace(s, index=tuple(i.subs(mapping) for i in s.index),
                      value=substitute_vars(s.value, mapping, memo), phase=0) for s in kernel.elem_stores]
    return replace(kernel, pdomain=kernel.pdomain + kernel.rdomain, rdomain=(), elem_stores=stores)
