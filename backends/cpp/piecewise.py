"""Innermost loops split where a piecewise op changes piece (cat, constant_pad_nd, slice scatters).

Those ops select between pieces by comparing the position with constants, and read each piece
at a position clamped into its bounds (``lowering/indexing.py``), so that a load under a false
condition stays in bounds. In one loop over the whole row g++ sees clamped, data-dependent
indices: it reads every piece at every position, through gathers. Split at the positions where
a comparison changes value, each loop's range fixes every comparison and clamp (g++'s value
ranges fold them), its loads are contiguous again, and each position reads only its own piece.
Measured on the 2-core AVX-512 Xeon (2026-12-05, two threads): `cat([a, b * 2, c], 1)` of three
2000 x 1001 float32 tensors 4.8 -> 1.0 ms (eager 1.8-2.4), a pad of 1000 x 1000 by 3 on each side
0.53-1.03 -> 0.15-0.18 ms (eager 0.43-0.58).
"""
from __future__ import annotations

from ...ir.expr import Apply, Const, IndexValue, walk
from ...ir.index import Index, Var, lone_atom
from ...ir.ops import Op

MAX_PIECES = 8  # loops per innermost range: more is code size for little gain

# the op of ``c OP v`` written as ``v OP' c``
_FLIPPED = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE, Op.EQ: Op.EQ, Op.NE: Op.NE}


def pieces(exprs, var: Var, size: Index) -> list[tuple[int, int]] | None:
    """The ranges ``[lo, hi)`` covering ``[0, size)`` in which every comparison of ``var`` (plus
    a constant) with a constant in ``exprs`` keeps one value, or None when there is no such
    comparison, ``size`` is symbolic, or the ranges would be more than ``MAX_PIECES``."""
    n = size.as_int()
    if n is None:
        return None
    cuts = sorted({c for root in exprs for node in walk(root) for c in _cuts(node, var) if 0 < c < n})
    if not cuts or len(cuts) + 1 > MAX_PIECES:
        return None
    ends = [0, *cuts, n]
    return list(zip(ends, ends[1:]))


def _cuts(node, var: Var) -> list[int]:
    """Where the comparison ``node`` (if it compares ``var + k`` with a constant) changes value."""
    if not (isinstance(node, Apply) and node.op in _FLIPPED):
        return []
    a, b = node.args
    op = node.op
    if isinstance(b, IndexValue) and isinstance(a, Const):
        a, b, op = b, a, _FLIPPED[op]
    if not (isinstance(a, IndexValue) and isinstance(b, Const)) or isinstance(b.value, (bool, float)):
        return []
    k = a.index.const
    if lone_atom(Index(a.index.terms, 0)) != var:
        return []
    at = b.value - k  # var + k OP c  <=>  var OP c - k
    if op in (Op.LT, Op.GE):
        return [at]
    if op in (Op.LE, Op.GT):
        return [at + 1]
    return [at, at + 1]
