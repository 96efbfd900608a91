"""A compiled graph run once on example inputs, so each kernel can be verified and timed alone.

The first run (default configs) records, for every kernel, the buffers and symbol values it was
launched with: afterwards every buffer is populated, so a candidate kernel can be timed on its
real inputs without running the rest of the graph. Verification of a candidate:

* with eager results (``expected``, e.g. a torch workload run by PyTorch): the whole graph runs
  with the candidate swapped in, every buffer it allocates poisoned, and its outputs are compared
  with the eager ones;
* without: the candidate runs alone on a copy of its inputs with poisoned outputs, compared with
  the reference interpreter (``ir.interpret``) evaluating the same kernel.

``user_call`` is the graph run with a candidate swapped in and nothing else changed: what the
tuner's final decision times (``final.py``).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import torch

from ..backends.base import Launcher
from ..core.counters import counters
from ..core.timing import BenchOptions, Timing
from ..ir.interpret import KernelInterpreter
from ..runtime.compiled import CompiledGraph
from ..scheduler.kernel import Kernel
from .verify import Check, compare, poisoned_like


@dataclass
class KernelCall:
    """What one kernel was launched with during the recording run."""

    kernel: Kernel
    buffers: dict[str, torch.Tensor]  # the run's live buffers: populated, reused for timing
    syms: dict[str, int]
    inputs: dict[str, torch.Tensor]   # copies of the kernel's inputs as they were at launch


class CandidateFailed(RuntimeError):
    """A candidate raised while running (a launch or runtime error)."""


class GraphHarness:
    """Runs ``compiled`` (or a copy of it with a candidate swapped in) through ``run``, which
    returns the flat outputs, and records its kernels."""

    def __init__(self, compiled: CompiledGraph, run: Callable[[CompiledGraph], Sequence[torch.Tensor]],
                 expected: Sequence[torch.Tensor] | None = None, bench: BenchOptions = BenchOptions()):
        self.compiled = compiled
        self.run = run
        self.expected = None if expected is None else list(expected)
        self.bench = bench
        self._references: dict[str, list[torch.Tensor]] = {}
        self.calls = self._record()

    @property
    def device(self) -> str:
        return self.compiled.device

    def _record(self) -> dict[str, KernelCall]:
        calls: dict[str, KernelCall] = {}

        def recorder(kernel: Kernel, launch: Launcher) -> Launcher:
            def record(buffers: dict, syms: dict) -> None:
                inputs = {n: buffers[n].clone() for n in kernel.inputs}
                launch(buffers, syms)
                calls[kernel.name] = KernelCall(kernel, buffers, dict(syms), inputs)
            return record

        kernels = self.compiled.schedule.kernels
        self.run(self.compiled.with_launchers({k.name: recorder(k, self.compiled.launchers[k.name])
                                               for k in kernels}))
        missing = [k.name for k in kernels if k.name not in calls]
        if missing:
            raise RuntimeError(f"kernels {missing} did not run on the example inputs")
        return calls

    def verify(self, kernel: Kernel, launcher: Launcher) -> tuple[Check, float]:
        """(check, seconds the candidate's run took); raises CandidateFailed if it raised."""
        start = time.perf_counter()
        try:
            if self.expected is not None:
                got = list(self.run(self.compiled.with_launchers({kernel.name: launcher}, poison=True)))
                elapsed = time.perf_counter() - start
                return compare(got, self.expected), elapsed
            got = self.run_alone(kernel, launcher)
            elapsed = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - any failure of generated code is the trial's
            raise CandidateFailed(f"{type(exc).__name__}: {exc}") from exc
        return compare(got, self.reference(kernel)), elapsed

    def run_alone(self, kernel: Kernel, launcher: Launcher, device: str | None = None) -> list[torch.Tensor]:
        """Run one kernel on copies of its recorded inputs (on ``device``, default: the graph's);
        returns its outputs, which start poisoned."""
        call = self.calls[kernel.name]
        buffers = {n: t.to(device or t.device, copy=True) for n, t in call.inputs.items()}
        outputs = [n for n in dict.fromkeys(kernel.outputs) if n not in buffers]
        for n in outputs:
            buffers[n] = poisoned_like(call.buffers[n].to(device or call.buffers[n].device))
        launcher(buffers, dict(call.syms))
        return [buffers[n] for n in dict.fromkeys(kernel.outputs)]

    def reference(self, kernel: Kernel) -> list[torch.Tensor]:
        """The interpreter's outputs of ``kernel`` on its recorded inputs (computed once)."""
        if kernel.name not in self._references:
            self._references[kernel.name] = self.run_alone(kernel, KernelInterpreter(kernel), "cpu")
        return self._references[kernel.name]

    def time(self, kernel: Kernel, launcher: Launcher) -> Timing:
        """Time ``launcher`` alone on the recorded (populated) buffers, as its backend times."""
        call = self.calls[kernel.name]
        counters["benchmarks_run"] += 1
        return self.compiled.backend.time(lambda: launcher(call.buffers, call.syms), self.bench)

    def user_call(self, kernel: Kernel, launcher: Launcher) -> Callable[[], None]:
        """The user's call with ``launcher`` in place of the kernel's: the graph run through
        ``run`` on the example inputs, every other kernel and allocation as the user gets them."""
        graph = self.compiled.with_launchers({kernel.name: launcher})
        return lambda: self.run(graph)

    def measuring(self) -> ContextManager:
        """Held around a sequence of timings (nothing to hold: the graph harness owns its device)."""
        return contextlib.nullcontext()
