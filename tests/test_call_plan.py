"""The per-shape call plan: extern calls bound once (arguments flattened, views worked out),
memory slots carved out of one arena, results filed in the layouts the kernels expect."""
import pytest
import torch

import loopnest as ln
from conftest import assert_close
from loopnest.dsl.tensor import extern
from loopnest.runtime.compiled import BoundExtern, restrided


def _plan(fn, *args):
    """The call plan of ``ln.compile``'s function after a call with ``args``."""
    fn(*args)
    (compiled,) = fn.specializations.values()
    return compiled.call_plan(*args)


def nested_externs():
    """(compiled function, its inputs, the expected result) of a graph with an extern on a nested
    tensor list, one with a keyword tensor and one with a tuple of results."""
    x = ln.placeholder("x", (6, 8), ln.float32)
    w = ln.placeholder("w", (8, 8), ln.float32)
    (cat,) = extern("aten.cat.default", torch.cat, ([ln.exp(x), ln.tanh(x)],), {"dim": 0},
                    [((12, 8), ln.float32, None)])
    (mm,) = extern("aten.mm.default", lambda a, *, mat2: torch.mm(a, mat2), (ln.sin(cat),), {"mat2": w},
                   [((12, 8), ln.float32, None)])
    top, idx = extern("aten.topk.default", lambda a: tuple(torch.topk(a, 3, dim=1)), (mm * 2,), {},
                      [((12, 3), ln.float32, None), ((12, 3), ln.int64, None)])
    fn = ln.compile(top + ln.cast(idx, ln.float32), inputs=[x, w])
    X, W = torch.randn(6, 8), torch.randn(8, 8)
    values, indices = torch.topk(torch.sin(torch.cat([X.exp(), X.tanh()])) @ W * 2, 3, dim=1)
    return fn, (X, W), values + indices.float()


def test_externs_with_nested_tensor_lists_keyword_tensors_and_several_results():
    fn, (X, W), want = nested_externs()
    assert_close(fn(X, W), want, "nested, keyword and tuple externs")
    externs = [s for s in _plan(fn, X, W).steps if isinstance(s, BoundExtern)]
    assert [e.flat for e in externs] == [False, False, True], "only an op(a, b, ...) call is flat"


def test_an_extern_reads_a_transposed_view_of_an_input_and_of_a_kernel_result():
    """Views of graph inputs are taken on every call (the caller's tensor may be any tensor of
    that shape); a view in the very layout a kernel stored its result in is no view at all."""
    x = ln.placeholder("x", (8, 16), ln.float32)
    w = ln.placeholder("w", (4, 16), ln.float32)
    h = ln.exp(x)
    (mm,) = extern("aten.mm.default", torch.mm, (h, w.T), {}, [((8, 4), ln.float32, None)])
    fn = ln.compile(ln.sum(mm, 1), inputs=[x, w])
    X, W = torch.randn(8, 16) / 4, torch.randn(4, 16)
    assert_close(fn(X, W), (X.exp() @ W.T).sum(1), "transposed input")
    (bound,) = [s for s in _plan(fn, X, W).steps if isinstance(s, BoundExtern)]
    views = dict(bound.refs)
    assert views["w"] is not None, "the transposed input is a view"
    assert [spec for name, spec in bound.refs if name != "w"] == [None], "the kernel's result is passed as is"


def test_an_extern_result_with_other_strides_is_laid_out_as_the_kernels_expect():
    x = ln.placeholder("x", (8, 16), ln.float32)
    (t,) = extern("transposed_copy", lambda a: a.T.contiguous().T, (ln.exp(x),), {},
                  [((8, 16), ln.float32, None)])
    fn = ln.compile(ln.sum(t * 3, 1), inputs=[x])
    X = torch.randn(8, 16)
    assert_close(fn(X), (X.exp() * 3).sum(1), "restrided result")


def test_an_extern_result_of_the_wrong_shape_is_an_error():
    x = ln.placeholder("x", (8, 16), ln.float32)
    (t,) = extern("bad", lambda a: a[:4], (ln.exp(x),), {}, [((8, 16), ln.float32, None)])
    fn = ln.compile(ln.sum(t, 1), inputs=[x])
    with pytest.raises(RuntimeError, match=r"extern .* produced shape \(4, 16\).*expected \(8, 16\)"):
        fn(torch.randn(8, 16))


def test_intermediates_of_several_dtypes_share_one_aligned_arena():
    """Slots of a float32, a bool and an int64 intermediate, of odd sizes: each starts on a
    64-byte boundary of one allocation, and the graph computes what eager does (the buffers start
    poisoned in tests, so an element no kernel writes would show)."""
    x = ln.placeholder("x", (7, 13), ln.float32)
    spec = [((7, 13), ln.float32, None)]
    (a,) = extern("aten.neg.default", torch.neg, (ln.exp(x),), {}, spec)
    (b,) = extern("aten.logical_not.default", torch.logical_not, (x > 0.1,), {}, [((7, 13), ln.bool, None)])
    (c,) = extern("aten.neg.default", torch.neg, (ln.cast(x * 1000, ln.int64),), {}, [((7, 13), ln.int64, None)])
    out = a + ln.cast(b, ln.float32) + ln.cast(c, ln.float32)
    fn = ln.compile(out, inputs=[x])
    X = torch.randn(7, 13)
    expect = -X.exp() + (~(X > 0.1)).float() + -(X * 1000).to(torch.int64).float()
    assert_close(fn(X), expect, "arena")
    plan = _plan(fn, X)
    offsets = [offset * dtype.itemsize for _, dtype, _, _, offset, _ in plan.views]
    assert len(offsets) == 3 and all(o % 64 == 0 for o in offsets)
    assert plan.arena % 64 == 0 and plan.arena >= 7 * 13 * (4 + 1 + 8)


def test_a_model_with_linear_layers_matches_eager_through_torch_compile():
    model = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 32)).eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        got = torch.compile(model, backend="loopnest", options={"backend": "cpp", "tune": "off"})(x)
        assert_close(got, model(x), "LN + MLP")


def test_empty_intermediates_are_views_of_an_empty_arena():
    x = ln.placeholder("x", (3, 0, 4), ln.float32)
    (a,) = extern("aten.neg.default", torch.neg, (ln.exp(x),), {}, [((3, 0, 4), ln.float32, None)])
    fn = ln.compile(a * 2, inputs=[x])
    X = torch.randn(3, 0, 4)
    assert_close(fn(X), -X.exp() * 2, "empty")
    assert _plan(fn, X).arena == 0


def test_an_empty_extern_result_is_kept_whatever_its_strides():
    """ATen gives tensors without elements strides of 0 (attention's unused logsumexp): copying
    one into the planned layout would cost an allocation and a copy per call, for no data."""
    empty = torch.empty(2, 4, 0)
    assert restrided(empty, (4, 1, 1)) is empty
    full = torch.randn(4, 3).t()
    copy = restrided(full, (4, 1))
    assert copy.stride() == (4, 1) and torch.equal(copy, full)
