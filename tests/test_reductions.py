"""Reduction ops: described once (``ir/reductions.py``), rendered by both backends and evaluated by
the interpreter; every op on both backends and the interpreter against eager PyTorch, NaN included.

Triton kernels run in Triton's CPU interpreter (a fixture turns it on for the tests that need it).
"""
import pytest
import torch

import loopnest as ln
from loopnest.backends import registry
from loopnest.backends.cpp import accumulators as cpp
from loopnest.backends.triton import reductions as tri
from loopnest.backends.triton.params import TritonConfig, next_pow2
from loopnest.core import settings
from loopnest.ir import dtypes as dt
from loopnest.ir import interpret
from loopnest.ir.expr import Const
from loopnest.ir.index import product
from loopnest.ir.interpret import interpret_graph
from loopnest.ir.nodes import KReduction
from loopnest.ir.reductions import ELEMENTWISE, REDUCTIONS, Init, Lift, ReduceOp, Rule, identity
from loopnest.pipeline import compile_graph
from loopnest.scheduler import schedule

from conftest import INTERPRETER_USABLE, assert_close

DTYPES = (torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.int8, torch.uint8, torch.bool)
AXES = {"rows": 1, "cols": 0, "full": None}
SHAPE = (6, 20)


def _elements(op: ReduceOp) -> list:
    return [d for d in dt.ALL_DTYPES if d.is_float or op not in (ReduceOp.WELFORD, ReduceOp.EXP_SUM)]


def _kreduction(op: ReduceOp, d: dt.DType) -> KReduction:
    return KReduction("r", op, Const(1, d), d, 0)


# -- the description and its coverage ---------------------------------------------------------
def test_every_reduce_op_is_described_and_rendered_by_both_backends_and_the_interpreter():
    assert set(REDUCTIONS) == set(ReduceOp)
    for op in ReduceOp:
        spec = op.spec
        assert op.num_outputs == len(spec.outputs) >= 1
        suffixes = [c.suffix for c in spec.components]
        assert len(set(suffixes)) == len(suffixes) and set(spec.outputs) <= set(suffixes), op
        for c in spec.components:
            assert (c.combine in ELEMENTWISE) == (spec.joint is None), (op, c)
            if spec.joint is None:  # the tables elementwise components render through
                assert c.combine in cpp._COMBINE and c.lift in cpp._LIFT, (op, c)
                assert c.combine in tri._COMBINE_LANES and c.combine in tri._COMBINE_ROWS, (op, c)
                assert c.combine in interpret._FOLD, (op, c)
            assert c.lift in tri._LIFT, (op, c)
        for d in _elements(op):
            r = _kreduction(op, d)
            a, b = cpp.Accumulator(r, "acc"), cpp.Accumulator(r, "other")
            code = a.declare() + a.declare("8") + a.update("x", "i") + a.combine(b) + a.finish()
            assert all(code) and all(a.result(k) for k in range(op.num_outputs)), (op, d)
            assert (a.simd_clauses() is None) == (spec.joint is not None)
            t = tri.TritonAccumulator(r, "acc")
            lanes = t.lanes("v", "mask", "rindex", "[XBLOCK, RBLOCK]")
            described = {c.suffix for c in spec.state(d) if not (t.nan_extreme and c.lift is Lift.ISNAN)}
            assert set(lanes) == set(t.names()) == described, (op, d)  # Triton's max carries NaN itself
            code = t.merge(t.names("a"), t.names("b")) + t.reduce(t.names("a"), t.names())
            assert all(code) and len(t.results(t.names())) == len(t.result_dtypes()) == op.num_outputs


@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda op: op.value)
def test_both_backends_hold_the_described_state(op):
    """Same components and dtypes in C++ and Triton (Triton holds narrow integers as int32)."""
    for d in _elements(op):
        r = _kreduction(op, d)
        comps = op.spec.state(d)
        parts = cpp.Accumulator(r, "acc").parts()
        t = tri.TritonAccumulator(r, "acc")
        held = {c.suffix: c for c in t.components()}
        assert [s for _, s, _ in parts] == [c.suffix for c in comps]
        # Triton holds the same, less the NaN flag of a float max/min, which its combine carries
        assert list(held) == [c.suffix for c in comps if not (t.nan_extreme and c.lift is Lift.ISNAN)]
        for c, (ctype, _, _) in zip(comps, parts):
            want = c.dtype(d)
            assert ctype == ("int" if c.rule is Rule.FLAG else cpp.ctype(want)), (op, d, c)
            if c.suffix in held:
                assert held[c.suffix].dtype == (dt.int32 if want.itemsize < 4 and not want.is_float else want), (op, d, c)
    if op in (ReduceOp.ANY, ReduceOp.ALL):  # one meaning in both backends: an int32 0/1 flag
        r = _kreduction(op, dt.bool_)
        a = cpp.Accumulator(r, "acc")
        assert a.ty == "int" and tri.TritonAccumulator(r, "acc").value_type == "tl.int32"
        assert a.simd_clauses() == [f"reduction({'|' if op is ReduceOp.ANY else '&'}:acc)"]


@pytest.mark.parametrize("op", [op for op in ReduceOp if op.spec.joint is None], ids=lambda op: op.value)
def test_initial_values_are_identities_of_their_combine(op):
    g = torch.Generator().manual_seed(0)
    for d in _elements(op):
        for c in op.spec.state(d):
            sd = c.dtype(d)
            flag = (torch.rand(16, generator=g) < 0.5).to(sd.torch)
            x = flag if c.rule is Rule.FLAG else _random(16, sd.torch, g)
            start = torch.full_like(x, identity(c.init, sd))
            folded = interpret._FOLD[c.combine](torch.stack([start, x]), 0)
            assert torch.equal(folded, x), (op, d, c)
    assert identity(Init.NO_INDEX, dt.int64) is None


# -- every op against eager PyTorch --------------------------------------------------------------
def _random(shape, dtype, g):
    """Random non-zero values: floats in +-[0.5, 2), integers in +-{1, 2} (1 or 2 when unsigned)."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.8
    if dtype.is_floating_point:
        magnitude = 0.5 + 1.5 * torch.rand(shape, generator=g, dtype=torch.float64)
    else:
        magnitude = 1 + (torch.rand(shape, generator=g) < 0.2).double()
    sign = 1 if dtype == torch.uint8 else torch.where(torch.rand(shape, generator=g) < 0.5, -1, 1)
    return (sign * magnitude).to(dtype)


def _inputs(dtype, axis):
    """Random values with one all-zero and one partly-zero line along ``axis`` (any/all see both);
    floats also in a copy with NaNs (max/min/argmax/argmin must report them)."""
    x = _random(SHAPE, dtype, torch.Generator().manual_seed(1))
    lines = x if axis != 0 else x.t()
    lines[1] = 0
    lines[2, 3] = 0
    if not dtype.is_floating_point:
        return [x]
    nan = x.clone()
    nan[4, 5] = nan[0, 7] = nan[5, 0] = float("nan")
    return [x, nan]


def _program(x, axis):
    """The DSL and the eager version of every reduction op over ``axis``."""
    ln_ops = {"sum": ln.sum(x, axis), "prod": ln.prod(x, axis), "max": ln.max(x, axis), "min": ln.min(x, axis),
              "argmax": ln.argmax(x, axis), "argmin": ln.argmin(x, axis), "any": ln.any(x, axis),
              "all": ln.all(x, axis)}
    dims = {} if axis is None else {"dim": axis}
    eager = {"sum": lambda t: t.sum(**dims), "prod": lambda t: t.prod(**dims), "max": lambda t: t.amax(**dims),
             "min": lambda t: t.amin(**dims), "argmax": lambda t: t.argmax(**dims),
             "argmin": lambda t: t.argmin(**dims),
             "any": lambda t: (t != 0).any(**dims), "all": lambda t: (t != 0).all(**dims)}  # bool for uint8, as ln
    if x.dtype.is_float:
        ln_ops["var"], ln_ops["mean"] = ln.var_mean(x, axis)
        eager["var"] = lambda t: torch.var_mean(t, **dims)[0]
        eager["mean"] = lambda t: torch.var_mean(t, **dims)[1]
    if x.dtype == dt.bool_:  # torch has no bool argmax/argmin
        eager["argmax"] = lambda t: t.to(torch.uint8).argmax(**dims)
        eager["argmin"] = lambda t: t.to(torch.uint8).argmin(**dims)
    return ln_ops, eager


def _check(got, eager, args, what):
    for (name, fn), g in zip(eager.items(), got):
        want = fn(args[0])
        if want.dtype == torch.bfloat16:  # accumulated in float32, rounded once
            torch.testing.assert_close(g, want, atol=2e-2, rtol=1.6e-2, equal_nan=True, msg=f"{what} {name}")
        else:
            assert_close(g, want, f"{what} {name}")


@pytest.fixture
def triton_interpreter(monkeypatch):
    if not INTERPRETER_USABLE:
        pytest.skip("Triton 3.6's interpreter fails on loops over tensors with numpy >= 2.3")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with settings.scope(triton_interpret=True):
        yield


def _triton_configs(strategy):
    def config(k):
        rnumel = product(k.rdomain).as_int()
        if strategy == "persistent":
            return TritonConfig(XBLOCK=2, RBLOCK=next_pow2(rnumel), strategy="persistent")
        if strategy == "looped":
            return TritonConfig(XBLOCK=2, RBLOCK=8, strategy="looped")
        return TritonConfig(XBLOCK=1, RBLOCK=4, strategy="split", SPLIT=3)
    return config


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # numpy on NaN, in Triton's interpreter
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", ["cpp", "triton-persistent", "triton-looped", "triton-split", "interpreter"])
def test_every_reduction_op_matches_eager(backend, dtype, request):
    if backend.startswith("triton"):
        request.getfixturevalue("triton_interpreter")
    for layout, axis in AXES.items():
        x = ln.placeholder("x", SHAPE, dt.to_dtype(dtype))
        ln_ops, eager = _program(x, axis)
        f = ln.compile(list(ln_ops.values()), inputs=[x], backend="cpp", name=f"red_{layout}")
        for args in ([t] for t in _inputs(dtype, axis)):
            what = f"{backend} {dtype} {layout}{' nan' if args[0].isnan().any() else ''}"
            if backend == "cpp":
                got = f(*args)
            elif backend == "interpreter":
                got = interpret_graph(f.graph(*args), args)
            else:
                graph, config = f.graph(*args), _triton_configs(backend.split("-")[1])
                configs = {k.name: config(k) for k in schedule(graph, "red").kernels if k.reductions}
                got = compile_graph(graph, registry.get("triton"), "red", configs)(*args)
            _check(got, eager, args, what)
