"""The serial text of index expressions and scalar expressions: complete, exact, read back by
``ir.parser``.

Unlike the printer's text (for people and the structural hash), the serial text loses nothing:
every dtype an op's operands do not imply is written, constants are written exactly (``repr`` of
a float round-trips), indirect indices carry their bound and check, and an expression DAG is
written once per shared node (``let $k = ...``) instead of once per use, so the text grows with
the DAG and never nests deeper than ``SPLIT_DEPTH`` brackets.

Grammar (``ir.parser`` reads exactly this)::

    index   := ["-"] term (("+" | "-") term)*
    term    := factor ("*" factor)*
    factor  := INT | LOOPVAR | SYMBOL | "(" index ("//" | "%") index ")"
             | "indirect" "(" expr "," index ["," "check" STRING INT ("wrap" | "nowrap")] ")"
    expr    := "$" INT                                  a let-bound node
             | ["-"] (INT | FLOAT | "inf" | "nan") ":" DTYPE | ("True" | "False") ":" "bool"
             | BUFFER "[" [index ("," index)*] "]"      a load (its dtype is the buffer's)
             | "index" "(" index ")" ":" DTYPE
             | "acc" "(" NAME "," INT ")" ":" DTYPE
             | OP "(" expr ("," expr)* ")" [":" DTYPE]  the dtype when the operands do not imply it
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from .dtypes import DType, bool_
from .expr import AccRef, Apply, Const, Expr, IndexValue, Load, uses_in
from .index import Atom, FloorDiv, Index, Indirect, Mod, Sym, Var
from .ops import PREDICATES, Op

SPLIT_DEPTH = 24  # a node nesting deeper than this is let-bound (the parser allows MAX_DEPTH)


def implied_dtype(op: Op, args: Sequence[Expr]) -> DType | None:
    """The dtype ``op`` produces from ``args`` when nothing else is said (None for casts)."""
    if op is Op.CAST:
        return None
    if op in PREDICATES:
        return bool_
    return args[1].dtype if op is Op.WHERE else args[0].dtype


def is_loop_var_name(name: str) -> bool:
    """Whether ``name`` has the form of a kernel loop variable (``p0``, ``r12``)."""
    return len(name) > 1 and name[0] in "pr" and name[1:].isdigit() and name[1:] == str(int(name[1:]))


class ExprWriter:
    """Writes indices and expressions over ``loop_vars``; collects the symbols they use.

    ``bind(roots)`` chooses the nodes written once as ``let`` lines (those used twice, and those
    nesting too deep); ``expr`` then writes ``$k`` for them.
    """

    def __init__(self, loop_vars: Iterable[Index]):
        self.loop_vars = {a for v in loop_vars for a in v.atoms() if isinstance(a, Var)}
        self.symbols: set[str] = set()
        self.bound: dict[Expr, int] = {}

    # -- let bindings ----------------------------------------------------------------------------
    def bind(self, roots: Sequence[Expr]) -> list[Expr]:
        """Choose the let-bound nodes of ``roots``; returns them in definition order."""
        order, uses = uses_in(roots)
        depth: dict[Expr, int] = {}
        for node in order:  # children before parents
            d = self._depth(node, depth)
            if (isinstance(node, Apply) and uses.get(node, 0) > 1) or d > SPLIT_DEPTH:
                self.bound[node] = len(self.bound)
                d = 0
            depth[node] = d
        return list(self.bound)

    def _depth(self, node: Expr, depth: dict[Expr, int]) -> int:
        if isinstance(node, Apply):
            return 1 + max(depth[a] for a in node.args)
        if isinstance(node, Load):
            return 1 + max((self._index_depth(i, depth) for i in node.index), default=0)
        if isinstance(node, IndexValue):
            return 1 + self._index_depth(node.index, depth)
        return 1 if isinstance(node, AccRef) else 0

    def _index_depth(self, e: Index, depth: dict[Expr, int]) -> int:
        best = 0
        for m, _ in e.terms:
            for a in m:
                if isinstance(a, (FloorDiv, Mod)):
                    best = max(best, 1 + self._index_depth(a.num, depth), 1 + self._index_depth(a.den, depth))
                elif isinstance(a, Indirect):
                    best = max(best, 1 + depth[a.value], 1 + self._index_depth(a.bound, depth))
        return best

    # -- indices ---------------------------------------------------------------------------------
    def index(self, e: Index) -> str:
        """The serial text of an index expression."""
        parts = []
        for m, c in e.terms:
            factors = [self._atom(a) for a in m]
            if abs(c) != 1:
                factors.append(str(abs(c)))
            parts.append(("-" if c < 0 else "+", "*".join(factors)))
        if e.const or not parts:
            parts.append(("-" if e.const < 0 else "+", str(abs(e.const))))
        sign, first = parts[0]
        text = ("-" if sign == "-" else "") + first
        for sign, body in parts[1:]:
            text += f" {sign} {body}"
        return text

    def _atom(self, a: Atom) -> str:
        if isinstance(a, Var):
            if a not in self.loop_vars:
                raise ValueError(f"loop variable {a.name} (extent {a.size}) is not one of the kernel's "
                                 f"loop variables, so the kernel cannot be written as text")
            return a.name
        if isinstance(a, Sym):
            if not a.name.isidentifier() or is_loop_var_name(a.name) or a.name in _WORDS:
                raise ValueError(f"symbol name {a.name!r} cannot be written as text: use an identifier "
                                 f"that is not a loop variable name or one of {sorted(_WORDS)}")
            self.symbols.add(a.name)
            return a.name
        if isinstance(a, FloorDiv):
            return f"({self.index(a.num)} // {self.index(a.den)})"
        if isinstance(a, Mod):
            return f"({self.index(a.num)} % {self.index(a.den)})"
        if isinstance(a, Indirect):
            check = ""
            if a.check is not None:
                check = f", check {quote(a.check.op)} {a.check.dim} {'wrap' if a.check.wrap else 'nowrap'}"
            return f"indirect({self.expr(a.value)}, {self.index(a.bound)}{check})"
        raise ValueError(f"index atom {a!r} of type {type(a).__name__} has no serial text")

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, e: Expr, define: bool = False) -> str:
        """The serial text of ``e``; a let-bound node as its reference unless ``define``."""
        if not define and e in self.bound:
            return f"${self.bound[e]}"
        if isinstance(e, Const):
            return f"{constant(e.value)}:{e.dtype.name}"
        if isinstance(e, Load):
            return f"{e.buffer}[{', '.join(self.index(i) for i in e.index)}]"
        if isinstance(e, IndexValue):
            return f"index({self.index(e.index)}):{e.dtype.name}"
        if isinstance(e, AccRef):
            return f"acc({e.name}, {e.output}):{e.dtype.name}"
        if isinstance(e, Apply):
            args = ", ".join(self.expr(a) for a in e.args)
            suffix = "" if implied_dtype(e.op, e.args) is e.dtype else f":{e.dtype.name}"
            return f"{e.op.name.lower()}({args}){suffix}"
        raise ValueError(f"expression node {type(e).__name__} has no serial text")


_WORDS = frozenset({"indirect", "check", "wrap", "nowrap"})


def constant(value: bool | float) -> str:
    """The exact text of a constant's value (``repr``: floats round-trip; ``inf``, ``nan``)."""
    return repr(value)


def quote(text: str) -> str:
    """``text`` as a string literal; only printable ASCII without quotes or backslashes."""
    if not text.isascii() or not text.isprintable() or '"' in text or "\\" in text or len(text) > 200:
        raise ValueError(f"{text!r} cannot be written as a string literal: use at most 200 printable "
                         f"ASCII characters without quotes or backslashes")
    return f'"{text}"'
