"""Reductions whose rows are runs far apart become partials (one row per run, in memory order)
and a combine, plus a pointwise kernel for later phases (``scheduler/split_runs.py``): which
kernels split and how, and that both backends give eager's results through the split."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.ir.nodes import Layout
from loopnest.dsl.build import GraphBuilder
from loopnest.scheduler.schedule import schedule
from conftest import assert_close
from test_backends import kernels_of


def split_kernels(outputs, inputs):
    return kernels_of(outputs, inputs, split_runs=True)


def sizes(domain):
    return [d.as_int() for d in domain]


def test_batch_norm_statistics_split_into_runs_in_memory_order():
    """Over (N, H, W) of NCHW: N x C rows of H * W (N outermost, as memory has them), then C rows
    of N partials; Welford's combine is two phases of sums."""
    x = ln.placeholder("x", (4, 6, 5, 7), ln.float32)
    var, mean = ln.var_mean(x, (0, 2, 3))
    partials, combine = split_kernels([var, mean], [x])
    assert (sizes(partials.pdomain), sizes(partials.rdomain)) == ([4, 6], [35])
    assert (sizes(combine.pdomain), sizes(combine.rdomain)) == ([6], [4])
    assert combine.num_phases == 2 and len(combine.row_stores) == 2


def test_a_middle_row_dim_between_reduced_dims_keeps_memory_order():
    """Over dims (1, 3) of (A, B, C, D): the runs lie in (A, B, C) order."""
    x = ln.placeholder("x", (3, 4, 5, 40), ln.float32)
    partials, combine = split_kernels([ln.sum(x, (1, 3))], [x])
    assert sizes(partials.pdomain) == [3, 4, 5] and sizes(combine.rdomain) == [4]


def test_later_phases_become_a_pointwise_kernel_in_store_order():
    x = ln.placeholder("x", (4, 6, 5, 7), ln.float32)
    mean = ln.mean(x, (0, 2, 3), keepdim=True)
    partials, combine, apply = split_kernels([x - mean], [x])
    assert not apply.reductions and sizes(apply.pdomain) == [4, 6, 5, 7]


@pytest.mark.parametrize("shape, dims", [((4, 6, 4, 7), (0, 2, 3)),   # runs of 28 elements: too short
                                         ((4, 6, 5, 7), (1, 2, 3)),   # one run per row already
                                         ((4, 40, 6), (0, 1))])       # the inner dim is strided
def test_rows_that_are_not_long_runs_apart_stay_one_kernel(shape, dims):
    x = ln.placeholder("x", shape, ln.float32)
    assert len(split_kernels([ln.sum(x, dims)], [x])) == 1


def _nan_max(x):
    return torch.where(x > 2.5, float("nan"), x).amax((0, 2))


CASES = {
    "bn stats": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), [(5, 6, 6, 7)], 2),
    "bn train affine relu": (lambda x, w, b: F.relu(F.batch_norm(x, None, None, w, b, training=True)),
                             [(4, 5, 8, 8), (5,), (5,)], 3),
    "mean over 0 and 2": (lambda x: x.mean((0, 2)), [(7, 5, 40)], 2),
    "amax amin": (lambda x: (x.amax((0, 2)), x.amin((0, 2))), [(7, 5, 40)], 2),
    "NaN max": (_nan_max, [(7, 5, 40)], 2),
    "any all": (lambda x: ((x > 2).any((0, 2)), (x > -2.5).all((0, 2))), [(7, 5, 40)], 2),
    "int sum": (lambda x: (x * 10).int().sum((0, 2)), [(7, 5, 40)], 2),
    "fp16 var": (lambda x: x.half().var((0, 2)), [(7, 5, 40)], 2),
    "bf16 sum": (lambda x: x.bfloat16().sum((0, 2)), [(7, 5, 40)], 2),
    "dims 1 and 3": (lambda x: x.sum((1, 3)), [(3, 4, 5, 33)], 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_kernels_match_eager(name, backend, monkeypatch):
    monkeypatch.setattr(type(backend), "splits_runs", True)
    fn, shapes, kernels = CASES[name]
    gen = torch.Generator().manual_seed(7)
    args = [torch.randn(s, generator=gen) for s in shapes]
    compiled = ln.compile_fx(make_fx(fn)(*args), list(args), backend=backend.name, tune="off")
    want, got = fn(*args), compiled(*args)
    for w, g in zip(*(v if isinstance(v, tuple) else (v,) for v in (want, got))):
        assert_close(g, w, name)
    assert len(ln.explain(fn, *args, backend=backend.name, tune="off").graphs[0].kernels) == kernels


def test_combined_variance_is_stable_far_from_zero(monkeypatch):
    """Welford partials combined by Chan's formula: a variance of 1 around a mean of 1e4 keeps
    float32's accuracy (the sum of squares minus the squared sum would lose it all)."""
    from loopnest.backends.cpp.backend import CppBackend
    monkeypatch.setattr(CppBackend, "splits_runs", True)
    x = torch.randn(9, 3, 64, generator=torch.Generator().manual_seed(2)) + 1e4
    fn = lambda x: torch.var_mean(x, (0, 2))  # noqa: E731
    var, mean = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    want_var, want_mean = torch.var_mean(x.double(), (0, 2))
    torch.testing.assert_close(var.double(), want_var, rtol=1e-3, atol=0)
    torch.testing.assert_close(mean.double(), want_mean, rtol=1e-7, atol=0)


def test_symbolic_sizes_stay_one_kernel():
    """The split needs the run's length and the partials' count: sizes known only at run time
    keep the kernel whole."""
    x = ln.placeholder("x", ("n", 6, 5, 7), ln.float32)
    assert len(split_kernels([ln.sum(x, (0, 2, 3))], [x])) == 1


def test_partials_are_intermediates_of_the_schedule():
    """The partial and statistic buffers are allocated by the runtime like any intermediate."""
    x = ln.placeholder("x", (4, 6, 5, 7), ln.float32)
    mean = ln.mean(x, (0, 2, 3), keepdim=True)
    layouts = {x.src.name: Layout.contiguous(x.shape)}
    sched = schedule(GraphBuilder(layouts).build([x], [x - mean]), "k", split_runs=True)
    added = [b for b in sched.intermediates if "_part" in b or "_stat" in b]
    assert sorted(b.rsplit("_", 1)[1] for b in added) == ["part0", "stat0"]  # a sum: one output
    assert all(b in sched.graph.buffers for b in added)


def test_only_fewer_rows_than_the_limit_split():
    """Rows of runs split only below ``split_rows_below`` (the Triton backend's: its
    multiprocessors; a GPU of 256 or more channels has rows enough for every SM)."""
    from loopnest.backends.triton.backend import TritonBackend
    from loopnest.backends.triton.heuristics import sm_count
    x = ln.placeholder("x", (4, 300, 5, 7), ln.float32)
    assert len(kernels_of([ln.sum(x, (0, 2, 3))], [x], split_runs=True, split_rows_below=301)) == 2
    assert len(kernels_of([ln.sum(x, (0, 2, 3))], [x], split_runs=True, split_rows_below=300)) == 1
    assert TritonBackend().split_rows_below == sm_count()
