"""Stable text of IR graphs and nodes.

The same printer makes the debug text and the canonical text the structural hash is computed
over: in canonical mode buffer names are alpha-renamed in order of first use and integer sizes
are replaced by size placeholders, so the text depends on the computation alone.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from .expr import Apply, Expr, format_expr, uses_in
from .index import FloorDiv, Index, Indirect, Mod, Sym, Var
from .nodes import Buffer, BufferRef, Extern, Graph, Node, Pointwise, Reduction


class Printer:
    """Formats IR; ``canonical=True`` renames buffers and abstracts sizes."""

    def __init__(self, buffers: dict[str, Buffer], canonical: bool = False, order: Sequence[str] = ()):
        self.buffers = buffers
        self.canonical = canonical
        self.names: dict[str, str] = {}
        self.sizes: dict[int, str] = {}
        self.named: dict[Expr, str] = {}
        for name in order:
            self.buf(name)

    # -- names and numbers ----------------------------------------------------------------------
    def buf(self, name: str) -> str:
        if not self.canonical:
            return name
        if name not in self.names:
            self.names[name] = f"b{len(self.names)}"
            b = self.buffers.get(name)
            if b is not None:
                for s in b.sizes:
                    self._size_name(s)
        return self.names[name]

    def _size_name(self, s: Index) -> None:
        c = s.as_int()
        if c is not None and c > 1 and c not in self.sizes:
            self.sizes[c] = f"S{len(self.sizes)}"

    def num(self, n: int) -> str:
        if self.canonical and abs(n) in self.sizes:
            return ("-" if n < 0 else "") + self.sizes[abs(n)]
        return str(n)

    # -- index expressions ----------------------------------------------------------------------
    def index(self, e: Index) -> str:
        if not self.canonical:
            return str(e)
        parts = []
        for m, c in e.terms:
            factors = [self._atom(a) for a in m]
            if c != 1:
                factors.append(self.num(c))
            parts.append("*".join(factors))
        if e.const or not parts:
            parts.append(self.num(e.const))
        return " + ".join(parts)

    def _atom(self, a) -> str:
        if isinstance(a, (Var, Sym)):
            return a.name
        if isinstance(a, FloorDiv):
            return f"({self.index(a.num)} // {self.index(a.den)})"
        if isinstance(a, Mod):
            return f"({self.index(a.num)} % {self.index(a.den)})"
        if isinstance(a, Indirect):
            return f"[{self.expr(a.value)} < {self.index(a.bound)}]"
        return str(a)

    def shape(self, sizes: Iterable[Index]) -> str:
        for s in sizes:
            self._size_name(s)
        return "[" + ", ".join(self.index(s) for s in sizes) + "]"

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, root: Expr) -> str:
        return format_expr(root, self.buf, self.index, self.named)

    def name_shared(self, roots: Iterable[Expr]) -> list[str]:
        """``let %k = ...`` for each compound subexpression ``roots`` reach more than once, in
        definition order; ``expr`` then prints them as ``%k``, so the text grows with the DAG,
        not with the tree it unfolds to (a chain of selects that each read the previous one twice
        unfolds to 2^n terms)."""
        order, uses = uses_in(roots)
        lines = []
        for node in order:
            if isinstance(node, Apply) and uses[node] > 1 and node not in self.named:
                text = self.expr(node)
                self.named[node] = f"%{len(self.named)}"
                lines.append(f"  let {self.named[node]} = {text}")
        return lines

    # -- nodes and graphs -------------------------------------------------------------------------
    def decl(self, name: str) -> str:
        b = self.buffers[name]
        if self.canonical:
            pattern = f" {b.layout.stride_pattern()}"
        else:
            pattern = f" strides({', '.join(str(s) for s in b.layout.strides)})"
        return f"{self.buf(name)}: {b.dtype.name}{self.shape(b.sizes)}{pattern}"

    def node(self, n: Node) -> str:
        if isinstance(n, Pointwise):
            label = "" if self.canonical else f"  # {n.name}"
            return f"{self.decl(n.out)} = pointwise{self.shape(n.domain)} {self.expr(n.body)}{label}"
        if isinstance(n, Reduction):
            outs = ", ".join(self.decl(o) for o in n.outs)
            label = "" if self.canonical else f"  # {n.name}"
            return (f"{outs} = {n.op.value}{self.shape(n.domain)} over r{self.shape(n.rdomain)} "
                    f"{self.expr(n.body)}{label}")
        if isinstance(n, Extern):
            outs = ", ".join(self.decl(o) for o in n.outs)
            return f"{outs} = extern {n.target}({_extern_args(n, self.buf)})"
        raise TypeError(f"not a node: {n!r}")

    def graph(self, g: Graph) -> str:
        head = ", ".join(self.decl(i) for i in g.inputs)
        lines = [f"graph({head}):"]
        lines += ["  " + self.node(n) for n in g.nodes]
        outs = ", ".join(self.buf(o.buffer) for o in g.outputs)
        lines.append(f"  return ({outs})")
        return "\n".join(lines)


def _extern_args(n: Extern, buf: Callable[[str], str]) -> str:
    def fmt(a):
        if isinstance(a, BufferRef):
            return buf(a.name)
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(fmt(x) for x in a) + "]"
        return repr(a)

    parts = [fmt(a) for a in n.args] + [f"{k}={fmt(v)}" for k, v in sorted(n.kwargs.items())]
    return ", ".join(parts)


def format_graph(g: Graph) -> str:
    """Readable text of a graph."""
    return Printer(g.buffers).graph(g)


def format_node(n: Node, buffers: dict[str, Buffer]) -> str:
    """Readable one-line text of a node."""
    return Printer(buffers).node(n)
