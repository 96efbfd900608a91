"""Softmax statistics in one pass: a row's max and a later sum of ``exp(x - max)`` as one reduction.

Softmax, log_softmax, logsumexp and cross-entropy reduce each row twice: ``m = max(g)``, then
``sum(exp(g - h(m)))`` (``h(m)`` is ``m``, or ``m`` with infinities replaced by 0, as in
logsumexp), a pass that must wait for the first. A kernel that cannot keep its row on chip reads
it once per pass. ``EXP_SUM`` (``ir/reductions.py``) carries ``(M, S)``, ``S = sum(exp(g - M*))``
with ``M* = M`` where finite and 0 otherwise, rescaling ``S`` whenever the max grows, so both
come from one pass (Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018).
The sum the kernel read is then

    S * exp(M* - h(M))

exactly where ``M`` is finite, and eager's value at the edges: NaN for a row whose max is
infinite when ``h(M) = M`` (eager computes ``exp(inf - inf)``), and logsumexp's ``S`` itself
when ``h`` is the same shift. Later levels and phases move down when all they waited for is
ready a pass earlier.

Backends apply it where the row is read from memory once per pass (looped and split strategies),
not where it sits in registers: there the second pass is free, and the rescaling is not.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import dtypes as dt
from ..ir.expr import AccRef, Apply, Const, Expr, rewrite, walk
from ..ir.nodes import KReduction
from ..ir.ops import Op, ReduceOp
from .kernel import Kernel, relevel, rewrite_kernel


def online_softmax(kernel: Kernel) -> Kernel:
    """``kernel`` with each max followed by a sum of ``exp(body - h(max))`` over the same rows
    fused into one ``EXP_SUM`` reduction; ``kernel`` itself when it has no such pair."""
    while (pair := _find_pair(kernel)) is not None:
        kernel = _fuse(kernel, *pair)
    return kernel


def _find_pair(kernel: Kernel) -> tuple[KReduction, KReduction, Expr] | None:
    """A (max, sum, h(max)) triple to fuse, or None."""
    maxes = {r.name: r for r in kernel.reductions
             if r.op is ReduceOp.MAX and not r.across and r.dtype.is_float}
    for r in kernel.reductions:
        if r.op is not ReduceOp.SUM or r.across or not isinstance(r.body, Apply) or r.body.op is not Op.EXP:
            continue
        diff = r.body.args[0]
        if not (isinstance(diff, Apply) and diff.op is Op.SUB):
            continue
        g, shift = diff.args
        refs = {n.name for n in walk(shift) if isinstance(n, AccRef)}
        if len(refs) != 1 or (m := maxes.get(next(iter(refs)))) is None or m.body is not g:
            continue
        if m.level + 1 == r.level and _only_of(shift, m.name) and r.dtype == g.dtype in (dt.float32, dt.float64):
            return m, r, shift
    return None


def _only_of(e: Expr, name: str) -> bool:
    """Whether ``e`` is a function of the row's accumulator ``name`` alone (no loads or indices)."""
    return all(isinstance(n, (Apply, Const)) or (isinstance(n, AccRef) and n.name == name and n.output == 0)
               for n in walk(e))


def _fuse(kernel: Kernel, m: KReduction, s: KReduction, shift: Expr) -> Kernel:
    fused = KReduction(f"{m.name}__online", ReduceOp.EXP_SUM, m.body, m.dtype, m.level)
    top = AccRef(fused.name, 0, m.body.dtype)
    total = AccRef(fused.name, 1, s.dtype)

    def cast_to(value: Expr, dtype) -> Expr:
        return value if value.dtype == dtype else Apply(Op.CAST, (value,), dtype)

    def at_top(node: Expr, _) -> Expr | None:
        return cast_to(top, node.dtype) if isinstance(node, AccRef) and node.name == m.name else None

    finite = Apply(Op.WHERE, (Apply(Op.ISINF, (top,), dt.bool_), Const(0.0, top.dtype), top), top.dtype)
    scale = Apply(Op.EXP, (Apply(Op.SUB, (finite, rewrite(shift, at_top)), top.dtype),), top.dtype)
    sum_value = Apply(Op.MUL, (total, scale), s.dtype)

    def reread(node: Expr, visit) -> Expr | None:
        if isinstance(node, AccRef) and node.name == s.name:
            return cast_to(sum_value, node.dtype)
        return at_top(node, visit)

    kernel = rewrite_kernel(kernel, reread, keep=lambda r: r is not s)
    return relevel(replace(kernel, reductions=[fused if r.name == m.name else r for r in kernel.reductions]))
