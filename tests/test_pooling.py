"""Max pooling lowered to loopnest kernels (``lowering/pooling.py``) on the C++ backend: values and
indices equal to eager's, NaN, -inf and ties included, with no ATen call left for the pooling."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln

pytest.importorskip("expecttest")  # torch.testing._internal needs it
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from test_opinfo import run_sample  # noqa: E402

POOLS = ("nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d")


def _fallbacks(fn, *args) -> list[str]:
    return [f.op for g in ln.explain(fn, *args, backend="cpp", tune="off").graphs for f in g.fallbacks]


@pytest.mark.parametrize("name", POOLS)
def test_opinfo_samples_match_eager_without_aten_calls(name):
    """A fixed random choice of OpInfo samples (kernel sizes, strides, padding, dilation,
    ceil_mode, return_indices, batched or not)."""
    op = next(o for o in op_db if o.name == name)
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    externs: set = set()
    for sample in random.Random(7).sample(samples, 8):
        assert run_sample(op, sample, externs) is None, (name, sample)
    assert not any("max_pool" in e for e in externs), externs


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

    values, indices = torch.compile(pool, backend="loopnest", options={"backend": "cpp"})(x)
    want_values, want_indices = pool(x)
    assert torch.equal(indices, want_indices)
    torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
    assert not _fallbacks(pool, x)


def test_pooling_fuses_with_its_producer_and_channels_last():
    """relu(x + y) feeds the pool inside one kernel; a channels-last input pools the same."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 8, 16, 16, generator=gen), torch.randn(2, 8, 16, 16, generator=gen)
    x = x.to(memory_format=torch.channels_last)

    def block(x, y):
        return F.max_pool2d(F.relu(x + y), 2)

    info = ln.explain(block, x, y, backend="cpp", tune="off").graphs[0]
    assert len(info.kernels) == 1 and not info.fallbacks
    got = torch.compile(block, backend="loopnest", options={"backend": "cpp"})(x, y)
    torch.testing.assert_close(got, block(x, y), rtol=0, atol=0)
