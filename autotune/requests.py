"""Asking the tuning service for work: ``request(...)`` and what ``autotune enqueue``/``queue`` show.

``request(graph_or_fn, example_inputs)`` compiles the graph (a DSL ``ir.Graph``, an ATen
``GraphModule``, or any torch function or module, traced with ``make_fx``) with the tuning DB's
winners, and enqueues one request per kernel that has no exact winner. It measures nothing; an
``autotune worker`` tunes the requests, and later compiles (``tune="db"`` or ``"queue"``) in any
process pick up the winners.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import torch

from ..backends import registry
from ..backends.base import Backend, schedule_for
from ..core.hardware import HardwareInfo
from ..db.api import open_db, resolve_url
from ..db.models import RequestState
from ..db.queue import RequestQueue
from ..db.queue_records import HardwareTarget, RequestRecord
from ..ir.nodes import Graph
from ..ir.verify import verify
from ..lowering.api import compile_fx
from ..lowering.options import CompileOptions
from ..ir.interpret import bind_symbols
from .compile_time import DbTuner
from .enqueue import DEFAULT_MAX_ATTEMPTS, RequestOptions, enqueue_kernels, unmeasured
from .options import TuneSettings
from .sweep import SweepTarget, targets

DEFAULT_TRIALS = TuneSettings().trials
THROUGHPUT_WINDOW_S = 600  # `autotune queue` reports requests finished per minute over this window


def request(graph_or_fn: Any, example_inputs: Sequence, *, priority: int = 0, trials: int | None = None,
            hardware: HardwareInfo | HardwareTarget | str | None = None, backend: str | Backend | None = None,
            db_url: str | None = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[int]:
    """Enqueue one tuning request per kernel of ``graph_or_fn`` that has no exact winner; returns
    the request ids (a request already queued for the same key is merged, keeping the highest
    priority and the largest budget). ``hardware``: None for this machine (for the backend), a
    ``HardwareInfo``, a fingerprint, or ``"any sm_90"`` / ``"any avx512 cpu"``; ``trials``: the
    budget (default 24); ``backend``: by name, default by the inputs' device."""
    inputs = list(example_inputs)
    chosen = registry.resolve(backend, inputs)
    options = RequestOptions(trials=trials or DEFAULT_TRIALS, priority=priority, max_attempts=max_attempts,
                             hardware=hardware)
    options.target(chosen)  # a bad hardware target is an error before anything compiles
    tuner = DbTuner("queue", TuneSettings(db_url=resolve_url(db_url), trials=options.trials), options)
    if isinstance(graph_or_fn, Graph):  # kernels with symbolic sizes too, at the inputs' sizes
        env = bind_symbols(graph_or_fn, inputs)
        verify(graph_or_fn)
        kernels = schedule_for(graph_or_fn, chosen, "graph").kernels
        if options.target(chosen) == HardwareTarget.of(chosen.hardware()):
            kernels = unmeasured(kernels, chosen, env, tuner.settings.db_url)
        return enqueue_kernels(tuner.settings.db_url, kernels, chosen, env, options, "graph")
    gm = graph_or_fn if isinstance(graph_or_fn, torch.fx.GraphModule) else \
        torch.fx.experimental.proxy_tensor.make_fx(graph_or_fn, tracing_mode="fake")(*inputs)
    compile_fx(gm, inputs, CompileOptions(backend=chosen, tuner=tuner))
    return list(dict.fromkeys(tuner.enqueued))


def request_workloads(specs: Sequence[str], backend: str | None, size_class: str | None,
                      **kwargs: Any) -> list[int]:
    """``autotune enqueue``: ``request`` for each built-in or ``module:function`` workload."""
    chosen = registry.get(backend) if backend else registry.for_this_machine()
    found: list[SweepTarget] = [t for spec in specs for t in targets(spec, chosen, size_class)]
    ids: list[int] = []
    for t in found:
        ids += request(t.fn, t.inputs, backend=chosen, **kwargs)
    return list(dict.fromkeys(ids))


def queue_rows(db_url: str | None, states: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``autotune queue``: each request as JSON, with its age in seconds."""
    queue = RequestQueue(open_db(resolve_url(db_url)))
    now = queue.now()
    return [{**r.to_json(), "age_s": (now - r.created_at).total_seconds()} for r in queue.list(states)]


def throughput(records: Sequence[RequestRecord], now: datetime, window_s: float = THROUGHPUT_WINDOW_S) -> float:
    """Requests finished ``done`` per minute over the last ``window_s`` seconds."""
    done = [r for r in records if r.state == RequestState.DONE and r.finished_at
            and (now - r.finished_at).total_seconds() <= window_s]
    return 60.0 * len(done) / window_s


def queue_summary(db_url: str | None) -> dict[str, Any]:
    """Counts per state and the recent throughput (the footer of ``autotune queue``)."""
    queue = RequestQueue(open_db(resolve_url(db_url)))
    records, now = queue.list(), queue.now()
    counts = {s.value: sum(1 for r in records if r.state == s) for s in RequestState}
    return {**counts, "done_per_minute": throughput(records, now)}


def cancel(db_url: str | None, request_id: int) -> RequestRecord:
    """``autotune queue cancel ID``."""
    return RequestQueue(open_db(resolve_url(db_url))).cancel(request_id)
