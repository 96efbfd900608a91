"""Evaluating candidate configs of one kernel: compile in parallel, then verify and time one by one.

Compiles run in worker processes started by a thread pool, each with the per-trial timeout (g++
for C++; for Triton, compile workers that fill Triton's on-disk cache, ``backends/triton/
prebuild.py``), and all of them finish before the first candidate is timed: on the C++ backend
the device is these same cores, and a busy host delays a GPU's launches, so nothing compiles while
a measurement runs. Each candidate is verified on poisoned outputs before it is timed; only a
verified candidate can be ``ok``.
"""
from __future__ import annotations

import concurrent.futures
import socket
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
        built = self._prebuild(configs)
        return [failure if failure is not None else self._measure(config, n, started)
                for n, (config, failure) in enumerate(zip(configs, built))]

    def _prebuild(self, configs: Sequence[Any]) -> list[Outcome | None]:
        if not self.backend.can_prebuild:
            return [None] * len(configs)
        with concurrent.futures.ThreadPoolExecutor(max(1, min(self.workers, len(configs)))) as pool:
            futures = [pool.submit(self.backend.prebuild, self.kernel, c, self.timeout_s) for c in configs]
            return [self._build_outcome(c, f) for c, f in zip(configs, futures)]

    def _build_outcome(self, config: Any, future: concurrent.futures.Future) -> Outcome | None:
        try:
            future.result()
            return None
        except TimeoutError as exc:  # a backend's build that ran past the timeout
            outcome = Outcome(TrialState.TIMEOUT, str(exc))
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
