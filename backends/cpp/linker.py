"""Whether kernel libraries link with gold: asked of each compiler once, and kept in the cache
directory.

Gold links a kernel library in 0.03 s where ld.bfd takes 0.05-0.06 s (g++ 12, Zen 4 host,
2026-12-07), a fifth of a one-kernel graph's build. Having ``ld.gold`` on the PATH is not enough:
a g++ installed under its own prefix (``/opt/gcc``, GCC 13 on an H100 host) passes gold library
paths that only its own ld resolves, and every link failed ("cannot open .../libstdc++.so"). So
a small C++ library with OpenMP is linked with gold once per compiler; gold is used only if that
works.
"""
from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...core.hardware import TOOL_TIMEOUT_S, compiler_version
from .probe_records import keep_record, read_record, record_path

log = logging.getLogger("loopnest")

GOLD = "-fuse-ld=gold"
PROBE = "#include <vector>\nextern \"C\" int ln_probe(int n) { std::vector<int> v(n); return (int)v.size(); }\n"


@functools.cache
def link_flags(cxx: str) -> tuple[str, ...]:
    """``("-fuse-ld=gold",)`` if ``cxx`` links a shared C++ library with OpenMP through gold,
    else ``()`` (the compiler's own linker). Measured on the first call per compiler, then read
    back from the cache directory; a record that does not parse is measured again."""
    if shutil.which("ld.gold") is None:
        return ()
    version = compiler_version(cxx)
    if version is None:
        return ()  # the build itself reports a compiler that does not run
    path = record_path("gold", PROBE, cxx, version)
    record = read_record(path, {"links": bool})
    if record is not None:
        return (GOLD,) if record["links"] else ()
    links = _gold_links(cxx)
    if not links:
        log.info("loopnest: %s does not link with gold here; kernel libraries use its default linker", cxx)
    keep_record(path, {"links": links})
    return (GOLD,) if links else ()


def _gold_links(cxx: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="loopnest-link-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text(PROBE)
        try:
            proc = subprocess.run([cxx, "-shared", "-fPIC", "-fopenmp", GOLD, str(src), "-o", str(Path(tmp) / "probe.so")],
                                  capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0
