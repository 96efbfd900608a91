"""Pooling lowered to loopnest kernels (``lowering/pooling.py``) on the C++ backend: max pooling's
values and indices equal to eager's, NaN, -inf and ties included; average pooling's divisors in
every mode; no ATen call left for pools into row-major outputs."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln

pytest.importorskip("expecttest")  # torch.testing._internal needs it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from test_opinfo import run_sample  # noqa: E402

POOLS = ("nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
         "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.avg_pool3d")


def _fallbacks(fn, *args) -> list[str]:
    return [f.op for g in ln.explain(fn, *args, backend="cpp", tune="off").graphs for f in g.fallbacks]


@pytest.mark.parametrize("name", POOLS)
def test_opinfo_samples_match_eager_without_aten_calls(name):
    """A fixed random choice of OpInfo samples (kernel sizes, strides, padding, dilation,
    ceil_mode, return_indices, batched or not)."""
    op = next(o for o in op_db if o.name == name)
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    for sample in random.Random(7).sample(samples, min(8, len(samples))):
        externs: set = set()
        assert run_sample(op, sample, externs) is None, (name, sample)
        if sample.input.is_contiguous():  # channels-last ones stay with ATen
            assert not any("pool" in e for e in externs), (externs, sample)


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [
    (2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 2, True), ((2, 3), (1, 2), (1, 1), 1, True),
    (3, 1, 1, 1, False),
])
def test_values_and_indices_follow_aten_on_nan_inf_and_ties(kernel, stride, padding, dilation, ceil_mode):
    """ATen's rule: an element replaces the running maximum when greater or NaN, so ties keep the
    first position, NaN the last; an all -inf window reports its first element."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (2, 3, 9, 11), generator=gen).float()  # many ties
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=gen)[:20]] = float("nan")
    flat[torch.randperm(flat.numel(), generator=gen)[:20]] = float("-inf")
    x[0, 0, :4, :4] = float("-inf")

    def pool(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)

    torch._dynamo.reset()  # a fresh cache per case: past Dynamo's recompile limit it would run eager
    values, indices = torch.compile(pool, backend="loopnest", options={"backend": "cpp"})(x)
    want_values, want_indices = pool(x)
    assert torch.equal(indices, want_indices)
    torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
    assert not _fallbacks(pool, x)


def test_pooling_fuses_with_its_producer():
    """relu(x + y) feeds the pool inside one kernel (one input channels-last)."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 8, 16, 16, generator=gen), torch.randn(2, 8, 16, 16, generator=gen)
    y = y.to(memory_format=torch.channels_last)

    def block(x, y):
        return F.max_pool2d(F.relu(x + y), 2)

    info = ln.explain(block, x, y, backend="cpp", tune="off").graphs[0]
    assert len(info.kernels) == 1 and not info.fallbacks
    got = torch.compile(block, backend="loopnest", options={"backend": "cpp"})(x, y)
    torch.testing.assert_close(got, block(x, y), rtol=0, atol=0)


def test_channels_last_pooling_stays_with_aten():
    """Eager pools a channels-last input into a channels-last output: ATen's kernel does that."""
    x = torch.randn(2, 8, 16, 16, generator=torch.Generator().manual_seed(3)).to(memory_format=torch.channels_last)

    def pool(x):
        return F.max_pool2d(x, 2), F.avg_pool2d(x, 2)

    assert sorted(_fallbacks(pool, x)) == ["aten.avg_pool2d.default", "aten.max_pool2d_with_indices.default"]
    got = torch.compile(pool, backend="loopnest", options={"backend": "cpp"})(x)
    torch.testing.assert_close(got, pool(x), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,count_include_pad,divisor", [
    (2, 2, 0, False, True, None), (3, 2, 1, False, True, None), (3, 2, 1, True, False, None),
    ((2, 3), (1, 2), (1, 1), True, True, None), (3, 2, 1, True, True, 5),
])
def test_average_pooling_divides_as_aten(dtype, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    """Sums in window order, divided by the override, the padded window or the inside count:
    bit-equal to eager's in float32 and in bfloat16 (summed in float32)."""
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(2)).to(dtype)

    def pool(x):
        return F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)

    torch._dynamo.reset()  # as above
    got = torch.compile(pool, backend="loopnest", options={"backend": "cpp"})(x)
    assert torch.equal(got, pool(x))
    assert not _fallbacks(pool, x)
