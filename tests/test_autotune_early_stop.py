"""Early stopping: a study ends when its best p50 stops improving (autotune/early_stop.py)."""
from __future__ import annotations

import dataclasses

import optuna
import pytest

from loopnest.autotune.early_stop import stalled
from loopnest.autotune.evaluate import Outcome
from loopnest.autotune.options import TuneSettings
from loopnest.autotune.study import StudyLoop
from loopnest.core.space import Knob, SearchSpace
from loopnest.core.timing import Timing
from loopnest.db.api import TrialState


@dataclasses.dataclass(frozen=True)
class Point:
    """A config of the test space: one knob."""

    a: int

    def to_json(self) -> dict:
        return {"a": self.a}


SPACE = SearchSpace("test", lambda data: Point(**data), (Knob("a", tuple(range(64))),))


class Scripted:
    """An evaluator whose k-th measured config takes ``times(k)`` µs, whatever the config."""

    def __init__(self, times):
        self.times, self.count = times, 0

    def evaluate(self, configs, started=None):
        out = []
        for _ in configs:
            t = self.times(self.count)
            self.count += 1
            out.append(Outcome(TrialState.OK, timing=Timing(t, t, t, 1)) if t is not None
                       else Outcome(TrialState.RUNTIME_ERROR, "failed"))
        return out

    def invalid(self, values, reason):
        return Outcome(TrialState.INVALID, reason)


def run(times, **settings):
    base = dict(trials=40, time_budget_s=1e9, sampler="random", seed=0, workers=1)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    evaluator = Scripted(times)
    result = StudyLoop(study, SPACE, evaluator, TuneSettings(**{**base, **settings}), "tag").run()
    return result, evaluator.count


def test_a_flat_study_stops_at_the_minimum_count():
    result, measured = run(lambda k: 100.0)
    assert result.stop_reason == "no improvement" and measured == 12


def test_a_study_that_keeps_improving_runs_to_its_budget():
    result, measured = run(lambda k: 100.0 * 0.97 ** k)
    assert result.stop_reason == "trial budget" and measured == 40


def test_a_late_improvement_restarts_the_wait():
    # flat, a 10% gain at the 11th trial, flat again: the study goes on until the window (8 of 19)
    # no longer holds the gain
    result, measured = run(lambda k: 100.0 if k < 10 else 90.0)
    assert result.stop_reason == "no improvement" and measured == 19


def test_early_stop_can_be_turned_off():
    result, measured = run(lambda k: 100.0, early_stop=False)
    assert result.stop_reason == "trial budget" and measured == 40


@pytest.mark.parametrize("times, min_trials, expected", [
    ([100.0] * 11, 12, False),                      # before the minimum count
    ([100.0] * 12, 12, True),                       # window 5 of 12, no gain
    ([100.0] * 7 + [98.5] + [100.0] * 4, 12, True),  # a gain of 1.5%: not above 2%
    ([100.0] * 7 + [97.0] + [100.0] * 4, 12, False),  # a gain of 3% inside the window
    ([None] * 7 + [100.0] * 5, 12, False),          # nothing ok before the window
    ([100.0] + [None] * 11, 12, True),              # failures are trials without progress
    ([100.0] * 20 + [97.0] + [100.0] * 7, 12, False),  # window of 28 is 12 (40%): the gain is in it
])
def test_the_rule(times, min_trials, expected):
    assert stalled(times, min_trials) is expected
