"""A backend's codegen version is a digest of its source, so stored winners go stale whenever the
code that generates, launches or configures its kernels changes (no version to forget to bump)."""
from __future__ import annotations

import shutil
from pathlib import Path

from loopnest.backends import registry
from loopnest.backends.base import source_digest
from loopnest.backends.cpp import backend as cpp_backend
from loopnest.backends.triton import backend as triton_backend


def test_digest_follows_every_source_file(tmp_path):
    folder = tmp_path / "cpp"
    shutil.copytree(cpp_backend.CODEGEN_SOURCES[0], folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_digest(folder)
    source_digest.cache_clear()
    assert source_digest(folder) == before  # stable across calls (and processes: no hash seeds)
    codegen = folder / "codegen.py"
    codegen.write_text(codegen.read_text() + "\n# a change\n")
    source_digest.cache_clear()
    assert source_digest(folder) != before


def test_each_backend_versions_its_own_code_and_the_shared_emitter():
    for module in (cpp_backend, triton_backend):
        folder, emitter, *ir_semantics = module.CODEGEN_SOURCES
        assert folder == Path(module.__file__).parent and emitter.name == "emitter.py"
    cpp, triton = registry.get("cpp").software(), registry.get("triton").software()
    assert cpp["codegen_version"] != triton["codegen_version"]  # a C++ change keeps Triton winners fresh
    assert len(cpp["codegen_version"]) == 16
