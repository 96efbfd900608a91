"""Tuned configs under dynamic shapes: a kernel compiled with symbolic sizes runs, per call size,
the exact winner, its size bucket's winner, or its default; decided once per size, with no
Dynamo recompile."""
from __future__ import annotations

import pytest
import torch

import loopnest
from autotune_support import db_url, fast  # noqa: F401 - db_url is a fixture
from conftest import INTERPRETER_USABLE, assert_close
from loopnest.autotune.keys import kernel_hash_at, tuning_key
from loopnest.backends import registry
from loopnest.backends.cpp.params import CppConfig
from loopnest.core.counters import counters
from loopnest.db.api import open_db

CPP = registry.get("cpp")
A = CppConfig(threads=1, schedule="dynamic", grain=8)   # two configs the default (all cores,
B = CppConfig(threads=1, schedule="guided", grain=1)    # static schedule) is not


def softmax(x):
    return torch.softmax(x, -1)


def layernorm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def cross_entropy(x, t):
    return (torch.logsumexp(x, 1) - x.gather(1, t[:, None]).squeeze(1)).mean()


def compiled_by(fn, args, dynamic: bool, backend: str = "cpp", **options):
    """``torch.compile(fn)`` called on ``args``, and the one graph loopnest compiled for it."""
    recorded = []
    torch._dynamo.reset()
    fn_c = torch.compile(fn, backend="loopnest", dynamic=dynamic,
                         options={"backend": backend, "recorder": recorded.append, **options})
    fn_c(*args)
    return fn_c, recorded


def store(url: str, rows: int, cols: int, config, backend=CPP, fn=softmax) -> None:
    """A winner of ``fn``'s kernel at rows x cols, stored under the key a static compile uses."""
    _, (graph,) = compiled_by(fn, (torch.randn(rows, cols),), dynamic=False, backend=backend.name, tune="off")
    kernel = graph.compiled.schedule.kernels[0]
    key = tuning_key(kernel, backend.name, backend.hardware())
    db = open_db(url)
    db.register_kernel(key.kernel_hash, backend.name, "softmax", kernel.text())
    db.store_winner(key, config.to_json(), 10.0, 12.0, backend.software())


@pytest.mark.parametrize("fn, make", [
    (softmax, lambda r, c: (torch.randn(r, c),)),
    (layernorm, lambda r, c: (torch.randn(r, c), torch.randn(c), torch.randn(c))),
    (cross_entropy, lambda r, c: (torch.randn(r, c), torch.randint(0, c, (r,)))),
])
def test_symbolic_kernel_at_sizes_has_the_static_kernels_key(fn, make):
    args = make(48, 80)
    _, (dynamic,) = compiled_by(fn, args, dynamic=True, tune="off")
    _, (static,) = compiled_by(fn, args, dynamic=False, tune="off")
    env = dynamic.compiled.call_plan(*[a for a in args if a.dim()][:len(dynamic.compiled.inputs)]).env
    symbolic = dynamic.compiled.schedule.kernels
    assert len(symbolic) == len(static.compiled.schedule.kernels)
    for k, s in zip(symbolic, static.compiled.schedule.kernels):
        assert k.structural_hash != s.structural_hash  # the symbolic text names its symbols
        assert kernel_hash_at(k, env) == s.structural_hash


def test_each_call_runs_its_buckets_winner_and_an_untuned_size_its_default(db_url, tmp_path):
    store(db_url, 64, 96, A)      # bucket 64x128
    store(db_url, 250, 120, B)    # bucket 256x128
    counters.reset()
    torch._dynamo.utils.counters.clear()
    x0 = torch.randn(64, 96)
    fn, (graph,) = compiled_by(softmax, (x0,), dynamic=True, tune="db", tuning=fast(db_url))
    compiled, dispatch = graph.compiled, graph.compiled.dispatch
    (kernel,) = compiled.schedule.kernels
    name = kernel.name
    expect = {(64, 96): ("db", "exact", A), (50, 100): ("bucket", "bucket", A),
              (200, 96): ("bucket", "bucket", B), (1000, 96): ("default", "nearest", CppConfig())}
    inputs = {sizes: torch.randn(*sizes) for sizes in expect}
    inputs[(64, 96)] = x0
    for sizes, x in inputs.items():
        assert_close(fn(x), softmax(x), f"softmax {sizes}")
    for sizes, (source, lookup, config) in expect.items():
        decision = compiled.tuning[f"{name}@{sizes[0]}x{sizes[1]}"]
        assert (decision.source, decision.lookup, decision.config) == (source, lookup, config.to_json()), sizes
        assert decision.bucket == (1 << (sizes[0] - 1).bit_length(), 128)
        used = compiled.call_plan(inputs[sizes]).launchers[name]
        if config == CppConfig():
            assert used is compiled.launchers[name]
        else:
            assert used is dispatch.variant(compiled, kernel, config) and used is not compiled.launchers[name]
    assert "winner at 64x96" in compiled.tuning[f"{name}@50x100"].note
    assert compiled.tuning[name].lookup == "dynamic"
    # Dynamo traced once and loopnest compiled one graph; config variants are not graphs.
    assert counters["graphs_compiled"] == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    # Decided once per size: a winner stored now at 1000x96 is not seen by later calls there.
    db = open_db(db_url)
    key = tuning_key(kernel, "cpp", CPP.hardware(), compiled.call_plan(inputs[(1000, 96)]).env)
    db.register_kernel(key.kernel_hash, "cpp", "softmax", kernel.text())
    db.store_winner(key, B.to_json(), 1.0, 2.0, CPP.software())
    for sizes, x in inputs.items():
        assert_close(fn(x), softmax(x), f"softmax {sizes} again")
    assert compiled.tuning[f"{name}@1000x96"].source == "default"
    assert compiled.call_plan(inputs[(1000, 96)]).launchers[name] is compiled.launchers[name]


def test_static_compiles_stay_exact_only(db_url):
    store(db_url, 64, 96, A)
    _, (graph,) = compiled_by(softmax, (torch.randn(50, 100),), dynamic=False, tune="db", tuning=fast(db_url))
    (decision,) = graph.compiled.tuning.values()
    assert (decision.source, decision.lookup) == ("default", "nearest")
    assert graph.compiled.dispatch is None


def test_dynamic_sweep_tunes_each_bucket_once_and_static_compiles_find_its_winners(db_url):
    settings = fast(db_url, trials=2)
    x = torch.randn(64, 96)
    fn, (graph,) = compiled_by(softmax, (x,), dynamic=True, tune="sweep", tuning=settings)
    compiled = graph.compiled
    name = compiled.schedule.kernels[0].name
    swept = compiled.tuning[f"{name}@64x96"]
    assert swept.source == "sweep"
    runs = counters["benchmarks_run"]
    y = torch.randn(40, 120)                      # the same bucket: its winner, no sweep
    assert_close(fn(y), softmax(y), "softmax in the swept bucket")
    near = compiled.tuning[f"{name}@40x120"]
    assert (near.source, near.config) == ("bucket", swept.config)
    assert counters["benchmarks_run"] == runs
    _, (static_graph,) = compiled_by(softmax, (x,), dynamic=False, tune="db", tuning=settings)
    (decision,) = static_graph.compiled.tuning.values()
    assert (decision.source, decision.lookup, decision.config) == ("db", "exact", swept.config)


def test_explain_shows_the_decision_of_each_bucket(db_url):
    store(db_url, 64, 96, A)
    torch._dynamo.reset()
    text = str(loopnest.explain(softmax, torch.randn(50, 100), dynamic=True, backend="cpp", tune="db",
                                tuning=fast(db_url)))
    assert "at 50x100 (bucket 64x128): bucket [bucket]" in text and "winner at 64x96" in text


@pytest.mark.skipif(not INTERPRETER_USABLE, reason="Triton's interpreter fails with numpy >= 2.3")
def test_a_bucket_winner_invalid_at_the_call_sizes_falls_back_to_the_default(db_url):
    """A sum over two symbolic dims: a persistent RBLOCK of 32 covers the 5x6 rows it was tuned
    on, not the 7x8 rows of the same bucket (8x8)."""
    from loopnest.backends.triton.params import Strategy, TritonConfig
    triton = registry.get("triton")

    def rowsum(x):
        return x.sum((1, 2))

    persistent = TritonConfig(XBLOCK=1, RBLOCK=32, num_warps=1, num_stages=1, strategy=Strategy.PERSISTENT)
    _, (static,) = compiled_by(rowsum, (torch.randn(4, 5, 6),), dynamic=False, backend="triton", tune="off")
    kernel = static.compiled.schedule.kernels[0]
    key = tuning_key(kernel, "triton", triton.hardware())
    db = open_db(db_url)
    db.register_kernel(key.kernel_hash, "triton", "rowsum", kernel.text())
    db.store_winner(key, persistent.to_json(), 10.0, 12.0, triton.software())

    fn, (graph,) = compiled_by(rowsum, (torch.randn(4, 6, 5),), dynamic=True, backend="triton", tune="db",
                               tuning=fast(db_url))
    x = torch.randn(4, 7, 8)
    assert_close(fn(x), rowsum(x), "rowsum 7x8")
    tuning = graph.compiled.tuning
    name = kernel.name
    used = tuning[f"{name}@4x6x5"]
    assert (used.source, used.config) == ("bucket", persistent.to_json())
    rejected = tuning[f"{name}@4x7x8"]
    assert (rejected.source, rejected.lookup) == ("default", "bucket-invalid")
    assert "not valid at 4x7x8" in rejected.note and "RBLOCK >= 56" in rejected.note
    assert graph.compiled.call_plan(x).launchers[name] is graph.compiled.launchers[name]
