"""Gold links kernel libraries only where the compiler links with it (``linker.py``): a g++
under its own prefix passed gold paths it could not resolve, and every build failed."""
import ctypes
import shutil
import stat
import uuid

import pytest

from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp import linker

pytestmark = pytest.mark.skipif(shutil.which("ld.gold") is None, reason="binutils without gold")


def compiler(tmp_path, gold_fails: bool):
    """A g++ wrapper that fails as that GCC did when asked for gold (or passes everything on)."""
    real = shutil.which("g++")
    path = tmp_path / f"g++-{uuid.uuid4().hex[:8]}"
    refuse = ('for a in "$@"; do [ "$a" = -fuse-ld=gold ] && { echo "ld.gold: error: cannot open '
              'libstdc++.so: No such file or directory" >&2; exit 1; }; done\n') if gold_fails else ""
    path.write_text(f"#!/bin/sh\n{refuse}exec {real} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path / "cache"))
    linker.link_flags.cache_clear()
    yield tmp_path
    linker.link_flags.cache_clear()


def records(tmp_path):
    return sorted((tmp_path / "cache" / "cpp" / "probes").glob("gold-*.json"))


def test_a_compiler_that_cannot_link_with_gold_builds_with_its_own_linker(fresh, monkeypatch):
    cxx = compiler(fresh, gold_fails=True)
    monkeypatch.setenv("CXX", cxx)
    assert linker.link_flags(cxx) == ()
    assert "-fuse-ld=gold" not in cc.flags()
    tag = uuid.uuid4().hex
    lib = ctypes.CDLL(str(cc.build(f'extern "C" int answer_{tag}() {{ return 42; }}\n')))
    assert getattr(lib, f"answer_{tag}")() == 42


def test_gold_is_used_where_it_links_and_the_answer_is_kept(fresh, monkeypatch):
    cxx = compiler(fresh, gold_fails=False)
    assert linker.link_flags(cxx) == ("-fuse-ld=gold",)
    [record] = records(fresh)
    calls = []
    monkeypatch.setattr(linker, "_gold_links", lambda c: calls.append(c) or False)
    linker.link_flags.cache_clear()
    assert linker.link_flags(cxx) == ("-fuse-ld=gold",) and calls == []  # read back, not probed
    record.write_text("not json")
    linker.link_flags.cache_clear()
    assert linker.link_flags(cxx) == () and calls == [cxx]  # a bad record is probed again
