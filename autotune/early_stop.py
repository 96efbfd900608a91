"""Stopping a study early, when its best time stops improving.

Rule (``stalled``): take the study's measured trials in order: those that spend this software's
budget and finished (an ok trial counts with its p50, a failed one as no time). Once there are at
least ``min_trials`` of them, the window is the last ``max(MIN_WINDOW, ceil(WINDOW_FRACTION * n))``
of the ``n`` trials. The study has stalled when the window did not improve the best p50 of the
trials before it by more than ``GAIN``: best(all) > best(before the window) * (1 - GAIN). No ok
trial before the window means nothing to compare with: not stalled.

The window grows with the study, so a longer study must go longer without progress before it
stops; the minimum count keeps the sampler's random start-up (``study.make_sampler``) and the warm
starts from being judged alone.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from .budget import spends_budget

GAIN = 0.02
MIN_WINDOW = 5
WINDOW_FRACTION = 0.4


def stalled(times: Sequence[float | None], min_trials: int) -> bool:
    """Whether measured trials with p50s ``times`` (None: failed), in order, have stalled."""
    n = len(times)
    if n < min_trials:
        return False
    window = max(MIN_WINDOW, math.ceil(WINDOW_FRACTION * n))
    before = [t for t in times[:max(0, n - window)] if t is not None]
    if not before:
        return False
    return min(t for t in times if t is not None) > min(before) * (1 - GAIN)


def measured_times(trials: Iterable[FrozenTrial], tag: str) -> list[float | None]:
    """The p50 of each finished trial that spends ``tag``'s budget, in trial order (None: failed)."""
    done = sorted((t for t in trials if spends_budget(t, tag) and t.state != OptunaState.RUNNING),
                  key=lambda t: t.number)
    return [t.user_attrs.get("p50_us") if t.state == OptunaState.COMPLETE else None for t in done]
