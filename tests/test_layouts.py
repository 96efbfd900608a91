"""Graph outputs and ATen arguments computed in the layout eager gives them
(``lowering.tensors.in_layout``): channels-last activations, a transpose's result."""
import torch
import torch.nn.functional as F

import loopnest as ln
from loopnest.lowering.tensors import in_layout


def compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="loopnest", options={"backend": "cpp"})


def test_channels_last_pointwise_output_has_eager_strides():
    x = torch.randn(2, 24, 7, 9, generator=torch.Generator().manual_seed(0)).to(memory_format=torch.channels_last)

    def fn(x):
        return torch.relu(x * 2 - 1)

    got, want = compiled(fn)(x), fn(x)
    assert got.stride() == want.stride() and torch.equal(got, want)
    (kernel,) = ln.explain(fn, x, backend="cpp", tune="off").graphs[0].kernels
    assert "#pragma omp simd" in kernel.source_path.read_text()


def test_transposed_result_keeps_eager_layout():
    x = torch.randn(40, 33, generator=torch.Generator().manual_seed(1))

    def fn(x):
        return x.t() + 1

    got, want = compiled(fn)(x), fn(x)
    assert got.stride() == want.stride() == (1, 33) and torch.equal(got, want)


def test_convolution_gets_its_argument_channels_last():
    gen = torch.Generator().manual_seed(2)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1).eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 16, 12, 12, generator=gen).to(memory_format=torch.channels_last)

    def fn(x):
        h = F.relu(conv(x) * 0.5)
        return F.max_pool2d(conv(h) + x, 2)

    with torch.no_grad():
        got, want = compiled(fn)(x), fn(x)
        graph = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(graph.kernels) == 2  # relu(conv * 0.5), conv + x: each written channels-last once


def test_row_major_and_symbolic_layouts_stay_as_they_are():
    t = ln.placeholder("t", (4, 5), ln.float32) * 2.0
    assert in_layout(t, torch.empty(4, 5)) is t
    assert in_layout(t, torch.empty(5, 4).t()) is not t
    assert in_layout(t, torch.empty(4, 10)[:, ::2]) is t  # not dense: left to the runtime
