"""Tuning every kernel of a compiled graph: one study per tuning key, winners into the tuning DB.

For each kernel: register it, look up its key (an exact winner under other software and the
winners at the nearest shapes become warm starts, after the default), run the study, then time
the best verified config against the default in the user's call (``final.py``: the default stays
unless the best is faster beyond the noise) and upsert the winner with both times.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import optuna

from ..backends.base import Backend
from ..core.counters import counters
from ..core.space import SearchSpace, config_key
from ..core.timing import Timing
from ..db.api import HardwareInfo, LookupKind, TrialState, TuningDB, TuningKey
from ..db.models import utcnow
from ..runtime.compiled import CompiledGraph
from ..scheduler.kernel import Kernel
from .evaluate import KernelEvaluator, Outcome, TrialRecorder
from .final import CallTimer, Verdict, WallTimer, interleaved
from .harness import GraphHarness
from .keys import study_name, software_tag, tuning_key
from .options import TuneSettings
from .storage import diagnosed, open_study, optuna_storage
from .study import StudyLoop, StudyResult, enqueue_warm_starts, fail_stale, make_sampler, previous_results

log = logging.getLogger("loopnest.autotune")
NEAREST_WARM_STARTS = 3


def log_distance(a, b) -> float:
    """Distance between two size tuples in log space (the tuning DB's notion of "nearest")."""
    return math.sqrt(sum((math.log(max(x, 1)) - math.log(max(y, 1))) ** 2 for x, y in zip(a, b)))


@dataclass(frozen=True)
class KernelReport:
    """The outcome of tuning one kernel (a row of ``autotune sweep``'s table)."""

    kernel: str
    kernel_hash: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    lookup: str                    # what the DB had before: exact, stale, nearest, miss
    default_us: float | None
    best_us: float | None
    ok: int
    failed: int
    config: dict[str, Any] | None  # the winner
    study: str
    stored: str | None             # where the winner was stored (None: nothing verified)
    stop_reason: str = ""
    in_call: dict[str, Any] | None = None  # the final decision (``final.Verdict.to_json``), if one was taken
    wall_s: float | None = None            # wall-clock seconds of the kernel's tuning, decision included
    winner: str = "-"              # where the winner came from: default (also when the study's best was not
    #                                faster in the user's call), stale, nearest, exact, search, or
    #                                "kept": the DB's winner, measured faster earlier or by another process

    @property
    def speedup(self) -> float | None:
        return self.default_us / self.best_us if self.default_us and self.best_us else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``autotune sweep --format json``)."""
        return {"kernel": self.kernel, "hash": self.kernel_hash, "sizes": list(self.sizes),
                "dtypes": list(self.dtypes), "lookup": self.lookup, "default_us": self.default_us,
                "best_us": self.best_us, "speedup": self.speedup, "ok": self.ok, "failed": self.failed,
                "config": self.config, "study": self.study, "stored": self.stored,
                "stop_reason": self.stop_reason, "in_call": self.in_call, "wall_s": self.wall_s}


class GraphTuner:
    """Tunes the kernels of ``harness.compiled`` on its backend, on this machine's hardware."""

    def __init__(self, harness: GraphHarness, settings: TuneSettings, db: TuningDB, label: str = "",
                 backend: Backend | None = None, call_timer: CallTimer | None = None):
        self.harness, self.settings = harness, settings
        self.call_timer = call_timer  # times the final rounds (``final.py``; default: WallTimer)
        self.backend = backend or harness.compiled.backend  # builds the candidates
        self.label = label or harness.compiled.name
        self.db = db
        self.hardware: HardwareInfo = self.backend.hardware(harness.device)
        self.software: dict[str, Any] = self.backend.software()
        self.tag = software_tag(self.software)
        self.storage = optuna_storage(db.url, settings.heartbeat_s, settings.grace_s)

    @property
    def compiled(self) -> CompiledGraph:
        return self.harness.compiled

    def key(self, kernel: Kernel) -> TuningKey:
        """The tuning key of ``kernel`` at the sizes it ran with."""
        key = tuning_key(kernel, self.backend.name, self.hardware, self.harness.calls[kernel.name].syms)
        assert key is not None, "a kernel that ran has concrete sizes"
        return key

    def tune_all(self, kernels: list[Kernel] | None = None) -> list[KernelReport]:
        """Tune ``kernels`` (default: all of the graph), in order."""
        return [self.tune_kernel(k) for k in (kernels or self.compiled.schedule.kernels)]

    def tune_kernel(self, kernel: Kernel) -> KernelReport:
        """Run (or resume) the kernel's study and store its winner; ``wall_s`` is the time it took."""
        start = time.monotonic()
        report = self._tune(kernel)
        return dataclasses.replace(report, wall_s=time.monotonic() - start)

    def _tune(self, kernel: Kernel) -> KernelReport:
        key = self.key(kernel)
        display = f"{self.label}/{kernel.name}"
        self.db.register_kernel(key.kernel_hash, key.backend, display, kernel.text())
        space = self.backend.space(kernel, self.hardware)
        default = self.backend.default_config(kernel)
        lookup = self.db.lookup(key, self.software)
        name = study_name(self.settings.study_prefix, key)
        starts = self.warm_starts(space, default, lookup, key)
        result = self.run_study(kernel, key, space, starts, name, display)
        ok, failed = result.counts
        report = dict(kernel=display, kernel_hash=key.kernel_hash, sizes=key.sizes, dtypes=key.dtypes,
                      lookup=lookup.kind.value, ok=ok, failed=failed, study=name, stop_reason=result.stop_reason)
        best = result.best
        if best is None:
            return KernelReport(default_us=None, best_us=None, config=None, stored=None, **report)
        default_outcome = result.results.get(config_key(default), (None, None))[1]
        (config, outcome), verdict = self.final_decision(kernel, best, default, default_outcome)
        time_us = outcome.timing.p50_us
        default_us = default_outcome.timing.p50_us if default_outcome is not None and default_outcome.ok else None
        trial_id = self.db.winning_trial(key, config.to_json(), outcome.timing.quantiles, name, outcome.trial_id)
        stored = self.db.store_winner(key, config.to_json(), time_us, default_us, self.software, trial_id)
        log.info("%s: winner %s, %.1f us (default %s us); stored %.1f us", display, config, time_us, default_us,
                 stored.time_us)
        origins = {config_key(c): reason for c, reason in reversed(starts)}  # the first reason wins
        origin = origins.get(config_key(config), "search") if stored.time_us == time_us else "kept"
        return KernelReport(default_us=default_us, best_us=stored.time_us, config=stored.config,
                            stored=f"{self.db.url} [{name}]", winner=origin,
                            in_call=verdict.to_json() if verdict else None, **report)

    def run_study(self, kernel: Kernel, key: TuningKey, space: SearchSpace, starts: list[tuple[Any, str]],
                  name: str, display: str) -> StudyResult:
        """Open (or resume) the study ``name``, enqueue ``starts`` and run it; the results include
        what other processes sharing the study measured."""
        with diagnosed(self.storage, name):
            study = open_study(self.storage, name, make_sampler(self.settings.sampler, space,
                                                                self.settings.trials, self.settings.seed))
            self.recover(study, key)
            enqueue_warm_starts(study, space, starts)
            recorder = TrialRecorder(self.db, key, name)
            evaluator = KernelEvaluator(kernel, self.backend, self.harness, self.settings.timeout_s,
                                        self.settings.workers, recorder)
            result = StudyLoop(study, space, evaluator, self.settings, self.tag, display,
                               recorded=lambda row: self.recorded(key, name, row)).run()
            # Other workers sharing this study (same hardware model) may have measured better configs.
            result.results = {**previous_results(study.get_trials(deepcopy=False), space, self.tag),
                              **result.results}
        return result

    def warm_starts(self, space: SearchSpace, default, lookup, key: TuningKey) -> list[tuple[Any, str]]:
        """The default first, then this key's stored winner (stale, or exact when re-tuning), then
        the winners of the same kernel at the ``NEAREST_WARM_STARTS`` nearest other shapes."""
        stored = [(lookup.winner, lookup.kind.value)] if lookup.kind in (LookupKind.EXACT, LookupKind.STALE) else []
        stored += [(w, "nearest") for w in self.nearest_winners(key)]
        starts: list[tuple[Any, str]] = [(default, "default")]
        for winner, reason in stored:
            try:
                starts.append((space.validate(winner.config), reason))
            except ValueError as exc:
                log.warning("ignoring the stored config of %s at %s: %s", winner.name, winner.sizes, exc)
        return starts

    def nearest_winners(self, key: TuningKey) -> list:
        """Winners of the same kernel, backend, hardware, dtypes and rank at other sizes, nearest first."""
        others = [w for w in self.db.winners(kernel_hash=key.kernel_hash, backend=key.backend, hardware=key.hardware)
                  if w.dtypes == key.dtypes and len(w.sizes) == len(key.sizes) and w.sizes != key.sizes]
        return sorted(others, key=lambda w: log_distance(w.sizes, key.sizes))[:NEAREST_WARM_STARTS]

    def recorded(self, key: TuningKey, study: str, trial_id: int) -> Outcome | None:
        """The outcome stored in ``ln_trials`` row ``trial_id`` of ``study``, if it finished measuring."""
        row = next((t for t in self.db.trials(key, study=study) if t.id == trial_id), None)
        if row is None or row.state == TrialState.RUNNING or (row.message or "").startswith("interrupted"):
            return None
        timing = Timing(row.p20_us, row.p50_us, row.p80_us, 0) if row.p50_us is not None else None
        return Outcome(row.state, row.message, timing, row.verified_error, row.id)

    def recover(self, study: optuna.Study, key: TuningKey) -> None:
        """Fail what a dead sweep left running: its Optuna trials, then its ``ln_trials`` rows."""
        fail_stale(study)
        live = {t.user_attrs.get("ln_trial_id")
                for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        cutoff = utcnow() - timedelta(seconds=self.settings.grace_s)
        for record in self.db.trials(key, study=study.study_name, state=TrialState.RUNNING):
            if record.id not in live and record.created_at < cutoff:
                try:
                    self.db.finish_trial(record.id, TrialState.RUNTIME_ERROR,
                                         "interrupted: the sweep that ran this trial stopped (no heartbeat)")
                except ValueError:
                    pass  # finished meanwhile by its own process

    def final_decision(self, kernel: Kernel, best: tuple[Any, Outcome], default, default_outcome: Outcome | None
                       ) -> tuple[tuple[Any, Outcome], Verdict | None]:
        """The study's best against the default in the user's call (``final.py``): the default
        stays unless the best is faster beyond the noise. Without a verified default, or when the
        default is the best, there is nothing to decide (verdict None)."""
        if default_outcome is None or not default_outcome.ok or best[0] == default:
            return best, None
        sides = []
        for config in (default, best[0]):
            launcher = self.backend.compile([(kernel, config)]).launchers[kernel.name]
            sides.append((config, self.harness.user_call(kernel, launcher)))
        timer = self.call_timer or WallTimer(self.harness.device, self.settings.measure_s / 10)
        counters["benchmarks_run"] += 2
        with self.harness.measuring():
            verdict = interleaved(sides[0], sides[1], timer, 2 * self.settings.measure_s)
        log.info("%s: in the call, default %.1f us, best %.1f us, margin %.1f%%: keeping the %s", kernel.name,
                 verdict.default_us, verdict.challenger_us, 100 * verdict.margin, verdict.to_json()["kept"])
        return (best if verdict.challenger_wins else (default, default_outcome)), verdict
