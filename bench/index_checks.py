"""The cost of index checks: the gather rows of the suites with checks on and off, side by side.

Each workload is compiled twice through ``torch.compile(backend="loopnest", tune="off")``: once
with ``LOOPNEST_INDEX_CHECKS`` on (the default) and once off. Timings are interleaved round by
round, so the machine's noise hits both columns alike; the table gives the median ms of each and
the checked/unchecked ratio (goal: at most 1.03).

Run: python bench/index_checks.py [--backend cpp|triton] [--size cpu|gpu] [--rounds N] [WORKLOAD ...]
(default workloads: logsumexp_ce, ce_vocab_bf16, ce_train_bf16; training rows time one step.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-checks-"))

import torch  # noqa: E402

from loopnest.autotune.workloads import WORKLOADS, training_step  # noqa: E402
from loopnest.core import settings  # noqa: E402

GATHER_ROWS = ("logsumexp_ce", "ce_vocab_bf16", "ce_train_bf16")


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(name: str, backend: str, size: str, rounds: int) -> dict:
    """Median ms of the workload with checks on and off (outputs compared with eager first)."""
    w = WORKLOADS[name]
    device = "cuda" if backend == "triton" else "cpu"
    args = w.train_inputs(size, device) if w.train else w.inputs(size, device)
    step = (lambda fn: lambda: training_step(fn, args)) if w.train else (lambda fn: lambda: fn(*args))
    want = step(w.fn)()
    fns = {}
    for checks in (True, False):
        torch._dynamo.reset()
        with settings.scope(index_checks=checks):  # code is generated at the first call
            fn = step(torch.compile(w.fn, backend="loopnest", options={"backend": backend, "tune": "off"}))
            got = fn()
        for g, e in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g.float(), e.float(), atol=2e-2, rtol=2e-2)
        fns["on" if checks else "off"] = fn
    times = {k: [] for k in fns}
    for _ in range(3):
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    rows, cols = w.sizes[size]
    return dict(name=name, shape=f"{rows}x{cols}", on=med["on"], off=med["off"], ratio=med["on"] / med["off"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(GATHER_ROWS))
    parser.add_argument("--backend", default="cpp", choices=("cpp", "triton"))
    parser.add_argument("--size", default=None, help="size class (default: cpu for cpp, gpu for triton)")
    parser.add_argument("--rounds", type=int, default=30)
    a = parser.parse_args()
    size = a.size or ("gpu" if a.backend == "triton" else "cpu")
    print("| workload | shape | checks on (ms) | checks off (ms) | on/off |")
    print("| --- | --- | --- | --- | --- |")
    for name in a.workloads:
        r = run(name, a.backend, size, a.rounds)
        print(f"| {r['name']} | {r['shape']} | {r['on']:.3f} | {r['off']:.3f} | {r['ratio']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
