"""The schedule of a graph: kernels and extern calls in order, and which buffers need memory."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir.nodes import Buffer, BufferKind, Extern, Graph
from .fusion import AcrossRows, always, build_kernel, extern_buffers, group_nodes, inline_pointwise, never, node_reads
from .kernel import Kernel
from .memory import MemoryPlan, plan_memory
from .one_hot import fold_one_hot_sums
from .online_softmax import flush_exp_terms
from .reduced_order import reduced_in_memory_order
from .split_runs import split_into_runs

Step = Kernel | Extern


@dataclass
class Schedule:
    """Steps in execution order plus the buffers the runtime must allocate."""

    graph: Graph
    steps: list[Step]
    intermediates: list[str]          # stored by one step, read by a later one, not outputs
    buffers: dict[str, Buffer] = field(repr=False, default_factory=dict)
    memory: MemoryPlan = field(default_factory=MemoryPlan)

    @property
    def kernels(self) -> list[Kernel]:
        return [s for s in self.steps if isinstance(s, Kernel)]

    @property
    def externs(self) -> list[Extern]:
        return [s for s in self.steps if isinstance(s, Extern)]


def schedule(graph: Graph, name: str = "kernel", plan: bool = True, across_rows: AcrossRows | bool = False,
             store_tables: bool = True, split_runs: bool = False, split_rows_below: int | None = None) -> Schedule:
    """Fuse ``graph`` into kernels named ``ln_{name}_{k}``; ``plan`` reuses intermediates' memory;
    ``across_rows``: whether the backend runs reductions across the rows of a kernel reducing the
    given dims (``Backend.reduces_across_rows``; True or False: always or never); ``store_tables``:
    transcendental values broadcast to many points are stored once (``fusion.inline_pointwise``);
    ``split_runs``: reductions whose rows are runs far apart become partials and their combine
    (``split_runs.py``), those of fewer rows than ``split_rows_below`` only, where given."""
    nodes = inline_pointwise(graph, store_tables)
    groups = group_nodes(nodes, across_rows if callable(across_rows) else (always if across_rows else never))
    outputs = {o.buffer for o in graph.outputs}
    externs_read = extern_buffers(graph)
    reads_by_group = {g.index: set().union(*(node_reads(n) for n in g.nodes)) for g in groups}
    steps: list[Step] = []
    stored: set[str] = set()
    buffers = dict(graph.buffers)
    kernel_count = 0
    for g in groups:
        if g.shape is None:
            steps.append(g.nodes[0])
            stored |= set(g.nodes[0].outputs)
            continue
        produced = g.produces()
        read_elsewhere = set().union(*(r for k, r in reads_by_group.items() if k != g.index))
        needed = {b for b in produced if b in outputs or b in externs_read or b in read_elsewhere}
        if not needed:
            continue  # dead code
        kernel = flush_exp_terms(fold_one_hot_sums(build_kernel(g, graph, needed, f"ln_{name}_{kernel_count}")))
        kernel = reduced_in_memory_order(kernel)
        kernel_count += 1
        kernels, added = split_into_runs(kernel, split_rows_below) if split_runs else ([kernel], {})
        buffers |= added
        steps += kernels
        stored |= {o for k in kernels for o in k.outputs}
    if len(buffers) > len(graph.buffers):
        graph = replace(graph, buffers=buffers)
    intermediates = sorted(b for b in stored if buffers[b].kind is BufferKind.INTERMEDIATE)
    memory = plan_memory(steps, intermediates, buffers) if plan else MemoryPlan()
    return Schedule(graph, steps, intermediates, buffers, memory)
