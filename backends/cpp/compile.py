"""Build C++ sources into shared libraries, cached on disk by source + flags + compiler version."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from ... import settings
from ...counters import counters
from .ops import has_libmvec

CXX = os.environ.get("CXX", "g++")
# -fno-math-errno lets loops call vector math; NaN/inf semantics stay IEEE (no -ffast-math).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno") + (
    ("-lmvec",) if has_libmvec() else ())


class CompileError(RuntimeError):
    """g++ rejected generated code; the message gives the source path and the compiler output."""


class CompileTimeout(CompileError, TimeoutError):
    """g++ ran longer than the caller allowed and was killed."""


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    """``g++ --version`` first line (part of the cache key)."""
    out = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0]


def library_path(source: str) -> Path:
    """Where the library built from ``source`` lives in the cache."""
    key = hashlib.sha256("\0".join((source, " ".join(FLAGS), compiler_version())).encode()).hexdigest()
    return settings.cache_dir() / "cpp" / key[:2] / f"{key}.so"


def build(source: str, timeout: float | None = None) -> Path:
    """Compile ``source`` unless cached; atomic, so concurrent builders never see a torn file.

    ``timeout`` (seconds) kills a g++ that runs longer and raises ``CompileTimeout``.
    """
    path = library_path(source)
    if path.exists():
        counters["code_cache_hits"] += 1
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    src_path = path.with_suffix(".cpp")
    _atomic_write_text(src_path, source)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        try:
            proc = subprocess.run([CXX, *FLAGS, str(src_path), "-o", tmp], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompileTimeout(f"g++ took longer than {timeout:g} s on {src_path}; killed") from None
        if proc.returncode != 0:
            raise CompileError(f"g++ failed on generated source {src_path}:\n{proc.stderr[-4000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    counters["kernels_compiled"] += 1
    return path


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load(path: Path) -> ctypes.CDLL:
    """Load a built library."""
    return ctypes.CDLL(str(path))
