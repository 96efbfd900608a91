"""The compile pipeline as a list of named passes: verify -> schedule -> codegen -> compile."""
from __future__ import annotations

import logging
from pathlib import Path

from . import settings
from .backends.registry import get_backend
from .counters import counters
from .ir.nodes import Graph
from .ir.printer import format_graph
from .ir.verify import verify
from .runtime.compiled import CompiledGraph
from .scheduler import schedule as schedule_graph

log = logging.getLogger("loopnest")


def compile_graph(graph: Graph, backend: str = "cpp", name: str = "graph", configs=None) -> CompiledGraph:
    """Verify, fuse, generate and build ``graph``; ``configs`` maps kernel name -> config."""
    be = get_backend(backend)
    verify(graph)
    sched = schedule_graph(graph, name)
    chosen = [(k, (configs or {}).get(k.name) or be.default_config(k)) for k in sched.kernels]
    launchers = be.compile(chosen)
    counters["graphs_compiled"] += 1
    compiled = CompiledGraph(sched, launchers, be.device, name)
    compiled.configs = dict((k.name, c) for k, c in chosen)
    compiled.backend = be
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
