"""``loopnest.explain``: what loopnest made of a function or module under torch.compile."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ir.index import Index
from .runner import LoweredGraph


@dataclass(frozen=True)
class KernelInfo:
    """One generated kernel."""

    name: str
    kind: str
    nodes: tuple[str, ...]
    bytes_moved: int | str   # str when the sizes are symbolic
    flops: int | str
    source_path: Path | None


@dataclass(frozen=True)
class FallbackInfo:
    """One ATen op called through ATen rather than compiled."""

    op: str
    reason: str


@dataclass
class GraphInfo:
    """One compiled FX graph (a forward, backward or inference graph)."""

    name: str
    backend: str
    num_fx_nodes: int
    lowering_ms: float
    compile_ms: float
    kernels: list[KernelInfo] = field(default_factory=list)
    fallbacks: list[FallbackInfo] = field(default_factory=list)
    intermediate_bytes: int | str = 0          # memory for intermediates, with buffer reuse
    intermediate_bytes_no_reuse: int | str = 0  # the same, one allocation per intermediate
    tuning: dict[str, Any] = field(default_factory=dict)  # ``CompiledGraph.tuning``: per kernel, and per call sizes

    @staticmethod
    def from_lowered(g: LoweredGraph) -> "GraphInfo":
        s = g.stats
        kernels = [KernelInfo(k.name, k.kind, tuple(k.nodes), _number(k.bytes_moved()), _number(k.flops()),
                              s.source_path) for k in g.compiled.schedule.kernels]
        fallbacks = [FallbackInfo(f.op, f.reason) for f in g.program.fallbacks]
        memory = g.compiled.schedule.memory
        return GraphInfo(s.name, s.backend, s.num_fx_nodes, s.lowering_ms, s.compile_ms, kernels, fallbacks,
                         _number(memory.bytes_with_reuse), _number(memory.bytes_without_reuse),
                         dict(g.compiled.tuning))


def tuning_line(decision) -> str:
    """One line for a kernel's config decision (``autotune.decisions.Decision``): where the
    config came from, and for a decision at call time the sizes and their bucket."""
    where = decision.kernel
    if decision.sizes:
        where += f" at {'x'.join(map(str, decision.sizes))} (bucket {'x'.join(map(str, decision.bucket))})"
    note = f" ({decision.note})" if decision.note else ""
    return f"tuning {where}: {decision.source} [{decision.lookup}] {decision.config}{note}"


def _number(e: Index) -> int | str:
    c = e.as_int()
    return c if c is not None else str(e)


@dataclass
class Explanation:
    """The graphs torch.compile produced for a function, each with its kernels and fallbacks."""

    graphs: list[GraphInfo]

    @property
    def num_kernels(self) -> int:
        return sum(len(g.kernels) for g in self.graphs)

    @property
    def fallbacks(self) -> list[FallbackInfo]:
        return [f for g in self.graphs for f in g.fallbacks]

    def __str__(self) -> str:
        lines = [f"loopnest: {len(self.graphs)} graph(s), {self.num_kernels} kernel(s), "
                 f"{len(self.fallbacks)} fallback(s)"]
        for g in self.graphs:
            lines.append(f"graph {g.name} [{g.backend}]: {g.num_fx_nodes} FX nodes, lowered in "
                         f"{g.lowering_ms:.1f} ms, compiled in {g.compile_ms:.0f} ms")
            for k in g.kernels:
                lines.append(f"  kernel {k.name} ({k.kind}): {len(k.nodes)} node(s), {k.bytes_moved} bytes, "
                             f"{k.flops} flops")
                lines.append(f"    nodes: {', '.join(k.nodes)}")
            for f in g.fallbacks:
                lines.append(f"  fallback {f.op}: {f.reason}")
            lines += [f"  {tuning_line(d)}" for d in g.tuning.values()]
            lines.append(f"  intermediates: {g.intermediate_bytes} bytes with buffer reuse, "
                         f"{g.intermediate_bytes_no_reuse} without")
            if g.kernels and g.kernels[0].source_path:
                lines.append(f"  source: {g.kernels[0].source_path}")
        return "\n".join(lines)

    __repr__ = __str__
