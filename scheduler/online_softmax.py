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

SOFTMAX_EXPS = (Op.EXP, Op.EXP_FTZ)  # a softmax sum's exp, before and after flush_exp_terms


def online_softmax(kernel: Kernel) -> Kernel:
    """``kernel`` with each max followed by a sum of ``exp(body - h(max))`` over the same rows
    fused into one ``EXP_SUM`` reduction; ``kernel`` itself when it has no such pair."""
    while (pair := _find_pair(kernel)) is not None:
        kernel = _fuse(kernel, *pair)
    return kernel


def _find_pair(kernel: Kernel) -> tuple[KReduction, KReduction, Expr] | None:
    """A (max, sum, h(max)) triple to fuse, or None."""
    for r in kernel.reductions:
        if (found := _max_of_sum(kernel, r)) is not None:
            return found[0], r, found[1]
    return None


def _max_of_sum(kernel: Kernel, r: KReduction) -> tuple[KReduction, Expr] | None:
    """(max, h(max)) when ``r`` sums ``exp(g - h(max))`` over the rows the max of ``g`` took,
    the level after it; else None."""
    if r.op is not ReduceOp.SUM or r.across or not isinstance(r.body, Apply) or r.body.op not in SOFTMAX_EXPS:
        return None
    diff = r.body.args[0]
    if not (isinstance(diff, Apply) and diff.op is Op.SUB):
        return None
    g, shift = diff.args
    refs = {n.name for n in walk(shift) if isinstance(n, AccRef)}
    m = next((k for k in kernel.reductions if k.name in refs), None) if len(refs) == 1 else None
    if m is None or m.op is not ReduceOp.MAX or m.across or not m.dtype.is_float or m.body is not g:
        return None
    if m.level + 1 == r.level and _only_of(shift, m.name) and r.dtype == g.dtype in (dt.float32, dt.float64):
        return m, shift
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


def flush_exp_terms(kernel: Kernel) -> Kernel:
    """``kernel`` with the exp of each softmax sum, ``sum(exp(g - m))`` after ``m = max(g)`` (or
    after logsumexp's shift, ``m`` with infinities replaced by 0), as ``Op.EXP_FTZ``.

    Where ``m`` is finite the sum holds ``exp(0) = 1``, so a term below ``2 ** -125`` moves it by
    less than ``n * 2 ** -125``: nothing in float32 or float64 for any row that fits in memory.
    Where ``m`` is infinite every term is 0, NaN or infinite, which EXP_FTZ keeps. Flushing them
    spares the CPU a microcode assist per subnormal result (``backends/cpp/vecmath.h``); a
    shift of any other form (``m + 100``, whose terms may all be subnormal) keeps its exp."""
    flushed: dict[str, Expr] = {}
    for r in kernel.reductions:
        found = _max_of_sum(kernel, r) if isinstance(r.body, Apply) and r.body.op is Op.EXP else None
        if found is not None and _is_max_shift(found[1], found[0].name):
            flushed[r.name] = Apply(Op.EXP_FTZ, r.body.args, r.body.dtype)
    if not flushed:
        return kernel
    return replace(kernel, reductions=[replace(r, body=flushed[r.name]) if r.name in flushed else r
                                       for r in kernel.reductions])


def _is_max_shift(shift: Expr, name: str) -> bool:
    """Whether ``shift`` is the max ``name`` itself or logsumexp's ``where(isinf(m), 0, m)``: the
    two whose sum holds a term of 1 where ``m`` is finite."""
    def is_max(e: Expr) -> bool:
        return isinstance(e, AccRef) and e.name == name and e.output == 0

    if is_max(shift):
        return True
    if not (isinstance(shift, Apply) and shift.op is Op.WHERE):
        return False
    cond, zero, value = shift.args
    return _is_inf_test(cond, is_max) and isinstance(zero, Const) and zero.value == 0 and is_max(value)


def _is_inf_test(cond: Expr, is_max) -> bool:
    """``isinf(m)`` or ``abs(m) == inf`` (logsumexp's decomposition)."""
    if not isinstance(cond, Apply):
        return False
    if cond.op is Op.ISINF:
        return is_max(cond.args[0])
    if cond.op is not Op.EQ:
        return False
    a, inf = cond.args
    return (isinstance(a, Apply) and a.op is Op.ABS and is_max(a.args[0]) and isinstance(inf, Const)
            and inf.value == float("inf"))
