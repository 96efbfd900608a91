"""Matrix products whose rows are a permutation of a tensor in memory, computed in its order.

``nn.MultiheadAttention(batch_first=True)`` projects ``x.transpose(0, 1)``: its graph is
``mm(view(clone(permute(x, [1, 0, 2])), [L * N, E]), W)``, a copy of ``x`` in the permuted order
only so that BLAS sees contiguous rows. A matrix product maps each row on its own, so
``P @ A @ W == P @ (A @ W)`` for a row permutation ``P``: the product of ``x`` as it lies, viewed
as ``[N * L, E]``, holds the same rows, and the permuted order is a view of its result that the
kernels after it read through their indices. The copy (a pass over the input) goes away. The same
holds for ``addmm`` when its bias is one row broadcast over all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import Tensor
from ..ir.index import Index

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


@dataclass(frozen=True)
class RowOrder:
    """An ``mm``/``addmm`` whose left operand is ``permute(source, perm)`` copied and flattened."""

    lhs_position: int        # where the left operand sits in the node's args
    source: torch.fx.Node    # the tensor whose rows, as they lie, are the product's rows
    perm: tuple[int, ...]    # the permutation the graph applied to ``source`` (last dim kept)

    def lhs(self, source: Tensor) -> Tensor:
        """The left operand: ``source`` viewed as [rows, K], with no copy."""
        rows = math.prod(self.source.meta["val"].shape[:-1])
        return dslf.reshape_view(source, (Index.of(rows), source.shape[-1]))

    def result(self, product: Tensor) -> Tensor:
        """The product in the graph's row order, as a view of ``product`` (rows in source order)."""
        rows = tuple(self.source.meta["val"].shape[:-1])
        n = product.shape[-1]
        by_source = dslf.reshape_view(product, (*(Index.of(r) for r in rows), n))
        return dslf.reshape_view(dslf.permute(by_source, self.perm), product.shape)


def _only_user(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    return len(node.users) == 1 and user in node.users


def _static(val) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in (*val.shape, *val.stride()))


def _permutation(node: torch.fx.Node, ndim: int) -> tuple[int, ...]:
    """The dims of a ``permute`` or ``transpose`` node, as a permutation."""
    if node.target is aten.permute.default:
        return tuple(d % ndim for d in node.args[1])
    a, b = (d % ndim for d in node.args[1:3])
    perm = list(range(ndim))
    perm[a], perm[b] = b, a
    return tuple(perm)


def find(node: torch.fx.Node) -> RowOrder | None:
    """The row order ``node`` (an ``mm`` or ``addmm``) can be computed in, if its left operand is
    a flattened contiguous copy of a permutation of a contiguous tensor that keeps the last dim,
    and nothing else reads the copy; None otherwise (static sizes only)."""
    if node.target is aten.mm.default:
        position = 0
    elif node.target is aten.addmm.default:
        position = 1
        bias = node.args[0]
        val = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
        if val is not None and not (val.ndim == 1 or (val.ndim == 2 and val.shape[0] == 1)):
            return None  # a bias that differs from row to row would need the same permutation
    else:
        return None
    flat = node.args[position]
    if not isinstance(flat, torch.fx.Node) or flat.target not in _VIEWS or not _only_user(flat, node):
        return None
    copied = flat.args[0]
    if (not isinstance(copied, torch.fx.Node) or copied.target is not aten.clone.default
            or copied.kwargs.get("memory_format", torch.contiguous_format) is not torch.contiguous_format
            or not _only_user(copied, flat)):
        return None
    permuted = copied.args[0]
    if not isinstance(permuted, torch.fx.Node) or permuted.target not in (aten.permute.default, aten.transpose.int):
        return None
    source = permuted.args[0]
    val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    flat_val = flat.meta.get("val")
    if not (_static(val) and _static(flat_val)) or val.ndim < 3 or not val.is_contiguous():
        return None
    perm = _permutation(permuted, val.ndim)
    if perm[-1] != val.ndim - 1 or perm == tuple(range(val.ndim)):
        return None
    if tuple(flat_val.shape) != (math.prod(val.shape[:-1]), val.shape[-1]):
        return None
    return RowOrder(position, source, perm)
