"""Scalar expressions: the body of a loop nest, evaluated once per point of its domain.

Nodes are immutable and hashable with a cached hash, so structurally equal subexpressions are
equal keys: codegen's common-subexpression elimination and the structural hash rely on it.
"""
from __future__ import annotations

import math
import weakref
from typing import Callable, Iterable, Iterator

from .dtypes import DType
from .index import Index, Indirect
from .ops import Op


class _Interned(type):
    """Hash-consing: constructing a node equal to a live one returns the live one.

    Structural equality is then identity, so comparing or looking up large shared
    subexpressions never walks them.
    """

    _table: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()

    def __call__(cls, *args, **kwargs):
        node = super().__call__(*args, **kwargs)
        key = node._key()
        live = _Interned._table.get(key)
        if live is not None:
            return live
        _Interned._table[key] = node
        return node


class Expr(metaclass=_Interned):
    """Base of scalar expression nodes. Subclasses define ``_fields``."""

    __slots__ = ("dtype", "_hash", "__weakref__")
    _fields: tuple[str, ...] = ()

    def _key(self) -> tuple:
        return (type(self).__name__, self.dtype) + tuple(getattr(self, f) for f in self._fields)

    def _init_hash(self) -> None:
        object.__setattr__(self, "_hash", hash(self._key()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def children(self) -> tuple["Expr", ...]:
        return ()

    def __repr__(self) -> str:
        return format_expr(self)


def _set(obj: Expr, **fields) -> None:
    for k, v in fields.items():
        object.__setattr__(obj, k, v)
    obj._init_hash()


class Const(Expr):
    """A literal of ``dtype``. Float NaN/inf are allowed."""

    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value, dtype: DType):
        if dtype.is_float:
            value = float(value)
        elif dtype.is_bool:
            value = bool(value)
        else:
            value = int(value)
        _set(self, dtype=dtype, value=value)

    def _key(self) -> tuple:
        v = self.value
        return ("Const", self.dtype, repr(v) if isinstance(v, float) and math.isnan(v) else v, type(v))


class Load(Expr):
    """``buffer[index]``: ``index`` holds one index expression per dimension of the buffer."""

    __slots__ = ("buffer", "index")
    _fields = ("buffer", "index")

    def __init__(self, buffer: str, index: tuple[Index, ...], dtype: DType):
        _set(self, dtype=dtype, buffer=buffer, index=tuple(Index.of(i) for i in index))

    def children(self) -> tuple[Expr, ...]:
        return tuple(a.value for i in self.index for a in i.atoms() if isinstance(a, Indirect))


class IndexValue(Expr):
    """An index expression used as a value (iota, masks of piecewise ops)."""

    __slots__ = ("index",)
    _fields = ("index",)

    def __init__(self, index: Index, dtype: DType):
        _set(self, dtype=dtype, index=Index.of(index))

    def children(self) -> tuple[Expr, ...]:
        return tuple(a.value for a in self.index.atoms() if isinstance(a, Indirect))


class Apply(Expr):
    """``op(*args)`` producing ``dtype``."""

    __slots__ = ("op", "args")
    _fields = ("op", "args")

    def __init__(self, op: Op, args: tuple[Expr, ...], dtype: DType):
        if len(args) != op.arity:
            raise ValueError(f"{op.name} takes {op.arity} operands, got {len(args)}")
        _set(self, dtype=dtype, op=op, args=tuple(args))

    def children(self) -> tuple[Expr, ...]:
        return self.args


class AccRef(Expr):
    """The finished value of accumulator ``name`` of the same kernel (a reduction's result)."""

    __slots__ = ("name", "output")
    _fields = ("name", "output")

    def __init__(self, name: str, output: int, dtype: DType):
        _set(self, dtype=dtype, name=name, output=output)


def uses_in(roots: Iterable[Expr]) -> tuple[list[Expr], dict[Expr, int]]:
    """Every node ``roots`` reach, once, children before parents, and how many times each is
    used (as an argument of a node, or as a root)."""
    uses: dict[Expr, int] = {}
    order: list[Expr] = []
    seen: set[Expr] = set()
    for root in roots:
        uses[root] = uses.get(root, 0) + 1
        for node in walk(root):
            if node in seen:
                continue
            seen.add(node)
            order.append(node)
            for c in node.children():
                uses[c] = uses.get(c, 0) + 1
    return order, uses


def walk(root: Expr) -> Iterator[Expr]:
    """Every node of the DAG once, children before parents."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            yield node
            continue
        stack.append((node, True))
        for c in node.children():
            if id(c) not in seen:
                stack.append((c, False))


def loads(root: Expr) -> list[Load]:
    """All Load nodes of an expression."""
    return [n for n in walk(root) if isinstance(n, Load)]


def rewrite(root: Expr, fn: Callable[[Expr, Callable[[Expr], Expr]], Expr | None],
            memo: dict[Expr, Expr] | None = None) -> Expr:
    """Bottom-up rewrite with memoization.

    ``fn(node, recurse)`` returns a replacement or None to rebuild the node from rewritten
    children (``recurse`` rewrites a subexpression, for index atoms that hold expressions).
    Passing the same ``memo`` to several calls with the same ``fn`` shares their work.
    """
    memo = {} if memo is None else memo

    def visit(node: Expr) -> Expr:
        hit = memo.get(node)
        if hit is not None:
            return hit
        out = fn(node, visit)
        if out is None:
            out = _rebuild(node, visit)
        memo[node] = out
        return out

    return visit(root)


def _rebuild(node: Expr, visit: Callable[[Expr], Expr], mapping: dict | None = None) -> Expr:
    """``node`` with rewritten children, and ``mapping`` substituted in its indices."""
    # identity, not equality: comparing equal but distinct subtrees would walk them again
    if isinstance(node, Apply):
        args = tuple(visit(a) for a in node.args)
        same = all(a is b for a, b in zip(args, node.args))
        return node if same else Apply(node.op, args, node.dtype)
    if isinstance(node, Load):
        index = tuple(map_indirect(i, visit).subs(mapping) for i in node.index)
        return node if index == node.index else Load(node.buffer, index, node.dtype)
    if isinstance(node, IndexValue):
        index = map_indirect(node.index, visit).subs(mapping)
        return node if index == node.index else IndexValue(index, node.dtype)
    return node


def map_indirect(index: Index, fn: Callable[[Expr], Expr]) -> Index:
    """Apply ``fn`` to the value expressions of the Indirect atoms inside ``index``."""
    mapping = {}
    for a in index.atoms():
        if type(a) is Indirect:
            new = fn(a.value)
            if new is not a.value:
                mapping[a] = Index.of(Indirect(new, a.bound, a.check))
    return index.subs(mapping) if mapping else index


def substitute_vars(root: Expr, mapping: dict, memo: dict | None = None) -> Expr:
    """Replace loop variables (``Var`` atoms) in every index of ``root``."""
    return rewrite(root, lambda node, visit: _rebuild(node, visit, mapping), memo)


def format_expr(root: Expr, buf: Callable[[str], str] = str, index: Callable[[Index], str] = str,
                named: dict[Expr, str] | None = None) -> str:
    """One-line text of an expression; ``buf`` and ``index`` print buffer names and indices;
    subexpressions in ``named`` print as their name."""
    if named and root in named:
        return named[root]
    if isinstance(root, Const):
        return f"{root.value!r}:{root.dtype.name}"
    if isinstance(root, Load):
        return f"{buf(root.buffer)}[{', '.join(index(i) for i in root.index)}]"
    if isinstance(root, IndexValue):
        return f"index({index(root.index)}):{root.dtype.name}"
    if isinstance(root, AccRef):
        return f"acc({buf(root.name)}.{root.output})"
    if isinstance(root, Apply):
        args = ", ".join(format_expr(a, buf, index, named) for a in root.args)
        suffix = f":{root.dtype.name}" if root.op is Op.CAST else ""
        return f"{root.op.name.lower()}({args}){suffix}"
    raise TypeError(f"not an expression: {type(root).__name__}")
