"""The end of a sweep: the study's best config against the default, timed as the user calls them.

The study ranks candidates by the kernel alone (``harness.time``: the backend's timing, with the
L2 cache flushed on a GPU). What the user gets is a call of the compiled graph: the launch path
of its call plan, the outputs it allocates, the cache state the graph's other kernels leave. The
two can disagree, so the study's best must also win there before it replaces the default.

Conditions: both configs run through ``harness.user_call``, the closest thing to the user's call
each harness has. A graph harness calls the compiled graph (the function the user calls,
``lowering.runner.LoweredGraph.run`` for workloads), on the same example inputs, with the
candidate swapped in and nothing else changed; the kernel harness of the tuning service has no
graph and calls the kernel's launcher on its recorded buffers. Neither side gets an L2 flush:
one round of a side is back-to-back calls, synchronized at both ends, whose wall-clock time per
call is the round's time (``WallTimer``), as a loop of calls would see it.

Rule: rounds alternate default, challenger, default, challenger, ... (``MIN_ROUNDS`` to
``MAX_ROUNDS`` of each; more while they are cheap). With ``d`` and ``c`` the medians of the two
sides' round times and ``spread`` the larger relative interquartile range of the two sides' round
times ((q75 - q25) / median), the challenger is kept only if ``c < d * (1 - margin)`` with
``margin = max(MIN_MARGIN, spread)``. Otherwise the default is stored as the winner.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..core.timing import quantile

MIN_ROUNDS = 5
MAX_ROUNDS = 15
MIN_MARGIN = 0.01

# (config, run) -> microseconds per call of ``run`` over one round; ``config`` says which side is
# measured (the real timer ignores it; tests script times by it)
CallTimer = Callable[[Any, Callable[[], None]], float]


def relative_iqr(values: Sequence[float]) -> float:
    """(q75 - q25) / median of ``values`` (linear quantiles); infinite for a median of 0."""
    s = sorted(values)
    median = quantile(s, 0.5)
    return (quantile(s, 0.75) - quantile(s, 0.25)) / median if median > 0 else float("inf")


@dataclass(frozen=True)
class Verdict:
    """Round times of the default and the challenger, in µs per call, and what they decide."""

    default_times: tuple[float, ...]
    challenger_times: tuple[float, ...]

    @property
    def default_us(self) -> float:
        return quantile(sorted(self.default_times), 0.5)

    @property
    def challenger_us(self) -> float:
        return quantile(sorted(self.challenger_times), 0.5)

    @property
    def spread(self) -> float:
        return max(relative_iqr(self.default_times), relative_iqr(self.challenger_times))

    @property
    def margin(self) -> float:
        return max(MIN_MARGIN, self.spread)

    @property
    def challenger_wins(self) -> bool:
        return self.challenger_us < self.default_us * (1 - self.margin)

    def to_json(self) -> dict[str, Any]:
        """Medians, margin and outcome (``autotune sweep --format json``'s ``in_call``)."""
        return {"default_us": self.default_us, "challenger_us": self.challenger_us, "margin": self.margin,
                "rounds": len(self.default_times), "kept": "challenger" if self.challenger_wins else "default"}


class WallTimer:
    """Times one round: ``run`` once to warm up, once to size the round, then back-to-back calls
    for about ``round_s``; the device is synchronized before and after. Returns µs per call."""

    def __init__(self, device: str, round_s: float):
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.round_s = round_s

    def __call__(self, config: Any, run: Callable[[], None]) -> float:
        run()
        one = self._per_call_s(run, 1)
        return self._per_call_s(run, max(1, min(10_000, int(self.round_s / max(one, 1e-9))))) * 1e6

    def _per_call_s(self, run: Callable[[], None], count: int) -> float:
        self.sync()
        start = time.perf_counter()
        for _ in range(count):
            run()
        self.sync()
        return (time.perf_counter() - start) / count


def interleaved(default: tuple[Any, Callable[[], None]], challenger: tuple[Any, Callable[[], None]],
                timer: CallTimer, budget_s: float) -> Verdict:
    """Alternate rounds of ``default`` and ``challenger`` ((config, run) pairs): at least
    ``MIN_ROUNDS`` of each, up to ``MAX_ROUNDS`` while under ``budget_s`` seconds."""
    default_times: list[float] = []
    challenger_times: list[float] = []
    start = time.perf_counter()
    while len(default_times) < MIN_ROUNDS or (
            len(default_times) < MAX_ROUNDS and time.perf_counter() - start < budget_s):
        default_times.append(timer(*default))
        challenger_times.append(timer(*challenger))
    return Verdict(tuple(default_times), tuple(challenger_times))
