"""Fusion decisions and memory planning, checked on the schedule and against eager results.

Kernel counts of the ten suite graphs, as users get them (through ATen), are checked in
tests/test_suite_kernels.py.
"""
import pytest
import torch

import loopnest as ln
from conftest import assert_close
from loopnest.dsl.build import GraphBuilder
from loopnest.dsl.tensor import extern
from loopnest.ir.nodes import Layout
from loopnest.backends import registry
from loopnest.backends.base import schedule_for
from loopnest.scheduler import schedule
from test_backends import kernels_of, softmax


def test_row_loss_is_stored_by_the_row_kernel_and_the_mean_reads_only_it():
    """The loss per row (log-sum-exp minus the gathered target logit) is an epilogue of the row
    reductions; the mean over rows then reads that one buffer, not x, t and the row statistics."""
    x = ln.placeholder("x", (16, 64), ln.float32)
    t = ln.placeholder("t", (16,), ln.int64)
    lse = ln.log(ln.sum(ln.exp(x - ln.max(x, 1, keepdim=True)), 1)) + ln.max(x, 1)
    rows, mean = kernels_of([ln.mean(lse - ln.gather(x, 1, t[:, None])[:, 0])], [x, t])
    assert set(rows.inputs) == {"x", "t"} and len(rows.outputs) == 1
    assert mean.inputs == rows.outputs and not mean.pdomain
    # a per-row value that reads no row reduction is still inlined into the mean
    assert len(kernels_of([ln.mean(ln.gather(x, 1, t[:, None])[:, 0] * 2)], [x, t])) == 1


def test_horizontal_fusion_of_independent_outputs():
    x = ln.placeholder("x", (8, 32), ln.float32)
    y = ln.placeholder("y", (8, 32), ln.float32)
    assert len(kernels_of([ln.exp(x), y * 2, x + y], [x, y])) == 1
    assert len(kernels_of([ln.sum(x, 1), ln.max(y, 1), ln.sum(x, 0)], [x, y])) == 2


def test_nothing_fuses_across_an_extern():
    x = ln.placeholder("x", (8, 16), ln.float32)
    w = ln.placeholder("w", (16, 16), ln.float32)
    (mm,) = extern("aten.mm.default", torch.mm, (ln.exp(x), w), {}, [((8, 16), ln.float32, None)])
    ks = kernels_of([ln.sum(mm * 2, 1)], [x, w])
    assert len(ks) == 2
    X, W = torch.randn(8, 16), torch.randn(16, 16)
    assert_close(ln.compile(ln.sum(mm * 2, 1), inputs=[x, w])(X, W), ((X.exp() @ W) * 2).sum(1))


def test_deep_chain_reloads_stored_values_instead_of_recomputing():
    """Blocks of layernorm + softmax + SiLU: the costly value between blocks is stored once."""
    x = ln.placeholder("x", (16, 64), ln.float32)
    w = ln.placeholder("w", (64,), ln.float32)
    X, W = torch.randn(16, 64), torch.randn(64)
    h, H = x, X
    for _ in range(4):
        var, mean = ln.var_mean(h, -1, correction=0, keepdim=True)
        h = (h - mean) * ln.rsqrt(var + 1e-5) * w
        h = softmax(h) + h * ln.sigmoid(h)
        H = torch.nn.functional.layer_norm(H, (64,), W, None)
        H = torch.softmax(H, -1) + H * torch.sigmoid(H)
    (kernel,) = kernels_of([h], [x, w])
    own = set(kernel.outputs)
    assert any(b in own for b in kernel.inputs), "later phases load what earlier phases stored"
    assert_close(ln.compile(h, inputs=[x, w])(X, W), H, "deep chain")


def test_bytes_and_flops_of_softmax():
    x = ln.placeholder("x", (16, 64), ln.float32)
    (kernel,) = kernels_of([softmax(x)], [x])
    assert kernel.bytes_moved() == 2 * 16 * 64 * 4
    assert kernel.flops().as_int() > 0


def test_memory_planning_reuses_dead_intermediates():
    x = ln.placeholder("x", (8, 16), ln.float32)
    w = ln.placeholder("w", (16, 16), ln.float32)
    spec = [((8, 16), ln.float32, None)]
    (a,) = extern("aten.mm.default", torch.mm, (ln.exp(x), w), {}, spec)
    (b,) = extern("aten.mm.default", torch.mm, (ln.tanh(a), w), {}, spec)
    (c,) = extern("aten.mm.default", torch.mm, (ln.sin(b), w), {}, spec)
    graph = GraphBuilder({"x": Layout.contiguous((8, 16)), "w": Layout.contiguous((16, 16))}).build([x, w], [c])
    plan = schedule(graph).memory
    assert plan.bytes_without_reuse == 3 * 8 * 16 * 4
    assert plan.bytes_with_reuse == 8 * 16 * 4, "each input of an mm is dead once that mm ran"
    X, W = torch.randn(8, 16), torch.randn(16, 16) / 4
    expect = torch.sin(torch.tanh(X.exp() @ W) @ W) @ W
    assert_close(ln.compile(c, inputs=[x, w])(X, W), expect, "planned graph")


@pytest.mark.parametrize("batch, stored", [(32, True), (4, False)])
def test_a_transcendental_table_broadcast_to_many_points_is_stored_once(batch, stored):
    """A rotary embedding's cos/sin table (positions x frequencies) read by every batch and head:
    inlined, each cosine would be computed again at every point it is broadcast to; a reader
    with at least eight times the table's elements gets it stored by a kernel of its own, fewer
    recompute it inline."""
    x = ln.placeholder("x", (batch, 128, 32), ln.float32)
    pos = ln.placeholder("pos", (128, 1), ln.float32)
    freq = ln.placeholder("freq", (1, 32), ln.float32)
    table = ln.cos(pos * freq)
    out = x * table
    kernels = kernels_of([out], [x, pos, freq])
    assert (len(kernels) == 2) == stored
    assert sum("cos(" in k.text() for k in kernels) == 1
    graph = GraphBuilder({p.src.name: Layout.contiguous(p.shape) for p in (x, pos, freq)}).build([x, pos, freq], [out])
    assert len(schedule_for(graph, registry.get("triton")).kernels) == 1  # the GPU recomputes: no launch more
    a, p, f = torch.randn(batch, 128, 32), torch.randn(128, 1), torch.randn(1, 32)
    assert_close(ln.compile(out, backend="cpp")(a, p, f), a * torch.cos(p * f), "x * cos table")
