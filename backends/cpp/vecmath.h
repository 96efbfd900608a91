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
//   ln_expf      <= 1 ulp (0.86 seen), x in [-103.97, 88.72]; overflow to inf above 88.7228,
//                0 below -103.973, denormal results rounded once (two-step scaling).
//   ln_expf_ftz  <= 1 ulp, as ln_expf where x >= -87; 0 below (never a subnormal result).
//   ln_logf      <= 1 ulp (0.80 seen), all positive floats, denormals included; log(0) = -inf,
//                log(x < 0) = NaN, log(inf) = inf.
//   ln_tanhf     <= 1.5 ulp (1.35 seen, just above |x| = 0.625); +-1 beyond |x| = 9.1,
//                tanh(-0) = -0.
//   ln_erff      <= 2 ulp (1.48 seen at |x| = 1.80 with the AVX-512 table, 1.34 at 0.507 with
//                the other); +-1 from |x| = 4, erf(-0) = -0.
//   ln_sigmoidf  <= 2.5 ulp (2.33 seen); 1 / (1 + exp(-x)), written as e / (1 + e) with
//                e = exp(-|x|) for x < 0, so results down to denormals stay accurate.
// NaN in, NaN out for every function; +-inf give the limits.
#include <cstdint>
#if defined(__AVX512F__) || defined(__F16C__)
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

// x clamped to at least (at most) c, NaN passed through: one vmaxps (vminps) with the constant as
// the first operand, whose NaN rule returns the second; a compare and a blend where g++ would not.
template <class V> static inline V at_least(V x, float c) { return splat<V>(c) > x ? splat<V>(c) : x; }
template <class V> static inline V at_most(V x, float c) { return splat<V>(c) < x ? splat<V>(c) : x; }
#ifdef __AVX512F__
static inline f16 at_least(f16 x, float c) { return (f16)_mm512_max_ps(_mm512_set1_ps(c), (__m512)x); }
static inline f16 at_most(f16 x, float c) { return (f16)_mm512_min_ps(_mm512_set1_ps(c), (__m512)x); }
#endif
// x where x < c, else c (NaN included): one vminps, whose second operand wins on NaN.
template <class V> static inline V below(V x, float c) { return x < splat<V>(c) ? x : splat<V>(c); }
#ifdef __AVX512F__
static inline f16 below(f16 x, float c) { return (f16)_mm512_min_ps((__m512)x, _mm512_set1_ps(c)); }
#endif
#ifdef __AVX__
static inline f8 below(f8 x, float c) { return (f8)_mm256_min_ps((__m256)x, _mm256_set1_ps(c)); }
#endif
template <class V> static inline V with_sign_of(V mag, V x) {
  return from_bits<V>(bits(mag) | (bits(x) & (int32_t)0x80000000));
}

// exp: x = n*ln2 + r, |r| <= ln2/2 (Cody-Waite), e^r = 1 + r + r^2 Q(r) with Q of degree 4 fitted
// for relative error (3.6e-9 in float64; vecmath_fit.py); Cephes's degree 7 took one fma more for
// the same 0.87 ulp. 2^n applied as two normal factors so denormal results round once. ``xc``:
// x clamped to the range the caller wants (NaN passes through every clamp). ``keep``: the lanes of
// a 16-lane result that are not zeroed (a mask vscalefps applies for free).
template <class V> static inline V exp_clamped_(V xc, uint32_t keep = 0xffff) {
  static const float p[] = {1.0f, 1.0f, 0x1.fffff8p-2f, 0x1.55548ep-3f, 0x1.555b58p-5f, 0x1.123b8ep-7f,
                            0x1.687c22p-10f};
  const float shifter = 0x1.8p23f;
  xc = at_most(xc, 88.8f);
  V t = fma_(xc, splat<V>(0x1.715476p+0f), splat<V>(shifter));
  V n = t - shifter;
  V r = fma_(n, splat<V>(-0x1.62e400p-1f), xc);
  r = fma_(n, splat<V>(-0x1.7f7d1cp-20f), r);
#ifdef __AVX512F__
  if constexpr (sizeof(V) == 64) {  // vscalefps: e^r * 2^n in one instruction, rounded once
    return (V)_mm512_maskz_scalef_ps((__mmask16)keep, (__m512)poly(r, p), (__m512)n);
  }
#endif
  I<V> ni = bits(t) - bits(splat<V>(shifter));
  I<V> n1 = ni >> 1, n2 = ni - n1;
  V s1 = from_bits<V>((n1 + 127) << 23), s2 = from_bits<V>((n2 + 127) << 23);
  return poly(r, p) * s1 * s2;
}

// e^x rounds to 0 below -104 (less than half the least subnormal). Those lanes are zeroed, not
// computed from a clamp: 2^n below the subnormals takes the same microcode assist as a subnormal
// result, and a masked softmax's -inf lanes took one per vector (rows of 100 with a third of them
// masked: 104 against 18.5 us unmasked, eager 42).
template <class V> static inline V exp_(V x) {
  auto under = x < -104.0f;
#ifdef __AVX512F__
  if constexpr (sizeof(V) == 64) {
    __mmask16 keep = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-104.0f), _CMP_NLT_UQ);  // NaN kept
    return exp_clamped_(under ? splat<V>(-87.0f) : x, keep);
  }
#endif
  V y = exp_clamped_(under ? splat<V>(-87.0f) : x);
  return under ? splat<V>(0.0f) : y;
}

// exp for the terms of a softmax sum, exp(x - max(x)): e^x where x >= -87, else 0. It never makes
// a subnormal result: an Intel core takes a microcode assist for each one (vscalefps or the two
// multiplies alike: 4.8 and 3.4 against 0.18 ns per element on a Xeon with AVX-512 where a quarter
// of the inputs were below -87), and terms below 2^-125 cannot change a sum of at least 1. One
// select more than exp_: its clamp at -87 replaces exp_'s at -104.
template <class V> static inline V exp_ftz_(V x) {
  auto under = x < -87.0f;
#ifdef __AVX512F__
  if constexpr (sizeof(V) == 64) {  // the zeros come from vscalefps's zero-masking: no select
    __mmask16 keep = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);  // NaN kept
    return exp_clamped_(under ? splat<V>(-87.0f) : x, keep);
  }
#endif
  V y = exp_clamped_(under ? splat<V>(-87.0f) : x);
  return under ? splat<V>(0.0f) : y;
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

// Table lookups: lane k of the result is t[i[k]], for i in [0, N). With AVX-512 a table of 16
// floats is one register and a lookup one vpermps at every width; elsewhere a table of 8 floats
// is one AVX2 register (one permute; two on SSE).
static inline int32_t to_int(float x) { return (int32_t)x; }
static inline i4 to_int(f4 x) { return __builtin_convertvector(x, i4); }
static inline i8 to_int(f8 x) { return __builtin_convertvector(x, i8); }
#ifdef __AVX512F__
static inline i16 to_int(f16 x) { return __builtin_convertvector(x, i16); }
#endif
template <int N> static inline float lookup(const float (&t)[N], int32_t i) { return t[i]; }
static inline f4 lookup(const float (&t)[8], i4 i) {
  f4 lo, hi;
  __builtin_memcpy(&lo, t, 16);
  __builtin_memcpy(&hi, t + 4, 16);
  return __builtin_shuffle(lo, hi, i);
}
static inline f8 lookup(const float (&t)[8], i8 i) {
  f8 v;
  __builtin_memcpy(&v, t, 32);
  return __builtin_shuffle(v, i);
}
#ifdef __AVX512F__
static inline f16 lookup(const float (&t)[8], i16 i) {  // the 8 entries twice: i & 15 stays below 8
  f16 v = (f16)_mm512_broadcast_f64x4(_mm256_loadu_pd((const double*)t));
  return __builtin_shuffle(v, i);
}
static inline __m512 table16(const float (&t)[16]) { return _mm512_loadu_ps(t); }
static inline f4 lookup(const float (&t)[16], i4 i) {
  return (f4)_mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_castsi128_si512((__m128i)i), table16(t)));
}
static inline f8 lookup(const float (&t)[16], i8 i) {
  return (f8)_mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_castsi256_si512((__m256i)i), table16(t)));
}
static inline f16 lookup(const float (&t)[16], i16 i) { return (f16)_mm512_permutexvar_ps((__m512i)i, table16(t)); }
#endif

// erf: [0, 4) in equal intervals; on interval i, erf(a) = P_i(a - c_i), with its linear
// coefficient as a float32 pair (hi + lo), c_0 = 0 (relative accuracy down to denormals) and c_i
// the midpoint above (tables from vecmath_fit.py). Beyond 4 erf rounds to +-1. No exp and no
// division. With AVX-512: 16 intervals of 0.25 and degree 5, one vpermps per coefficient, 34
// instructions per 16 lanes (8 intervals of degree 7 took 48; an erf GELU loop in L2 ran 0.428
// against 0.550 ns per element). The index clamp is one vminps and a NaN rides through the
// polynomial, so only |x| >= 4 needs a select: an erf GELU's loop is 27 vector instructions,
// not 33. Elsewhere: 8 intervals of 0.5 and degree 7, tables of 8 that fit an AVX2 register.
// LN_ERF_TABLE8 picks the second on AVX-512 too (its test).
#if defined(__AVX512F__) && !defined(LN_ERF_TABLE8)
static const float ERF_TABLE[8][16] = {
    {0x0p+0f, 0x1.8p-2f, 0x1.4p-1f, 0x1.cp-1f, 0x1.2p+0f, 0x1.6p+0f, 0x1.ap+0f, 0x1.ep+0f, 0x1.1p+1f, 0x1.3p+1f, 0x1.5p+1f, 0x1.7p+1f, 0x1.9p+1f, 0x1.bp+1f, 0x1.dp+1f, 0x1.fp+1f},
    {0x0p+0f, 0x1.9dd0d2p-2f, 0x1.3f196ep-1f, 0x1.91724ap-1f, 0x1.c6dad2p-1f, 0x1.e5768cp-1f, 0x1.f4f694p-1f, 0x1.fbe61ep-1f, 0x1.fea422p-1f, 0x1.ff996p-1f, 0x1.ffe514p-1f, 0x1.fff9bap-1f, 0x1.fffeb4p-1f, 0x1.ffffc4p-1f, 0x1.fffff6p-1f, 0x1.fffffep-1f},
    {0x1.20dd74p+0f, 0x1.f5f0cep-1f, 0x1.86e96ap-1f, 0x1.0cab62p-1f, 0x1.45e99cp-2f, 0x1.5ce596p-3f, 0x1.499d46p-4f, 0x1.12ceb2p-5f, 0x1.94624cp-7f, 0x1.06918cp-8f, 0x1.2ce89ep-10f, 0x1.30539ep-12f, 0x1.0f9e3ap-14f, 0x1.abe0fcp-17f, 0x1.296ae6p-19f, 0x1.6ce29ap-22f},
    {0x1.c104fep-26f, -0x1.91df78p-27f, -0x1.1aa9acp-26f, 0x1.968484p-28f, 0x1.0802d2p-30f, -0x1.3d5254p-29f, 0x1.b76268p-29f, 0x1.97f65ap-31f, 0x1.94417p-32f, -0x1.a316ap-34f, -0x1.4cf334p-35f, 0x1.bf241p-37f, -0x1.79c50cp-43f, 0x1.d4395p-42f, -0x1.10587cp-45f, -0x1.73c4dcp-47f},
    {0x1.bb7822p-18f, -0x1.7872cep-2f, -0x1.e8a248p-2f, -0x1.d62b8cp-2f, -0x1.6ea75ep-2f, -0x1.dfbd44p-3f, -0x1.0bd0d4p-3f, -0x1.01a26p-4f, -0x1.ada76cp-6f, -0x1.37c944p-7f, -0x1.8ae6eep-9f, -0x1.b5630cp-11f, -0x1.a8457ep-13f, -0x1.68d9f4p-15f, -0x1.0d5942p-17f, -0x1.612422p-20f},
    {-0x1.815b4p-2f, -0x1.e10628p-3f, -0x1.c8168p-5f, 0x1.7c995p-4f, 0x1.4cb2bcp-3f, 0x1.4375p-3f, 0x1.d6647ep-4f, 0x1.143e36p-4f, 0x1.0ea54ep-5f, 0x1.c1ebdcp-7f, 0x1.407d5p-8f, 0x1.89d9eap-10f, 0x1.a3642cp-12f, 0x1.843a9ep-14f, 0x1.392df6p-16f, 0x1.b923fap-19f},
    {0x1.030c7ep-9f, 0x1.52c47ap-3f, 0x1.67693cp-3f, 0x1.cb60b8p-4f, 0x1.d03d12p-6f, -0x1.eb3decp-6f, -0x1.948806p-5f, -0x1.596658p-5f, -0x1.b095e8p-6f, -0x1.b0bb8p-7f, -0x1.664802p-8f, -0x1.f44fd6p-10f, -0x1.29e98cp-11f, -0x1.30ce66p-13f, -0x1.0d4e18p-15f, -0x1.9c7b3ep-18f},
    {0x1.b258dep-4f, 0x1.734fd4p-5f, -0x1.baf136p-6f, -0x1.113da6p-4f, -0x1.f4369cp-5f, -0x1.f611e6p-6f, -0x1.2de45p-9f, 0x1.733256p-7f, 0x1.97c59ep-7f, 0x1.11f59ep-7f, 0x1.15a33cp-8f, 0x1.c4e87ap-10f, 0x1.325252p-11f, 0x1.5d57dap-13f, 0x1.536656p-15f, 0x1.1ae0f6p-17f}};
#else
static const float ERF_TABLE[10][8] = {
    {0x0p+0f, 0x1.8p-1f, 0x1.4p+0f, 0x1.cp+0f, 0x1.2p+1f, 0x1.6p+1f, 0x1.ap+1f, 0x1.ep+1f},
    {0x0p+0f, 0x1.6c1c98p-1f, 0x1.d8865ep-1f, 0x1.f92d08p-1f, 0x1.ff4048p-1f, 0x1.fff2dp-1f, 0x1.ffff7p-1f, 0x1.fffffcp-1f},
    {0x1.20dd76p+0f, 0x1.492e42p-1f, 0x1.e4653p-3f, 0x1.b0553p-5f, 0x1.d4143cp-8f, 0x1.3360cep-11f, 0x1.e9b5dap-16f, 0x1.d936a8p-21f},
    {-0x1.b17c1p-25f, 0x1.d2ce7cp-26f, -0x1.85f136p-29f, -0x1.f6eac8p-34f, -0x1.1bfcc4p-33f, 0x1.6c38b2p-38f, -0x1.ada552p-43f, 0x1.53f6b4p-46f},
    {-0x1.a4b1eep-20f, -0x1.edc55ap-2f, -0x1.2ebf54p-2f, -0x1.7a4a8p-4f, -0x1.074b2p-6f, -0x1.a6a57p-10f, -0x1.8de92cp-14f, -0x1.bbbbbcp-19f},
    {-0x1.811a7ep-2f, 0x1.b6e67cp-6f, 0x1.571d0ep-3f, 0x1.7148ep-4f, 0x1.63ef36p-6f, 0x1.69cefep-9f, 0x1.9aa61ap-13f, 0x1.0b7098p-17f},
    {-0x1.276fdap-11f, 0x1.34956cp-3f, -0x1.91de7ap-8f, -0x1.8a1498p-5f, -0x1.38bdf4p-6f, -0x1.aafeap-9f, -0x1.2c1206p-12f, -0x1.ce8fc4p-17f},
    {0x1.da9f54p-4f, -0x1.b3f454p-5f, -0x1.828d6p-5f, 0x1.b1bf8ep-8f, 0x1.5d4f1p-7f, 0x1.6945c8p-9f, 0x1.48dd1ap-12f, 0x1.338702p-16f},
    {-0x1.063274p-7f, -0x1.b38878p-6f, 0x1.51792cp-6f, 0x1.2888aap-7f, -0x1.6c52bap-9f, -0x1.b5378ep-10f, -0x1.1f0e78p-12f, -0x1.5b2946p-16f},
    {-0x1.268ffcp-6f, 0x1.250934p-6f, 0x1.eae11p-9f, -0x1.84d4e4p-8f, -0x1.7a49b4p-11f, 0x1.4d59b6p-11f, 0x1.6c0efp-13f, 0x1.1fa40ap-16f}};;
#endif
template <class V> static inline V erf_(V x) {
  const auto& T = ERF_TABLE;
  constexpr int rows = sizeof(T) / sizeof(T[0]), intervals = sizeof(T[0]) / sizeof(float);
  V a = abs_(x);
  I<V> i = to_int(below(a, 3.875f) * (intervals / 4.0f));  // NaN -> 3.875: every index in range
  V t = a - lookup(T[0], i);  // NaN stays NaN through the polynomial; lanes from 4 are replaced
  V q = lookup(T[rows - 1], i);
  for (int k = rows - 2; k >= 4; --k) q = fma_(q, t, lookup(T[k], i));
  q = fma_(q, t, lookup(T[3], i));
  V r = fma_(t, lookup(T[2], i), fma_(q, t, lookup(T[1], i)));  // hi part last: rounded once
  return with_sign_of(a >= 4.0f ? splat<V>(1.0f) : r, x);
}

// sigmoid: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below.
template <class V> static inline V sigmoid_(V x) {
  V e = exp_(-abs_(x));
  return (x >= 0.0f ? splat<V>(1.0f) : e) / (1.0f + e);
}

// A float rounded to the nearest float16 (ties to even) and read back, a vector at a time: a cast
// to half between two ops of a float16 graph (vector_blocks.block_impl). The conversion
// instructions where the target has them (AVX-512F, F16C), else the prelude's integer spelling
// per lane; a NaN stays a NaN.
template <class V> static inline V round_half_lanes(V v) {
  for (unsigned k = 0; k < sizeof(V) / sizeof(float); ++k) v[k] = ln_f16_to_f(ln_f_to_f16(v[k]));
  return v;
}
#if defined(__AVX512F__)
static inline f16 round_half_(f16 v) {
  return (f16)_mm512_cvtph_ps(_mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
static inline f16 round_half_(f16 v) { return round_half_lanes(v); }
#endif
#if defined(__F16C__)
static inline f8 round_half_(f8 v) {
  return (f8)_mm256_cvtph_ps(_mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline f4 round_half_(f4 v) {
  return (f4)_mm_cvtph_ps(_mm_cvtps_ph((__m128)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
static inline f8 round_half_(f8 v) { return round_half_lanes(v); }
static inline f4 round_half_(f4 v) { return round_half_lanes(v); }
#endif

// f applied in place to N floats in vectors of W lanes (16, 8 or 4; the widest the target has
// up to W that divides N), inline: generated kernels call it on blocks of their elements
// (vector_blocks.py), where an omp simd loop would call the out-of-line vector variant. Every
// width computes the same bits.
template <class V, int N, class F> static inline __attribute__((always_inline)) void apply(float* a, F f) {
  for (unsigned k = 0; k < N; k += sizeof(V) / sizeof(float)) {
    V v;
    __builtin_memcpy(&v, a + k, sizeof v);
    v = f(v);
    __builtin_memcpy(a + k, &v, sizeof v);
  }
}
template <int W, int N, class F> static inline __attribute__((always_inline)) void blocks(float* a, F f) {
  static_assert(N % 4 == 0, "a block holds whole vectors of 4 floats");
#if defined(__AVX512F__)
  if constexpr (W == 16 && N % 16 == 0) return apply<f16, N>(a, f);
#endif
#if defined(__AVX__)
  if constexpr (W >= 8 && N % 8 == 0) return apply<f8, N>(a, f);
#endif
  apply<f4, N>(a, f);
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
