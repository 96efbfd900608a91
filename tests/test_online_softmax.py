"""Softmax statistics in one pass (``scheduler/online_softmax.py``, ``ReduceOp.EXP_SUM``).

The rewrite's shape (which pairs fuse, how many passes remain), where the Triton backend applies
it, and its results against eager PyTorch on rows with NaN, +inf and all -inf, in Triton's
interpreter under looped and split configs and in a real C++ build of the rewritten kernel.
"""
import math

import pytest
import torch

import loopnest as ln
from loopnest.backends import registry
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.triton import codegen
from loopnest.backends.triton.codegen import generate, one_pass_statistics
from loopnest.backends.triton.params import TritonConfig
from loopnest.backends.triton.settings import TritonSettings
from loopnest.ir.interpret import reduce_values
from loopnest.ir.ops import ReduceOp
from loopnest.scheduler.online_softmax import online_softmax
from test_backends import kernels_of, log_softmax, softmax
from test_triton import DEVICE, check, run
from test_triton_split import cross_entropy

pytestmark = [pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]
ROWS, COLS = 7, 150


def logsumexp(x):
    """As PyTorch decomposes it: the max's infinities replaced by 0 before it shifts the row."""
    m = ln.max(x, 1, keepdim=True)
    shift = ln.where(ln.abs(m) == math.inf, 0.0, m)
    return ln.log(ln.sum(ln.exp(x - shift), 1, keepdim=True)) + shift


def scaled_softmax(x):
    """exp(2 * (x - max)): the sum's body is not exp(body - max), so it stays two passes."""
    e = ln.exp((x - ln.max(x, 1, keepdim=True)) * 2.0)
    return e / ln.sum(e, 1, keepdim=True)


def _kernel(build):
    x = ln.placeholder("x", (ROWS, COLS), ln.float32)
    (kernel,) = kernels_of([build(x)], [x])
    return kernel


def _edge_rows(seed=0):
    """Random rows, then: a NaN, +inf, all -inf, some -inf, a huge spread (exp underflows), and
    -inf, a large max, then +inf (the sum of only -inf elements must stay 0 when rescaled)."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(ROWS, COLS, generator=g, dtype=torch.float64) * 6 - 3).float()
    a[1, 17] = float("nan")
    a[2, 40] = float("inf")
    a[3] = float("-inf")
    a[4, ::3] = float("-inf")
    a[5, 90] = 200.0
    a[6, :20], a[6, 30], a[6, 140] = float("-inf"), 150.0, float("inf")  # exp(150) overflows the rescale
    return a.to(DEVICE)


# -- the rewrite ---------------------------------------------------------------------------------
@pytest.mark.parametrize("build, phases", [(softmax, 2), (log_softmax, 2), (logsumexp, 1)])
def test_a_max_and_its_exp_sum_become_one_reduction(build, phases):
    kernel = _kernel(build)
    assert [r.op for r in kernel.reductions] == [ReduceOp.MAX, ReduceOp.SUM]
    fused = online_softmax(kernel)
    assert [(r.op, r.level) for r in fused.reductions] == [(ReduceOp.EXP_SUM, 0)]
    assert fused.num_phases == phases == kernel.num_phases - 1


def test_cross_entropy_reads_its_row_once():
    t = ln.placeholder("t", (ROWS, 1), ln.int64)
    x = ln.placeholder("x", (ROWS, COLS), ln.float32)
    (kernel,) = kernels_of([cross_entropy(x, t)], [x, t])
    assert kernel.num_phases == 2 and online_softmax(kernel).num_phases == 1


def test_other_sums_of_exp_are_left_alone():
    kernel = _kernel(scaled_softmax)
    assert online_softmax(kernel) is kernel


def test_triton_applies_it_except_to_persistent_rows():
    kernel = _kernel(softmax)
    settings = TritonSettings(interpret=True, debug=False)
    configs = {"persistent": TritonConfig(XBLOCK=1, RBLOCK=256, strategy="persistent"),
               "looped": TritonConfig(XBLOCK=1, RBLOCK=32, strategy="looped"),
               "split": TritonConfig(XBLOCK=1, RBLOCK=32, strategy="split", SPLIT=2),
               "sync_whole": TritonConfig(XBLOCK=1, RBLOCK=128, strategy="split_sync", SPLIT=2),
               "sync_looped": TritonConfig(XBLOCK=1, RBLOCK=32, strategy="split_sync", SPLIT=2)}
    fused = {name: one_pass_statistics(kernel, c) for name, c in configs.items()}
    assert fused == {"persistent": False, "looped": True, "split": True, "sync_whole": True, "sync_looped": True}
    looped = generate(kernel, configs["looped"], settings).source
    assert looped.count("for roffset in range(") == 2 and "_top = tl.maximum(acc0_lanes_max, tl.reduce(" in looped
    assert "_top" not in generate(kernel, configs["persistent"], settings).source
    split = generate(kernel, configs["split"], settings)
    assert [launch.fn for launch in split.launches] == ["ln_k_0_split0", "ln_k_0_combine0", "ln_k_0_split1"]


# -- results against eager ---------------------------------------------------------------------------
def _forced(strategy):
    if strategy == "looped":
        return lambda k: TritonConfig(XBLOCK=2, RBLOCK=16, strategy="looped", num_warps=2)
    if strategy == "subrows":  # one row per program: chunks of 4 sub-rows (SUBROW patched to 8)
        return lambda k: TritonConfig(XBLOCK=1, RBLOCK=32, strategy="looped", num_warps=2)
    return lambda k: TritonConfig(XBLOCK=2, RBLOCK=16, strategy="split", SPLIT=3, num_warps=2)


@pytest.fixture(params=["looped", "split", "subrows"])
def strategy(request, monkeypatch):
    """Each strategy that takes the statistics in one pass; sub-rows of 8 elements for "subrows"."""
    monkeypatch.setattr(codegen, "SUBROW", 8)
    return request.param


def test_looped_rows_of_one_program_take_their_statistics_in_sub_rows(monkeypatch):
    monkeypatch.setattr(codegen, "SUBROW", 8)
    kernel = _kernel(log_softmax)
    settings = TritonSettings(interpret=True, debug=False)
    source = generate(kernel, _forced("subrows")(kernel), settings).source
    assert "rsub = tl.arange(0, 4)[:, None] * 8 + tl.arange(0, 8)[None, :]" in source
    assert "_lanes_max = tl.full([4]," in source  # one-dimensional: no copy beside each element
    assert "rsub" not in generate(kernel, _forced("looped")(kernel), settings).source  # two rows per program
    stored = _kernel(softmax)  # a later loop over the row: rindex back to [XBLOCK, RBLOCK], as Triton wants
    source = generate(stored, _forced("subrows")(stored), settings).source
    assert source.index("rindex = rbase\n") < source.index("rindex = roffset + rbase")


EAGER = {"softmax": lambda a: torch.softmax(a, 1), "log_softmax": lambda a: torch.log_softmax(a, 1),
         "logsumexp": lambda a: torch.logsumexp(a, 1, keepdim=True)}
PROGRAMS = {"softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp}


@pytest.mark.parametrize("fn", list(PROGRAMS))
def test_one_pass_statistics_match_eager_at_the_edges(fn, strategy):
    x = ln.placeholder("x", (ROWS, COLS), ln.float32)
    a = _edge_rows()
    out = run(PROGRAMS[fn](x), a, config=_forced(strategy), inputs=[x])
    check(out, EAGER[fn](a))


def test_one_pass_cross_entropy_matches_eager(strategy):
    x = ln.placeholder("x", (ROWS, COLS), ln.float32)
    t = ln.placeholder("t", (ROWS, 1), ln.int64)
    a = _edge_rows(1)
    a[3] = 0.5  # a finite target everywhere but the NaN and +inf rows
    ta = torch.randint(0, COLS, (ROWS, 1), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    out = run(cross_entropy(x, t), a, ta, config=_forced(strategy), inputs=[x, t])
    check(out, torch.nn.functional.cross_entropy(a, ta[:, 0], reduction="none"), rtol=1e-5, atol=1e-5)


def test_the_interpreter_state_is_max_and_sum_at_the_shifted_max():
    a = _edge_rows().cpu().double()
    m, s = reduce_values(ReduceOp.EXP_SUM, a)
    finite = [0, 4, 5]
    torch.testing.assert_close(m[finite], a[finite].amax(1))
    torch.testing.assert_close(s[finite], torch.exp(a[finite] - a[finite].amax(1, keepdim=True)).sum(1))
    assert m[1].isnan() and s[1].isnan()                        # NaN anywhere: both NaN
    assert m[2] == math.inf and s[2] == math.inf                # an infinite max shifts by 0
    assert m[3] == -math.inf and s[3] == 0


def test_cpp_renders_the_fused_state():
    """The rewritten kernel built and run by the C++ backend (its codegen never asks for the
    rewrite, but renders every reduction op)."""
    kernel = online_softmax(_kernel(log_softmax))
    cpp = registry.get("cpp")
    artifact = cpp.compile([(kernel, CppConfig(threads=1))])
    a = _edge_rows().cpu()
    (src,), (dst,) = kernel.inputs, kernel.outputs
    out = torch.full((ROWS, COLS), float("nan"))
    artifact.launchers[kernel.name]({src: a, dst: out}, {})
    torch.testing.assert_close(out, torch.log_softmax(a, 1), equal_nan=True)
