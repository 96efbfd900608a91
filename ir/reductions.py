"""The reduction ops of the IR, each described once: its state, initial values, combine, outputs.

A reduction folds the elements of a row into a *state* of named components (``acc0`` for a sum;
``acc0_val``/``acc0_idx`` for argmax; ``acc0_mean``/``acc0_m2``/``acc0_n`` for Welford). A
component says what one element contributes (``Lift``), how two partial states merge
(``Combine``), its dtype (``Rule``) and its initial value (``Init``, the combine's identity).
The finished outputs each read one component: a ``FLAG`` component reads as a bool (any/all),
and a float state with a NaN flag reads NaN where the flag is set (max/min propagate NaN, as in
PyTorch). Both backends render this description (``backends/cpp/accumulators.py``,
``backends/triton/reductions.py``) and the reference interpreter (``ir/interpret.py``) evaluates
it; ``tests/test_reductions.py`` checks that each covers every op.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from . import dtypes as dt
from .dtypes import DType


class ReduceOp(Enum):
    """Reductions; ``REDUCTIONS[op]`` describes each."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    ANY = "any"
    ALL = "all"
    WELFORD = "welford"
    EXP_SUM = "exp_sum"

    @property
    def spec(self) -> "Reduction":
        return REDUCTIONS[self]

    @property
    def num_outputs(self) -> int:
        return len(self.spec.outputs)

    @property
    def is_arg(self) -> bool:
        return self.spec.joint in (Combine.ARGMAX, Combine.ARGMIN)


class Rule(Enum):
    """How a component's dtype follows from the dtype of the reduced elements."""

    WIDE = "floats: their compute dtype (float32 or wider); integers and bool: int64"
    VALUE = "the elements' compute dtype"
    FLAG = "int32 holding 0 or 1 (a C++ int reduced with | or & vectorizes; bool || does not)"
    INDEX = "int64"


class Init(Enum):
    """Initial values of components, backend-neutral (each is the identity of its combine)."""

    ZERO = "0"
    ONE = "1"
    LOWEST = "-inf for floats, the dtype's minimum otherwise"
    HIGHEST = "+inf for floats, the dtype's maximum otherwise"
    NO_INDEX = "no element seen yet: loses to every real index (each backend picks the sentinel)"


class Lift(Enum):
    """What one element contributes to a component."""

    VALUE = "the element, converted to the component's dtype"
    ISNAN = "1 if the element is NaN, else 0"
    POSITION = "the element's flat position along the reduced dims"
    ZERO = "0"
    ONE = "1"
    SHIFTED_EXP = "exp(x - x*), x* = x if finite else 0: 1 for finite x, inf for +inf, 0 for -inf"


class Combine(Enum):
    """How two partial states merge. The first six act on one component alone."""

    ADD = "a + b"
    MUL = "a * b"
    MAX = "max(a, b)"
    MIN = "min(a, b)"
    OR = "a | b, on 0/1 flags"
    AND = "a & b, on 0/1 flags"
    ARGMAX = "(val, idx) pairs: the larger val wins, NaN beats every number, equal vals keep the smaller idx"
    ARGMIN = "(val, idx) pairs: the smaller val wins, NaN beats every number, equal vals keep the smaller idx"
    WELFORD = ("(mean, m2, n) pairs (Chan et al.): n = na + nb, d = mean_b - mean_a, "
               "mean = mean_a + d * nb / n, m2 = m2_a + m2_b + d * d * na * nb / n")
    EXP_SUM = ("(m, s) pairs, s relative to m* = m if finite, else 0 (online softmax): m = max(ma, mb), "
               "s = sa * alpha(ma) + sb * alpha(mb), alpha(a) = exp(a* - m*) capped at the dtype's largest "
               "finite value (a part of only -inf elements has s = 0 and must stay 0)")


ELEMENTWISE = frozenset({Combine.ADD, Combine.MUL, Combine.MAX, Combine.MIN, Combine.OR, Combine.AND})


@dataclass(frozen=True)
class Component:
    """One state variable of a reduction (``float_only``: present only when elements are floats)."""

    suffix: str
    rule: Rule
    init: Init
    lift: Lift
    combine: Combine
    float_only: bool = False

    def dtype(self, elements: DType) -> DType:
        """The component's dtype when the reduced elements are ``elements``."""
        if self.rule is Rule.FLAG:
            return dt.int32
        if self.rule is Rule.INDEX or (self.rule is Rule.WIDE and not elements.is_float):
            return dt.int64
        return dt.compute_dtype(elements)


@dataclass(frozen=True)
class Reduction:
    """A reduction op: its state components and the component each output reads."""

    doc: str
    components: tuple[Component, ...]
    outputs: tuple[str, ...]

    @property
    def joint(self) -> Combine | None:
        """The combine merging all components together; None when each combines alone."""
        combine = self.components[0].combine
        return None if combine in ELEMENTWISE else combine

    def state(self, elements: DType) -> tuple[Component, ...]:
        """The components of a reduction over ``elements``."""
        return tuple(c for c in self.components if elements.is_float or not c.float_only)

    def component(self, suffix: str) -> Component:
        return next(c for c in self.components if c.suffix == suffix)

    def output_dtypes(self, elements: DType) -> tuple[DType, ...]:
        """Dtypes of the finished outputs: their components', bool for flags."""
        comps = [self.component(s) for s in self.outputs]
        return tuple(dt.bool_ if c.rule is Rule.FLAG else c.dtype(elements) for c in comps)


def identity(init: Init, dtype: DType) -> float | int | None:
    """The number ``init`` stands for in ``dtype`` (None for ``NO_INDEX``, a backend's choice)."""
    if init in (Init.ZERO, Init.ONE):
        return int(init.value)
    if init is Init.NO_INDEX:
        return None
    if dtype.is_float:
        return float("-inf") if init is Init.LOWEST else float("inf")
    if dtype.is_bool:
        return int(init is Init.HIGHEST)
    info = torch.iinfo(dtype.torch)
    return info.min if init is Init.LOWEST else info.max


def _one(rule: Rule, init: Init, combine: Combine) -> tuple[Component, ...]:
    return (Component("", rule, init, Lift.VALUE, combine),)


def _extreme(init: Init, combine: Combine) -> tuple[Component, ...]:
    nan = Component("_nan", Rule.FLAG, Init.ZERO, Lift.ISNAN, Combine.OR, float_only=True)
    return _one(Rule.VALUE, init, combine) + (nan,)


def _arg(init: Init, combine: Combine) -> tuple[Component, ...]:
    return (Component("_val", Rule.VALUE, init, Lift.VALUE, combine),
            Component("_idx", Rule.INDEX, Init.NO_INDEX, Lift.POSITION, combine))


_EXP_SUM = (Component("_max", Rule.VALUE, Init.LOWEST, Lift.VALUE, Combine.EXP_SUM),
            Component("_sum", Rule.VALUE, Init.ZERO, Lift.SHIFTED_EXP, Combine.EXP_SUM))

_WELFORD = tuple(Component(s, Rule.WIDE, Init.ZERO, lift, Combine.WELFORD)
                 for s, lift in (("_mean", Lift.VALUE), ("_m2", Lift.ZERO), ("_n", Lift.ONE)))

REDUCTIONS: dict[ReduceOp, Reduction] = {
    ReduceOp.SUM: Reduction("sum", _one(Rule.WIDE, Init.ZERO, Combine.ADD), ("",)),
    ReduceOp.PROD: Reduction("product", _one(Rule.WIDE, Init.ONE, Combine.MUL), ("",)),
    ReduceOp.MAX: Reduction("largest element; NaN if any is NaN",
                            _extreme(Init.LOWEST, Combine.MAX), ("",)),
    ReduceOp.MIN: Reduction("smallest element; NaN if any is NaN",
                            _extreme(Init.HIGHEST, Combine.MIN), ("",)),
    ReduceOp.ARGMAX: Reduction("first position of the largest element (of the first NaN if any)",
                               _arg(Init.LOWEST, Combine.ARGMAX), ("_idx",)),
    ReduceOp.ARGMIN: Reduction("first position of the smallest element (of the first NaN if any)",
                               _arg(Init.HIGHEST, Combine.ARGMIN), ("_idx",)),
    ReduceOp.ANY: Reduction("whether any element is true", _one(Rule.FLAG, Init.ZERO, Combine.OR), ("",)),
    ReduceOp.ALL: Reduction("whether every element is true", _one(Rule.FLAG, Init.ONE, Combine.AND), ("",)),
    ReduceOp.WELFORD: Reduction("(mean, m2) in one pass; var = m2 / (n - correction)", _WELFORD,
                                ("_mean", "_m2")),
    ReduceOp.EXP_SUM: Reduction("(m, s): the largest element m and s = sum of exp(x - m*), m* = m if m is "
                                "finite, else 0 (PyTorch's logsumexp shift), in one pass (online softmax); "
                                "a NaN element makes s NaN, and m reads NaN where s is NaN. Made by "
                                "scheduler/online_softmax.py from a max and a later sum of exp",
                                _EXP_SUM, ("_max", "_sum")),
}
