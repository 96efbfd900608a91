"""The C++/OpenMP backend: codegen, one shared library per graph (a CPython extension module
where the headers exist, ``pymodule.py``), launched through it or through ctypes."""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from ...core import settings
from ...core.counters import counters
from ...core.hardware import HardwareInfo, HardwareKind, compiler_version, this_cpu
from ...core.space import SearchSpace
from ...core.timing import BenchOptions, Timing, time_cpu
from ...ir.index import Index
from ...scheduler.kernel import Kernel, signature
from ..base import Artifact, PositionalLaunch, codegen_sources, software_versions, source_digest
from . import compile as cc
from . import pymodule
from .checks import PRELUDE as CHECKS_PRELUDE
from .checks import ErrorSlot, error_sites, raise_recorded
from .codegen import generate, kernel_symbol
from .ops import PRELUDE, simd_declarations, vecmath_source
from .params import CppConfig, config_from_json
from .space import search_space

CODEGEN_SOURCES = (*codegen_sources(Path(__file__).parent), Path(__file__).parent / "vecmath.h")


class CppBackend:
    """Implements ``backends.base.Backend`` for CPUs."""

    name = "cpp"
    device = "cpu"
    hardware_kind = HardwareKind.CPU
    can_prebuild = True
    stores_broadcast_tables = True  # a cosine table recomputed for every batch and head costs libm calls
    splits_runs = False
    split_rows_below = None

    def hardware(self, device: str | None = None) -> HardwareInfo:
        return this_cpu()

    def software(self) -> dict[str, Any]:
        return software_versions(codegen_version=source_digest(*CODEGEN_SOURCES),
                                 compiler=compiler_version(settings.current().cxx))

    def space(self, kernel: Kernel, hardware: HardwareInfo) -> SearchSpace:
        return search_space(kernel, hardware)

    def reduces_across_rows(self, rdomain: tuple[Index, ...]) -> bool:
        """Always: per-thread partial sums over the rows, combined after them (``across.py``)."""
        return True

    def default_config(self, kernel: Kernel) -> CppConfig:
        return CppConfig()

    def config_from_json(self, data: Mapping[str, Any], hardware: HardwareInfo) -> CppConfig:
        return config_from_json(data, hardware)

    def codegen(self, kernel: Kernel, config: CppConfig) -> str:
        counters["kernels_generated"] += 1
        return generate(kernel, config, settings.current().index_checks)

    def module_source(self, kernels: Sequence[tuple[Kernel, CppConfig]]) -> str:
        """The whole translation unit for a graph's kernels (with the extension module's entry
        points where CPython's headers exist)."""
        body = "\n\n".join(self.codegen(k, c) for k, c in kernels) + "\n"
        entry = pymodule.wrapper_source([k for k, _ in kernels], kernel_symbol) if pymodule.include_dir() else ""
        vecmath = vecmath_source(body, prebuilt=cc.prebuilt_vecmath())
        return PRELUDE + CHECKS_PRELUDE + vecmath + simd_declarations() + body + entry

    def compile(self, kernels: Sequence[tuple[Kernel, CppConfig]]) -> Artifact:
        if not kernels:
            return Artifact({})
        index_checks = settings.current().index_checks
        path = cc.build(self.module_source(kernels))
        if pymodule.include_dir():
            module = cc.load_module(path)
            launchers = {k.name: ModuleLauncher(getattr(module, kernel_symbol(k)), k, index_checks) for k, _ in kernels}
        else:
            lib = cc.load(path)
            launchers = {k.name: CppLauncher(getattr(lib, kernel_symbol(k)), k, index_checks) for k, _ in kernels}
        return Artifact(launchers, (path.with_suffix(".cpp"),), (path,))

    def prebuild(self, kernel: Kernel, config: CppConfig, timeout: float | None,
                 cancel: threading.Event | None = None) -> None:
        """g++ builds run to their end or ``timeout``: ``cancel`` is not looked at (the tuner
        builds C++ candidates before measuring any, and never cuts them short)."""
        cc.build(self.module_source([(kernel, config)]), timeout=timeout)

    def time(self, run: Callable[[], None], options: BenchOptions) -> Timing:
        return time_cpu(run, options)


class KernelLauncher:
    """What both launch paths share: one kernel's entry ``fn``, its buffers and symbols in
    signature order, and the error sites its error slot refers to (``checks.py``)."""

    def __init__(self, fn, kernel: Kernel, index_checks: bool = True):
        sig = signature(kernel)
        self.fn = fn
        self.kernel = kernel
        self.sites = error_sites(kernel, index_checks)
        self.names = sig.buffers
        self.symbols = sig.symbols

    def __call__(self, buffers: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        self.bind(syms)(buffers)

    def bind(self, syms: dict[str, int]) -> PositionalLaunch:
        """The launch for symbol values ``syms``."""
        raise NotImplementedError


class CppLauncher(KernelLauncher):
    """Calls one kernel of the shared library through ctypes: ``kernel(void **buffers, int64_t
    *symbols, int64_t *error_slot)``, and raises the error the kernel recorded, if any."""

    def __init__(self, fn, kernel: Kernel, index_checks: bool = True):
        super().__init__(fn, kernel, index_checks)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.ptr_array = ctypes.c_void_p * max(len(self.names), 1)
        self.sym_array = ctypes.c_int64 * max(len(self.symbols), 1)

    def bind(self, syms: dict[str, int]):
        """The launch for symbol values ``syms``: the symbol array is built once."""
        fn, names, ptr_array, sites, name = self.fn, self.names, self.ptr_array, self.sites, self.kernel.name
        values = self.sym_array(*[syms[s] for s in self.symbols])

        def run(*tensors: torch.Tensor) -> None:
            slot = ErrorSlot()  # one per call: concurrent calls never share it
            fn(ptr_array(*[t.data_ptr() for t in tensors]), values, slot)
            if slot[0]:
                raise_recorded(slot, sites, name)

        return PositionalLaunch(names, run)


class ModuleLauncher(KernelLauncher):
    """Calls one kernel through the graph's extension module (``pymodule.py``): the buffers' data
    pointers and the symbol values as arguments, and raises the error the kernel recorded, if any."""

    def bind(self, syms: dict[str, int]):
        """The launch for symbol values ``syms``."""
        fn, names, sites, name = self.fn, self.names, self.sites, self.kernel.name
        values = [syms[s] for s in self.symbols]

        def run(*tensors: torch.Tensor) -> None:
            slot = fn(*[t.data_ptr() for t in tensors], *values)
            if slot is not None:
                raise_recorded(slot, sites, name)

        return PositionalLaunch(names, run)
