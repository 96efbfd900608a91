"""Indirect positions that are arithmetic on one loop variable, rewritten as index arithmetic.

Nearest-neighbour upsampling and other interpolations read ``x[.., idx(p)]`` where ``idx(p)`` is
computed in floating point (``int64(float32(p) * 0.5)`` for a 2x upsample): a gather, with a
bounds check per element, float conversions per element, and no vector loads. When ``idx``
reads only one loop variable of constant extent, it is evaluated on that whole range here (with
the interpreter's op semantics, which the backends follow), and if it equals ``(p * num) // den
+ c`` for every ``p`` (``num``/``den`` from the extents it maps between, or an integer scale), the
position becomes that index expression: exact by construction, and in bounds, so unchecked.
"""
from __future__ import annotations

import math

import torch

from .expr import AccRef, Expr, IndexValue, Load, walk
from .index import Index, Indirect, Var, floordiv
from .interpret import evaluate_positions

MAX_EXTENT = 1 << 20  # positions evaluated at most per indirect (one tensor op per IR op)


def affine_index(index: Index) -> Index:
    """``index`` with each indirect atom that is exact index arithmetic on one variable replaced
    by that arithmetic (``affine_atom``)."""
    mapping = {}
    for a in index.atoms():
        if type(a) is Indirect:
            found = affine_atom(a)
            if found is not None:
                mapping[a] = found
    return index.subs(mapping) if mapping else index


def affine_atom(a: Indirect) -> Index | None:
    """The index expression equal to indirect position ``a`` for every value of the one loop
    variable its value reads, or None (it reads memory, several variables, a symbolic extent,
    or fits no ``(p * num) // den + c``)."""
    p = _only_var(a.value)
    extent = p.size.as_int() if p is not None else None
    bound = a.bound.as_int()
    if extent is None or bound is None or not 1 < extent <= MAX_EXTENT:
        return None
    try:
        values = evaluate_positions(a.value, p.name, extent)
    except (RuntimeError, TypeError, KeyError, ValueError, IndexError, ZeroDivisionError):
        return None
    if values.shape != (extent,) or bool((values < 0).any()) or bool((values >= bound).any()):
        return None
    start = int(values[0])
    positions = torch.arange(extent, dtype=torch.int64)
    for num, den in _scales(values, extent, bound):
        if torch.equal(positions * num // den + start, values):
            common = math.gcd(num, den)
            return floordiv(Index.of(p) * (num // common), Index.of(den // common)) + start
    return None


def _only_var(value: Expr) -> Var | None:
    """The one loop variable ``value`` reads through index values, if it reads no memory,
    accumulator or other variable."""
    found: set[Var] = set()
    for node in walk(value):
        if isinstance(node, (Load, AccRef)):
            return None
        if isinstance(node, IndexValue):
            atoms = node.index.atoms()
            if any(not isinstance(x, Var) for x in atoms):
                return None
            found |= set(atoms)
    return next(iter(found)) if len(found) == 1 else None


def _scales(values: torch.Tensor, extent: int, bound: int) -> list[tuple[int, int]]:
    """Candidate ``(num, den)`` for ``values``: the extents it maps between (an interpolation from
    ``bound`` positions to ``extent``), and the integer ratios its end points suggest."""
    span = int(values[-1] - values[0])
    candidates = [(bound, extent), (span, extent - 1)]
    if span > 0:
        candidates += [(1, (extent - 1) // span), (1, extent // (span + 1)), (span // (extent - 1), 1)]
    return [(n, d) for n, d in dict.fromkeys(candidates) if n >= 0 and d > 0]
