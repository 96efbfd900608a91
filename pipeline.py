"""The compile pipeline as a list of named passes: verify -> schedule -> choose configs ->
codegen + compile -> (tune -> rebuild)."""
from __future__ import annotations

import contextlib
import gc
import logging
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Protocol, Sequence

import torch

from .backends.base import Backend, schedule_for
from .core import settings
from .core.counters import counters
from .ir.nodes import Graph
from .ir.printer import format_graph
from .ir.verify import verify
from .runtime.compiled import CompiledGraph, SizeDispatch
from .scheduler import Schedule

log = logging.getLogger("loopnest")


@dataclass(frozen=True)
class GraphExample:
    """Example inputs of an IR graph for tuning, and PyTorch's outputs when known."""

    inputs: tuple[torch.Tensor, ...]
    expected: tuple[torch.Tensor, ...] | None = None


@dataclass
class ConfigPlan:
    """A tuner's answer for a schedule: typed configs by kernel name, a decision per kernel (where
    its config came from, shown as ``CompiledGraph.tuning``), and the kernels it could tune."""

    configs: dict[str, Any] = field(default_factory=dict)
    decisions: dict[str, Any] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)


class Tuner(Protocol):
    """Chooses kernel configs at compile time; ``autotune.tuner_for`` makes the real ones."""

    def lookup(self, schedule: Schedule, backend: Backend, example: GraphExample | None) -> ConfigPlan:
        """Stored configs for the schedule's kernels; ``misses`` are worth a sweep."""

    def sweep(self, compiled: CompiledGraph, kernels: Sequence[str], example: GraphExample | None) -> ConfigPlan:
        """Tune ``kernels`` of ``compiled`` (or nothing, when this tuner only looks up)."""

    def at_sizes(self, schedule: Schedule, backend: Backend, fixed: Collection[str]) -> SizeDispatch | None:
        """What chooses, at call time, the configs of kernels with symbolic sizes (not those in
        ``fixed``, whose configs were given); None when there are none."""


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic GC: compiling allocates many short-lived acyclic IR objects, and
    collections triggered by them would rescan every live object (about 3x the compile time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_graph(graph: Graph, backend: Backend, name: str = "graph", configs: Mapping[str, Any] | None = None,
                  tuner: Tuner | None = None, example: GraphExample | None = None) -> CompiledGraph:
    """Verify, fuse, choose configs, generate and build ``graph`` for ``backend``.

    ``configs`` (kernel name -> config) win over everything; other kernels get what ``tuner``
    finds (None: the backend's heuristics), and a tuner that sweeps tunes its misses on
    ``example`` (inputs, and PyTorch's outputs when known). Kernels with symbolic sizes get
    their configs per call sizes from the tuner's ``at_sizes``. ``compiled.tuning`` says where
    each kernel's config came from.
    """
    with gc_paused():
        verify(graph)
        sched = schedule_for(graph, backend, name)
    explicit = dict(configs or {})
    plan = tuner.lookup(sched, backend, example) if tuner is not None else ConfigPlan()
    dispatch = tuner.at_sizes(sched, backend, explicit) if tuner is not None else None
    compiled = _build(sched, backend, {**plan.configs, **explicit}, name, plan.decisions, dispatch)
    misses = [k for k in plan.misses if k not in explicit]
    if tuner is not None and misses:
        swept = tuner.sweep(compiled, misses, example)
        if swept.configs:
            decisions = {**plan.decisions, **swept.decisions}
            compiled = _build(sched, backend, {**plan.configs, **swept.configs, **explicit}, name, decisions, dispatch)
    return compiled


def _build(sched: Schedule, backend: Backend, configs: dict, name: str, decisions: dict,
           dispatch: SizeDispatch | None) -> CompiledGraph:
    chosen = [(k, configs.get(k.name) or backend.default_config(k)) for k in sched.kernels]
    artifact = backend.compile(chosen)
    counters["graphs_compiled"] += 1
    compiled = CompiledGraph(sched, artifact, backend, name, {k.name: c for k, c in chosen}, decisions,
                             dispatch=dispatch)
    if settings.current().debug:
        _write_debug(compiled, backend, chosen)
    return compiled


def _write_debug(compiled: CompiledGraph, backend: Backend, chosen) -> None:
    root = settings.cache_dir("debug") / f"{compiled.name}_{id(compiled):x}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "graph.txt").write_text(format_graph(compiled.graph) + "\n")
    (root / "kernels.txt").write_text("\n\n".join(k.text() for k, _ in chosen) + "\n")
    for k, c in chosen:
        (root / f"{k.name}.src").write_text(backend.codegen(k, c))
    log.warning("loopnest debug: IR and generated source of %s written to %s", compiled.name, root)
