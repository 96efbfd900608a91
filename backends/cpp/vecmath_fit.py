"""Fit the piecewise polynomials of vecmath.h's erf and print them as its C table.

Run: ``python -m loopnest.backends.cpp.vecmath_fit``. [0, 4) is cut into 8 intervals of 0.5.
On interval i, erf(a) = P_i(a - c_i) with c_0 = 0 and c_i its midpoint above, P of degree 7,
fitted by least squares in float64 on 400 Chebyshev nodes (on interval 0 with relative weights
and no constant term, so that erf keeps its relative accuracy down to denormal inputs). The
linear coefficient is stored as a float32 pair (hi + lo): on interval 0 it is 2/sqrt(pi), and a
single float32 would cost up to 1 ulp near 0.
"""
from __future__ import annotations

import math

import numpy as np

INTERVALS, WIDTH, DEGREE, NODES = 8, 0.5, 7, 400


def fit_interval(i: int) -> list[float]:
    """[c_i, p0, p1_hi, p1_lo, p2, ..., p7] of interval ``i`` as float32 values."""
    lo, hi = i * WIDTH, (i + 1) * WIDTH
    center = 0.0 if i == 0 else (lo + hi) / 2
    k = np.arange(NODES)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / NODES)
    t, y = x - center, np.array([math.erf(v) for v in x])
    if i == 0:
        basis = np.vstack([t ** (j + 1) for j in range(DEGREE)]).T / y[:, None]
        coef = np.concatenate([[0.0], np.linalg.lstsq(basis, np.ones_like(y), rcond=None)[0]])
    else:
        coef = np.linalg.lstsq(np.vstack([t ** j for j in range(DEGREE + 1)]).T, y, rcond=None)[0]
    p1_hi = np.float32(coef[1])
    p1_lo = np.float32(coef[1] - np.float64(p1_hi))
    return [float(v) for v in (np.float32(center), np.float32(coef[0]), p1_hi, p1_lo, *coef[2:].astype(np.float32))]


def hex_float(v: float) -> str:
    """``v`` as a C float literal in hex, exact and short: 0x1.20dd76p+0f."""
    mantissa, exponent = float.hex(v).split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"


def c_table() -> str:
    """The table as vecmath.h spells it: one row per coefficient, one column per interval."""
    rows = list(zip(*(fit_interval(i) for i in range(INTERVALS))))
    lines = [", ".join(hex_float(v) for v in row) for row in rows]
    return "{\n" + ",\n".join("    {" + line + "}" for line in lines) + "}"


if __name__ == "__main__":
    print(c_table())
