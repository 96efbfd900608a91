"""The compile pipeline as a list of named passes: verify -> schedule -> codegen -> compile."""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
from pathlib import Path

from . import settings
from .autotune.options import GraphExample, TuneSettings, check_mode
from .backends.registry import get_backend
from .counters import counters
from .ir.nodes import Graph
from .ir.printer import format_graph
from .ir.verify import verify
from .runtime.compiled import CompiledGraph
from .scheduler import schedule as schedule_graph

log = logging.getLogger("loopnest")


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


def compile_graph(graph: Graph, backend: str = "cpp", name: str = "graph", configs=None, tune: str = "off",
                  tuning: TuneSettings | None = None, example: GraphExample | None = None) -> CompiledGraph:
    """Verify, fuse, generate and build ``graph``; ``configs`` maps kernel name -> config.

    ``tune`` picks the configs of kernels not in ``configs``: "off" (the backend's heuristics),
    "db" (exact winners from the tuning DB, validated; stale or nearest-shape winners are only
    reported), "sweep" (as "db", then tune the misses on ``example`` inputs, or random ones checked
    by the reference interpreter, and store their winners). ``tuning``: budgets, sampler and DB
    (``autotune.TuneSettings``); ``example``: ``autotune.GraphExample`` (the graph's inputs and,
    when known, PyTorch's outputs). ``compiled.tuning`` says where each kernel's config came from.
    """
    check_mode(tune)
    settings_ = tuning or TuneSettings()
    be = get_backend(backend)
    with gc_paused():
        verify(graph)
        sched = schedule_graph(graph, name)
    explicit = dict(configs or {})
    stored, decisions, misses = {}, {}, []
    if tune != "off":
        plan = _tuner().lookup_configs(sched, be, settings_, _tuner().example_env(graph, example))
        stored, decisions, misses = plan.configs, plan.decisions, [k for k in plan.misses if k not in explicit]
    chosen = _choose(sched, be, {**stored, **explicit})
    compiled = _build(sched, be, chosen, name)
    if tune == "sweep" and misses:
        swept = _tuner().sweep_compiled(compiled, be, misses, settings_, example)
        if swept:
            decisions.update(swept)
            tuned = {k.name: be.validate_config(k, swept[k.name].config) for k in sched.kernels if k.name in swept}
            compiled = _build(sched, be, _choose(sched, be, {**stored, **tuned, **explicit}), name)
    compiled.tuning = decisions
    return compiled


@functools.lru_cache(maxsize=None)
def _tuner():
    """The tuner's compile-time entry points (``autotune.compile_time``), imported on first use:
    they bring SQLAlchemy, Alembic, Optuna and Triton's testing module (seconds of imports) that
    compiles with ``tune="off"`` never need."""
    return importlib.import_module("loopnest.autotune.compile_time")


def _choose(sched, be, configs: dict) -> list:
    return [(k, configs.get(k.name) or be.default_config(k)) for k in sched.kernels]


def _build(sched, be, chosen: list, name: str) -> CompiledGraph:
    launchers = be.compile(chosen)
    counters["graphs_compiled"] += 1
    compiled = CompiledGraph(sched, launchers, be.device, name)
    compiled.configs = dict((k.name, c) for k, c in chosen)
    compiled.backend = be
    compiled.tuning = {}
    if settings.debug_enabled():
        _write_debug(compiled, be, chosen)
    return compiled


def _write_debug(compiled: CompiledGraph, be, chosen) -> None:
    root = settings.cache_dir() / "debug" / f"{compiled.name}_{id(compiled):x}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "graph.txt").write_text(format_graph(compiled.graph) + "\n")
    (root / "kernels.txt").write_text("\n\n".join(k.text() for k, _ in chosen) + "\n")
    for k, c in chosen:
        (root / f"{k.name}.src").write_text(be.codegen(k, c))
    log.warning("loopnest debug: IR and generated source of %s written to %s", compiled.name, Path(root))
