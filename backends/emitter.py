"""Shared machinery of the code generators: index printing and expression emission with CSE.

A backend subclasses ``ExprEmitter`` and says how to print a load, a constant, a cast, an op, an
accumulator reference and a temporary; walking the expression DAG and naming each distinct
subexpression once is done here.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterator

from ..ir.expr import AccRef, Apply, Const, Expr, IndexValue, Load
from ..ir.index import FloorDiv, Index, Indirect, Mod, Sym, Var
from ..ir.ops import Op


class IndexPrinter:
    """Prints index expressions in C-like syntax (``//`` as ``/`` on non-negative values)."""

    def __init__(self, atom_name: Callable[[object], str], div: str = "/", mod: str = "%"):
        self.atom_name = atom_name
        self.div = div
        self.mod = mod

    def __call__(self, e: Index) -> str:
        parts = []
        for m, c in e.terms:
            factors = [self._atom(a) for a in m]
            if c != 1:
                factors.append(str(c) if c > 0 else f"({c})")
            parts.append("*".join(factors))
        if e.const or not parts:
            parts.append(str(e.const) if e.const >= 0 else f"({e.const})")
        return " + ".join(parts)

    def _atom(self, a) -> str:
        if isinstance(a, (Var, Sym, Indirect)):
            return self.atom_name(a)
        if isinstance(a, FloorDiv):
            return f"(({self(a.num)}) {self.div} ({self(a.den)}))"
        if isinstance(a, Mod):
            return f"(({self(a.num)}) {self.mod} ({self(a.den)}))"
        raise TypeError(f"unknown index atom {a!r}")


class ExprEmitter:
    """Emits one statement per distinct subexpression into ``lines``; returns value names."""

    def __init__(self, lines: list[str], indent: str, names: Iterator[int] | None = None):
        self.lines = lines
        self.indent = indent
        self.cache: dict[Expr, str] = {}
        self.names = names if names is not None else itertools.count(1)

    def fresh(self, stem: str = "t") -> str:
        """A new variable name; emitters of one kernel share ``names`` so names never collide."""
        return f"{stem}{next(self.names)}"

    def emit(self, e: Expr) -> str:
        """The name (or literal) holding the value of ``e``, emitting statements as needed."""
        hit = self.cache.get(e)
        if hit is not None:
            return hit
        if isinstance(e, Const):
            out = self.const(e)
        elif isinstance(e, AccRef):
            out = self.accref(e)
        elif isinstance(e, Load):
            out = self.bind(self.load(e), e)
        elif isinstance(e, IndexValue):
            out = self.bind(self.index_value(e), e)
        elif isinstance(e, Apply):
            args = [self.emit(a) for a in e.args]
            if e.op is Op.CAST:
                text = self.cast(args[0], e.args[0], e)
            else:
                text = self.apply(e, args)
            out = self.bind(text, e)
        else:
            raise TypeError(f"cannot emit {type(e).__name__}")
        self.cache[e] = out
        return out

    # -- hooks for backends ---------------------------------------------------------------------
    def bind(self, text: str, e: Expr) -> str:
        raise NotImplementedError

    def const(self, e: Const) -> str:
        raise NotImplementedError

    def accref(self, e: AccRef) -> str:
        raise NotImplementedError

    def load(self, e: Load) -> str:
        raise NotImplementedError

    def index_value(self, e: IndexValue) -> str:
        raise NotImplementedError

    def cast(self, value: str, src: Expr, e: Apply) -> str:
        raise NotImplementedError

    def apply(self, e: Apply, args: list[str]) -> str:
        raise NotImplementedError
