"""View ops as index remaps: no data moves until a consumer loads through the remap."""
from __future__ import annotations

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import PlaceholderSrc, PointwiseSrc, ReductionSrc
from ..ir.index import Index, floordiv, mod, product
from . import tensors as T
from .registry import LoweringContext, Unsupported, register_lowering

aten = torch.ops.aten


def norm_dim(dim: int, ndim: int) -> int:
    """``dim`` in ``[0, max(ndim, 1))``; 0-d tensors accept dims 0 and -1."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"dimension {dim} out of range for rank {ndim}")
    return dim % n


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx: LoweringContext, x, size):
    """Row-major reshape to the traced shape (trusted: symbolic sizes such as ``s0*s1 // 2`` need
    no proof that the element counts agree)."""
    shape = ctx.out_shape()
    if tuple(shape) == tuple(x.shape):
        return x
    if any(s.as_int() == 0 for s in x.shape):  # no element to remap (and no size to divide by)
        return T.full(shape, 0, x.dtype)
    return T.reshape(x, shape)


@register_lowering(aten.permute.default)
def _permute(ctx, x, dims):
    if x.ndim == 0:
        return x
    return dslf.permute(x, tuple(norm_dim(d, x.ndim) for d in dims))


@register_lowering(aten.transpose.int)
def _transpose(ctx, x, d0, d1):
    if x.ndim < 2:
        return x
    dims = list(range(x.ndim))
    a, b = norm_dim(d0, x.ndim), norm_dim(d1, x.ndim)
    dims[a], dims[b] = dims[b], dims[a]
    return dslf.permute(x, tuple(dims))


register_lowering(aten.t.default)(lambda ctx, x: _transpose(ctx, x, 0, 1))


@register_lowering(aten.expand.default)
def _expand(ctx, x, size, implicit=False):
    return T.expand(x, ctx.out_shape())


@register_lowering(aten.unsqueeze.default)
def _unsqueeze(ctx, x, dim):
    return T.unsqueeze(x, dim % (x.ndim + 1))


@register_lowering(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)
def _squeeze(ctx, x, dims=None):
    if x.ndim == 0:
        return x
    if dims is None:
        dims = range(x.ndim)
    elif isinstance(dims, int):
        dims = [dims]
    return T.squeeze(x, [norm_dim(d, x.ndim) for d in dims])


def slice_start(start, size: Index, step: int) -> Index:
    """The first position of ``x[start::step]`` along a dimension of ``size`` elements."""
    if start is None:
        return Index.of(0)
    if isinstance(start, Index):
        return start
    n = size.as_int()
    if n is not None:
        return Index.of(slice(start, None, step).indices(n)[0])
    if start < 0:
        raise Unsupported("negative slice start on a symbolic dimension")
    return Index.of(start)


@register_lowering(aten.slice.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, x.ndim)
    length = ctx.out_shape()[dim]
    begin = slice_start(start, x.shape[dim], step)
    if begin == 0 and step == 1 and length == x.shape[dim]:
        return x
    return T.slice_dim(x, dim, begin, step, length)


@register_lowering(aten.narrow.default)
def _narrow(ctx, x, dim, start, length):
    dim = norm_dim(dim, x.ndim)
    return T.slice_dim(x, dim, slice_start(start, x.shape[dim], 1), 1, ctx.out_shape()[dim])


def position(index, size: Index) -> Index:
    """A position along a dimension of ``size`` elements (an int counts from the end when negative)."""
    return size + index if not isinstance(index, Index) and index < 0 else Index.of(index)


@register_lowering(aten.select.int)
def _select(ctx, x, dim, index):
    dim = norm_dim(dim, x.ndim)
    return T.select(x, dim, position(index, x.shape[dim]))


@register_lowering(aten.split_with_sizes.default, aten.split.Tensor)
def _split(ctx, x, sizes, dim=0):
    dim = norm_dim(dim, x.ndim)
    out, start = [], Index.of(0)
    for k in range(len(ctx.val)):
        length = ctx.out_shape(k)[dim]
        out.append(T.slice_dim(x, dim, start, 1, length))
        start = start + length
    return tuple(out)


@register_lowering(aten.unbind.int)
def _unbind(ctx, x, dim=0):
    dim = norm_dim(dim, x.ndim)
    return tuple(T.select(x, dim, Index.of(k)) for k in range(len(ctx.val)))


@register_lowering(aten.unfold.default)
def _unfold(ctx, x, dim, size, step):
    if x.ndim == 0:
        return T.view(x, (Index.of(1),), lambda idx: (), "unfold")
    dim = norm_dim(dim, x.ndim)
    shape = ctx.out_shape()

    def remap(idx):
        return idx[:dim] + (idx[dim] * step + idx[-1],) + idx[dim + 1:-1]

    return T.view(x, shape, remap, "unfold")


@register_lowering(aten.diagonal.default)
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    d1, d2 = norm_dim(dim1, x.ndim), norm_dim(dim2, x.ndim)
    rest = [k for k in range(x.ndim) if k not in (d1, d2)]

    def remap(idx):
        out = [None] * x.ndim
        for k, i in zip(rest, idx):
            out[k] = i
        j = idx[-1]
        out[d1] = j + max(-offset, 0)
        out[d2] = j + max(offset, 0)
        return tuple(out)

    return T.view(x, ctx.out_shape(), remap, "diagonal")


@register_lowering(aten.as_strided.default)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    """Reads ``x``'s storage at ``offset + sum(idx * stride)``: valid when ``x`` owns a contiguous
    storage of its own (an input or a computed tensor, not a view)."""
    if any(s.as_int() == 0 for s in x.shape):  # no storage to read: the view is empty too
        return T.full(ctx.out_shape(), 0, x.dtype)
    base = ctx.arg_val(0)
    owns = isinstance(x.src, (PlaceholderSrc, PointwiseSrc, ReductionSrc))
    if not owns or not base.is_contiguous() or base.storage_offset() != 0:
        raise Unsupported("as_strided of a view or of a non-contiguous tensor")
    offset = Index.of(storage_offset or 0)
    strides = [Index.of(s) for s in stride]
    src_shape = x.shape

    def remap(idx):
        flat = offset
        for i, s in zip(idx, strides):
            flat = flat + i * s
        out, rest = [], product(src_shape)
        for n in src_shape:
            rest = floordiv(rest, n)
            out.append(mod(floordiv(flat, rest), n))
        return tuple(out)

    return T.view(x, ctx.out_shape(), remap, "as_strided")

