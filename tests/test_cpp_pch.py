"""The precompiled header of the C++ backend (``pch.py``): built beside the second library a
process builds, then used by every build; a damaged one is never used but built again;
a build that fails with it is retried without it."""
import ctypes
import uuid

import pytest

from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp import pch


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty code cache, and this process's record of precompiled headers forgotten."""
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pch, "_checked", {})
    monkeypatch.setattr(pch, "_asked", {})
    return tmp_path


def library(value: int) -> tuple[str, str]:
    """A source using what the header holds (<algorithm>, OpenMP), and the tag in its symbol."""
    tag = uuid.uuid4().hex
    return (f'#include <algorithm>\n#include <omp.h>\nextern "C" int answer_{tag}() {{ '
            f'return std::max({value}, omp_get_max_threads() * 0); }}\n'), tag


def built(value: int) -> int:
    source, tag = library(value)
    return getattr(ctypes.CDLL(str(cc.build(source))), f"answer_{tag}")()


def test_the_second_library_starts_the_header_and_later_ones_use_it(fresh_cache):
    flags = (cc.settings.current().cxx, cc.flags())
    assert built(1) == 1 and pch.include_flags(*flags) == []   # a second ask starts the build
    pch.wait()
    header = pch.header_path(*flags)
    assert pch._intact(header)
    assert pch.include_flags(*flags) == ["-include", str(header)]
    assert built(42) == 42


def test_a_damaged_header_is_not_used_but_built_again(fresh_cache):
    flags = (cc.settings.current().cxx, cc.flags())
    pch.include_flags(*flags)
    pch.include_flags(*flags)
    pch.wait()
    header = pch.header_path(*flags)
    gch = header.with_name(header.name + ".gch")
    data = bytearray(gch.read_bytes())
    data[len(data) // 2] ^= 0xFF
    gch.write_bytes(bytes(data))
    pch._checked.clear()
    assert pch.include_flags(*flags) == []  # checked, removed, being built again
    pch.wait()
    assert pch._intact(header) and pch.include_flags(*flags) == ["-include", str(header)]
    assert built(7) == 7


def test_a_build_that_fails_with_the_header_is_retried_without_it(fresh_cache, monkeypatch, caplog):
    monkeypatch.setattr(pch, "include_flags", lambda cxx, flags: ["-include", "/nonexistent/ln_prelude.h"])
    gave_up = []
    monkeypatch.setattr(pch, "give_up", lambda cxx, flags: gave_up.append(cxx))
    assert built(5) == 5
    assert gave_up and "building without it" in caplog.text
