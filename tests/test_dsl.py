"""Every DSL op against eager PyTorch on the C++ backend (outputs NaN-poisoned by conftest).

Whole programs (softmax, norms, argmax ties and NaN, gather, strided inputs) run on every backend
in tests/test_backends.py.
"""
import pytest
import torch

import loopnest as ln
from conftest import assert_close

FLOATS = [ln.float32, ln.float64, ln.float16, ln.bfloat16]
INTS = [ln.int8, ln.int16, ln.int32, ln.int64, ln.uint8]


def run_pairs(pairs, placeholders, tensors, backend="cpp"):
    """Compile every DSL expression of ``pairs`` into one graph and compare with its torch twin."""
    f = ln.compile([p[0] for p in pairs], inputs=placeholders, backend=backend)
    got = f(*tensors)
    for k, ((_, ref, label), g) in enumerate(zip(pairs, got)):
        assert_close(g, ref, f"{label} (output {k})")


def float_cases(x, y, A, B):
    """(DSL expression, eager result, label) for every floating-point DSL op."""
    absA, absx = A.abs() + 0.1, ln.abs(x) + 0.1
    return [
        (x + y, A + B, "add"), (x - y, A - B, "sub"), (x * y, A * B, "mul"), (x / y, A / B, "div"),
        (x // y, A // B, "floordiv"), (x % y, A % B, "mod"), (x ** 2, A ** 2, "pow2"), (-x, -A, "neg"),
        (2.0 - x, 2.0 - A, "rsub"), (3 * x, 3 * A, "rmul"), (1 / absx, 1 / absA, "rdiv"),
        (x < y, A < B, "lt"), (x <= y, A <= B, "le"), (x > y, A > B, "gt"), (x >= y, A >= B, "ge"),
        (x == y, A == B, "eq"), (x != y, A != B, "ne"), (abs(x), A.abs(), "abs"),
        (ln.exp(x), A.exp(), "exp"), (ln.log(absx), absA.log(), "log"), (ln.sqrt(absx), absA.sqrt(), "sqrt"),
        (ln.rsqrt(absx), absA.rsqrt(), "rsqrt"), (ln.sin(x), A.sin(), "sin"), (ln.cos(x), A.cos(), "cos"),
        (ln.tanh(x), A.tanh(), "tanh"), (ln.sigmoid(x), A.sigmoid(), "sigmoid"), (ln.erf(x), A.erf(), "erf"),
        (ln.pow(absx, y), absA.pow(B), "pow"), (ln.maximum(x, y), torch.maximum(A, B), "maximum"),
        (ln.minimum(x, y), torch.minimum(A, B), "minimum"), (ln.where(x > 0, x, y), torch.where(A > 0, A, B), "where"),
        (ln.where(x > 0, x, 0.5), torch.where(A > 0, A, 0.5), "where_scalar"),
        (ln.cast(x, ln.int32), A.to(torch.int32), "cast_int"), (ln.cast(x, ln.float64), A.double(), "cast_f64"),
        (ln.cast(x, ln.bool), A.bool(), "cast_bool"),
        ((x > 0) & (y > 0), (A > 0) & (B > 0), "and"), ((x > 0) | (y > 0), (A > 0) | (B > 0), "or"),
        (~(x > 0), ~(A > 0), "not"),
    ]


def reduction_cases(x, A):
    """(DSL expression, eager result, label) for every reduction, as functions and methods."""
    var, mean = ln.var_mean(x, 1)
    var0, mean0 = ln.var_mean(x, (0, 1), correction=0, keepdim=True)
    tv, tm = torch.var_mean(A, 1)
    tv0, tm0 = torch.var_mean(A, (0, 1), correction=0, keepdim=True)
    return [
        (ln.sum(x, 1), A.sum(1), "sum"), (x.sum(0, keepdim=True), A.sum(0, keepdim=True), "sum_keep"),
        (ln.sum(x), A.sum(), "sum_all"), (ln.prod(x, 1), A.prod(1), "prod"), (ln.max(x, 0), A.amax(0), "max"),
        (x.min(), A.amin(), "min_all"), (ln.mean(x, (0, 1)), A.mean((0, 1)), "mean"),
        (x.mean(-1, keepdim=True), A.mean(-1, keepdim=True), "mean_keep"),
        (ln.argmax(x, 1), A.argmax(1), "argmax"), (x.argmin(), A.argmin(), "argmin_all"),
        (ln.argmax(x, 0, keepdim=True), A.argmax(0, keepdim=True), "argmax_keep"),
        (ln.any(x > 1, 1), (A > 1).any(1), "any"), ((x > -1).all(), (A > -1).all(), "all"),
        (var, tv, "var"), (mean, tm, "var_mean.mean"), (var0, tv0, "var_all"), (mean0, tm0, "mean_all"),
    ]


def view_cases(x, A):
    return [
        (x.T + 0, A.T, "T"), (x[1:4, ::2], A[1:4, ::2], "slice"), (x[..., None], A[..., None], "newaxis"),
        (x[2], A[2], "select"), (x[-1, 3:], A[-1, 3:], "negative_index"),
        (ln.reshape(x, (7, 5)), A.reshape(7, 5), "reshape"), (ln.reshape(x, (-1,)), A.reshape(-1), "flatten"),
        (ln.permute(ln.reshape(x, (5, 7, 1)), (2, 0, 1)), A.reshape(5, 7, 1).permute(2, 0, 1), "permute"),
        (ln.broadcast_to(x[:, :1], (5, 7)), A[:, :1].expand(5, 7), "broadcast_to"),
    ]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_float_ops_reductions_and_views(dtype):
    torch.manual_seed(0)
    x, y = ln.placeholder("x", (5, 7), dtype), ln.placeholder("y", (7,), dtype)
    A, B = torch.randn(5, 7, dtype=dtype.torch), torch.randn(7, dtype=dtype.torch)
    cases = float_cases(x, y, A, B) + reduction_cases(x, A) + view_cases(x, A)
    run_pairs(cases, [x, y], [A, B])


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_integer_ops(dtype):
    torch.manual_seed(0)
    lo = 0 if dtype == ln.uint8 else -20
    x, y = ln.placeholder("x", (5, 7), dtype), ln.placeholder("y", (7,), dtype)
    A = torch.randint(lo, 20, (5, 7), dtype=dtype.torch)
    B = torch.randint(1, 9, (7,), dtype=dtype.torch)
    cases = [
        (x + y, A + B, "add"), (x - y, A - B, "sub"), (x * y, A * B, "mul"), (x // y, A // B, "floordiv"),
        (x % y, A % B, "mod"), (x < y, A < B, "lt"), (x == y, A == B, "eq"), (x & y, A & B, "bitand"),
        (x | y, A | B, "bitor"), (x ^ y, A ^ B, "bitxor"), (~x, ~A, "bitnot"), (x / y, A / B, "truediv"),
        (x * 2.5, A * 2.5, "mul_float_scalar"), (x + 1, A + 1, "add_int_scalar"), (x ** 2, A ** 2, "pow"),
        (ln.maximum(x, y), torch.maximum(A, B), "maximum"), (ln.where(x > 0, x, y), torch.where(A > 0, A, B), "where"),
        (ln.cast(x, ln.float32), A.float(), "cast"), (ln.sum(x, 1), A.sum(1), "sum"), (ln.max(x, 0), A.amax(0), "max"),
        (ln.argmax(x, 1), A.argmax(1), "argmax"), (ln.prod(x, 0), A.prod(0), "prod"), (abs(x), A.abs(), "abs"),
    ]
    if dtype != ln.uint8:
        cases.append((-x, -A, "neg"))
    run_pairs(cases, [x, y], [A, B])


def test_bool_ops():
    x = ln.placeholder("x", (5, 7), ln.bool)
    A = torch.rand(5, 7) > 0.5
    run_pairs([(x & ~x, A & ~A, "and"), (x | x, A | A, "or"), (x ^ x, A ^ A, "xor"), (ln.any(x, 1), A.any(1), "any"),
               (ln.all(x), A.all(), "all"), (ln.sum(x), A.sum(), "sum"), (x + x, A + A, "add"),
               (ln.cast(x, ln.float32) + 1, A.float() + 1, "cast")], [x], [A])


def test_single_output_returns_tensor_and_list_returns_tuple():
    x = ln.placeholder("x", (3,), ln.float32)
    assert isinstance(ln.compile(x + 1)(torch.randn(3)), torch.Tensor)
    out = ln.compile([x + 1])(torch.randn(3))
    assert isinstance(out, tuple) and len(out) == 1


def test_outputs_never_alias_inputs():
    x = ln.placeholder("x", (3, 4), ln.float32)
    A = torch.randn(3, 4)
    out = ln.compile([x, x.T])(A)
    assert out[0].data_ptr() != A.data_ptr() and torch.equal(out[0], A) and torch.equal(out[1], A.T)
