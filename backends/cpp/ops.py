"""How the C++ backend spells each IR op, and the C types of IR dtypes."""
from __future__ import annotations

import ctypes.util
import functools
import hashlib
from pathlib import Path
from typing import Callable, Sequence

from ...ir import dtypes as dt
from ...ir.dtypes import DType
from ...ir.ops import Op

# storage types (what a pointer points to) and compute types (what arithmetic runs in). Booleans
# are stored as bytes: g++ leaves a loop reading a `bool*` scalar, a compare and a branch per
# element (the C++ `bool` may hold only 0 or 1, so its loads are not plain byte loads), and reads
# a `uint8_t*` into a vector compare (`vpcmpb`, then masked moves). Halves are stored as their
# bits too: g++ 12 keeps every `_Float16` <-> float conversion scalar (`vcvtsh2ss`), while the
# integer spelling of ln_f16_to_f / ln_f_to_f16 vectorizes.
STORAGE = {
    dt.float16: "uint16_t", dt.bfloat16: "uint16_t", dt.float32: "float", dt.float64: "double",
    dt.int8: "int8_t", dt.int16: "int16_t", dt.int32: "int32_t", dt.int64: "int64_t",
    dt.uint8: "uint8_t", dt.bool_: "uint8_t",
}


def ctype(dtype: DType) -> str:
    """The C type values of ``dtype`` are computed in (float for float16/bfloat16)."""
    return "bool" if dtype.is_bool else STORAGE[dt.compute_dtype(dtype)]


def load_value(dtype: DType, ref: str) -> str:
    """Read a stored element as its compute type."""
    if dtype == dt.bfloat16:
        return f"ln_bf16_to_f({ref})"
    if dtype == dt.float16:
        return f"ln_f16_to_f({ref})"
    return ref


def store_value(dtype: DType, value: str) -> str:
    """Convert a compute value to the stored representation."""
    if dtype == dt.bfloat16:
        return f"ln_f_to_bf16({value})"
    if dtype == dt.float16:
        return f"ln_f_to_f16({value})"
    return value


def _fn(name: str) -> Callable[..., str]:
    return lambda *a: f"{name}({', '.join(a)})"


def _infix(sym: str) -> Callable[..., str]:
    return lambda a, b: f"({a} {sym} {b})"


# Each entry renders (args..., ) given argument strings; dtype-dependent ones take the arg dtype.
RENDER: dict[Op, Callable[..., str]] = {
    Op.ADD: _infix("+"), Op.SUB: _infix("-"), Op.MUL: _infix("*"), Op.TRUEDIV: _infix("/"),
    Op.FLOORDIV: _fn("ln_floordiv"), Op.MOD: _fn("ln_mod"), Op.FMOD: _fn("ln_fmod"),
    Op.POW: _fn("ln_pow"), Op.ATAN2: _fn("std::atan2"),
    Op.MAXIMUM: _fn("ln_maximum"), Op.MINIMUM: _fn("ln_minimum"), Op.COPYSIGN: _fn("std::copysign"),
    Op.NEG: _fn("ln_neg"), Op.ABS: _fn("ln_abs"), Op.RECIPROCAL: lambda a: f"(1 / {a})",
    Op.SIGN: _fn("ln_sign"),
    Op.SQRT: _fn("std::sqrt"), Op.RSQRT: _fn("ln_rsqrt"), Op.SIGMOID: _fn("ln_sigmoid"),
    Op.ERFINV: _fn("ln_erfinv"),
    Op.FLOOR: _fn("std::floor"), Op.CEIL: _fn("std::ceil"), Op.TRUNC: _fn("std::trunc"),
    Op.ROUND: _fn("std::nearbyint"),
    Op.ISNAN: lambda a: f"({a} != {a})", Op.ISINF: _fn("ln_isinf"),
    Op.EQ: _infix("=="), Op.NE: _infix("!="), Op.LT: _infix("<"), Op.LE: _infix("<="),
    Op.GT: _infix(">"), Op.GE: _infix(">="),
    Op.AND: _infix("&"), Op.OR: _infix("|"), Op.XOR: _infix("!="), Op.NOT: lambda a: f"(!{a})",
    Op.BITAND: _infix("&"), Op.BITOR: _infix("|"), Op.BITXOR: _infix("^"),
    Op.BITNOT: lambda a: f"(~{a})", Op.LSHIFT: _infix("<<"), Op.RSHIFT: _infix(">>"),
    Op.WHERE: lambda c, a, b: f"({c} ? {a} : {b})",
}


# Ops rendered as math calls: ``expf`` for float, ``exp`` for double. Where glibc's libmvec is
# present these are declared ``simd`` so that ``omp simd`` loops call its AVX2/AVX-512 variants
# instead of the scalar functions (8 floats per call). Float ops in ``VECMATH`` call loopnest's
# own vector math instead (``vecmath.h``); names starting ``ln_`` are prelude functions.
LIBM = {
    Op.EXP: "exp", Op.EXP_FTZ: "ln_exp_ftz", Op.EXP2: "exp2", Op.EXPM1: "expm1", Op.LOG: "log",
    Op.LOG2: "log2", Op.LOG10: "log10", Op.LOG1P: "log1p", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan",
    Op.ASIN: "asin", Op.ACOS: "acos", Op.ATAN: "atan", Op.SINH: "sinh", Op.COSH: "cosh",
    Op.TANH: "tanh", Op.ASINH: "asinh", Op.ACOSH: "acosh", Op.ATANH: "atanh", Op.ERF: "erf",
    Op.ERFC: "erfc", Op.SIGMOID: "ln_sigmoid",
}

# float32 ops computed by vecmath.h: (the function, the template it instantiates). Ops in
# LIBMVEC_FIRST use libmvec where it is installed: its tanhf measured faster than ln_tanhf
# (bf16 tanh-GELU 4096x4096 on a 16-core AVX-512 Xeon: 2.3-2.6 ms against 3.6-4.5 ms).
VECMATH = {
    Op.EXP: ("ln_expf", "exp_"), Op.EXP_FTZ: ("ln_expf_ftz", "exp_ftz_"), Op.LOG: ("ln_logf", "log_"),
    Op.TANH: ("ln_tanhf", "tanh_"), Op.ERF: ("ln_erff", "erf_"), Op.SIGMOID: ("ln_sigmoidf", "sigmoid_"),
}
LIBMVEC_FIRST = frozenset({Op.TANH})
VECMATH_HEADER = (Path(__file__).parent / "vecmath.h").read_text()


def vecmath_impl(op: Op, dtype: DType) -> str | None:
    """The vecmath.h template computing ``op`` at ``dtype`` (``exp_``, ...), or None where a libm
    or libmvec function does."""
    if ctype(dtype) == "float" and op in VECMATH and not (op in LIBMVEC_FIRST and has_libmvec()):
        return VECMATH[op][1]
    return None


def libmvec_name(op: Op, dtype: DType) -> str | None:
    """The float32 libm function computing ``op`` at ``dtype`` whose vector variant libmvec has
    (``expm1f``), where vecmath.h does not compute it; None otherwise."""
    name = LIBM.get(op)
    if name is None or name.startswith("ln_") or ctype(dtype) != "float" or vecmath_impl(op, dtype) is not None \
            or not has_libmvec():
        return None
    return name + "f"


def render_libm(op: Op, dtype: DType, arg: str) -> str:
    """A math call of the precision of ``dtype``'s compute type."""
    single = ctype(dtype) == "float"
    if vecmath_impl(op, dtype) is not None:
        return f"{VECMATH[op][0]}({arg})"
    name = LIBM[op]
    return f"{name}{'f' if single and not name.startswith('ln_') else ''}({arg})"


def vecmath_instantiations(names: Sequence[str] | None = None) -> str:
    """The ``LN_VECMATH`` lines defining the vecmath functions ``names`` (all by default): a
    scalar function and its vector ABI variants each."""
    return "".join(f"LN_VECMATH({name}, {impl})\n" for name, impl in VECMATH.values()
                   if names is None or name in names)


def vecmath_source(code: str, prebuilt: bool = False) -> str:
    """vecmath.h with the functions ``code`` calls instantiated (each costs g++ time: only those);
    with ``prebuilt``, only declared, for the library to link the prebuilt object that defines
    them (``pch.vecmath_object``), marked by ``PREBUILT_MARK`` and that object's digest."""
    used = [name for name, impl in VECMATH.values() if f"{name}(" in code or f"lnv::{impl}(" in code]
    if not used and "lnv::blocks<" not in code:
        return ""
    if not prebuilt:
        return VECMATH_HEADER + vecmath_instantiations(used)
    header = VECMATH_HEADER if "lnv::blocks<" in code else ""  # the templates that blocks inline
    declared = "".join(f'extern "C" __attribute__((visibility("hidden"), simd("notinbranch"), const, nothrow)) '
                       f"float {name}(float);\n" for name in used)
    return f"{header}{PREBUILT_MARK} {VECMATH_OBJECT_DIGEST}\n{declared}" if used else header


def simd_declarations() -> str:
    """``simd`` redeclarations of the libm functions libmvec vectorizes (empty without libmvec)."""
    if not has_libmvec():
        return ""
    lines = []
    for name in LIBM.values():
        if not name.startswith("ln_"):
            lines.append(f'__attribute__((simd("notinbranch"))) float {name}f(float);')
            lines.append(f'__attribute__((simd("notinbranch"))) double {name}(double);')
    return 'extern "C" {\n' + "\n".join(lines) + "\n}\n"


@functools.lru_cache(maxsize=None)
def has_libmvec() -> bool:
    """Whether glibc's vector math library is installed (then kernels link it)."""
    return ctypes.util.find_library("mvec") is not None


def render_cast(value: str, src: DType, dst: DType) -> str:
    """Convert a compute value of ``src`` to a compute value of ``dst`` (rounding narrow floats)."""
    if dst.is_bool:
        return f"({value} != 0)"
    if dst == dt.bfloat16:
        return f"ln_round_bf16((float)({value}))"
    if dst == dt.float16 and src == dt.float64:  # one rounding, as eager's (through float is two)
        return f"((float)(_Float16)({value}))"
    if dst == dt.float16:
        return f"ln_f16_to_f(ln_f_to_f16((float)({value})))"
    if src.is_bool or ctype(src) != ctype(dst):
        return f"(({ctype(dst)})({value}))"
    return value


def render_const(value, dtype: DType) -> str:
    """A C literal of ``dtype``'s compute type."""
    c = ctype(dtype)
    if dtype.is_bool:
        return "true" if value else "false"
    if dtype.is_float:
        if value != value:
            return f"std::numeric_limits<{c}>::quiet_NaN()"
        if value in (float("inf"), float("-inf")):
            sign = "-" if value < 0 else ""
            return f"({sign}std::numeric_limits<{c}>::infinity())"
        text = repr(float(value))
        return f"{text}f" if c == "float" else text
    return f"(({c}){value}LL)" if dtype == dt.int64 else f"(({c}){value})"


# C++17's <cmath> brings libstdc++'s special functions (std::beta, std::cyl_bessel_j, ...), whose
# inline wrappers g++ instantiates at the end of every translation unit that includes them: 30-40 ms
# of a one-kernel library's 90 ms, for functions no kernel calls. SKIP_SPECIAL_FUNCTIONS defines
# their header's include guard first, so <cmath> leaves them out (no effect outside libstdc++).
SKIP_SPECIAL_FUNCTIONS = "#define _GLIBCXX_BITS_SPECFUN_H 1\n"
PRELUDE = SKIP_SPECIAL_FUNCTIONS + r"""
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

// The widest vectors a kernel's loops may use (CppConfig.vector_width): -march=native alone makes
// GCC prefer 256-bit vectors on AVX-512 Xeons. The attribute reaches the OpenMP regions it outlines.
#define LN_VECTORS_512 __attribute__((target("prefer-vector-width=512")))
#define LN_VECTORS_256 __attribute__((target("prefer-vector-width=256")))

// A 64-byte line staged by a streamed pass: non-temporal stores where the target is a whole
// aligned line (AVX-512: one, AVX: two halves), a plain copy otherwise; the fence ends a row's
// streamed stores.
static inline void ln_stream_line(void* p, const void* v) {
#if defined(__AVX512F__)
  if (((uintptr_t)p & 63) == 0) { _mm512_stream_si512((__m512i*)p, _mm512_load_si512(v)); return; }
#elif defined(__AVX__)
  if (((uintptr_t)p & 63) == 0) {
    _mm256_stream_si256((__m256i*)p, _mm256_load_si256((const __m256i*)v));
    _mm256_stream_si256((__m256i*)p + 1, _mm256_load_si256((const __m256i*)v + 1));
    return;
  }
#endif
  std::memcpy(p, v, 64);
}
// Elements of the row at p before its first 64-byte-aligned one (n where none is: a row shorter
// than that, or p not aligned to its own element size).
template <class T> static inline int64_t ln_line_head(const T* p, int64_t n) {
  uintptr_t a = (uintptr_t)p;
  if (a % sizeof(T)) return n;
  int64_t head = (int64_t)(((64 - (a & 63)) & 63) / sizeof(T));
  return head < n ? head : n;
}
static inline void ln_stream_fence() {
#ifdef __AVX__
  _mm_sfence();
#endif
}

static inline float ln_bf16_to_f(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t ln_f_to_bf16(float f) {  // round to nearest even; NaN -> 0x7fc0 as in c10
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)(f != f ? 0x7fc0u : rounded);  // a float compare and a blend once vectorized
}
// f rounded to the nearest bfloat16 and read back, ln_bf16_to_f(ln_f_to_bf16(f)) bit for bit,
// without the round trip through 16 bits, which vectorized narrows and widens every vector (a bf16
// RMSNorm over 512 x 2048 on one Zen 4 core: 278 -> 258 µs; 240 with no rounding at all).
static inline float ln_round_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r; std::memcpy(&r, &u, 4);
  return f != f ? ln_bf16_to_f(0x7fc0u) : r;
}
// IEEE half <-> float in integer operations (g++ vectorizes these, not _Float16 conversions);
// both agree with _Float16 casts on every half and on 3.5e7 floats (round to nearest even).
static inline float ln_f16_to_f(uint16_t v) {
  uint32_t em = v & 0x7fffu, sign = (uint32_t)(v & 0x8000u) << 16;
  uint32_t scaled = (em << 13) + (em >= 0x7c00u ? 0x70000000u : 0x38000000u);  // rebias; inf/NaN keep all ones
  float normal; std::memcpy(&normal, &scaled, 4);
  float f = em < 0x400u ? (float)(int32_t)em * 5.9604644775390625e-8f : normal;  // zero, subnormal: em * 2^-24
  uint32_t u; std::memcpy(&u, &f, 4); u |= sign; std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t ln_f_to_f16(float f) {  // round to nearest even; NaN -> 0x7e00
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u; x &= 0x7fffffffu;
  float a; std::memcpy(&a, &x, 4);
  float sub = a + 0.5f;  // below 2^-14: the sum's low mantissa bits are the subnormal half, rounded to even
  uint32_t subu; std::memcpy(&subu, &sub, 4);
  uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;  // rebias and round to even
  uint32_t h = x < 0x38800000u ? subu - 0x3f000000u : normal;
  h = x >= 0x47800000u ? (x > 0x7f800000u ? 0x7e00u : 0x7c00u) : h;  // overflow to inf; NaN stays NaN
  return (uint16_t)(h | sign);
}
// N halves <-> floats a vector at a time (half_blocks.py): vcvtph2ps / vcvtps2ph where the target
// has them (F16C, AVX-512), W the kernel's vector width in floats; the integer spelling otherwise.
template <int W, int N> static inline void ln_halves_to_f(const uint16_t* s, float* d) {
#if defined(__AVX512F__)
  if constexpr (W == 16 && N % 16 == 0) {
    for (int i = 0; i < N; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + i))));
    return;
  }
#endif
#if defined(__F16C__)
  if constexpr (N % 8 == 0) {
    for (int i = 0; i < N; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
    return;
  }
#endif
  for (int i = 0; i < N; ++i) d[i] = ln_f16_to_f(s[i]);
}
template <int W, int N> static inline void ln_f_to_halves(const float* s, uint16_t* d) {
#if defined(__AVX512F__)
  if constexpr (W == 16 && N % 32 == 0) {  // whole lines: one store each (ln_f_to_bf16s says why)
    for (int i = 0; i < N; i += 32) {
      __m256i lo = _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m256i hi = _mm512_cvtps_ph(_mm512_loadu_ps(s + i + 16), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_storeu_si512((__m512i*)(d + i), _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    return;
  }
  if constexpr (W == 16 && N % 16 == 0) {
    for (int i = 0; i < N; i += 16)
      _mm256_storeu_si256((__m256i*)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return;
  }
#endif
#if defined(__F16C__)
  if constexpr (N % 16 == 0) {  // 32-byte stores, as an AVX line is streamed (ln_stream_line)
    for (int i = 0; i < N; i += 16) {
      __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(s + i + 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256((__m256i*)(d + i), _mm256_set_m128i(hi, lo));
    }
    return;
  }
  if constexpr (N % 8 == 0) {
    for (int i = 0; i < N; i += 8)
      _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return;
  }
#endif
  for (int i = 0; i < N; ++i) d[i] = ln_f_to_f16(s[i]);
}
// N floats -> bfloat16 a vector at a time (half_blocks.py): vcvtneps2bf16 where the target has
// AVX512-BF16, rounding to nearest even as ln_f_to_bf16 does. That instruction reads a float32
// denormal as zero, where eager keeps it as a bfloat16 denormal: a vector holding one (fpclass)
// takes the integer spelling instead, so every bit pattern matches ln_f_to_bf16 but NaN payloads.
template <int W, int N> static inline void ln_f_to_bf16s(const float* s, uint16_t* d) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  if constexpr (W == 16 && N % 32 == 0) {  // whole lines: a streamed pass reloads them as one
    for (int i = 0; i < N; i += 32) {      // vector, which two 32-byte stores could not forward
      __m512 lo = _mm512_loadu_ps(s + i), hi = _mm512_loadu_ps(s + i + 16);
      if (__builtin_expect((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) != 0, 0)) {
        for (int k = i; k < i + 32; ++k) d[k] = ln_f_to_bf16(s[k]);
      } else {
        _mm512_storeu_si512((__m512i*)(d + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    return;
  }
  if constexpr (W == 16 && N % 16 == 0) {
    for (int i = 0; i < N; i += 16) {
      __m512 v = _mm512_loadu_ps(s + i);
      if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) != 0, 0)) {  // 0x20: denormal
        for (int k = i; k < i + 16; ++k) d[k] = ln_f_to_bf16(s[k]);
      } else {
        _mm256_storeu_si256((__m256i*)(d + i), (__m256i)_mm512_cvtneps_pbh(v));
      }
    }
    return;
  }
#endif
  for (int i = 0; i < N; ++i) d[i] = ln_f_to_bf16(s[i]);
}
// A 16 x 16 block read across its lines, transposed into floats d: d[16 k + i] = s[k + i *
// stride] (tiling.py), from float32, bfloat16 or float16. AVX-512: 16 row loads (halves widened
// to floats), 64 shuffles in four rounds, 16 stores; else element by element.
#if defined(__AVX512F__)
static inline void ln_transpose16_rows(__m512* r, float* d) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // rows i, i + 1 interleaved, within each 128-bit lane
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // lane l of r[i + j]: rows i..i+3 at column 4 l + j
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {  // gather lane l of the four row groups: column 4 l + j
    __m512 lo01 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44), lo23 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
    __m512 hi01 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xee), hi23 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xee);
    _mm512_store_ps(d + 16 * j, _mm512_shuffle_f32x4(lo01, lo23, 0x88));
    _mm512_store_ps(d + 16 * (4 + j), _mm512_shuffle_f32x4(lo01, lo23, 0xdd));
    _mm512_store_ps(d + 16 * (8 + j), _mm512_shuffle_f32x4(hi01, hi23, 0x88));
    _mm512_store_ps(d + 16 * (12 + j), _mm512_shuffle_f32x4(hi01, hi23, 0xdd));
  }
}
#endif
static inline void ln_transpose16(const float* s, int64_t stride, float* d) {
#if defined(__AVX512F__)
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * stride);
  ln_transpose16_rows(r, d);
#else
  for (int k = 0; k < 16; ++k)
    for (int i = 0; i < 16; ++i) d[16 * k + i] = s[k + i * stride];
#endif
}
static inline void ln_transpose16_bf16(const uint16_t* s, int64_t stride, float* d) {
#if defined(__AVX512F__)
  __m512 r[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + i * stride))), 16));
  ln_transpose16_rows(r, d);
#else
  for (int k = 0; k < 16; ++k)
    for (int i = 0; i < 16; ++i) d[16 * k + i] = ln_bf16_to_f(s[k + i * stride]);
#endif
}
static inline void ln_transpose16_f16(const uint16_t* s, int64_t stride, float* d) {
#if defined(__AVX512F__)
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + i * stride)));
  ln_transpose16_rows(r, d);
#else
  for (int k = 0; k < 16; ++k)
    for (int i = 0; i < 16; ++i) d[16 * k + i] = ln_f16_to_f(s[k + i * stride]);
#endif
}
template <class T> static inline T ln_maximum(T a, T b) { return ((a != a) | (a > b)) ? a : b; }
template <class T> static inline T ln_minimum(T a, T b) { return ((a != a) | (a < b)) ? a : b; }
template <class T> static inline T ln_neg(T a) {  // integers wrap at the minimum, as eager (-a is UB there)
  if constexpr (std::is_integral_v<T>) return (T)(0 - (std::make_unsigned_t<T>)a); else return -a;
}
template <class T> static inline T ln_abs(T a) { return a < 0 ? ln_neg(a) : a; }
static inline float ln_abs(float a) { return std::fabs(a); }
static inline double ln_abs(double a) { return std::fabs(a); }
template <class T> static inline T ln_sign(T a) { return (T)((a > 0) - (a < 0)); }
template <class T> static inline bool ln_isinf(T a) { return std::isinf(a); }
template <class T> static inline T ln_rsqrt(T a) { return (T)1 / std::sqrt(a); }
template <class T> static inline T ln_exp_ftz(T a) { return a < (T)-87 ? (T)0 : std::exp(a); }
template <class T> static inline T ln_sigmoid(T a) { return (T)1 / ((T)1 + std::exp(-a)); }
template <class T> static inline bool ln_minus_one(T b) {  // x / -1 traps at the minimum on x86
  if constexpr (std::is_signed_v<T>) return b == -1; else return false;
}
template <class T> static inline T ln_floordiv(T a, T b) {
  if (b == 0) return 0;
  if (ln_minus_one(b)) return (T)(0 - (std::make_unsigned_t<T>)a);  // wraps at the minimum, as eager
  T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q;
}
static inline float ln_floordiv(float a, float b) {
  if (b == 0) return a / b;
  float m = std::fmod(a, b); float d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  float f = std::floor(d); if (d - f > 0.5f) f += 1; return d == 0 ? std::copysign(0.0f, a / b) : f;
}
static inline double ln_floordiv(double a, double b) {
  if (b == 0) return a / b;
  double m = std::fmod(a, b); double d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  double f = std::floor(d); if (d - f > 0.5) f += 1; return d == 0 ? std::copysign(0.0, a / b) : f;
}
template <class T> static inline T ln_mod(T a, T b) { if (b == 0 || ln_minus_one(b)) return 0; T r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline float ln_mod(float a, float b) { float r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline double ln_mod(double a, double b) { double r = std::fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
template <class T> static inline T ln_fmod(T a, T b) { return b == 0 || ln_minus_one(b) ? 0 : a % b; }
static inline float ln_fmod(float a, float b) { return std::fmod(a, b); }
static inline double ln_fmod(double a, double b) { return std::fmod(a, b); }
template <class T> static inline T ln_pow(T a, T b) {
  if (b < 0) return (a == 1) ? 1 : ((a == -1) ? ((b % 2) ? -1 : 1) : 0);
  T r = 1; while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r;
}
static inline float ln_pow(float a, float b) { return std::pow(a, b); }
static inline double ln_pow(double a, double b) { return std::pow(a, b); }
static inline bool ln_pow(bool a, bool b) { return a || !b; }
template <class T> static inline T ln_erfinv(T y) {
  if (y <= -1) return y == -1 ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  if (y >= 1) return y == 1 ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::quiet_NaN();
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 6.25) { w -= 3.125;
    x = -3.6444120640178196996e-21; x = -1.685059138182016589e-19 + x*w; x = 1.2858480715256400167e-18 + x*w;
    x = 1.115787767802518096e-17 + x*w; x = -1.333171662854620906e-16 + x*w; x = 2.0972767875968561637e-17 + x*w;
    x = 6.6376381343583238325e-15 + x*w; x = -4.0545662729752068639e-14 + x*w; x = -8.1519341976054721522e-14 + x*w;
    x = 2.6335093153082322977e-12 + x*w; x = -1.2975133253453532498e-11 + x*w; x = -5.4154120542946279317e-11 + x*w;
    x = 1.051212273321532285e-09 + x*w; x = -4.1126339803469836976e-09 + x*w; x = -2.9070369957882005086e-08 + x*w;
    x = 4.2347877827932403518e-07 + x*w; x = -1.3654692000834678645e-06 + x*w; x = -1.3882523362786468719e-05 + x*w;
    x = 0.0001867342080340571352 + x*w; x = -0.00074070253416626697512 + x*w; x = -0.0060336708714301490533 + x*w;
    x = 0.24015818242558961693 + x*w; x = 1.6536545626831027356 + x*w;
  } else if (w < 16.0) { w = std::sqrt(w) - 3.25;
    x = 2.2137376921775787049e-09; x = 9.0756561938885390979e-08 + x*w; x = -2.7517406297064545428e-07 + x*w;
    x = 1.8239629214389227755e-08 + x*w; x = 1.5027403968909827627e-06 + x*w; x = -4.013867526981545969e-06 + x*w;
    x = 2.9234449089955446044e-06 + x*w; x = 1.2475304481671778723e-05 + x*w; x = -4.7318229009055733981e-05 + x*w;
    x = 6.8284851459573175448e-05 + x*w; x = 2.4031110387097893999e-05 + x*w; x = -0.0003550375203628474796 + x*w;
    x = 0.00095328937973738049703 + x*w; x = -0.0016882755560235047313 + x*w; x = 0.0024914420961078508066 + x*w;
    x = -0.0037512085075692412107 + x*w; x = 0.005370914553590063617 + x*w; x = 1.0052589676941592334 + x*w;
    x = 3.0838856104922207635 + x*w;
  } else { w = std::sqrt(w) - 5.0;
    x = -2.7109920616438573243e-11; x = -2.5556418169965252055e-10 + x*w; x = 1.5076572693500548083e-09 + x*w;
    x = -3.7894654401267369937e-09 + x*w; x = 7.6157012080783393804e-09 + x*w; x = -1.4960026627149240478e-08 + x*w;
    x = 2.9147953450901080826e-08 + x*w; x = -6.7711997758452339498e-08 + x*w; x = 2.2900482228026654717e-07 + x*w;
    x = -9.9298272942317002539e-07 + x*w; x = 4.5260625972231537039e-06 + x*w; x = -1.9681778105531670567e-05 + x*w;
    x = 7.5995277030017761139e-05 + x*w; x = -0.00021503011930044477347 + x*w; x = -0.00013871931833623122026 + x*w;
    x = 1.0103004648645343977 + x*w; x = 4.8499064014085844221 + x*w;
  }
  return (T)(x * y);
}
"""

# The object that defines every vecmath function, built once per machine beside the precompiled
# header (pch.py): a library that calls them declares them and links it, instead of compiling
# their scalar and vector variants itself (0.05 of 0.26 s of g++ for a log-sum-exp's two kernels).
VECMATH_OBJECT_SOURCE = PRELUDE + VECMATH_HEADER + vecmath_instantiations()
VECMATH_OBJECT_DIGEST = hashlib.sha256(VECMATH_OBJECT_SOURCE.encode()).hexdigest()[:16]
PREBUILT_MARK = "// vecmath functions defined by the prebuilt object"
