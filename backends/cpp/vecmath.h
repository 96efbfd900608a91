// Vector float32 math for generated kernels: exp, log, tanh, erf, sigmoid.
//
// Each function is one branch-free template over a lane type (float, or a GCC vector of 4, 8 or
// 16 floats), instantiated twice: as the scalar C function (ln_expf, ...) and as the x86 vector
// ABI variants of it (_ZGVbN4v_ln_expf: SSE, 4 lanes; _ZGVcN8v_/_ZGVdN8v_: AVX/AVX2, 8 lanes;
// _ZGVeN16v_: AVX-512, 16 lanes). The scalar function is declared simd("notinbranch"), so an
// `omp simd` loop calling it calls the variant of the loop's vector width, and its scalar tail
// calls the scalar instantiation: every lane and the tail compute bit-identical results. Only the
// variants the target ISA can run are defined (-march decides through __AVX__, __AVX512F__, ...).
//
// Fused multiply-adds are explicit (fma instructions where __FMA__, else a*b+c in every
// instantiation), so results do not depend on the compiler's contraction choices.
//
// Error bounds (ulp of float32, against float64, measured on 10^6 random inputs per function by
// tests/test_cpp_vecmath.py, which asserts them; bench/RESULTS.md has the table):
//   ln_expf      <= 1 ulp (0.87 seen), x in [-103.97, 88.72]; overflow to inf above 88.7228,
//                0 below -103.973, denormal results rounded once (two-step scaling).
//   ln_logf      <= 1 ulp (0.80 seen), all positive floats, denormals included; log(0) = -inf,
//                log(x < 0) = NaN, log(inf) = inf.
//   ln_tanhf     <= 1.5 ulp (1.35 seen, just above |x| = 0.625); +-1 beyond |x| = 9.1,
//                tanh(-0) = -0.
//   ln_erff      <= 2 ulp (1.56 seen, just below |x| = 1); +-1 beyond |x| = 3.92, erf(-0) = -0.
//   ln_sigmoidf  <= 2.5 ulp (2.33 seen); 1 / (1 + exp(-x)), written as e / (1 + e) with
//                e = exp(-|x|) for x < 0, so results down to denormals stay accurate.
// NaN in, NaN out for every function; +-inf give the limits.
#include <cstdint>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace lnv {
typedef float f4 __attribute__((vector_size(16)));
typedef int32_t i4 __attribute__((vector_size(16)));
typedef float f8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef float f16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));

template <class V> struct Lanes;
template <> struct Lanes<float> { using I = int32_t; };
template <> struct Lanes<f4> { using I = i4; };
template <> struct Lanes<f8> { using I = i8; };
template <> struct Lanes<f16> { using I = i16; };
template <class V> using I = typename Lanes<V>::I;

template <class V> static inline I<V> bits(V x) { return __builtin_bit_cast(I<V>, x); }
template <class V> static inline V from_bits(I<V> i) { return __builtin_bit_cast(V, i); }
template <class V> static inline V splat(float c) { return V{} + c; }
static inline float to_float(int32_t i) { return (float)i; }
static inline f4 to_float(i4 i) { return __builtin_convertvector(i, f4); }
static inline f8 to_float(i8 i) { return __builtin_convertvector(i, f8); }

static inline float fma_(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
#ifdef __FMA__
static inline f4 fma_(f4 a, f4 b, f4 c) { return __builtin_ia32_vfmaddps(a, b, c); }
#else
static inline f4 fma_(f4 a, f4 b, f4 c) { return a * b + c; }
#endif
#ifdef __AVX__
#ifdef __FMA__
static inline f8 fma_(f8 a, f8 b, f8 c) { return __builtin_ia32_vfmaddps256(a, b, c); }
#else
static inline f8 fma_(f8 a, f8 b, f8 c) { return a * b + c; }
#endif
#endif
#ifdef __AVX512F__
static inline f16 to_float(i16 i) { return __builtin_convertvector(i, f16); }
static inline f16 fma_(f16 a, f16 b, f16 c) { return __builtin_ia32_vfmaddps512_mask(a, b, c, -1, 4); }
#endif

// Horner's rule with explicit fmas: c[0] + x*(c[1] + x*(...)).
template <class V, int N> static inline V poly(V x, const float (&c)[N]) {
  V r = splat<V>(c[N - 1]);
  for (int k = N - 2; k >= 0; --k) r = fma_(r, x, splat<V>(c[k]));
  return r;
}

template <class V> static inline V abs_(V x) { return from_bits<V>(bits(x) & 0x7fffffff); }
template <class V> static inline V with_sign_of(V mag, V x) {
  return from_bits<V>(bits(mag) | (bits(x) & (int32_t)0x80000000));
}

// exp: x = n*ln2 + r, |r| <= ln2/2 (Cody-Waite), e^r by a degree-7 minimax polynomial (Cephes),
// 2^n applied as two normal factors so denormal results round once.
template <class V> static inline V exp_(V x) {
  static const float p[] = {1.0f, 1.0f, 5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                            8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  const float shifter = 0x1.8p23f;
  V xc = x < -104.0f ? splat<V>(-104.0f) : x;  // NaN compares false: it passes through
  xc = xc > 88.8f ? splat<V>(88.8f) : xc;
  V t = fma_(xc, splat<V>(0x1.715476p+0f), splat<V>(shifter));
  V n = t - shifter;
  V r = fma_(n, splat<V>(-0x1.62e400p-1f), xc);
  r = fma_(n, splat<V>(-0x1.7f7d1cp-20f), r);
#ifdef __AVX512F__
  if constexpr (sizeof(V) == 64) {  // vscalefps: e^r * 2^n in one instruction, rounded once
    return (V)_mm512_scalef_ps((__m512)poly(r, p), (__m512)n);
  }
#endif
  I<V> ni = bits(t) - bits(splat<V>(shifter));
  I<V> n1 = ni >> 1, n2 = ni - n1;
  V s1 = from_bits<V>((n1 + 127) << 23), s2 = from_bits<V>((n2 + 127) << 23);
  return poly(r, p) * s1 * s2;
}

// log: x = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f), f = m - 1
// (Cephes logf); e*ln2 in two parts. Denormal inputs are scaled by 2^23 first.
template <class V> static inline V log_(V x) {
  static const float p[] = {3.3333331174e-1f, -2.4999993993e-1f, 2.0000714765e-1f, -1.6668057665e-1f,
                            1.4249322787e-1f, -1.2420140846e-1f, 1.1676998740e-1f, -1.1514610310e-1f,
                            7.0376836292e-2f};
  const float inf = __builtin_inff();
  auto tiny = x < 0x1p-126f;
  V xs = tiny ? x * 0x1p23f : x;
  I<V> i = bits(xs);
  I<V> e = (i >> 23) - 126 - (tiny ? I<V>{} + 23 : I<V>{});
  V m = from_bits<V>((i & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  auto low = m < 0x1.6a09e6p-1f;                       // sqrt(1/2)
  V f = (low ? m + m : m) - 1.0f;
  V fe = to_float(e - (low ? I<V>{} + 1 : I<V>{}));
  V z = f * f;
  V y = poly(f, p) * f * z;
  y = fma_(fe, splat<V>(-2.12194440e-4f), y);
  y = fma_(z, splat<V>(-0.5f), y);
  V r = f + y;
  r = fma_(fe, splat<V>(0.693359375f), r);
  r = x == inf ? x : r;
  r = x == 0.0f ? splat<V>(-inf) : r;
  return (x < 0.0f) | (x != x) ? splat<V>(__builtin_nanf("")) : r;
}

// tanh: |x| < 0.625: x + x^3 P(x^2) (Cephes tanhf); else 1 - 2 / (e^{2|x|} + 1), sign of x.
template <class V> static inline V tanh_(V x) {
  static const float p[] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f,
                            2.06390887954e-2f, -5.70498872745e-3f};
  V a = abs_(x);
  V z = x * x;
  V small = with_sign_of(abs_(fma_(poly(z, p) * z, x, x)), x);  // odd, and tanh(-0) = -0
  V e = exp_(a + a);
  V big = with_sign_of(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? small : big;
}

// erf: |x| < 1: x P(x^2); else 1 - e^{-x^2} Q(1/|x|) with Q fitted to erfc(x) e^{x^2} on [1, 4]
// (weighted least squares, relative error 1.4e-8 and 2.6e-8 in float64); |x| is clamped at 4,
// where erf rounds to 1.
template <class V> static inline V erf_(V x) {
  // p0_hi + p0_lo = 2/sqrt(pi) to 48 bits: x * p0_hi alone would cost up to 1 ulp
  const float p0_hi = 0x1.20dd76p+0f, p0_lo = -0x1.f7ac92p-25f;
  static const float p[] = {-0x1.812724p-2f, 0x1.ce29eep-4f, -0x1.b7d088p-6f, 0x1.52fd14p-8f,
                            -0x1.9d7588p-11f, 0x1.399f1ap-14f};
  static const float q[] = {0x1.febedcp-14f, 0x1.1f9f28p-1f, 0x1.508e6ap-6f, -0x1.80b032p-2f,
                            0x1.d58586p-3f, 0x1.ee7f4ap-3f, -0x1.156778p-1f, 0x1.c542fcp-2f,
                            -0x1.747b3cp-3f, 0x1.fe8b14p-6f};
  V a = abs_(x);
  V z = x * x;
  V small = fma_(x, splat<V>(p0_hi), x * fma_(z, poly(z, p), splat<V>(p0_lo)));
  small = with_sign_of(abs_(small), x);  // odd, and erf(-0) = -0
  V ac = a > 4.0f ? splat<V>(4.0f) : a;
  V ac1 = ac < 1.0f ? splat<V>(1.0f) : ac;  // keeps the unused lanes in Q's range
  V big = with_sign_of(1.0f - exp_(-(ac1 * ac1)) * poly(1.0f / ac1, q), x);
  return a < 1.0f ? small : big;
}

// sigmoid: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below.
template <class V> static inline V sigmoid_(V x) {
  V e = exp_(-abs_(x));
  return (x >= 0.0f ? splat<V>(1.0f) : e) / (1.0f + e);
}
}  // namespace lnv

#define LN_VECMATH_HIDDEN __attribute__((visibility("hidden")))
// The scalar symbol is an assembler alias of the scalar instantiation: a C definition of a
// simd-declared function would make g++ generate (auto-vectorized) clones of its own. `const`
// tells g++ the call reads and writes no memory: without it a loop calling one of these and also
// holding a ?: (bf16 rounding) was not if-converted, and stayed scalar.
#define LN_VECMATH_SCALAR(name, impl)                                                          \
  extern "C" LN_VECMATH_HIDDEN __attribute__((simd("notinbranch"), const, nothrow)) float name(float); \
  extern "C" LN_VECMATH_HIDDEN float name##_1(float x) { return lnv::impl(x); }               \
  asm(".globl " #name "\n.hidden " #name "\n.set " #name ", " #name "_1");
#define LN_VECMATH_VARIANT(name, impl, tag, V) \
  extern "C" LN_VECMATH_HIDDEN lnv::V _ZGV##tag##v_##name(lnv::V x) { return lnv::impl(x); }
#if defined(__AVX512F__)
#define LN_VECMATH_WIDE(name, impl) LN_VECMATH_VARIANT(name, impl, cN8, f8) \
  LN_VECMATH_VARIANT(name, impl, dN8, f8) LN_VECMATH_VARIANT(name, impl, eN16, f16)
#elif defined(__AVX__)
#define LN_VECMATH_WIDE(name, impl) LN_VECMATH_VARIANT(name, impl, cN8, f8) \
  LN_VECMATH_VARIANT(name, impl, dN8, f8)
#else
#define LN_VECMATH_WIDE(name, impl)
#endif
#define LN_VECMATH(name, impl) LN_VECMATH_SCALAR(name, impl) \
  LN_VECMATH_VARIANT(name, impl, bN4, f4) LN_VECMATH_WIDE(name, impl)
// The code generator instantiates the functions a module calls: LN_VECMATH(ln_expf, exp_) ...
