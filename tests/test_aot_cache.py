"""The cache above AOTAutograd: warm compiles of plain inference graphs skip AOTAutograd and give
the same results; graphs whose AOTAutograd wrapper does work (mutation, aliasing, training,
symbolic shapes) are never stored."""
import os
import subprocess
import sys

import pytest
import torch

import loopnest.lowering.dynamo as dynamo_backend
from loopnest.core.counters import counters

from conftest import assert_close


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache dir; yields a function returning the AOT cache counters since the start."""
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LOOPNEST_AOT_CACHE", raising=False)
    start = dict(counters)
    yield lambda: {k: counters[k] - start.get(k, 0) for k in ("aot_cache_hits", "aot_cache_misses", "aot_cache_stores")}
    torch._dynamo.reset()


def _compile(fn, *args, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"}, **kw)(*args)


def _no_aot(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("AOTAutograd ran on a cache hit")
    monkeypatch.setattr(dynamo_backend, "aot_autograd", refuse)


def _layernorm_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)) * 0.5


def test_warm_compile_skips_aot_autograd(cache, monkeypatch):
    args = (torch.randn(6, 40), torch.randn(40), torch.randn(40))
    want = _layernorm_gelu(*args)
    assert_close(_compile(_layernorm_gelu, *args), want, "cold")
    assert cache() == {"aot_cache_hits": 0, "aot_cache_misses": 1, "aot_cache_stores": 1}
    _no_aot(monkeypatch)
    assert_close(_compile(_layernorm_gelu, *args), want, "warm")
    assert cache()["aot_cache_hits"] == 1


def test_key_covers_shape_dtype_strides_and_grad_mode(cache):
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    _compile(_layernorm_gelu, x, w, b)
    _compile(_layernorm_gelu, torch.randn(7, 40), w, b)                    # shape
    _compile(_layernorm_gelu, x.double(), w.double(), b.double())          # dtype
    _compile(_layernorm_gelu, torch.randn(40, 6).t(), w, b)                 # strides
    with torch.no_grad():
        _compile(_layernorm_gelu, x, w, b)                                 # grad mode
    assert cache() == {"aot_cache_hits": 0, "aot_cache_misses": 5, "aot_cache_stores": 5}
    _compile(_layernorm_gelu, torch.randn(40, 6).t(), w, b)
    assert cache()["aot_cache_hits"] == 1


def _mutates(x):
    x.mul_(2)
    return x + 1


@pytest.mark.parametrize("fn", [
    _mutates,                                  # input mutation
    lambda x: (x.view(-1), x.sum()),           # output aliases an input
], ids=["mutation", "input_alias"])
def test_graphs_with_wrapper_work_are_not_stored(cache, fn):
    x = torch.randn(5, 8)
    want = fn(x.clone())
    for _ in range(2):
        got = _compile(fn, x.clone())
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert_close(g, w, "not cached")
    assert cache()["aot_cache_stores"] == 0 and cache()["aot_cache_hits"] == 0


def test_view_of_an_intermediate_is_cached_with_its_layout(cache):
    fn = lambda x: (x * 2, (x * 3).t())  # noqa: E731
    x = torch.randn(5, 8)
    cold = _compile(fn, x)
    warm = _compile(fn, x)
    assert cache()["aot_cache_hits"] == 1
    for c, w, e in zip(cold, warm, fn(x)):
        assert_close(w, e, "warm")
        assert w.stride() == c.stride()


def test_training_and_symbolic_graphs_are_not_keyed(cache):
    x = torch.randn(5, 8, requires_grad=True)
    out = _compile(lambda t: (t * t).sum(), x)
    out.backward()
    assert_close(x.grad, 2 * x.detach(), "grad")
    _compile(lambda t: t.sin() + 1, torch.randn(5, 8), dynamic=True)
    y = torch.randn(6, 8)
    torch._dynamo.mark_dynamic(y, 0)
    assert_close(_compile(lambda t: (t * 2).sum(1), y), (y * 2).sum(1), "marked dynamic")
    assert cache() == {"aot_cache_hits": 0, "aot_cache_misses": 0, "aot_cache_stores": 0}


def test_unreadable_entry_is_recomputed(cache, tmp_path):
    args = (torch.randn(6, 40), torch.randn(40), torch.randn(40))
    _compile(_layernorm_gelu, *args)
    (entry,) = (tmp_path / "aot").rglob("*.pkl")
    entry.write_bytes(b"not a pickle")
    assert_close(_compile(_layernorm_gelu, *args), _layernorm_gelu(*args), "recomputed")
    assert cache()["aot_cache_hits"] == 0 and cache()["aot_cache_misses"] == 2


def test_switched_off_by_environment(cache, monkeypatch):
    monkeypatch.setenv("LOOPNEST_AOT_CACHE", "0")
    _compile(_layernorm_gelu, torch.randn(6, 40), torch.randn(40), torch.randn(40))
    assert cache() == {"aot_cache_hits": 0, "aot_cache_misses": 0, "aot_cache_stores": 0}


def test_hit_in_a_new_process(tmp_path):
    code = ("import sys, torch, loopnest; torch.manual_seed(0)\n"
            "x, w = torch.randn(16, 32), torch.randn(32)\n"
            "f = lambda x, w: torch.softmax(x * w, -1).amax(0)\n"
            "out = torch.compile(f, backend='loopnest', options={'backend': 'cpp', 'tune': 'off'})(x, w)\n"
            "torch.testing.assert_close(out, f(x, w))\n"
            "print(loopnest.counters['aot_cache_hits'], loopnest.counters['aot_cache_stores'])\n")
    env = {**os.environ, "LOOPNEST_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    assert [r.stdout.split() for r in runs] == [["0", "1"], ["1", "0"]]


def test_key_ignores_decompositions_other_libraries_register():
    """Libraries imported later (Inductor, quantization) define composite ops that join PyTorch's
    default decompositions; the key of an ATen graph must not change with them."""
    from loopnest.lowering import decompositions as d
    before = d.table_fingerprint()
    lib = torch.library.Library("loopnest_fp_test", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")
    d._table.cache_clear()
    d._fingerprint.cache_clear()
    try:
        assert torch.ops.loopnest_fp_test.twice.default in d._table()
        assert d.table_fingerprint() == before
    finally:
        d._table.cache_clear()
        d._fingerprint.cache_clear()


def _grad_mode_inside(monkeypatch) -> list[bool]:
    """Grad mode as each call of a compiled graph finds it: AOTAutograd's runtime wrapper turns it
    off around an inference graph, loopnest's direct call leaves it as the caller set it."""
    from loopnest.runtime.compiled import CallPlan

    seen, run = [], CallPlan.run
    monkeypatch.setattr(CallPlan, "run", lambda self, args, poison: seen.append(
        torch.is_grad_enabled()) or run(self, args, poison))
    return seen


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_plain_inference_graphs_are_called_without_the_wrapper(cache, monkeypatch, dynamic):
    monkeypatch.setenv("LOOPNEST_AOT_CACHE", "0")  # a cold compile: AOTAutograd runs and returns its wrapper
    seen = _grad_mode_inside(monkeypatch)
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend="loopnest", dynamic=dynamic,
                      options={"backend": "cpp", "tune": "off"})
    for n in (3, 5, 8) if dynamic else (3, 3):
        x = torch.randn(n, 2 * n)
        assert_close(f(x), torch.softmax(x * 2, -1), f"{n} rows")
    assert seen and all(seen)  # grad mode on, as the caller left it: no wrapper in between


def test_graphs_the_wrapper_works_for_keep_it(cache, monkeypatch):
    seen = _grad_mode_inside(monkeypatch)
    torch._dynamo.reset()
    f = torch.compile(_mutates, backend="loopnest", dynamic=True, options={"backend": "cpp", "tune": "off"})
    for n in (3, 5):
        x = torch.randn(n, 4)
        want = _mutates(x.clone())
        assert_close(f(x), want, "result")
        assert_close(x, want - 1, "mutated input")  # the wrapper applies the mutation
    assert seen and not any(seen)


def test_under_autocast_a_warm_graph_matches_eager(cache):
    """Under autocast a warm compile calls the stored graph without AOTAutograd's wrapper (which
    turns autocast off around the graph): the graph was traced with autocast's casts in it, so
    the extern matmul, cast again at the call, gets bf16 operands either way and the results
    (dtype included) match eager's, cold and warm."""
    def fn(a, b):
        return torch.softmax(a @ b, -1) * 2

    a, b = torch.randn(8, 16), torch.randn(16, 12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = fn(a, b)
        cold = _compile(fn, a, b)
        warm = _compile(fn, a, b)
    assert cache()["aot_cache_hits"] == 1
    for got in (cold, warm):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: (x.sum(1), x * 2),
                                lambda x: ((y := torch.exp(x)), x + 1, y)], ids=["one", "two", "repeated"])
def test_static_graphs_under_dynamo_check_their_inputs_once(cache, monkeypatch, fn):
    """Dynamo's guards fix the dtype, device, sizes and strides of every argument, so a static
    plain inference graph checks them only on its first call (``LoweredGraph.guarded_call``),
    and returns what eager returns, however its outputs repeat."""
    from loopnest.runtime.compiled import CompiledGraph

    checks, check, accepts = [], CompiledGraph.check_inputs, CompiledGraph._accepts
    monkeypatch.setattr(CompiledGraph, "check_inputs", lambda self, args: checks.append(1) or check(self, args))
    monkeypatch.setattr(CompiledGraph, "_accepts", lambda self, args: checks.append(2) or accepts(self, args))
    torch._dynamo.reset()
    f = torch.compile(fn, backend="loopnest", dynamic=False, options={"backend": "cpp", "tune": "off"})
    for seed in range(3):
        x = torch.randn(5, 7, generator=torch.Generator().manual_seed(seed))
        got, want = f(x), fn(x)
        for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
            assert_close(g, w, f"call {seed}")
    assert checks == [1]  # the first call's full check, no per-call dtype/device test after it
