"""Matmuls over permuted rows run on the rows as they lie in memory.

``x.transpose(0, 1).reshape(-1, k) @ w`` copies ``x`` into the transposed order only to hand the
matmul contiguous rows: a matmul treats its rows independently, so it can run on ``x``'s rows in
memory order instead, and its result be read back in the permuted order by whatever consumes it.
``nn.MultiheadAttention`` with ``batch_first=True`` off its fast path (under ``torch.compile``)
does this twice: its input goes sequence-first for the in-projection, and the attention result
(batch-first in memory) is viewed sequence-first for the out-projection.

``rows_in_memory_order`` rewrites ``mm(view(permute(x)), w)`` (a ``clone`` between them or not;
``addmm`` alike) when the permuted dims that form the matmul's columns are ``x``'s innermost in
memory, and the result's users take the permuted order into a kernel (pointwise ops, views,
copies): then no copy is left on either side.
"""
from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import Graph, GraphModule, Node

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_LAYOUT_ONLY = (*_VIEWS, aten.permute.default, aten.transpose.int, aten.t.default, aten.unsqueeze.default,
                aten.squeeze.dim, aten.squeeze.dims, aten.select.int, aten.slice.Tensor, aten.clone.default,
                aten.alias.default)


def rows_in_memory_order(gm: GraphModule) -> GraphModule:
    """``gm`` with every matmul over permuted rows run on the rows in memory order; ``gm`` itself
    (not copied) when there is none, else a new GraphModule (the caller's graph is left alone)."""
    if not any(_match(n) for n in gm.graph.nodes):
        return gm
    graph = Graph()
    graph._codegen = gm.graph._codegen
    output = graph.output(graph.graph_copy(gm.graph, {}))
    output.meta = dict(next(n for n in reversed(gm.graph.nodes) if n.op == "output").meta)
    for node in list(graph.nodes):
        match = _match(node)
        if match is not None:
            _rewrite(graph, node, *match)
    return GraphModule(gm, graph)


def _match(mm: Node):
    """(x, its memory order, the permuted row dims, the column dim count) when ``mm`` is a
    matmul over permuted rows of ``x`` worth running in memory order; else None."""
    if mm.op != "call_function" or mm.target not in (aten.mm.default, aten.addmm.default):
        return None
    lhs = mm.args[0] if mm.target is aten.mm.default else mm.args[1]
    if mm.target is aten.addmm.default and not _row_broadcast(mm.args[0]):
        return None  # a bias with a row of its own for each row would have to be permuted too
    if not isinstance(lhs, Node) or lhs.target not in _VIEWS or len(lhs.users) != 1:
        return None
    src = lhs.args[0]
    if isinstance(src, Node) and src.target is aten.clone.default and len(src.users) == 1:
        src = src.args[0]
    x, perm = _permutation(src)
    xv, tv, lv = (_val(n) for n in (x, src, lhs))
    operands = [_val(a) for a in mm.args if isinstance(a, Node)]
    if xv is None or tv is None or lv is None or lv.dim() != 2 or not _absorbed(mm) \
            or not all(v is not None and _static(v) for v in (xv, *operands)):
        return None
    order = _memory_order(xv)
    m, k = lv.shape
    cols = next((c for c in range(1, tv.dim()) if math.prod(tv.shape[tv.dim() - c:]) == k), None)
    if order is None or cols is None or math.prod(tv.shape[:tv.dim() - cols]) != m:
        return None
    rows = perm[:len(perm) - cols]
    if order[len(order) - cols:] != perm[len(perm) - cols:] or order[:len(order) - cols] == rows:
        return None  # columns not innermost, or the rows already lie in the permuted order
    return x, order, rows, cols


def _permutation(node) -> tuple[Node | None, list[int]]:
    """(x, dims) when ``node`` is ``x.permute(dims)`` or a transpose of ``x``; else (None, [])."""
    if not isinstance(node, Node) or node.target not in (aten.permute.default, aten.transpose.int):
        return None, []
    x = node.args[0]
    rank = _val(x).dim() if _val(x) is not None else 0
    if node.target is aten.permute.default:
        return x, [d % max(rank, 1) for d in node.args[1]]
    dims, (a, b) = list(range(rank)), (d % max(rank, 1) for d in node.args[1:3])
    dims[a], dims[b] = dims[b], dims[a]
    return x, dims


def _rewrite(graph: Graph, mm: Node, x: Node, order: list[int], rows: list[int], cols: int) -> None:
    """``mm`` computed on ``x``'s rows in memory ``order``, its users given the permuted rows."""
    xv = _val(x)
    mem_rows = order[:len(order) - cols]
    m, k = _val(mm.args[0] if mm.target is aten.mm.default else mm.args[1]).shape
    n = _val(mm).shape[1]
    # traced values of the new nodes, from fakes of their arguments' in one mode of their own
    # (``make_fx`` in real mode gives every node's value a fake mode of its own)
    mode, fakes = FakeTensorMode(), {}

    def fake(a):
        if not isinstance(a, Node):
            return a
        if a not in fakes:
            v = _val(a)
            with mode:
                fakes[a] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
        return fakes[a]

    def call(target, *args, **kwargs) -> Node:
        node = graph.call_function(target, args, kwargs)
        with mode:
            fakes[node] = target(*map(fake, args), **kwargs)
        node.meta["val"] = fakes[node]
        return node

    with graph.inserting_before(mm):
        rows_first = x if order == sorted(order) else call(aten.permute.default, x, list(order))
        flat = call(aten.view.default, rows_first, [m, k])
        args = (flat, mm.args[1]) if mm.target is aten.mm.default else (mm.args[0], flat, *mm.args[2:])
        product = call(mm.target, *args, **mm.kwargs)
        shaped = call(aten.view.default, product, [xv.shape[d] for d in mem_rows] + [n])
        back = call(aten.permute.default, shaped, [mem_rows.index(d) for d in rows] + [len(rows)])
        result = call(aten.view.default, call(aten.clone.default, back, memory_format=torch.contiguous_format),
                      [m, n])
    mm.replace_all_uses_with(result)
    dead = [mm]  # the matmul, then the view, copy and permute that fed it where nothing else reads them
    while dead:
        node = dead.pop()
        inputs = [a for a in node.all_input_nodes if a.op == "call_function"]
        graph.erase_node(node)
        dead += [a for a in inputs if not a.users and a.target in _LAYOUT_ONLY]


def _val(node) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _row_broadcast(bias) -> bool:
    """True if ``bias`` (addmm's first operand) is one value or one row for every row."""
    v = _val(bias) if isinstance(bias, Node) else None
    return not isinstance(bias, Node) or (v is not None and (v.dim() < 2 or v.shape[0] == 1))


def _static(v: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*v.shape, *v.stride()))


def _memory_order(v: torch.Tensor) -> list[int] | None:
    """``v``'s dims outermost first in memory, when ``v`` is a dense permutation of row-major."""
    order = sorted(range(v.dim()), key=lambda d: (-v.stride(d), d))
    step = 1
    for d in reversed(order):
        if v.shape[d] != 1 and v.stride(d) != step:
            return None
        step *= v.shape[d]
    return order


def _absorbed(node: Node) -> bool:
    """True if every use of ``node`` reaches a pointwise op through views and copies alone, so
    the kernel of that op reads the result in whatever order it is laid out."""
    for user in node.users:
        if user.op != "call_function":
            return False
        if user.target in _LAYOUT_ONLY:
            if not _absorbed(user):
                return False
        elif not (isinstance(user.target, torch._ops.OpOverload) and torch.Tag.pointwise in user.target.tags):
            return False
    return True
