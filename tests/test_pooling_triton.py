"""Pooling lowered to loopnest kernels (``lowering/pooling.py``), rendered by the Triton backend:
its interpreter without a GPU, the GPU with one (this module needs no OpInfo samples, so it runs
where ``expecttest`` is missing)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln


@pytest.mark.parametrize("case", ["max2d", "max2d_dilated", "max3d", "avg2d", "avg2d_divisor"])
def test_pools_through_triton(case):
    """The same kernels rendered by the Triton backend (its interpreter without a GPU, the GPU
    with one): max values and indices equal to eager's on NaN and tie inputs, averages within
    float32 rounding."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(4)
    shape = (2, 3, 5, 7, 6) if case == "max3d" else (2, 3, 9, 11)
    x = torch.randint(-3, 4, shape, generator=gen).float()
    x.view(-1)[torch.randperm(x.numel(), generator=gen)[:6]] = float("nan")
    if case.startswith("avg"):
        x = torch.randn(shape, generator=gen)
    pools = {
        "max2d": lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
        "max2d_dilated": lambda x: F.max_pool2d(x, 2, 1, 1, 2, ceil_mode=True, return_indices=True),
        "max3d": lambda x: F.max_pool3d(x, 2, 2, 1, return_indices=True),
        "avg2d": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        "avg2d_divisor": lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), divisor_override=5),
    }
    pool = pools[case]
    x = x.to(device)
    torch._dynamo.reset()  # a fresh cache per case: past Dynamo's recompile limit it would run eager
    got = torch.compile(pool, backend="loopnest", options={"backend": "triton", "tune": "off"})(x)
    want = pool(x)
    if case.startswith("max"):
        assert torch.equal(got[1], want[1])
        torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
    else:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    fallbacks = [f.op for g in ln.explain(pool, x, backend="triton", tune="off").graphs for f in g.fallbacks]
    assert not fallbacks
