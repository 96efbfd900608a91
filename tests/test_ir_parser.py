"""The kernel serial text (scheduler.serial) and its strict reader (ir.parser).

Every kernel of every built-in workload, and of random DSL graphs, is written and read back: the
rebuilt kernel has the same serial text, readable text, structural hash and generated code on
both backends, and on the C++ backend runs to bit-identical outputs. Hostile or broken text is a
ParseError naming line and column, never another exception.
"""
import functools

import loopnest as ln
import pytest
import torch
from conftest import assert_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopnest.autotune.workloads import WORKLOADS
from loopnest.backends import registry
from loopnest.ir.expr import walk
from loopnest.ir.index import Indirect, evaluate
from loopnest.ir.interpret import KernelInterpreter
from loopnest.ir.parser import MAX_DEPTH, MAX_TEXT_CHARS, ParseError
from loopnest.ir.serial import SPLIT_DEPTH
from loopnest.lowering.api import needs_retrace, retrace
from loopnest.lowering.fx_lowering import FxLowering
from loopnest.scheduler.schedule import schedule
from loopnest.scheduler.serial import kernel_text, parse_kernel

BACKENDS = ("cpp", "triton")


@functools.cache
def workload_kernels(name: str) -> tuple:
    """The kernels loopnest makes of workload ``name`` at tiny sizes, named after it."""
    w = WORKLOADS[name]
    inputs = list(w.inputs("tiny"))
    gm = torch.fx.experimental.proxy_tensor.make_fx(w.fn, tracing_mode="fake")(*inputs)
    if needs_retrace(gm):
        gm = retrace(gm, inputs)
    return tuple(schedule(FxLowering(gm).run().graph, name).kernels)


def assert_round_trip(kernel):
    """``kernel`` written and read back is the same kernel, for every reader of it."""
    text = kernel_text(kernel)
    rebuilt = parse_kernel(text)
    assert kernel_text(rebuilt) == text
    assert rebuilt.text() == kernel.text()
    assert rebuilt.structural_hash == kernel.structural_hash
    for name in BACKENDS:
        b = registry.get(name)
        config = b.default_config(kernel)
        assert b.codegen(rebuilt, config) == b.codegen(kernel, config), f"{name} code of {kernel.name} differs"
    return rebuilt


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_workload_kernel_round_trips(workload):
    kernels = workload_kernels(workload)
    assert kernels, f"{workload} made no kernels"
    for k in kernels:
        assert_round_trip(k)


def random_inputs(kernel, gen):
    """Random values for the kernel's inputs (indices inside what they index), NaN-poisoned outputs."""
    bounds = [evaluate(a.bound, {}) for e in kernel.expressions() for n in walk(e)
              for i in getattr(n, "index", ()) for a in i.atoms() if isinstance(a, Indirect)]
    high = min(bounds, default=7)
    buffers = {}
    for name in dict.fromkeys(kernel.inputs + kernel.outputs):
        b = kernel.buffers[name]
        sizes = [evaluate(s, {}) for s in b.sizes]
        strides = [evaluate(s, {}) for s in b.layout.strides]
        if name in kernel.inputs and b.dtype.is_float:
            t = torch.randn(sizes, generator=gen).to(b.dtype.torch)
        elif name in kernel.inputs:
            t = torch.randint(0, 2 if b.dtype.is_bool else high, sizes, generator=gen).to(b.dtype.torch)
        else:
            t = torch.full(sizes, float("nan") if b.dtype.is_float else 3).to(b.dtype.torch)
        buffers[name] = torch.empty_strided(sizes, strides, dtype=b.dtype.torch).copy_(t)
    return buffers


def run(launcher, kernel, buffers):
    bufs = {n: t.clone() for n, t in buffers.items()}
    launcher(bufs, {})
    return [bufs[n] for n in dict.fromkeys(kernel.outputs)]


def as_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_rebuilt_kernels_compile_and_match_bit_for_bit_on_cpp():
    cpp = registry.get("cpp")
    kernels = [k for w in ("logsumexp_ce", "rmsnorm_bf16", "var_mean", "attn_softmax") for k in workload_kernels(w)]
    rebuilt = [parse_kernel(kernel_text(k)) for k in kernels]
    original = cpp.compile([(k, cpp.default_config(k)) for k in kernels]).launchers
    again = cpp.compile([(k, cpp.default_config(k)) for k in rebuilt]).launchers
    gen = torch.Generator().manual_seed(0)
    for k, r in zip(kernels, rebuilt):
        buffers = random_inputs(k, gen)
        want = run(original[k.name], k, buffers)
        got = run(again[r.name], r, buffers)
        reference = run(KernelInterpreter(r), r, buffers)
        for g, w, ref in zip(got, want, reference):
            assert torch.equal(as_bytes(g), as_bytes(w)), f"{k.name}: outputs differ"
            assert not (g.dtype.is_floating_point and g.isnan().any()), f"{k.name} left elements unwritten"
            assert_close(g, ref, f"{k.name} against the interpreter")


# -- random DSL graphs ----------------------------------------------------------------------------
UNARY = {"exp": ln.exp, "neg": lambda a: -a, "abs": abs, "tanh": ln.tanh, "sigmoid": ln.sigmoid,
         "sqrt1": lambda a: ln.sqrt(abs(a) + 1), "f64": lambda a: ln.cast(a, ln.float64),
         "int": lambda a: ln.cast(a * 4, ln.int32) * 2}
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": ln.maximum,
          "where": lambda a, b: ln.where(a > b, a, b * 0.5), "div": lambda a, b: a / (abs(b) + 1)}
REDUCE = {"sum": ln.sum, "max": ln.max, "min": ln.min, "prod": ln.prod, "argmax": ln.argmax,
          "mean": lambda a, axis, keepdim: ln.mean(floating(a), axis, keepdim=keepdim),
          "var": lambda a, axis, keepdim: ln.var_mean(floating(a), axis, keepdim=keepdim)[0],
          "any": lambda a, axis, keepdim: ln.any(a > 0, axis, keepdim=keepdim)}


def floating(a):
    return a if a.dtype.is_float else ln.cast(a, ln.float32)


LEAVES = ("x", "y", "xt", "g", "flat")


def trees(depth):
    leaf = st.sampled_from(LEAVES)
    if depth == 0:
        return leaf
    sub = trees(depth - 1)
    return st.one_of(leaf, st.tuples(st.sampled_from(sorted(UNARY)), sub),
                     st.tuples(st.sampled_from(sorted(BINARY)), sub, sub))


def build(tree, env):
    if isinstance(tree, str):
        return env[tree]
    if len(tree) == 2:
        return UNARY[tree[0]](build(tree[1], env))
    a, b = build(tree[1], env), build(tree[2], env)
    if a.dtype != b.dtype:
        a, b = ln.cast(a, ln.float64), ln.cast(b, ln.float64)
    return BINARY[tree[0]](a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pre=trees(3), post=trees(2), reduce=st.sampled_from(sorted(REDUCE)), axis=st.sampled_from([0, 1, None]),
       rows=st.integers(1, 6), cols=st.integers(1, 9), symbolic=st.booleans(), transposed=st.booleans(),
       dtype=st.sampled_from([ln.float32, ln.float16, ln.bfloat16]))
def test_random_dsl_graphs_round_trip(pre, post, reduce, axis, rows, cols, symbolic, transposed, dtype):
    x = ln.placeholder("x", ("n" if symbolic else rows, cols), dtype)
    y = ln.placeholder("y", (cols,), ln.float32)
    idx = ln.placeholder("idx", ("n" if symbolic else rows, cols), ln.int64)
    env = {"x": ln.cast(x, ln.float32), "y": y, "xt": ln.cast(ln.permute(ln.reshape(x, (-1, cols, 1)), 0, 2, 1),
                                                               ln.float32)[:, 0, :],
           "g": ln.gather(ln.cast(x, ln.float32), 1, idx), "flat": ln.reshape(ln.reshape(y * 2, (cols, 1)), (cols,))}
    inner = ln.broadcast_to(build(pre, env), x.shape)
    red = REDUCE[reduce](inner, axis, keepdim=True)
    out = build(post, {**env, "x": red if red.dtype.is_float else ln.cast(red, ln.float32)})
    X = torch.randn(cols, rows).t() if transposed else torch.randn(rows, cols)
    graph = ln.compile([red, out], inputs=[x, y, idx]).graph(X.to(dtype.torch), torch.randn(cols), torch.randint(0, cols, (rows, cols)))
    kernels = schedule(graph, "rand").kernels
    assert kernels
    for k in kernels:
        assert_round_trip(k)


def test_deep_and_shared_expressions_are_let_bound():
    x = ln.placeholder("x", ("n", 5), ln.float32)
    y = x
    for k in range(100):  # 300 levels: far deeper than the parser's bracket limit if written inline
        y = ln.tanh(y) * 0.5 + (y if k % 10 == 0 else 1.0)
    (kernel,) = schedule(ln.compile(y).graph(torch.randn(3, 5)), "deep").kernels
    text = kernel_text(kernel)
    assert text.count("let $") >= 300 // SPLIT_DEPTH, "deep chains and shared nodes are let-bound"
    assert max(map(len, text.splitlines())) < 2_000
    assert_round_trip(kernel)


# -- rejection -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def text():
    """The serial text of a kernel with an indirect load, two phases and row stores."""
    return kernel_text(workload_kernels("logsumexp_ce")[0])


def rejects(text, *words):
    """parse_kernel(text) raises ParseError (and nothing else) whose message has every word."""
    with pytest.raises(ParseError) as info:
        parse_kernel(text)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"
    return info.value


def test_every_truncation_is_a_parse_error(text):
    for cut in range(len(text) - 1):  # only the final newline is optional
        rejects(text[:cut])


def test_error_names_line_column_and_expectation(text):
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("acc "))
    lines[k] = lines[k].replace("max float32", "max float33")
    err = rejects("\n".join(lines), "unknown dtype 'float33'", "expected one of")
    assert (err.line, err.column) == (k + 1, lines[k].index("float33") + 1)


@pytest.mark.parametrize("old, new, words", [
    ("exp_ftz(", "expo(", ["unknown op 'expo'"]),
    ("acc buf1 max", "acc buf1 maxx", ["unknown reduction 'maxx'"]),
    ("in_arg0_1[p0, r0]", "in_arg9[p0, r0]", ["undeclared buffer 'in_arg9'"]),
    ("in_arg0_1[p0, r0]", "in_arg0_1[p0, r3]", ["loop variable r3 does not exist"]),
    ("in_arg0_1[p0, r0]", "in_arg0_1[p0]", ["rank 2", "1 indices"]),
    ("in_arg0_1[p0, r0]", "in_arg0_1[p0, n]", ["unknown name 'n'"]),
    ("exp_ftz(sub(in_arg0_1[p0, r0], $0))", "exp_ftz(sub(in_arg0_1[p0, r0], $0)", ["expected ')'", "end of line"]),
    ("log(acc(buf8, 0):float32), $0)", "log(acc(buf8, 0):float32), $7)", ["$7 is not defined"]),
    ("let $0", "let $1", ["expected $0"]),
    ("acc(buf8, 0)", "acc(buf99, 0)", ["no 'acc buf99' line"]),
    ("acc(buf8, 0)", "acc(buf8, 1)", ["output 1 of buf8"]),
    ("acc buf8 sum float32 level 1", "acc buf8 sum float32 level 0", ["before its loop has finished"]),
    ("inf:float32", "1.2.3:float32", ["float literal", "'1.2.3'"]),
    ("0.0:float32", "0:float32", ["float literal"]),
    ("96, check", "96.5, check", ["malformed integer"]),
    ('"gather" 1 nowrap', '"gather" 1 maybe', ["'wrap' or 'nowrap'"]),
    ("row phase 0 buf11[p0]", "row phase 0 buf11[r0]", ["reduced loop variable"]),
    ("strides [96, 1]", "strides [96]", ["2 sizes but 1 strides"]),
    ("nodes max_1", "nodes max_1 max_1", ["listed twice"]),
    ("input float32 [64, 96]", "input float32 [p0, 96]", ["loop variable p0 is not allowed"]),
    ("end\n", "end\nend\n", ["expected end of text"]),
    ("end\n", "", ["expected 'buffer', 'let', 'acc', 'store', 'row', 'col' or 'end'"]),
    ("loopnest kernel 1", "loopnest kernel 2", ["loopnest kernel 1"]),
    ("eq(abs(", "eq(abs(1:int64, ", ["abs takes 1 operand(s), got 2"]),
    ("where(eq(abs(acc(buf1, 0):float32), inf:float32), ", "where(abs(acc(buf1, 0):float32), ",
     ["where(cond, a, b) needs a bool cond"]),
    ("add(log(acc(buf8, 0):float32), $0)", "add(index(p0):int64, $0)", ["add mixes dtypes"]),
    ("in_arg1_1[p0], 96", "in_arg0_1[p0, r0], 96", ["integer value, not float32"]),
    ("\nend", "\n\tend", ["unexpected character '\\t'"]),
])
def test_broken_text_is_a_parse_error_naming_the_problem(text, old, new, words):
    assert old in text
    rejects(text.replace(old, new, 1), *words)


def test_hostile_text_is_bounded(text):
    bomb = "neg(" * 100_000
    rejects(text.replace("in_arg0_1[p0, r0]", bomb, 1), f"deeper than {MAX_DEPTH}")
    rejects(text.replace("[p0, r0]", "[" + "(" * 100_000 + "p0", 1), f"deeper than {MAX_DEPTH}")
    rejects(text + " " * MAX_TEXT_CHARS, "exceeds the limit")
    rejects(text.replace("96, check", "9" * 50 + ", check", 1), "number of 50 characters")
    rejects(text.replace("[p0, indirect", "[p0*" + "4294967296*" * 4 + "2, indirect", 1), "coefficient exceeds")
    # let-bound sharing: 60 lines whose printed tree would have 2**60 nodes
    lets = ["let $1 = exp(in_arg0_1[p0, r0])"] + [f"let ${k} = add(${k - 1}, ${k - 1})" for k in range(2, 61)]
    head, tail = text.split("acc buf1", 1)
    rejects(head + "\n".join(lets) + "\nacc buf1" + tail.replace("in_arg0_1[p0, r0]", "$60", 1),
            "nodes when written out")
    rejects(b"loopnest kernel 1\n", "expected text (str)")


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_text_parses_or_is_a_parse_error(text, data):
    """Random edits of real text: either a kernel or a ParseError, never another exception."""
    chars = st.sampled_from(sorted(set(text)) + list("$%/@\"\\\t9-e.:"))
    edited = list(text)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(edited) - 1))
        op = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        if op == "delete":
            del edited[pos]
        elif op == "insert":
            edited.insert(pos, data.draw(chars))
        else:
            edited[pos] = data.draw(chars)
    try:
        kernel = parse_kernel("".join(edited))
    except ParseError:
        return
    kernel_text(kernel)
    _ = kernel.structural_hash


@settings(max_examples=50, deadline=None)
@given(garbage=st.text(max_size=300))
def test_garbage_is_a_parse_error(garbage):
    with pytest.raises(ParseError):
        parse_kernel(garbage)
