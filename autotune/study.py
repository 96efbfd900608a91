"""The Optuna loop of one tuning key: ask a batch, evaluate it, tell the results.

The study lives in Optuna's storage (the tuning DB's URL, or memory for replays), so an
interrupted sweep resumes it: trials measured earlier with the same software count toward the
budget and are never measured again; trials left running by a dead process (no heartbeat for the
grace period) are failed first, and the configs of interrupted trials are measured again (the
budget counts them once). The budget is the study's total across every process sharing it
(``budget.py``), and processes take each other's finished results instead of re-measuring them.
Warm starts (the default config, winners at the nearest shapes, a stale winner) are enqueued
before anything is sampled. Points the space's static constraints reject are told as failed
without compiling. Each trial's config and outcome are kept in its user attributes. A study also
ends when its best stops improving (``early_stop.py``; ``TuneSettings.early_stop``).
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import optuna
from optuna.trial import TrialState as OptunaState
from tqdm import tqdm

from ..db.api import TrialState
from .budget import BUDGET_ATTR, INTERRUPTED_ATTR, interrupted, spent, study_lock, to_remeasure
from .early_stop import measured_times, stalled
from .evaluate import Outcome
from ..core.timing import Timing
from .options import TuneSettings
from ..core.space import InvalidConfig, Knob, SearchSpace, config_key

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger("loopnest.autotune")
MAX_ASKS_PER_TRIAL = 20


class Evaluator(Protocol):
    """What the loop needs from a measurement backend (real kernels or a recorded table)."""

    def evaluate(self, configs: Sequence[Any], started: Callable[[int, int], None] | None = None
                 ) -> list[Outcome]: ...

    def invalid(self, values: dict, reason: str) -> Outcome: ...


@dataclass
class StudyResult:
    """What a run of the loop found; ``results`` maps config keys to (config, outcome)."""

    study_name: str
    results: dict[str, tuple[Any, Outcome]] = field(default_factory=dict)
    history: list[tuple[int, float | None]] = field(default_factory=list)  # measured trials, in order
    asked: int = 0
    stop_reason: str = ""

    @property
    def best(self) -> tuple[Any, Outcome] | None:
        ok = [r for r in self.results.values() if r[1].ok]
        return min(ok, key=lambda r: r[1].timing.p50_us) if ok else None

    @property
    def counts(self) -> tuple[int, int]:
        """(ok, failed) among measured configs."""
        ok = sum(1 for _, o in self.results.values() if o.ok)
        return ok, len(self.results) - ok


class AskTellGridSampler(optuna.samplers.GridSampler):
    """The grid sampler for an ask/tell loop: the loop notices an exhausted grid itself (the
    stock sampler calls ``study.stop()``, which only works inside ``study.optimize``)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def grid_values(knob: Knob) -> list:
    """The knob's values as Optuna parameters (ordered knobs by index)."""
    return list(range(len(knob.choices))) if knob.ordered else list(knob.choices)


def suggest(space: SearchSpace, trial: optuna.Trial) -> dict[str, Any]:
    """Knob values Optuna proposes for ``trial`` (ordered knobs as an integer index, neighbours
    adjacent for TPE and CMA-ES; others as categoricals)."""
    return {k.name: k.choices[trial.suggest_int(k.name, 0, len(k.choices) - 1)] if k.ordered
            else trial.suggest_categorical(k.name, k.choices) for k in space.knobs}


def suggest_fixed(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """Knob values of Optuna ``params`` (the inverse of ``suggest``'s encoding)."""
    return {k.name: k.choices[params[k.name]] if k.ordered else params[k.name] for k in space.knobs}


def make_sampler(name: str, space: SearchSpace, trials: int, seed: int | None) -> optuna.samplers.BaseSampler:
    """TPE (default), an exhaustive grid ("auto" picks it when the space fits the budget),
    random, or CMA-ES (categorical knobs fall back to random sampling)."""
    if name == "auto":
        name = "grid" if space.size <= trials else "tpe"
    if name == "grid":
        return AskTellGridSampler({k.name: grid_values(k) for k in space.knobs}, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    startup = max(4, min(10, trials // 3))
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=startup)


class Heartbeat:
    """Records heartbeats of running trials from a background thread (ask/tell has none)."""

    def __init__(self, study: optuna.Study, interval_s: int):
        storage = study._storage  # noqa: SLF001 - Optuna exposes no public accessor
        enabled = getattr(storage, "get_heartbeat_interval", lambda: None)() is not None
        self.storage = storage if enabled else None
        self.interval = interval_s
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        if self.storage is not None:
            self.thread.start()

    def add(self, trial: optuna.Trial) -> None:
        if self.storage is not None:
            self.storage.record_heartbeat(trial._trial_id)  # noqa: SLF001
            with self.lock:
                self.ids.add(trial._trial_id)  # noqa: SLF001

    def discard(self, trial: optuna.Trial) -> None:
        with self.lock:
            self.ids.discard(trial._trial_id)  # noqa: SLF001

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                ids = list(self.ids)
            for trial_id in ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception as exc:  # noqa: BLE001 - a missed beat is retried next interval
                    log.debug("heartbeat of trial %s failed: %s", trial_id, exc)


def fail_stale(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Fail trials whose process stopped sending heartbeats; returns them."""
    before = {t.number for t in study.get_trials(deepcopy=False, states=(OptunaState.RUNNING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return [t for t in study.get_trials(deepcopy=False, states=(OptunaState.FAIL,)) if t.number in before]


def _ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        return study.ask()


def _tell(study: optuna.Study, trial: optuna.Trial, config_json: dict, outcome: Outcome, tag: str,
          cut_short: bool = False) -> None:
    attrs: dict[str, Any] = {"config": config_json, "software": tag}
    if cut_short:
        attrs[INTERRUPTED_ATTR] = True
    if outcome.message:
        attrs["message"] = outcome.message[:2000]
    if outcome.timing:
        attrs.update(p20_us=outcome.timing.p20_us, p50_us=outcome.timing.p50_us,
                     p80_us=outcome.timing.p80_us)
    if outcome.trial_id is not None:
        attrs["ln_trial_id"] = outcome.trial_id
    # "state" last: each attribute is its own write, and a trial without it counts as interrupted
    # (a process killed between two writes left a FAIL trial with a state but no timings)
    attrs["state"] = outcome.state.value
    for name, value in attrs.items():
        trial.set_user_attr(name, value)
    if outcome.ok:
        study.tell(trial, outcome.timing.p50_us)
    else:
        study.tell(trial, state=OptunaState.FAIL)


def previous_results(trials: Sequence[optuna.trial.FrozenTrial], space: SearchSpace, tag: str
                     ) -> dict[str, tuple[Any, Outcome]]:
    """Configs measured in ``trials`` (a study's) under the same software; a resumed sweep, or
    another process sharing the study, takes these results instead of measuring again. An
    interrupted measurement is no result."""
    out: dict[str, tuple[Any, Outcome]] = {}
    for t in trials:
        a = t.user_attrs
        if t.state not in (OptunaState.COMPLETE, OptunaState.FAIL) or interrupted(t):
            continue
        if a.get("software") != tag or "state" not in a or a["state"] == TrialState.INVALID.value:
            continue
        try:
            config = space.validate(a["config"])
        except ValueError:
            continue
        outcome = _recorded_outcome(a)
        if outcome is not None:
            out.setdefault(config_key(config), (config, outcome))
    return out


def _recorded_outcome(attrs: dict) -> Outcome | None:
    """The outcome a trial's attributes record, or None when they do not hold a whole one (an
    unknown state, an ok state without its three timings, timings that are not numbers)."""
    try:
        state = TrialState(attrs["state"])
    except ValueError:
        return None
    quantiles = [attrs.get(q) for q in ("p20_us", "p50_us", "p80_us")]
    numbers = [isinstance(q, (int, float)) and not isinstance(q, bool) for q in quantiles]
    if any(numbers) and not all(numbers) or (state is TrialState.OK and not all(numbers)):
        return None
    timing = Timing(*quantiles, 0) if all(numbers) else None
    return Outcome(state, attrs.get("message"), timing, None, attrs.get("ln_trial_id"))


def enqueue_warm_starts(study: optuna.Study, space: SearchSpace, configs: Sequence[tuple[Any, str]]) -> int:
    """Enqueue (config, reason) pairs that are points of the space; returns how many."""
    count = 0
    for config, reason in configs:
        params = space.encode(config)
        if params is not None:
            study.enqueue_trial(params, user_attrs={"warm_start": reason}, skip_if_exists=True)
            count += 1
    return count


def _values_key(values: dict) -> str:
    return repr(sorted(values.items()))


class StudyLoop:
    """One run of the ask/evaluate/tell loop over ``space`` (see the module docstring)."""

    def __init__(self, study: optuna.Study, space: SearchSpace, evaluator: Evaluator,
                 settings: TuneSettings, tag: str, label: str = "",
                 recorded: Callable[[int], Outcome | None] | None = None):
        self.study, self.space, self.evaluator = study, space, evaluator
        self.settings, self.tag, self.label = settings, tag, label
        self.recorded = recorded  # the finished outcome of an ln_trials row, if the tuning DB has one
        self.result = StudyResult(study.study_name)
        self.seen: set[str] = set()
        self.invalid: set[str] = set()
        self.spent = 0
        self.times: list[float | None] = []  # p50 of each measured trial, in order (``early_stop.py``)
        self._refresh()

    def _refresh(self) -> list[optuna.trial.FrozenTrial]:
        """Read the study back from storage: the budget spent, and every process's results."""
        trials = self.study.get_trials(deepcopy=False)
        self.spent = spent(trials, self.tag)
        self.times = measured_times(trials, self.tag)
        for key, found in previous_results(trials, self.space, self.tag).items():
            self.result.results.setdefault(key, found)
        finished = [t for t in trials if t.state in (OptunaState.COMPLETE, OptunaState.FAIL) and not interrupted(t)]
        self.seen |= {_values_key(t.params) for t in finished}
        self.invalid |= {_values_key(t.user_attrs["config"]) for t in finished
                         if t.user_attrs.get("state") == TrialState.INVALID.value}
        return trials

    def _requeue_interrupted(self) -> None:
        """Enqueue the configs of interrupted trials that nobody measured since (item: a rerun after
        Ctrl-C measures them)."""
        with study_lock(self.study):
            trials = self._refresh()
            measured = {_values_key(t.params) for t in trials if t.user_attrs.get(BUDGET_ATTR) == self.tag
                        and not interrupted(t)}
            for t in to_remeasure(trials, self.tag, measured):
                row = t.user_attrs.get("ln_trial_id")
                outcome = self.recorded(row) if self.recorded is not None and row is not None else None
                if outcome is not None:  # measured, but the process died before telling Optuna
                    self._restore(t, outcome)
                else:
                    self.study.enqueue_trial(t.params, user_attrs={"warm_start": "interrupted"})

    def _restore(self, trial: optuna.trial.FrozenTrial, outcome: Outcome) -> None:
        """Add the outcome of an interrupted trial's finished measurement to the study, as one trial."""
        config = self.space.config(suggest_fixed(self.space, trial.params))
        attrs: dict[str, Any] = {"config": config.to_json(), "state": outcome.state.value, "software": self.tag,
                                 BUDGET_ATTR: self.tag, "ln_trial_id": outcome.trial_id, "restored": True}
        if outcome.message:
            attrs["message"] = outcome.message[:2000]
        if outcome.timing:
            attrs.update(p20_us=outcome.timing.p20_us, p50_us=outcome.timing.p50_us, p80_us=outcome.timing.p80_us)
        self.study.add_trial(optuna.trial.create_trial(
            params=trial.params, distributions=trial.distributions, user_attrs=attrs,
            state=OptunaState.COMPLETE if outcome.ok else OptunaState.FAIL,
            value=outcome.timing.p50_us if outcome.ok else None))

    def stop_reason(self, start: float) -> str:
        s = self.settings
        if self.spent >= s.trials:
            return "trial budget"
        if self.result.asked and time.monotonic() - start >= s.time_budget_s:  # one trial at least
            return "time budget"
        if len(self.seen) >= self.space.size:
            return "space exhausted"
        if s.early_stop and stalled(self.times, s.early_stop_after):
            return "no improvement"
        if self.result.asked >= MAX_ASKS_PER_TRIAL * s.trials:
            return "too many invalid or repeated points"
        return ""

    def run(self) -> StudyResult:
        """Loop until a budget is spent, the space is exhausted or the best stops improving."""
        start = time.monotonic()
        bar = tqdm(total=self.settings.trials, initial=min(self.spent, self.settings.trials),
                   desc=self.label, disable=not self.settings.progress, leave=False, unit="trial")
        heartbeat = Heartbeat(self.study, self.settings.heartbeat_s)
        try:
            self._requeue_interrupted()
            while not (reason := self.stop_reason(start)):
                self._round(heartbeat, bar, start)
        finally:
            heartbeat.close()
            bar.close()
        self.result.stop_reason = reason
        return self.result

    def _round(self, heartbeat: Heartbeat, bar, start: float) -> None:
        """Ask a batch, evaluate it; trials that repeat a candidate take its result."""
        batch, repeats = self._ask_batch(heartbeat, start)
        try:
            self._evaluate(batch, heartbeat, bar)
        except BaseException:
            for trial, _ in repeats:
                self.study.tell(trial, state=OptunaState.FAIL)
            raise
        for trial, key in repeats:
            config, outcome = self.result.results[key]
            _tell(self.study, trial, config.to_json(), outcome, self.tag)
            heartbeat.discard(trial)

    def _ask_batch(self, heartbeat: Heartbeat, start: float):
        """New distinct candidates (at most ``workers``) and asked trials that repeat a candidate.

        Each ask happens under the study's lock, after counting the budget in storage; a new
        candidate is marked as spending the budget before the lock is released (``budget.py``)."""
        batch: list[tuple[optuna.Trial, Any, str]] = []
        repeats: list[tuple[optuna.Trial, str]] = []
        while len(batch) < self.settings.workers and not self.stop_reason(start):
            with study_lock(self.study):
                self._refresh()
                if self.stop_reason(start):
                    break
                trial = _ask(self.study)
                heartbeat.add(trial)  # from now on a dead sweep's trial is found stale
                self.result.asked += 1
                values = suggest(self.space, trial)
                self.seen.add(_values_key(trial.params))
                try:
                    config = self.space.config(values)
                except InvalidConfig as exc:
                    rejected = str(exc)
                else:
                    rejected, key = None, config_key(config)
                    if key in self.result.results or any(key == k for _, _, k in batch):
                        repeats.append((trial, key))
                        continue
                    trial.set_user_attr(BUDGET_ATTR, self.tag)
                    self.spent += 1
                    batch.append((trial, config, key))
            if rejected is not None:
                self._tell_invalid(trial, values, rejected)
                heartbeat.discard(trial)
        return batch, repeats

    def _tell_invalid(self, trial: optuna.Trial, values: dict, reason: str) -> None:
        first = (key := _values_key(values)) not in self.invalid
        self.invalid.add(key)
        outcome = self.evaluator.invalid(values, reason) if first else Outcome(TrialState.INVALID, reason)
        _tell(self.study, trial, values, outcome, self.tag)

    def _evaluate(self, batch, heartbeat: Heartbeat, bar) -> None:
        if not batch:
            return

        def started(position: int, trial_id: int) -> None:
            batch[position][0].set_user_attr("ln_trial_id", trial_id)

        try:
            outcomes = self.evaluator.evaluate([c for _, c, _ in batch], started)
        except BaseException:
            for trial, config, _ in batch:
                _tell(self.study, trial, config.to_json(), Outcome(TrialState.RUNTIME_ERROR, "interrupted"), self.tag,
                      cut_short=True)
            raise
        for (trial, config, key), outcome in zip(batch, outcomes):
            self.result.results[key] = (config, outcome)
            self.result.history.append((trial.number, outcome.timing.p50_us if outcome.ok else None))
            _tell(self.study, trial, config.to_json(), outcome, self.tag)
            heartbeat.discard(trial)
            bar.update(1)
