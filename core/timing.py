"""Timings of one kernel launch as p20/p50/p80 in µs, and the host wall-clock timer.

A backend times its launches (``Backend.time``): the C++ backend with ``time_cpu`` here (a
warm-up, then repeated runs until a time budget, at least ``min_runs``, each timed with
``perf_counter_ns``), the Triton backend on the GPU with CUDA events.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Timing:
    """Quantiles of one config's run time, in microseconds."""

    p20_us: float
    p50_us: float
    p80_us: float
    runs: int

    @property
    def quantiles(self) -> tuple[float, float, float]:
        return (self.p20_us, self.p50_us, self.p80_us)


@dataclass(frozen=True)
class BenchOptions:
    """CPU timing budget: warm-up and measured seconds, bounds on the number of runs."""

    warmup_s: float = 0.02
    budget_s: float = 0.25
    min_runs: int = 5
    max_runs: int = 500


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def time_cpu(fn: Callable[[], None], options: BenchOptions = BenchOptions()) -> Timing:
    """Warm up, then time repeated calls of ``fn``."""
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < options.warmup_s:
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < options.max_runs and (
            len(samples) < options.min_runs or time.perf_counter() - start < options.budget_s):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    samples.sort()
    return Timing(quantile(samples, 0.2), quantile(samples, 0.5), quantile(samples, 0.8), len(samples))
