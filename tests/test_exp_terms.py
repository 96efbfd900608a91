"""A softmax sum's exp as ``Op.EXP_FTZ`` (``scheduler/online_softmax.flush_exp_terms``).

Which sums the rewrite takes (softmax, log_softmax, logsumexp's shift, cross-entropy) and which it
leaves (a stored exp, a scaled or offset shift); the C++ it renders; and results against eager on
rows whose spread sends most terms below 2^-126, on every backend.
"""
import math

import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.ir.expr import Apply, walk
from loopnest.ir.interpret import OPS
from loopnest.ir.ops import Op
from test_backends import kernels_of, log_softmax, softmax
from test_online_softmax import logsumexp, scaled_softmax
from test_triton import DEVICE

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
ROWS, COLS = 5, 300


def offset_log_softmax(x):
    """exp(x - (max + 100)): every term may be subnormal, so none may be flushed."""
    shift = ln.max(x, 1, keepdim=True) + 100.0
    return ln.log(ln.sum(ln.exp(x - shift), 1, keepdim=True)) + shift


def _kernel(build):
    x = ln.placeholder("x", (ROWS, COLS), ln.float32)
    (kernel,) = kernels_of([build(x)], [x])
    return kernel


def _exp_ops(e):
    return sorted(n.op.name for n in walk(e) if isinstance(n, Apply) and n.op in (Op.EXP, Op.EXP_FTZ))


@pytest.mark.parametrize("build", [softmax, log_softmax, logsumexp])
def test_a_softmax_sum_flushes_its_terms_and_a_stored_exp_does_not(build):
    kernel = _kernel(build)
    (total,) = [r for r in kernel.reductions if r.op.name == "SUM"]
    assert _exp_ops(total.body) == ["EXP_FTZ"]
    for store in kernel.elem_stores:
        assert "EXP_FTZ" not in _exp_ops(store.value)
    code = generate(kernel, CppConfig(threads=1))
    if build is softmax:  # C++ stores the exact exp as it sums it, and rescales it (backends/cpp/reuse.py)
        # inline on the lane arrays' blocks (vector_blocks.py), for the full steps and for the
        # rest of the row: its whole vectors in the lanes, its tail in the scalar states (row_lanes.py)
        assert code.count("lnv::exp_(") == 2 and "ln_expf(" not in code and "exp_ftz" not in code
    else:
        assert "exp_ftz" in code and "ln_expf(" not in code and "lnv::exp_(" not in code


@pytest.mark.parametrize("build", [scaled_softmax, offset_log_softmax])
def test_other_shifts_keep_their_exp(build):
    kernel = _kernel(build)
    assert all("EXP_FTZ" not in _exp_ops(r.body) for r in kernel.reductions)


def test_the_interpreter_flushes_exactly_below_minus_87():
    x = torch.tensor([-86.5, -87.0, -87.5, -120.0, -math.inf, math.nan, 0.0])
    got = OPS[Op.EXP_FTZ](x)
    assert torch.equal(got[:2], torch.exp(x[:2])) and torch.equal(got[2:5], torch.zeros(3))
    assert got[5].isnan() and got[6] == 1


def _wide_rows(seed=0):
    """Rows spread over [-150, 150], so most terms of each sum are below 2^-126, with edge rows: a
    NaN, +inf, all -inf, and a row whose only finite element sits 120 below the others' -inf."""
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(ROWS, COLS, generator=g) * 300 - 150
    a[1, 7] = math.nan
    a[2, 11] = math.inf
    a[3] = -math.inf
    a[4] = -math.inf
    a[4, 5] = -120.0
    return a


@pytest.mark.parametrize("fn", [
    lambda x: torch.softmax(x, 1), lambda x: torch.log_softmax(x, 1), lambda x: torch.logsumexp(x, 1),
    lambda x: torch.nn.functional.cross_entropy(x, torch.arange(ROWS, device=x.device) * 7, reduction="none"),
], ids=["softmax", "log_softmax", "logsumexp", "cross_entropy"])
def test_results_match_eager_where_most_terms_are_subnormal(fn, backend):
    a = _wide_rows().to(DEVICE if backend.name == "triton" else "cpu")
    compiled = torch.compile(fn, backend="loopnest", options={"backend": backend.name, "tune": "off"})
    want = fn(a.double()).float()
    torch.testing.assert_close(compiled(a), want, rtol=1e-5, atol=1e-6, equal_nan=True)
