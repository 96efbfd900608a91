"""Fusion decisions, checked on the schedule and against eager results."""
import math

import torch

import loopnest as ln
from conftest import assert_close
from loopnest.dsl.build import GraphBuilder
from loopnest.dsl.tensor import extern
from loopnest.ir.nodes import Layout
from loopnest.scheduler import schedule


def kernels_of(outputs, inputs):
    layouts = {t.src.name: Layout.contiguous(t.shape) for t in inputs}
    graph = GraphBuilder(layouts).build(inputs, outputs if isinstance(outputs, list) else [outputs])
    return schedule(graph).kernels


def gelu(x):
    return 0.5 * x * (1 + ln.erf(x * (1 / math.sqrt(2))))


def gelu_tanh(x):
    return 0.5 * x * (1 + ln.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def softmax(x):
    e = ln.exp(x - ln.max(x, -1, keepdim=True))
    return e / ln.sum(e, -1, keepdim=True)


def layernorm(x, w, b):
    var, mean = ln.var_mean(x, -1, correction=0, keepdim=True)
    return (x - mean) * ln.rsqrt(var + 1e-5) * w + b


def suite(R=16, C=64):
    """The suite graphs as DSL programs: name -> (outputs, inputs, eager reference fn)."""
    x, y = ln.placeholder("x", (R, C), ln.float32), ln.placeholder("y", (R, C), ln.float32)
    w, b = ln.placeholder("w", (C,), ln.float32), ln.placeholder("b", (C,), ln.float32)
    xb, wb = ln.placeholder("xb", (R, C), ln.bfloat16), ln.placeholder("wb", (C,), ln.bfloat16)
    t = ln.placeholder("t", (R,), ln.int64)
    flat = ln.placeholder("flat", (R * C * 4,), ln.float32)
    xf = ln.cast(xb, ln.float32)
    lse = ln.log(ln.sum(ln.exp(x - ln.max(x, 1, keepdim=True)), 1)) + ln.max(x, 1)
    F = torch.nn.functional
    return {
        "gelu_scale_bias": ([gelu(x * w + b)], [x, w, b], lambda X, W, B: [F.gelu(X * W + B)]),
        "softmax": ([softmax(x)], [x], lambda X: [torch.softmax(X, -1)]),
        "layernorm": ([layernorm(x, w, b)], [x, w, b], lambda X, W, B: [F.layer_norm(X, (C,), W, B)]),
        "rmsnorm_bf16": ([ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, -1, keepdim=True) + 1e-6), ln.bfloat16) * wb],
                         [xb, wb], lambda X, W: [(X.float() * torch.rsqrt(X.float().pow(2).mean(-1, keepdim=True)
                                                                           + 1e-6)).to(torch.bfloat16) * W]),
        "add_layernorm": ([layernorm(x + y, w, b)], [x, y, w, b],
                          lambda X, Y, W, B: [F.layer_norm(X + Y, (C,), W, B)]),
        "sum_dim0": ([ln.sum(x, 0)], [x], lambda X: [X.sum(0)]),
        "full_absmax": ([ln.max(abs(flat))], [flat], lambda X: [X.abs().amax()]),
        "var_mean": (list(ln.var_mean(x, 1)), [x], lambda X: list(torch.var_mean(X, 1))),
        "logsumexp_ce": ([ln.mean(lse - ln.gather(x, 1, t[:, None])[:, 0])], [x, t],
                         lambda X, T: [(torch.logsumexp(X, 1) - X.gather(1, T[:, None]).squeeze(1)).mean()]),
        "bias_gelu_bf16": ([ln.cast(gelu_tanh(ln.cast(xb, ln.float32) + ln.cast(wb, ln.float32)), ln.bfloat16)],
                           [xb, wb], lambda X, W: [F.gelu(X + W, approximate="tanh")]),
    }


# logsumexp_ce: the row loss and the mean over rows reduce over different loops (rows, then
# everything), so the mean is a second kernel; every other graph is a single kernel.
EXPECTED_KERNELS = {"logsumexp_ce": 2}


def random_inputs(inputs):
    out = []
    for p in inputs:
        shape = tuple(int(s.as_int()) for s in p.shape)
        if p.dtype == ln.int64:
            out.append(torch.randint(0, 64, shape))
        else:
            out.append(torch.randn(shape, dtype=p.dtype.torch))
    return out


def test_suite_graphs_kernel_counts_and_results():
    torch.manual_seed(0)
    for name, (outputs, inputs, ref) in suite().items():
        count = len(kernels_of(outputs, inputs))
        assert count == EXPECTED_KERNELS.get(name, 1), f"{name}: {count} kernels"
        args = random_inputs(inputs)
        got = ln.compile(outputs, inputs=inputs)(*args)
        for g, r in zip(got, ref(*args)):
            if r.dtype == torch.bfloat16:  # one bf16 rounding apart at most
                torch.testing.assert_close(g, r, atol=2e-2, rtol=1.6e-2)
            else:
                assert_close(g, r.to(g.dtype) if name == "var_mean" else r, name)


def test_row_loss_is_stored_by_the_row_kernel_and_the_mean_reads_only_it():
    """The loss per row (log-sum-exp minus the gathered target logit) is an epilogue of the row
    reductions; the mean over rows then reads that one buffer, not x, t and the row statistics."""
    outputs, inputs, reference = suite()["logsumexp_ce"]
    rows, mean = kernels_of(outputs, inputs)
    assert set(rows.inputs) == {"x", "t"} and len(rows.outputs) == 1
    assert mean.inputs == rows.outputs and not mean.pdomain
    # a per-row value that reads no row reduction is still inlined into the mean
    x = ln.placeholder("x", (8, 32), ln.float32)
    t = ln.placeholder("t", (8,), ln.int64)
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
