"""GPU suite: eager vs Inductor (default, max-autotune) vs loopnest (heuristic, tuned) on CUDA.

For each workload at GPU sizes (the ten, the new rows and the training rows of
autotune/workloads.py): the median time of each variant (do_bench, inputs several times larger
than L2; the median of ``ROUNDS`` rounds, the columns interleaved round by round, since a
compiler's worker processes or another tenant can load the host for seconds), the fraction of the measured copy bandwidth each reaches on the workload's minimum bytes
(``Workload.min_bytes``: every input read once + every output written once; training rows, timed
as one forward + backward step, count their passes), cold compile time of each, a check against
float64 (outputs and gradients), and for training rows the GPU kernels one step launches. The "tuned" column uses ``tune="db"`` with the tuning DB at ``LOOPNEST_DB``
(fill it first with ``autotune sweep --backend triton ...``); it is left out without ``--tuned``.
A second table gives each variant's memory: the peak bytes the CUDA allocator holds during one
call above what it held before (outputs and gradients included), and the growth of its allocated
bytes per call over ``common.MEMORY_CALLS`` calls after a third as many (0 unless a call leaks).
Then it measures the warm start of loopnest and of Inductor: a new process per graph compiling it
from the on-disk caches, timed after imports, CUDA init and a throwaway compile.

Run on the device: python bench/gpu_suite.py [--tuned] [--no-warm] [--copy-gbs GBS] [WORKLOAD ...|new|train]
(without ``--copy-gbs`` the copy bandwidth is measured at the start of the run, on the card that runs it)
(``LOOPNEST_WARM_PROFILE=DIR`` writes a cProfile listing of each warm graph's first run there)
Check the script itself on a CPU: TRITON_INTERPRET=1 python bench/gpu_suite.py --smoke softmax
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import device_copy_gbs, median_ms, memory_use, print_memory_table

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cold-"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from loopnest.autotune.workloads import (NEW_ROWS, TEN, TRAIN_ROWS, WORKLOADS, Workload, float64_results,  # noqa: E402
                                         grad_output, mismatch, result_dtypes, training_step)

torch._inductor.config.fx_graph_cache = False
torch._dynamo.config.recompile_limit = 64

ROUNDS = 3  # timing rounds per column (do_bench's 100 ms each); the median round counts

WARM = r"""
import cProfile, json, os, pstats, sys, time, torch
from loopnest.autotune.workloads import WORKLOADS
backend, names = sys.argv[1], sys.argv[2:]
options = {"backend": "triton", "tune": "off"} if backend == "loopnest" else None
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
# Start-up, not any graph's: Dynamo's and AOTAutograd's one-time set-up, including the lazy import
# of torch.distributed.tensor.experimental on the first torch function Dynamo traces (0.1-0.2 s)
torch.compile(lambda v: torch.nn.functional.relu(v) * 3 + 1, backend=backend, options=options)(
    torch.ones(8, device="cuda")); torch.cuda.synchronize()
out = {}
for name in names:
    w = WORKLOADS[name]
    args = w.inputs("gpu", device="cuda")
    torch.cuda.synchronize()
    built = []
    opts = dict(options or {})
    profile = cProfile.Profile() if os.environ.get("LOOPNEST_WARM_PROFILE") else None
    def record(lowered):
        built.append((time.perf_counter(), lowered.stats))
        if profile:
            profile.enable()
    if backend == "loopnest":
        opts["recorder"] = record
    t0 = time.perf_counter()
    fn = torch.compile(w.fn, backend=backend, options=opts or None)
    fn(*args); torch.cuda.synchronize()
    end = time.perf_counter()
    if profile and built:  # the first run only: from loopnest handing its graph back to the end
        profile.disable()
        with open(os.path.join(os.environ["LOOPNEST_WARM_PROFILE"], name + ".txt"), "w") as f:
            pstats.Stats(profile, stream=f).sort_stats("cumulative").print_stats(40)
    out[name] = {"total": end - t0}
    if built:
        (t_built, stats), = built
        out[name].update(lowering=stats.lowering_ms / 1e3, compile=stats.compile_ms / 1e3, first_run=end - t_built)
        o = out[name]
        o["tracing"] = o["total"] - o["first_run"] - o["lowering"] - o["compile"]
print(json.dumps(out))
"""


def variants(fn, tuned: bool, smoke: bool = False, train: bool = False) -> dict:
    out = {
        "eager": fn,
        "inductor": torch.compile(fn),
        "inductor_max": torch.compile(fn, mode="max-autotune-no-cudagraphs"),
        "loopnest": torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "off"}),
    }
    if smoke:
        del out["inductor_max"]  # max-autotune needs a GPU
    elif not train:
        out["loopnest_cg"] = torch.compile(fn, backend="loopnest",
                                           options={"backend": "triton", "tune": "off", "cudagraphs": True})
    if tuned:
        out["loopnest_tuned"] = torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "db"})
    return out


def check(got, want, name: str, variant: str, dtypes: list, w: Workload) -> str:
    """"ok", or "WRONG" with the mismatch printed (``workloads.mismatch``: each result against
    float64 on the same inputs)."""
    why = mismatch(got, want, dtypes, w.train, w.rounds_to)
    if why is not None:
        print(f"MISMATCH {name}/{variant} {why}", flush=True)
        return "WRONG"
    return "ok"


def run(name: str, tuned: bool, copy_gbs: float, size: str = "gpu", device: str = "cuda") -> dict:
    w = WORKLOADS[name]
    args = w.train_inputs(size, device=device) if w.train else w.inputs(size, device=device)
    torch._dynamo.reset()
    want = float64_results(w, args)
    with torch.no_grad():
        eager = w.fn(*[a.detach() for a in args])
    grad_out = grad_output(eager) if w.train else None
    dtypes = result_dtypes(w, args)
    result = {"name": name, "ms": {}, "cold_s": {}, "status": {}, "kernels": {}, "memory": {}}
    calls = {}
    for variant, fn in variants(w.fn, tuned, device != "cuda", w.train).items():
        call = (lambda fn=fn: training_step(fn, args, grad_out)) if w.train else (lambda fn=fn: fn(*args))
        sync(device)
        t0 = time.perf_counter()
        got = call()
        sync(device)
        result["cold_s"][variant] = time.perf_counter() - t0
        result["status"][variant] = check(got, want, name, variant, dtypes, w)
        calls[variant] = call
    rounds = {variant: [] for variant in calls}
    for _ in range(ROUNDS):  # interleaved: a transient load on the host hits every column alike
        for variant, call in calls.items():
            rounds[variant].append(bench(call, device))
    for variant, call in calls.items():
        result["ms"][variant] = statistics.median(rounds[variant])
        result["memory"][variant] = memory_use(call, device)
        if w.train and device == "cuda":
            result["kernels"][variant] = count_kernels(call)
    moved = w.min_bytes(args, eager)  # the outputs in their own dtypes (want is float64)
    result["frac"] = {k: moved / (v / 1e3) / (copy_gbs * 1e9) for k, v in result["ms"].items()}
    result["mb"] = moved / 1e6
    return result


def count_kernels(call) -> int:
    """GPU kernels one call launches (memsets and copies left out), from the profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memset", "Memcpy", "[memset", "[memcpy")))


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bench(fn, device: str) -> float:
    """Median ms of one round: do_bench on CUDA (events, L2 flushed); wall clock for a CPU smoke run."""
    if device == "cuda":
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    return median_ms(fn, 5)


def warm_start(names: list[str]) -> dict:
    """Each workload compiled again by loopnest and by Inductor (default mode), each in a new
    process that finds everything in the on-disk caches, timed after imports, CUDA init and one
    throwaway compile of another function. Inductor's caches are filled by a process of its own
    first (the cold measurement above runs without its FX graph cache)."""
    fill = _warm_process("inductor", names)
    out = {}
    for name in names:
        out[name] = _warm_process("loopnest", [name]).get(name, {})
        if fill:
            out[name]["inductor"] = _warm_process("inductor", [name]).get(name, {}).get("total", float("nan"))
    return out


def _warm_process(backend: str, names: list[str]) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    code = subprocess.run([sys.executable, "-c", WARM, backend, *names], capture_output=True, text=True, env=env)
    if code.returncode != 0:
        print(code.stderr[-2000:])
        return {}
    return json.loads(code.stdout.strip().splitlines()[-1])


def print_warm(warm: dict) -> None:
    """Where the warm start's time goes, per workload."""
    if not warm:
        return
    print("\nwarm start (new process per graph), seconds\n| workload | Inductor | loopnest | Dynamo + AOTAutograd "
          "| lowering | schedule + codegen + load | first run (guards, kernels from Triton's cache, launch) |"
          "\n|---|---|---|---|---|---|---|")
    for name, w in warm.items():
        if "total" not in w:
            print(f"| {name} | failed |")
            continue
        print(f"| {name} | {w.get('inductor', float('nan')):.3f} | {w['total']:.3f} | {w['tracing']:.3f} "
              f"| {w['lowering']:.3f} | {w['compile']:.3f} | {w['first_run']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(TEN),
                        help="workload names; 'new' and 'train' stand for the new and the training rows")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm-start measurement")
    parser.add_argument("--tuned", action="store_true", help="add loopnest with tune='db' (LOOPNEST_DB)")
    parser.add_argument("--copy-gbs", type=float, help="copy bandwidth, GB/s (default: measured in this run)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--warm-only", action="store_true",
                        help="only the warm start (after one loopnest compile per workload fills the caches)")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU smoke test of this script: tiny sizes, Triton interpreter, no warm start")
    opts = parser.parse_args()
    groups = {"new": NEW_ROWS, "train": TRAIN_ROWS}
    opts.workloads = [n for name in opts.workloads for n in groups.get(name, (name,))]
    size, device = ("tiny", "cpu") if opts.smoke else ("gpu", "cuda")
    dev = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke run)"
    if opts.copy_gbs is None:
        opts.copy_gbs = device_copy_gbs() if device == "cuda" else 4281.0
    print(f"# GPU suite on {dev}, torch {torch.__version__}, copy ceiling {opts.copy_gbs:.0f} GB/s, "
          f"{time.strftime('%Y-%m-%d')}", flush=True)
    if opts.warm_only:
        for name in opts.workloads:
            w = WORKLOADS[name]
            fn = torch.compile(w.fn, backend="loopnest", options={"backend": "triton", "tune": "off"})
            fn(*w.inputs("gpu", "cuda"))
        print_warm(warm_start(opts.workloads))
        return
    results = []
    for name in opts.workloads:  # each row reported and saved as it ends: a run cut short keeps its rows
        results.append(run(name, opts.tuned, opts.copy_gbs, size, device))
        r = results[-1]
        print(f"row {name}: " + ", ".join(f"{c} {ms:.3f} ms ({r['frac'].get(c, float('nan')):.2f})"
                                          for c, ms in r["ms"].items()), flush=True)
        if opts.json:
            save_json(opts.json, dev, results, {})
    warm = {} if opts.smoke or opts.no_warm else warm_start(opts.workloads)
    cols = list(dict.fromkeys(c for r in results for c in r["ms"]))  # training rows have no loopnest_cg
    nan = float("nan")
    print("| workload | MB | " + " | ".join(f"{c} ms" for c in cols) + " | " + " | ".join(f"{c} frac" for c in cols)
          + " | " + " | ".join(f"{c} cold s" for c in cols[1:]) + " | loopnest warm s | checks |")
    print("|" + "---|" * (2 + 3 * len(cols) - 1 + 2))
    for r in results:
        ms = " | ".join(f"{r['ms'].get(c, nan):.3f}" for c in cols)
        fr = " | ".join(f"{r['frac'].get(c, nan):.2f}" for c in cols)
        cold = " | ".join(f"{r['cold_s'].get(c, nan):.2f}" for c in cols[1:])
        bad = [c for c in cols if r["status"].get(c, "ok") != "ok"]
        total = warm.get(r["name"], {}).get("total", float("nan"))
        print(f"| {r['name']} | {r['mb']:.0f} | {ms} | {fr} | {cold} | {total:.3f} "
              f"| {'ok' if not bad else 'WRONG: ' + ','.join(bad)} |")
    for r in results:
        if r["kernels"]:
            print(f"kernels per step, {r['name']}: " + ", ".join(f"{c} {n}" for c, n in r["kernels"].items()))
    print_memory_table([(r["name"], r["memory"]) for r in results], cols)
    print_warm(warm)
    for ref in ("inductor", "inductor_max"):
        for ours in ("loopnest", "loopnest_tuned"):
            if ours in cols and ref in cols:
                geo = statistics.geometric_mean([r["ms"][ref] / r["ms"][ours] for r in results])
                print(f"geomean {ref}/{ours}: {geo:.3f}")
    if opts.json:
        save_json(opts.json, dev, results, warm)


def save_json(path: str, device: str, results: list, warm: dict) -> None:
    """The results so far, written whole to ``path``."""
    with open(path, "w") as f:
        json.dump({"device": device, "results": results, "warm": warm}, f, indent=1)


if __name__ == "__main__":
    main()
