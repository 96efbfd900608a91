"""Triton helper functions that generated kernels call, as source text.

A generated module includes exactly the helpers its kernels name (and the helpers those call).
The math here uses plain ``tl`` operations only, so it runs in Triton's CPU interpreter; on the
GPU the op table prefers libdevice where that is more accurate or faster. float32 accuracy is
the target (float16/bfloat16 are computed in float32); the float64 versions of the polynomial
approximations (atan, erfc) are only float32-accurate.
"""
from __future__ import annotations

import re

_SOURCES: dict[str, str] = {}


def _helper(source: str) -> None:
    name = re.search(r"def (\w+)\(", source).group(1)
    _SOURCES[name] = "@triton.jit\n" + source.strip() + "\n"


# -- selection, division, remainders ----------------------------------------------------------
_helper("""
def ln_maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)
""")
_helper("""
def ln_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)
""")
_helper("""
def ln_floordiv_int(a, b):
    q = a // b
    return tl.where(((a % b) != 0) & ((a < 0) != (b < 0)), q - 1, q)
""")
_helper("""
def ln_mod(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""")
_helper("""
def ln_floordiv_float(a, b):
    m = a % b
    d = (a - m) / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    f = tl.where(d == 0, 0.0 * (a / b), f)
    return tl.where(b == 0, a / b, f)
""")
_helper("""
def ln_copysign_f32(a, b):
    return tl.where(b.to(tl.int32, bitcast=True) < 0, -tl.abs(a), tl.abs(a))
""")
_helper("""
def ln_copysign_f64(a, b):
    return tl.where(b.to(tl.int64, bitcast=True) < 0, -tl.abs(a), tl.abs(a))
""")
_helper("""
def ln_sign_float(a):
    return tl.where(a > 0, 1.0, tl.where(a < 0, -1.0, 0.0))
""")

# -- powers -----------------------------------------------------------------------------------
_helper("""
def ln_pow_int(a, b):
    one = a * 0 + 1
    r = one
    base = a
    e = b
    for _ in range(64):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    odd = (b & 1) != 0
    r_neg = tl.where(a == one, one, tl.where(a == -one, tl.where(odd, -one, one), one * 0))
    return tl.where(b < 0, r_neg, r)
""")
_helper("""
def ln_pow_float(a, b):
    mag = tl.exp2(b * tl.log2(tl.abs(a)))
    b_int = tl.floor(b) == b
    b_odd = b_int & (tl.abs(b % 2.0) == 1.0)
    r = tl.where(a < 0, tl.where(b_int, tl.where(b_odd, -mag, mag), float("nan")), mag)
    r = tl.where((a == -1.0) & (tl.abs(b) == float("inf")), 1.0, r)
    return tl.where((b == 0) | (a == 1.0), 1.0, r)
""")

# -- exponentials and logarithms (Kahan's tricks keep expm1/log1p accurate near 0) -------------
_helper("""
def ln_expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(um1 == 0.0, x, um1 * x / tl.log(u))
    r = tl.where(um1 == -1.0, -1.0, r)
    return tl.where(u == float("inf"), u, r)
""")
_helper("""
def ln_log1p(x):
    u = 1.0 + x
    r = tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
    return tl.where(u == float("inf"), u, r)
""")

# -- hyperbolic -------------------------------------------------------------------------------
_helper("""
def ln_sinh(x):
    return 0.5 * (ln_expm1(x) - ln_expm1(-x))
""")
_helper("""
def ln_cosh(x):
    return 0.5 * (tl.exp(x) + tl.exp(-x))
""")
_helper("""
def ln_tanh(x):
    e = ln_expm1(-2.0 * tl.abs(x))
    t = -e / (2.0 + e)
    return tl.where(x < 0, -t, t)
""")
_helper("""
def ln_asinh(x):
    ax = tl.abs(x)
    small = ln_log1p(ax + ax * ax / (1.0 + tl.sqrt(1.0 + ax * ax)))
    r = tl.where(ax > 268435456.0, tl.log(ax) + 0.6931471805599453, small)
    return tl.where(x < 0, -r, r)
""")
_helper("""
def ln_acosh(x):
    t = x - 1.0
    small = ln_log1p(t + tl.sqrt(2.0 * t + t * t))
    return tl.where(x > 268435456.0, tl.log(x) + 0.6931471805599453, small)
""")
_helper("""
def ln_atanh(x):
    return 0.5 * ln_log1p(2.0 * x / (1.0 - x))
""")

# -- trigonometric ----------------------------------------------------------------------------
_helper("""
def ln_atan(x):
    ax = tl.abs(x)
    big = ax > 2.414213562373095
    mid = ax > 0.41421356237309503
    y0 = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    t = tl.where(big, -1.0 / ax, tl.where(mid, (ax - 1.0) / (ax + 1.0), ax))
    z = t * t
    p = (((0.0805374449538 * z - 0.138776856032) * z + 0.199777106478) * z - 0.333329491539) * z * t + t
    r = y0 + p
    return tl.where(x < 0, -r, r)
""")
_helper("""
def ln_atan2(y, x):
    ax = tl.abs(x)
    ay = tl.abs(y)
    mx = tl.maximum(ax, ay)
    mn = tl.minimum(ax, ay)
    both_inf = (mx == float("inf")) & (mn == float("inf"))
    t = tl.where(mx == 0, 0.0 * mx, tl.where(both_inf, 1.0, mn / mx))
    r = ln_atan(t)
    r = tl.where(ay > ax, 1.5707963267948966 - r, r)
    r = tl.where(x < 0, 3.141592653589793 - r, r)
    r = tl.where(y < 0, -r, r)
    return tl.where((x != x) | (y != y), x + y, r)
""")
_helper("""
def ln_asin(x):
    return ln_atan2(x, tl.sqrt((1.0 - x) * (1.0 + x)))
""")
_helper("""
def ln_acos(x):
    return ln_atan2(tl.sqrt((1.0 - x) * (1.0 + x)), x)
""")

# -- error functions --------------------------------------------------------------------------
_helper("""
def ln_erfc(x):
    z = tl.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    p = -0.82215223 + t * 0.17087277
    p = 1.48851587 + t * p
    p = -1.13520398 + t * p
    p = 0.27886807 + t * p
    p = -0.18628806 + t * p
    p = 0.09678418 + t * p
    p = 0.37409196 + t * p
    p = 1.00002368 + t * p
    r = t * tl.exp(-z * z - 1.26551223 + t * p)
    return tl.where(x >= 0, r, 2.0 - r)
""")
_ERFINV_CENTRAL = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
    1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
    6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693, 1.6536545626831027356)
_ERFINV_TAIL = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
    1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
    2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
    6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
    -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
    3.0838856104922207635)
_ERFINV_FAR = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
    -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
    2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
    -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
    1.0103004648645343977, 4.8499064014085844221)


def _horner(var: str, coeffs: tuple[float, ...], out: str) -> str:
    lines = [f"    {out} = {coeffs[0]!r}"]
    lines += [f"    {out} = {c!r} + {out} * {var}" for c in coeffs[1:]]
    return "\n".join(lines)


_helper(f"""
def ln_erfinv(y):
    w = -tl.log((1.0 - y) * (1.0 + y))
    w1 = w - 3.125
{_horner("w1", _ERFINV_CENTRAL, "p1")}
    w2 = tl.sqrt(w) - 3.25
{_horner("w2", _ERFINV_TAIL, "p2")}
    w3 = tl.sqrt(w) - 5.0
{_horner("w3", _ERFINV_FAR, "p3")}
    p = tl.where(w < 6.25, p1, tl.where(w < 16.0, p2, p3))
    r = p * y
    r = tl.where(tl.abs(y) == 1.0, y * float("inf"), r)
    return tl.where(tl.abs(y) > 1.0, float("nan"), r)
""")

# -- rounding ---------------------------------------------------------------------------------
_helper("""
def ln_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))
""")
_helper("""
def ln_round_half_even(x):
    f = tl.floor(x)
    d = x - f
    even = (f - 2.0 * tl.floor(f * 0.5)) == 0.0
    return tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(even, f, f + 1.0)))
""")

# -- reduction combiners (for tl.reduce) --------------------------------------------------------
_helper("""
def ln_prod_combine(a, b):
    return a * b
""")

HELPER_NAMES = frozenset(_SOURCES)
_CALL = re.compile(r"\b(ln_[a-z0-9_]+)\b")


def helpers_for(source: str) -> str:
    """The helper definitions ``source`` calls, directly or through other helpers, in order."""
    needed: set[str] = set()
    todo = [m for m in _CALL.findall(source) if m in _SOURCES]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [m for m in _CALL.findall(_SOURCES[name]) if m in _SOURCES and m != name]
    return "\n\n".join(_SOURCES[n] for n in _SOURCES if n in needed)
