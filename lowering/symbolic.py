"""SymInts and sympy size expressions as loopnest index expressions.

Dynamic-shape graphs carry sizes as ``torch.SymInt`` whose ``node.expr`` is a sympy expression over
symbols ``s0, s1, ...``. Each sympy symbol becomes a DSL symbol of the same name (``ir.index.Sym``);
sums, products, integer powers, floor divisions and modulos map to the same ``Index`` arithmetic.
"""
from __future__ import annotations

import functools

import sympy
import torch
from torch.utils._sympy import functions as symfn

from ..ir.index import Index, Sym, floordiv, mod, product


class SymbolicError(ValueError):
    """A size expression loopnest cannot represent (e.g. Max/Min of symbols, unbacked sizes)."""


@functools.lru_cache(maxsize=4096)
def sympy_to_index(expr) -> Index:
    """The ``Index`` equal to sympy integer expression ``expr``."""
    if isinstance(expr, (int, sympy.Integer)):
        return Index.of(int(expr))
    if isinstance(expr, sympy.Symbol):
        if not expr.name.isidentifier():
            raise SymbolicError(f"size symbol {expr.name!r} is not an identifier")
        return Index.of(Sym(expr.name))
    if isinstance(expr, sympy.Add):
        return sum((sympy_to_index(a) for a in expr.args), Index.of(0))
    if isinstance(expr, sympy.Mul):
        return product(sympy_to_index(a) for a in expr.args)
    if isinstance(expr, (sympy.Pow, symfn.PowByNatural)):
        base, exp = expr.args
        if not (isinstance(exp, sympy.Integer) and int(exp) >= 0):
            raise SymbolicError(f"size expression {expr} has a non-natural exponent")
        return product([sympy_to_index(base)] * int(exp))
    if isinstance(expr, symfn.FloorDiv):
        return floordiv(sympy_to_index(expr.args[0]), sympy_to_index(expr.args[1]))
    if isinstance(expr, (symfn.Mod, symfn.PythonMod)):
        return mod(sympy_to_index(expr.args[0]), sympy_to_index(expr.args[1]))
    if isinstance(expr, symfn.ModularIndexing):
        base, div, m = (sympy_to_index(a) for a in expr.args)
        return mod(floordiv(base, div), m)
    raise SymbolicError(f"size expression {expr} ({type(expr).__name__}) has no loopnest equivalent")


def float_size(value) -> Index | None:
    """The size a SymFloat converts to float (``sym_float(s0)``, ``ToFloat(s0 * s1)``), or None for
    any other value."""
    if not isinstance(value, torch.SymFloat):
        return None
    expr = value.node.expr
    if type(expr).__name__ != "ToFloat" or len(expr.args) != 1:
        return None
    try:
        return sympy_to_index(expr.args[0])
    except (TypeError, ValueError, NotImplementedError):
        return None


def to_index(value) -> Index:
    """An int or a SymInt (or an Index) as an ``Index``."""
    if isinstance(value, Index):
        return value
    if isinstance(value, torch.SymInt):
        return sympy_to_index(value.node.expr)
    if isinstance(value, bool):
        raise TypeError(f"expected a size, got {value!r}")
    return _constant(int(value))


@functools.lru_cache(maxsize=1024)
def _constant(n: int) -> Index:
    return Index.of(n)


def shape_of(value: torch.Tensor) -> tuple[Index, ...]:
    """The sizes of a (fake) tensor as index expressions."""
    return tuple(to_index(s) for s in value.shape)


def strides_of(value: torch.Tensor) -> tuple[Index, ...]:
    """The strides of a (fake) tensor as index expressions."""
    return tuple(to_index(s) for s in value.stride())
