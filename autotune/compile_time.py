"""Choosing kernel configs at compile time: the ``pipeline.Tuner`` that loopnest's entry points
pass down, looking winners up in the tuning DB (``tune="db"``) or also sweeping (``"sweep"``).

``tune="db"``: a kernel whose exact key has a winner measured with this software gets its
config, validated against the backend's search space first (a tampered or corrupt row is skipped
with a warning and never executed). A stale winner (other software or codegen version) or one at
the nearest shape is only a warm start: the kernel gets its default and the decision says so.
``tune="sweep"``: kernels without an exact winner are tuned on example inputs (given, or random
ones with the reference interpreter as the oracle) and their winners stored. No benchmark runs
for a kernel served from the DB.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..backends.base import Backend
from ..core.timing import BenchOptions
from ..db.api import LookupKind, TuningKey, db_exists, open_db, resolve_url
from ..ir.dtypes import Kind
from ..ir.expr import loads
from ..ir.index import Indirect, evaluate
from ..ir.interpret import bind_symbols
from ..ir.nodes import Extern, Graph
from ..pipeline import ConfigPlan, GraphExample
from ..runtime.compiled import CompiledGraph
from ..scheduler import Schedule
from .harness import GraphHarness
from .keys import tuning_key
from .options import TuneSettings, check_mode
from .tuner import GraphTuner

log = logging.getLogger("loopnest.autotune")


class Source(enum.StrEnum):
    """Where a kernel's config came from."""

    DB = "db"            # an exact winner of the tuning DB, validated
    SWEEP = "sweep"      # tuned by this compile
    DEFAULT = "default"  # the backend's heuristics


@dataclass(frozen=True)
class Decision:
    """Where a kernel's config came from (``source``), and ``lookup``: what the DB had (exact,
    stale, nearest, miss, invalid, unkeyed, no-db)."""

    kernel: str
    source: Source
    lookup: str
    config: dict[str, Any]
    note: str = ""


class DbTuner:
    """A ``pipeline.Tuner``: stored winners for ``tune="db"``, and a sweep of the misses too for
    ``tune="sweep"`` (see the module docstring)."""

    def __init__(self, mode: str, settings: TuneSettings | None = None):
        self.mode = check_mode(mode)
        self.settings = settings or TuneSettings()

    def lookup(self, schedule: Schedule, backend: Backend, example: GraphExample | None) -> ConfigPlan:
        return lookup_configs(schedule, backend, self.settings, example_env(schedule.graph, example))

    def sweep(self, compiled: CompiledGraph, kernels: Sequence[str], example: GraphExample | None) -> ConfigPlan:
        return sweep_compiled(compiled, kernels, self.settings, example) if self.mode == "sweep" else ConfigPlan()


def tuner_for(tune: str, settings: TuneSettings | None = None) -> DbTuner | None:
    """The tuner for ``tune`` ("off": None, the backends' heuristics; "db"; "sweep")."""
    return None if check_mode(tune) == "off" else DbTuner(tune, settings)


def lookup_configs(schedule: Schedule, backend: Backend, settings: TuneSettings, env: dict[str, int]) -> ConfigPlan:
    """Exact DB winners for the schedule's kernels; every other kernel is a miss (default).
    With ``settings.force`` every kernel is also listed as a miss, so a sweep re-tunes it."""
    url = resolve_url(settings.db_url)
    plan = ConfigPlan()
    hardware = backend.hardware()
    db = open_db(url) if db_exists(url) else None
    software = backend.software()
    for kernel in schedule.kernels:
        key = tuning_key(kernel, backend.name, hardware, env)
        default = backend.default_config(kernel).to_json()
        if key is None or db is None:
            plan.decisions[kernel.name] = Decision(kernel.name, Source.DEFAULT, "unkeyed" if key is None else "no-db",
                                                   default, "sizes unknown" if key is None else f"no DB at {url}")
            plan.misses.append(kernel.name)
            continue
        found = db.lookup(key, software)
        decision, config = _decide(kernel, found, key, backend.space(kernel, hardware), default)
        plan.decisions[kernel.name] = decision
        if config is not None:
            plan.configs[kernel.name] = config
        if config is None or settings.force:
            plan.misses.append(kernel.name)
    return plan


def _decide(kernel, found, key: TuningKey, space, default: dict) -> tuple[Decision, Any]:
    if found.kind is LookupKind.MISS:
        return Decision(kernel.name, Source.DEFAULT, "miss", default), None
    if found.kind is not LookupKind.EXACT:
        what = ("measured with other software" if found.kind is LookupKind.STALE
                else f"at the nearest shape {found.winner.sizes}")
        note = f"warm start only: a winner {what}, {found.winner.time_us:.1f} us there"
        return Decision(kernel.name, Source.DEFAULT, found.kind.value, default, note), None
    try:
        config = space.validate(found.config)
    except ValueError as exc:
        log.warning("tuning DB: skipping the stored config of %s (%s %s): %s", kernel.name,
                    key.kernel_hash, key.sizes_key, exc)
        return Decision(kernel.name, Source.DEFAULT, "invalid", default, f"stored config rejected: {exc}"), None
    return Decision(kernel.name, Source.DB, "exact", config.to_json(), f"{found.winner.time_us:.1f} us"), config


def sweep_compiled(compiled: CompiledGraph, kernels: Sequence[str], settings: TuneSettings,
                   example: GraphExample | None) -> ConfigPlan:
    """Tune ``kernels`` of ``compiled`` on the example (or random) inputs; winners are stored."""
    graph, backend = compiled.graph, compiled.backend
    if example is None:
        if graph.symbols():
            log.warning("tune='sweep' needs example inputs for a graph with symbolic sizes; using defaults")
            return ConfigPlan()
        example = GraphExample(tuple(random_inputs(graph, {}, backend.device)))
    inputs, expected = list(example.inputs), example.expected
    harness = GraphHarness(compiled, lambda g: list(g(*inputs)), expected, BenchOptions(budget_s=settings.measure_s))
    tuner = GraphTuner(harness, settings, open_db(resolve_url(settings.db_url)))
    wanted = [k for k in compiled.schedule.kernels if k.name in kernels]
    plan = ConfigPlan()
    for kernel, report in zip(wanted, tuner.tune_all(wanted)):
        if report.config is not None:
            default = "-" if report.default_us is None else f"{report.default_us:.1f}"
            plan.decisions[kernel.name] = Decision(kernel.name, Source.SWEEP, report.lookup, report.config,
                                                   f"{report.best_us:.1f} us, default {default} us")
            plan.configs[kernel.name] = backend.space(kernel, tuner.hardware).validate(report.config)
    return plan


def example_env(graph: Graph, example: GraphExample | None) -> dict[str, int]:
    """Symbol values bound by the example's input shapes (empty without an example)."""
    return bind_symbols(graph, example.inputs) if example is not None else {}


def index_bounds(graph: Graph, env: dict[str, int]) -> dict[str, int]:
    """For inputs read as gather/embedding indices: the smallest extent they index."""
    bounds: dict[str, int] = {}
    for node in (n for n in graph.nodes if not isinstance(n, Extern)):
        for ld in loads(node.body):
            for atom in (a for i in ld.index for a in i.atoms() if isinstance(a, Indirect)):
                extent = evaluate(atom.bound, env)
                for src in loads(atom.value):
                    bounds[src.buffer] = min(bounds.get(src.buffer, extent), extent)
    return bounds


def random_inputs(graph: Graph, env: dict[str, int], device: str = "cpu") -> list[torch.Tensor]:
    """Random tensors for the graph's inputs: normal floats, indices inside what they index."""
    bounds = index_bounds(graph, env)
    gen = torch.Generator().manual_seed(0)
    out = []
    for name in graph.inputs:
        b = graph.buffers[name]
        sizes = [evaluate(s, env) for s in b.layout.sizes]
        strides = [evaluate(s, env) for s in b.layout.strides]
        t = torch.empty_strided(sizes, strides, dtype=b.dtype.torch)
        if b.dtype.is_float:
            t.copy_(torch.randn(sizes, generator=gen))
        elif b.dtype.is_bool:
            t.copy_(torch.rand(sizes, generator=gen) > 0.5)
        else:
            hi = bounds.get(name, 8)
            lo = 0 if name in bounds or b.dtype.kind is Kind.UINT else -hi
            t.copy_(torch.randint(lo, hi, sizes, generator=gen))
        out.append(t.to(device))
    return out
