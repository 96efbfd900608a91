"""The C++/OpenMP backend: codegen, one shared library per graph, ctypes launch."""
from __future__ import annotations

import ctypes
from typing import Sequence

import torch

from ...counters import counters
from ...scheduler.kernel import Kernel
from . import compile as cc
from .codegen import generate, signature
from .ops import PRELUDE, simd_declarations
from .params import CppConfig


class CppBackend:
    """Implements ``backends.base.Backend`` for CPUs."""

    name = "cpp"
    device = "cpu"

    def default_config(self, kernel: Kernel) -> CppConfig:
        return CppConfig()

    def validate_config(self, kernel: Kernel, data: dict) -> CppConfig:
        return CppConfig.from_json(data)

    def codegen(self, kernel: Kernel, config: CppConfig) -> str:
        counters["kernels_generated"] += 1
        return generate(kernel, config)

    def module_source(self, kernels: Sequence[tuple[Kernel, CppConfig]]) -> str:
        """The whole translation unit for a graph's kernels."""
        return PRELUDE + simd_declarations() + "\n\n".join(self.codegen(k, c) for k, c in kernels) + "\n"

    def compile(self, kernels: Sequence[tuple[Kernel, CppConfig]]):
        if not kernels:
            return {}
        source = self.module_source(kernels)
        lib = cc.load(cc.build(source))
        self.last_library = cc.library_path(source)
        return {k.name: _launcher(getattr(lib, k.name), k) for k, _ in kernels}


def _launcher(fn, kernel: Kernel) -> "CppLauncher":
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return CppLauncher(fn, kernel)


class CppLauncher:
    """Calls one kernel of the shared library: ``kernel(void **buffers, int64_t *symbols)``."""

    def __init__(self, fn, kernel: Kernel):
        sig = signature(kernel)
        self.fn = fn
        self.kernel = kernel
        self.names = sig.buffers
        self.symbols = sig.symbols
        self.ptr_array = ctypes.c_void_p * max(len(sig.buffers), 1)
        self.sym_array = ctypes.c_int64 * max(len(sig.symbols), 1)

    def __call__(self, buffers: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        self.bind(syms)(buffers)

    def bind(self, syms: dict[str, int]):
        """The launch for symbol values ``syms``: the symbol array is built once."""
        fn, names, ptr_array = self.fn, self.names, self.ptr_array
        values = self.sym_array(*[syms[s] for s in self.symbols])

        def launch(buffers: dict[str, torch.Tensor]) -> None:
            fn(ptr_array(*[buffers[n].data_ptr() for n in names]), values)

        return launch
