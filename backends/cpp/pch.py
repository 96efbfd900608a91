"""A precompiled header of the system headers every generated library includes.

Parsing ``<immintrin.h>`` (every AVX-512 intrinsic under ``-march=native``), ``<Python.h>``,
``<cmath>`` and ``<algorithm>`` is 90% of g++'s time on a generated library: 1.3 of 1.6 s for a
softmax, where the same source builds in 0.35 s with those headers precompiled (``-include``).
Building the precompiled header takes longer than one library (3.7 s; a 42 MB file), so it is
built once per cache directory, compiler, flags and CPU: when a process builds its second library
without it (a script that compiles one graph never pays for it), beside that library's build,
which then waits for it (3.7 s instead of 1.7 s, once), so no compile outlives the call to slow
what the caller times next; every library built after it, in any process, uses it.

GCC uses a ``.gch`` only if it was built with compatible options, else it parses the header as
text, so a stale one cannot change a library. A truncated or altered one could: its checksum,
stored beside it, is checked before its first use in a process, and one that does not match is
removed and built again.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ...core import settings
from ...core.files import atomic_write
from ...core.hardware import compiler_version, this_cpu

log = logging.getLogger("loopnest")

# what the generated sources include from the system; their own #includes become no-ops after it
HEADER = r"""#define PY_SSIZE_T_CLEAN
#if __has_include(<Python.h>)
#include <Python.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <omp.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
"""
BUILD_TIMEOUT_S = 300
START_AFTER = 2  # libraries a process builds before it builds the header: one-graph scripts never do

_lock = threading.Lock()
_checked: dict[Path, bool] = {}  # header path -> its .gch checked and usable in this process
_builds: dict[Path, threading.Thread] = {}
_compilers: set[subprocess.Popen] = set()  # g++ building a header now
_asked: dict[Path, int] = {}  # header path -> libraries built without it in this process


def compile_flags(flags: tuple[str, ...]) -> list[str]:
    """The options of ``flags`` that shape compilation (the linker's left out)."""
    return [f for f in flags if f != "-shared" and not f.startswith("-l")]


def header_path(cxx: str, flags: tuple[str, ...]) -> Path | None:
    """Where the header for ``cxx`` and ``flags`` on this CPU lives (its ``.gch`` beside it);
    None when ``cxx`` does not run."""
    version = compiler_version(cxx)
    if version is None:
        return None
    cpu = this_cpu()
    key = hashlib.sha256("\0".join((HEADER, " ".join(compile_flags(flags)), version, cpu.name,
                                    cpu.capability)).encode()).hexdigest()
    return settings.cache_dir("cpp") / "pch" / key[:24] / "ln_prelude.h"


def _gch(header: Path) -> Path:
    return header.with_name(header.name + ".gch")


def _digest(header: Path) -> Path:
    return header.with_name(header.name + ".gch.sha256")


def _intact(header: Path) -> bool:
    try:
        return _digest(header).read_text().strip() == hashlib.sha256(_gch(header).read_bytes()).hexdigest()
    except OSError:
        return False


def include_flags(cxx: str, flags: tuple[str, ...]) -> list[str]:
    """``["-include", header]`` when the precompiled header for ``cxx`` and ``flags`` is built and
    intact; otherwise ``[]``, having started its build in a thread (from the second ask of a
    process; ``wait`` for it)."""
    header = header_path(cxx, flags)
    if header is None:
        return []
    with _lock:
        usable = _checked.get(header)
        if usable is None and header not in _builds:
            if _gch(header).exists():
                usable = _checked[header] = _intact(header)
                if not usable:
                    log.warning("loopnest: precompiled header %s does not match its checksum; building it again",
                                _gch(header))
                    _gch(header).unlink(missing_ok=True)
                    del _checked[header]
            _asked[header] = _asked.get(header, 0) + 1
            if not usable and _asked[header] >= START_AFTER:
                _builds[header] = threading.Thread(target=_build, args=(cxx, flags, header), daemon=True,
                                                   name="loopnest-pch")
                _builds[header].start()
    return ["-include", str(header)] if usable else []


def prebuild(cxx: str, flags: tuple[str, ...]) -> float:
    """Build the precompiled header for ``cxx`` and ``flags`` now unless it is there; the seconds
    spent (benchmarks report it apart from the per-graph compile times)."""
    start = time.perf_counter()
    header = header_path(cxx, flags)
    if header is None:
        return 0.0
    with _lock:
        _asked[header] = max(_asked.get(header, 0), START_AFTER - 1)
    if not include_flags(cxx, flags):
        wait()
    return time.perf_counter() - start


def wait(timeout: float | None = None) -> None:
    """Wait for the precompiled headers being built in this process (each at most ``timeout``
    seconds; one still building then goes on in the background)."""
    for thread in list(_builds.values()):
        thread.join(timeout)


def give_up(cxx: str, flags: tuple[str, ...]) -> None:
    """Build without the precompiled header for ``cxx`` and ``flags`` for the rest of this process
    (a build with it failed where one without it may not)."""
    header = header_path(cxx, flags)
    with _lock:
        _checked[header] = False


def _build(cxx: str, flags: tuple[str, ...], header: Path) -> None:
    """Compile ``header``'s text into its ``.gch`` (checksum first, then the file, each atomically)."""
    atomic_write(header, HEADER)
    fd, tmp = tempfile.mkstemp(suffix=".gch", dir=header.parent)
    os.close(fd)
    try:
        proc = subprocess.Popen([cxx, *compile_flags(flags), "-x", "c++-header", str(header), "-o", tmp],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _compilers.add(proc)
        try:
            _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
        finally:
            proc.kill()
            proc.wait()
            _compilers.discard(proc)
        built = proc.returncode == 0
        if built:
            atomic_write(_digest(header), hashlib.sha256(Path(tmp).read_bytes()).hexdigest() + "\n")
            os.replace(tmp, _gch(header))
        else:
            log.info("loopnest: no precompiled header (%s failed: %s)", cxx, err[-500:])
    except (OSError, subprocess.SubprocessError) as exc:
        built = False
        log.info("loopnest: no precompiled header (%s)", exc)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    with _lock:
        _checked[header] = built  # a failed build is not tried again in this process
        _builds.pop(header, None)


@atexit.register
def _stop_builds() -> None:
    """At exit (e.g. after an interrupt), stop the headers still building, so no g++ outlives the
    process and its temporary file is removed."""
    for proc in list(_compilers):
        proc.kill()
    wait()
