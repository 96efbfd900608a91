"""Call plans written out as functions (runtime/fast_call.py): after its first call a graph runs
its plan as one function, which gives the results the plan's walk gives, and sends any argument
that does not fit the plan (another shape, dtype, layout, not a tensor) to the checked path."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest
from conftest import assert_close
from loopnest.core import settings
from loopnest.dsl.tensor import extern
from loopnest.runtime.compiled import InputError
from test_call_plan import nested_externs


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


def _args(backend):
    """The graph's inputs on ``backend``'s device (CPU tensors for Triton's interpreter)."""
    gen = torch.Generator().manual_seed(0)
    device = "cuda" if backend.name == "triton" and torch.cuda.is_available() else "cpu"
    return tuple(t.to(device) for t in (torch.randn(12, 16, generator=gen), torch.randn(16, 24, generator=gen),
                                        torch.randn(24, generator=gen)))


@pytest.mark.parametrize("poison", [True, False])
def test_the_written_plan_gives_the_plans_results(backend, poison):
    args = _args(backend)
    fn = _compiled(backend, *args, poison=poison)
    first = fn(*args)
    entries = fn.lowered._entries
    assert len(entries) == 1, "the first call writes its plan out"
    assert "buffers = {" not in entries[0].source and "r = x" in entries[0].source, "the matmul is called directly"
    assert (".fill_(" in entries[0].source) == poison
    again = fn(*args)
    want = _mlp(*args)
    for got, before, expect in zip(again, first, want):
        assert_close(got, expect, "written plan")
        assert_close(before, expect, "walked plan")
    assert again[2] is args[0], "an input passed through is the caller's tensor"


def test_arguments_that_do_not_fit_take_the_checked_path(backend):
    args = _args(backend)
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
        fn(torch.randn(13, 16, device=x.device), w, b)
    with pytest.raises(InputError, match="torch.Tensor"):
        fn(3.0, w, b)
    assert len(fn.lowered._entries) == 1, "no plan written for calls that failed"


def test_a_graph_compiled_for_a_transposed_input_writes_its_plan_and_fits_other_layouts(backend):
    """An argument compiled at constant non-contiguous strides (a backward graph's transposed
    saved tensor) is checked by its strides: the same strides run the written plan, any other
    layout of the same values takes the checked path and is copied to the compiled one."""
    x, w, b = _args(backend)
    xt = x.T.contiguous().T  # column-major
    fn = _compiled(backend, xt, w, b)
    assert fn.lowered._direct.strides[0] == xt.stride()
    first, again = fn(xt, w, b), fn(xt, w, b)
    (entry,) = fn.lowered._entries
    assert f".stride() == {tuple(xt.stride())!r}" in entry.source
    for layout in (x, x.T.contiguous().T.clone(memory_format=torch.contiguous_format), x[:, :].T.T):
        for got, expect in zip(fn(layout, w, b), _mlp(x, w, b)):
            assert_close(got, expect, "another layout")
    for got, before, expect in zip(again, first, _mlp(x, w, b)):
        assert_close(got, expect, "written plan")
        assert_close(before, expect, "walked plan")
    assert len(fn.lowered._entries) == 1, "other layouts write no plan of their own"


@pytest.mark.parametrize("returns", ["a result", "its argument"])
def test_a_graph_returning_one_tensor_alone_writes_its_plan_out(backend, returns):
    """``make_fx`` of a function returning one tensor (not a tuple): the caller gets that tensor,
    from the written plan after the first call, and other arguments still take the checked path."""
    (x, _, _) = _args(backend)
    fn = (lambda a: torch.exp(a) * 0.5) if returns == "a result" else (lambda a: a)
    compiled = loopnest.compile_fx(make_fx(fn)(x), [x], backend=backend.name, tune="off")
    first, again = compiled(x), compiled(x)
    assert len(compiled.lowered._entries) == 1, "the first call writes its plan out"
    for got in (first, again):
        assert isinstance(got, torch.Tensor), "one tensor, not a tuple holding it"
        assert_close(got, fn(x), "one result")
    assert (again is x) == (returns == "its argument")
    with pytest.raises(InputError, match="shape"):
        compiled(torch.randn(13, 16, device=x.device))


def _written(fn, *args):
    """The call plan of ``ln.compile``'s function ``fn`` for ``args``, written out."""
    fn(*args)
    (compiled,) = fn.specializations.values()
    plan = compiled.call_plan(*args)
    return plan.entry(range(len(args)), [], [(False, 0)], tuple, True)


def test_written_externs_take_nested_lists_keywords_and_several_results():
    """A nested argument list or a keyword tensor goes through the step on a dict of what it
    reads; an op(a, b, ...) is called directly, its tuple of results unpacked."""
    fn, (X, W), want = nested_externs()
    entry = _written(fn, X, W)
    assert entry.source.count("buffers = {") == 2 and "r = x" in entry.source
    (got,) = entry([X, W])
    assert_close(got, want, "written externs")

def test_written_externs_fit_results_in_another_layout_and_refuse_another_shape():
    """An op whose result comes in strides other than the plan's is copied into the plan's
    layout; one whose result has another shape stops the call with a message naming it."""
    x = loopnest.placeholder("x", (6, 8), loopnest.float32)
    (col,) = extern("test.column_major", lambda a: a.T.contiguous().T, (loopnest.exp(x),), {},
                    [((6, 8), loopnest.float32, None)])
    X = torch.randn(6, 8)
    (got,) = _written(loopnest.compile(loopnest.sum(col * 2, 1), inputs=[x]), X)([X])
    assert_close(got, (X.exp() * 2).sum(1), "result copied to row-major")

    calls = []

    def widens_later(a):  # right on the first call (which writes the plan out), wrong after
        calls.append(1)
        return a if len(calls) == 1 else torch.cat([a, a], 1)

    (wide,) = extern("test.wrong_shape", widens_later, (loopnest.exp(x),), {}, [((6, 8), loopnest.float32, None)])
    entry = _written(loopnest.compile(loopnest.sum(wide, 1), inputs=[x]), X)
    with pytest.raises(RuntimeError, match=r"test.wrong_shape\S* produced shape \(6, 16\)"):
        entry([X])


def _chain(x, w1, w2):
    """Two matmuls with a kernel between and after them: the first product is read once."""
    return torch.softmax(torch.tanh(x @ w1) @ w2, -1)


def test_a_written_plan_allocates_late_and_frees_extern_results_after_their_last_read():
    """Each allocation sits just before the first step that uses it, and an ATen result (and the
    result tuple holding it) is dropped right after the step that reads it last, so a later
    matmul can reuse its memory; the results stay the plan's."""
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(32, 48, generator=gen), torch.randn(48, 64, generator=gen), torch.randn(64, 40, generator=gen)]
    fn = loopnest.compile_fx(make_fx(_chain)(*args), args, backend="cpp", tune="off")
    fn(*args)
    (entry,) = fn.lowered._entries
    lines = [line.strip() for line in entry.source.splitlines()]
    calls = [k for k, line in enumerate(lines) if line.startswith("r = x")]
    assert len(calls) == 2, entry.source
    first = lines[calls[0] + 3].split(" = ")[0]  # the first product's local: "bN = r[0]"
    dropped = [k for k, line in enumerate(lines) if line == f"del {first}"]
    assert dropped and calls[0] < dropped[0] < calls[1], entry.source
    assert lines.count("del r") == len(calls), entry.source  # the result tuple goes after each call
    output_alloc = next(k for k, line in enumerate(lines) if line.startswith("b") and " = empty(" in line)
    assert output_alloc > calls[1], "the result's buffer is allocated after the matmuls that come before it"
    assert_close(fn(*args), _chain(*args), "written plan")
