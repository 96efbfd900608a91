"""The C++ backend's halves, bfloat16 and booleans: stored as integer bits, converted in
vectorizable integer code, and read by lane loops one vector of their own width wide."""
import re

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp.backend import CppBackend
from test_backends import kernels_of


def compiled(fn, *args):
    return ln.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")


def test_every_half_converts_as_torch():
    """All 65536 half bit patterns (zeros, subnormals, normals, infinities, NaNs) read into float
    and rounded back as torch does."""
    h = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    got_f, got_h = compiled(lambda v: (v.float() * 1.0, v * 1), h)(h)
    want_f = h.float()
    assert torch.equal(got_f.isnan(), want_f.isnan())
    finite = ~want_f.isnan()
    assert torch.equal(got_f[finite].view(torch.int32), want_f[finite].view(torch.int32))
    assert torch.equal(got_h[finite].view(torch.int16), h[finite].view(torch.int16))


def test_floats_round_to_half_as_torch():
    """Float32 values across the whole range, and around the subnormal, normal and overflow
    boundaries (ties included), round to the half torch rounds them to."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-2**31, 2**31 - 1, (200000,), generator=g, dtype=torch.int64).to(torch.int32)
    edges = torch.tensor([2.0**-25, 2.0**-24, 1.5 * 2.0**-24, 2.0**-14, 2.0**-14 * (1 - 2.0**-11), 65504.0,
                          65519.0, 65520.0, 1e6, 0.0, -0.0, float("inf"), -float("inf"), float("nan")])
    ties = (torch.arange(1, 2049, dtype=torch.float32) + 0.5) * 2.0**-24  # halfway between subnormals
    x = torch.cat([bits.view(torch.float32), edges, -edges, ties, ties * 2.0**10])
    got, want = compiled(lambda v: v.to(torch.float16), x)(x), x.to(torch.float16)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_narrow_math_in_blocks(dtype):
    """A 16-bit pointwise kernel with vector math runs in blocks of 32 and matches eager on odd
    sizes (full blocks, then the tail through the plain loop)."""
    x = (torch.randn(37, 301) * 4).to(dtype)
    for fn in (torch.sigmoid, torch.exp, torch.nn.functional.gelu):
        torch.testing.assert_close(compiled(fn, x)(x), fn(x), rtol=1.6e-2, atol=1e-3)


def test_boolean_masks():
    """Masks read as bytes select, multiply and are stored, in blocks of 64 with math and in the
    plain loop without."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(19, 333, generator=g)
    m = torch.rand(19, 333, generator=g) > 0.4
    cases = [lambda x, m: torch.where(m, torch.exp(x), 0.0), lambda x, m: torch.where(m, x, -x),
             lambda x, m: x * m, lambda x, m: (x > 0) & m, lambda x, m: x.masked_fill(m, -1e9).softmax(-1)]
    for fn in cases:
        got, want = compiled(fn, x, m)(x, m), fn(x, m)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype,lanes", [(ln.float32, 16), (ln.bfloat16, 32), (ln.float16, 32)])
def test_blocks_hold_a_vector_of_the_narrowest_elements(dtype, lanes):
    x = ln.placeholder("x", (8, 4096), dtype)
    (kernel,) = kernels_of([ln.cast(ln.exp(ln.cast(x, ln.float32)), dtype)], [x])
    src = CppBackend().codegen(kernel, CppBackend().default_config(kernel))
    assert re.search(rf"lnv::blocks<\d+, {lanes}>", src) and "_Float16*" not in src
