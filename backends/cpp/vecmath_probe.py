"""Run vecmath.h's functions on arrays, through each vector ABI variant the machine has, and
measure their error in float32 ulp against float64 references.

Used by the accuracy tests and the accuracy table of the bench: the functions are built by the
same compiler, flags and prelude as generated kernels.
"""
from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from . import compile as cc
from .ops import PRELUDE, VECMATH, vecmath_source

# (variant tag, lanes, preprocessor condition): the x86 vector ABI variants vecmath.h defines
VARIANTS = (("bN4", 4, "1"), ("dN8", 8, "defined(__AVX2__)"), ("eN16", 16, "defined(__AVX512F__)"))

# Error bounds in float32 ulp, as vecmath.h documents them (the tests assert both agree)
BOUNDS = {"ln_expf": 1.0, "ln_expf_ftz": 1.0, "ln_logf": 1.0, "ln_tanhf": 1.5, "ln_erff": 2.0,
          "ln_sigmoidf": 2.5}

# float64 references, by function name
REFERENCES = {
    "ln_expf": torch.exp, "ln_expf_ftz": lambda x: torch.where(x < -87, 0.0, torch.exp(x)),
    "ln_logf": torch.log, "ln_tanhf": torch.tanh, "ln_erff": torch.erf, "ln_sigmoidf": torch.sigmoid,
}


def _entry_points(name: str) -> str:
    """C entry points applying ``name`` to an array: the scalar instantiation, an ``omp simd``
    loop (what generated kernels do) and each vector variant called directly, a chunk at a time."""
    lines = [
        f'extern "C" __attribute__((optimize("no-tree-vectorize"))) void probe_scalar_{name}('
        f"const float* x, float* y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = {name}_1(x[i]); }}",
        f'extern "C" void probe_simd_{name}(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{',
        "  #pragma omp simd", f"  for (int64_t i = 0; i < n; ++i) y[i] = {name}(x[i]);", "}",
    ]
    for tag, lanes, cond in VARIANTS:
        vec = {4: "lnv::f4", 8: "lnv::f8", 16: "lnv::f16"}[lanes]
        lines += [f"#if {cond}",
                  f'extern "C" void probe_{tag}_{name}(const float* x, float* y, int64_t n) {{',
                  f"  for (int64_t i = 0; i < n; i += {lanes}) {{ {vec} v; __builtin_memcpy(&v, x + i, sizeof v);",
                  f"    v = _ZGV{tag}v_{name}(v); __builtin_memcpy(y + i, &v, sizeof v); }}", "}",
                  "#endif"]
    return "\n".join(lines)


@functools.cache
def library(defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The probe library: every vecmath function with its entry points (built once, cached).
    ``defines``: macros defined before vecmath.h (``LN_ERF_TABLE8`` builds its other erf table)."""
    calls = " ".join(f"{name}(" for name, _ in VECMATH.values())
    macros = "".join(f"#define {d}\n" for d in defines)
    source = (PRELUDE + macros + vecmath_source(calls)
              + "\n".join(_entry_points(n) for n, _ in VECMATH.values()) + "\n")
    return cc.load(cc.build(source))


def paths(name: str) -> list[str]:
    """The ways ``name`` can be called on this machine: scalar, simd loop, and each variant."""
    lib = library()
    found = ["scalar", "simd"]
    found += [tag for tag, _, _ in VARIANTS if hasattr(lib, f"probe_{tag}_{name}")]
    return found


def run(name: str, x: np.ndarray, path: str = "simd", defines: tuple[str, ...] = ()) -> np.ndarray:
    """``name`` applied to the float32 array ``x`` through ``path`` (see ``paths``), in the
    library built with ``defines``."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    pad = (-len(x)) % 16  # whole vectors for the direct variant calls
    xp = np.concatenate([x, np.ones(pad, np.float32)])
    y = np.empty_like(xp)
    fn = getattr(library(defines), f"probe_{path}_{name}")
    fn.restype = None
    fn(xp.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(len(xp)))
    return y[: len(x)]


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """The float64 value of ``name`` at the float32 inputs ``x``."""
    return REFERENCES[name](torch.from_numpy(x.astype(np.float64))).numpy()


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ``ref`` (denormal spacing below 2^-126,
    infinity counted as 2^128, as IEEE overflow does); 0 where both are NaN, inf where only one is."""
    big = np.float64(2.0**128)
    got64 = np.where(np.isinf(got), np.copysign(big, got), got.astype(np.float64))
    ref64 = np.clip(np.nan_to_num(ref, nan=0.0, posinf=big, neginf=-big), -big, big)
    exponent = np.frexp(ref64)[1]  # |ref| in [2^(e-1), 2^e): float32 spacing 2^(e-24)
    spacing = np.where(ref64 == 0, 2.0**-149, np.ldexp(1.0, np.maximum(exponent - 24, -149)))
    err = np.abs(got64 - ref64) / spacing
    both_nan = np.isnan(got) & np.isnan(ref)
    return np.where(both_nan, 0.0, np.where(np.isnan(got) | np.isnan(ref), math.inf, err))


# Inputs over each function's useful range (uniform, and log-uniform for small magnitudes).
def random_inputs(name: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` random float32 inputs covering ``name``'s useful range."""
    rng = np.random.default_rng(seed)
    half = n // 2
    if name in ("ln_expf", "ln_expf_ftz"):
        x = np.concatenate([rng.uniform(-103.97, 88.72, half), rng.uniform(-10, 10, n - half)])
    elif name == "ln_logf":
        every = rng.integers(1, 0x7F800000, half, dtype=np.int64).astype(np.uint32).view(np.float32)
        x = np.concatenate([every, rng.uniform(0.5, 2.0, n - half)])
    elif name == "ln_sigmoidf":
        x = np.concatenate([rng.uniform(-110, 30, half), rng.uniform(-10, 10, n - half)])
    else:  # tanh, erf: the range where the result is not yet +-1, and small magnitudes
        top = 9.5 if name == "ln_tanhf" else 4.5
        small = np.exp(rng.uniform(math.log(1e-30), 0, n - half)) * rng.choice([-1, 1], n - half)
        x = np.concatenate([rng.uniform(-top, top, half), small])
    return x.astype(np.float32)


# Special inputs whose results must be exact, and boundary inputs held to the ulp bound.
SPECIALS = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38], np.float32)
EDGES = np.array([1e-45, -1e-45, 1e-40, -1e-40, 1.1754944e-38, 88.72283, 88.722839, 88.72284,
                  -87.33654, -103.97207, -103.97208, -103.9721, 1.0, -1.0, 0.625, -0.625, 3.92, 9.1,
                  1.0000001, 0.99999994], np.float32)


@dataclass(frozen=True)
class Accuracy:
    """Measured error of one function: max and mean ulp, and where the max was."""

    name: str
    max_ulp: float
    mean_ulp: float
    worst_input: float
    inputs: int


def measure(name: str, n: int = 1_000_000, path: str = "simd", defines: tuple[str, ...] = ()) -> Accuracy:
    """Error of ``name`` on ``n`` random inputs plus the boundary inputs, through ``path``."""
    x = np.concatenate([random_inputs(name, n), EDGES])
    err = ulp_error(run(name, x, path, defines), reference(name, x))
    worst = int(np.argmax(err))
    return Accuracy(name, float(err[worst]), float(err.mean()), float(x[worst]), len(x))
