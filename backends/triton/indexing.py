"""Tiles and index arithmetic of Triton kernels.

A kernel's loop variables are flattened onto at most two tile axes: ``x`` (rows, or pointwise
elements), ``y`` (the outer dims of a 2D pointwise tile) and ``r`` (reduced elements). Each kernel
variable becomes ``(flat // stride) % size`` of its axis' flat index; ``fold_divmod`` undoes the
split again where an access is contiguous (``(a // d) * d + a % d == a``), so Triton sees plain
``xindex``/``rindex`` offsets and can vectorize them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import loads
from ...ir.index import Index, Mod, Var, as_var, floordiv, mod, product, stride_along
from ...scheduler.kernel import Kernel


@dataclass(frozen=True)
class Axis:
    """One tile axis: its name (``x``/``y``/``r``), block size constexpr, extent and position."""

    name: str
    numel: Index
    kernel_vars: tuple[Var, ...]  # kernel variables flattened onto this axis, outermost first
    dim: int                      # position in the tile shape

    @property
    def index(self) -> str:
        return f"{self.name}index"

    @property
    def mask(self) -> str:
        return f"{self.name}mask"

    @property
    def block(self) -> str:
        return f"{self.name.upper()}BLOCK"

    @property
    def flat(self) -> Var:
        return Var(self.index, self.numel)


def flatten_vars(axis: Axis) -> dict[Var, Index]:
    """Each kernel variable of ``axis`` as an expression of the axis' flat index."""
    flat = Index.of(axis.flat)
    sizes = [v.size for v in axis.kernel_vars]
    out: dict[Var, Index] = {}
    for j, v in enumerate(axis.kernel_vars):
        stride = product(sizes[j + 1:])
        e = floordiv(flat, stride) if j + 1 < len(sizes) else flat
        out[v] = e if j == 0 else mod(e, v.size)
    return out


def _contains(e: Index, part: Index) -> bool:
    terms = dict(e.terms)
    return part.const == 0 and all(terms.get(m) == c for m, c in part.terms)


def _fold_once(e: Index) -> Index | None:
    """``e`` with the first foldable ``(a // d) * d * k + (a % d) * k`` folded, else None."""
    for m, c in e.terms:
        for atom in (a for a in m if isinstance(a, Mod)):
            rest = list(m)
            rest.remove(atom)
            k = product(Index.of(a) for a in rest) * c
            quotient = floordiv(atom.num, atom.den) * atom.den * k
            if _contains(e, quotient):
                return e - quotient - Index.of(atom) * k + atom.num * k
    return None


def fold_divmod(e: Index) -> Index:
    """Rewrite ``(a // d) * d * k + (a % d) * k`` as ``a * k`` wherever both halves occur."""
    while (folded := _fold_once(e)) is not None:
        e = folded
    return e


def contiguous_var(kernel: Kernel, buffer: str, index: tuple[Index, ...]) -> Var | None:
    """The kernel variable whose unit step moves the access by one element, if any."""
    flat = kernel.buffers[buffer].layout.flat_index(index)
    for m, c in flat.terms:
        if c == 1 and len(m) == 1 and isinstance(m[0], Var):
            return m[0]
    return None


def _accesses(kernel: Kernel):
    from_stores = [(s.buffer, s.index) for s in kernel.elem_stores + kernel.row_stores]
    from_loads = [(ld.buffer, ld.index) for e in kernel.expressions() for ld in loads(e)]
    return from_stores, from_loads


def transposed_split(kernel: Kernel) -> int | None:
    """For a pointwise kernel whose loads and stores are contiguous along different dims: how
    many leading dims form the ``y`` axis of a 2D tile so both stay coalesced (else None)."""
    if kernel.reductions or len(kernel.pdomain) < 2:
        return None
    pvars = [as_var(v) for v in kernel.pvars()]
    position = {v: k for k, v in enumerate(pvars)}
    stored, loaded = _accesses(kernel)
    inner = {position.get(contiguous_var(kernel, b, i)) for b, i in stored} - {None}
    # a load that stays put along every stored row (a per-channel statistic) is one broadcast
    # address per warp, coalesced in any tile; it must not turn 1D tiles into 2D ones
    along = [pvars[k] for k in inner]
    moving = [(b, i) for b, i in loaded
              if any(stride_along(kernel.buffers[b].layout.flat_index(i), v) != 0 for v in along)]
    other = {position.get(contiguous_var(kernel, b, i)) for b, i in moving} - {None}
    if not inner or not other or other <= inner:
        return None
    dims = sorted(inner | other)
    return dims[0] + 1
