"""The Triton backend: codegen, a module per kernel in the code cache, launch through Triton."""
from __future__ import annotations

import functools
import shutil
import subprocess
import threading
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import triton
from triton.testing import do_bench

from ...core.counters import counters
from ...core.hardware import TOOL_TIMEOUT_S, HardwareInfo, HardwareKind, this_cpu
from ...core.space import SearchSpace
from ...core.timing import BenchOptions, Timing, time_cpu
from ...ir.index import Index, product
from ...scheduler.kernel import Kernel, signature
from ..base import Artifact, codegen_sources, software_versions, source_digest
from . import settings as triton_settings
from .codegen import Program, generate
from .compile import Launcher, load_module, module_path
from .heuristics import PERSISTENT_ROW, default_config, sm_count
from .params import TritonConfig, config_from_json
from .prebuild import prebuild
from .space import search_space

CODEGEN_SOURCES = codegen_sources(Path(__file__).parent)
_CODEGEN_LOCK = threading.Lock()


class TritonBackend:
    """Implements ``backends.base.Backend`` for CUDA GPUs (CPU tensors under ``TRITON_INTERPRET``)."""

    name = "triton"
    hardware_kind = HardwareKind.CUDA
    stores_broadcast_tables = False  # recomputing on the GPU's special-function units beats another launch
    splits_runs = True  # a batch norm's C rows would leave most SMs idle (``scheduler/split_runs.py``)

    @property
    def split_rows_below(self) -> int:
        """Rows of runs split only when fewer than the multiprocessors. H100, kernel time in CUDA
        graphs (2026-12-06), batch-norm statistics split / fused, us: 64 or 128 channels 10.7 /
        203 and 16.6 / 213; 256 channels of 14 x 14 7.2 / 3.8, 512 of 7 x 7 8.3 / 3.5, 2048 of
        7 x 7 68.6 / 23.1."""
        return sm_count()

    @property
    def device(self) -> str:
        """"cuda", or "cpu" when kernels run in Triton's interpreter."""
        return triton_settings.current().device

    @property
    def can_prebuild(self) -> bool:
        """Candidates compile ahead in worker processes, except in Triton's interpreter (nothing
        to compile there)."""
        return not triton_settings.current().interpret

    def hardware(self, device: str | None = None) -> HardwareInfo:
        dev = torch.device(device or self.device)
        if dev.type != "cuda":
            return this_cpu()  # the interpreter runs on this CPU
        props = torch.cuda.get_device_properties(dev.index if dev.index is not None else 0)
        return HardwareInfo(kind=HardwareKind.CUDA, name=props.name, capability=f"sm_{props.major}{props.minor}",
                            cores=props.multi_processor_count, memory_bytes=props.total_memory)

    def software(self) -> dict[str, Any]:
        cuda = {"cuda": torch.version.cuda, "driver": nvidia_driver_version()} if torch.cuda.is_available() else {}
        return software_versions(codegen_version=source_digest(*CODEGEN_SOURCES), triton=_dist_version("triton"), **cuda)

    def space(self, kernel: Kernel, hardware: HardwareInfo) -> SearchSpace:
        return search_space(kernel, hardware)

    def reduces_across_rows(self, rdomain: tuple[Index, ...]) -> bool:
        """For rows of a known length a persistent program holds (``codegen``: partial sums per
        program over the rows it loops over, combined by a second launch); longer or symbolic
        rows keep such reductions in a kernel of their own."""
        row = product(rdomain).as_int()
        return row is not None and row <= PERSISTENT_ROW

    def default_config(self, kernel: Kernel) -> TritonConfig:
        return default_config(kernel)

    def config_from_json(self, data: Mapping[str, Any], hardware: HardwareInfo) -> TritonConfig:
        return config_from_json(data, hardware)

    def program(self, kernel: Kernel, config: TritonConfig) -> Program:
        """Source and launch plan of ``kernel`` under ``config``."""
        counters["kernels_generated"] += 1
        return generate(kernel, config, triton_settings.current())

    def codegen(self, kernel: Kernel, config: TritonConfig) -> str:
        return self.program(kernel, config).source

    def compile(self, kernels: Sequence[tuple[Kernel, TritonConfig]]) -> Artifact:
        interpret = triton_settings.current().interpret
        launchers, sources = {}, []
        for kernel, config in kernels:
            program = self.program(kernel, config)
            dtypes = {name: buf.dtype.torch for name, buf in kernel.buffers.items()}
            launchers[kernel.name] = Launcher(program, load_module(program.source, interpret), dtypes)
            sources.append(module_path(program.source))
        return Artifact(launchers, tuple(sources))

    def prebuild(self, kernel: Kernel, config: TritonConfig, timeout: float | None,
                 cancel: threading.Event | None = None) -> None:
        """Compile the candidate's kernels into Triton's cache in a worker process, for this
        device's GPU (``prebuild.py``); a no-op in the interpreter and for symbolic sizes."""
        if not self.can_prebuild or signature(kernel).symbols:
            return
        with _CODEGEN_LOCK:  # prebuilds run in threads; codegen interns expressions
            program = self.program(kernel, config)
            module = load_module(program.source, interpret=False)
        dtypes = {name: buf.dtype.torch for name, buf in kernel.buffers.items()}
        prebuild(program, module, dtypes, triton.runtime.driver.active.get_current_target(), timeout, cancel)

    def time(self, run: Callable[[], None], options: BenchOptions) -> Timing:
        if self.device != "cuda":
            return time_cpu(run, options)
        p20, p50, p80 = do_bench(run, warmup=25, rep=100, quantiles=[0.2, 0.5, 0.8])  # L2 flushed per run
        return Timing(p20 * 1e3, p50 * 1e3, p80 * 1e3, 0)


@functools.cache
def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version reported by nvidia-smi (cached), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    return lines[0] if lines else None


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
