"""Pooling as a pointwise kernel over the output: one load per window element.

``max_pool{2,3}d_with_indices`` is what the decompositions leave of ``F.max_pool*d``;
``avg_pool{2,3}d`` stay as they are. Each window element is a strided view of the input (an affine
load), or, along a dimension where some window reaches into the padding or past the end
(``ceil_mode``), an indirect load clamped into the input, masked to the pool's identity where a
dilated max pool or an average needs it. Both follow ATen's CPU kernels element by element:

* max: a window element replaces the running maximum when it is greater or NaN, so ties keep
  the first position and a NaN the last; the running maximum starts at the window's first
  element inside the input. Indices count positions in the input's flattened spatial plane; an
  unused index output is never stored.
* average: the window's elements inside the input summed in window order (in float32 for 16-bit
  inputs), divided by ``divisor_override``, or by the window's size clipped to the padded input
  (``count_include_pad``), or by its count of elements inside the input.

Pooling into a layout other than row-major (channels-last) stays an ATen call.
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
        raise Unsupported(f"pooling {what} {value!r} is not {nd} ints")
    return values


def _check_layout(ctx) -> None:
    """Where eager pools into another layout than row-major (channels-last inputs give
    channels-last outputs), ATen's kernel, which walks channels innermost, is the faster choice:
    a fused pool recomputes its producers for each window element across the permuted dims
    (a channels-last conv block: 5951 us against 3833 with ATen's pool)."""
    out = ctx.val[0] if isinstance(ctx.val, (tuple, list)) else ctx.val
    if not out.is_contiguous():
        raise Unsupported(f"pooling into strides {tuple(out.stride())}: loopnest writes row-major buffers")


def _static(sizes, what: str) -> tuple[int, ...]:
    ints = tuple(Index.of(s).as_int() for s in sizes)
    if any(v is None for v in ints):
        raise Unsupported(f"pooling over symbolic {what} sizes {tuple(sizes)}")
    return ints


def _positions(out_shape, axis: int, stride: int, start: int) -> Tensor:
    """``start + stride * i`` at output position ``i`` along ``axis`` (an int64 tensor)."""
    return dslf.apply(Op.ADD, dslf.apply(Op.MUL, T.iota(out_shape, axis), stride), start)


class _Window:
    """The window element at ``offsets`` for every output position: its value (``fill`` outside
    the input), whether it lies inside the input (None: everywhere), and its flat position in the
    spatial plane. ``fill=None``: positions outside the input are clamped to its edge instead,
    unmasked (see ``_max_pool``)."""

    def __init__(self, x: Tensor, out_shape, offsets, stride, padding, dilation, fill: float | None):
        nd = len(offsets)
        spatial = range(x.ndim - nd, x.ndim)
        sizes_in = _static([x.shape[a] for a in spatial], "input")
        value, inside, flat = x, None, None
        for a, axis in enumerate(spatial):
            n_in, n_out = sizes_in[a], out_shape[axis].as_int()
            start = offsets[a] * dilation[a] - padding[a]
            pos = _positions(out_shape, axis, stride[a], start)
            if start >= 0 and start + (n_out - 1) * stride[a] < n_in:
                value = T.slice_dim(value, axis, Index.of(start), stride[a], out_shape[axis])
            else:
                shape = value.shape[:axis] + (out_shape[axis],) + value.shape[axis + 1:]
                along = _positions(shape, axis, stride[a], start)
                value = T.take(value, axis, T.clamp_index(along, Index.of(n_in)))
                if fill is None:
                    pos = T.clamp_index(pos, Index.of(n_in))
                else:
                    ok = dslf.apply(Op.AND, dslf.apply(Op.GE, pos, 0), dslf.apply(Op.LT, pos, n_in))
                    inside = ok if inside is None else dslf.apply(Op.AND, inside, ok)
            term = dslf.apply(Op.MUL, pos, math.prod(sizes_in[a + 1:])) if a + 1 < nd else pos
            flat = term if flat is None else dslf.apply(Op.ADD, flat, term)
        self.inside = inside
        self.value = value if inside is None else dslf.where(inside, value, fill)
        self.flat = flat


def _max_pool(nd: int):
    def rule(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        if not x.dtype.is_float:
            raise Unsupported(f"max pooling of {x.dtype} tensors")
        _check_layout(ctx)
        kernel = _per_dim(kernel_size, nd, "kernel_size")
        steps = _per_dim(stride, nd, "stride") if stride else kernel
        pads, dils = _per_dim(padding, nd, "padding"), _per_dim(dilation, nd, "dilation")
        out_shape = ctx.out_shape(0)
        if 0 in _static(out_shape, "output"):
            return T.full(out_shape, 0.0, x.dtype), T.full(out_shape, 0, dt.int64)
        # Every window overlaps the input (ATen checks padding <= kernel / 2, and a ceil_mode
        # window starts inside), so without dilation a position clamped to the input's edge is
        # one of the window's own: the clamped window visits the same elements in the same order,
        # some twice in a row, which changes no maximum, no first tie and no last NaN.
        fill = None if all(d == 1 for d in dils) else -math.inf
        best = where = seen = None
        for offsets in itertools.product(*(range(k) for k in kernel)):
            w = _Window(x, out_shape, offsets, steps, pads, dils, fill)
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


def _window_sizes(out_shape, sizes_in, kernel, stride, padding, count_include_pad: bool):
    """Per output position, the number ATen's average divides by (``divisor_override`` aside):
    an int, or an int64 tensor where windows differ."""
    nd = len(kernel)
    total: int | Tensor = 1
    for a, axis in enumerate(range(len(out_shape) - nd, len(out_shape))):
        n, k, s, p = sizes_in[a], kernel[a], stride[a], padding[a]
        last = (out_shape[axis].as_int() - 1) * s - p
        if p == 0 and last + k <= n:
            count: int | Tensor = k
        else:
            start = _positions(out_shape, axis, s, -p)
            end = dslf.minimum(dslf.apply(Op.ADD, start, k), n + p)
            if not count_include_pad:
                start, end = dslf.maximum(start, 0), dslf.minimum(end, n)
            count = dslf.apply(Op.SUB, end, start)
        total = count * total if isinstance(count, int) and isinstance(total, int) \
            else dslf.apply(Op.MUL, count, total)
    return total


def _avg_pool(nd: int):
    def rule(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        if not x.dtype.is_float:
            raise Unsupported(f"average pooling of {x.dtype} tensors")
        _check_layout(ctx)
        kernel = _per_dim(kernel_size, nd, "kernel_size")
        steps = _per_dim(stride, nd, "stride") if stride else kernel
        pads = _per_dim(padding, nd, "padding")
        out_shape, out_dtype = ctx.out_shape(), ctx.out_dtype()
        if 0 in _static(out_shape, "output"):
            return T.full(out_shape, 0.0, out_dtype)
        acc = dt.float32 if out_dtype in (dt.bfloat16, dt.float16) else out_dtype
        total = None
        for offsets in itertools.product(*(range(k) for k in kernel)):
            value = T.cast(_Window(x, out_shape, offsets, steps, pads, (1,) * nd, 0.0).value, acc)
            total = value if total is None else dslf.apply(Op.ADD, total, value)
        if divisor_override:
            divisor = divisor_override
        else:
            sizes_in = _static(x.shape[x.ndim - nd:], "input")
            divisor = _window_sizes(out_shape, sizes_in, kernel, steps, pads, count_include_pad)
            divisor = divisor if isinstance(divisor, int) else T.cast(divisor, acc)
        return T.cast(dslf.apply(Op.TRUEDIV, total, divisor), out_dtype)

    return rule


register_family({aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3}, _avg_pool)
