"""Buffers, loop-nest nodes and the graph that holds them.

A node writes buffers; its body is a scalar expression (``ir.expr``) over its loop variables:
``i0..`` for the domain (the output's shape) and ``r0..`` for a reduction's reduced dimensions.
Loads name a buffer and give one index expression per dimension; the buffer's layout turns that
into a flat offset at code generation, so views (permute, slice, broadcast, reshape) are index
remaps and never copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Sequence

from ..core.trees import map_leaves
from .dtypes import DType
from .expr import Expr
from .index import Index, IntLike, Var, contiguous_strides, evaluate, product, recombine_divmod, symbols_in
from .ops import ReduceOp


class BufferKind(Enum):
    """Where a buffer's memory comes from."""

    INPUT = "input"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"


@dataclass(frozen=True)
class Layout:
    """Sizes, strides (in elements) and offset of a strided tensor."""

    sizes: tuple[Index, ...]
    strides: tuple[Index, ...]
    offset: Index = Index.of(0)

    @staticmethod
    def contiguous(sizes: Sequence[IntLike]) -> "Layout":
        """Row-major layout of ``sizes``."""
        sizes = tuple(Index.of(s) for s in sizes)
        return Layout(sizes, contiguous_strides(sizes))

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def numel(self) -> Index:
        return product(self.sizes)

    def flat_index(self, index: Sequence[Index]) -> Index:
        """The element offset of ``index`` (one expression per dimension)."""
        if len(index) != len(self.sizes):
            raise ValueError(f"rank-{len(self.sizes)} layout indexed with {len(index)} indices")
        flat = self.offset
        for i, s, n in zip(index, self.strides, self.sizes):
            if n != 1:
                flat = flat + i * s
        return recombine_divmod(flat)

    def stride_pattern(self) -> tuple:
        """Size-free description of the layout: order of strides, broadcast and unit dims."""
        kinds = ["1" if n == 1 else ("b" if s == 0 else "s") for s, n in zip(self.strides, self.sizes)]
        moving = [k for k in range(self.rank) if kinds[k] == "s"]
        order = sorted(moving, key=lambda k: _stride_sort_key(self.strides[k]), reverse=True)
        contiguous_tail = bool(order) and self.strides[order[-1]] == 1
        return (tuple(kinds), tuple(order), contiguous_tail)

    def is_contiguous(self) -> bool:
        expect = contiguous_strides(self.sizes)
        return self.offset == 0 and all(
            n == 1 or s == e for s, e, n in zip(self.strides, expect, self.sizes))


def _stride_sort_key(s: Index) -> tuple:
    c = s.as_int()
    return (1, 0) if c is None else (0, c)


@dataclass(eq=False)
class Buffer:
    """A named tensor in memory."""

    name: str
    dtype: DType
    layout: Layout
    kind: BufferKind = BufferKind.INTERMEDIATE

    @property
    def sizes(self) -> tuple[Index, ...]:
        return self.layout.sizes

    @property
    def nbytes(self) -> Index:
        """Bytes of the buffer's elements (as if contiguous)."""
        return self.layout.numel * self.dtype.itemsize

    def __repr__(self) -> str:
        sizes = ", ".join(str(s) for s in self.sizes)
        return f"Buffer({self.name}: {self.dtype.name}[{sizes}], {self.kind.value})"


def domain_vars(domain: Sequence[IntLike], prefix: str) -> tuple[Index, ...]:
    """Loop variables ``{prefix}0..`` over ``domain`` as index expressions."""
    return tuple(Index.of(Var(f"{prefix}{k}", Index.of(n))) for k, n in enumerate(domain))


@dataclass(eq=False)
class Pointwise:
    """``out[i] = body(i)`` for every ``i`` in ``domain`` (the output's shape)."""

    name: str
    out: str
    domain: tuple[Index, ...]
    body: Expr

    def __post_init__(self):
        self.domain = tuple(Index.of(s) for s in self.domain)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.out,)

    def index_vars(self) -> tuple[Index, ...]:
        return domain_vars(self.domain, "i")


@dataclass(eq=False)
class Reduction:
    """``outs[i] = op over r in rdomain of body(i, r)``.

    For ARGMAX/ARGMIN the result is the position of the first extreme value, as a flat row-major
    index into ``rdomain``; WELFORD writes two outputs (mean, m2). ``axes`` are the positions the
    reduced dimensions had in the reduced tensor (default: the trailing ones), so the scheduler
    can line up pointwise nodes over that tensor's full shape with this loop nest.
    """

    name: str
    outs: tuple[str, ...]
    domain: tuple[Index, ...]
    rdomain: tuple[Index, ...]
    op: ReduceOp
    body: Expr
    axes: tuple[int, ...] | None = None

    def __post_init__(self):
        self.domain = tuple(Index.of(s) for s in self.domain)
        self.rdomain = tuple(Index.of(s) for s in self.rdomain)
        if self.axes is None:
            n = len(self.domain)
            self.axes = tuple(range(n, n + len(self.rdomain)))

    def full_domain(self) -> tuple[Index, ...]:
        """The reduced tensor's shape: domain and rdomain interleaved by ``axes``."""
        return interleave(self.domain, self.rdomain, self.axes)

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.outs

    def index_vars(self) -> tuple[Index, ...]:
        return domain_vars(self.domain, "i")

    def reduction_vars(self) -> tuple[Index, ...]:
        return domain_vars(self.rdomain, "r")


@dataclass(frozen=True)
class KReduction:
    """A loop statement: ``acc = op over rdomain of body`` for the current row (a kernel's reduction).

    ``across``: reduced over the kernel's rows instead, one accumulator per point of the rdomain
    (a layernorm's weight gradient, folded in by the row kernel of its input gradient as it passes
    each element); final only after the last row, so only the kernel's ``col_stores`` read it.
    """

    name: str
    op: ReduceOp
    body: Expr
    dtype: DType
    level: int
    across: bool = False


@dataclass(frozen=True)
class KStore:
    """A loop statement: ``buffer[index] = value`` (index in loop variables)."""

    buffer: str
    index: tuple[Index, ...]
    value: Expr
    phase: int = 0


def interleave(kept: Sequence, reduced: Sequence, axes: Sequence[int]) -> tuple:
    """Merge ``kept`` and ``reduced`` items into one tuple, ``reduced[k]`` landing at ``axes[k]``."""
    it_kept, it_red = iter(kept), iter(reduced)
    return tuple(next(it_red) if pos in axes else next(it_kept) for pos in range(len(kept) + len(reduced)))


@dataclass(eq=False)
class Extern:
    """A call to an ATen op (or any callable) on realized buffers, between loopnest kernels.

    ``args``/``kwargs`` hold buffer names wrapped in ``BufferRef`` and plain constants; ``fn``
    returns a tensor or a tuple of tensors, copied into or adopted as ``outs``.
    """

    name: str
    outs: tuple[str, ...]
    target: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.outs

    def call(self, tensor_of: Callable[["BufferRef"], Any], env: Mapping[str, int]) -> tuple:
        """Run ``fn`` with every BufferRef replaced by ``tensor_of(ref)`` and every size by its
        value under the symbol values ``env``; its results as a tuple."""
        def resolve(a):
            if isinstance(a, BufferRef):
                return tensor_of(a)
            return evaluate(a, env) if isinstance(a, Index) else a

        result = self.fn(*map_leaves(resolve, self.args), **map_leaves(resolve, self.kwargs))
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)


@dataclass(frozen=True)
class BufferRef:
    """A buffer inside an Extern's arguments, optionally seen through a strided ``layout``."""

    name: str
    layout: "Layout | None" = None


Node = Pointwise | Reduction | Extern


@dataclass(frozen=True)
class OutputView:
    """A graph output: buffer ``buffer`` seen through ``layout`` (a view, no copy)."""

    buffer: str
    layout: Layout


@dataclass(eq=False)
class Graph:
    """Buffers plus nodes in topological order, with the graph's inputs and outputs."""

    buffers: dict[str, Buffer] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[OutputView] = field(default_factory=list)

    def add_buffer(self, buf: Buffer) -> Buffer:
        """Register a buffer; its name must be new."""
        if buf.name in self.buffers:
            raise ValueError(f"buffer {buf.name!r} already exists")
        self.buffers[buf.name] = buf
        return buf

    def symbols(self) -> set[str]:
        """Names of the symbolic sizes used by any buffer."""
        return {n for b in self.buffers.values() for s in b.layout.sizes + b.layout.strides
                for n in symbols_in(s)}
