"""The end-of-sweep decision: the study's best replaces the default only when it is faster in the
user's call beyond the noise measured between rounds (autotune/final.py)."""
from __future__ import annotations

import itertools

import pytest

from autotune_support import fast, rows_graph
from loopnest.autotune.final import MIN_ROUNDS, Verdict, WallTimer, interleaved, relative_iqr
from loopnest.autotune.harness import GraphHarness
from loopnest.autotune.tuner import GraphTuner
from loopnest.backends import registry
from loopnest.backends.base import Artifact
from loopnest.backends.cpp.backend import CppBackend
from loopnest.core.timing import BenchOptions, Timing
from loopnest.db.api import open_db
from loopnest.pipeline import compile_graph

CPP = registry.get("cpp")


class Tagged:
    """A launcher that remembers the config it was built for."""

    def __init__(self, launch, config):
        self.launch, self.config = launch, config

    def __call__(self, buffers, syms):
        self.launch(buffers, syms)


class TaggingCpp(CppBackend):
    """The C++ backend, its candidates' launchers tagged with their configs."""

    def compile(self, kernels):
        artifact = super().compile(kernels)
        launchers = {k.name: Tagged(artifact.launchers[k.name], c) for k, c in kernels}
        return Artifact(launchers, artifact.sources, artifact.libraries)


class ScriptedHarness(GraphHarness):
    """Kernel-level timings by config: the default takes 100 µs, any other config 50 µs."""

    default = None

    def time(self, kernel, launcher):
        us = 100.0 if launcher.config == self.default else 50.0
        return Timing(us, us, us, 1)


def scripted(default, default_times, challenger_times):
    """A call timer returning ``default_times`` for the default's rounds and ``challenger_times``
    for the challenger's, in turn; it records each side's rounds."""
    sides = {True: itertools.cycle(default_times), False: itertools.cycle(challenger_times)}
    rounds = []

    def timer(config, run):
        rounds.append("d" if config == default else "c")
        return next(sides[config == default])
    timer.rounds = rounds
    return timer


def tune(tmp_path, default_times, challenger_times):
    graph, args = rows_graph()
    compiled = compile_graph(graph, CPP)
    kernel = compiled.schedule.kernels[0]
    harness = ScriptedHarness(compiled, lambda g: list(g(*args)), None, BenchOptions(budget_s=0.01))
    harness.default = CPP.default_config(kernel)
    timer = scripted(harness.default, default_times, challenger_times)
    url = f"sqlite:///{tmp_path / 't.db'}"
    tuner = GraphTuner(harness, fast(url, trials=3, sampler="random"), open_db(url), backend=TaggingCpp(),
                       call_timer=timer)
    return tuner.tune_kernel(kernel), harness.default, open_db(url), timer


def test_a_challenger_within_the_noise_is_replaced_by_the_default(tmp_path):
    # 0.5% faster in the call: inside the 1% floor
    report, default, db, timer = tune(tmp_path, [100, 102, 98, 101, 99], [99, 100.5, 98.5, 99.5, 100])
    assert report.in_call["kept"] == "default" and report.in_call["rounds"] >= MIN_ROUNDS
    assert timer.rounds[:4] == ["d", "c", "d", "c"]  # interleaved
    assert report.winner == "default" and report.config == default.to_json()
    (winner,) = db.winners()
    assert winner.config == default.to_json() and winner.time_us == 100.0 == winner.default_time_us


def test_a_noisy_challenger_must_beat_the_spread_between_rounds(tmp_path):
    # 5% faster by the medians, but the rounds spread by about 8%
    report, default, db, _ = tune(tmp_path, [100, 108, 92, 104, 96], [95, 103, 87, 99, 91])
    assert report.in_call["margin"] > 0.05 and report.in_call["kept"] == "default"
    assert db.winners()[0].config == default.to_json()


def test_a_clearly_faster_challenger_wins(tmp_path):
    report, default, db, _ = tune(tmp_path, [100, 101, 99, 100, 100], [80, 81, 79, 80, 80])
    assert report.in_call["kept"] == "challenger" and report.winner == "search"
    (winner,) = db.winners()
    assert winner.config != default.to_json() and winner.config == report.config
    assert winner.time_us == 50.0 and winner.default_time_us == 100.0  # the kernel-level times of the study


def test_the_rule():
    even = Verdict((100.0,) * 5, (98.0,) * 5)
    assert even.spread == 0 and even.margin == 0.01 and even.challenger_wins  # 2% beyond the 1% floor
    assert not Verdict((100.0,) * 5, (99.5,) * 5).challenger_wins
    assert relative_iqr([90, 95, 100, 105, 110]) == pytest.approx(0.10)  # q25 95, q75 105, median 100
    noisy = Verdict((90, 95, 100, 105, 110), (92.0,) * 5)
    assert noisy.margin == pytest.approx(0.10) and not noisy.challenger_wins
    assert Verdict((90, 95, 100, 105, 110), (89.0,) * 5).challenger_wins


def test_the_wall_timer_times_the_user_call_in_rounds():
    graph, args = rows_graph()
    compiled = compile_graph(graph, CPP)
    kernel = compiled.schedule.kernels[0]
    harness = GraphHarness(compiled, lambda g: list(g(*args)), None)
    calls = []
    run = harness.user_call(kernel, compiled.launchers[kernel.name])
    config = CPP.default_config(kernel)
    verdict = interleaved((config, lambda: calls.append(run())), (config, run), WallTimer("cpu", 0.002), 0.0)
    assert len(verdict.default_times) == len(verdict.challenger_times) == MIN_ROUNDS
    assert all(t > 0 for t in verdict.default_times + verdict.challenger_times)
    assert len(calls) >= 3 * MIN_ROUNDS  # a warm-up call, a sizing call and the round's calls
