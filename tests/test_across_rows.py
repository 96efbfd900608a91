"""Reductions across rows (``KReduction.across``): a reduction over the rows of a row kernel joins
it, one accumulator per point of the reduced dims, per C++ thread or Triton program, combined
after the rows (a layernorm backward's weight and bias gradients are folded in by the kernel of
its input gradient, which reads the same elements). Triton takes them for rows of a known length
of at most 32768 elements (persistent rows) and keeps longer ones as kernels of their own.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln
from conftest import assert_close
from loopnest.backends import registry
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.triton.params import Strategy, TritonConfig
from loopnest.ir.index import Index, sym
from loopnest.ir.interpret import KernelInterpreter
from loopnest.ir.parser import ParseError
from loopnest.pipeline import compile_graph
from loopnest.scheduler.schedule import schedule
from loopnest.scheduler.serial import kernel_text, parse_kernel
from test_ir_parser import random_inputs, run
from test_triton import DEVICE

CPP = registry.get("cpp")


def _compiled(fn, backend: str = "cpp"):
    return torch.compile(fn, backend="loopnest", options={"backend": backend, "tune": "off"}, dynamic=False)


def _training_step(fn, *args, seed: int = 1):
    """``fn(*args)`` and the gradients of its floating arguments for a random ``grad_out`` (drawn in
    float32 from ``seed``, then cast: the same values at every dtype)."""
    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*args)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype).to(out.device)
    return out, torch.autograd.grad(out, [a for a in args if a.requires_grad], grad_out)


def _norm_backward_kernels(kernel_counts: list):
    def recorder(graph):
        kernel_counts.append(len(graph.compiled.schedule.kernels))
    return recorder


@pytest.mark.parametrize("rows, cols", [(37, 53), (300, 200), (2, 7)])
def test_layernorm_backward_is_one_kernel_and_matches_eager(rows, cols, backend):
    device = DEVICE if backend.name == "triton" else "cpu"  # the interpreter runs on CPU tensors
    x, w, b = (t.to(device) for t in (torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)))
    counts: list = []
    fn = torch.compile(lambda x, w, b: F.layer_norm(x, (cols,), w, b), backend="loopnest",
                       options={"backend": backend.name, "tune": "off", "recorder": _norm_backward_kernels(counts)},
                       dynamic=False)  # Triton keeps reductions across rows of symbolic length apart
    got, got_grads = _training_step(fn, x, w, b)
    want, want_grads = _training_step(lambda x, w, b: F.layer_norm(x, (cols,), w, b), x, w, b)
    assert counts == [1, 1]  # forward, backward: dx, dw and db in one kernel
    assert_close(got, want, "y")
    for name, g, e in zip("xwb", got_grads, want_grads):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")


def test_rmsnorm_bf16_backward_weight_gradient_matches_float64(backend):
    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w

    x, w = torch.randn(96, 64).bfloat16(), torch.randn(64).bfloat16()
    _, (gx, gw) = _training_step(_compiled(rmsnorm, backend.name), x, w)
    _, (wx, ww) = _training_step(rmsnorm, x.double(), w.double())
    assert gw.dtype == torch.bfloat16
    assert (gw.double() - ww).norm() / ww.norm() < 1e-2 and (gx.double() - wx).norm() / wx.norm() < 1e-2


def _graph(outputs, *inputs):
    return ln.compile(outputs).graph(*inputs)


def test_a_column_reduction_before_the_row_reduction_is_reduced_across_its_rows(backend):
    """The column sum comes first in program order: the group turns to the rows of the row sum."""
    x = ln.placeholder("x", (40, 24), ln.float32)
    X = torch.randn(40, 24)
    graph = _graph([ln.sum(x, 0), ln.sum(x * 2, -1)], X)
    (kernel,) = schedule(graph, "k", across_rows=True).kernels
    assert [r.across for r in kernel.reductions] == [True, False] and kernel.pdomain == (40,)
    assert len(schedule(graph, "k").kernels) == 2  # without the backend's consent: two kernels
    cols, rows = compile_graph(graph, backend)(X)
    assert_close(cols, X.sum(0), "column sums")
    assert_close(rows, (X * 2).sum(-1), "row sums")


@pytest.mark.parametrize("threads", [1, 2])
def test_partials_of_several_threads_combine_to_eager_with_nan_propagating(threads):
    """Column sums accumulate in double: one sequential float sum per column over 512 rows erred
    by 1e-5 on sums of 0.1 (a row's sum has 16 vector partials)."""
    x = ln.placeholder("x", (512, 96), ln.float32)
    graph = _graph([ln.sum(ln.exp(x), -1), ln.max(x, 0), ln.sum(x, 0), ln.any(x > 2.5, 0)], torch.randn(512, 96))
    (kernel,) = schedule(graph, "k", across_rows=True).kernels
    assert sum(r.across for r in kernel.reductions) == 3
    X = torch.randn(512, 96, generator=torch.Generator().manual_seed(threads))
    X[400, 5] = float("nan")
    compiled = compile_graph(graph, CPP, configs={kernel.name: CppConfig(threads=threads)})
    rows, mx, sm, an = compiled(X)
    assert_close(rows, X.exp().sum(-1), "row sums")
    assert torch.equal(mx.isnan(), X.amax(0).isnan()) and mx.isnan().sum() == 1
    assert_close(mx, X.amax(0), "column max")
    assert_close(sm, X.sum(0), "column sums")
    assert torch.equal(an, (X > 2.5).any(0))


@pytest.mark.parametrize("xblock, rows", [(1, 509), (4, 509), (8, 40)])
def test_triton_partials_of_every_program_combine_to_eager_with_nan_propagating(xblock, rows):
    """Programs loop over row blocks (the last one partly masked when XBLOCK does not divide the
    rows; fewer programs than ``ACROSS_PROGRAMS`` when there are fewer blocks); a row of 96 in a
    RBLOCK of 128 masks columns too."""
    x = ln.placeholder("x", (rows, 96), ln.float32)
    graph = _graph([ln.sum(ln.exp(x), -1), ln.max(x, 0), ln.sum(x, 0), ln.any(x > 2.5, 0)], torch.randn(rows, 96))
    triton = registry.get("triton")
    (kernel,) = schedule(graph, "k", across_rows=triton.reduces_across_rows).kernels
    assert sum(r.across for r in kernel.reductions) == 3
    X = torch.randn(rows, 96, generator=torch.Generator().manual_seed(xblock))
    X[rows - 3, 5] = float("nan")
    config = TritonConfig(XBLOCK=xblock, RBLOCK=128, num_warps=4, strategy=Strategy.PERSISTENT)
    row_sums, mx, sm, an = compile_graph(graph, triton, configs={kernel.name: config})(X)
    assert_close(row_sums, X.exp().sum(-1), "row sums")
    assert torch.equal(mx.isnan(), X.amax(0).isnan()) and mx.isnan().sum() == 1
    assert_close(mx, X.amax(0), "column max")
    assert_close(sm, X.sum(0), "column sums")
    assert torch.equal(an, (X > 2.5).any(0))


def test_no_rows_give_the_identity(backend):
    x = ln.placeholder("x", (0, 5), ln.float32)
    graph = _graph([ln.sum(x * 3, -1), ln.sum(x, 0)], torch.randn(0, 5))
    rows, cols = compile_graph(graph, backend)(torch.randn(0, 5))
    assert rows.shape == (0,) and torch.equal(cols, torch.zeros(5))


def _across_kernel():
    x = ln.placeholder("x", (33, 20), ln.float32)
    w = ln.placeholder("w", (20,), ln.float32)
    y = x * w
    e = ln.exp(y - ln.max(y, -1, keepdim=True))
    outs = [e / ln.sum(e, -1, keepdim=True), ln.sum(e * x, 0), ln.max(x, 0)]
    (kernel,) = schedule(_graph(outs, torch.randn(33, 20), torch.randn(20)), "k", across_rows=True).kernels
    return kernel


def test_kernels_with_reductions_across_rows_round_trip_as_text_and_match_the_interpreter():
    kernel = _across_kernel()
    text = kernel_text(kernel)
    assert " across level " in text and "\ncol phase 0 " in text
    rebuilt = parse_kernel(text)
    assert kernel_text(rebuilt) == text and rebuilt.structural_hash == kernel.structural_hash
    config = CPP.default_config(kernel)
    assert CPP.codegen(rebuilt, config) == CPP.codegen(kernel, config)
    buffers = random_inputs(kernel, torch.Generator().manual_seed(0))
    launcher = CPP.compile([(rebuilt, config)]).launchers[kernel.name]
    for got, want in zip(run(launcher, rebuilt, buffers), run(KernelInterpreter(rebuilt), rebuilt, buffers)):
        assert not got.isnan().any()
        assert_close(got, want, "C++ against the interpreter")


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace(" max float32 across level", " argmax int64 across level"), ["cannot be reduced across rows"]),
    (lambda t: t.replace("col phase 0 ", "row phase 0 ", 1), ["reads", "reduced across rows"]),
    (lambda t: t.replace(" across level", " level", 1), ["col stores read only reductions across rows"]),
])
def test_broken_across_text_is_a_parse_error(edit, words):
    text = edit(kernel_text(_across_kernel()))
    with pytest.raises(ParseError) as info:
        parse_kernel(text)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_triton_takes_reductions_across_persistent_rows_only():
    """Rows of a known length up to 32768 (one persistent block); longer or symbolic ones keep
    the reduction across them in a kernel of its own, and an across kernel refuses other strategies."""
    triton = registry.get("triton")
    assert triton.reduces_across_rows((Index.of(64), Index.of(512)))
    assert not triton.reduces_across_rows((Index.of(40000),))
    assert not triton.reduces_across_rows((sym("n"),))
    x = ln.placeholder("x", (8, 40000), ln.float32)
    graph = _graph([ln.sum(x, 0), ln.sum(x * 2, -1)], torch.randn(8, 40000))
    assert len(schedule(graph, "k", across_rows=triton.reduces_across_rows).kernels) == 2
    kernel = _across_kernel()
    assert triton.default_config(kernel).strategy is Strategy.PERSISTENT
    looped = TritonConfig(XBLOCK=1, RBLOCK=16, num_warps=4, strategy=Strategy.LOOPED)
    with pytest.raises(ValueError, match="reduces across its rows: that needs the persistent strategy"):
        triton.codegen(kernel, looped)
    assert triton.space(kernel, triton.hardware()).constraint(looped) is not None


def _norm_backward_row_kernel(dtype, rows: int = 300):
    x = ln.placeholder("x", (rows, 1024), dtype)
    g = ln.placeholder("g", (rows, 1024), dtype)
    w = ln.placeholder("w", (1024,), dtype)
    gw = g * w
    outs = [gw - x * ln.sum(gw * x, -1, keepdim=True), ln.sum(g * x, 0)]
    example = [torch.randn(rows, 1024).to(dtype.torch), torch.randn(rows, 1024).to(dtype.torch),
               torch.randn(1024).to(dtype.torch)]
    triton = registry.get("triton")
    (kernel,) = schedule(_graph(outs, *example), "k", across_rows=triton.reduces_across_rows).kernels
    return kernel


def test_triton_across_rows_prefetch_the_next_rows_and_mask_rows_past_the_end():
    """Each tile that streams along the rows is loaded once before the loop and once per step for
    the next rows (masked past ``xnumel``); the weight, the same for every row, is loaded once."""
    source = registry.get("triton").codegen(_norm_backward_row_kernel(ln.float32),
                                            TritonConfig(XBLOCK=4, RBLOCK=1024, num_warps=4))
    loop = source.index("for xstart in range(")
    for ptr in ("b_x", "b_g"):
        loads = [i for i in range(len(source)) if source.startswith(f"tl.load({ptr}", i)]
        assert len(loads) == 2 and loads[0] < loop < loads[1], ptr
        assert "(xnext < xnumel)" in source[loads[1]:source.index("\n", loads[1])]
    assert source.count("tl.load(b_w") == 1 and source.index("tl.load(b_w") < loop


@pytest.mark.parametrize("dtype, warps", [(ln.float32, 4), (ln.bfloat16, 8)])
def test_triton_across_rows_default_holds_32_elements_per_thread_or_16_for_16_bit_tiles(dtype, warps):
    config = registry.get("triton").default_config(_norm_backward_row_kernel(dtype, rows=4096))
    assert (config.XBLOCK, config.RBLOCK, config.num_warps) == (4, 1024, warps)
