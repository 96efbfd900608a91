"""Shared fixtures and helpers of the autotune and CLI tests (not a test module).

``db_url`` is tests/test_db.py's fixture: a test runs against SQLite and against a fresh
database on the PostgreSQL server of ``$LOOPNEST_TEST_PG_URL`` (skipped when unset, a failure
under CI).
"""
from __future__ import annotations

import torch
from test_db import db_url  # noqa: F401 - re-exported fixture

import loopnest as ln
from loopnest.autotune.options import TuneSettings


def fast(url: str, **changes) -> TuneSettings:
    """Settings for tests: few trials, short timing, quick heartbeats."""
    base = dict(trials=3, time_budget_s=120, timeout_s=60, db_url=url, measure_s=0.02,
                heartbeat_s=1, grace_s=2, seed=0)
    return TuneSettings(**{**base, **changes})


def rows_graph(rows: int = 64, cols: int = 96):
    """A DSL graph with one Welford row kernel (var_mean) and its inputs."""
    x = ln.placeholder("x", (rows, cols), ln.float32)
    var, mean = ln.var_mean(x, axis=-1, correction=0)
    f = ln.compile([var, mean])
    X = torch.randn(rows, cols)
    return f.graph(X), (X,)


def absmax_graph(n: int = 3000):
    """A DSL graph with one full-reduction kernel (max |x|): a space of just the thread counts."""
    x = ln.placeholder("x", (n,), ln.float32)
    f = ln.compile(ln.max(ln.abs(x)))
    X = torch.randn(n)
    return f.graph(X), (X,)
