"""Graphs the OpInfo sweep found loopnest could not run: complex and unsigned tensors (called
through ATen, with the reason ``explain`` gives), variances over empty dimensions (NaN, as eager)
and reshapes of empty tensors (group_norm on ``[0, C]``). Compared with eager on the C++ backend."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.utils._pytree as pytree

import loopnest as ln
from conftest import assert_close


def _compiled(fn, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="loopnest", fullgraph=True, options={"backend": "cpp", **options})


def _check(fn, *inputs, dynamic=False):
    """fn compiled (fullgraph) equals eager fn, leaf by leaf: dtypes, shapes and NaNs included."""
    want = fn(*inputs)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", fullgraph=True, dynamic=dynamic, options={"backend": "cpp"})(*inputs)
    for k, (g, w) in enumerate(zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True)):
        if w.dtype.is_complex:
            assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != {w.dtype}"
            torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-5, atol=1e-5)
        else:
            assert_close(g, w, f"output {k}")


def test_complex_ops_mixed_with_real_kernels_match_eager():
    def f(x, y):
        z = torch.complex(x, y) * (1 + 2j)
        return z, torch.view_as_real(z).sum(-1) * x + 1, z.abs().exp(), torch.polar(x.abs(), y)

    x, y = torch.randn(5, 7), torch.randn(5, 7)
    _check(f, x, y)


def test_complex_inputs_outputs_and_conjugate_views_match_eager():
    def f(z, w, x):
        return z * w.conj() + x, (z - w).angle() * x, z.real + w.imag, torch.view_as_real(z.t()).sum()

    z = torch.randn(4, 6, dtype=torch.complex64)
    w = torch.randn(4, 6, dtype=torch.complex64).conj()  # a lazily conjugated input
    _check(f, z, w, torch.randn(4, 6))


def test_complex_with_symbolic_sizes_and_complex128():
    def f(z, x):
        return (z.exp() * x).sum(0), z.abs() + x

    for n in (3, 5):
        _check(f, torch.randn(n, 4, dtype=torch.complex128), torch.randn(n, 4, dtype=torch.float64), dynamic=True)


def test_unsigned_tensors_are_called_through_aten():
    def f(x, u):
        v = (u * 3) ^ (u & 1023)
        return v, (x * 2).to(torch.uint16), v.to(torch.int64) + 1, u == 7

    u = torch.randint(0, 2**31, (8,), dtype=torch.uint32)
    u[0] = 7
    _check(f, torch.rand(8) * 100, u)


def test_explain_names_the_complex_fallback_and_why():
    def f(x, y):
        return torch.view_as_real(torch.complex(x, y) * 1j).sum(-1).exp()

    explanation = ln.explain(f, torch.randn(3, 4), torch.randn(3, 4), backend="cpp")
    reasons = {f.op: f.reason for f in explanation.fallbacks}
    assert "aten.complex.default" in reasons, str(explanation)
    assert "complex64 tensors: called through ATen" in reasons["aten.complex.default"]
    assert "loopnest kernels have no complex dtypes" in str(explanation)
    assert explanation.num_kernels >= 1  # the real part (sum, exp) still runs in a kernel


@pytest.mark.parametrize("mutate", [lambda z, w, x: z.mul_(x + 1j), lambda z, w, x: z.copy_(w.conj())],
                         ids=["mul_", "copy_conj"])
def test_complex_input_mutation_matches_eager(mutate):
    def f(z, w, x):
        mutate(z, w, x)
        return z.abs() * x

    z, w, x = torch.randn(3, 4, dtype=torch.complex64), torch.randn(3, 4, dtype=torch.complex64), torch.randn(3, 4)
    want_z, got_z = z.clone(), z.clone()
    want = f(want_z, w, x)
    got = _compiled(f)(got_z, w, x)
    assert_close(got, want, "result")
    torch.testing.assert_close(got_z, want_z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_variance_over_an_empty_dimension_is_nan_as_in_eager(dynamic):
    def f(x):
        return (torch.var(x, 1), torch.std(x, 1, correction=0), torch.var_mean(x, 1, keepdim=True),
                torch.std_mean(x, (1, 2), correction=0), torch.var(x, 0), x.mean(1))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager warns about degrees of freedom <= 0
        _check(f, torch.randn(3, 0, 2), dynamic=dynamic)
        _check(f, torch.randn(2, 5, 3), dynamic=dynamic)  # the same graph with elements


def test_group_norm_of_an_empty_batch_matches_eager():
    weight, bias = torch.randn(6), torch.randn(6)

    def f(x):
        return torch.nn.functional.group_norm(x, 3, weight, bias), x.reshape(-1, 3).sum(0)

    _check(f, torch.randn(0, 6))
    _check(f, torch.randn(0, 6, 4))


def test_integer_abs_and_negation_wrap_at_the_minimum_as_eager():
    """-INT_MIN and abs(INT_MIN) are INT_MIN in eager; in C++ ``-a`` is undefined there, and g++
    used that to drop the floor correction of ``abs(a) // b`` (found by tests/test_fuzz.py)."""
    for dtype in (torch.int32, torch.int64):
        lo = torch.iinfo(dtype).min
        a = torch.tensor([lo, lo + 1, -21, 0, 7], dtype=dtype)
        b = torch.tensor([21, -5, 4, 3, -2], dtype=dtype)
        x = ln.placeholder("x", (5,), getattr(ln, str(dtype)[6:]))
        y = ln.placeholder("y", (5,), x.dtype)
        got = ln.compile([-x, abs(x), abs(x) // abs(y), (-x) // y], backend="cpp")(a, b)
        for g, w in zip(got, (-a, a.abs(), a.abs() // b.abs(), (-a) // b)):
            assert_close(g, w, str(dtype))


def test_a_make_fx_graph_holding_parameters_through_a_decomposition():
    """make_fx keeps a module's parameters as real tensor constants; group norm's decomposition
    reshapes its weight inside the fake re-trace, which must accept them."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gn = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        gn.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 4, 5, 6)
    compiled = ln.compile_fx(make_fx(gn)(x), [x], backend="cpp", tune="off")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), gn(x), rtol=1e-5, atol=1e-5)


TIES = {  # (function of x and y, dtype, sizes of x and y)
    "recomputed bf16 sum": (lambda x, y: (x.t() + y).amin(0, keepdim=True), torch.bfloat16, (16, 16), (1,)),
    "fp16 minimum in the kernel that computes it": (lambda x, y: -(x + y + y).amin(0, keepdim=True),
                                                     torch.float16, (64,), (64,)),
    "fp16 maximum of maxima": (lambda x, y: (x.amax(0, keepdim=True).abs() + y).amax(0, keepdim=True),
                               torch.float16, (7, 3), (3,)),
}


@pytest.mark.parametrize("backend, device", [("cpp", "cpu"), pytest.param("triton", "cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the interpreter rounds to bf16 by truncation; a GPU rounds to nearest"))])
@pytest.mark.parametrize("case", TIES)
def test_ties_of_16_bit_values_hold_in_the_backward(backend, device, case):
    """amin's and amax's backward divide the gradient among the positions equal to the extreme.
    Kernels compute 16-bit values and reductions of them in float32; compared unrounded (a sum
    recomputed in the backward, a minimum compared in the kernel that computes it) with the
    rounded extreme, no position matched in some columns: 0 / 0, NaN gradients where eager's are
    finite (Inductor: the same on the first two). Comparisons of 16-bit values round both sides to
    that dtype, as eager compares them."""
    fn, dtype, x_size, y_size = TIES[case]
    torch.manual_seed(0)

    def step(f, x, y):
        x, y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        out = f(x, y)
        out.backward(torch.ones_like(out))
        return out, x.grad, y.grad

    x, y = torch.randn(x_size).to(dtype).to(device), torch.randn(y_size).to(dtype).to(device)
    torch._dynamo.reset()
    got = step(torch.compile(fn, backend="loopnest", options={"backend": backend, "tune": "off"}), x, y)
    for g, w in zip(got, step(fn, x, y)):
        assert g.isfinite().all()
        torch.testing.assert_close(g, w)


LARGE_ROWS = {
    "softmax_x_times_c": lambda x, t: torch.softmax(x * 0.4472135954999579, -1),
    "softmax_x_over_3": lambda x, t: torch.softmax(x / 3.0, -1),
    "softmax_x_over_t": lambda x, t: torch.softmax(x / t, -1),
    "log_softmax_x_times_c": lambda x, t: torch.log_softmax(x * 0.447, -1),
    "cross_entropy_x_times_c": lambda x, t: torch.nn.functional.cross_entropy(
        x * 0.447, torch.arange(x.shape[0]) % x.shape[1], reduction="none"),
}


@pytest.mark.parametrize("case", sorted(LARGE_ROWS))
def test_rows_of_large_values_round_alike_in_every_pass(case):
    """A row's passes compute its values with the same rounding. A max taken over x * c, and an
    exp(x * c - max) that g++ contracted into one fused multiply-add, or a max over x / t and an
    exp pass that divided where the max pass multiplied by a reciprocal, left the row's largest
    term at exp(rounding error of x * c): beyond exp's range once |x * c| passes about 2^31, so
    the row came out NaN where eager's is finite."""
    fn = LARGE_ROWS[case]
    torch.manual_seed(0)
    x, t = torch.randn(64, 40) * 1e10, torch.rand(64, 1) + 0.5
    want = fn(x, t)
    assert torch.isfinite(want).all()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})(x, t)
    torch.testing.assert_close(got, want)


def test_ties_of_a_recomputed_softmax_hold_in_the_backward():
    """amax over a hand-written softmax of repeated rows: the backward recomputes p = e / sum and
    compares it with the forward's amax. Both passes must divide alike (a reciprocal multiply in
    one and a division in the other broke the ties: the gradient was off by 0.13 in 0.3)."""
    torch.manual_seed(0)
    emb, lin = torch.nn.Embedding(6, 27), torch.nn.Linear(27, 10)

    def fn(tokens, w, emb_weight):
        x = torch.nn.functional.embedding(tokens, emb_weight)
        e = (x - x.amax(-1, keepdim=True)).exp()
        return (lin((e / e.sum(-1, keepdim=True)).amax(1)) * w).sum()

    tokens, w = torch.randint(0, 6, (7, 8)), torch.randn(7, 10)
    weight = emb.weight.detach().clone().requires_grad_()
    torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(tokens, w, weight).backward()
    reference = emb.weight.detach().double().requires_grad_()
    with torch.no_grad():
        lin.double()
    fn(tokens, w.double(), reference).backward()
    torch.testing.assert_close(weight.grad.double(), reference.grad, rtol=1e-4, atol=1e-5)
