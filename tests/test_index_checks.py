"""Indices read from tensors are checked as eager checks them, op by op.

``x[t]`` wraps ``[-size, 0)`` and raises outside ``[-size, size)``; ``gather``, ``index_select``,
``embedding`` and ``ln.gather`` raise for anything outside ``[0, size)``. On the CPU the error
names the op, the index and the size; Triton kernels assert (checked here in the interpreter).
Out-of-range reads could crash the process, so those cases run in a subprocess.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp import compile as cc
from loopnest.backends.cpp.backend import CppBackend
from loopnest.core import settings
from conftest import INTERPRETER_USABLE, assert_close

OPS = {  # name -> (function of (x, t), index tensor shape builder)
    "index": lambda x, t: x[t] * 2,
    "index_dim1": lambda x, t: x[:, t] + 1,
    "index_select": lambda x, t: torch.index_select(x, 1, t) * 2,
    "embedding": lambda x, t: F.embedding(t, x) * 2,
    "gather": lambda x, t: x.gather(1, t[:, None].expand(-1, 3)) * 2,
    "cross_entropy": lambda x, t: F.cross_entropy(x, t),
}


def _compiled(fn):
    return torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"}, dynamic=False)


def _in_range(op: str, rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    """Random valid indices for ``op`` (negative ones where the op wraps)."""
    size = {"index": rows, "embedding": rows}.get(op, cols)
    lo = -size if op in ("index", "index_dim1") else 0
    n = rows if op in ("gather", "cross_entropy") else 5
    return torch.randint(lo, size, (n,), generator=gen)


@pytest.mark.parametrize("op", sorted(OPS))
def test_valid_indices_match_eager(op):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(7, 9, generator=gen)
    t = _in_range(op, 7, 9, gen)
    assert_close(_compiled(OPS[op])(x, t), OPS[op](x, t))


# Each case: op, bad index, size of the indexed dimension (x is 4 x 6).
BAD = [("index", 4, 4), ("index", -5, 4), ("index", 1 << 40, 4), ("index_dim1", 6, 6), ("index_dim1", -7, 6),
       ("index_select", -1, 6), ("index_select", 6, 6), ("embedding", -1, 4), ("embedding", 4, 4),
       ("gather", -1, 6), ("gather", 6, 6), ("gather", -(1 << 40), 6), ("cross_entropy", 6, 6),
       ("cross_entropy", -1, 6)]

BAD_SCRIPT = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
import test_index_checks as T
results = []
for op, value, size in json.loads(sys.argv[1]):
    x = torch.randn(4, 6)
    n = 4 if op in ("gather", "cross_entropy") else 3
    t = torch.zeros(n, dtype=torch.int64)
    t[1] = value
    outcome = {}
    for name, fn in (("eager", T.OPS[op]), ("loopnest", T._compiled(T.OPS[op]))):
        try:
            fn(x, t)
            outcome[name] = None
        except Exception as e:
            outcome[name] = [type(e).__name__, [c.__name__ for c in type(e).__mro__], str(e)]
    results.append(outcome)
print(json.dumps(results))
"""


def test_out_of_range_indices_raise_like_eager_naming_op_index_and_size():
    out = subprocess.run([sys.executable, "-c", BAD_SCRIPT, json.dumps(BAD), str(_tests_dir())],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for (op, value, size), got in zip(BAD, results):
        assert got["eager"] is not None, (op, value)  # the case is bad for eager too
        assert got["loopnest"] is not None, f"{op} with index {value}: no error"
        name, mro, message = got["loopnest"]
        assert got["eager"][0] in mro, (op, value, got)  # an exception eager's except clause catches
        base_op = "index" if op == "index_dim1" else "gather" if op == "cross_entropy" else op
        assert message.startswith(f"{base_op}: index {value} is out of bounds"), message
        assert f"with size {size}" in message, message


DSL_SCRIPT = """
import sys, torch, loopnest as ln
backend = sys.argv[1]
x = ln.placeholder("x", (5, "M"), ln.float32)
t = ln.placeholder("t", (5, 2), ln.int32)
f = ln.compile(ln.gather(x, 1, t) * 2, backend=backend)
X = torch.randn(5, 7)
good = torch.randint(0, 7, (5, 2), dtype=torch.int32)
assert torch.equal(f(X, good), X.gather(1, good.long()) * 2)
for bad in (7, -1, 1 << 30):
    wrong = good.clone()
    wrong[3, 1] = bad
    try:
        f(X, wrong)
        print("no error for", bad)
    except Exception as e:
        print(type(e).__name__, str(e).replace(chr(10), " ")[:300])
empty = ln.compile(ln.gather(x, 1, t), backend=backend)
try:
    empty(torch.randn(5, 0), good)
    print("no error for an empty dimension")
except Exception as e:
    print(type(e).__name__, str(e).replace(chr(10), " ")[:300])
"""


def test_dsl_gather_follows_torch_gather_on_cpp():
    out = subprocess.run([sys.executable, "-c", DSL_SCRIPT, "cpp"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4, lines
    for line, bad in zip(lines, (7, -1, 1 << 30)):
        assert line.startswith(f"KernelIndexError gather: index {bad} is out of bounds for dimension 1 with "
                               f"size 7"), line
    assert "is out of bounds for dimension 1 with size 0" in lines[3], lines[3]  # any index: none fits


@pytest.mark.skipif(not INTERPRETER_USABLE, reason="Triton's interpreter needs numpy < 2.3")
def test_dsl_gather_asserts_in_triton_interpreter():
    out = subprocess.run([sys.executable, "-c", DSL_SCRIPT, "triton"], capture_output=True, text=True,
                         timeout=600, env={**__import__("os").environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4, lines
    for line in lines:
        assert "gather: index out of range [0, " in line and "for dimension 1" in line, line


def _kernels(fn, *args):
    compiled = ln.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")
    return compiled.lowered.compiled.schedule.kernels, compiled


def test_switch_turns_checks_off_in_code_and_cache_key():
    x, t = torch.randn(8, 16), torch.tensor([3, -1, 0, 7])
    fn = OPS["index"]
    (kernel,), compiled = _kernels(fn, x, t)
    backend = CppBackend()
    config = backend.default_config(kernel)
    with settings.scope(index_checks=True):
        checked = backend.module_source([(kernel, config)])
    with settings.scope(index_checks=False):
        unchecked = backend.module_source([(kernel, config)])
        (_, off) = _kernels(fn, x, t)
        assert_close(off(x, t), fn(x, t))  # negative positions still wrap for x[t]
    assert "ln_fail(ln_err" in checked and "ln_fail(ln_err" not in unchecked
    assert cc.library_path(checked, "g++") != cc.library_path(unchecked, "g++")


def test_checks_stay_out_of_inner_loops():
    """Cross-entropy reads x[row, target[row]]: the check runs once per row, before the loop over
    the row; an embedding row's index is checked before the vectorized loop over its columns. An
    index that varies inside a vectorized loop (an elementwise gather, a sum of gathered values)
    is tracked by simd min/max reductions and tested after the loop: no branch inside it."""
    full = (torch.randn(8, 64), torch.randint(0, 64, (8, 64)))
    for fn, args in ((OPS["cross_entropy"], (torch.randn(8, 64), torch.randint(0, 64, (8,)))),
                     (OPS["embedding"], (torch.randn(10, 64), torch.randint(0, 10, (6,)))),
                     (lambda x, t: x.gather(1, t) * 2, full), (lambda x, t: x.gather(1, t).sum(1), full)):
        kernels, _ = _kernels(fn, *args)
        backend = CppBackend()
        sources = [backend.codegen(k, backend.default_config(k)) for k in kernels]
        checked = [s for s in sources if "ln_fail(" in s]
        assert checked, sources
        for source in checked:
            lines = source.splitlines()
            fail = next(line for line in lines if "ln_fail(" in line)
            inner = max((line for line in lines if line.strip().startswith("for (")), key=_indent)
            assert _indent(fail) <= _indent(inner), source  # not inside the innermost loop
            if fn is not OPS["cross_entropy"] and fn is not OPS["embedding"]:
                assert "reduction(min:" in source and "reduction(max:" in source, source


VARYING_SCRIPT = """
import torch, loopnest as ln
x = ln.placeholder("x", (4, 6), ln.float32)
t = ln.placeholder("t", (4, 6), ln.int64)
f = ln.compile([ln.gather(x, 1, t) * 2, ln.sum(ln.gather(x, 1, t), 1)])
good = torch.randint(0, 6, (4, 6))
for bad in ((2, 3, 9), (1, 0, -3)):
    wrong = good.clone()
    wrong[bad[0], bad[1]] = bad[2]
    try:
        f(torch.randn(4, 6), wrong)
        print("no error")
    except IndexError as e:
        print(str(e))
"""


def test_index_checked_inside_a_vectorized_loop_reports_the_bad_value():
    out = subprocess.run([sys.executable, "-c", VARYING_SCRIPT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("gather: index 9 is out of bounds for dimension 1 with size 6"), lines
    assert lines[1].startswith("gather: index -3 is out of bounds for dimension 1 with size 6"), lines


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _tests_dir():
    from pathlib import Path
    return Path(__file__).parent


GPU_SCRIPT = """
import sys, torch, loopnest as ln
from loopnest.backends import registry
from loopnest.backends.triton.compile import compile_ahead, load_module
from loopnest.core import settings
from loopnest.scheduler import schedule
x = ln.placeholder("x", (16, 40), ln.float32)
t = ln.placeholder("t", (16, 3), ln.int64)
graph = ln.compile(ln.gather(x, 1, t) * 2).graph(torch.randn(16, 40), torch.zeros(16, 3, dtype=torch.int64))
backend = registry.get("triton")
for checks in (True, False):
    with settings.scope(index_checks=checks, triton_interpret=False):
        (kernel,) = schedule(graph, "g").kernels
        program = backend.program(kernel, backend.default_config(kernel))
        dtypes = {name: buf.dtype.torch for name, buf in kernel.buffers.items()}
        cubins = [c.asm["cubin"] for c in compile_ahead(program, load_module(program.source, interpret=False), dtypes)]
    print(checks, "tl.device_assert(" in program.source, "@triton.jit(debug=True)" in program.source, all(cubins))
"""


def test_gpu_source_device_asserts_and_compiles_for_sm90():
    """The GPU flavour checks with ``tl.device_assert`` in a ``debug=True`` function (none when the
    checks are off), and compiles down to a cubin (no GPU needed)."""
    env = {**__import__("os").environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run([sys.executable, "-c", GPU_SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert out.stdout.split() == ["True", "True", "True", "True", "False", "False", "False", "True"], out.stdout


def test_reference_interpreter_checks_like_the_kernels():
    from loopnest.ir.interpret import interpret_graph

    x = ln.placeholder("x", ("N", 16), ln.float32)
    t = ln.placeholder("t", ("N", 1), ln.int64)
    fn = ln.compile(ln.gather(x, 1, t))
    X, T = torch.randn(5, 16), torch.randint(0, 16, (5, 1))
    assert_close(interpret_graph(fn.graph(X, T), [X, T])[0], X.gather(1, T))
    T[2, 0] = 16
    with pytest.raises(IndexError, match="gather: index 16 is out of bounds for dimension 1 with size 16"):
        interpret_graph(fn.graph(X, T), [X, T])


def test_the_error_of_the_op_eager_runs_first_wins():
    """A fused kernel meets the division by zero (dividing by the safe value the out-of-range
    gather read) before it tests the gather's indices; eager fails at the gather, and so must we."""
    x = torch.tensor([[0, 5, 7], [0, 2, 9]], dtype=torch.int32)
    t = torch.tensor([[1, 3, 2], [0, 1, 2]])
    y = torch.tensor([[4, 8, 12], [6, 6, 6]], dtype=torch.int32)

    def f(x, t, y):
        return y // x.gather(1, t)

    with pytest.raises(RuntimeError, match="index 3 is out of bounds"):
        f(x, t, y)
    with pytest.raises(IndexError, match=r"gather: index 3 is out of bounds for dimension 1 with size 3"):
        _compiled(f)(x, t, y)


def _scatters(x, t, s):
    rows = torch.cat([t, t[:2]]).remainder(4)[None, :]  # one row position per column of x
    return x.scatter(1, t[:, None], -1.0) * 2, torch.zeros_like(x).scatter(0, rows, s) + 1


def test_one_position_scatters_are_kernels_matching_eager():
    """scatter with one index per row along its dim (nll_loss's backward one-hot) is a ``where``
    in the kernel, not an ATen call, and checks its index as eager does."""
    x, s = torch.randn(4, 6), torch.randn(4, 6)
    t = torch.tensor([5, 0, 2, 3])
    info = ln.explain(_scatters, x, t, s)
    assert not info.fallbacks, info.fallbacks
    for got, want in zip(_compiled(_scatters)(x, t, s), _scatters(x, t, s)):
        assert_close(got, want, "scatter")
    with pytest.raises(RuntimeError, match="index 6 is out of bounds"):
        _scatters(x, torch.tensor([6, 0, 2, 3]), s)
    with pytest.raises(IndexError, match=r"scatter: index 6 is out of bounds for dimension 1 with size 6"):
        _compiled(_scatters)(x, torch.tensor([6, 0, 2, 3]), s)


def test_cross_entropy_backward_has_no_aten_scatter():
    x = torch.randn(8, 50, requires_grad=True)
    t = torch.randint(0, 50, (8,))
    graphs = []
    f = torch.compile(lambda x, t: F.cross_entropy(x, t), backend="loopnest",
                      options={"backend": "cpp", "tune": "off", "recorder": graphs.append})
    f(x, t).backward()
    want = torch.autograd.grad(F.cross_entropy(x, t), x)[0]
    assert_close(x.grad, want, "grad")
    assert [fb for g in graphs for fb in g.program.fallbacks] == []
