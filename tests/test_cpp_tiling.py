"""Blocked loops for pointwise kernels that read an input across its lines (``backends/cpp/
tiling.py``): which kernels get them, and that they compute what eager computes."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.tiling import transposed_dim
from loopnest.ir.index import stride_along
from loopnest.ir import dtypes as dt
from loopnest.ir.expr import Const
from loopnest.ir.index import Index, Indirect, floordiv, var
from test_backends import kernels_of


def compiled_source(fn, *args) -> str:
    info = ln.explain(fn, *args, backend="cpp", tune="off").graphs[0]
    return info.kernels[0].source_path.read_text()


def test_stride_along_reads_affine_terms_only():
    i, j = var("i", 8), var("j", 16)
    vi = next(iter(i.free_vars()))
    assert stride_along(i * 16 + j, vi) == 16
    assert stride_along(j + 3, vi) == 0
    assert stride_along(i * j, vi) is None
    assert stride_along(floordiv(i, Index.of(2)) + j, vi) is None
    gathered = Index.of(Indirect(Const(1, dt.int64), Index.of(8)))
    assert stride_along(gathered + i, vi) is None


def test_a_transposed_read_gets_blocks_and_a_contiguous_one_does_not():
    x, y = ln.placeholder("x", (64, 48), ln.float32), ln.placeholder("y", (48, 64), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) + y], [x, y])
    assert transposed_dim(kernel) == 0
    assert "p0_0 += 16" in generate(kernel, CppConfig())
    (plain,) = kernels_of([y * 2.0], [y])
    assert transposed_dim(plain) is None


@pytest.mark.parametrize("shape", [(1000, 777), (16, 17), (33, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transposed_pointwise_matches_eager(shape, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(dtype)
    y = torch.randn(shape[::-1], generator=gen).to(dtype)

    def fn(x, y):
        return x.t() * 2 + y

    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x, y)
    assert torch.equal(got, fn(x, y))
    assert "+= 16" in compiled_source(fn, x, y)


def test_channels_last_and_row_major_inputs_together():
    """Eager writes the result channels-last (its first input's layout): the row-major input is
    the one read across its lines."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 40, 9, 35, generator=gen).to(memory_format=torch.channels_last)
    y = torch.randn(2, 40, 9, 35, generator=gen)

    def fn(x, y):
        return torch.relu(x - y)

    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x, y)
    assert torch.equal(got, fn(x, y)) and got.stride() == fn(x, y).stride()
    assert "_0 += 16" in compiled_source(fn, x, y)
