"""The reference interpreter (ir/interpret.py): every op covered, agrees with eager torch and C++.

The interpreter is the tuner's oracle when no eager result exists, so it is checked two ways:
graph by graph (``interpret_graph``, no fusion) against eager PyTorch, and kernel by kernel
(``KernelInterpreter`` as a launcher in the compiled graph) against the same graph's C++ build.
"""
from __future__ import annotations

import pytest
import torch

import loopnest as ln
from loopnest.backends import registry
from conftest import assert_close
from loopnest.ir.interpret import OPS, KernelInterpreter, interpret_graph
from loopnest.ir.ops import Op
from loopnest.pipeline import compile_graph


def test_every_scalar_op_has_an_interpretation():
    missing = set(Op) - set(OPS) - {Op.CAST}
    assert not missing, f"ir/interpret.py OPS lacks {sorted(o.name for o in missing)}"


def _float_program():
    x = ln.placeholder("x", ("N", 40), ln.float32)
    y = ln.placeholder("y", (40,), ln.float32)
    ax = ln.abs(x) + 0.1
    exprs = [x + y, x - y, x * y, x / y, x // y, x % y, ln.pow(ax, y), ln.exp(x), ln.log(ax), ln.sqrt(ax),
             ln.rsqrt(ax), ln.sin(x), ln.cos(x), ln.tanh(x), ln.sigmoid(x), ln.erf(x), ln.maximum(x, y),
             ln.minimum(x, y), ln.where(x > y, x, y), ln.cast(x * 3, ln.int32), ln.cast(x, ln.bfloat16),
             (x > 0) & (y < 0), ~(x > y)]
    return [x, y], exprs


def _reduction_program():
    x = ln.placeholder("x", ("N", 40), ln.float32)
    var, mean = ln.var_mean(x, 1)
    e = ln.exp(x - ln.max(x, 1, keepdim=True))
    exprs = [ln.sum(x, 1), x.sum(0), ln.prod(x, 1), ln.max(x, 0), ln.min(x), ln.mean(x, 1), ln.argmax(x, 1),
             ln.argmin(x, 0), ln.any(x > 2, 1), ln.all(x > -2, 1), var, mean, e / e.sum(1, keepdim=True)]
    return [x], exprs


def _int_program():
    a = ln.placeholder("a", ("N", 40), ln.int32)
    b = ln.placeholder("b", (40,), ln.int32)
    exprs = [a + b, a * b, a // b, a % b, a & b, a | b, a ^ b, ln.maximum(a, b), ln.abs(a), a.sum(1),
             ln.max(a, 1)]
    return [a, b], exprs


def _inputs(placeholders, rows: int):
    """Random inputs; symbolic dimensions get ``rows``."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for p in placeholders:
        shape = tuple(rows if s.as_int() is None else s.as_int() for s in p.shape)
        if p.dtype.is_float:
            t = torch.randn(shape, generator=gen)
        else:
            t = torch.randint(1, 10, shape, generator=gen, dtype=torch.int32)  # nonzero divisors for // and %
            t = torch.where(torch.rand(shape, generator=gen) < 0.5, -t, t)
        out.append(t.to(p.dtype.torch))
    return out


@pytest.mark.parametrize("program", [_float_program, _reduction_program, _int_program])
def test_interpreter_matches_cpp_kernel_by_kernel_and_graph_by_graph(program):
    placeholders, exprs = program()
    fn = ln.compile(exprs, inputs=placeholders)
    args = _inputs(placeholders, rows=23)
    expected = fn(*args)
    graph = fn.graph(*args)
    for k, (got, want) in enumerate(zip(interpret_graph(graph, args), expected)):
        assert_close(got, want, f"interpret_graph output {k}")
    compiled = compile_graph(graph, registry.get("cpp"))
    interpreted = compiled.with_launchers({k.name: KernelInterpreter(k) for k in compiled.schedule.kernels})
    for k, (got, want) in enumerate(zip(interpreted(*args), expected)):
        assert_close(got, want, f"KernelInterpreter output {k}")


def test_arg_reductions_take_first_extreme_and_nan():
    x = ln.placeholder("x", (3, 5), ln.float32)
    fn = ln.compile([ln.argmax(x, 1), ln.argmin(x, 1)])
    X = torch.tensor([[1, 3, 3, 0, 0], [2, float("nan"), 5, float("nan"), 1], [7, 7, 7, 7, 7.0]])
    got = interpret_graph(fn.graph(X), [X])
    assert got[0].tolist() == torch.argmax(X, 1).tolist() == [1, 1, 0]
    assert got[1].tolist() == torch.argmin(X, 1).tolist() == [3, 1, 0]


def test_gather_indices_and_symbolic_sizes():
    x = ln.placeholder("x", ("N", 16), ln.float32)
    t = ln.placeholder("t", ("N",), ln.int64)
    picked = ln.gather(x, 1, ln.reshape(t, ("N", 1)))
    fn = ln.compile([picked, ln.sum(picked, 0)])
    X, T = torch.randn(9, 16), torch.randint(0, 16, (9,))
    got = interpret_graph(fn.graph(X, T), [X, T])
    want = X.gather(1, T[:, None])
    assert_close(got[0], want, "gather")
    assert_close(got[1], want.sum(0), "sum of gathered")
