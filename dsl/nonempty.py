"""Reductions that have no value over an empty dimension: max, min, argmax, argmin.

Eager PyTorch raises for them (``amax(): Expected reduction dim 1 to have non-zero size``), while
sum, prod, any, all and mean have a value there (0, 1, False, True, NaN). A DSL function raises
as eager does, when it is called, since sizes may be symbolic. Only reductions the user wrote are
checked: loopnest's own lowerings (softmax, logsumexp over an empty row) build their graphs
without ``ln.compile`` and keep eager's results there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..ir.index import Index, evaluate
from ..ir.ops import ReduceOp
from .tensor import ReductionSrc, Tensor, iter_tensors

NEEDS_ELEMENTS = frozenset({ReduceOp.MAX, ReduceOp.MIN, ReduceOp.ARGMAX, ReduceOp.ARGMIN})


class EmptyReductionError(IndexError):
    """A max/min/argmax/argmin over a dimension of size 0 (eager raises IndexError too)."""


@dataclass(frozen=True)
class NonEmpty:
    """Dimension ``axis`` (of size ``size``) of the input of reduction ``op`` must not be empty."""

    op: str
    axis: int
    size: Index
    shape: tuple[Index, ...]

    def check(self, env: Mapping[str, int]) -> None:
        """Raise ``EmptyReductionError`` if the size is 0 for the symbol values ``env``."""
        if evaluate(self.size, env) == 0:
            symbolic = "(" + ", ".join(str(s) for s in self.shape) + ")"
            concrete = tuple(evaluate(s, env) for s in self.shape)
            raise EmptyReductionError(
                f"{self.op}(): expected reduction dim {self.axis} to have non-zero size, but the input "
                f"has shape {symbolic} = {concrete}; {self.op} of an empty dimension has no value "
                f"(eager PyTorch raises too)")


def requirements(outputs: Sequence[Tensor]) -> tuple[NonEmpty, ...]:
    """The reduced dimensions of ``outputs``' max/min/argmax/argmin that could be empty."""
    found: dict[tuple, NonEmpty] = {}
    for t in iter_tensors(outputs):
        src = t.src
        if not isinstance(src, ReductionSrc) or src.op not in NEEDS_ELEMENTS:
            continue
        for axis in src.axes:
            size = src.arg.shape[axis]
            if size.as_int() is None or size.as_int() == 0:
                found[(src.node_id, axis)] = NonEmpty(src.op.value, axis, size, tuple(src.arg.shape))
    return tuple(found.values())

