"""The CPU's ISA extensions: read from /proc/cpuinfo into the hardware fingerprint, agreeing with
what -march=native turns on, and part of the C++ code cache key."""
import pytest

from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp import vecmath_probe
from loopnest.core.hardware import CPU_ISA_FLAGS, cpu_hardware, this_cpu

SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx f16c avx2 fma avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
ZEN3 = """processor\t: 0
model name\t: AMD EPYC 7763 64-Core Processor
flags\t\t: fpu sse2 avx f16c avx2 fma
"""

# each fingerprint flag, and the macro g++ defines when -march=native turns it on
MACROS = {"avx": "__AVX__", "avx2": "__AVX2__", "fma": "__FMA__", "avx512f": "__AVX512F__",
          "avx512bw": "__AVX512BW__", "avx512vl": "__AVX512VL__", "avx512_bf16": "__AVX512BF16__",
          "avx512_fp16": "__AVX512FP16__", "amx": "__AMX_TILE__"}


def test_isa_flags_in_the_fingerprint():
    spr, zen = cpu_hardware(SAPPHIRE_RAPIDS, "", 112), cpu_hardware(ZEN3, "", 112)
    assert spr.capability == "avx,avx2,fma,avx512f,avx512bw,avx512vl,avx512_bf16,avx512_fp16,amx"
    assert zen.capability == "avx,avx2,fma"
    no_fp16 = cpu_hardware(SAPPHIRE_RAPIDS.replace(" avx512_fp16", ""), "", 112)
    assert "avx512_fp16" not in no_fp16.capability and no_fp16.fingerprint != spr.fingerprint
    assert set(MACROS) == set(CPU_ISA_FLAGS)


def test_march_native_turns_on_exactly_the_detected_flags():
    """The compile flags and the fingerprint describe the same ISA on this machine."""
    probes = "\n".join(f'extern "C" int has_{flag}() {{\n#ifdef {macro}\n  return 1;\n#else\n  return 0;\n#endif\n}}'
                       for flag, macro in MACROS.items())
    lib = cc.load(cc.build(probes))
    enabled = {flag for flag in MACROS if getattr(lib, f"has_{flag}")()}
    assert enabled == set(filter(None, this_cpu().capability.split(",")))


def test_code_cache_key_holds_the_isa(monkeypatch):
    source = "int f() { return 1; }"
    here = cc.library_path(source, "g++")
    monkeypatch.setattr(cc, "this_cpu", lambda: cpu_hardware(SAPPHIRE_RAPIDS, "", 2))
    spr = cc.library_path(source, "g++")
    monkeypatch.setattr(cc, "this_cpu", lambda: cpu_hardware(ZEN3, "", 2))
    zen = cc.library_path(source, "g++")
    assert spr != zen and here != spr


@pytest.mark.skipif("avx512f" not in this_cpu().capability, reason="needs AVX-512")
def test_avx512_variants_are_built_where_the_cpu_has_them():
    assert "eN16" in vecmath_probe.paths("ln_expf")
