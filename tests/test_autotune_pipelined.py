"""GPU-style evaluation of a batch (``evaluate._build_and_measure``): each candidate is timed as
soon as its build is done, and a build far slower than the rest of its batch is cut. Run here
with the C++ backend dressed as an off-host device whose builds take set times."""
from __future__ import annotations

import threading
import time

import pytest

from autotune_support import rows_graph
from loopnest.autotune import evaluate
from loopnest.autotune.evaluate import KernelEvaluator, straggler_limit
from loopnest.autotune.harness import GraphHarness
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.params import CppConfig
from loopnest.core.timing import BenchOptions
from loopnest.db.api import TrialState
from test_autotune_tuner import compile_graph


class SlowBuildsOffHost(CppBackend):
    """C++ kernels, evaluated as a GPU's are; ``delays``: seconds each config's build takes (a
    cut build stops at once). ``events``: (what, config, seconds since creation) in order."""

    can_prebuild = True

    def __init__(self, delays: dict):
        self.delays, self.events, self.t0 = delays, [], time.monotonic()
        self.lock = threading.Lock()

    @property
    def device(self) -> str:
        return "offhost"

    def _note(self, what, config):
        with self.lock:
            self.events.append((what, config, time.monotonic() - self.t0))

    def prebuild(self, kernel, config, timeout, cancel=None):
        if cancel is not None and cancel.wait(self.delays[config]):
            self._note("cut", config)
            raise TimeoutError("compiling was cut short")
        self._note("built", config)

    def compile(self, kernels):
        for _, config in kernels:
            self._note("measured", config)
        return super().compile(kernels)


def test_candidates_are_timed_while_others_build_and_stragglers_are_cut(monkeypatch):
    monkeypatch.setattr(evaluate, "STRAGGLER_MIN_S", 2.0)
    graph, args = rows_graph()
    compiled = compile_graph(graph)
    kernel = compiled.schedule.kernels[0]
    configs = [CppConfig(threads=1), CppConfig(threads=2), CppConfig(threads=1, grain=4), CppConfig(threads=2, grain=4)]
    backend = SlowBuildsOffHost(dict(zip(configs, [0.0, 0.05, 1.0, 60.0])))
    harness = GraphHarness(compiled, lambda g: list(g(*args)), None, BenchOptions(budget_s=0.02))
    start = time.monotonic()
    outcomes = KernelEvaluator(kernel, backend, harness, 120.0, 4).evaluate(configs)
    assert time.monotonic() - start < 20  # not the straggler's 60 s

    assert [o.state for o in outcomes[:3]] == [TrialState.OK] * 3
    assert outcomes[3].state == TrialState.TIMEOUT and "straggler" in outcomes[3].message
    order = [(what, configs.index(c)) for what, c, _ in backend.events]
    assert order.index(("measured", 0)) < order.index(("built", 2))  # timed before the batch was built
    assert ("cut", 3) in order and ("measured", 3) not in order
    cut_at = next(t for what, c, t in backend.events if what == "cut")
    assert 2.0 <= cut_at < 10


def test_straggler_limit_waits_for_half_the_batch():
    assert straggler_limit([], 4) is None
    assert straggler_limit([0.5], 4) is None
    assert straggler_limit([0.5, 0.7], 4) == pytest.approx(max(evaluate.STRAGGLER_MIN_S, 3 * 0.6))
    assert straggler_limit([2.0, 3.0, 4.0], 5) == pytest.approx(9.0)
