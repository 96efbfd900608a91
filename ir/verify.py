"""The IR verifier: structural and type checks with errors that name node, op, shape and dtype."""
from __future__ import annotations

from .dtypes import bool_, int64
from .expr import AccRef, Apply, Const, Expr, IndexValue, Load, walk
from .index import Var
from .nodes import Extern, Graph, Node, Pointwise, Reduction
from .ops import COMPARISONS, Op, PREDICATES, ReduceOp
from .printer import format_node


class IRError(ValueError):
    """The IR is malformed; the message names the node and the offending op, shape or dtype."""


def verify(graph: Graph) -> None:
    """Check ``graph``; raise IRError on the first problem."""
    written: set[str] = set(graph.inputs)
    for name in graph.inputs:
        if name not in graph.buffers:
            raise IRError(f"graph input {name!r} has no buffer")
    for node in graph.nodes:
        _verify_node(graph, node, written)
        for out in node.outputs:
            if out in written:
                raise IRError(f"buffer {out!r} is written twice (again by node {node.name})")
            written.add(out)
    for out in graph.outputs:
        if out.buffer not in written:
            raise IRError(f"graph output {out.buffer!r} is never written")


def _fail(graph: Graph, node: Node, msg: str) -> IRError:
    return IRError(f"node {node.name}: {msg}\n  in: {format_node(node, graph.buffers)}")


def _verify_node(graph: Graph, node: Node, written: set[str]) -> None:
    for out in node.outputs:
        if out not in graph.buffers:
            raise _fail(graph, node, f"writes unknown buffer {out!r}")
    if isinstance(node, Extern):
        return
    allowed = {v for e in node.index_vars() for v in e.free_vars()}
    if isinstance(node, Reduction):
        allowed |= {v for e in node.reduction_vars() for v in e.free_vars()}
    out_bufs = [graph.buffers[o] for o in node.outputs]
    for b in out_bufs:
        if tuple(b.sizes) != tuple(node.domain):
            raise _fail(graph, node, f"output {b.name} has shape {list(map(str, b.sizes))} but the "
                        f"domain is {list(map(str, node.domain))}")
    if isinstance(node, Pointwise) and node.body.dtype != out_bufs[0].dtype:
        raise _fail(graph, node, f"body computes {node.body.dtype.name} but {node.out} is "
                    f"{out_bufs[0].dtype.name}")
    if isinstance(node, Reduction):
        _verify_reduction(graph, node, out_bufs)
    for e in walk(node.body):
        _verify_expr(graph, node, e, allowed, written)


def _verify_reduction(graph: Graph, node: Reduction, out_bufs) -> None:
    if len(node.outs) != node.op.num_outputs:
        raise _fail(graph, node, f"{node.op.value} writes {node.op.num_outputs} outputs, got {len(node.outs)}")
    if node.op.is_arg and out_bufs[0].dtype != int64:
        raise _fail(graph, node, f"{node.op.value} must write int64, not {out_bufs[0].dtype.name}")
    if node.op in (ReduceOp.ANY, ReduceOp.ALL) and node.body.dtype != bool_:
        raise _fail(graph, node, f"{node.op.value} reduces bool values, got {node.body.dtype.name}")
    if node.op in (ReduceOp.WELFORD, ReduceOp.EXP_SUM) and not node.body.dtype.is_float:
        raise _fail(graph, node, f"{node.op.value} needs a floating-point body, got {node.body.dtype.name}")


def _verify_expr(graph: Graph, node: Node, e: Expr, allowed: set, written: set[str]) -> None:
    if isinstance(e, Load):
        buf = graph.buffers.get(e.buffer)
        if buf is None:
            raise _fail(graph, node, f"loads unknown buffer {e.buffer!r}")
        if e.buffer not in written:
            raise _fail(graph, node, f"loads {e.buffer} before any node writes it")
        if len(e.index) != len(buf.sizes):
            raise _fail(graph, node, f"loads rank-{len(buf.sizes)} buffer {e.buffer} with "
                        f"{len(e.index)} indices")
        if e.dtype != buf.dtype:
            raise _fail(graph, node, f"loads {e.buffer} as {e.dtype.name} but it holds {buf.dtype.name}")
        _check_vars(graph, node, [i for i in e.index], allowed)
    elif isinstance(e, IndexValue):
        _check_vars(graph, node, [e.index], allowed)
    elif isinstance(e, Apply):
        _verify_apply(graph, node, e)
    elif not isinstance(e, (Const, AccRef)):
        raise _fail(graph, node, f"unknown expression {type(e).__name__}")


def _check_vars(graph, node, indices, allowed) -> None:
    for i in indices:
        for v in i.free_vars():
            if isinstance(v, Var) and v not in allowed:
                raise _fail(graph, node, f"index {i} uses loop variable {v.name} (extent {v.size}) "
                            f"outside the node's loops")


def _verify_apply(graph: Graph, node: Node, e: Apply) -> None:
    problem = apply_problem(e)
    if problem:
        raise _fail(graph, node, problem)


def apply_problem(e: Apply) -> str | None:
    """What is wrong with the operand and result dtypes of ``e``, or None if they agree."""
    op = e.op
    dtypes = [a.dtype for a in e.args]
    if op is Op.CAST:
        return None
    if op is Op.WHERE:
        if dtypes[0] != bool_ or dtypes[1] != dtypes[2] or dtypes[1] != e.dtype:
            return (f"where(cond, a, b) needs a bool cond and a, b of the result dtype {e.dtype.name}; "
                    f"got {', '.join(d.name for d in dtypes)}")
        return None
    if len(set(dtypes)) > 1:
        return f"{op.name.lower()} mixes dtypes {', '.join(d.name for d in dtypes)}; insert a cast"
    if op in PREDICATES and e.dtype != bool_:
        return f"{op.name.lower()} returns bool, not {e.dtype.name}"
    if op not in PREDICATES and op not in COMPARISONS and e.dtype != dtypes[0]:
        return f"{op.name.lower()} of {dtypes[0].name} operands cannot produce {e.dtype.name}; insert a cast"
    return None
