"""Sums of a one-hot row folded into row values (``scheduler/one_hot.py``): cross-entropy's
backward becomes one pointwise kernel, with eager's gradients, ignored targets and NaN included."""
import pytest
import torch
import torch.nn.functional as F

from loopnest.scheduler.kernel import KernelKind

pytestmark = [pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),  # Triton's interpreter
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]


def _kernels(graphs: list):
    def recorder(graph):
        graphs.append(graph.compiled.schedule.kernels)
    return recorder


def _step(fn, logits, target, grad):
    x = logits.detach().clone().requires_grad_()
    loss = fn(x, target)
    (g,) = torch.autograd.grad(loss, [x], grad)
    return loss, g


@pytest.mark.parametrize("reduction, smoothing", [("mean", 0.0), ("sum", 0.0), ("none", 0.0), ("mean", 0.1)])
def test_cross_entropy_backward_is_one_pointwise_kernel(backend, reduction, smoothing):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 301, generator=g)
    target = torch.randint(0, 301, (37,), generator=g)
    target[[3, 10]] = -100  # ignored rows: no gradient
    grad = torch.rand(37, generator=g) + 0.5 if reduction == "none" else torch.tensor(1.5)
    logits, target, grad = (t.to(backend.device) for t in (logits, target, grad))

    def loss(x, t):
        return F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)

    graphs: list = []
    torch._dynamo.reset()
    fn = torch.compile(loss, backend="loopnest", dynamic=False,
                       options={"backend": backend.name, "tune": "off", "recorder": _kernels(graphs)})
    got, got_grad = _step(fn, logits, target, grad)
    want, want_grad = _step(loss, logits, target, grad)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)
    forward, backward = graphs
    assert [k.kind for k in backward] == [KernelKind.POINTWISE], [k.text() for k in backward]


def test_a_nan_gradient_reaches_every_column_as_in_eager(backend):
    """``0 * NaN`` in the columns off the target: the folded sum is NaN, as eager's sum is."""
    g = torch.Generator().manual_seed(1)
    logits, target = torch.randn(5, 40, generator=g), torch.randint(0, 40, (5,), generator=g)
    grad = torch.rand(5, generator=g)
    grad[2] = float("nan")
    logits, target, grad = (t.to(backend.device) for t in (logits, target, grad))

    def loss(x, t):
        return F.cross_entropy(x, t, reduction="none")

    torch._dynamo.reset()
    fn = torch.compile(loss, backend="loopnest", dynamic=False, options={"backend": backend.name, "tune": "off"})
    torch.testing.assert_close(_step(fn, logits, target, grad)[1], _step(loss, logits, target, grad)[1],
                               equal_nan=True)
