"""Fusion: inline pointwise producers, group the remaining nodes into loop nests, build kernels.

1. ``inline_pointwise`` substitutes every pointwise node that is not a graph output or an extern
   argument into its consumers (vertical and prologue fusion; codegen's CSE removes repeats),
   except a per-row epilogue of a reduction that feeds a reduction over those rows: that one is
   stored by the row kernel (one row-sized value instead of several, gathers done in parallel).
2. ``group_nodes`` visits the remaining nodes in order and adds each to an earlier group when
   its loops line up with the group's (same rows and reduced dimensions, or the rows alone, or
   the full domain) and every value it reads from the group is the one computed at the same
   point; otherwise it opens a new group. Externs are groups of their own and never fuse. For a
   backend that runs reductions across rows (``Backend.reduces_across_rows``, asked with the
   group's reduced dims), a reduction over the rows of a row group joins it as one (a layernorm
   backward's weight and bias gradients join the kernel of its input gradient, which reads the
   same elements): ``across`` members.
3. ``build_kernel`` rewrites a group into a ``Kernel``: reads of the group's reductions become
   accumulator references, and only values needed outside the group are stored.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable

from ..core.trees import leaves
from ..ir.affine_positions import affine_index
from ..ir.expr import (AccRef, Apply, Expr, IndexValue, Indirect, Load, loads, map_indirect, rewrite,
                       substitute_vars, walk)
from ..ir.index import Index, as_var, product
from ..ir.ops import TRANSCENDENTAL, Op
from ..ir.nodes import (BufferRef, Extern, Graph, KReduction, KStore, Node, Pointwise, Reduction, domain_vars,
                        interleave)
from .kernel import Kernel, count_ops


AcrossRows = Callable[[tuple[Index, ...]], bool]  # may reductions across rows join a kernel reducing these dims?


def never(rdomain: tuple[Index, ...]) -> bool:
    """``AcrossRows`` of a backend that runs no reductions across rows."""
    return False


def always(rdomain: tuple[Index, ...]) -> bool:
    """``AcrossRows`` of a backend that runs reductions across the rows of any row kernel."""
    return True


# -- 1. inlining --------------------------------------------------------------------------------
def extern_buffers(graph: Graph) -> set[str]:
    """Buffers passed to extern calls (they must exist in memory)."""
    names: set[str] = set()
    for n in graph.nodes:
        if isinstance(n, Extern):
            names |= {a.name for a in leaves((n.args, n.kwargs)) if isinstance(a, BufferRef)}
    return names


# A pointwise value is stored rather than recomputed by each reader when its body is this large,
# or this large and read by several nodes.
MAX_INLINE_OPS = 96
MAX_SHARED_INLINE_OPS = 24
# A value holding transcendental ops is stored when every reader's loop nest has at least this
# many times its elements (a rotary embedding's cos/sin table, broadcast over batch and heads).
MIN_BROADCAST_TO_STORE = 8


def inline_pointwise(graph: Graph, store_tables: bool = True) -> list[Node]:
    """The graph's nodes with cheap pointwise nodes substituted into their readers.

    Graph outputs, extern arguments and values too costly to recompute stay as nodes
    (materialized), and with ``store_tables`` transcendental values broadcast to many points
    (``_broadcast_costly``); everything else is inlined.
    """
    keep = {o.buffer for o in graph.outputs} | extern_buffers(graph)
    consumers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for b in node_reads(n):
            consumers.setdefault(b, []).append(n)
    producers = {o: n for n in graph.nodes for o in n.outputs}
    bodies: dict[str, tuple[tuple[Index, ...], Expr]] = {}
    result: list[Node] = []
    for n in graph.nodes:
        if isinstance(n, Extern):
            result.append(n)
            continue
        body = inline_loads(n.body, bodies)
        readers = consumers.get(n.outputs[0], [])
        if (isinstance(n, Pointwise) and n.out not in keep and not _costly(body, len(readers))
                and not _row_epilogue(n, body, producers, readers)
                and not (store_tables and _broadcast_costly(n, body, readers))):
            bodies[n.out] = (n.index_vars(), body)
        else:
            result.append(dataclasses.replace(n, body=body))
    return result


def _costly(body: Expr, readers: int) -> bool:
    ops = count_ops(body)
    return ops > MAX_INLINE_OPS or (readers > 1 and ops > MAX_SHARED_INLINE_OPS)


def _broadcast_costly(n: Pointwise, body: Expr, readers: list[Node]) -> bool:
    """True when ``n``'s body calls transcendental functions and every reader's loop nest has at
    least ``MIN_BROADCAST_TO_STORE`` times ``n``'s elements: inlined, each value would be computed
    again for every point it is broadcast to (a rotary table of 128x32 cosines recomputed for
    each of 32 batch and head pairs cost a LLaMA block 4.3 ms on 2 cores, eager 0.3)."""
    size = product(n.domain).as_int()
    if size is None or not readers or not any(isinstance(x, Apply) and x.op in TRANSCENDENTAL for x in walk(body)):
        return False
    for r in readers:
        reach = product(loop_shape(r).full).as_int()
        if reach is None or reach < MIN_BROADCAST_TO_STORE * max(size, 1):
            return False
    return True


def _row_epilogue(n: Pointwise, body: Expr, producers: dict[str, Node], readers: list[Node]) -> bool:
    """True when ``n`` computes per row from a reduction's results over the same rows, and only
    reductions over those rows read it (a loss per row, then its mean). Stored by the row kernel,
    the reader loads one row-sized value, not every buffer and gather ``n`` reads."""
    rows = loop_shape(n).p
    if not rows or not readers or not all(isinstance(r, Reduction) and loop_shape(r).p != rows for r in readers):
        return False
    reads = loads(body)
    if not any(isinstance(producers.get(x.buffer), Reduction) and loop_shape(producers[x.buffer]).p == rows
               for x in reads):
        return False
    gathers = any(isinstance(a, Indirect) for x in reads for i in x.index for a in i.atoms())
    return gathers or len({x.buffer for x in reads}) > 1


def inline_loads(body: Expr, bodies: dict[str, tuple[tuple[Index, ...], Expr]]) -> Expr:
    """Replace loads of buffers in ``bodies`` by the producer's body at the load's index."""

    def fn(node: Expr, visit):
        if isinstance(node, Load):
            index = tuple(affine_index(map_indirect(i, visit)) for i in node.index)
            if node.buffer in bodies:
                pvars, pbody = bodies[node.buffer]
                return substitute_vars(pbody, {as_var(v): i for v, i in zip(pvars, index)})
            return Load(node.buffer, index, node.dtype)
        if isinstance(node, Apply) and node.op is Op.CAST:
            arg = visit(node.args[0])
            if arg.dtype == node.dtype:  # a copy (or a cast of a cast) inlined: rounding twice is once
                return arg
            return node if arg is node.args[0] else Apply(Op.CAST, (arg,), node.dtype)
        return None

    return rewrite(body, fn)


# -- 2. grouping --------------------------------------------------------------------------------
def squeeze(sizes) -> tuple[Index, ...]:
    return tuple(s for s in sizes if s != 1)


@dataclass(frozen=True)
class LoopShape:
    """Rows ``p`` and reduced dims ``r`` (size-1 dims dropped); ``raxes`` place r in the full domain."""

    p: tuple[Index, ...]
    r: tuple[Index, ...] = ()
    raxes: tuple[int, ...] = ()

    @property
    def full(self) -> tuple[Index, ...]:
        return interleave(self.p, self.r, self.raxes)


def loop_shape(n: Node) -> LoopShape:
    """The loop structure of a pointwise or reduction node."""
    if isinstance(n, Pointwise):
        return LoopShape(squeeze(n.domain))
    flags = [k in n.axes for k in range(len(n.domain) + len(n.rdomain))]
    full = n.full_domain()
    kept = [(s, f) for s, f in zip(full, flags) if s != 1]
    p = tuple(s for s, f in kept if not f)
    r = tuple(s for s, f in kept if f)
    raxes = tuple(k for k, (_, f) in enumerate(kept) if f)
    if not r:  # only unit dims are reduced: keep one reduction loop of extent 1
        return LoopShape(p, (Index.of(1),), (len(p),))
    return LoopShape(p, r, raxes)


def _assign(variables, sizes, targets) -> dict:
    """Map the non-unit loop variables over ``sizes`` onto ``targets`` (unit ones onto 0)."""
    it = iter(targets)
    return {as_var(v): Index.of(0) if s == 1 else next(it) for v, s in zip(variables, sizes)}


@dataclass
class Member:
    """A node placed in a group: its variables mapped onto the kernel's."""

    node: Node
    mapping: dict
    row_level: bool  # a pointwise node over the rows only (runs after the reduction loops)
    across: bool = False  # a reduction over the group's rows (``KReduction.across``)

    @functools.cached_property
    def out_index(self) -> tuple[Index, ...]:
        """The index of the node's outputs in kernel variables."""
        return tuple(v.subs(self.mapping) for v in self.node.index_vars())

    @functools.cached_property
    def reads(self) -> dict[str, set[tuple[Index, ...]]]:
        """Every buffer the node loads, with the indices it loads it at, in kernel variables."""
        out: dict[str, set] = {}
        for ld in loads(self.node.body):
            out.setdefault(ld.buffer, set()).add(tuple(i.subs(self.mapping) for i in ld.index))
        return out


def place(n: Node, shape: LoopShape, across_rows: AcrossRows = never) -> Member | None:
    """Map node ``n`` into a kernel of loop shape ``shape``, or None if the loops do not line up;
    ``across_rows(shape.r)``: a reduction over the kernel's rows may join as one (``_across``)."""
    pv = domain_vars(shape.p, "p")
    rv = domain_vars(shape.r, "r")
    if isinstance(n, Reduction):
        mine = loop_shape(n)
        if mine != shape:
            return _across(n, shape) if shape.r and across_rows(shape.r) else None
        mapping = _assign(n.index_vars(), n.domain, pv)
        mapping.update(_assign(n.reduction_vars(), n.rdomain, rv))
        return Member(n, mapping, row_level=False)
    sq = squeeze(n.domain)
    if sq == shape.full:
        return Member(n, _assign(n.index_vars(), n.domain, interleave(pv, rv, shape.raxes)), False)
    if shape.r and sq == shape.p:
        return Member(n, _assign(n.index_vars(), n.domain, pv), row_level=True)
    return None


def _across(n: Reduction, shape: LoopShape) -> Member | None:
    """``n`` as a reduction across the rows of a kernel of ``shape``: same full domain, ``n``
    reduces exactly the rows and keeps the reduced dims. Only for row kernels that reduce their
    trailing dims (the rows of a row-major tensor, whose elements the kernel reads in order)."""
    mine = loop_shape(n)
    full = shape.full
    if not (shape.p and shape.r) or mine.full != full or n.op.spec.joint is not None:
        return None
    if shape.raxes != tuple(range(len(shape.p), len(full))) or mine.raxes != tuple(range(len(shape.p))):
        return None
    kernel_vars = iter(interleave(domain_vars(shape.p, "p"), domain_vars(shape.r, "r"), shape.raxes))
    ivars, rvars = iter(n.index_vars()), iter(n.reduction_vars())
    mapping = {}
    for k, size in enumerate(n.full_domain()):
        v = next(rvars) if k in n.axes else next(ivars)
        mapping[as_var(v)] = Index.of(0) if size == 1 else next(kernel_vars)
    return Member(n, mapping, row_level=False, across=True)


@dataclass
class Group:
    """Nodes that will become one kernel (or one extern call)."""

    index: int
    shape: LoopShape | None  # None for an extern
    members: list[Member] = field(default_factory=list)

    @property
    def nodes(self) -> list[Node]:
        return [m.node for m in self.members]

    def produces(self) -> set[str]:
        return {o for m in self.members for o in m.node.outputs}


def _rebind(members: list[Member], shape: LoopShape, across_rows: AcrossRows = never) -> list[Member] | None:
    out = [place(m.node, shape, across_rows) for m in members]
    return None if any(m is None for m in out) else out


def node_reads(n: Node) -> set[str]:
    if isinstance(n, Extern):
        return extern_buffers(Graph(nodes=[n]))
    return {x.buffer for x in loads(n.body)}


def group_nodes(nodes: list[Node], across_rows: AcrossRows = never) -> list[Group]:
    """Greedy fusion in program order (see the module docstring); ``across_rows``: whether
    reductions over the rows of a row group reducing the given dims may join it."""
    groups: list[Group] = []
    owner: dict[str, Group] = {}
    for n in nodes:
        placed = None if isinstance(n, Extern) else _try_join(n, groups, owner, across_rows)
        if placed is None:
            shape = None if isinstance(n, Extern) else loop_shape(n)
            placed = Group(len(groups), shape, [Member(n, {}, False) if shape is None else place(n, shape)])
            groups.append(placed)
        for o in n.outputs:
            owner[o] = placed
    return groups


def _try_join(n: Node, groups: list[Group], owner: dict[str, Group], across_rows: AcrossRows) -> Group | None:
    reads = node_reads(n)
    deps = {owner[b].index for b in reads if b in owner}
    latest = max(deps, default=-1)
    # producers first (they save the most bytes), most recent first; then independent groups
    candidates = sorted((g for g in groups if g.shape is not None and g.index >= latest),
                        key=lambda g: (g.index not in deps, -g.index))
    for g in candidates:
        trial = _candidate(g, n, across_rows)
        if trial is not None and _legal(trial):
            g.shape, g.members = trial
            return g
    return None


def _candidate(g: Group, n: Node, across_rows: AcrossRows):
    member = place(n, g.shape, across_rows)
    if member is not None:
        return g.shape, g.members + [member]
    if isinstance(n, Reduction):
        shape = loop_shape(n)
        if shape.full == g.shape.full:
            # a pointwise group takes the reduction's loops; a group of reductions over other dims
            # of the same domain is reduced across the rows of ``n``'s (when the backend can)
            rebound = _rebind(g.members, shape, across_rows if g.shape.r else never)
            if rebound is not None:
                return shape, rebound + [place(n, shape)]
    return None


def _legal(trial) -> bool:
    """Every read of a value the group computes must be at the point the group computes it, and
    nothing in the group reads a reduction across its rows (final only after the last row)."""
    _, members = trial
    index_of: dict[str, tuple] = {}
    across = {o for m in members if m.across for o in m.node.outputs}
    for m in members:
        for o in m.node.outputs:
            index_of[o] = m.out_index
    for m in members:
        for buffer, indices in m.reads.items():
            if buffer in across or (buffer in index_of and any(i != index_of[buffer] for i in indices)):
                return False
    return True


# -- 3. kernels -----------------------------------------------------------------------------------
def build_kernel(group: Group, graph: Graph, needed_outside: set[str], name: str) -> Kernel:
    """Turn a group into a kernel that stores the buffers in ``needed_outside``.

    A pointwise value a later phase reads is stored by its own phase and loaded back (the row is
    the same thread's, and still in cache) instead of being recomputed.
    """
    values: dict[str, tuple[Expr, int, tuple]] = {}  # buffer -> (value, phase, index) in kernel vars
    acc_of: dict[str, AccRef] = {}                    # reduction output -> its accumulator
    levels: dict[str, int] = {}                       # accumulator -> phase whose loop computes it
    reloaded: set[str] = set()
    reductions, elem, row, col = [], [], [], []
    var_memos: dict[frozenset, dict] = {}   # members with the same variable mapping share work
    body_memos: dict[int | None, dict] = {}
    for m in group.members:
        body = substitute_vars(m.node.body, m.mapping, var_memos.setdefault(frozenset(m.mapping.items()), {}))
        phase = _first_phase(_kernel_body(body, values, acc_of, None, body_memos.setdefault(None, {})), levels)
        body = _kernel_body(body, values, acc_of, phase, body_memos.setdefault(phase, {}), reloaded)
        if isinstance(m.node, Reduction):
            acc = m.node.outs[0]
            levels[acc] = phase
            reductions.append(KReduction(acc, m.node.op, body, body.dtype, phase, m.across))
            for k, o in enumerate(m.node.outs):
                acc_of[o] = AccRef(acc, k, graph.buffers[o].dtype)
                if o in needed_outside:
                    (col if m.across else row).append(KStore(o, m.out_index, acc_of[o]))
            continue
        values[m.node.out] = (body, -1 if m.row_level else phase, m.out_index)
    for m in group.members:
        if isinstance(m.node, Pointwise) and (m.node.out in needed_outside or m.node.out in reloaded):
            body, phase, index = values[m.node.out]
            (row if m.row_level else elem).append(KStore(m.node.out, index, body, max(phase, 0)))
    return Kernel(name, group.shape.p, group.shape.r, reductions, elem, row,
                  [n.name for n in group.nodes], graph.buffers, col)


def _kernel_body(body: Expr, values, acc_of: dict[str, AccRef], phase: int | None, memo: dict,
                 reloaded: set[str] | None = None) -> Expr:
    """Reads of in-kernel results become accumulator references, values, or reloads.

    ``memo`` may be shared by calls for the same ``phase``: a load's replacement never changes
    once its producer is known, and later producers are never read by earlier bodies.
    """
    def fn(node: Expr, visit):
        if isinstance(node, Load):
            if node.buffer in values:
                value, stored_phase, index = values[node.buffer]
                if phase is not None and 0 <= stored_phase < phase:
                    if reloaded is not None:
                        reloaded.add(node.buffer)
                    return Load(node.buffer, index, node.dtype)
                return value
            if node.buffer in acc_of:
                return acc_of[node.buffer]
            return Load(node.buffer, tuple(map_indirect(i, visit) for i in node.index), node.dtype)
        if isinstance(node, IndexValue):
            return IndexValue(map_indirect(node.index, visit), node.dtype)
        return None

    return rewrite(body, fn, memo)


def _first_phase(body: Expr, levels: dict[str, int]) -> int:
    """The first loop phase in which every accumulator ``body`` reads is final."""
    return max((levels[n.name] + 1 for n in walk(body) if isinstance(n, AccRef)), default=0)
