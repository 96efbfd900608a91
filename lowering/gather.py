"""Indirect loads: gather, advanced indexing (``index.Tensor``), index_select, embedding.

Each is a chain of ``take`` (``GatherSrc``) steps over index remaps: no copy of the source. Each
step carries the op's rule for positions read from an index tensor, as eager checks them:
``x[t]`` wraps ``[-size, 0)`` from the end; gather, index_select and embedding take ``[0, size)``
only. Anything else is an error at run time (``ir.index.IndexCheck``).
"""
from __future__ import annotations

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import Tensor
from ..ir.index import Index, IndexCheck
from ..ir.ops import Op
from . import tensors as T
from .registry import Unsupported, register_lowering
from .views import norm_dim

aten = torch.ops.aten


@register_lowering(aten.gather.default)
def _gather(ctx, x, dim, index, sparse_grad=False):
    if x.ndim == 0:
        return T.copy(T.expand(x, index.shape))
    dim = norm_dim(dim, x.ndim)
    if index.ndim == 0:
        index = T.unsqueeze(index, 0)
    shape = tuple(x.shape[k] if k == dim else index.shape[k] for k in range(x.ndim))
    base = x if shape == tuple(x.shape) else T.view(x, shape, lambda idx: idx, "gather_window")
    out = T.take(base, dim, index, IndexCheck("gather", dim, wrap=False))
    return dslf.reshape(out, ctx.out_shape()) if tuple(out.shape) != tuple(ctx.out_shape()) else out


@register_lowering(aten.scatter.value, aten.scatter.src)
def _scatter(ctx, x, dim, index, src):
    """``x`` with ``src`` written at ``index`` along ``dim``, when ``index`` holds one position per
    row along ``dim`` and covers ``x`` elsewhere (the one-hot of nll_loss's backward): a ``where``
    over ``x``'s positions, its index checked as eager checks it. Other scatters go through ATen."""
    if x.ndim == 0 or index.ndim != x.ndim:
        raise Unsupported("scatter of a 0-d tensor or with an index of another rank")
    dim = norm_dim(dim, x.ndim)
    if index.shape[dim] != 1 or any(index.shape[k] != x.shape[k] for k in range(x.ndim) if k != dim):
        raise Unsupported("scatter of several positions per row along dim, or with an index smaller than x")
    positions = T.iota(x.shape, dim)
    chosen = T.take(positions, dim, index, IndexCheck("scatter", dim, wrap=False))  # index[i], checked
    mask = dslf.apply(Op.EQ, positions, T.expand(chosen, x.shape))
    if isinstance(src, Tensor):
        first = T.view(src, index.shape, lambda idx: idx[:dim] + (Index.of(0),) + idx[dim + 1:], "scatter_src")
        value = T.expand(T.cast(first, x.dtype), x.shape)
    else:
        value = T.full(x.shape, src, x.dtype)
    return dslf.where(mask, value, x)


@register_lowering(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    if x.ndim == 0:
        return T.copy(T.expand(x, ctx.out_shape()))
    dim = norm_dim(dim, x.ndim)
    out_shape = ctx.out_shape()
    flat = index if index.ndim == 1 else dslf.reshape(index, (Index.of(1),))
    spread = T.view(flat, out_shape, lambda idx: (idx[dim],), "index_select")
    return T.take(x, dim, spread, IndexCheck("index_select", dim, wrap=False))


@register_lowering(aten.embedding.default)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return advanced_index(weight, [indices], "embedding")


@register_lowering(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(ctx, x, indices):
    for t in indices:
        if t is not None and t.dtype.is_bool:
            raise Unsupported("boolean mask indexing has a data-dependent shape")
    return advanced_index(x, list(indices))


def advanced_index(x: Tensor, indices: list, op: str = "index") -> Tensor:
    """``x[indices]`` with PyTorch's rules: broadcast index tensors replace the dimensions they
    index, in place when those are adjacent, else at the front. Negative positions wrap, except
    for ``op="embedding"``."""
    positions = [k for k, t in enumerate(indices) if t is not None]
    dims = list(positions)  # the dimensions of x each index tensor indexes, for error messages
    if not positions:
        return T.copy(x)
    index_tensors = [indices[k] for k in positions]
    if positions != list(range(positions[0], positions[-1] + 1)):
        order = positions + [k for k in range(x.ndim) if k not in positions]
        x = dslf.permute(x, order)
        positions = list(range(len(positions)))
    batch = dslf.broadcast_shapes(*(t.shape for t in index_tensors), what="index")
    p0, nb = positions[0], len(batch)
    pre, post = x.shape[:p0], x.shape[positions[-1] + 1:]
    indexed = [x.shape[k] for k in positions]
    y = T.view(x, pre + batch + tuple(indexed) + post, lambda idx: idx[:p0] + idx[p0 + nb:], "index_batch")
    axis = len(pre) + nb
    for j, t in enumerate(index_tensors):
        rest = tuple(indexed[j + 1:])
        target = pre + batch + (Index.of(1),) + rest + post
        spread = dslf.broadcast_to(t, batch)
        spread = T.view(spread, target, lambda idx: idx[p0:p0 + nb], "index_spread")
        check = IndexCheck(op, dims[j], wrap=op == "index")
        y = T.squeeze(T.take(y, axis, spread, check), [axis])
    return y
