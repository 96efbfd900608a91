"""Evaluating candidate configs of one kernel: compile in parallel, then verify and time one by one.

Compiles run in worker processes started by a thread pool, each with the per-trial timeout (g++
for C++; for Triton, compile workers that fill Triton's on-disk cache, ``backends/triton/
prebuild.py``). Each candidate is verified on poisoned outputs before it is timed; only a
verified candidate can be ``ok``.

When the kernels run on the host's own cores (C++), every build finishes before the first
candidate is timed, so nothing compiles while a measurement runs. A GPU candidate is timed as
soon as its build is done, while the others still compile: its time comes from CUDA events
around launches queued behind a cache flush, which a busy host does not stretch. A build that
runs far past the rest of its batch is cut there (``straggler_limit``): the configs that take
long to compile are the huge tiles, which spill, and one of them used to hold a whole batch.
"""
from __future__ import annotations

import concurrent.futures
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..backends.base import Backend
from ..core.timing import Timing
from ..db.api import TrialState, TuningDB, TuningKey
from ..scheduler.kernel import Kernel
from .harness import CandidateFailed, GraphHarness


@dataclass(frozen=True)
class Outcome:
    """The result of one trial; ``trial_id`` is its ``ln_trials`` row (None when not recorded)."""

    state: TrialState
    message: str | None = None
    timing: Timing | None = None
    error: float | None = None
    trial_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.state == TrialState.OK


class TrialRecorder:
    """Writes trials of one tuning key and study to the tuning DB (running, then final)."""

    def __init__(self, db: TuningDB, key: TuningKey, study: str):
        self.db, self.key, self.study = db, key, study
        self.host = socket.gethostname()

    def start(self, config: dict) -> int:
        """A ``running`` row for a candidate about to be verified and timed."""
        return self.db.record_trial(self.key, config, TrialState.RUNNING, study=self.study, host=self.host)

    def finish(self, trial_id: int, outcome: Outcome) -> Outcome:
        """Give the running row its final state; returns ``outcome`` with the row's id."""
        quantiles = outcome.timing.quantiles if outcome.timing else None
        self.db.finish_trial(trial_id, outcome.state, outcome.message, quantiles, outcome.error)
        return Outcome(outcome.state, outcome.message, outcome.timing, outcome.error, trial_id)

    def record(self, config: dict, outcome: Outcome) -> Outcome:
        """Store a trial that never ran (invalid, compile error, compile timeout)."""
        trial_id = self.db.record_trial(self.key, config, outcome.state, outcome.message, study=self.study,
                                        host=self.host)
        return Outcome(outcome.state, outcome.message, None, None, trial_id)


class KernelEvaluator:
    """Turns candidate configs of ``kernel`` into outcomes (see the module docstring)."""

    def __init__(self, kernel: Kernel, backend: Backend, harness: GraphHarness, timeout_s: float, workers: int,
                 recorder: TrialRecorder | None = None):
        self.kernel, self.backend, self.harness = kernel, backend, harness
        self.timeout_s, self.workers, self.recorder = timeout_s, workers, recorder

    def invalid(self, values: dict, reason: str) -> Outcome:
        """Record a point rejected by the space's static constraints."""
        outcome = Outcome(TrialState.INVALID, reason)
        return self.recorder.record(values, outcome) if self.recorder else outcome

    def evaluate(self, configs: Sequence[Any], started: Callable[[int, int], None] | None = None
                 ) -> list[Outcome]:
        """Compile all ``configs`` (in parallel), then verify and time each in turn.

        ``started(position, trial_id)`` is called when a candidate's ``running`` row exists.
        """
        if self.backend.can_prebuild and self.backend.device != "cpu":
            return self._build_and_measure(configs, started)
        return self.build_then_measure(configs, started)

    def build_then_measure(self, configs: Sequence[Any], started: Callable[[int, int], None] | None = None
                           ) -> list[Outcome]:
        """Every build first, then each candidate timed in turn (the C++ path; a GPU's too when
        a benchmark asks for the old order)."""
        built = self._prebuild(configs)
        return [failure if failure is not None else self._measure(config, n, started)
                for n, (config, failure) in enumerate(zip(configs, built))]

    def _prebuild(self, configs: Sequence[Any]) -> list[Outcome | None]:
        if not self.backend.can_prebuild:
            return [None] * len(configs)
        with concurrent.futures.ThreadPoolExecutor(max(1, min(self.workers, len(configs)))) as pool:
            futures = [pool.submit(self.backend.prebuild, self.kernel, c, self.timeout_s) for c in configs]
            return [self._build_outcome(c, f) for c, f in zip(configs, futures)]

    def _build_and_measure(self, configs: Sequence[Any], started: Callable[[int, int], None] | None
                           ) -> list[Outcome]:
        """Time each candidate as its build finishes; cut the builds that run past
        ``straggler_limit`` of the finished ones."""
        outcomes: list[Outcome | None] = [None] * len(configs)
        cancels = [threading.Event() for _ in configs]
        start, build_s = time.monotonic(), []

        def build(config, cancel) -> float:
            self.backend.prebuild(self.kernel, config, self.timeout_s, cancel)
            return time.monotonic() - start

        with concurrent.futures.ThreadPoolExecutor(max(1, min(self.workers, len(configs)))) as pool:
            futures = {pool.submit(build, c, cancel): n for n, (c, cancel) in enumerate(zip(configs, cancels))}
            pending, limit = set(futures), None
            while pending:
                limit = straggler_limit(build_s, len(configs))
                wait = None if limit is None else max(0.0, start + limit - time.monotonic())
                done, pending = concurrent.futures.wait(pending, wait, concurrent.futures.FIRST_COMPLETED)
                if not done:  # the rest ran past the limit
                    for f in pending:
                        cancels[futures[f]].set()
                    done, pending = pending, set()
                for f in done:
                    n = futures[f]
                    if f.exception() is None:
                        build_s.append(f.result())
                    failure = self._build_outcome(configs[n], f, cut_after=limit if cancels[n].is_set() else None)
                    outcomes[n] = failure if failure is not None else self._measure(configs[n], n, started)
        return outcomes

    def _build_outcome(self, config: Any, future: concurrent.futures.Future,
                       cut_after: float | None = None) -> Outcome | None:
        try:
            future.result()
            return None
        except TimeoutError as exc:  # a backend's build that ran past the timeout, or was cut
            message = str(exc) if cut_after is None else (
                f"compiling cut after {cut_after:.1f} s: the other builds of its batch had finished "
                f"(straggler limit, evaluate.straggler_limit)")
            outcome = Outcome(TrialState.TIMEOUT, message)
        except Exception as exc:  # noqa: BLE001 - g++ errors and codegen refusals alike
            outcome = Outcome(TrialState.COMPILE_ERROR, f"{type(exc).__name__}: {exc}"[-4000:])
        return self.recorder.record(config.to_json(), outcome) if self.recorder else outcome

    def _measure(self, config: Any, position: int, started: Callable[[int, int], None] | None) -> Outcome:
        if self.recorder is None:
            return self._verify_and_time(config)
        trial_id = self.recorder.start(config.to_json())
        try:
            if started is not None:
                started(position, trial_id)
            outcome = self._verify_and_time(config)
        except BaseException as exc:  # interrupted (Ctrl-C): leave no running row behind
            self.recorder.finish(trial_id, Outcome(TrialState.RUNTIME_ERROR, f"interrupted: {type(exc).__name__}"))
            raise
        return self.recorder.finish(trial_id, outcome)

    def _verify_and_time(self, config: Any) -> Outcome:
        try:
            launcher = self.backend.compile([(self.kernel, config)]).launchers[self.kernel.name]
        except Exception as exc:  # noqa: BLE001 - a candidate's build failure is its trial's result
            return Outcome(TrialState.COMPILE_ERROR, f"{type(exc).__name__}: {exc}"[-4000:])
        try:
            check, seconds = self.harness.verify(self.kernel, launcher)
        except CandidateFailed as exc:
            return Outcome(TrialState.RUNTIME_ERROR, str(exc)[-4000:])
        if seconds > self.timeout_s:
            return Outcome(TrialState.TIMEOUT, f"one run took {seconds:.3g} s (timeout {self.timeout_s:g} s)")
        if not check.ok:
            return Outcome(TrialState.WRONG_RESULT, check.message, error=check.error)
        timing = self.harness.time(self.kernel, launcher)
        return Outcome(TrialState.OK, None, timing, check.error)


STRAGGLER_MIN_S = 3.0  # a build is never cut before this
STRAGGLER_FACTOR = 3.0  # ... nor before this many times the median finished build


def straggler_limit(finished_s: Sequence[float], batch: int) -> float | None:
    """Seconds from a batch's start after which its unfinished builds are cut, given the build
    times of the finished ones: once half the batch has finished, the larger of
    ``STRAGGLER_MIN_S`` and ``STRAGGLER_FACTOR`` times their median; None before that (no limit
    but each build's own timeout)."""
    if not finished_s or 2 * len(finished_s) < batch:
        return None
    return max(STRAGGLER_MIN_S, STRAGGLER_FACTOR * statistics.median(finished_s))
