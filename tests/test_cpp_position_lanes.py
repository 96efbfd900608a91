"""C++ reductions over short runs keep one partial per position of the run
(``backends/cpp/position_lanes.py``): which phases take them, and that every elementwise
reduction gives eager's result through them (NaN, flags, integers, 16-bit floats)."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from conftest import assert_close


def _nan_amax(x):
    return torch.where(x > 2.0, float("nan"), x).amax((0, 2))


CASES = {
    "batch-norm statistics 7x7": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), (6, 5, 7, 7)),
    "sum over 0 and 2": (lambda x: x.sum((0, 2)), (9, 4, 33)),
    "amax amin": (lambda x: (x.amax((0, 2)), x.amin((0, 2))), (9, 4, 33)),
    "NaN amax": (_nan_amax, (9, 4, 33)),
    "any all": (lambda x: ((x > 2).any((0, 2)), (x > -2.5).all((0, 2))), (9, 4, 33)),
    "int sum": (lambda x: (x * 10).int().sum((0, 2)), (9, 4, 33)),
    "bf16 sum": (lambda x: x.bfloat16().sum((0, 2)), (9, 4, 33)),
    "fp16 var": (lambda x: x.half().var((0, 2)), (9, 4, 33)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_position_partials_match_eager(name):
    fn, shape = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    want = fn(x)
    for w, g in zip(*(v if isinstance(v, tuple) else (v,) for v in (want, got))):
        assert_close(g, w, name)
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    assert "_at[" in info.kernels[0].source_path.read_text()


@pytest.mark.parametrize("shape", [(9, 4, 65), (3000, 4, 7)])
def test_long_runs_or_many_runs_keep_the_run_loop(shape):
    """Over 64 positions the partials outgrow four vectors; past 2048 runs a float partial would
    add more elements than a sum's block."""
    fn = lambda x: x.sum((0, 2))  # noqa: E731
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    assert "_at[" not in info.kernels[0].source_path.read_text()
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    assert_close(got, fn(x))
