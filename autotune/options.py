"""Settings of the tuner: budgets, sampler, storage. Typed, frozen, passed down explicitly."""
from __future__ import annotations

import os
from dataclasses import dataclass

SIZE_CLASSES = ("gpu", "cpu", "cache", "tiny")  # input sizes of the built-in workloads (autotune/workloads.py)
TUNE_MODES = ("off", "db", "sweep", "queue")  # heuristics; stored winners; + tune the misses; + enqueue them
SAMPLERS = ("auto", "tpe", "grid", "random", "cmaes")


@dataclass(frozen=True)
class TuneSettings:
    """How kernels are tuned.

    ``trials``: configs measured per kernel (a study's total: a rerun continues an interrupted
    study up to it); ``time_budget_s``: seconds per kernel per run; ``timeout_s``: per trial,
    for compiling and for one verification run. ``sampler``: "auto" picks an exhaustive grid
    when the space has no more points than ``trials``, else TPE. ``db_url``: the tuning DB
    (None: ``$LOOPNEST_DB`` or the user cache file); Optuna's studies live in the same database,
    named ``{study_prefix}:{tuning key}``. ``workers``: candidates compiled in parallel.
    ``heartbeat_s``/``grace_s``: a running trial whose sweep stopped sending heartbeats for
    ``grace_s`` is failed by the next sweep of its study. ``force``: sweep kernels that already
    have an exact winner. ``measure_s``: CPU seconds spent timing one config. ``early_stop``: end a
    study once its best stops improving (``early_stop.py``: no gain above 2% over the last
    max(5, 40%) of its measured trials), never before ``early_stop_after`` measured trials.
    """

    trials: int = 24
    time_budget_s: float = 120.0
    timeout_s: float = 60.0
    sampler: str = "auto"
    db_url: str | None = None
    study_prefix: str = "ln"
    seed: int | None = None
    workers: int = max(1, os.cpu_count() or 1)
    heartbeat_s: int = 5
    grace_s: int = 20
    force: bool = False
    progress: bool = False
    measure_s: float = 0.25
    early_stop: bool = True
    early_stop_after: int = 12

    def __post_init__(self):
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        for name in ("trials", "workers", "heartbeat_s", "grace_s", "early_stop_after"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("time_budget_s", "timeout_s", "measure_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.study_prefix or ":" in self.study_prefix:
            raise ValueError(f"study_prefix must be non-empty without ':', got {self.study_prefix!r}")


def check_mode(tune: str) -> str:
    """``tune`` if it is one of ``TUNE_MODES``; ValueError otherwise."""
    if tune not in TUNE_MODES:
        raise ValueError(f"tune must be one of {TUNE_MODES}, got {tune!r}")
    return tune
