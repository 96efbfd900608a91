"""Generators, piecewise and remapped indexing, and indirect loads.

Piecewise ops (cat, constant_pad_nd, *_scatter) select between pieces with ``where`` on the
position along a dimension; each piece is read at a position clamped into its bounds, so a load
under a false mask is still in bounds. Gather-like ops (gather, index, index_select, embedding)
become indirect loads (``GatherSrc``) whose positions are checked as eager checks them.
"""
from __future__ import annotations

import itertools

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import Tensor
from ..ir import dtypes as dt
from ..ir.index import Index, mod, product
from ..ir.ops import Op
from . import tensors as T
from .registry import Unsupported, register_family, register_lowering
from .views import norm_dim, position, slice_start

aten = torch.ops.aten
prims = torch.ops.prims


# -- generators -----------------------------------------------------------------------------------
def _filled_with_arg(k: int):
    """The traced output filled with positional argument ``k``."""
    def rule(ctx, *args, **kwargs):
        return T.full(ctx.out_shape(), args[k], ctx.out_dtype())

    return rule


def _filled_with(value):
    """The traced output filled with ``value``."""
    def rule(ctx, *args, **kwargs):
        return T.full(ctx.out_shape(), value, ctx.out_dtype())

    return rule


register_family({aten.full.default: 1, aten.full_like.default: 1, aten.new_full.default: 2,
                 aten.scalar_tensor.default: 0}, _filled_with_arg)
register_family(dict.fromkeys((aten.ones.default, aten.ones_like.default, aten.new_ones.default), 1), _filled_with)
# Uninitialized tensors are zero-filled: deterministic at the cost of one store.
register_family(dict.fromkeys((aten.zeros.default, aten.empty.memory_format, aten.empty_strided.default,
                               aten.zeros_like.default, aten.empty_like.default, aten.new_zeros.default,
                               aten.new_empty.default, aten.new_empty_strided.default), 0), _filled_with)


def _arange(ctx, start, step):
    out = ctx.out_dtype()
    shape = ctx.out_shape()
    if out.is_float:
        pos = T.cast(T.iota(shape, 0), dt.float64)
        return T.cast(dslf.apply(Op.ADD, dslf.apply(Op.MUL, pos, float(step)), float(start)), out)
    pos = T.iota(shape, 0)
    if step != 1:
        pos = dslf.apply(Op.MUL, pos, _int(step))
    if not (isinstance(start, int) and start == 0):
        pos = dslf.apply(Op.ADD, pos, _int(start))
    return T.copy(T.cast(pos, out))


def _int(v):
    if isinstance(v, Index):
        return T.size_value(v)
    return int(v)


@register_lowering(aten.arange.default)
def _arange_end(ctx, end, **kwargs):
    return _arange(ctx, 0, 1)


@register_lowering(aten.arange.start, aten.arange.start_step)
def _arange_start(ctx, start, end, step=1, **kwargs):
    return _arange(ctx, start, step)


@register_lowering(prims.iota.default)
def _iota(ctx, length, *, start, step, dtype, device, requires_grad):
    return _arange(ctx, start, step)


# -- piecewise --------------------------------------------------------------------------------------
@register_lowering(aten.cat.default)
def _cat(ctx, tensors, dim=0):
    out_dtype, out_shape = ctx.out_dtype(), ctx.out_shape()
    pieces = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and len(out_shape) != 1)]
    dim = norm_dim(dim, len(out_shape))
    pieces = [T.cast(p, out_dtype) for p in pieces if p.shape[dim] != 0] or [T.cast(pieces[0], out_dtype)]
    if len(pieces) == 1:
        return T.copy(pieces[0])
    ends = list(itertools.accumulate(p.shape[dim] for p in pieces))
    size = out_shape[dim]
    pos = T.iota(out_shape, dim)
    result = T.shift_along(pieces[-1], dim, size, ends[-2])
    for k in range(len(pieces) - 2, -1, -1):
        start = ends[k - 1] if k else Index.of(0)
        piece = T.shift_along(pieces[k], dim, size, start)
        result = dslf.where(dslf.apply(Op.LT, pos, T.int_operand(ends[k])), piece, result)
    return result


@register_lowering(aten.constant_pad_nd.default)
def _pad(ctx, x, pad, value=0):
    out_shape = ctx.out_shape()
    fill = T.full((), value, x.dtype)
    y = x
    for k in range(len(pad) // 2):
        d = x.ndim - 1 - k
        lo, hi = pad[2 * k], pad[2 * k + 1]
        if lo == 0 and hi == 0:
            continue
        y = T.shift_along(y, d, out_shape[d], Index.of(lo))
        if _positive(lo) or _positive(hi):
            y = dslf.where(T.in_range(y.shape, d, Index.of(lo), Index.of(lo) + x.shape[d]), y, fill)
    return y if y is not x else T.copy(x)


def _positive(v) -> bool:
    return isinstance(v, Index) or v > 0


@register_lowering(aten.flip.default)
def _flip(ctx, x, dims):
    y = x
    for d in {norm_dim(d, x.ndim) for d in dims} if x.ndim else ():
        n = x.shape[d]
        y = T.remap_dim(y, d, lambda i, n=n: n - 1 - i, "flip")
    return T.copy(y)


@register_lowering(aten.repeat.default)
def _repeat(ctx, x, repeats):
    out_shape = ctx.out_shape()
    lead = len(out_shape) - x.ndim
    src = x.shape

    def remap(idx):
        return tuple(mod(idx[lead + k], n) if n != 1 else Index.of(0) for k, n in enumerate(src))

    return T.copy(T.view(x, out_shape, remap, "repeat"))


@register_lowering(aten.roll.default)
def _roll(ctx, x, shifts, dims=()):
    if not dims:
        flat = dslf.reshape(x, (product(x.shape),))
        return dslf.reshape(_roll_dim(flat, 0, shifts[0]), x.shape)
    y = x
    for s, d in zip(shifts, dims):
        y = _roll_dim(y, norm_dim(d, x.ndim), s)
    return T.copy(y)


def _roll_dim(x: Tensor, d: int, shift: int) -> Tensor:
    n = x.shape[d]
    c = n.as_int()
    if c is None or isinstance(shift, Index):
        raise Unsupported("roll along a symbolic dimension")
    if c == 0:
        return x
    back = (-shift) % c  # out[i] = x[(i - shift) mod n] with a non-negative numerator
    return T.remap_dim(x, d, lambda i: mod(i + back, n), "roll")


@register_lowering(aten.slice_scatter.default)
def _slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, x.ndim)
    n = x.shape[dim]
    length = src.shape[dim]
    begin = slice_start(start, n, step)
    pos = T.iota(x.shape, dim)
    rel = dslf.apply(Op.SUB, pos, T.int_operand(begin))
    inside = dslf.apply(Op.AND, dslf.apply(Op.GE, rel, 0), dslf.apply(Op.LT, rel, T.int_operand(length * step)))
    if step != 1:
        inside = dslf.apply(Op.AND, inside, dslf.apply(Op.EQ, dslf.apply(Op.MOD, rel, step), 0))
        rel = dslf.apply(Op.FLOORDIV, rel, step)
    piece = T.take(T.cast(src, x.dtype), dim, T.clamp_index(rel, length))
    return dslf.where(inside, piece, x)


@register_lowering(aten.select_scatter.default)
def _select_scatter(ctx, x, src, dim, index):
    dim = norm_dim(dim, x.ndim)
    mask = dslf.apply(Op.EQ, T.iota(x.shape, dim), T.int_operand(position(index, x.shape[dim])))
    piece = T.expand(T.unsqueeze(T.cast(src, x.dtype), dim), x.shape)
    return dslf.where(mask, piece, x)
