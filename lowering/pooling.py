"""Max pooling as a pointwise kernel over the output: one load per window element.

``max_pool{2,3}d_with_indices`` is what the decompositions leave of ``F.max_pool*d``. Each window
element is a strided view of the input (an affine load), or, along a dimension where some window
reaches into the padding or past the end (``ceil_mode``), a clamped indirect load masked to
``-inf``. Values and indices follow ATen's CPU kernel element by element: a window element
replaces the running maximum when it is greater or NaN, so ties keep the first position and a
NaN the last; the running maximum starts at the window's first element inside the input. The
indices count positions in the input's flattened spatial plane. An unused index output costs
nothing: it is never stored.
"""
from __future__ import annotations

import itertools
import math

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import Tensor
from ..ir import dtypes as dt
from ..ir.index import Index
from ..ir.ops import Op
from . import tensors as T
from .registry import Unsupported, register_family

aten = torch.ops.aten


def _per_dim(value, nd: int, what: str) -> tuple[int, ...]:
    """An int or list argument of a pooling op as ``nd`` ints (one value repeats)."""
    values = (value,) if isinstance(value, int) else tuple(value)
    if len(values) == 1:
        values = values * nd
    if len(values) != nd or not all(isinstance(v, int) for v in values):
        raise Unsupported(f"max pooling {what} {value!r} is not {nd} ints")
    return values


def _static(sizes, what: str) -> tuple[int, ...]:
    ints = tuple(Index.of(s).as_int() for s in sizes)
    if any(v is None for v in ints):
        raise Unsupported(f"max pooling over symbolic {what} sizes {tuple(sizes)}")
    return ints


class _Window:
    """The window element at ``offsets`` for every output position: its value (``-inf`` outside
    the input), whether it lies inside the input, and its flat position in the spatial plane."""

    def __init__(self, x: Tensor, out_shape, offsets, stride, padding, dilation):
        nd = len(offsets)
        spatial = range(x.ndim - nd, x.ndim)
        sizes_in = _static([x.shape[a] for a in spatial], "input")
        value, inside, flat = x, None, None
        for a, axis in enumerate(spatial):
            n_in, n_out = sizes_in[a], out_shape[axis].as_int()
            start = offsets[a] * dilation[a] - padding[a]
            if start >= 0 and start + (n_out - 1) * stride[a] < n_in:
                value = T.slice_dim(value, axis, Index.of(start), stride[a], out_shape[axis])
                pos = dslf.apply(Op.ADD, dslf.apply(Op.MUL, T.iota(out_shape, axis), stride[a]), start)
            else:
                shape = value.shape[:axis] + (out_shape[axis],) + value.shape[axis + 1:]
                along = dslf.apply(Op.ADD, dslf.apply(Op.MUL, T.iota(shape, axis), stride[a]), start)
                value = T.take(value, axis, T.clamp_index(along, Index.of(n_in)))
                pos = dslf.apply(Op.ADD, dslf.apply(Op.MUL, T.iota(out_shape, axis), stride[a]), start)
                ok = dslf.apply(Op.AND, dslf.apply(Op.GE, pos, 0), dslf.apply(Op.LT, pos, n_in))
                inside = ok if inside is None else dslf.apply(Op.AND, inside, ok)
            term = dslf.apply(Op.MUL, pos, math.prod(sizes_in[a + 1:])) if a + 1 < nd else pos
            flat = term if flat is None else dslf.apply(Op.ADD, flat, term)
        self.inside = inside
        self.value = value if inside is None else dslf.where(inside, value, -math.inf)
        self.flat = flat


def _max_pool(nd: int):
    def rule(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if not x.dtype.is_float:
            raise Unsupported(f"max pooling of {x.dtype} tensors")
        kernel = _per_dim(kernel_size, nd, "kernel_size")
        steps = _per_dim(stride, nd, "stride") if stride else kernel
        pads, dils = _per_dim(padding, nd, "padding"), _per_dim(dilation, nd, "dilation")
        out_shape = ctx.out_shape(0)
        if 0 in _static(out_shape, "output"):
            return T.full(out_shape, 0.0, x.dtype), T.full(out_shape, 0, dt.int64)
        best = where = seen = None
        for offsets in itertools.product(*(range(k) for k in kernel)):
            w = _Window(x, out_shape, offsets, steps, pads, dils)
            if best is None and w.inside is None:
                best, where = w.value, w.flat
                continue
            if best is None:
                best, where, seen = w.value, w.flat, w.inside
                continue
            take = dslf.apply(Op.OR, dslf.apply(Op.GT, w.value, best), dslf.apply(Op.ISNAN, w.value))
            if seen is not None:
                first = dslf.apply(Op.AND, w.inside, dslf.apply(Op.NOT, seen)) if w.inside is not None \
                    else dslf.apply(Op.NOT, seen)
                take = dslf.apply(Op.OR, take, first)
                seen = None if w.inside is None else dslf.apply(Op.OR, seen, w.inside)
            best, where = dslf.where(take, w.value, best), dslf.where(take, w.flat, where)
        return T.copy(best), T.copy(T.cast(where, dt.int64))

    return rule


register_family({aten.max_pool2d_with_indices.default: 2, aten.max_pool3d_with_indices.default: 3},
                _max_pool)
