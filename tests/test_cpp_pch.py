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
    assert pch._intact(pch._gch(header))
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
    assert pch._intact(pch._gch(header)) and pch.include_flags(*flags) == ["-include", str(header)]
    assert built(7) == 7


def test_a_build_that_fails_with_the_header_is_retried_without_it(fresh_cache, monkeypatch, caplog):
    monkeypatch.setattr(pch, "include_flags", lambda cxx, flags: ["-include", "/nonexistent/ln_prelude.h"])
    gave_up = []
    monkeypatch.setattr(pch, "give_up", lambda cxx, flags: gave_up.append(cxx))
    assert built(5) == 5
    assert gave_up and "building without them" in caplog.text


def exp_library():
    """A generated library that calls the vecmath exp (a softmax over rows)."""
    import loopnest as ln
    from loopnest.backends.cpp.backend import CppBackend
    from test_backends import kernels_of, softmax
    x = ln.placeholder("x", (4, 64), ln.float32)
    (kernel,) = kernels_of([softmax(x)], [x])
    return CppBackend(), kernel


def run_softmax(backend, kernel):
    import torch
    from loopnest.backends.cpp.params import CppConfig
    from loopnest.scheduler.kernel import signature
    x = torch.randn(4, 64)
    out = torch.full((4, 64), float("nan"))
    launcher = backend.compile([(kernel, CppConfig())]).launchers[kernel.name]
    launcher({n: out if n in kernel.outputs else x for n in signature(kernel).buffers}, {})
    torch.testing.assert_close(out, torch.softmax(x, 1))


def test_libraries_link_the_prebuilt_vecmath_object_and_equal_eager(fresh_cache):
    from loopnest.backends.cpp.ops import PREBUILT_MARK
    backend, kernel = exp_library()
    assert PREBUILT_MARK not in backend.module_source([(kernel, backend.default_config(kernel))])
    cc.prebuild_header()
    assert cc.prebuilt_vecmath()
    source = backend.module_source([(kernel, backend.default_config(kernel))])
    assert PREBUILT_MARK in source and "\nLN_VECMATH(ln_expf" not in source
    run_softmax(backend, kernel)


def test_a_damaged_vecmath_object_is_not_used_but_built_again(fresh_cache):
    cc.prebuild_header()
    flags = (cc.settings.current().cxx, cc.flags())
    obj = pch.object_path(pch.header_path(*flags))
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    pch._checked.clear()
    assert pch.vecmath_object(*flags) is None and not obj.exists()
    pch.include_flags(*flags)  # the header is fine: this starts the object's build alone
    pch.wait()
    assert pch.vecmath_object(*flags) == obj
    backend, kernel = exp_library()
    run_softmax(backend, kernel)


def test_a_library_declaring_the_prebuilt_functions_builds_without_the_object(fresh_cache, monkeypatch):
    cc.prebuild_header()
    backend, kernel = exp_library()
    source = backend.module_source([(kernel, backend.default_config(kernel))])
    monkeypatch.setattr(pch, "vecmath_object", lambda cxx, flags: None)  # removed since
    monkeypatch.setattr(backend, "module_source", lambda kernels: source)
    run_softmax(backend, kernel)


def test_a_build_that_fails_with_the_object_is_retried_without_it(fresh_cache, monkeypatch, caplog):
    cc.prebuild_header()
    backend, kernel = exp_library()
    monkeypatch.setattr(pch, "vecmath_object", lambda cxx, flags: fresh_cache / "missing.o")
    run_softmax(backend, kernel)
    assert "building without them" in caplog.text


def written_source(backend, kernel):
    """The generated source of ``kernel``'s library, and the text written beside the library."""
    source = backend.module_source([(kernel, backend.default_config(kernel))])
    return source, cc.library_path(source, cc.settings.current().cxx).with_suffix(".cpp").read_text()


def test_the_header_gives_generated_libraries_their_helper_prelude(fresh_cache):
    from loopnest.backends.cpp.ops import PRELUDE
    cc.prebuild_header()
    backend, kernel = exp_library()
    run_softmax(backend, kernel)
    source, written = written_source(backend, kernel)
    assert source.startswith(PRELUDE) and PRELUDE in pch.HEADER
    assert written == source[len(PRELUDE):]


def test_a_generated_library_that_fails_with_the_header_is_built_from_its_whole_source(fresh_cache, monkeypatch,
                                                                                          caplog):
    monkeypatch.setattr(pch, "include_flags", lambda cxx, flags: ["-include", "/nonexistent/ln_prelude.h"])
    backend, kernel = exp_library()
    run_softmax(backend, kernel)
    source, written = written_source(backend, kernel)
    assert "building without them" in caplog.text and written == source
