"""Timing one kernel launch: CPU wall clock or GPU events, reported as p20/p50/p80 in µs.

CPU: a warm-up, then repeated runs until a time budget (at least ``min_runs``), each timed with
``perf_counter_ns``; the kernel's thread count is the one its config compiled in. GPU: Triton's
``do_bench`` (warm-up, L2 cache flushed before every run, CUDA events, quantiles).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from triton.testing import do_bench

from ..counters import counters


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


def time_gpu(fn: Callable[[], None]) -> Timing:
    """``triton.testing.do_bench``: L2 flushed between runs, CUDA events, quantiles in µs."""
    p20, p50, p80 = do_bench(fn, warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])
    return Timing(p20 * 1e3, p50 * 1e3, p80 * 1e3, 0)


def benchmark(launcher, buffers: dict[str, torch.Tensor], syms: dict[str, int], device: str,
              options: BenchOptions = BenchOptions()) -> Timing:
    """Time ``launcher`` on ``buffers`` (counted in ``counters["benchmarks_run"]``)."""
    counters["benchmarks_run"] += 1
    if device == "cuda":
        return time_gpu(lambda: launcher(buffers, syms))
    return time_cpu(lambda: launcher(buffers, syms), options)
