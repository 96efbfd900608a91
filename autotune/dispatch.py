"""Configs chosen at call time for the kernels of a graph compiled with symbolic sizes.

A ``SizeTuner`` is the ``runtime.compiled.SizeDispatch`` of such a graph. The first call at new
sizes asks it, once, which launcher each symbolic kernel runs there: the exact winner at those
sizes, else the winner of their size bucket (``buckets``), else the default; with
``tune="sweep"``, a kernel whose bucket has no winner is tuned there first (at the call's sizes,
on random inputs). A config other than the one the graph was built with runs a variant of the
same symbolic kernel compiled for it, built once per config. The graph keeps the answer in the
call plan of those sizes, so later calls there touch neither the DB nor this object.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from ..backends.base import Backend, Launcher
from ..core.space import SearchSpace, config_key
from ..db.api import LookupKind, TuningDB, db_exists, open_db, resolve_url
from ..pipeline import ConfigPlan
from ..runtime.compiled import CompiledGraph
from ..scheduler.kernel import Kernel
from .buckets import bucket, bucket_key, bucket_winner
from .decisions import Decision, Source, decide
from .keys import kernel_sizes, specialize, tuning_key
from .options import TuneSettings

# Tunes kernels (by name) of a graph at symbol values; returns their configs and decisions.
SweepAt = Callable[[CompiledGraph, Sequence[str], dict[str, int]], ConfigPlan]
MAX_SIZES = 4096  # call-time decisions kept per graph (then recomputed when asked again)


class SizeTuner:
    """Chooses, per call sizes, the configs of ``kernels`` (those with symbolic sizes)."""

    def __init__(self, backend: Backend, kernels: Sequence[Kernel], settings: TuneSettings,
                 sweep: SweepAt | None = None):
        self.backend = backend
        self.kernels = list(kernels)
        self.settings = settings
        self.sweep = sweep
        self.hardware = backend.hardware()
        self._chosen: dict[tuple[str, tuple[int, ...]], tuple[Decision, Any]] = {}
        self._variants: dict[tuple[str, str], Launcher] = {}

    def resolve(self, graph: CompiledGraph, env: dict[str, int]) -> tuple[dict[str, Launcher], dict[str, Decision]]:
        """Launchers to run at symbol values ``env`` instead of ``graph``'s own (kernel name ->
        launcher), and the decisions, keyed ``kernel@sizes``."""
        sizes = {k.name: kernel_sizes(k, env) for k in self.kernels}
        pending = [k for k in self.kernels if (k.name, sizes[k.name]) not in self._chosen]
        if pending:
            if len(self._chosen) + len(pending) > MAX_SIZES:
                self._chosen.clear()
                pending = self.kernels
            self._choose(graph, pending, env)
        launchers: dict[str, Launcher] = {}
        decisions: dict[str, Decision] = {}
        for k in self.kernels:
            decision, config = self._chosen[(k.name, sizes[k.name])]
            decisions[f"{k.name}@{bucket_key(decision.sizes)}"] = decision
            if config is not None:
                launchers[k.name] = self.variant(graph, k, config)
        return launchers, decisions

    def _choose(self, graph: CompiledGraph, kernels: Sequence[Kernel], env: dict[str, int]) -> None:
        url = resolve_url(self.settings.db_url)
        db = open_db(url) if db_exists(url) else None
        software = self.backend.software()
        chosen = {k.name: self._lookup(db, url, k, env, software) for k in kernels}
        misses = [name for name, (_, config) in chosen.items() if config is None]
        if self.sweep is not None and misses:
            swept = self.sweep(graph.with_launchers({}), misses, env)
            chosen.update({name: (d, swept.configs[name]) for name, d in swept.decisions.items()})
        for k in kernels:
            decision, config = chosen[k.name]
            sizes = kernel_sizes(k, env)
            decision = dataclasses.replace(decision, sizes=sizes, bucket=bucket(k, sizes))
            self._chosen[(k.name, sizes)] = (decision, config)

    def _lookup(self, db: TuningDB | None, url: str, kernel: Kernel, env: dict[str, int],
                software: Mapping[str, Any]) -> tuple[Decision, Any]:
        """The exact winner at ``env``'s sizes, else a valid winner of their bucket, else None."""
        default = self.backend.default_config(kernel).to_json()
        if db is None:
            return Decision(kernel.name, Source.DEFAULT, "no-db", default, f"no DB at {url}"), None
        key = tuning_key(kernel, self.backend.name, self.hardware, env)
        if key is None:
            return Decision(kernel.name, Source.DEFAULT, "unkeyed", default, "a symbol of the kernel is unbound"), None
        space = self.backend.space(specialize(kernel, env), self.hardware)
        found = db.lookup(key, software)
        decision, config = decide(kernel.name, found, key, space, default)
        if found.kind is LookupKind.EXACT:
            return decision, config
        winner = bucket_winner(db, kernel, key, software)
        if winner is None:
            return decision, None
        try:
            config = space.validate(winner.config)
        except ValueError as exc:
            note = (f"the bucket's winner at {winner.key.sizes_key} is not valid at {key.sizes_key}: "
                    f"{_reason(space, winner.config) or exc}")
            return Decision(kernel.name, Source.DEFAULT, "bucket-invalid", default, note), None
        note = f"winner at {winner.key.sizes_key}, {winner.time_us:.1f} us there"
        return Decision(kernel.name, Source.BUCKET, "bucket", config.to_json(), note), config

    def variant(self, graph: CompiledGraph, kernel: Kernel, config: Any) -> Launcher:
        """``kernel``'s launcher for ``config``: the graph's own when it was built with it, else a
        variant compiled once per config."""
        if config == graph.configs.get(kernel.name):
            return graph.launchers[kernel.name]
        key = (kernel.name, config_key(config))
        if key not in self._variants:
            self._variants[key] = self.backend.compile([(kernel, config)]).launchers[kernel.name]
        return self._variants[key]


def _reason(space: SearchSpace, data: Mapping[str, Any]) -> str | None:
    """Why a well-formed config cannot run in ``space`` (its static constraint), if that is why."""
    try:
        return space.constraint(space.from_json(dict(data)))
    except (TypeError, ValueError):
        return None
