"""Search spaces: which knobs each kernel gets, static constraints, stored-config validation."""
from __future__ import annotations

import optuna
import pytest
import torch

import loopnest as ln
from loopnest.core.space import InvalidConfig, Knob, config_key
from loopnest.autotune.study import make_sampler, suggest
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.space import search_space as cpp_space
from loopnest.backends.triton.heuristics import default_config as triton_default
from loopnest.backends.triton.params import TritonConfig
from loopnest.backends.triton.space import search_space as triton_space
from loopnest.db.api import HardwareInfo
from loopnest.scheduler import schedule

CPU2 = HardwareInfo("cpu", "test cpu", "avx2", 2, 1 << 30)
CPU8 = HardwareInfo("cpu", "test cpu", "avx2", 8, 1 << 30)
H200 = HardwareInfo("cuda", "NVIDIA H200", "sm_90", 132, 141 << 30)


def kernel_of(build, *shapes):
    """The single kernel of the DSL program ``build(*placeholders)`` at ``shapes``."""
    xs = [ln.placeholder(f"x{k}", s, ln.float32) for k, s in enumerate(shapes)]
    fn = ln.compile(build(*xs))
    (kernel,) = schedule(fn.graph(*[torch.randn(s) for s in shapes]), "t").kernels
    return kernel


POINTWISE = lambda x: ln.tanh(x) * 2  # noqa: E731
WELFORD_ROWS = lambda x: ln.var_mean(x, 1)[0]  # noqa: E731
SUM_ROWS = lambda x: ln.sum(x, 1)  # noqa: E731
SUM_COLUMNS = lambda x: x.sum(0)  # noqa: E731
FULL_MAX = lambda x: ln.max(ln.abs(x))  # noqa: E731
FULL_ARGMAX = lambda x: ln.argmax(x)  # noqa: E731
TRANSPOSED = lambda x: ln.permute(x, 1, 0) * 2.0  # noqa: E731


@pytest.mark.parametrize("build, shape, knobs", [
    (POINTWISE, (64, 96), {"threads", "schedule", "grain"}),
    (WELFORD_ROWS, (64, 96), {"threads", "schedule", "grain", "row_vectors"}),  # two sums over short rows
    (WELFORD_ROWS, (4, 70000), {"threads", "schedule", "grain", "lanes"}),  # Welford lanes over long ones
    (SUM_ROWS, (64, 96), {"threads", "schedule", "grain", "row_vectors"}),
    (SUM_COLUMNS, (64, 96), {"threads", "schedule", "grain", "chunk", "column_split"}),
    (SUM_COLUMNS, (64, 8192), {"threads", "schedule", "grain", "chunk"}),  # partials too wide to split rows
    (FULL_MAX, (4096,), {"threads", "row_vectors"}),
    (FULL_ARGMAX, (4096,), {"threads", "lanes"}),
    (TRANSPOSED, (64, 96), {"threads", "schedule", "grain", "transposed_reads"}),  # blocks read whole
])
def test_cpp_space_tunes_only_knobs_the_code_uses(build, shape, knobs):
    kernel = kernel_of(build, shape)
    space = cpp_space(kernel, CPU8)
    assert {k.name for k in space.knobs} == knobs
    assert space.contains(CppBackend().default_config(kernel))
    assert next(k for k in space.knobs if k.name == "threads").choices == (0, 1, 2, 4)


def test_cpp_reduction_space_has_at_least_100_points_and_every_point_generates_code_a_sample_builds():
    kernel = kernel_of(WELFORD_ROWS, (4, 70000))  # long rows: Welford lanes, so lanes is a knob
    space = cpp_space(kernel, CPU2)
    points = list(space.points())
    assert len(points) >= 100
    assert all(isinstance(c, CppConfig) for _, c in points)
    assert len({config_key(c) for _, c in points}) == len(points)
    backend = CppBackend()
    sources = {backend.codegen(kernel, c) for _, c in points}
    assert len(sources) > 1  # the knobs change the code
    for _, config in points[:: len(points) // 3][:3]:  # g++ on a spread of points, not all of them
        backend.prebuild(kernel, config, timeout=120)


def test_stored_configs_are_validated_against_the_space():
    space = cpp_space(kernel_of(WELFORD_ROWS, (4, 70000)), CPU2)
    assert space.validate({"threads": 1, "lanes": 8, "chunk": 0, "schedule": "dynamic", "grain": 8})
    for bad in [{"threads": "1"}, {"lanes": 3}, {"lanes": 1024}, {"threads": 99}, {"code": "import os"},
                {"schedule": "auto"}, {"chunk": 32}, ["threads", 1]]:
        with pytest.raises(ValueError):
            space.validate(bad)


def test_encode_round_trips_and_grid_covers_the_space():
    space = cpp_space(kernel_of(SUM_COLUMNS, (64, 96)), CPU2)
    config = CppConfig(threads=1, chunk=16, schedule="guided", grain=64)
    params = space.encode(config)
    assert space.config({k.name: k.choices[params[k.name]] if k.ordered else params[k.name]
                         for k in space.knobs}) == config
    study = optuna.create_study(sampler=make_sampler("grid", space, trials=1000, seed=0))
    seen = set()
    for _ in range(space.size):
        trial = study.ask()
        seen.add(config_key(space.config(suggest(space, trial))))
        study.tell(trial, 1.0)
    assert len(seen) == space.size


def test_auto_sampler_is_grid_for_small_spaces_and_tpe_otherwise():
    small = cpp_space(kernel_of(FULL_MAX, (4096,)), CPU2)
    big = cpp_space(kernel_of(WELFORD_ROWS, (4, 70000)), CPU2)
    assert isinstance(make_sampler("auto", small, 24, 0), optuna.samplers.GridSampler)
    assert isinstance(make_sampler("auto", big, 24, 0), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("cmaes", big, 24, 0), optuna.samplers.CmaEsSampler)
    assert isinstance(make_sampler("random", big, 24, 0), optuna.samplers.RandomSampler)


def test_triton_space_rejects_short_persistent_blocks_and_oversized_tiles():
    kernel = kernel_of(WELFORD_ROWS, (64, 3000))
    space = triton_space(kernel, H200)
    assert space.contains(triton_default(kernel))
    base = {"XBLOCK": 1, "RBLOCK": 1024, "strategy": "persistent", "num_warps": 4, "num_stages": 1}
    with pytest.raises(InvalidConfig, match="RBLOCK"):
        space.config(base)  # a persistent block shorter than the 3000-element row
    assert space.config({**base, "strategy": "looped"}).RBLOCK == 1024
    with pytest.raises(InvalidConfig, match="values in each"):
        space.config({**base, "XBLOCK": 64, "RBLOCK": 4096, "num_warps": 1})  # 8192 values per thread
    reasons = [c for _, c in space.points() if isinstance(c, InvalidConfig)]
    assert reasons and len(reasons) < space.size


def test_triton_full_reduction_split_knob_applies_to_split_only():
    kernel = kernel_of(FULL_MAX, (1 << 16,))
    space = triton_space(kernel, H200)
    names = {k.name for k in space.knobs}
    assert {"strategy", "SPLIT", "RBLOCK"} <= names and "XBLOCK" not in names
    looped = space.config({"RBLOCK": 1024, "strategy": "looped", "SPLIT": 64, "num_warps": 4, "num_stages": 1})
    assert looped.SPLIT == 1
    split = space.config({"RBLOCK": 1024, "strategy": "split", "SPLIT": 64, "num_warps": 4, "num_stages": 1})
    assert split.SPLIT == 64 and isinstance(split, TritonConfig)
    with pytest.raises(InvalidConfig):
        space.config({"RBLOCK": 1024, "strategy": "split", "SPLIT": 1, "num_warps": 4, "num_stages": 1})


def test_knob_rejects_repeated_or_missing_choices():
    with pytest.raises(ValueError):
        Knob("x", ())
    with pytest.raises(ValueError):
        Knob("x", (1, 1))


def test_an_empty_or_partial_stored_config_is_rejected_not_filled_with_defaults():
    space = cpp_space(kernel_of(WELFORD_ROWS, (64, 96)), CPU2)
    for partial in ({}, {"threads": 1}):
        with pytest.raises(ValueError, match="lacks"):
            space.validate(partial)


def test_vector_width_is_a_knob_only_where_the_cpu_has_avx512():
    kernel = kernel_of(ln.exp, (64, 96))
    avx512 = HardwareInfo("cpu", "test cpu", "avx,avx2,fma,avx512f,avx512bw", 2, 1 << 30)
    knobs = {k.name: k.choices for k in cpp_space(kernel, avx512).knobs}
    assert knobs["vector_width"] == (512, 256) and CppConfig().vector_width == 512
    assert "vector_width" not in {k.name for k in cpp_space(kernel, CPU2).knobs}
    with pytest.raises(ValueError, match="vector_width"):
        CppConfig(vector_width=128)


def test_triton_space_of_a_kernel_reducing_across_its_rows_holds_whole_row_persistent_points():
    """A norm's weight gradient beside its row sums runs whole rows persistently: the space tunes
    rows per program, warps and stages only, and most of its points are valid configs."""
    x = ln.placeholder("x", (256, 512), ln.float32)
    graph = ln.compile([ln.sum(x, 0), ln.sum(x * 2, -1)]).graph(torch.randn(256, 512))
    (kernel,) = schedule(graph, "k", across_rows=True).kernels
    assert kernel.across
    space = triton_space(kernel, H200)
    assert {k.name for k in space.knobs} == {"XBLOCK", "num_warps", "num_stages"}
    assert space.contains(triton_default(kernel))
    configs = [c for _, c in space.points() if not isinstance(c, InvalidConfig)]
    assert len(configs) >= 0.7 * space.size
    assert all(c.strategy.value == "persistent" and c.RBLOCK == 512 and c.SPLIT == 1 for c in configs)
