"""CPU convolutions run channels-last where that pays (``lowering/conv_layout.py``): depthwise
and 1x1 convolutions take channels-last inputs and give channels-last results, the kernels
around them read and write those, and every result matches eager, graph outputs in eager's
layout."""
import pytest
import torch
import torch.nn as nn

from conftest import assert_close


def _inverted_residual(c=8, e=3):
    h = c * e
    return nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                         nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                         nn.Conv2d(h, c, 1), nn.BatchNorm2d(c))


def _randomized(m: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for p in (*m.parameters(), *m.buffers()):
            if p.is_floating_point():
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5 if p.ndim == 1 else torch.randn(p.shape, generator=gen))
    return m.eval()


def _run(fn, x, what: str):
    """The compiled graph of ``fn`` on ``x``, after checking its result (and strides) against eager's."""
    torch._dynamo.reset()
    graphs = []
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off",
                                                              "recorder": graphs.append})
    with torch.no_grad():
        got, want = compiled(x), fn(x)
    assert_close(got, want, what)
    assert got.stride() == want.stride()
    return graphs[-1].compiled


@pytest.mark.parametrize("shape", [(2, 8, 6, 5), (1, 8, 1, 7), (3, 8, 9, 9)])
def test_depthwise_and_pointwise_convolutions_run_channels_last(shape):
    m = _randomized(_inverted_residual())
    fn = lambda x: x + m(x)  # noqa: E731
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    x.view(-1)[3] = float("nan")
    compiled = _run(fn, x, "inverted residual")
    convs = [e for e in compiled.schedule.externs if "convolution" in e.target]
    assert len(convs) == 3
    for e in convs:
        (out,) = e.outs
        layout = compiled.graph.buffers[out].layout
        sizes, strides = [s.as_int() for s in layout.sizes], [s.as_int() for s in layout.strides]
        cl = torch.empty(sizes).contiguous(memory_format=torch.channels_last).stride()
        assert all(n <= 1 or a == b for a, b, n in zip(strides, cl, sizes)), (sizes, strides)


def test_a_dense_3x3_convolution_and_a_convolution_returned_keep_eager_layout():
    conv3, conv1 = nn.Conv2d(4, 6, 3, padding=1).eval(), nn.Conv2d(6, 5, 1).eval()
    fn = lambda x: conv1(torch.relu(conv3(x)))  # noqa: E731
    x = torch.randn(2, 4, 7, 6, generator=torch.Generator().manual_seed(2))
    compiled = _run(fn, x, "conv relu conv")
    for e in compiled.schedule.externs:
        assert all(compiled.graph.buffers[o].layout.is_contiguous() for o in e.outs)
