"""A precompiled header of the system headers and the helper prelude (``ops.PRELUDE``) every
generated library includes, and an object that defines the vector math functions those libraries
call.

Parsing ``<immintrin.h>`` (every AVX-512 intrinsic under ``-march=native``), ``<Python.h>``,
``<cmath>`` and ``<algorithm>`` is 90% of g++'s time on a generated library: 1.3 of 1.6 s for a
softmax, where the same source builds in 0.35 s with those headers precompiled (``-include``).
Building the precompiled header takes longer than one library (3.7 s; a 42 MB file), so it is
built once per cache directory, compiler, flags and CPU: when a process builds its second library
without it (a script that compiles one graph never pays for it), beside that library's build,
which then waits for it (3.7 s instead of 1.7 s, once), so no compile outlives the call to slow
what the caller times next; every library built after it, in any process, uses it. The header
also holds ``ops.PRELUDE``, the ``ln_`` helpers every library source starts with: ``library_text``
drops them from a source that the header will give them to. Parsing and instantiating them was
15-20 ms of each library's 90-110 ms of g++ (a one-kernel graph, 2-core Zen 4, 2026-12-07).

The same build compiles ``ops.VECMATH_OBJECT_SOURCE``, the scalar and vector variants of every
vecmath.h function, into one object (``vecmath_object``). A library that calls them then
declares them and links it instead of compiling them itself: a log-sum-exp's two kernels built in
0.21 s instead of 0.26 (2-core Zen 4, 2026-12-06). It is linked statically into each library, so
a library never depends on the object's file once built.

GCC uses a ``.gch`` only if it was built with compatible options, else it parses the header as
text, so a stale one cannot change a library. A truncated or altered ``.gch`` or object could:
the checksum of each, stored beside it, is checked before its first use in a process, and one
that does not match is removed and built again.
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
from .ops import PRELUDE, SKIP_SPECIAL_FUNCTIONS, VECMATH_OBJECT_DIGEST, VECMATH_OBJECT_SOURCE

log = logging.getLogger("loopnest")

# what the generated sources include from the system, then the helpers every library source starts
# with; their own #includes become no-ops after it
SYSTEM_HEADERS = SKIP_SPECIAL_FUNCTIONS + r"""#define PY_SSIZE_T_CLEAN
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
HEADER = SYSTEM_HEADERS + PRELUDE
BUILD_TIMEOUT_S = 300
START_AFTER = 2  # libraries a process builds before it builds the header: one-graph scripts never do

_lock = threading.Lock()
_checked: dict[Path, bool] = {}  # .gch or object path -> checked and usable in this process
_builds: dict[Path, threading.Thread] = {}  # header path -> its build (one per process)
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


def object_path(header: Path) -> Path:
    """Where the vecmath object built beside ``header`` lives."""
    return header.with_name(f"ln_vecmath_{VECMATH_OBJECT_DIGEST}.o")


def _digest(built: Path) -> Path:
    return built.with_name(built.name + ".sha256")


def _intact(built: Path) -> bool:
    try:
        return _digest(built).read_text().strip() == hashlib.sha256(built.read_bytes()).hexdigest()
    except OSError:
        return False


def _usable(built: Path) -> bool:
    """Whether ``built`` (a .gch or the object) is there and intact, checked once per process
    (call with ``_lock`` held); a damaged one is removed, to be built again."""
    usable = _checked.get(built)
    if usable is None and built.exists():
        usable = _checked[built] = _intact(built)
        if not usable:
            log.warning("loopnest: %s does not match its checksum; building it again", built)
            built.unlink(missing_ok=True)
            del _checked[built]
    return bool(usable)


def _missing(header: Path) -> list[Path]:
    """The ``.gch`` and object of ``header`` that are not there, nor failed to build or given up
    in this process (call with ``_lock`` held)."""
    return [b for b in (_gch(header), object_path(header)) if not _usable(b) and _checked.get(b) is None]


def include_flags(cxx: str, flags: tuple[str, ...]) -> list[str]:
    """``["-include", header]`` when the precompiled header for ``cxx`` and ``flags`` is built and
    intact; otherwise ``[]``. Where it or the vecmath object is missing, starts their build in a
    thread (from the second ask of a process; ``wait`` for it)."""
    header = header_path(cxx, flags)
    if header is None:
        return []
    with _lock:
        usable = _usable(_gch(header))
        if header not in _builds and _missing(header):
            _asked[header] = _asked.get(header, 0) + 1
            if _asked[header] >= START_AFTER:
                _builds[header] = threading.Thread(target=_build, args=(cxx, flags, header), daemon=True,
                                                   name="loopnest-pch")
                _builds[header].start()
    return ["-include", str(header)] if usable else []


def library_text(source: str, include: list[str]) -> str:
    """The text g++ compiles for the library ``source``: without its leading ``ops.PRELUDE`` where
    ``include`` (``include_flags``'s answer) brings the header that holds it, else ``source``."""
    return source[len(PRELUDE):] if include and source.startswith(PRELUDE) else source


def vecmath_object(cxx: str, flags: tuple[str, ...]) -> Path | None:
    """The vecmath object for ``cxx`` and ``flags`` when it is built and intact, else None (a
    library then defines the functions it calls itself)."""
    header = header_path(cxx, flags)
    if header is None:
        return None
    with _lock:
        return object_path(header) if _usable(object_path(header)) else None


def prebuild(cxx: str, flags: tuple[str, ...]) -> float:
    """Build the precompiled header and the vecmath object for ``cxx`` and ``flags`` now unless
    they are there; the seconds spent (benchmarks report it apart from the per-graph compile
    times)."""
    start = time.perf_counter()
    header = header_path(cxx, flags)
    if header is None:
        return 0.0
    with _lock:
        _asked[header] = max(_asked.get(header, 0), START_AFTER - 1)
    if not include_flags(cxx, flags) or vecmath_object(cxx, flags) is None:
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
        _checked[_gch(header)] = _checked[object_path(header)] = False


def _build(cxx: str, flags: tuple[str, ...], header: Path) -> None:
    """Build what is missing of ``header``'s ``.gch`` and the vecmath object (one that fails is
    not tried again in this process)."""
    with _lock:
        missing = _missing(header)
    try:
        if _gch(header) in missing:
            atomic_write(header, HEADER)
            built = _compile(cxx, [*compile_flags(flags), "-x", "c++-header", str(header)], _gch(header))
            with _lock:
                _checked[_gch(header)] = built
        if object_path(header) in missing:
            source = atomic_write(object_path(header).with_suffix(".cpp"), VECMATH_OBJECT_SOURCE)
            built = _compile(cxx, [*compile_flags(flags), "-c", str(source)], object_path(header))
            with _lock:
                _checked[object_path(header)] = built
    except OSError as exc:
        log.info("loopnest: no precompiled header or vecmath object (%s)", exc)
        with _lock:
            _checked.update({b: _checked.get(b) or False for b in missing})
    finally:
        with _lock:
            _builds.pop(header, None)


def _compile(cxx: str, args: list[str], target: Path) -> bool:
    """Run ``cxx args -o target`` (its checksum first, then the file, each atomically); whether
    it was built."""
    fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.Popen([cxx, *args, "-o", tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _compilers.add(proc)
        try:
            _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
        finally:
            proc.kill()
            proc.wait()
            _compilers.discard(proc)
        if proc.returncode == 0:
            atomic_write(_digest(target), hashlib.sha256(Path(tmp).read_bytes()).hexdigest() + "\n")
            os.replace(tmp, target)
            return True
        log.info("loopnest: no %s (%s failed: %s)", target.name, cxx, err[-500:])
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("loopnest: no %s (%s)", target.name, exc)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return False


@atexit.register
def _stop_builds() -> None:
    """At exit (e.g. after an interrupt), stop the headers still building, so no g++ outlives the
    process and its temporary file is removed."""
    for proc in list(_compilers):
        proc.kill()
    wait()
