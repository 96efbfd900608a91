"""A single kernel, rebuilt from a request, with random inputs: verified and timed alone.

A worker has no graph and no example inputs, only the kernel's IR, its symbol values and its
dtypes. Its inputs are random (normal floats, integers in range, indices inside what they index:
never all zeros), allocated once with the kernel's layouts. The reference a candidate is checked
against is the reference interpreter's result (``ir.interpret``) for small kernels, and the
backend's default config (itself checked against the interpreter on a sample when it is large)
otherwise. Timings hold the device lock, so workers sharing a device measure in turn.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, ContextManager

import torch

from ..backends.base import Backend, Launcher
from ..core.counters import counters
from ..core.timing import BenchOptions, Timing
from ..ir.index import evaluate
from ..ir.interpret import KernelInterpreter
from ..scheduler.kernel import Kernel
from .compile_time import expression_index_bounds, random_tensor
from .harness import CandidateFailed, KernelCall
from .verify import Check, compare, poisoned_like

INTERPRETER_MAX_POINTS = 1 << 16  # loop points up to which the interpreter is the reference


class KernelHarness:
    """Verifies and times candidates of one kernel on random inputs (the interface of
    ``GraphHarness`` that ``GraphTuner`` and ``KernelEvaluator`` use)."""

    def __init__(self, kernel: Kernel, symbols: dict[str, int], backend: Backend,
                 bench: BenchOptions = BenchOptions(), device_lock=None, seed: int = 0):
        self.kernel, self.backend, self.bench = kernel, backend, bench
        self._lock = device_lock.hold if device_lock is not None else contextlib.nullcontext
        env = dict(symbols)
        bounds = expression_index_bounds(kernel.expressions(), env)
        gen = torch.Generator().manual_seed(seed)
        inputs = {n: random_tensor(kernel.buffers[n], env, bounds.get(n), gen, backend.device)
                  for n in kernel.inputs}
        buffers = dict(inputs)
        for n in kernel.outputs:
            if n not in buffers:
                b = kernel.buffers[n]
                sizes = [evaluate(s, env) for s in b.layout.sizes]
                strides = [evaluate(s, env) for s in b.layout.strides]
                buffers[n] = torch.empty_strided(sizes, strides, dtype=b.dtype.torch, device=backend.device)
        copies = {n: t.clone() for n, t in inputs.items()}
        self.calls = {kernel.name: KernelCall(kernel, buffers, env, copies)}
        self._reference = self._compute_reference()

    @property
    def device(self) -> str:
        return self.backend.device

    def run_alone(self, launcher: Launcher, device: str | None = None) -> list[torch.Tensor]:
        """Run the kernel on copies of its inputs; outputs start poisoned."""
        call = self.calls[self.kernel.name]
        buffers = {n: t.to(device or t.device, copy=True) for n, t in call.inputs.items()}
        for n in dict.fromkeys(self.kernel.outputs):
            if n not in buffers:
                buffers[n] = poisoned_like(call.buffers[n].to(device or call.buffers[n].device))
        launcher(buffers, dict(call.syms))
        return [buffers[n] for n in dict.fromkeys(self.kernel.outputs)]

    def _points(self) -> int:
        env = self.calls[self.kernel.name].syms
        total = 1
        for n in self.kernel.pdomain + self.kernel.rdomain:
            total *= evaluate(n, env)
        return total

    def _compute_reference(self) -> list[torch.Tensor]:
        if self._points() <= INTERPRETER_MAX_POINTS:
            return self.run_alone(KernelInterpreter(self.kernel), "cpu")
        default = self.backend.default_config(self.kernel)
        launcher = self.backend.compile([(self.kernel, default)]).launchers[self.kernel.name]
        with self._lock():
            return self.run_alone(launcher)

    def verify(self, kernel: Kernel, launcher: Launcher) -> tuple[Check, float]:
        """(check against the reference, seconds the run took); CandidateFailed if it raised."""
        with self._lock():
            start = time.perf_counter()
            try:
                got = self.run_alone(launcher)
            except Exception as exc:  # noqa: BLE001 - any failure of generated code is the trial's
                raise CandidateFailed(f"{type(exc).__name__}: {exc}") from exc
            elapsed = time.perf_counter() - start
        return compare(got, self._reference), elapsed

    def time(self, kernel: Kernel, launcher: Launcher) -> Timing:
        """Time ``launcher`` on the populated buffers, holding the device."""
        call = self.calls[kernel.name]
        counters["benchmarks_run"] += 1
        with self._lock():
            return self.backend.time(lambda: launcher(call.buffers, call.syms), self.bench)

    def user_call(self, kernel: Kernel, launcher: Launcher) -> Callable[[], None]:
        """The closest this harness has to a user's call: the launcher on the populated buffers
        (there is no graph around the kernel)."""
        call = self.calls[kernel.name]
        return lambda: launcher(call.buffers, call.syms)

    def measuring(self) -> ContextManager:
        """The device lock, held around a sequence of timings."""
        return self._lock()
