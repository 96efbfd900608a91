"""Reductions over permuted inputs loop over their reduced dims as the input lies in memory
(``scheduler/reduced_order.py``), except where the order decides the result."""
import pytest
import torch


@pytest.mark.parametrize("fn", [
    lambda x: x.transpose(0, 2).contiguous().mean((0, 2)),
    lambda x: x.permute(2, 1, 0).amax((0, 2)),
    lambda x: torch.var_mean(x.permute(2, 1, 0), (0, 2)),
    lambda x: (x.permute(2, 1, 0) - x.permute(2, 1, 0).mean((0, 2), keepdim=True)).exp(),  # with element stores
])
def test_reductions_over_permuted_inputs_read_them_in_memory_order(fn):
    """The reduced dims loop as the input lies (``scheduler/reduced_order.py``): the innermost
    reduced loop steps through the input one element at a time."""
    from loopnest.ir.expr import loads
    from loopnest.ir.index import as_var, stride_along
    from loopnest.scheduler.kernel import Kernel

    x = torch.randn(70, 24, 64)
    seen = []
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "recorder": seen.append})(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
    kernels = [k for g in seen for k in g.compiled.schedule.steps if isinstance(k, Kernel) and len(k.rdomain) > 1]
    assert kernels
    for k in kernels:
        ld = next(ld for r in k.reductions for ld in loads(r.body) if ld.buffer in k.buffers)
        assert stride_along(k.buffers[ld.buffer].layout.flat_index(ld.index), as_var(k.rvars()[-1])) == 1


def test_an_arg_reduction_keeps_the_views_order_for_its_ties():
    x = torch.randint(0, 3, (70, 24, 64)).float()  # many ties: the first in the view's order wins
    fn = lambda t: t.permute(2, 1, 0).argmax()  # noqa: E731
    torch._dynamo.reset()
    assert torch.equal(torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x), fn(x))


@pytest.mark.parametrize("fn", [
    lambda x: x.transpose(0, 2).contiguous().mean((0, 2)),
    lambda x: torch.var_mean(x.permute(2, 1, 0), (0, 2)),
])
def test_reordered_reductions_through_triton(fn):
    """The same kernels rendered by the Triton backend (its interpreter without a GPU)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(14, 6, 40, generator=torch.Generator().manual_seed(3)).to(device)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "off"})(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
