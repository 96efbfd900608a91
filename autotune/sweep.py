"""Sweeping workloads: torch functions compiled through the ATen lowering, every kernel tuned.

The graph is compiled with default configs and run once on the example inputs; each kernel is
then tuned alone, every candidate verified against PyTorch's eager result with the candidate
swapped into the graph. Winners go to the tuning DB, so ``tune="db"`` compiles find them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.utils._pytree as pytree

from ..backends.registry import get_backend
from ..lowering import compile_fx
from ..pipeline import compile_graph
from .compile_time import device_of
from .hardware import current_hardware, software_versions
from .harness import GraphHarness
from .measure import BenchOptions
from .options import TuneSettings
from .storage import open_db, resolve_url
from .tuner import GraphTuner, KernelReport
from .workloads import Workload, resolve


@dataclass(frozen=True)
class SweepTarget:
    """A named torch function and its example inputs."""

    name: str
    fn: Callable
    inputs: tuple


def default_backend() -> str:
    """Triton when a CUDA device is present, else C++."""
    return "triton" if torch.cuda.is_available() else "cpp"


def target(spec: str, backend: str, size_class: str | None = None) -> SweepTarget:
    """The workload ``spec`` (built-in name or ``module:function``) with inputs for ``backend``."""
    device = device_of(get_backend(backend))
    found = resolve(spec)
    if isinstance(found, Workload):
        size_class = size_class or ("gpu" if device == "cuda" else "cpu")
        return SweepTarget(found.name, found.fn, found.inputs(size_class, device))
    fn, inputs = found()
    return SweepTarget(spec, fn, tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs))


def flat_tensors(value) -> list[torch.Tensor]:
    """The tensors of a (nested) output, in order."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def compile_target(t: SweepTarget, backend: str):
    """``loopnest.compile_fx`` of the target's ATen graph (make_fx), with default configs."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(t.fn, tracing_mode="fake")(*t.inputs)
    return compile_fx(gm, list(t.inputs), backend=backend, tune="off")


def sweep(t: SweepTarget, backend: str, settings: TuneSettings) -> list[KernelReport]:
    """Tune every kernel of ``t`` on ``backend``; returns one report per kernel."""
    be = get_backend(backend)
    compiled_fn = compile_target(t, backend)
    expected = flat_tensors(t.fn(*t.inputs))
    compiled = compiled_fn.lowered.compiled
    harness = GraphHarness(compiled, lambda: flat_tensors(compiled_fn(*t.inputs)), expected,
                           BenchOptions(budget_s=settings.measure_s))
    db = open_db(resolve_url(settings.db_url))
    tuner = GraphTuner(harness, be, settings, db, current_hardware(device_of(be)), software_versions(backend),
                       label=t.name)
    return tuner.tune_all()


def sweep_many(specs: Sequence[str], backend: str, settings: TuneSettings,
               size_class: str | None = None) -> list[tuple[str, list[KernelReport]]]:
    """``sweep`` each workload in turn."""
    return [(spec, sweep(target(spec, backend, size_class), backend, settings)) for spec in specs]


def compile_tuned(t: SweepTarget, backend: str, tune: str, settings: TuneSettings):
    """``t`` compiled through the lowering with configs from the tuning DB (``tune="db"``) or a
    sweep (``tune="sweep"``, verified against PyTorch's result); call it like ``t.fn``.
    ``result.lowered.compiled.tuning`` says where each kernel's config came from."""
    compiled_fn = compile_target(t, backend)
    lowered = compiled_fn.lowered
    lowered.compiled = compile_graph(lowered.program.graph, backend, lowered.compiled.name, tune=tune,
                                     tuning=settings)
    return compiled_fn
