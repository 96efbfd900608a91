"""Triton candidates compiled ahead in worker processes (backends/triton/prebuild.py) land where
the measuring process's JIT finds them: a cache hit, no second compile.

Without a GPU the kernels compile for sm_90 (``GPUTarget("cuda", 90, 32)``) in a process without
TRITON_INTERPRET, with a driver that only names the target; the "measuring path" is
``_Step.compiled``, the call ``_Step`` makes when a launch first needs its kernel.
"""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
import triton

import loopnest as ln
from loopnest.backends import registry
from loopnest.backends.triton import prebuild as prebuild_module
from loopnest.backends.triton import workers
from loopnest.backends.triton.compile import load_module
from loopnest.backends.triton.params import Strategy
from loopnest.core import settings
from loopnest.scheduler import schedule


def _kernels():
    x = ln.placeholder("x", (64, 96), ln.float32)
    y = ln.placeholder("y", (16, 200), ln.bfloat16)
    e = ln.exp(x - ln.max(x, 1, keepdim=True))
    yf = ln.cast(y, ln.float32)
    graphs = [ln.compile(e / ln.sum(e, 1, keepdim=True)).graph(torch.rand(64, 96)),
              ln.compile([ln.cast(yf / ln.sum(yf, 1, keepdim=True), ln.bfloat16), ln.argmax(yf, 1)]).graph(
                  torch.rand(16, 200, dtype=torch.bfloat16))]
    return [k for i, g in enumerate(graphs) for k in schedule(g, f"g{i}").kernels]


def _hits(backend, kernel, config) -> list[bool]:
    """Whether Triton's cache had each launch's kernel when the measuring path asked for it."""
    hits = []
    triton.knobs.compilation.listener = lambda **event: hits.append(event["cache_hit"])
    try:
        for step in backend.compile([(kernel, config)]).launchers[kernel.name].bind({}).steps:
            step.compiled(step.warmup_args())
    finally:
        triton.knobs.compilation.listener = None
    return hits


def prebuild_cases() -> dict:
    """Prebuild candidates, then ask for them as the measuring path does (run in a process
    without TRITON_INTERPRET, fresh caches); returns what happened, as JSON."""
    from loopnest.backends.triton.compile_worker import TargetOnly

    triton.runtime.driver.set_active(TargetOnly(triton.backends.compiler.GPUTarget("cuda", 90, 32)))
    backend = registry.get("triton")
    assert backend.can_prebuild
    out = {"prebuilt": [], "not_prebuilt": [], "again": [], "other_process": []}
    for kernel in _kernels():
        default = backend.default_config(kernel)
        looped = dataclasses.replace(default, strategy=Strategy.LOOPED, RBLOCK=32)
        backend.prebuild(kernel, looped, 120)
        out["prebuilt"].append(_hits(backend, kernel, looped))
        out["not_prebuilt"].append(_hits(backend, kernel, dataclasses.replace(looped, num_warps=2)))
        program = backend.program(kernel, looped)
        module = load_module(program.source, interpret=False)
        dtypes = {n: b.dtype.torch for n, b in kernel.buffers.items()}
        target = triton.runtime.driver.active.get_current_target()
        out["again"].append(prebuild_module.prebuild(program, module, dtypes, target, 120))
        prebuild_module._DONE.clear()  # as another process would: Triton's cache has it
        out["other_process"].append(prebuild_module.prebuild(program, module, dtypes, target, 120))
    return out


def test_prebuilt_kernels_are_cache_hits_for_the_measuring_path(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "LOOPNEST_CACHE_DIR": str(tmp_path / "ln")}
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import test_triton_prebuild as t; "
            "print(json.dumps(t.prebuild_cases()))")
    proc = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["prebuilt"]) == 2 and all(hits and all(hits) for hits in out["prebuilt"])
    assert all(hits and not any(hits) for hits in out["not_prebuilt"])  # the check can see a miss
    assert out["again"] == [None, None]  # this process prebuilt it: nothing sent
    for reply, hits in zip(out["other_process"], out["prebuilt"]):
        assert reply["ok"] and reply["compiled"] == 0 and reply["cache_hits"] == len(hits)


def test_the_interpreter_has_nothing_to_prebuild():
    backend = registry.get("triton")
    kernel = _kernels()[0]
    with settings.scope(triton_interpret=True):
        assert not backend.can_prebuild
        assert backend.prebuild(kernel, backend.default_config(kernel), 1e-9) is None  # nothing started


def test_a_worker_reports_errors_and_is_killed_past_its_timeout(tmp_path):
    pool = workers.WorkerPool(1)
    request = {"path": str(tmp_path / "missing.py"), "module": "m", "cache_dir": str(tmp_path),
               "target": ["cuda", 90, 32], "launches": []}
    reply = pool.run(request, 60)
    assert not reply["ok"] and "missing.py" in reply["error"]
    assert pool.started == 1 and pool.idle.qsize() == 1  # kept for the next request
    pool.close()
    with pytest.raises(TimeoutError):
        pool.run(request, 1e-4)  # a fresh worker cannot start that fast
    assert pool.started == 0 and pool.idle.qsize() == 0
