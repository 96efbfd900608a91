"""Choosing kernel configs at compile time: the ``pipeline.Tuner`` that loopnest's entry points
pass down, looking winners up in the tuning DB (``tune="db"``) or also sweeping (``"sweep"``).

``tune="db"``: a kernel whose exact key has a winner measured with this software gets its
config, validated against the backend's search space first (a tampered or corrupt row is skipped
with a warning and never executed). A stale winner (other software or codegen version) or one at
the nearest shape is only a warm start: the kernel gets its default and the decision says so.
``tune="sweep"``: kernels without an exact winner are tuned on example inputs (given, or random
ones with the reference interpreter as the oracle) and their winners stored. No benchmark runs
for a kernel served from the DB. Kernels with symbolic sizes are not looked up here: their
configs are chosen per call sizes (``DbTuner.at_sizes``, ``autotune.dispatch``).
"""
from __future__ import annotations

import logging
from typing import Collection, Mapping, Sequence

import torch

from ..backends.base import Backend
from ..core.timing import BenchOptions
from ..db.api import db_exists, open_db, resolve_url
from ..ir.dtypes import Kind
from ..ir.expr import Expr, IndexValue, Load, loads, walk
from ..ir.index import Indirect, evaluate
from ..ir.interpret import bind_symbols
from ..ir.nodes import Buffer, Extern, Graph, Pointwise
from ..pipeline import ConfigPlan, GraphExample
from ..runtime.compiled import CompiledGraph
from ..scheduler import Schedule
from .decisions import Decision, Source, decide
from .dispatch import SizeTuner
from .enqueue import RequestOptions, enqueue_misses
from .harness import GraphHarness
from .keys import kernel_symbols, tuning_key
from .options import TuneSettings, check_mode
from .tuner import GraphTuner

log = logging.getLogger("loopnest.autotune")


class DbTuner:
    """A ``pipeline.Tuner``: stored winners for ``tune="db"``, and a sweep of the misses too for
    ``tune="sweep"`` (see the module docstring). ``tune="queue"`` enqueues the misses as tuning
    requests (``requests``: their budget, priority, target; ids in ``enqueued``) and measures nothing."""

    def __init__(self, mode: str, settings: TuneSettings | None = None, requests: RequestOptions | None = None):
        self.mode = check_mode(mode)
        self.settings = settings or TuneSettings()
        self.requests = requests or RequestOptions(trials=self.settings.trials)
        self.enqueued: list[int] = []

    def lookup(self, schedule: Schedule, backend: Backend, example: GraphExample | None) -> ConfigPlan:
        return lookup_configs(schedule, backend, self.settings, example_env(schedule.graph, example))

    def sweep(self, compiled: CompiledGraph, kernels: Sequence[str], example: GraphExample | None) -> ConfigPlan:
        if self.mode == "queue":
            self.enqueued += enqueue_misses(compiled, kernels, self.settings.db_url, example, self.requests)
        return sweep_compiled(compiled, kernels, self.settings, example) if self.mode == "sweep" else ConfigPlan()


    def at_sizes(self, schedule: Schedule, backend: Backend, fixed: Collection[str] = ()) -> SizeTuner | None:
        """The call-time chooser of configs for the kernels with symbolic sizes (those not in
        ``fixed``), sweeping each size bucket at its first call with ``tune="sweep"``; None when
        every kernel is static."""
        kernels = [k for k in schedule.kernels if kernel_symbols(k) and k.name not in fixed]
        if not kernels:
            return None
        return SizeTuner(backend, kernels, self.settings, self._sweep_at if self.mode == "sweep" else None)

    def _sweep_at(self, compiled: CompiledGraph, kernels: Sequence[str], env: dict[str, int]) -> ConfigPlan:
        example = GraphExample(tuple(random_inputs(compiled.graph, env, compiled.device)))
        return sweep_compiled(compiled, kernels, self.settings, example)


def tuner_for(tune: str, settings: TuneSettings | None = None) -> DbTuner | None:
    """The tuner for ``tune`` ("off": None, the backends' heuristics; "db"; "sweep"; "queue")."""
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
        if kernel_symbols(kernel):  # chosen per call sizes (``at_sizes``), not here
            plan.decisions[kernel.name] = Decision(kernel.name, Source.DEFAULT, "dynamic", default,
                                                   "symbolic sizes: chosen at the first call at each size")
            continue
        if key is None or db is None:
            plan.decisions[kernel.name] = Decision(kernel.name, Source.DEFAULT, "unkeyed" if key is None else "no-db",
                                                   default, "sizes unknown" if key is None else f"no DB at {url}")
            plan.misses.append(kernel.name)
            continue
        found = db.lookup(key, software)
        decision, config = decide(kernel.name, found, key, backend.space(kernel, hardware), default)
        plan.decisions[kernel.name] = decision
        if config is not None:
            plan.configs[kernel.name] = config
        if config is None or settings.force:
            plan.misses.append(kernel.name)
    return plan


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
    """For inputs read as gather/embedding/scatter indices: the smallest extent they index, also
    when they reach the index through pointwise nodes (``where(t != -100, t, 0)``)."""
    producers = {n.outputs[0]: n.body for n in graph.nodes if isinstance(n, Pointwise)}
    return expression_index_bounds([n.body for n in graph.nodes if not isinstance(n, Extern)], env, producers)


def expression_index_bounds(bodies: Sequence[Expr], env: dict[str, int],
                            producers: Mapping[str, Expr] | None = None) -> dict[str, int]:
    """For buffers that ``bodies`` read as indices (of loads or of index values): the smallest
    extent they index; a buffer in ``producers`` stands for the buffers its body reads."""
    producers = producers or {}
    bounds: dict[str, int] = {}

    def bound(value: Expr, extent: int, seen: frozenset) -> None:
        for src in loads(value):
            if src.buffer in producers and src.buffer not in seen:
                bound(producers[src.buffer], extent, seen | {src.buffer})
            bounds[src.buffer] = min(bounds.get(src.buffer, extent), extent)

    for body in bodies:
        for node in walk(body):
            index = node.index if isinstance(node, Load) else (node.index,) if isinstance(node, IndexValue) else ()
            for atom in (a for i in index for a in i.atoms() if isinstance(a, Indirect)):
                bound(atom.value, evaluate(atom.bound, env), frozenset())
    return bounds


def random_inputs(graph: Graph, env: dict[str, int], device: str = "cpu") -> list[torch.Tensor]:
    """Random tensors for the graph's inputs: normal floats, indices inside what they index."""
    bounds = index_bounds(graph, env)
    gen = torch.Generator().manual_seed(0)
    return [random_tensor(graph.buffers[name], env, bounds.get(name), gen, device) for name in graph.inputs]


def random_tensor(b: Buffer, env: dict[str, int], bound: int | None, gen: torch.Generator,
                  device: str = "cpu") -> torch.Tensor:
    """A random tensor with ``b``'s layout: normal floats, or integers in ``[0, bound)`` when it
    holds indices (``bound`` not None)."""
    sizes = [evaluate(s, env) for s in b.layout.sizes]
    strides = [evaluate(s, env) for s in b.layout.strides]
    t = torch.empty_strided(sizes, strides, dtype=b.dtype.torch)
    if b.dtype.is_float:
        t.copy_(torch.randn(sizes, generator=gen))
    elif b.dtype.is_bool:
        t.copy_(torch.rand(sizes, generator=gen) > 0.5)
    else:
        hi = bound or 8
        lo = 0 if bound is not None or b.dtype.kind is Kind.UINT else -hi
        t.copy_(torch.randint(lo, hi, sizes, generator=gen))
    return t.to(device)
