"""Pointwise kernels whose inner dims every access walks as one run are written over one dim
(``scheduler/merge_dims.py``): which dims merge, and that the results are eager's."""
import re

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp.codegen import as_written, generate
from loopnest.backends.cpp.params import CppConfig
from test_backends import kernels_of


def _loop_sizes(source: str) -> list[int]:
    return [int(n) for n in re.findall(r"for \(int64_t p\d+ = 0; p\d+ < (\d+); \+\+p\d+\)", source)]


def test_per_channel_scale_merges_the_image_dims_only():
    """x[n, c, h, w] * s[c]: h and w walk every access as one run; c does not (s steps by 1
    along c, and by 0 along h * w)."""
    x, s = ln.placeholder("x", (4, 16, 7, 7), ln.float32), ln.placeholder("s", (16, 1, 1), ln.float32)
    (kernel,) = kernels_of([ln.maximum(x * s, 0.0)], [x, s])
    assert [d.as_int() for d in as_written(kernel).pdomain] == [4, 16, 49]
    assert _loop_sizes(generate(kernel, CppConfig())) == [4, 16, 49]


def test_contiguous_elementwise_merges_to_one_loop():
    x, y = ln.placeholder("x", (3, 5, 7, 9), ln.float32), ln.placeholder("y", (3, 5, 7, 9), ln.float32)
    (kernel,) = kernels_of([ln.maximum(x, 0.0) * x + y], [x, y])
    assert [d.as_int() for d in as_written(kernel).pdomain] == [945]
    assert _loop_sizes(generate(kernel, CppConfig())) == [945]


def test_a_transposed_read_keeps_its_dims():
    x, y = ln.placeholder("x", (8, 12, 10), ln.float32), ln.placeholder("y", (8, 10, 12), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 0, 2, 1) + y], [x, y])
    assert len(as_written(kernel).pdomain) == 3


def _eager_and_compiled(fn, *args):
    compiled = ln.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")
    return fn(*args), compiled(*args)


@pytest.mark.parametrize("shape", [(32, 64, 7, 7), (2, 3, 14, 13), (5, 1, 1, 33)])
def test_merged_kernels_match_eager(shape):
    gen = torch.Generator().manual_seed(0)
    x, r = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    s, b = torch.randn(shape[1], generator=gen), torch.randn(shape[1], generator=gen)

    def fn(x, r, s, b):
        return torch.nn.functional.silu(x * s[None, :, None, None] + b[None, :, None, None]) + r
    want, got = _eager_and_compiled(fn, x, r, s, b)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)


def test_a_position_used_as_a_value_keeps_its_dims():
    """A mask over the innermost positions (an iota) reads the position itself: no merge (the
    innermost loop splits where the mask changes, piecewise.py), and the values stay eager's."""
    x = torch.randn(4, 6, 7)

    def fn(x):
        return torch.where(torch.arange(7) < 3, x, x * 2)
    want, got = _eager_and_compiled(fn, x)
    torch.testing.assert_close(got, want)
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    source = info.kernels[0].source_path.read_text()
    assert 3 in _loop_sizes(source) and "p2 = 3; p2 < 7;" in source and not {42, 168} & set(_loop_sizes(source))


REDUCED = {
    "mean var hw": (lambda x: (x.mean((2, 3)), x.var((2, 3))), (6, 5, 7, 9)),
    "sum amax argmax cw": (lambda x: (x.sum((1, 2)), x.amax((1, 2)), x.flatten(1).argmax(1)), (4, 3, 5, 11)),
    "var middle and last": (lambda x: x.var((1, 2), correction=0), (3, 40, 33)),
    "bn stats 0 2 3": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), (4, 6, 5, 7)),
    "softmax over hw": (lambda x: torch.softmax(x.flatten(2), -1).view_as(x) * 2, (2, 3, 6, 10)),
    "group norm": (lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b), (2, 6, 5, 7)),
}


@pytest.mark.parametrize("name", sorted(REDUCED))
def test_reductions_over_merged_dims_match_eager(name):
    fn, shape = REDUCED[name]
    gen = torch.Generator().manual_seed(1)
    args = [torch.randn(shape, generator=gen)]
    if name == "group norm":
        args += [torch.randn(shape[1], generator=gen), torch.randn(shape[1], generator=gen)]
    want, got = _eager_and_compiled(fn, *args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_reduced_dims_walked_as_one_run_merge():
    """A variance over (C, H, W) of contiguous activations reduces one dim of C*H*W; over the
    (N, H, W) of NCHW, N steps over the channels and stays a dim of its own."""
    x = ln.placeholder("x", (4, 6, 5, 7), ln.float32)
    (kernel,) = kernels_of([ln.sum(x, (1, 2, 3))], [x])
    assert [d.as_int() for d in as_written(kernel).rdomain] == [210]
    (kernel,) = kernels_of([ln.sum(x, (0, 2, 3))], [x])
    assert [d.as_int() for d in as_written(kernel).rdomain] == [4, 35]


def test_welford_over_dims_that_do_not_merge_is_two_sums():
    """A batch norm's statistics over (N, H, W) of NCHW keep two reduced dims; there Welford
    would run scalar, so it becomes two vectorized sums whatever the row's size."""
    from loopnest.ir.ops import ReduceOp
    x = ln.placeholder("x", (4, 6, 200, 100), ln.float32)
    var, mean = ln.var_mean(x, (0, 2, 3))
    (kernel,) = kernels_of([var, mean], [x])
    written = as_written(kernel)
    assert len(written.rdomain) == 2 and not any(r.op is ReduceOp.WELFORD for r in written.reductions)
    source = generate(kernel, CppConfig())
    assert "#pragma omp simd reduction(+:" in source
