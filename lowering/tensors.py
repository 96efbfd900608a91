"""DSL building blocks the ATen rules need beyond ``dsl.functions``.

Generators (``iota``, ``full``) are pointwise tensors without loads: their value is an index
expression or a constant. The index expression of ``iota`` is written over the loop variables the
graph builder gives a pointwise node (``ir.nodes.domain_vars(shape, "i")``), so it means "my own
position". Views are ``ViewSrc`` index remaps; ``take`` is an indirect load (``GatherSrc``).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import GatherSrc, PointwiseSrc, Tensor, ViewSrc
from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index, IndexCheck
from ..ir.nodes import domain_vars
from ..ir.ops import Op

Shape = tuple[Index, ...]


# -- generators -----------------------------------------------------------------------------------
def iota(shape: Sequence[Index], dim: int, dtype: DType = dt.int64) -> Tensor:
    """A tensor of ``shape`` whose value is its own index along ``dim``."""
    shape = tuple(Index.of(s) for s in shape)
    return Tensor(shape, dtype, PointwiseSrc(Op.CAST, (domain_vars(shape, "i")[dim],)))


def full(shape: Sequence[Index], value, dtype: DType) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` (a Python scalar, made a constant of ``dtype`` by
    the graph builder, or an ``Index``)."""
    return Tensor(tuple(Index.of(s) for s in shape), dtype, PointwiseSrc(Op.CAST, (value,)))


def size_value(value: Index, dtype: DType = dt.int64) -> Tensor:
    """A 0-d tensor holding a (symbolic) integer."""
    return full((), value, dtype)


def copy(x: Tensor) -> Tensor:
    """A new tensor equal to ``x`` (a node of its own: never an alias of ``x``)."""
    return Tensor(x.shape, x.dtype, PointwiseSrc(Op.CAST, (x,)))


cast = dslf.cast  # x converted to dtype (x itself when it already has it)


# -- views ----------------------------------------------------------------------------------------
def view(x: Tensor, shape: Sequence[Index], remap, what: str) -> Tensor:
    """``out[idx] = x[remap(idx)]`` with the given output shape."""
    return Tensor(tuple(Index.of(s) for s in shape), x.dtype, ViewSrc(x, remap, what))


reshape = dslf.reshape_view  # x in row-major order with a shape of the same element count (not re-checked)


def relabel(x: Tensor, shape: Sequence[Index]) -> Tensor:
    """``x`` with each non-1 size that differs from the trailing-aligned ``shape`` replaced by it
    (the traced values say they are equal); ``x`` itself when nothing differs."""
    lead = len(shape) - x.ndim
    sizes = tuple(s if s == 1 or lead + k < 0 else shape[lead + k] for k, s in enumerate(x.shape))
    if sizes == tuple(x.shape):
        return x
    return view(x, sizes, lambda idx: idx, "relabel")


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dimension at ``dim`` (already normalized to ``[0, x.ndim]``)."""
    shape = x.shape[:dim] + (Index.of(1),) + x.shape[dim:]
    return view(x, shape, lambda idx: idx[:dim] + idx[dim + 1:], "unsqueeze")


def squeeze(x: Tensor, dims: Sequence[int]) -> Tensor:
    """Drop the size-1 dimensions among ``dims``."""
    drop = {d for d in dims if x.shape[d] == 1}
    if not drop:
        return x
    shape = tuple(s for k, s in enumerate(x.shape) if k not in drop)
    ndim = x.ndim

    def remap(idx):
        it = iter(idx)
        return tuple(Index.of(0) if k in drop else next(it) for k in range(ndim))

    return view(x, shape, remap, "squeeze")


expand = dslf.broadcast_to  # x broadcast to a shape (no copy)


def slice_dim(x: Tensor, dim: int, start: Index, step: int, length: Index) -> Tensor:
    """Elements ``start, start+step, ...`` (``length`` of them) along ``dim``."""
    shape = x.shape[:dim] + (length,) + x.shape[dim + 1:]

    def remap(idx):
        return idx[:dim] + (start + idx[dim] * step,) + idx[dim + 1:]

    return view(x, shape, remap, "slice")


def select(x: Tensor, dim: int, index: Index) -> Tensor:
    """The slice at position ``index`` (non-negative) of ``dim``, which disappears."""
    shape = x.shape[:dim] + x.shape[dim + 1:]
    return view(x, shape, lambda idx: idx[:dim] + (index,) + idx[dim:], "select")


def remap_dim(x: Tensor, dim: int, fn, what: str) -> Tensor:
    """``out[.., i, ..] = x[.., fn(i), ..]`` along ``dim`` (``fn`` maps an Index to an Index)."""
    return view(x, x.shape, lambda idx: idx[:dim] + (fn(idx[dim]),) + idx[dim + 1:], what)


# -- indirect loads ---------------------------------------------------------------------------------
def take(x: Tensor, axis: int, index: Tensor, check: IndexCheck | None = None) -> Tensor:
    """``out[i] = x[i with i[axis] := index[i]]``; ``index`` has the output's shape, which must equal
    ``x``'s outside ``axis``. ``check`` says which positions are valid and whether negative ones
    count from the end (checked at load time); None: ``index`` is in bounds by construction."""
    if not index.dtype.is_int:
        index = cast(index, dt.int64)
    return Tensor(index.shape, x.dtype, GatherSrc(x, index, axis, check))


def clamp_index(index: Tensor, size: Index) -> Tensor:
    """``index`` clamped into ``[0, size)`` (a load through it is always in bounds)."""
    return dslf.minimum(dslf.maximum(index, 0), int_operand(size - 1))


def shift_along(piece: Tensor, dim: int, out_size: Index, offset: Index) -> Tensor:
    """``out[.., i, ..] = piece[.., i - offset, ..]`` for ``i < out_size`` along ``dim``, the position
    clamped into bounds: callers mask the positions that fall outside ``piece``."""
    if offset == 0 and out_size == piece.shape[dim]:
        return piece
    shape = piece.shape[:dim] + (out_size,) + piece.shape[dim + 1:]
    pos = iota(shape, dim) if offset == 0 else dslf.apply(Op.SUB, iota(shape, dim), int_operand(offset))
    return take(piece, dim, clamp_index(pos, piece.shape[dim]))


def int_operand(value: Index):
    """A constant int for a constant index, else a 0-d int64 tensor holding it."""
    c = value.as_int()
    return c if c is not None else size_value(value)


def in_range(shape: Shape, dim: int, lo: Index, hi: Index) -> Tensor:
    """A bool tensor of ``shape``: ``lo <= position along dim < hi``."""
    pos = iota(shape, dim)
    return dslf.apply(Op.AND, dslf.apply(Op.GE, pos, int_operand(lo)), dslf.apply(Op.LT, pos, int_operand(hi)))


# -- layouts ----------------------------------------------------------------------------------------
def in_layout(t: Tensor, traced) -> Tensor:
    """``t`` computed in the dim order of ``traced``'s strides (a traced tensor eager laid out as a
    permutation of row-major: channels-last, a transpose's result), returned as the view of that
    buffer with ``t``'s shape; ``t`` itself when eager's layout is row-major or not a dense
    permutation, its sizes are symbolic, or ``t`` is not a pointwise result computed here. Extern
    arguments and graph outputs pass through it, so ATen calls and callers get eager's layout and
    the kernel writing it runs along its lines."""
    if not isinstance(t.src, PointwiseSrc) or not isinstance(traced, torch.Tensor) or t.ndim < 2:
        return t
    sizes, strides = tuple(traced.shape), tuple(traced.stride())
    if not all(isinstance(v, int) for v in sizes + strides) or traced.is_contiguous():
        return t
    if tuple(s.as_int() for s in t.shape) != sizes:  # a carrier's extra dim, a relabelled shape
        return t
    order = sorted(range(len(sizes)), key=lambda d: (-strides[d], d))
    expected, step = [0] * len(sizes), 1
    for d in reversed(order):
        expected[d], step = step, step * sizes[d]
    if any(n > 1 and a != b for a, b, n in zip(strides, expected, sizes)) or order == sorted(order):
        return t
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return dslf.permute(copy(dslf.permute(t, *order)), *inverse)
