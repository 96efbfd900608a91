"""IR printer, verifier and structural hash."""
import subprocess
import sys

import pytest
import torch

import loopnest as ln
from loopnest.dsl.build import GraphBuilder
from loopnest.dsl.compile import _layout
from loopnest.ir import dtypes as dt
from loopnest.ir.expr import Apply, Const, Load
from loopnest.ir.nodes import Buffer, BufferKind, Graph, Layout, OutputView, Pointwise, domain_vars
from loopnest.ir.ops import Op
from loopnest.ir.printer import format_graph
from loopnest.ir.verify import IRError, verify
from loopnest.scheduler import schedule


def softmax_hash(rows, cols, dtype=ln.float32, name="x", transpose=False, op=ln.exp):
    x = ln.placeholder(name, (rows, cols), dtype)
    m = ln.max(x, 1, keepdim=True)
    e = op(x - m)
    y = e / ln.sum(e, 1, keepdim=True)
    t = torch.empty(rows, cols, dtype=dtype.torch)
    if transpose:
        t = torch.empty(cols, rows, dtype=dtype.torch).T
    graph = GraphBuilder({name: _layout(x, t)}).build([x], [y])
    kernels = schedule(graph).kernels
    assert len(kernels) == 1
    return kernels[0].structural_hash


def test_structural_hash_ignores_names_and_sizes():
    assert softmax_hash(8, 32) == softmax_hash(16, 64, name="other")


@pytest.mark.parametrize("change", [
    dict(dtype=ln.float64), dict(transpose=True), dict(op=ln.sigmoid),
])
def test_structural_hash_sees_dtype_layout_and_op(change):
    assert softmax_hash(8, 32) != softmax_hash(8, 32, **change)


def test_structural_hash_sees_rank_and_broadcast():
    def h(shape_y):
        x = ln.placeholder("x", (4, 8), ln.float32)
        y = ln.placeholder("y", shape_y, ln.float32)
        layouts = {"x": Layout.contiguous((4, 8)), "y": Layout.contiguous(shape_y)}
        g = GraphBuilder(layouts).build([x, y], [x + y])
        return schedule(g).kernels[0].structural_hash

    assert len({h((4, 8)), h((8,)), h((4, 1))}) == 3


def test_structural_hash_is_stable_across_processes():
    code = ("import sys; sys.path.insert(0, %r); from test_ir import softmax_hash; print(softmax_hash(8, 32))"
            % str(__import__("pathlib").Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == softmax_hash(8, 32)


def test_printer_is_stable_and_readable():
    x = ln.placeholder("x", ("N", 16), ln.float32)
    y = ln.sum(ln.exp(x), 1)
    g = GraphBuilder({"x": Layout.contiguous(x.shape)}).build([x], [y])
    text = format_graph(g)
    assert text == format_graph(g)
    assert "x: float32[N, 16] strides(16, 1)" in text
    assert "pointwise[N, 16] exp(x[i0, i1])" in text and "sum[N] over r[16] buf1[i0, r0]" in text


def _graph_with_body(body, out_dtype=dt.float32):
    g = Graph()
    g.add_buffer(Buffer("x", dt.float32, Layout.contiguous((4,)), BufferKind.INPUT))
    g.add_buffer(Buffer("y", out_dtype, Layout.contiguous((4,)), BufferKind.OUTPUT))
    g.inputs.append("x")
    g.nodes.append(Pointwise("node0", "y", (4,), body))
    g.outputs.append(OutputView("y", g.buffers["y"].layout))
    return g


def test_verifier_names_node_op_and_dtype():
    (i0,) = domain_vars((4,), "i")
    good = Apply(Op.ADD, (Load("x", (i0,), dt.float32), Const(1.0, dt.float32)), dt.float32)
    verify(_graph_with_body(good))
    mixed = Apply(Op.ADD, (Load("x", (i0,), dt.float32), Const(1, dt.int64)), dt.float32)
    with pytest.raises(IRError, match=r"node0: add mixes dtypes float32, int64"):
        verify(_graph_with_body(mixed))
    with pytest.raises(IRError, match=r"node0: loads rank-1 buffer x with 2 indices"):
        verify(_graph_with_body(Load("x", (i0, i0), dt.float32)))
    with pytest.raises(IRError, match=r"body computes float32 but y is int64"):
        verify(_graph_with_body(good, dt.int64))
    (j0,) = domain_vars((9,), "j")
    with pytest.raises(IRError, match=r"loop variable j0"):
        verify(_graph_with_body(Load("x", (j0,), dt.float32)))
