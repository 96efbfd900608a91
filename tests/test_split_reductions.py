"""Float sums and means over reduced axes split by a kept one take the trailing group first
(``lowering.reductions._inner_first``): two kernels, the first a row reduction in memory order."""
import pytest
import torch

import loopnest as ln


@pytest.mark.parametrize("shape,dims", [((64, 24, 700), (0, 2)), ((12, 5, 7, 3000), (0, 1, 3)),
                                        ((60, 4, 50, 100), (0, 2, 3)), ((60, 4, 50, 100), (1, 3))])
@pytest.mark.parametrize("reduction", ["mean", "sum_keepdim", "mean_float64", "nansum"])
def test_reductions_around_a_kept_axis_match_eager_in_two_passes(shape, dims, reduction):
    fn = {"mean": lambda x: x.mean(dims), "sum_keepdim": lambda x: x.sum(dims, keepdim=True),
          "mean_float64": lambda x: x.double().mean(dims), "nansum": lambda x: x.nansum(dims)}[reduction]
    torch.manual_seed(0)
    x = torch.randn(*shape) + 3
    x[0, 0, 0] = float("nan") if reduction == "nansum" else x[0, 0, 0]
    assert len(ln.explain(fn, x).graphs[0].kernels) == 2
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest")(x)
    want = fn(x.double()).to(got.dtype)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * shape[-1])


@pytest.mark.parametrize("fn,shape", [
    (lambda x: x.mean((0, 2)), (1024, 24, 60)),  # a trailing group too short to pay for a pass
    (lambda x: x.mean((0, 2)), (16, 24, 300)),  # an input small enough to sit in a core's cache
    (lambda x: x.mean((0, 1)), (64, 24, 700)),  # adjacent axes: one group
    (lambda x: x.to(torch.bfloat16).mean((0, 2)), (64, 24, 700)),  # the partial would round
    (lambda x: x.amax((0, 2)), (64, 24, 700)),
    (lambda x: x.transpose(0, 2).contiguous().mean((0, 2)), (700, 24, 64)),  # the copy reads strided
    (lambda x: (x * x[:1]).sum((0, 2)), (64, 24, 700)),  # a broadcast operand
])
def test_other_reductions_stay_one_pass(fn, shape):
    x = torch.randn(*shape)
    assert sum(k.kind == "reduction" for k in ln.explain(fn, x).graphs[0].kernels) == 1
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="loopnest")(x), fn(x)
    torch.testing.assert_close(got, want, rtol=2e-2 if want.dtype == torch.bfloat16 else 1e-5, atol=1e-4)


def test_a_sum_of_an_elementwise_product_of_contiguous_inputs_takes_two_passes():
    fn = lambda a, b: (a * b + 1).sum((0, 2))  # noqa: E731
    a, b = torch.randn(64, 24, 700), torch.randn(64, 24, 700)
    assert len(ln.explain(fn, a, b).graphs[0].kernels) == 2
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="loopnest")(a, b), fn(a, b), rtol=1e-4, atol=1e-3)


def test_a_mean_beside_a_variance_of_the_same_input_shares_their_one_pass():
    fn = lambda t: (t.mean((0, 2, 3)), t.var((0, 2, 3)))  # noqa: E731
    x = torch.randn(64, 6, 50, 60)
    assert len(ln.explain(fn, x).graphs[0].kernels) == 1
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="loopnest")(x), fn(x))


def test_a_transposed_input_stays_one_pass():
    x = torch.randn(700, 24, 64).permute(2, 1, 0)  # (64, 24, 700), the last axis strided
    fn = lambda t: t.mean((0, 2))  # noqa: E731
    assert len(ln.explain(fn, x).graphs[0].kernels) == 1
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="loopnest")(x), fn(x))
