"""DSL tensors: lazy values with a shape and a dtype, built into IR by ``dsl.build``.

A ``Tensor`` is one of: a placeholder (a graph input), the result of a pointwise op, an output of
a reduction, or a view of another tensor (an index remap, never a copy).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

from ..core.trees import leaves
from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index, IndexCheck, Sym
from ..ir.nodes import domain_vars
from ..ir.ops import Op, ReduceOp

Shape = tuple[Index, ...]
_counter = itertools.count()


def to_size(s) -> Index:
    """A dimension size from an int, a string (symbolic) or an Index."""
    if isinstance(s, str):
        if not s.isidentifier():
            raise ValueError(f"symbolic size {s!r} must be an identifier")
        return Index.of(Sym(s))
    if isinstance(s, Index):
        return s
    if hasattr(s, "__index__") and not isinstance(s, bool):
        n = int(s)
        if n < 0:
            raise ValueError(f"size must be >= 0, got {n}")
        return Index.of(n)
    raise TypeError(f"size must be an int or a name, got {s!r}")


def shape_str(shape: Sequence[Index]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


@dataclass(eq=False)
class PointwiseSrc:
    """``op(*args)`` elementwise, with ``args`` already broadcast to the result's shape."""

    op: Op
    args: tuple  # of Tensor or Python scalar (already cast to the compute dtype)


@dataclass(eq=False)
class ReductionSrc:
    """A reduction of ``arg`` over ``axes`` (output ``output`` of a possibly multi-output op)."""

    op: ReduceOp
    arg: "Tensor"
    axes: tuple[int, ...]
    output: int
    node_id: int


@dataclass(eq=False)
class ViewSrc:
    """``self[idx] = base[remap(idx)]``."""

    base: "Tensor"
    remap: Callable[[tuple[Index, ...]], tuple[Index, ...]]
    what: str


@dataclass(eq=False)
class GatherSrc:
    """``self[idx] = base[idx with idx[axis] replaced by index[idx]]``."""

    base: "Tensor"
    index: "Tensor"
    axis: int
    check: IndexCheck | None  # how positions are checked and wrapped (None: in bounds by construction)


@dataclass(eq=False)
class PlaceholderSrc:
    name: str


@dataclass(eq=False)
class ExternCall:
    """One call of ``fn`` (e.g. an ATen op) on realized tensors; shared by its outputs.

    ``args``/``kwargs`` may nest lists and tuples holding DSL tensors and constants;
    ``outputs`` holds (shape, dtype, strides or None for contiguous) of each result, as found by
    running ``fn`` on meta tensors.
    """

    target: str
    fn: Callable
    args: tuple
    kwargs: dict
    outputs: tuple
    reason: str
    node_id: int


@dataclass(eq=False)
class ExternSrc:
    """Output ``output`` of an extern call."""

    call: ExternCall
    output: int


class Tensor:
    """A lazy DSL value. Use the ``ln.*`` functions and Python operators to build expressions."""

    __array_priority__ = 1000  # numpy scalars defer to our reflected operators
    __slots__ = ("shape", "dtype", "src", "id")

    def __init__(self, shape: Sequence[Index], dtype: DType, src):
        self.shape: Shape = tuple(shape)
        self.dtype = dtype
        self.src = src
        self.id = next(_counter)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        kind = type(self.src).__name__.replace("Src", "").lower()
        return f"ln.Tensor({kind}, shape={shape_str(self.shape)}, dtype={self.dtype.name})"

    def __bool__(self):
        raise TypeError("a DSL tensor has no truth value; use ln.where / ln.any / ln.all")

    # Operators are attached in dsl.functions to keep one definition per op.


def placeholder(name: str, shape: Sequence, dtype) -> Tensor:
    """A graph input named ``name`` with ``shape`` (ints and/or symbolic names) and ``dtype``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"placeholder name must be an identifier, got {name!r}")
    if isinstance(shape, (int, str)):
        shape = (shape,)
    return Tensor(tuple(to_size(s) for s in shape), dt.to_dtype(dtype), PlaceholderSrc(name))


def placeholders_in_creation_order(roots: Sequence[Tensor]) -> list[Tensor]:
    """The placeholders reachable from ``roots``, in the order they were created."""
    found = {t.id: t for t in iter_tensors(roots) if isinstance(t.src, PlaceholderSrc)}
    return [found[k] for k in sorted(found)]


def iter_tensors(roots: Sequence[Tensor]):
    """Every tensor reachable from ``roots`` (each once), dependencies first."""
    seen: set[int] = set()
    order: list[Tensor] = []
    stack: list[tuple[Tensor, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        t, expanded = stack.pop()
        if t.id in seen:
            continue
        if expanded:
            seen.add(t.id)
            order.append(t)
            continue
        stack.append((t, True))
        for d in reversed(dependencies(t)):
            if d.id not in seen:
                stack.append((d, False))
    return order


def view_root(t: Tensor) -> tuple[Tensor, tuple[Index, ...]]:
    """The tensor ``t`` is a chain of views of, and the index of it that ``t``'s own loop variables
    (``domain_vars(t.shape, "i")``) read."""
    root, index = t, domain_vars(t.shape, "i")
    while isinstance(root.src, ViewSrc):
        index = root.src.remap(index)
        root = root.src.base
    return root, index


def dependencies(t: Tensor) -> list[Tensor]:
    """The tensors ``t`` reads directly."""
    s = t.src
    if isinstance(s, PointwiseSrc):
        return [a for a in s.args if isinstance(a, Tensor)]
    if isinstance(s, ReductionSrc):
        return [s.arg]
    if isinstance(s, ViewSrc):
        return [s.base]
    if isinstance(s, GatherSrc):
        return [s.base, s.index]
    if isinstance(s, ExternSrc):
        return [a for a in leaves((s.call.args, s.call.kwargs)) if isinstance(a, Tensor)]
    return []


def extern(target: str, fn: Callable, args: tuple, kwargs: dict, outputs: Sequence[tuple],
           reason: str = "") -> tuple["Tensor", ...]:
    """Call ``fn(*args, **kwargs)`` at run time on realized tensors, between loopnest kernels.

    ``outputs`` gives (shape, dtype, strides) of each result; strides None means contiguous.
    """
    specs = tuple((tuple(to_size(s) for s in shape), dt.to_dtype(dtype), strides)
                  for shape, dtype, strides in outputs)
    call = ExternCall(target, fn, tuple(args), dict(kwargs), specs, reason, next(_counter))
    return tuple(Tensor(shape, dtype, ExternSrc(call, k)) for k, (shape, dtype, _) in enumerate(specs))


def normalize_axis(axis: int, ndim: int, what: str) -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative int, or a clear IndexError."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1):
        raise IndexError(f"{what}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % max(ndim, 1)
