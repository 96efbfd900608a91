"""C++ column reductions with their rows split across threads (``split_rows.py``): the same
results as chunks of columns for every reduction kind and thread count, chosen where chunks would
leave threads idle or read rows in short runs, and a knob of the tuner."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.space import search_space
from loopnest.core.hardware import this_cpu
from loopnest.scheduler.kernel import signature
from test_backends import kernels_of

SPLIT = "tid_ * ("  # each thread's slice of the partials: only the split-rows code has it


def column_kernel(shape, reduce):
    x = ln.placeholder("x", shape, ln.float32)
    (kernel,) = kernels_of(reduce(x), [x])
    return kernel


def run(kernel, config, a):
    """The kernel's outputs (NaN-filled first) for input ``a`` under ``config``."""
    launcher = CppBackend().compile([(kernel, config)]).launchers[kernel.name]
    outs = {}
    for name in kernel.outputs:
        dtype = kernel.buffers[name].dtype.torch
        outs[name] = torch.full([s.as_int() for s in kernel.buffers[name].layout.sizes],
                                float("nan") if dtype.is_floating_point else -77, dtype=dtype)
    launcher({name: outs.get(name, a) for name in signature(kernel).buffers}, {})
    return [outs[name] for name in kernel.outputs]


REDUCTIONS = {
    "sum": (lambda x: [ln.sum(x, 0)], lambda a: [a.sum(0)]),
    "amax": (lambda x: [ln.max(x, 0)], lambda a: [a.amax(0)]),
    "argmin": (lambda x: [ln.argmin(x, 0)], lambda a: [a.argmin(0)]),
    "var": (lambda x: [ln.var_mean(x, 0, correction=0)[0]], lambda a: [torch.var(a, 0, correction=0)]),
}


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1000, 7), (4099, 64), (37, 1024), (2, 5)])
@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_rows_split_across_threads_reduce_as_chunks_of_columns_do(kind, shape, threads):
    build, eager = REDUCTIONS[kind]
    kernel = column_kernel(shape, build)
    a = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    split = CppConfig(threads=threads, column_split="rows")
    assert SPLIT in generate(kernel, split)
    expect = eager(a.double())
    for config in (split, CppConfig(threads=threads, column_split="chunks")):
        for got, want in zip(run(kernel, config, a), expect):
            if got.dtype == torch.int64:
                assert torch.equal(got, want), config
            else:
                # a float32 sum per column and thread, one row after another: error grows with the rows
                torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=1e-6 * shape[0])


def test_a_column_reduction_that_also_stores_elements():
    x = ln.placeholder("x", (999, 48), ln.float32)
    kernels = kernels_of([ln.exp(x) * 2, ln.sum(ln.exp(x), 0)], [x])
    kernel = next(k for k in kernels if k.reductions)
    a = torch.randn(999, 48)
    outs = run(kernel, CppConfig(threads=2, column_split="rows"), a)
    assert SPLIT in generate(kernel, CppConfig(threads=2, column_split="rows"))
    expect = {tuple(o.shape): o for o in (a.exp() * 2, a.exp().sum(0))}
    for got in outs:
        torch.testing.assert_close(got, expect[tuple(got.shape)], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape, threads, split", [
    ((65536, 64), 2, True),     # one chunk of 64 columns: one busy thread
    ((65536, 256), 2, True),    # chunks of 128 columns: rows read in 512-byte runs
    ((8192, 4096), 2, False),   # chunks of 2048 columns: 8 KB runs, half the partials in L1
    ((8192, 1024), 2, True),    # chunks of 512, but 4 KB of partials: rows split
    ((8192, 2048), 2, True),    # 8 KB of partials
    ((8192, 5000), 2, False),   # the partials of every column exceed L1
    ((8192, 1024), 1, False),   # one thread: nothing to split
])
def test_auto_splits_rows_where_chunks_would_idle_threads_read_short_runs_or_partials_are_small(shape, threads, split):
    kernel = column_kernel(shape, REDUCTIONS["sum"][0])
    assert (SPLIT in generate(kernel, CppConfig(threads=threads))) is split
    assert SPLIT not in generate(kernel, CppConfig(threads=threads, chunk=64)), "a chunk set by hand is kept"


def test_column_split_is_a_knob_only_where_rows_can_be_split():
    narrow = search_space(column_kernel((4096, 64), REDUCTIONS["sum"][0]), this_cpu())
    wide = search_space(column_kernel((64, 8192), REDUCTIONS["sum"][0]), this_cpu())
    rows = search_space(column_kernel((64, 4096), lambda x: [ln.sum(x, 1)]), this_cpu())
    assert "column_split" in {k.name for k in narrow.knobs}
    assert "column_split" not in {k.name for k in wide.knobs} | {k.name for k in rows.knobs}
    with pytest.raises(ValueError, match="column_split must be one of"):
        CppConfig(column_split="diagonal")
