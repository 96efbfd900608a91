"""Plain training graphs run through one ``autograd.Function`` of loopnest's (``PlainStep``)
instead of AOTAutograd's runtime wrapper; everything else keeps the wrapper. Both give eager's
gradients, and the plain path keeps the contract autograd users rely on."""
import copy

import pytest
import torch
import torch.nn.functional as F

import loopnest
from loopnest.lowering import plain_training


@pytest.fixture
def plain_calls(monkeypatch):
    """How many calls went through ``PlainStep``."""
    calls = []
    forward = plain_training.PlainStep.forward

    def counted(ctx, plan, *inputs):
        calls.append(plan)
        return forward(ctx, plan, *inputs)
    monkeypatch.setattr(plain_training.PlainStep, "forward", staticmethod(counted))
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()


def grads_match(fn, args, grad_out=None, plain=True, calls=None, **tol):
    """``fn`` compiled by loopnest and eager give the same outputs and gradients."""
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    mine = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    theirs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    got, want = compiled(*mine), fn(*theirs)
    torch.testing.assert_close(got, want, **tol)
    first = lambda o: o[0] if isinstance(o, tuple) else o  # noqa: E731
    g = torch.randn_like(first(want)) if grad_out is None else grad_out
    wrt_m = [a for a in mine if a.requires_grad]
    wrt_t = [a for a in theirs if a.requires_grad]
    torch.testing.assert_close(torch.autograd.grad(first(got), wrt_m, g),
                               torch.autograd.grad(first(want), wrt_t, g), **tol)
    if calls is not None:
        assert bool(calls) == plain


def test_the_training_rows_take_the_plain_path(plain_calls):
    x, w, b = torch.randn(16, 96, requires_grad=True), torch.randn(96, requires_grad=True), torch.randn(96, requires_grad=True)
    grads_match(lambda x, w, b: F.layer_norm(x, (96,), w, b), [x, w, b], calls=plain_calls)
    plain_calls.clear()
    grads_match(lambda x: torch.softmax(x, -1), [x], calls=plain_calls)
    plain_calls.clear()
    logits, target = torch.randn(8, 50, requires_grad=True), torch.randint(0, 50, (8,))
    grads_match(lambda z, t: F.cross_entropy(z, t), [logits, target], grad_out=torch.tensor(1.0), calls=plain_calls)


def test_outputs_without_gradients_are_not_differentiable(plain_calls):
    def f(x, w):
        y = x * w
        return y.tanh(), y.argmax(1), x.detach() * 2
    x, w = torch.randn(6, 10, requires_grad=True), torch.randn(10, requires_grad=True)
    compiled = torch.compile(f, backend="loopnest")
    a, idx, d = compiled(x, w)
    assert plain_calls and a.requires_grad and not idx.requires_grad and not d.requires_grad
    assert idx.dtype == torch.int64
    grads_match(f, [x, w])


def test_an_unused_output_gets_zero_gradient_and_a_strided_gradient_is_fitted(plain_calls):
    def f(x):
        return x.sin() * 2, x.cos()
    x = torch.randn(12, 7, requires_grad=True)
    compiled = torch.compile(f, backend="loopnest")
    g = torch.randn(7, 12).t()  # not contiguous
    got = torch.autograd.grad(compiled(x)[0], x, g)[0]
    torch.testing.assert_close(got, torch.autograd.grad(f(x)[0], x, g)[0])
    got = torch.autograd.grad(compiled(x)[1].sum(), x)[0]  # the first output's gradient is never made
    torch.testing.assert_close(got, -x.sin())
    assert plain_calls


def test_saved_inputs_changed_in_place_raise_and_a_second_differentiation_raises(plain_calls):
    compiled = torch.compile(lambda x, w: (x * w).relu() * x, backend="loopnest")
    x, w = torch.randn(5, 9, requires_grad=True), torch.randn(9)
    y = compiled(x, w)
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    x2 = torch.randn(5, 9, requires_grad=True)
    (g,) = torch.autograd.grad(compiled(x2, w).sum(), x2, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(g.sum(), x2)
    assert plain_calls


def test_retained_graphs_and_accumulated_parameter_gradients(plain_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref = __import__("copy").deepcopy(model)
    compiled = torch.compile(model, backend="loopnest")
    x = torch.randn(8, 16)
    loss = compiled(x).square().mean()
    loss.backward(retain_graph=True)
    loss.backward()
    ref_loss = ref(x).square().mean()
    ref_loss.backward(retain_graph=True)
    ref_loss.backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert plain_calls


@pytest.mark.parametrize("case", ["mutation", "alias", "dynamic"])
def test_graphs_the_wrapper_has_work_for_keep_it(plain_calls, case):
    if case == "mutation":  # of an input that needs a gradient: autograd must see it
        def f(x, h):
            h.mul_(2)
            return x * h
        x, w = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6, requires_grad=True)
        h = w * 1
        out = torch.compile(f, backend="loopnest")(x, h)
        torch.testing.assert_close(out, x * w * 2)
        gx, gw = torch.autograd.grad(out.sum(), [x, w])
        torch.testing.assert_close(gx, w * 2)
        torch.testing.assert_close(gw, x * 2)
    elif case == "alias":
        def f(x):
            return x.view(-1), x.exp()
        x = torch.randn(3, 5, requires_grad=True)
        grads_match(f, [x])
    else:
        f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend="loopnest", dynamic=True)
        for n in (3, 7):
            x = torch.randn(n, 11, requires_grad=True)
            torch.testing.assert_close(torch.autograd.grad(f(x).square().sum(), x)[0],
                                       torch.autograd.grad(torch.softmax(x * 2, -1).square().sum(), x)[0])
    assert not plain_calls


def test_new_values_for_buffers_take_the_plain_path(plain_calls):
    """A batch norm in training writes its running statistics: the forward graph returns their
    new values, which ``PlainStep`` copies in; gradients and statistics match eager's, step
    after step."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).train()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    for _ in range(3):
        x = torch.randn(4, 3, 10, 10)
        g = torch.randn(4, 8, 8, 8)
        got = torch.autograd.grad(compiled(x), list(mine.parameters()), g)
        want = torch.autograd.grad(eager(x), list(eager.parameters()), g)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for (name, b), (_, expect) in zip(mine.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(b, expect, msg=name)
    assert mine[1].num_batches_tracked.item() == 3 and len(plain_calls) == 3


def test_compiled_autograd_keeps_the_wrapper(plain_calls):
    x = torch.randn(4, 5, requires_grad=True)
    with torch._dynamo.config.patch(compiled_autograd=True):  # config modules are patched so, not by setattr
        compiled = torch.compile(lambda x: x.sin() * 2, backend="loopnest")
        torch.testing.assert_close(compiled(x), x.sin() * 2)
    assert not plain_calls
    assert torch._dynamo.config.compiled_autograd is False


@pytest.fixture
def walked(monkeypatch):
    """The graphs that walked the checked path (``LoweredGraph._run``) instead of a direct one."""
    from loopnest.lowering import runner
    graphs = []
    walk = runner.LoweredGraph._run
    monkeypatch.setattr(runner.LoweredGraph, "_run", lambda self, args, compiled: graphs.append(self) or walk(self, args, compiled))
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


def test_a_backward_returning_a_none_gradient_runs_its_written_call_plan(walked):
    """An integer input's gradient is None among the backward graph's outputs; the graph still
    takes the direct path and its written call plan, never the checked walk."""
    table, tokens = torch.randn(50, 16, requires_grad=True), torch.randint(0, 50, (4, 8))
    for _ in range(3):
        grads_match(lambda t, i: F.embedding(i, t).tanh() * 2, [table, tokens])
    assert not walked


def test_a_backward_taking_transposed_saved_tensors_runs_its_written_call_plan(walked):
    """Attention's backward takes views of the forward's results at other strides; the graph is
    compiled for those strides, so it takes the direct path too."""
    def attention(q, k, v):
        heads = lambda t: t.view(2, 6, 3, 8).transpose(1, 2)  # noqa: E731
        return (torch.softmax(heads(q) @ heads(k).transpose(-1, -2), -1) @ heads(v)).transpose(1, 2).reshape(2, 6, 24)
    q, k, v = (torch.randn(2, 6, 24, requires_grad=True) for _ in range(3))
    for _ in range(3):
        grads_match(attention, [q, k, v], atol=1e-5, rtol=1e-4)
    assert not walked


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "wrapper"])
def test_a_step_calling_backward_compiles_only_its_own_graphs(dynamic):
    """A compiled step whose ``loss.backward()`` breaks the graph: on the CPU the autograd engine
    runs the backward on the step's thread, under Dynamo's frame hook, which must leave loopnest's
    runtime (and, on the wrapper's path, its backward compiler) untraced."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.LayerNorm(16))
    ref = copy.deepcopy(model)

    def step(m, x):
        loss = m(x).square().mean()
        loss.backward()
        return loss

    x = torch.randn(8, 24)
    graphs = loopnest.explain(lambda x: step(model, x), x, backend="cpp", dynamic=dynamic).graphs
    assert [g.name for g in graphs] == ["fwd", "bwd"]
    step(ref, x)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_an_embeddings_backward_stays_atens_kernel():
    """The core decomposition of ``embedding_dense_backward`` (a zero-filled ``index_put`` that
    accumulates) ran 7x as long on the CPU; the backward graph keeps the ATen call."""
    from loopnest.ir.nodes import Extern

    seen = []
    emb = torch.nn.Embedding(50, 16, padding_idx=3)
    tokens = torch.tensor([[3, 1, 1, 7], [49, 3, 0, 1]])  # repeated and padding positions
    torch._dynamo.reset()
    fn = torch.compile(lambda t: emb(t).square().sum(), backend="loopnest",
                       options={"backend": "cpp", "tune": "off", "recorder": seen.append})
    fn(tokens).backward()
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    emb(tokens).square().sum().backward()
    torch.testing.assert_close(got, emb.weight.grad)
    targets = [step.target for g in seen for step in g.compiled.schedule.steps if isinstance(step, Extern)]
    assert any("embedding_dense_backward" in t for t in targets), targets
