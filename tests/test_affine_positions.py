"""Interpolations whose gather positions are arithmetic on one loop variable read through index
arithmetic instead (``ir/affine_positions.py``): eager's exact values on both backends' CPU path,
no bounds checks left where the positions fit, and positions that do not fit stay gathers."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.ir.affine_positions import affine_atom
from loopnest.ir.dtypes import float32, int64
from loopnest.ir.expr import Apply, Const, IndexValue
from loopnest.ir.index import Index, Indirect, var
from loopnest.ir.ops import Op
from conftest import assert_close

CASES = {
    "nearest 2x": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (2, 3, 8, 6), True),
    "nearest to 7x11": (lambda x: F.interpolate(x, size=(7, 11), mode="nearest"), (1, 2, 5, 4), True),
    "nearest down to 3x2": (lambda x: F.interpolate(x, size=(3, 2), mode="nearest"), (1, 2, 7, 5), True),
    "nearest 1.5x": (lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), (1, 2, 6, 4), True),
    "nearest-exact 3x": (lambda x: F.interpolate(x, scale_factor=3, mode="nearest-exact"), (1, 2, 4, 5), True),
    "nearest 1-d 2x with math": (lambda x: torch.sigmoid(F.interpolate(x, scale_factor=2)) * 2, (2, 3, 33), True),
    "bilinear 2x": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (1, 2, 5, 4), False),
}


def _source(fn, x) -> str:
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    return "\n".join(k.source_path.read_text() for k in info.kernels)


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpolations_match_eager(name):
    fn, shape, affine = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    assert_close(got, fn(x), name)
    if affine:  # nearest positions: exact integer arithmetic, nothing to check at run time
        assert "ln_fail(ln_err" not in _source(fn, x)


def _scaled(size: int, scale: float):
    """``int64(float32(p) * scale)`` over ``p`` in ``[0, size)``, as the nearest decomposition."""
    p = IndexValue(var("p0", size), int64)
    return Apply(Op.CAST, (Apply(Op.MUL, (Apply(Op.CAST, (p,), float32), Const(scale, float32)), float32),), int64)


@pytest.mark.parametrize("size, scale, bound, want", [(32, 0.5, 16, "(p0 // 2)"), (10, 2.0, 20, "p0*2"),
                                                      (7, 5 / 7, 5, "((p0*5) // 7)")])
def test_positions_that_fit_become_index_arithmetic(size, scale, bound, want):
    found = affine_atom(Indirect(_scaled(size, scale), Index.of(bound), None))
    assert str(found) == want


def test_positions_that_fit_nothing_stay_gathers():
    p = IndexValue(var("p0", 12), int64)
    clamped = Apply(Op.MINIMUM, (Apply(Op.MAXIMUM, (Apply(Op.SUB, (p, Const(1, int64)), int64), Const(0, int64)),
                                       int64), Const(9, int64)), int64)
    assert affine_atom(Indirect(clamped, Index.of(10), None)) is None
    out_of_bounds = Indirect(_scaled(32, 0.5), Index.of(15), None)  # position 15 is past the bound
    assert affine_atom(out_of_bounds) is None


@pytest.mark.parametrize("name", ["nearest 2x", "nearest to 7x11", "nearest 1-d 2x with math"])
def test_interpolations_through_triton(name):
    """The same kernels rendered by the Triton backend (its interpreter without a GPU)."""
    fn, shape, _ = CASES[name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(device)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "off"})(x)
    assert_close(got.cpu(), fn(x).cpu(), name)
