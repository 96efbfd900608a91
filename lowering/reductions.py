"""Reductions over any set of dimensions, with keepdim: sums, extremes, arg-extremes, Welford
variance, boolean any/all and the norms and log-sum-exp built from them."""
from __future__ import annotations

import math

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import ExternSrc, PlaceholderSrc, PointwiseSrc, Tensor, ViewSrc
from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index, contiguous_strides, product
from ..ir.ops import Op
from . import tensors as T
from .registry import LoweringContext, input_name, register_family, register_lowering
from .symbolic import shape_of, strides_of
from .views import norm_dim

aten = torch.ops.aten


def reduce_axes(x: Tensor, dim) -> tuple[int, ...]:
    """The axes ``dim`` names (None or [] mean all, as in ATen), sorted and normalized."""
    if x.ndim == 0:
        return ()
    if isinstance(dim, int):
        dim = [dim]
    if not dim:
        return tuple(range(x.ndim))
    return tuple(sorted({norm_dim(d, x.ndim) for d in dim}))


def _with_dtype(x: Tensor, dtype) -> Tensor:
    return x if dtype is None else T.cast(x, dt.to_dtype(dtype))


def _or_trivial(ctx: LoweringContext, x: Tensor, axes, reduced: Tensor) -> Tensor:
    """``reduced``, or ``x`` copied in the output dtype when there is no axis to reduce."""
    return reduced if axes else T.copy(T.cast(x, ctx.out_dtype()))


MIN_INNER = 64  # elements of the trailing reduced group worth a pass of its own (``_inner_first``)
# elements of the input, at least: below, the input sits in a core's cache, where far-apart
# segments cost little and a second kernel's start (~3 µs) costs more than it saves
MIN_ELEMENTS = 1 << 20


def _inner_first(ctx: LoweringContext, x: Tensor, axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The trailing group of reduced axes, where a float sum or mean over ``axes`` is better taken
    in two passes, that group first: the reduced axes are split by a kept one (``x.mean((0, 2))``
    of (64, 256, 300)), the last axes are reduced, and the input lies contiguously, read by this
    reduction alone (beside another, one pass serves both). One pass gives each output its own
    segments, a whole row of the kept axis apart; the first of two reads the input in memory
    order as a row reduction, and the second reduces a small partial result. CPU graphs only.
    None where one pass is kept."""
    if not axes or axes[-1] != x.ndim - 1 or x.dtype not in (dt.float32, dt.float64):
        return None
    start = axes[-1]
    while start - 1 in axes:
        start -= 1
    if start == axes[0]:
        return None  # one group of adjacent axes
    node = ctx.node.args[0]
    if not isinstance(node, torch.fx.Node) or len(node.users) > 1:
        return None  # other readers of the input (a variance beside the mean) share one pass with it
    source = node.meta.get("val")
    if not isinstance(source, torch.Tensor) or source.device.type != "cpu":
        return None  # on a GPU each program reads its segments coalesced; not measured there
    if not _reads_in_memory_order(ctx, x):
        return None
    sizes = [_hint(s) for s in source.shape]  # the traced sizes decide, not a guard
    if math.prod(sizes[start:]) < MIN_INNER or math.prod(sizes) < MIN_ELEMENTS:
        return None
    return tuple(range(start, x.ndim))


def _reads_in_memory_order(ctx: LoweringContext, x: Tensor) -> bool:
    """Whether every buffer that computing ``x`` reads is contiguous and indexed as ``x`` is: the
    elementwise ops above ``x`` are followed down to graph inputs and extern results. A view or a
    gather on the way (a transposed copy, a broadcast row) reads in another order: False; a
    broadcast scalar is read once."""
    inputs = {input_name(n): n.meta.get("val") for n in ctx.node.graph.nodes if n.op == "placeholder"}
    stack, seen = [x], set()
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen.add(t.id)
        if tuple(t.shape) != tuple(x.shape):
            return False
        src = t.src
        if isinstance(src, ViewSrc) and all(s.as_int() == 1 for s in src.base.shape):
            continue  # a scalar broadcast
        if isinstance(src, PointwiseSrc):
            stack.extend(a for a in src.args if isinstance(a, Tensor))
        elif isinstance(src, PlaceholderSrc):
            val = inputs.get(src.name)
            if not isinstance(val, torch.Tensor) or strides_of(val) != contiguous_strides(shape_of(val)):
                return False
        elif isinstance(src, ExternSrc):
            strides = src.call.outputs[src.output][2]
            if strides is not None and tuple(strides) != tuple(contiguous_strides(t.shape)):
                return False
        else:
            return False
    return True


def _hint(size) -> int:
    """A traced size as a number: a symbolic one's value at tracing (0 when it has none)."""
    return size if isinstance(size, int) else (size.node.hint or 0)


def _accumulate(reduce, nan_as_zero: bool = False):
    """sum, prod or nansum (``nan_as_zero``), computed in ``dtype`` when one is given."""
    def rule(ctx, x, dim=None, keepdim=False, dtype=None):
        x = _with_dtype(x, dtype)
        if nan_as_zero and x.dtype.is_float:
            x = dslf.where(dslf.apply(Op.ISNAN, x), 0.0, x)
        axes = reduce_axes(x, dim)
        inner = _inner_first(ctx, x, axes) if reduce is dslf.sum else None
        if inner is not None:
            x = dslf.sum(x, inner, True)
        return _or_trivial(ctx, x, axes, reduce(x, axes, keepdim))

    return rule


register_family({aten.sum.dim_IntList: dslf.sum, aten.sum.default: dslf.sum, aten.prod.default: dslf.prod,
                 aten.prod.dim_int: dslf.prod}, _accumulate)
register_lowering(aten.nansum.default)(_accumulate(dslf.sum, nan_as_zero=True))


@register_lowering(aten.mean.default, aten.mean.dim)
def _mean(ctx, x, dim=None, keepdim=False, dtype=None):
    x = T.cast(x, ctx.out_dtype())
    axes = reduce_axes(x, dim)
    inner = _inner_first(ctx, x, axes)
    if inner is not None:
        x = dslf.mean(x, inner, True)
    return _or_trivial(ctx, x, axes, dslf.mean(x, axes, keepdim))


def _extreme(is_max: bool):
    def rule(ctx, x, dim=None, keepdim=False):
        axes = reduce_axes(x, dim)
        if not axes:
            return T.copy(x)
        if x.dtype.is_bool:
            return (dslf.any if is_max else dslf.all)(x, axes, keepdim)
        return (dslf.max if is_max else dslf.min)(x, axes, keepdim)

    return rule


register_lowering(aten.amax.default, aten.max.default)(_extreme(True))
register_lowering(aten.amin.default, aten.min.default)(_extreme(False))


def _extreme_with_index(is_max: bool):
    def rule(ctx, x, dim, keepdim=False):
        if x.ndim == 0:
            return T.copy(x), T.full((), 0, dt.int64)
        d = norm_dim(dim, x.ndim)
        return _extreme(is_max)(ctx, x, [d], keepdim), (dslf.argmax if is_max else dslf.argmin)(x, d, keepdim)

    return rule


register_lowering(aten.max.dim)(_extreme_with_index(True))
register_lowering(aten.min.dim)(_extreme_with_index(False))


def _arg_extreme(is_max: bool):
    def rule(ctx, x, dim=None, keepdim=False):
        if x.ndim == 0:
            return T.full((), 0, dt.int64)
        y = T.cast(x, dt.int8) if x.dtype.is_bool else x
        axis = None if dim is None else norm_dim(dim, x.ndim)
        return (dslf.argmax if is_max else dslf.argmin)(y, axis, keepdim)

    return rule


register_lowering(aten.argmax.default)(_arg_extreme(True))
register_lowering(aten.argmin.default)(_arg_extreme(False))


def _bool_reduce(is_any: bool):
    def rule(ctx, x, dim=None, keepdim=False):
        axes = reduce_axes(x, dim)
        if not axes:
            return T.copy(T.cast(x, dt.bool_))
        return (dslf.any if is_any else dslf.all)(x, axes, keepdim)

    return rule


register_lowering(aten.any.default, aten.any.dim, aten.any.dims)(_bool_reduce(True))
register_lowering(aten.all.default, aten.all.dim, aten.all.dims)(_bool_reduce(False))


# -- variance -----------------------------------------------------------------------------------
def var_mean(x: Tensor, dim, correction, keepdim: bool, dtype: DType):
    """(var, mean) in one Welford pass; ``correction`` None means 1 (Bessel)."""
    x = T.cast(x, dtype)
    c = 1 if correction is None else correction
    axes = reduce_axes(x, dim)
    if not axes:
        return T.full(x.shape, 0.0 if c < 1 else math.nan, dtype), T.copy(x)
    var, mean = dslf.var_mean(x, axes, c, keepdim)
    n = product(x.shape[a] for a in axes)
    return _nan_if_empty(var, n), _nan_if_empty(mean, n)


def _nan_if_empty(t: Tensor, n: Index) -> Tensor:
    """``t``, or NaN where it reduced no element (``n == 0``): eager's 0 / 0."""
    count = n.as_int()
    if count is not None:
        return t if count > 0 else T.full(t.shape, math.nan, t.dtype)
    return dslf.where(dslf.apply(Op.GT, T.size_value(n), 0), t, math.nan)


def _variance(root: bool, with_mean: bool):
    """var (std with ``root``), alone or with the mean (``with_mean``)."""
    def rule(ctx, x, dim=None, correction=None, keepdim=False):
        var, mean = var_mean(x, dim, correction, keepdim, ctx.out_dtype(0 if with_mean else None))
        var = dslf.sqrt(var) if root else var
        return (var, mean) if with_mean else var

    return rule


register_family({aten.var.correction: (False, False), aten.var_mean.correction: (False, True),
                 aten.std.correction: (True, False), aten.std_mean.correction: (True, True)},
                lambda flags: _variance(*flags))


@register_lowering(aten.var.dim, aten.std.dim)
def _var_dim(ctx, x, dim, unbiased=True, keepdim=False):
    var = var_mean(x, dim, 1 if unbiased else 0, keepdim, ctx.out_dtype())[0]
    return dslf.sqrt(var) if ctx.node.target is aten.std.dim else var


# -- composites ------------------------------------------------------------------------------------
@register_lowering(aten.logsumexp.default)
def _logsumexp(ctx, x, dim, keepdim=False):
    x = T.cast(x, ctx.out_dtype())
    axes = reduce_axes(x, dim)
    if not axes:
        return T.copy(x)
    m = dslf.max(x, axes, keepdim=True)
    m = dslf.where(dslf.apply(Op.ISINF, m), 0.0, m)
    s = dslf.sum(dslf.exp(dslf.apply(Op.SUB, x, m)), axes, keepdim=True)
    out = dslf.apply(Op.ADD, dslf.log(s), m)
    return out if keepdim else T.squeeze(out, axes)


@register_lowering(aten.linalg_vector_norm.default)
def _vector_norm(ctx, x, ord=2, dim=None, keepdim=False, dtype=None):
    x = T.cast(x, ctx.out_dtype() if dtype is None else dt.to_dtype(dtype))
    axes = reduce_axes(x, dim)
    a = T.cast(dslf.apply(Op.NE, x, 0.0), x.dtype) if ord == 0 else dslf.abs(x)  # ord 0 counts nonzeros
    if not axes:
        return T.copy(a)
    if ord == math.inf:
        return dslf.max(a, axes, keepdim)
    if ord == -math.inf:
        return dslf.min(a, axes, keepdim)
    if ord in (0, 1):
        return dslf.sum(a, axes, keepdim)
    if ord == 2:
        return dslf.sqrt(dslf.sum(dslf.apply(Op.MUL, a, a), axes, keepdim))
    return dslf.pow(dslf.sum(dslf.pow(a, float(ord)), axes, keepdim), 1.0 / float(ord))


@register_lowering(aten.count_nonzero.default, aten.count_nonzero.dim_IntList)
def _count_nonzero(ctx, x, dim=None):
    nz = T.cast(dslf.apply(Op.NE, x, False if x.dtype.is_bool else 0), dt.int64)
    axes = reduce_axes(x, dim)
    return _or_trivial(ctx, nz, axes, dslf.sum(nz, axes, False))
