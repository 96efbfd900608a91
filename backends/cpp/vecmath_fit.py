"""Fit the polynomials of vecmath.h: erf's piecewise tables and exp's reduced-range polynomial.

Run: ``python -m loopnest.backends.cpp.vecmath_fit``. [0, 4) is cut into equal intervals: 16 of
0.25 with polynomials of degree 5 (the AVX-512 table: 16 entries are one register, one vpermps
per coefficient) and 8 of 0.5 with degree 7 (the table of other targets, whose registers hold 8).
On interval i, erf(a) = P_i(a - c_i) with c_0 = 0 and c_i its midpoint above, fitted by least
squares in float64 on 400 Chebyshev nodes (on interval 0 with relative weights and no constant
term, so that erf keeps its relative accuracy down to denormal inputs). The linear coefficient is
stored as a float32 pair (hi + lo): on interval 0 it is 2/sqrt(pi), and a single float32 would
cost up to 1 ulp near 0.

exp: e^r = 1 + r + r^2 Q(r) on [-ln2/2, ln2/2], Q of degree 4, fitted for relative error.
"""
from __future__ import annotations

import math

import numpy as np

TABLES = {"AVX-512": (16, 5), "other targets": (8, 7)}  # (intervals over [0, 4), degree)
NODES = 400


def fit_interval(i: int, intervals: int, degree: int) -> list[float]:
    """[c_i, p0, p1_hi, p1_lo, p2, ..., p_degree] of interval ``i`` of ``intervals`` as float32 values."""
    width = 4.0 / intervals
    lo, hi = i * width, (i + 1) * width
    center = 0.0 if i == 0 else (lo + hi) / 2
    k = np.arange(NODES)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / NODES)
    t, y = x - center, np.array([math.erf(v) for v in x])
    if i == 0:
        basis = np.vstack([t ** (j + 1) for j in range(degree)]).T / y[:, None]
        coef = np.concatenate([[0.0], np.linalg.lstsq(basis, np.ones_like(y), rcond=None)[0]])
    else:
        coef = np.linalg.lstsq(np.vstack([t ** j for j in range(degree + 1)]).T, y, rcond=None)[0]
    p1_hi = np.float32(coef[1])
    p1_lo = np.float32(coef[1] - np.float64(p1_hi))
    return [float(v) for v in (np.float32(center), np.float32(coef[0]), p1_hi, p1_lo, *coef[2:].astype(np.float32))]


def exp_coefficients() -> list[float]:
    """Q's coefficients (constant term first) as float32 values."""
    half = math.log(2) / 2
    r = half * np.cos(np.pi * (np.arange(2000) + 0.5) / 2000)
    weight = r * r / np.exp(r)  # the error of e^r relative to e^r
    basis = np.vstack([r ** j for j in range(5)]).T
    q = np.linalg.lstsq(basis * weight[:, None], (np.exp(r) - 1 - r) / (r * r) * weight, rcond=None)[0]
    return [float(v) for v in q.astype(np.float32)]


def hex_float(v: float) -> str:
    """``v`` as a C float literal in hex, exact and short: 0x1.20dd76p+0f."""
    mantissa, exponent = float.hex(v).split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"


def c_table(intervals: int, degree: int) -> str:
    """A table as vecmath.h spells it: one row per coefficient, one column per interval."""
    rows = list(zip(*(fit_interval(i, intervals, degree) for i in range(intervals))))
    lines = [", ".join(hex_float(v) for v in row) for row in rows]
    return "{\n" + ",\n".join("    {" + line + "}" for line in lines) + "}"


if __name__ == "__main__":
    for target, (intervals, degree) in TABLES.items():
        print(f"// erf, {target}: {intervals} intervals, degree {degree}\n{c_table(intervals, degree)}")
    print("// exp: 1.0f, 1.0f, " + ", ".join(hex_float(v) for v in exp_coefficients()))
