"""The one table of lowering rules, keyed by ATen overload.

A rule is ``fn(ctx, *args, **kwargs)``: the node's arguments with every FX node replaced by its
lowered value (a DSL ``Tensor``, an ``Index`` for a SymInt, a Python scalar, or a tuple of those),
plus a ``LoweringContext`` that knows the node's traced output (``meta["val"]``: dtypes, shapes).
It returns a DSL tensor, or a tuple for multi-output ops. A rule that meets a case it does not
handle raises ``Unsupported(reason)``: the node then becomes an Extern call with that reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._ops import OpOverload

from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index
from .symbolic import shape_of

Rule = Callable[..., Any]
LOWERINGS: dict[OpOverload, Rule] = {}


class LoweringError(ValueError):
    """An FX graph cannot be lowered; the message names the node and the op."""


class Unsupported(Exception):
    """Raised by a rule for a case it does not cover; the node falls back to an Extern call."""


def input_name(node: torch.fx.Node) -> str:
    """The name of the DSL placeholder that stands for graph input ``node``."""
    return f"in_{node.name}"


def register_lowering(*ops: OpOverload):
    """Decorator: ``fn`` lowers each of ``ops`` (ATen overloads such as ``aten.add.Tensor``)."""

    def deco(fn: Rule) -> Rule:
        for op in ops:
            if not isinstance(op, OpOverload):
                raise TypeError(f"register_lowering takes ATen overloads (aten.add.Tensor), got {op!r}")
            if op in LOWERINGS:
                raise ValueError(f"{op} already has a lowering rule")
            LOWERINGS[op] = fn
        return fn

    return deco


def register_family(table: dict[OpOverload, Any], make_rule: Callable[[Any], Rule]) -> None:
    """Register ``make_rule(value)`` for every ``op -> value`` of a small table."""
    for op, value in table.items():
        register_lowering(op)(make_rule(value))


@dataclass
class LoweringContext:
    """What a rule may know about the node it lowers besides its arguments."""

    node: torch.fx.Node

    @property
    def val(self):
        """The traced output: a (fake) tensor, a tuple of them, or a scalar."""
        return self.node.meta.get("val")

    def _out(self, k: int | None):
        v = self.val
        if k is not None:
            v = v[k]
        if not isinstance(v, torch.Tensor):
            raise LoweringError(f"{self.node.format_node()}: no traced tensor output to read")
        return v

    def out_dtype(self, k: int | None = None) -> DType:
        """The loopnest dtype of (output ``k`` of) the node."""
        return dt.to_dtype(self._out(k).dtype)

    def out_shape(self, k: int | None = None) -> tuple[Index, ...]:
        """The shape of (output ``k`` of) the node, symbolic sizes as ``Index``."""
        return shape_of(self._out(k))

    def arg_val(self, k: int):
        """The traced value of positional argument ``k`` (tensors fake, scalars as given)."""
        a = self.node.args[k] if k < len(self.node.args) else None
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a
