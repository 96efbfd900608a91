"""The same programs on every backend (C++, and Triton in its CPU interpreter without a GPU),
compared with eager PyTorch on random non-zero inputs; outputs are NaN-poisoned by conftest.

``CASES`` is also what tests/test_triton.py runs under each forced Triton strategy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln
from conftest import assert_close
from loopnest.core.hardware import HardwareInfo
from loopnest.dsl.build import GraphBuilder
from loopnest.ir.nodes import Layout
from loopnest.scheduler import schedule

pytestmark = [  # Triton's interpreter evaluates both sides of tl.where with numpy (warns on nan/inf) ...
    pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
    # ... and converts runtime loop bounds with int(), which numpy deprecates for 1-element arrays
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]


# -- inputs ---------------------------------------------------------------------------------------
def nonzero(*shape, dtype=torch.float32, lo=0.5, hi=3.0, seed=0):
    """Random values with magnitudes in [lo, hi) and random signs: never zero."""
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    magnitude = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return (sign * magnitude).to(dtype)


def ties(*shape, seed=0):
    """Small integers as floats (many ties), NaNs in row 1, an all-equal row 2."""
    a = nonzero(*shape, dtype=torch.float64, lo=1, hi=4, seed=seed).floor().float()
    a[1, shape[1] // 4] = a[1, shape[1] // 2] = float("nan")
    a[2] = 1.0
    return a


def integers(*shape, lo=-20, hi=20, seed=0, dtype=torch.int32):
    """Random non-zero integers in [lo, hi)."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(lo, hi - 1, shape, generator=g)
    return torch.where(values >= 0, values + 1, values).to(dtype)


def indices(*shape, size, seed=0):
    """Random int64 indices in [0, size) (gather raises for negative ones, as in eager)."""
    return torch.randint(0, size, shape, generator=torch.Generator().manual_seed(seed))


# -- DSL programs and their eager twins ----------------------------------------------------------
def softmax(x, axis=-1):
    e = ln.exp(x - ln.max(x, axis, keepdim=True))
    return e / ln.sum(e, axis, keepdim=True)


def log_softmax(x, axis=-1):
    shifted = x - ln.max(x, axis, keepdim=True)
    return shifted - ln.log(ln.sum(ln.exp(shifted), axis, keepdim=True))


def layernorm(x, w, b, eps=1e-5):
    var, mean = ln.var_mean(x, -1, correction=0, keepdim=True)
    return (x - mean) * ln.rsqrt(var + eps) * w + b


def rmsnorm_bf16(x, w, eps=1e-6):
    xf = ln.cast(x, ln.float32)
    return ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, -1, keepdim=True) + eps) * ln.cast(w, ln.float32), ln.bfloat16)


def gelu(x):
    return 0.5 * x * (1 + ln.erf(x * 0.7071067811865476))


@dataclass(frozen=True)
class Program:
    """DSL ``outputs`` over placeholders ``inputs``; ``make(rows)`` builds input tensors (on the CPU)
    for ``rows`` rows; ``eager(*tensors)`` returns the expected outputs."""

    outputs: list
    inputs: list
    make: Callable[[int], list]
    eager: Callable[..., list]


@dataclass(frozen=True)
class Case:
    """``build(rows)`` -> Program, where ``rows`` is an int or the symbol "N". With more than one
    entry in ``rows`` the program is compiled once with a symbolic row count and run at each."""

    build: Callable[[int | str], Program]
    rows: tuple[int, ...]

    def program(self, symbolic: bool | None = None) -> Program:
        symbolic = len(self.rows) > 1 if symbolic is None else symbolic
        return self.build("N" if symbolic else self.rows[0])


def _softmax(n):
    x = ln.placeholder("x", (n, "C" if n == "N" else 37), ln.float32)  # symbolic: rows of unknown length too
    return Program([softmax(x), log_softmax(x), x * 2], [x],  # x * 2: a store before the reductions
                   lambda r: [nonzero(r, 37, lo=0.1, hi=6)],
                   lambda a: [torch.softmax(a, 1), torch.log_softmax(a, 1), a * 2])


def _layernorm(n):
    x = ln.placeholder("x", (n, 45), ln.float32)
    w, b = ln.placeholder("w", (45,), ln.float32), ln.placeholder("b", (45,), ln.float32)
    return Program([layernorm(x, w, b), ln.var_mean(x, 1)[0]], [x, w, b],
                   lambda r: [nonzero(r, 45) + 5, nonzero(45, seed=1), nonzero(45, seed=2)],  # mean far from 0
                   lambda a, w, b: [F.layer_norm(a, (45,), w, b, eps=1e-5), a.var(1)])


def _rmsnorm_bf16(n):
    x, w = ln.placeholder("x", (n, 96), ln.bfloat16), ln.placeholder("w", (96,), ln.bfloat16)

    def eager(a, w):
        af = a.float()
        return [(af * torch.rsqrt(af.pow(2).mean(1, keepdim=True) + 1e-6) * w.float()).bfloat16()]
    return Program([rmsnorm_bf16(x, w)], [x, w],
                   lambda r: [nonzero(r, 96, dtype=torch.bfloat16), nonzero(96, dtype=torch.bfloat16, seed=1)], eager)


def _argmax_ties_nan(n):
    x = ln.placeholder("x", (n, 23), ln.float32)
    outs = [ln.argmax(x, 1), ln.argmin(x, 1), ln.max(x, 1), ln.min(x, 1), ln.argmax(x), ln.argmin(x, 0), ln.min(x)]
    return Program(outs, [x], lambda r: [ties(r, 23)],
                   lambda a: [a.argmax(1), a.argmin(1), a.amax(1), a.amin(1), a.argmax(), a.argmin(0), a.amin()])


def _argmax_integers(n):
    i, k = ln.placeholder("i", (n, 11), ln.int32), ln.placeholder("k", (n, 11), ln.int8)
    return Program([ln.argmax(i, 1), ln.argmin(i, 0), ln.argmax(i), ln.argmin(k, 1), ln.max(k, 0)], [i, k],
                   lambda r: [integers(r, 11, lo=-3, hi=3), integers(r, 11, lo=-3, hi=3, seed=1, dtype=torch.int8)],
                   lambda i, k: [i.argmax(1), i.argmin(0), i.argmax(), k.argmin(1), k.amax(0)])


def _gather(n):
    x, idx = ln.placeholder("x", (n, 10), ln.float32), ln.placeholder("idx", (n, 4), ln.int64)
    table, ids = ln.placeholder("table", (11, 6), ln.float32), ln.placeholder("ids", (n, 1), ln.int64)
    outs = [ln.gather(x, 1, idx) * 2, ln.sum(ln.gather(ln.exp(x), 1, idx), 1),
            ln.gather(table, 0, ln.broadcast_to(ids, (n, 6))) * 3]  # an embedding lookup
    return Program(outs, [x, idx, table, ids],
                   lambda r: [nonzero(r, 10), indices(r, 4, size=10), nonzero(11, 6), indices(r, 1, size=11, seed=1)],
                   lambda a, ia, t, ii: [a.gather(1, ia % 10) * 2, a.exp().gather(1, ia % 10).sum(1),
                                         t[ii[:, 0] % 11] * 3])


def _broadcast_chain(n):
    x, w = ln.placeholder("x", (n, 16), ln.float32), ln.placeholder("w", (16,), ln.float32)
    b, s = ln.placeholder("b", (n, 1), ln.float32), ln.placeholder("s", (), ln.float32)
    y = gelu(x * w + b)
    outs = [ln.where(y > 0, y, y * 0.1) * s + ln.maximum(x, b), ln.sigmoid(x - w) / (ln.abs(b) + 1), s * 2 + 1]

    def eager(x, w, b, s):
        y = F.gelu(x * w + b)
        return [torch.where(y > 0, y, y * 0.1) * s + torch.maximum(x, b), torch.sigmoid(x - w) / (b.abs() + 1),
                s * 2 + 1]
    return Program(outs, [x, w, b, s],
                   lambda r: [nonzero(r, 16), nonzero(16, seed=1), nonzero(r, 1, seed=2), nonzero(seed=3)], eager)


def _ints_and_bools(n):
    x, y = ln.placeholder("x", (n, 9), ln.int32), ln.placeholder("y", (9,), ln.int8)
    c = ln.placeholder("c", (n, 9), ln.bool)
    outs = [x * y + 3, x // y, x % y, ln.where(c, x, -x), c & (x > 0), ~c | (y < 0), ln.sum(c, 1), ln.any(c, 0),
            ln.all(c, 1), ln.cast(c, ln.float32) * ln.cast(x, ln.float32), ln.sum(x, 1), ln.max(y), x ^ 5]
    return Program(outs, [x, y, c], lambda r: [integers(r, 9), integers(9, lo=-5, hi=5, seed=1, dtype=torch.int8),
                                                integers(r, 9, seed=2) > 0],
                   lambda x, y, c: [x * y + 3, x // y, x % y, torch.where(c, x, -x), c & (x > 0), ~c | (y < 0),
                                    c.sum(1), c.any(0), c.all(1), c.float() * x.float(), x.sum(1), y.amax(), x ^ 5])


def _columns(n):
    x = ln.placeholder("x", (n, 7), ln.float32)
    return Program([ln.sum(x, 0), ln.max(x, 0), ln.mean(x, 0, keepdim=True)], [x], lambda r: [nonzero(r, 7)],
                   lambda a: [a.sum(0), a.amax(0), a.mean(0, keepdim=True)])


def _multi_dim(n):
    y = ln.placeholder("y", (n, 4, 5), ln.float32)
    var, mean = ln.var_mean(y, (0, 2))
    return Program([ln.sum(y, (0, 2)), ln.mean(y, (1, 2)), var, mean, ln.argmax(y, 2), ln.sum(y) * ln.max(y)], [y],
                   lambda r: [nonzero(r, 4, 5)],
                   lambda a: [a.sum((0, 2)), a.mean((1, 2)), a.var((0, 2)), a.mean((0, 2)), a.argmax(2),
                              a.sum() * a.amax()])


CASES = {
    "softmax": Case(_softmax, (5, 1, 9)),
    "layernorm": Case(_layernorm, (6,)),
    "rmsnorm_bf16": Case(_rmsnorm_bf16, (4,)),
    "argmax_ties_nan": Case(_argmax_ties_nan, (6,)),
    "argmax_integers": Case(_argmax_integers, (7,)),
    "gather": Case(_gather, (6, 3)),
    "broadcast_chain": Case(_broadcast_chain, (5, 2)),
    "ints_and_bools": Case(_ints_and_bools, (6,)),
    "columns": Case(_columns, (33, 8)),
    "multi_dim": Case(_multi_dim, (3,)),
}
REDUCTION_CASES = ("softmax", "layernorm", "rmsnorm_bf16", "argmax_ties_nan", "argmax_integers", "gather",
                   "columns", "multi_dim")


def check_outputs(got, program: Program, args, what=""):
    """``got`` against ``program.eager(*args)``; bf16 results may be one rounding apart."""
    got = got if isinstance(got, (tuple, list)) else [got]
    want = program.eager(*args)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        if w.dtype == torch.bfloat16:
            torch.testing.assert_close(g, w, atol=2e-2, rtol=1.6e-2, msg=lambda m: f"{what} output {k}: {m}")
        else:
            assert_close(g, w, f"{what} output {k}")


def on(device, tensors):
    return [t.to(device) for t in tensors]


@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(backend, name):
    """Default configs; programs with several row counts compile once with a symbolic count."""
    case = CASES[name]
    program = case.program()
    f = ln.compile(program.outputs, inputs=program.inputs, backend=backend, name=name)
    for rows in case.rows:
        args = on(backend.device, program.make(rows))
        check_outputs(f(*args), program, args, f"{backend.name} {name} rows={rows}")
    assert len(f.specializations) == 1


def test_non_contiguous_inputs_specialize_once_per_stride_pattern(backend):
    """Transposed, strided, offset and expanded inputs read correctly; one specialization each."""
    x = ln.placeholder("x", (9, 13), ln.float32)
    f = ln.compile([ln.sum(ln.exp(x), 0), ln.permute(x, 1, 0) * 3], backend=backend)
    base = on(backend.device, [nonzero(13, 9), nonzero(9, 26), nonzero(10, 14)])
    views = {"transposed": base[0].T, "contiguous": base[0].T.contiguous(), "transposed again": base[0].T,
             "strided": base[1][:, ::2], "offset": base[2][1:, 1:]}
    for what, a in views.items():
        got = f(a)
        assert_close(got[0], a.exp().sum(0), what)
        assert_close(got[1], a.T * 3, what)
    assert len(f.specializations) == 4
    row = nonzero(13).to(backend.device).expand(9, 13)
    assert_close(ln.compile(x * 2, backend=backend)(row), row * 2, "expanded input")


def test_zero_dim_tensors(backend):
    x, y = ln.placeholder("x", (), ln.float32), ln.placeholder("y", (4, 3), ln.float32)
    a, b = on(backend.device, [nonzero(), nonzero(4, 3)])
    out = ln.compile([x * 2 + 1, ln.sum(y) * x, y + x], backend=backend)(a, b)
    for got, want in zip(out, [a * 2 + 1, b.sum() * a, b + a]):
        assert_close(got, want)


# -- default configs: a point of the backend's search space, for a spread of kernels ----------------
def _rmsnorm_rows(x):
    xf = ln.cast(x, ln.float32)
    return ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, -1, keepdim=True) + 1e-6), ln.bfloat16)


def _over(fn, shape, dtype=ln.float32):
    """A builder of ``fn(x)`` over a placeholder ``x`` of ``shape`` (ints, or symbols)."""
    def build():
        x = ln.placeholder("x", shape, dtype)
        out = fn(x)
        return list(out) if isinstance(out, tuple) else [out], [x]
    return build


def _plus_one(x):
    return x + 1


def _transposed(x):
    return ln.permute(x, 1, 0) + 1


def _row_sum(x):
    return ln.sum(x, 1)


def _column_sum(x):
    return ln.sum(x, 0)


# Pointwise 1-D/2-D/transposed, rows short/long/odd/16-bit, columns, full reductions; symbolic sizes.
KERNEL_SPREAD = {
    "pointwise_7": _over(_plus_one, (7,)),
    "pointwise_1M": _over(lambda x: ln.exp(x) * 2, (1 << 20,)),
    "pointwise_2d": _over(_plus_one, (1000, 1000)),
    "pointwise_symbolic": _over(_plus_one, ("N", "C")),
    "transposed_64": _over(_transposed, (64, 64)),
    "transposed_odd": _over(_transposed, (37, 50)),
    "transposed_symbolic": _over(_transposed, ("N", 48)),
    "rows_of_3": _over(_row_sum, (4096, 3)),
    "rows_of_16": _over(_row_sum, (100000, 16)),
    "softmax_7x37": _over(softmax, (7, 37)),
    "softmax_4x3000": _over(softmax, (4, 3000)),
    "softmax_512x4096": _over(softmax, (512, 4096)),
    "softmax_8x32768": _over(softmax, (8, 32768)),
    "softmax_8x100000": _over(softmax, (8, 100000)),
    "softmax_symbolic": _over(softmax, ("N", "C")),
    "rows_symbolic_count": _over(_row_sum, ("N", 64)),
    "rmsnorm_bf16": _over(_rmsnorm_rows, (32768, 4096), ln.bfloat16),
    "welford_rows": _over(lambda x: ln.var_mean(x, 1), (64, 96)),
    "argmax_rows": _over(lambda x: ln.argmax(x, 1), (1000, 33)),
    "columns": _over(_column_sum, (1000, 256)),
    "columns_odd": _over(lambda x: ln.max(x, 0), (33, 7)),
    "columns_narrow": _over(_column_sum, (100000, 3)),
    "columns_symbolic": _over(_column_sum, ("N", 64)),
    "two_reduced_dims": _over(lambda x: ln.sum(x, (0, 2)), (3, 4, 5)),
    "full_small": _over(ln.sum, (10, 100)),
    "full_1M": _over(ln.sum, (1000, 1000)),
    "full_2e28": _over(lambda x: ln.max(abs(x)), (1 << 28,)),
    "full_symbolic": _over(ln.sum, ("N",)),
}
H200 = HardwareInfo("cuda", "NVIDIA H200", "sm_90", 132, 141 << 30)


def kernels_of(outputs, inputs, name="k", **options):
    """The scheduled kernels of DSL ``outputs`` over contiguous ``inputs`` (no tensors needed);
    ``options`` go to ``schedule``."""
    layouts = {p.src.name: Layout.contiguous(p.shape) for p in inputs}
    return schedule(GraphBuilder(layouts).build(inputs, outputs), name, **options).kernels


def spread_kernels(name):
    """The scheduled kernels of ``KERNEL_SPREAD[name]``."""
    return kernels_of(*KERNEL_SPREAD[name](), name)


def hardware_for(backend):
    """This machine, plus an H200 for Triton (its space adds a per-thread register budget)."""
    return [backend.hardware()] + ([H200] if backend.name == "triton" else [])


@pytest.mark.parametrize("name", list(KERNEL_SPREAD))
def test_default_config_is_a_point_of_the_search_space(backend, name):
    for kernel in spread_kernels(name):
        config = backend.default_config(kernel)
        for hw in hardware_for(backend):
            space = backend.space(kernel, hw)
            assert space.contains(config), f"{kernel.name} on {hw.name}: {config} not in {space.describe()}"
            assert space.validate(config.to_json()) == config
            assert backend.config_from_json(config.to_json(), hw) == config
