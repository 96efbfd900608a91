"""DSL reductions over an empty dimension: max, min, argmax and argmin raise as eager does (at
call time: sizes may be symbolic); sum, prod, mean, any and all keep eager's values, and
loopnest's own uses of max (softmax, logsumexp over an empty row) do not raise."""
from __future__ import annotations

import pytest
import torch

import loopnest as ln
from loopnest.dsl.nonempty import EmptyReductionError
from conftest import INTERPRETER_USABLE, assert_close

REJECTED = {"max": torch.amax, "min": torch.amin, "argmax": torch.argmax, "argmin": torch.argmin}
KEPT = {"sum": torch.sum, "prod": torch.prod, "mean": torch.mean, "any": torch.any, "all": torch.all}


def _backends():
    return ["cpp"] + (["triton"] if INTERPRETER_USABLE else [])


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("op", sorted(REJECTED))
def test_max_min_arg_over_empty_dimension_raise_like_eager(op, backend):
    x = ln.placeholder("x", ("N", "M"), ln.float32)
    f = ln.compile(getattr(ln, op)(x, 1), backend=backend)
    a = torch.randn(4, 6)
    assert_close(f(a), REJECTED[op](a, 1))  # symbolic sizes: one compiled function serves both
    with pytest.raises(IndexError, match="Expected reduction dim 1"):
        REJECTED[op](torch.empty(4, 0), 1)
    with pytest.raises(EmptyReductionError, match=rf"{op}\(\): expected reduction dim 1 to have non-zero size, "
                                                  r"but the input has shape \(N, M\) = \(4, 0\)"):
        f(torch.empty(4, 0))


def test_constant_empty_dimension_and_full_reduction_raise_at_call():
    x = ln.placeholder("x", (3, 0), ln.float32)
    f = ln.compile([ln.argmin(x), ln.max(x, 0)])  # the reduced dims: all of x, then dim 0 (size 3)
    with pytest.raises(EmptyReductionError, match=r"argmin\(\): expected reduction dim 0"):
        f(torch.empty(3, 0))
    g = ln.compile(ln.max(x, 0))  # reduces dim 0 (size 3): an empty result, no error, as in eager
    assert g(torch.empty(3, 0)).shape == torch.amax(torch.empty(3, 0), 0).shape


@pytest.mark.parametrize("op", sorted(KEPT))
def test_reductions_with_a_value_keep_eagers_result(op):
    x = ln.placeholder("x", ("N", "M"), ln.float32)
    f = ln.compile(getattr(ln, op)(x, 1))
    empty = torch.empty(4, 0)
    want = KEPT[op](empty, 1) if op not in ("any", "all") else KEPT[op](empty != 0, 1)
    assert_close(f(empty), want)


def test_softmax_and_logsumexp_over_an_empty_row_do_not_raise():
    fn = torch.compile(lambda x: (torch.softmax(x, 1), torch.logsumexp(x, 1)), backend="loopnest",
                       options={"backend": "cpp", "tune": "off"})
    x = torch.empty(3, 0)
    for got, want in zip(fn(x), (torch.softmax(x, 1), torch.logsumexp(x, 1))):
        assert_close(got, want)
