"""The Triton backend: codegen, a module per kernel in the code cache, launch through Triton."""
from __future__ import annotations

from typing import Sequence

from ...counters import counters
from ...scheduler.kernel import Kernel
from . import settings as triton_settings
from .codegen import Program, check_config, generate
from .compile import Launcher, load_module
from .heuristics import default_config
from .params import TritonConfig


class TritonBackend:
    """Implements ``backends.base.Backend`` for CUDA GPUs (CPU tensors under ``TRITON_INTERPRET``)."""

    name = "triton"

    @property
    def device(self) -> str:
        """"cuda", or "cpu" when kernels run in Triton's interpreter."""
        return triton_settings.current().device

    def default_config(self, kernel: Kernel) -> TritonConfig:
        return default_config(kernel)

    def validate_config(self, kernel: Kernel, data: dict) -> TritonConfig:
        config = TritonConfig.from_json(data)
        check_config(kernel, config)
        return config

    def program(self, kernel: Kernel, config: TritonConfig) -> Program:
        """Source and launch plan of ``kernel`` under ``config``."""
        counters["kernels_generated"] += 1
        return generate(kernel, config, triton_settings.current())

    def codegen(self, kernel: Kernel, config: TritonConfig) -> str:
        return self.program(kernel, config).source

    def compile(self, kernels: Sequence[tuple[Kernel, TritonConfig]]) -> dict[str, Launcher]:
        interpret = triton_settings.current().interpret
        launchers = {}
        for kernel, config in kernels:
            program = self.program(kernel, config)
            dtypes = {name: buf.dtype.torch for name, buf in kernel.buffers.items()}
            launchers[kernel.name] = Launcher(program, load_module(program.source, interpret), dtypes)
        return launchers
