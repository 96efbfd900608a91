"""What a timing depends on: the hardware (its fingerprint keys the tuning DB) and software.

``current_hardware`` describes the device a kernel runs on; ``software_versions`` lists the
versions whose change makes a stored winner stale (torch, compiler or Triton, driver, codegen).
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from loopnest.backends.codegen_version import CODEGEN_VERSION
from loopnest.db.api import HardwareInfo, HardwareKind

# ISA extensions the C++ backend's code generation can use, in fingerprint order.
CPU_ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx")
_TOOL_TIMEOUT_S = 10


def current_hardware(device: str = "cpu") -> HardwareInfo:
    """Describe the CPU of this machine, or the CUDA device named by ``device`` ("cuda:1")."""
    dev = torch.device(device)
    if dev.type == HardwareKind.CPU:
        return cpu_hardware(_read("/proc/cpuinfo"), _read("/proc/meminfo"), os.cpu_count() or 1)
    if dev.type == HardwareKind.CUDA:
        props = torch.cuda.get_device_properties(dev.index if dev.index is not None else 0)
        return HardwareInfo(
            kind=HardwareKind.CUDA, name=props.name, capability=f"sm_{props.major}{props.minor}",
            cores=props.multi_processor_count, memory_bytes=props.total_memory,
        )
    raise ValueError(f"no hardware description for device {device!r}; expected cpu or cuda[:N]")


def cpu_hardware(cpuinfo: str, meminfo: str, cores: int) -> HardwareInfo:
    """HardwareInfo from the text of /proc/cpuinfo and /proc/meminfo."""
    fields = _colon_fields(cpuinfo)
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    if any(flag.startswith("amx_") for flag in flags):
        flags.add("amx")  # amx_tile, amx_bf16, amx_int8: one capability for codegen
    present = [flag for flag in CPU_ISA_FLAGS if flag in flags]
    mem_kib = _colon_fields(meminfo).get("MemTotal", "0 kB").split()[0]
    return HardwareInfo(
        kind=HardwareKind.CPU, name=name, capability=",".join(present), cores=cores,
        memory_bytes=int(mem_kib) * 1024,
    )


def software_versions(backend: str, compiler: str = "g++") -> dict[str, Any]:
    """Versions that, when changed, make a winner of ``backend`` stale."""
    if backend not in _BACKEND_SOFTWARE:
        known = ", ".join(sorted(_BACKEND_SOFTWARE))
        raise ValueError(f"unknown backend {backend!r}; expected one of {known}")
    versions: dict[str, Any] = {
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "codegen_version": CODEGEN_VERSION,
    }
    versions.update(_BACKEND_SOFTWARE[backend](compiler))
    return versions


@functools.cache
def compiler_version(compiler: str = "g++") -> str | None:
    """``<compiler> <version>`` from ``-dumpfullversion`` (cached), or None if not installed."""
    try:
        out = subprocess.run([compiler, "-dumpfullversion"], capture_output=True, text=True,
                             timeout=_TOOL_TIMEOUT_S, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{Path(compiler).name} {out}"


@functools.cache
def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version reported by nvidia-smi (cached), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    return lines[0] if lines else None


def _cpp_software(compiler: str) -> dict[str, Any]:
    return {"compiler": compiler_version(compiler)}


def _triton_software(_compiler: str) -> dict[str, Any]:
    versions: dict[str, Any] = {"triton": _dist_version("triton")}
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        versions["driver"] = nvidia_driver_version()
    return versions


_BACKEND_SOFTWARE: dict[str, Callable[[str], dict[str, Any]]] = {
    "cpp": _cpp_software,
    "triton": _triton_software,
}


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _colon_fields(text: str) -> dict[str, str]:
    """First value of each ``key : value`` line (/proc/cpuinfo repeats keys per core)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
