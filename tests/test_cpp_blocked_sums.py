"""Float32 sums of the C++ backend fold blocks into double totals (``blocked_sums.py``): long rows,
long columns (in chunks of columns and with rows split across threads), full sums and sums over
several dims stay as accurate as eager's cascade sums, and sums that fit one block keep the code
they had."""
import re

import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from test_backends import kernels_of
from test_cpp_split_rows import run

FOLD = re.compile(r"_t(\[j\])? \+= ")  # a block's float sum added into its double total


def kernel_of(shape, reduce):
    x = ln.placeholder("x", shape, ln.float32)
    (kernel,) = kernels_of(reduce(x), [x])
    return kernel


def positive(shape, seed=3):
    """Values in [0.5, 1.5): every partial sum grows, so rounding errors add up instead of cancelling."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) + 0.5


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs() / want.abs()).max().item()


CASES = {
    # name: (shape, loopnest reduction, eager reduction, configs)
    "long rows": ((3, 1 << 20), lambda x: [ln.sum(x, 1)], lambda a: a.sum(1), [CppConfig()]),
    "long columns": ((1 << 19, 24), lambda x: [ln.sum(x, 0)], lambda a: a.sum(0),
                     [CppConfig(threads=2, column_split="rows"), CppConfig(threads=2, column_split="chunks"),
                      CppConfig(threads=1, column_split="chunks", chunk=16)]),
    "full sum": ((1 << 21,), lambda x: [ln.sum(x, 0)], lambda a: a.sum(0).reshape(()),
                 [CppConfig(threads=1), CppConfig(threads=2)]),
    "mean of rows": ((2, 700_001), lambda x: [ln.mean(x, 1)], lambda a: a.mean(1), [CppConfig()]),
    "sum over two dims": ((2, 512, 1031), lambda x: [ln.sum(x, (1, 2))], lambda a: a.sum((1, 2)),
                          [CppConfig()]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_long_float32_sums_are_as_accurate_as_eager(case):
    shape, build, eager, configs = CASES[case]
    kernel = kernel_of(shape, build)
    a = positive(shape)
    want = eager(a.double())
    # eager's cascade sums err by about 1e-7 here; sequential float sums by 1e-6 to 1e-5
    bound = max(3e-7, 2 * relative_error(eager(a), want))
    for config in configs:
        assert FOLD.search(generate(kernel, config))
        (got,) = run(kernel, config, a)
        assert relative_error(got.reshape(want.shape), want) <= bound, config


def test_blocked_sums_keep_nan_and_infinity():
    kernel = kernel_of((2, 5000), lambda x: [ln.sum(x, 1)])
    a = positive((2, 5000))
    a[0, 4321], a[1, 17] = float("nan"), float("inf")
    (got,) = run(kernel, CppConfig(), a)
    assert got[0].isnan() and got[1] == float("inf")


@pytest.mark.parametrize("shape, reduce", [
    ((64, 2048), lambda x: [ln.sum(x, 1)]),          # a row of one block
    ((32, 100), lambda x: [ln.sum(x, 0)]),           # a column of one block
    ((4, 1 << 16), lambda x: [ln.max(x, 1)]),        # max is exact: nothing to fold
])
def test_what_fits_one_block_or_is_exact_is_not_blocked(shape, reduce):
    assert not FOLD.search(generate(kernel_of(shape, reduce), CppConfig()))


@pytest.mark.parametrize("shape, names, axis", [
    ((2, 1000, 1031), ("N", "M", "K"), (1, 2)),  # blocks of the outer reduced dim sized at run time
    ((300_001, 7), ("N", "M"), 0),               # a column reduction over a symbolic number of rows
])
def test_symbolic_sizes_fold_blocks_sized_at_run_time(shape, names, axis):
    x = ln.placeholder("x", names, ln.float32)
    compiled = ln.compile(ln.sum(x, axis), name="blocked_sum")
    a = positive(shape)
    want = a.double().sum(axis)
    assert relative_error(compiled(a), want) <= max(3e-7, 2 * relative_error(a.sum(axis), want))


def test_blocks_of_one_outer_step_are_not_loops():
    """Runs of 2304 elements (over (N, H, W) of NCHW) make blocks of one outer step; a loop of
    one trip around the ``omp simd`` loop kept g++ 12 from vectorizing it (scalar, 8x slower)."""
    kernel = kernel_of((3, 4, 48, 48), lambda x: [ln.sum(x, (0, 2, 3))])
    source = generate(kernel, CppConfig())
    assert "const int64_t r0 = rb_;" in source and "r0 < rb_ + 1" not in source
    a = positive((3, 4, 48, 48))
    (got,) = run(kernel, CppConfig(threads=2), a)
    torch.testing.assert_close(got.double(), a.double().sum((0, 2, 3)), rtol=1e-6, atol=0)
