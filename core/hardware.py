"""Descriptions of the machines kernels are tuned on, and of this machine's CPU and compiler.

A ``HardwareInfo``'s fingerprint keys the tuning DB. A GPU is described by its backend (which
asks the driver); a CPU is read here from /proc, without torch.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ISA extensions the C++ backend's code generation can use, in fingerprint order.
CPU_ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                 "amx")
TOOL_TIMEOUT_S = 10


class HardwareKind(enum.StrEnum):
    """Device family a timing was measured on."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class HardwareInfo:
    """A machine model. Its fingerprint is what tuning keys compare.

    GPU fingerprint: name, compute capability, multiprocessor count, memory size. CPU
    fingerprint: model name, ISA flags codegen uses, core count; the RAM size is recorded but
    left out of it (it varies with kernel reservations and does not change which config wins).
    """

    kind: str
    name: str
    capability: str
    cores: int
    memory_bytes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", HardwareKind(self.kind).value)  # ValueError if unknown
        for attr in ("cores", "memory_bytes"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"HardwareInfo.{attr} must be an int >= 0, got {value!r}")
        for attr in ("name", "capability"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"HardwareInfo.{attr} must be a str")

    @functools.cached_property  # a winner list shares one HardwareInfo per machine: hashed once
    def fingerprint(self) -> str:
        """Stable 20-hex-digit digest identifying this machine model."""
        memory = 0 if self.kind == HardwareKind.CPU else self.memory_bytes
        fields = [str(self.kind), self.name, self.capability, self.cores, memory]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, fingerprint included."""
        return {"kind": str(self.kind), "name": self.name, "capability": self.capability,
                "cores": self.cores, "memory_bytes": self.memory_bytes, "fingerprint": self.fingerprint}


@functools.cache
def this_cpu() -> HardwareInfo:
    """This machine's CPU (read once per process)."""
    return cpu_hardware(_read("/proc/cpuinfo"), _read("/proc/meminfo"), os.cpu_count() or 1)


def cpu_hardware(cpuinfo: str, meminfo: str, cores: int) -> HardwareInfo:
    """HardwareInfo from the text of /proc/cpuinfo and /proc/meminfo."""
    fields = _colon_fields(cpuinfo)
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    if any(flag.startswith("amx_") for flag in flags):
        flags.add("amx")  # amx_tile, amx_bf16, amx_int8: one capability for codegen
    present = [flag for flag in CPU_ISA_FLAGS if flag in flags]
    mem_kib = _colon_fields(meminfo).get("MemTotal", "0 kB").split()[0]
    return HardwareInfo(kind=HardwareKind.CPU, name=name, capability=",".join(present), cores=cores,
                        memory_bytes=int(mem_kib) * 1024)


@functools.cache
def compiler_version(compiler: str) -> str | None:
    """The first line of ``<compiler> --version`` (cached), or None if it does not run: the C++
    backend keys its code cache on it and records it with every winner, so both follow ``$CXX``."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             timeout=TOOL_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


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
