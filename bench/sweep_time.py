"""Sweep time and fidelity: per kernel, the wall time of a sweep and where its winner came from;
per workload, the tuned graph against the default one in the user's call.

For each workload: compile it with default configs, tune every kernel (``--trials`` each, fresh
tuning DB, fresh code and Triton caches unless the environment names them), timing each
kernel's tuning alone. Then compile it twice through ``compile_fx`` (``tune="db"`` with that DB,
and ``tune="off"``) and time both as the user calls them: rounds of back-to-back calls,
synchronized, alternating the two, median per call. Prints one JSON line per workload.

Run on the device: python bench/sweep_time.py [--trials 10] [--size gpu] [--no-prebuild] [--serial-builds] WORKLOAD ...
(``--serial-builds``: every build of a batch finishes before its first candidate is timed, as the
C++ backend does, instead of timing each as it is built and cutting the stragglers.)
Check the script on a CPU: TRITON_INTERPRET=1 python bench/sweep_time.py --size tiny --trials 2 softmax
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cold-"))

import torch  # noqa: E402

from loopnest.autotune.evaluate import KernelEvaluator  # noqa: E402
from loopnest.autotune.harness import GraphHarness  # noqa: E402
from loopnest.autotune.options import TuneSettings  # noqa: E402
from loopnest.autotune.sweep import compile_target, flat_tensors, target  # noqa: E402
from loopnest.autotune.tuner import GraphTuner  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.core.timing import BenchOptions  # noqa: E402
from loopnest.db.api import open_db  # noqa: E402


def tune_workload(name: str, size: str, settings: TuneSettings) -> list[dict]:
    """Tune every kernel of ``name``; one row per kernel with its tuning wall time."""
    t = target(name, "triton", size)
    compiled_fn = compile_target(t, "triton")
    lowered = compiled_fn.lowered
    args = list(compiled_fn.codegen.process_inputs(*t.inputs))
    harness = GraphHarness(lowered.compiled, lambda g: flat_tensors(lowered.run(list(args), g)),
                           flat_tensors(t.fn(*t.inputs)), BenchOptions(budget_s=settings.measure_s))
    tuner = GraphTuner(harness, settings, open_db(settings.db_url), label=name)
    rows = []
    for kernel in lowered.compiled.schedule.kernels:
        start = time.perf_counter()
        r = tuner.tune_kernel(kernel)
        rows.append({"kernel": r.kernel, "wall_s": round(time.perf_counter() - start, 2), "ok": r.ok,
                     "failed": r.failed, "default_us": r.default_us, "best_us": r.best_us, "winner": r.winner,
                     "stop": r.stop_reason, "config": r.config, "in_call": getattr(r, "in_call", None)})
    return rows


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def per_call_us(fn, inputs, calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*inputs)
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def user_calls(name: str, size: str, db_url: str, rounds: int = 15) -> dict:
    """Tuned (``tune="db"``) and default graphs timed alternately in the user's call."""
    t = target(name, "triton", size)
    tuned = compile_target(t, "triton", "db", TuneSettings(db_url=db_url))
    default = compile_target(t, "triton", "off")
    for fn in (tuned, default):
        fn(*t.inputs)
    one = per_call_us(default, t.inputs, 1)
    calls = max(1, min(1000, int(20_000 / max(one, 1.0))))  # rounds of about 20 ms
    times = {"tuned": [], "default": []}
    for _ in range(rounds):
        times["default"].append(per_call_us(default, t.inputs, calls))
        times["tuned"].append(per_call_us(tuned, t.inputs, calls))
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"default_us": round(medians["default"], 2), "tuned_us": round(medians["tuned"], 2),
            "tuned_over_default": round(medians["tuned"] / medians["default"], 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workloads", nargs="+")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--size", default="gpu")
    p.add_argument("--no-prebuild", action="store_true", help="compile candidates in the measuring process")
    p.add_argument("--serial-builds", action="store_true",
                   help="build a whole batch before timing any of it (no straggler cut)")
    opts = p.parse_args()
    if opts.serial_builds:
        KernelEvaluator.evaluate = KernelEvaluator.build_then_measure
    if opts.no_prebuild:
        type(registry.get("triton")).can_prebuild = property(lambda self: False)
    db_url = f"sqlite:///{tempfile.mkdtemp(prefix='ln-db-')}/tuning.db"
    settings = TuneSettings(trials=opts.trials, db_url=db_url, seed=0)
    for name in opts.workloads:
        start = time.perf_counter()
        rows = tune_workload(name, opts.size, settings)
        total = time.perf_counter() - start
        print(json.dumps({"workload": name, "sweep_s": round(total, 2), "kernels": rows,
                          "user_call": user_calls(name, opts.size, db_url)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
