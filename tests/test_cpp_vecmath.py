"""vecmath.h: accuracy against float64 in ulp, special values, and every vector ABI variant
computing the same bits as the scalar function; generated kernels call it."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp import vecmath_probe as probe
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.ops import VECMATH, has_libmvec
from loopnest.core.hardware import this_cpu
from test_backends import kernels_of


@pytest.fixture(autouse=True)
def inline_vecmath(monkeypatch):
    """Sources that define the vecmath functions they call, as without the prebuilt object
    (``pch.vecmath_object``, tested in test_cpp_pch.py): these tests read the definitions, or
    build for another CPU."""
    monkeypatch.setattr(cc, "prebuilt_vecmath", lambda: False)


NAMES = sorted(probe.REFERENCES)
HEADER = (Path(probe.__file__).parent / "vecmath.h").read_text()


def test_every_vecmath_function_is_probed():
    assert {name for name, _ in VECMATH.values()} == set(NAMES) == set(probe.BOUNDS)


@pytest.mark.parametrize("name", NAMES)
def test_header_documents_the_asserted_bound(name):
    bound = re.search(rf"//\s+{name}\s+<= ([0-9.]+) ulp", HEADER)
    assert bound, f"vecmath.h does not state {name}'s error bound"
    assert float(bound.group(1)) == probe.BOUNDS[name]


@pytest.mark.parametrize("name", NAMES)
def test_error_within_documented_bound_on_a_million_inputs(name):
    acc = probe.measure(name, 1_000_000)
    assert acc.inputs > 1_000_000
    assert acc.max_ulp <= probe.BOUNDS[name], acc
    assert acc.mean_ulp < 0.5, acc


@pytest.mark.parametrize("name", NAMES)
def test_special_values_are_exact(name):
    x = probe.SPECIALS
    got, want = probe.run(name, x), probe.reference(name, x).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (x, got, want)
    finite = ~np.isnan(want)
    assert np.array_equal(got[finite], want[finite]), (x, got, want)
    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite])), (x, got, want)


@pytest.mark.parametrize("name", NAMES)
def test_denormal_inputs_and_results(name):
    tiny = np.array([1e-45, -1e-45, 3e-42, -3e-42, 1.1754942e-38, -1.1754942e-38], np.float32)
    x = np.abs(tiny) if name == "ln_logf" else tiny
    err = probe.ulp_error(probe.run(name, x), probe.reference(name, x))
    assert err.max() <= probe.BOUNDS[name], (x, err)


def test_exp_boundaries():
    """Overflow to inf right above log(FLT_MAX), denormal results down to 2^-149, and zeros below
    (the lanes under -104 are zeroed, not computed)."""
    x = np.array([88.72283, 88.7228, 88.7228394, 89.0, -87.3365, -100.0, -103.0, -103.9721, -104.0,
                  -104.5, -1e30, -np.inf], np.float32)
    got = probe.run("ln_expf", x)
    assert np.isinf(got[2:4]).all() and np.isfinite(got[:2]).all()
    assert (got[-4:] == 0).all() and not np.signbit(got[-4:]).any() and float(got[-6]) == 2.0**-149
    assert probe.ulp_error(got, probe.reference("ln_expf", x)).max() <= probe.BOUNDS["ln_expf"]


@pytest.mark.parametrize("name", NAMES)
def test_all_vector_variants_match_the_scalar_function_bit_for_bit(name):
    x = np.concatenate([probe.random_inputs(name, 100_000, seed=1), probe.SPECIALS, probe.EDGES])
    scalar = probe.run(name, x, "scalar")
    paths = probe.paths(name)
    assert {"simd", "bN4"} <= set(paths)
    for path in paths:
        got = probe.run(name, x, path)
        assert np.array_equal(got.view(np.uint32), scalar.view(np.uint32)) or np.array_equal(
            got, scalar, equal_nan=True), path


def module_source(op, x):
    """The C++ translation unit of ``op`` applied to the placeholder ``x`` (DSL)."""
    backend = CppBackend()
    return backend.module_source([(k, backend.default_config(k)) for k in kernels_of([op(x)], [x])])


@pytest.mark.parametrize("op, fn, name", [(ln.exp, torch.exp, "ln_expf"), (ln.log, torch.log, "ln_logf"),
                                          (ln.tanh, torch.tanh, "ln_tanhf"), (ln.erf, torch.erf, "ln_erff"),
                                          (ln.sigmoid, torch.sigmoid, "ln_sigmoidf")])
def test_generated_kernels_call_vecmath_and_match_eager(op, fn, name):
    x = ln.placeholder("x", (67, 129), ln.float32)
    source = module_source(op, x)
    if op is ln.tanh and has_libmvec():  # libmvec's tanhf measured faster (ops.LIBMVEC_FIRST)
        assert "tanhf(" in source and "LN_VECMATH" not in source
    else:
        assert f"{name}(" in source and f"LN_VECMATH({name}," in source
    a = torch.randn(67, 129) * 4
    if fn is torch.log:
        a = a.abs() + 1e-3
    torch.testing.assert_close(ln.compile(op(x), backend="cpp")(a), fn(a), rtol=3e-7, atol=1e-38)


def test_float64_keeps_libm():
    x = ln.placeholder("x", (33, 17), ln.float64)
    source = module_source(ln.exp, x)
    assert "ln_expf(" not in source and "LN_VECMATH" not in source
    a = torch.randn(33, 17, dtype=torch.float64)
    torch.testing.assert_close(ln.compile(ln.exp(x), backend="cpp")(a), torch.exp(a), rtol=1e-15, atol=0)


def test_exp_ftz_flushes_below_minus_87_and_is_exp_above():
    """The softmax sum's exp: exp where x >= -87, 0 below (never a subnormal result)."""
    x = np.array([-86.99, -87.0, -87.01, -87.3365, -100.0, -103.98, -np.inf, np.nan, 0.0, 88.0], np.float32)
    got = probe.run("ln_expf_ftz", x)
    assert np.array_equal(got[2:7], np.zeros(5, np.float32))
    assert np.isnan(got[7]) and got[8] == 1.0
    assert np.array_equal(got[[0, 1, 9]], probe.run("ln_expf", x[[0, 1, 9]]))
    assert (got[np.isfinite(got)] == 0).sum() + (np.abs(got[np.isfinite(got)]) >= 2.0**-126).sum() == 9


def test_erf_table_of_other_targets_on_this_machine():
    """AVX-512 builds use erf's 16-interval table; other targets its 8-interval one, built here
    through ``LN_ERF_TABLE8`` (on an AVX2 host it is the default): the same bound, special values
    and bits in every variant."""
    table8 = ("LN_ERF_TABLE8",)
    acc = probe.measure("ln_erff", 1_000_000, "simd", table8)
    assert acc.max_ulp <= probe.BOUNDS["ln_erff"] and acc.mean_ulp < 0.5, acc
    if "avx512f" in this_cpu().capability.split(","):  # elsewhere the default is that table
        assert acc != probe.measure("ln_erff", 1_000_000), "LN_ERF_TABLE8 built the same table"
    x = np.concatenate([probe.random_inputs("ln_erff", 100_000, seed=2), probe.SPECIALS, probe.EDGES])
    scalar = probe.run("ln_erff", x, "scalar", table8)
    for path in probe.paths("ln_erff"):
        assert np.array_equal(probe.run("ln_erff", x, path, table8), scalar, equal_nan=True), path
    want = probe.reference("ln_erff", probe.SPECIALS).astype(np.float32)
    assert np.array_equal(probe.run("ln_erff", probe.SPECIALS, "simd", table8), want, equal_nan=True)


@pytest.mark.parametrize("op, fn", [(ln.exp, torch.exp), (ln.log, torch.log), (ln.erf, torch.erf),
                                    (ln.sigmoid, torch.sigmoid)])
def test_pointwise_math_in_blocks_matches_the_tail_bit_for_bit(op, fn):
    """Pointwise kernels run their math inline on blocks of 16 (``vector_blocks.py``) and the
    elements after the last block through the plain loop: the same bits for the same input."""
    x = ln.placeholder("x", (3, 37), ln.float32)
    expr = op(x * 0.5 + 0.25) * x
    assert "lnv::blocks<" in module_source(lambda t: op(t * 0.5 + 0.25) * t, x)
    a = torch.rand(3, 37) * 8 + 0.1
    a[:, 32:] = a[:, :5]  # the tail (columns 32-36; row 2's in the merged 1-D loop) repeats block elements
    got = ln.compile(expr, backend="cpp")(a)
    assert torch.equal(got[:, 32:].view(torch.int32), got[:, :5].view(torch.int32))
    torch.testing.assert_close(got, fn(a * 0.5 + 0.25) * a, rtol=3e-7 * 4, atol=1e-38)


def test_nested_math_runs_in_rounds():
    """exp of an erf: the erf's block first, then the exp's on its results (vector_blocks._levels)."""
    x = ln.placeholder("x", (5, 40), ln.float32)
    nested = module_source(lambda t: ln.exp(ln.erf(t)), x)
    assert nested.index("lnv::erf_(") < nested.index("lnv::exp_(") and "ln_expf(" in nested  # and the tail
    a = torch.randn(5, 40)
    torch.testing.assert_close(ln.compile(ln.exp(ln.erf(x)), backend="cpp")(a), torch.exp(torch.erf(a)))
