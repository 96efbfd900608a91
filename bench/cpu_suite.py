"""CPU suite: eager vs Inductor (C++) vs loopnest (C++) on the ten suite workloads, side by side.

Prints one markdown table: median ms of each, loopnest's speedup over both, the fraction of the
machine's copy bandwidth each reaches (bytes = every input read once + every output written
once) and the cold compile time of Inductor and loopnest. Timings are interleaved round by
round so the shared machine's noise hits all three alike.

Run: python bench/cpu_suite.py [--rounds N] [--copy-gbs 28] [WORKLOAD ...]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
kernel pays page faults for a freshly unmapped output on every call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import reexec_with_malloc_thresholds, tensor_bytes

reexec_with_malloc_thresholds()
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402

from loopnest.autotune.workloads import TEN, WORKLOADS  # noqa: E402

torch._inductor.config.fx_graph_cache = False
torch._dynamo.config.recompile_limit = 64


def timed_first_call(fn, args) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def run(name: str, rounds: int, copy_gbs: float) -> dict:
    w = WORKLOADS[name]
    args = w.inputs("cpu")
    torch._dynamo.reset()
    inductor = torch.compile(w.fn)
    ours = torch.compile(w.fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    expect = w.fn(*args)
    got_ind, cold_ind = timed_first_call(inductor, args)
    got_ours, cold_ours = timed_first_call(ours, args)
    for got in (got_ind, got_ours):
        torch.testing.assert_close(got, expect, atol=2e-2, rtol=2e-2)
    fns = {"eager": w.fn, "inductor": inductor, "loopnest": ours}
    times = {k: [] for k in fns}
    for _ in range(3):
        for fn in fns.values():
            fn(*args)
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn(*args)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    moved = tensor_bytes(args) + tensor_bytes(expect)
    frac = {k: moved / (v / 1e3) / (copy_gbs * 1e9) for k, v in med.items()}
    return dict(name=name, ms=med, frac=frac, cold_inductor=cold_ind, cold_loopnest=cold_ours, mb=moved / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(TEN))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--copy-gbs", type=float, default=28.0, help="measured copy bandwidth, GB/s")
    opts = parser.parse_args()
    print(f"# CPU suite, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"copy ceiling {opts.copy_gbs} GB/s, {time.strftime('%Y-%m-%d')}")
    print("| workload | MB moved | eager ms | inductor ms | loopnest ms | vs eager | vs inductor "
          "| frac eager | frac inductor | frac loopnest | cold inductor s | cold loopnest s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for name in opts.workloads:
        r = run(name, opts.rounds, opts.copy_gbs)
        ms, fr = r["ms"], r["frac"]
        ratios.append(ms["inductor"] / ms["loopnest"])
        print(f"| {name} | {r['mb']:.0f} | {ms['eager']:.2f} | {ms['inductor']:.2f} | {ms['loopnest']:.2f} "
              f"| {ms['eager'] / ms['loopnest']:.2f} | {ms['inductor'] / ms['loopnest']:.2f} "
              f"| {fr['eager']:.2f} | {fr['inductor']:.2f} | {fr['loopnest']:.2f} "
              f"| {r['cold_inductor']:.2f} | {r['cold_loopnest']:.2f} |", flush=True)
    geo = statistics.geometric_mean(ratios)
    print(f"\ngeometric mean of inductor/loopnest time ratios: {geo:.2f}")


if __name__ == "__main__":
    main()
