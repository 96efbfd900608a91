"""Build C++ sources into shared libraries, cached on disk by source + flags + compiler version."""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType

from ...core import settings
from ...core.counters import counters
from ...core.files import atomic_write
from ...core.hardware import compiler_version, this_cpu
from . import linker, pch, pymodule
from .ops import PREBUILT_MARK, has_libmvec, vecmath_instantiations

log = logging.getLogger("loopnest")

# -march=native: a library is built on the machine that runs it, so it gets every ISA extension
# and the tuning of this CPU with no table of flags to keep (vecmath.h picks its AVX2/AVX-512
# variants from the macros it defines); the cache key holds the CPU model and ISA flags (the
# hardware fingerprint's), so a cache directory shared between hosts never serves a library built
# for another ISA. -fno-math-errno lets loops call vector math; NaN/inf semantics stay IEEE (no
# -ffast-math). -fno-trapping-math and -fno-tree-pre let g++ vectorize a select whose value a
# later NaN test reads (max pooling after a ReLU): with traps on it keeps the branches, and PRE
# threads the NaN test through the select into a bool select it cannot vectorize (a fused
# relu + max_pool2d ran scalar, 60x slower). Neither changes a result; the suite's kernels time
# the same with and without them (bench/RESULTS.md, 2026-12-04 23:00). -fno-tree-sink keeps a
# math call whose value only one arm of a select reads where the code computes it: sunk into
# that arm it is a branch with a call, which g++ does not if-convert, and the loop stays scalar
# (a KL divergence's ``where(p == 0, 0, p * log(p))``, an ELU's ``where(x > 0, x, expm1(x))``).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno",
         "-fno-trapping-math", "-fno-tree-pre", "-fno-tree-sink", "-fwrapv", "-ffp-contract=off") + (
    ("-lmvec",) if has_libmvec() else ())


def flags() -> tuple[str, ...]:
    """``FLAGS``, gold where the compiler links with it (``linker.py``), plus CPython's headers
    where they exist (libraries are extension modules there, ``pymodule.py``)."""
    include = pymodule.include_dir()
    return FLAGS + linker.link_flags(settings.current().cxx) + ((f"-I{include}",) if include else ())


class CompileError(RuntimeError):
    """g++ rejected generated code; the message gives the source path and the compiler output."""


class CompileTimeout(CompileError, TimeoutError):
    """g++ ran longer than the caller allowed and was killed."""


def library_path(source: str, cxx: str) -> Path:
    """Where the library built from ``source`` by ``cxx`` lives in the cache."""
    version = compiler_version(cxx)
    if version is None:
        raise CompileError(f"the C++ compiler {cxx!r} does not run; install it or point CXX at one that does")
    cpu = this_cpu()
    parts = (source, " ".join(flags()), version, cpu.name, cpu.capability, pymodule.abi_tag())
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return settings.cache_dir("cpp") / key[:2] / f"{key}.so"


def _digest_path(path: Path) -> Path:
    return path.with_suffix(".sha256")


def intact(path: Path) -> bool:
    """True if the library at ``path`` matches the checksum stored beside it when it was built."""
    try:
        return _digest_path(path).read_text().strip() == hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return False


def build(source: str, timeout: float | None = None) -> Path:
    """Compile ``source`` unless a cached library with a matching checksum exists; atomic, so
    concurrent builders never see a torn file. A cached library that does not match its checksum
    (truncated, corrupted, swapped) is rebuilt with a warning, never loaded.

    ``timeout`` (seconds) kills a g++ that runs longer and raises ``CompileTimeout``.
    """
    cxx = settings.current().cxx
    path = library_path(source, cxx)
    if path.exists():
        if intact(path):
            counters["code_cache_hits"] += 1
            return path
        log.warning("loopnest: cached library %s does not match its checksum; rebuilding it", path)
    obj = pch.vecmath_object(cxx, flags()) if PREBUILT_MARK in source else None
    if PREBUILT_MARK in source and obj is None:  # the object is gone: the library defines them
        source += vecmath_instantiations()
    prelude = pch.include_flags(cxx, flags())
    src_path = atomic_write(path.with_suffix(".cpp"), pch.library_text(source, prelude))
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        proc = _compile(cxx, prelude, src_path, tmp, timeout, obj)
        pch.wait(timeout)  # a header build this started ran beside it; none outlives the call
        if proc.returncode != 0 and (prelude or obj):
            log.warning("loopnest: %s failed with the precompiled header %s and object %s; building without them",
                        cxx, prelude[-1] if prelude else None, obj)
            pch.give_up(cxx, flags())
            src_path = atomic_write(src_path, source + (vecmath_instantiations() if obj is not None else ""))
            proc = _compile(cxx, [], src_path, tmp, timeout)
        if proc.returncode != 0:
            raise CompileError(f"{cxx} failed on generated source {src_path}:\n{proc.stderr[-4000:]}")
        atomic_write(_digest_path(path), hashlib.sha256(Path(tmp).read_bytes()).hexdigest() + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    counters["kernels_compiled"] += 1
    return path


def prebuilt_vecmath() -> bool:
    """Whether the vecmath object is built for this compiler (a library's source then only
    declares the functions it calls: ``ops.vecmath_source``)."""
    return pch.vecmath_object(settings.current().cxx, flags()) is not None


def prebuild_header() -> float:
    """Build the precompiled system headers now unless they are there (``pch.py``); the seconds
    spent. Benchmarks call it first, to report that one-time cost apart from each graph's."""
    return pch.prebuild(settings.current().cxx, flags())


def _compile(cxx: str, prelude: list[str], src_path: Path, out: str, timeout: float | None,
             obj: Path | None = None):
    linked = [str(obj)] if obj is not None else []
    try:
        return subprocess.run([cxx, *flags(), *prelude, str(src_path), *linked, "-o", out], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileTimeout(f"{cxx} took longer than {timeout:g} s on {src_path}; killed") from None


def _check(path: Path) -> None:
    if not intact(path):
        raise CompileError(f"refusing to load {path}: it does not match its checksum (changed since it was built)")


def load(path: Path) -> ctypes.CDLL:
    """Load a library ``build`` made, after checking it against its checksum once more."""
    _check(path)
    return ctypes.CDLL(str(path))


def load_module(path: Path) -> ModuleType:
    """Import the extension module ``build`` made of a source with ``pymodule``'s wrapper, after
    checking it against its checksum once more."""
    _check(path)
    return pymodule.load_module(path)
