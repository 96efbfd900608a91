"""Sweeping workloads: torch functions compiled through the ATen lowering, every kernel tuned.

The graph is compiled with default configs and run once on the example inputs; each kernel is
then tuned alone, every candidate verified against PyTorch's eager result with the candidate
swapped into the graph. Winners go to the tuning DB, so ``tune="db"`` compiles find them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.utils._pytree as pytree

from ..backends import registry
from ..backends.base import Backend
from ..core.timing import BenchOptions
from ..db.api import open_db, resolve_url
from ..lowering.api import compile_fx
from ..lowering.dynamo import AtenCompiler
from ..lowering.options import CompileOptions
from .compile_time import tuner_for
from .harness import GraphHarness
from .options import TuneSettings
from .tuner import GraphTuner, KernelReport
from .workloads import Workload, resolve, training_step


@dataclass(frozen=True)
class SweepTarget:
    """A named torch function and its example inputs."""

    name: str
    fn: Callable
    inputs: tuple


def target(spec: str, backend: str | Backend, size_class: str | None = None) -> SweepTarget:
    """The workload ``spec`` (built-in name or ``module:function``) with inputs for ``backend``
    (a training row has two graphs: ``targets``)."""
    found = resolve(spec)
    if isinstance(found, Workload) and found.train:
        raise ValueError(f"{spec} is a training row: its forward and backward graphs are two targets (targets())")
    (one,) = targets(spec, backend, size_class)
    return one


def targets(spec: str, backend: str | Backend, size_class: str | None = None) -> list[SweepTarget]:
    """What sweeping ``spec`` tunes: the workload's graph with inputs for ``backend``, or for a
    training row the forward and backward graphs of one step (``training_targets``)."""
    device = registry.resolve(backend).device
    found = resolve(spec)
    if isinstance(found, Workload):
        size_class = size_class or ("gpu" if device == "cuda" else "cpu")
        if found.train:
            return training_targets(found, backend, size_class)
        return [SweepTarget(found.name, found.fn, found.inputs(size_class, device))]
    fn, inputs = found()
    return [SweepTarget(spec, fn, tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs))]


class _StepGraphs(AtenCompiler):
    """AOTAutograd as ``torch.compile(backend="loopnest")`` runs it (decompositions, partitioner),
    with the forward and backward graphs run eagerly, each kept with a copy of its first call's
    arguments."""

    def __init__(self, backend: Backend):
        super().__init__(CompileOptions(backend=backend), backend)
        self.captured: dict[str, tuple[torch.fx.GraphModule, tuple]] = {}

    def forward(self, gm, example_inputs):
        return self._recording(gm, "fwd")

    def backward(self, gm, example_inputs):
        return self._recording(gm, "bwd")

    def _recording(self, gm: torch.fx.GraphModule, kind: str):
        def run(args):
            if kind not in self.captured:
                self.captured[kind] = (gm, tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a
                                                 for a in args))
            return gm(*args)
        run._boxed_call = True
        return run


def training_targets(workload: Workload, backend: str | Backend, size_class: str) -> list[SweepTarget]:
    """The forward and backward ATen graphs of one training step of ``workload`` (the graphs
    ``torch.compile(backend="loopnest")`` lowers, so their kernels have the same tuning keys), each
    with the arguments the step called it with."""
    backend = registry.resolve(backend)
    graphs = _StepGraphs(backend)
    torch._dynamo.reset()
    try:
        training_step(torch.compile(workload.fn, backend=graphs.aot, dynamic=False),
                      workload.train_inputs(size_class, backend.device))
    finally:
        torch._dynamo.reset()
    return [SweepTarget(f"{workload.name}/{kind}", *graphs.captured[kind]) for kind in ("fwd", "bwd")]


def flat_tensors(value) -> list[torch.Tensor]:
    """The tensors of a (nested) output, in order."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def compile_target(t: SweepTarget, backend: str | Backend, tune: str = "off", settings: TuneSettings | None = None):
    """The target's ATen graph (make_fx) compiled with configs as ``tune`` says ("off": the
    heuristics), called like ``t.fn``; ``result.lowered.compiled.tuning`` says where each kernel's
    config came from."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(t.fn, tracing_mode="fake")(*t.inputs)
    options = CompileOptions(backend=registry.resolve(backend), tuner=tuner_for(tune, settings))
    return compile_fx(gm, list(t.inputs), options)


def sweep(t: SweepTarget, backend: str | Backend, settings: TuneSettings) -> list[KernelReport]:
    """Tune every kernel of ``t`` on ``backend``; returns one report per kernel."""
    compiled_fn = compile_target(t, backend)
    lowered = compiled_fn.lowered
    args = list(compiled_fn.codegen.process_inputs(*t.inputs))
    harness = GraphHarness(lowered.compiled, lambda g: flat_tensors(lowered.run(list(args), g)),
                           flat_tensors(t.fn(*t.inputs)), BenchOptions(budget_s=settings.measure_s))
    return GraphTuner(harness, settings, open_db(resolve_url(settings.db_url)), label=t.name).tune_all()
