"""Call plans written out as functions (runtime/fast_call.py): after its first call a graph runs
its plan as one function, which gives the results the plan's walk gives, and sends any argument
that does not fit the plan (another shape, dtype, layout, not a tensor) to the checked path."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest
from conftest import assert_close
from loopnest.core import settings
from loopnest.runtime.compiled import InputError


def _mlp(x, w, b):
    """A kernel before and after an ATen matmul (an extern), a row reduction, and the input
    passed through as a result (what a forward graph saving it for backward returns)."""
    h = torch.tanh(x * 2 + 1)
    y = h @ w
    return (torch.softmax(y + b, -1), y.sum(1), x)


def _compiled(backend, *args, poison=True):
    with settings.scope(poison=poison):
        gm = make_fx(_mlp)(*args)
        return loopnest.compile_fx(gm, list(args), backend=backend.name, tune="off")


def _args():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(12, 16, generator=gen), torch.randn(16, 24, generator=gen), torch.randn(24, generator=gen)


@pytest.mark.parametrize("poison", [True, False])
def test_the_written_plan_gives_the_plans_results(backend, poison):
    args = _args()
    fn = _compiled(backend, *args, poison=poison)
    first = fn(*args)
    entries = fn.lowered._entries
    assert len(entries) == 1, "the first call writes its plan out"
    assert "buffers = {" in entries[0].source, "the matmul gets a dict of the buffers made so far"
    assert (".fill_(" in entries[0].source) == poison
    again = fn(*args)
    want = _mlp(*args)
    for got, before, expect in zip(again, first, want):
        assert_close(got, expect, "written plan")
        assert_close(before, expect, "walked plan")
    assert again[2] is args[0], "an input passed through is the caller's tensor"


def test_arguments_that_do_not_fit_take_the_checked_path(backend):
    args = _args()
    fn = _compiled(backend, *args)
    fn(*args)
    x, w, b = args
    transposed = x.T.contiguous().T  # same values, column-major: copied to the compiled layout
    assert not transposed.is_contiguous()
    for got, expect in zip(fn(transposed, w, b), _mlp(x, w, b)):
        assert_close(got, expect, "non-contiguous input")
    with pytest.raises(InputError, match="dtype"):
        fn(x.double(), w, b)
    with pytest.raises(InputError, match="shape"):
        fn(torch.randn(13, 16), w, b)
    with pytest.raises(InputError, match="torch.Tensor"):
        fn(3.0, w, b)
    assert len(fn.lowered._entries) == 1, "no plan written for calls that failed"
