"""Host overhead per call, and where compile time goes, for loopnest and Inductor on CUDA (or the CPU).

1. Host time per call at tiny sizes (GPU work is a few microseconds, so back-to-back calls are
   bound by the host): eager, Inductor default, loopnest; microseconds per call, the median of
   interleaved rounds (``host_us``).
2. At GPU sizes, loopnest's do_bench median (L2 flushed) next to the sum of its kernels' GPU
   times from ``torch.profiler`` (L2 not flushed).
3. ``--profile DIR``: cProfile listings of (a) 2000 loopnest calls at tiny size, (b) the cold
   compile (first call) of each workload, (c) a warm start (new process, caches hit).

Run on the device: python bench/launch_overhead.py [--profile DIR] [WORKLOAD ...]
A training row (``layernorm_train``, ...) is timed as one step: forward, then backward.

``--device cpu``: only (1), for the C++ backend against eager and Inductor's C++ backend. At
tiny sizes the kernels themselves take 1-10 µs, so this is host time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from loopnest.autotune.workloads import TEN, WORKLOADS, grad_output, training_step  # noqa: E402

torch._dynamo.config.recompile_limit = 64
OPTIONS = {"backend": "triton", "tune": "off"}
CPU_OPTIONS = {"backend": "cpp", "tune": "off"}

WARM = r"""
import cProfile, pstats, sys, torch
from loopnest.autotune.workloads import WORKLOADS
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
torch.compile(lambda v: v * 3 + 1, backend="loopnest")(torch.ones(8, device="cuda")); torch.cuda.synchronize()
w = WORKLOADS[sys.argv[1]]
args = w.inputs("gpu", device="cuda")
pr = cProfile.Profile(); pr.enable()
torch.compile(w.fn, backend="loopnest", options={"backend": "triton", "tune": "off"})(*args); torch.cuda.synchronize()
pr.disable(); pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
"""


def example(w, size: str, device: str = "cpu") -> tuple[tuple, torch.Tensor | None]:
    """The row's inputs at ``size`` and, for a training row (inputs that require grad), the
    ``grad_out`` of its steps, drawn once here (drawn per call, it would time the random number
    generator)."""
    if not w.train:
        return w.inputs(size, device=device), None
    args = w.train_inputs(size, device)
    return args, grad_output(w.fn(*args).detach())


def call_of(fn, args: tuple, grad_out: torch.Tensor | None):
    """A call of ``fn`` on ``args`` as the row runs it: one training step where there is a
    ``grad_out``."""
    if grad_out is not None:
        return lambda: training_step(fn, args, grad_out)
    return lambda: fn(*args)


def host_us(calls_by_name: dict, sync=lambda: None, rounds: int = 21, calls: int = 300) -> dict[str, float]:
    """Microseconds per call of each of ``calls_by_name``: the median of ``rounds`` interleaved
    rounds of ``calls`` back-to-back calls, ``sync()`` ending each round (the GPU's queue drained
    inside the round that filled it). Interleaved, a shared host's slow spells and the wake-ups
    of autograd's device thread (a training step's backward runs there) hit every column alike."""
    times: dict[str, list[float]] = {k: [] for k in calls_by_name}
    for call in calls_by_name.values():
        for _ in range(50):
            call()
    sync()
    for _ in range(rounds):
        for k, call in calls_by_name.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            sync()
            times[k].append((time.perf_counter() - t0) / calls * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def cpu_main(workloads: list[str]) -> None:
    """Host time per call at tiny sizes on the CPU: eager, Inductor, loopnest's C++ backend."""
    print(f"# host time per call, tiny sizes, CPU ({torch.get_num_threads()} threads), torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    print("| workload | eager µs/call | inductor µs/call | loopnest µs/call | loopnest / inductor |")
    print("|---|---|---|---|---|")
    ratios = []
    for name in workloads:
        w = WORKLOADS[name]
        torch._dynamo.reset()
        fns = {"eager": w.fn, "inductor": torch.compile(w.fn),
               "loopnest": torch.compile(w.fn, backend="loopnest", options=CPU_OPTIONS)}
        tiny = example(w, "tiny")
        us = host_us({k: call_of(fn, *tiny) for k, fn in fns.items()})
        ratios.append(us["loopnest"] / us["inductor"])
        print(f"| {name} | {us['eager']:.1f} | {us['inductor']:.1f} | {us['loopnest']:.1f} | {ratios[-1]:.2f} |",
              flush=True)
    print(f"\ngeometric mean of loopnest/inductor host time: {statistics.geometric_mean(ratios):.2f}")


def kernel_us(call, reps: int = 20) -> float:
    """Sum of the GPU kernel times of one call (profiler, mean over ``reps`` calls)."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages())
    return total / reps


def profile_text(pr: cProfile.Profile, sort: str, lines: int) -> str:
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats(sort).print_stats(lines)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(TEN))
    parser.add_argument("--profile", help="write cProfile listings into this folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    opts = parser.parse_args()
    if opts.device == "cpu":
        cpu_main(opts.workloads)
        return
    if opts.profile:
        os.makedirs(opts.profile, exist_ok=True)
    print(f"# launch overhead on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    print("| workload | eager µs/call (tiny) | inductor µs/call | loopnest µs/call | loopnest cold s "
          "| loopnest do_bench µs (gpu size) | loopnest kernels µs (profiler) |")
    print("|---|---|---|---|---|---|---|")
    for name in opts.workloads:
        w = WORKLOADS[name]
        torch._dynamo.reset()
        tiny = example(w, "tiny", "cuda")
        big = example(w, "gpu", "cuda")
        ours = torch.compile(w.fn, backend="loopnest", options=OPTIONS)
        t0 = time.perf_counter()
        with cProfile.Profile() as pr:
            call_of(ours, *big)()
            torch.cuda.synchronize()
        cold = time.perf_counter() - t0
        if opts.profile:
            Path(opts.profile, f"cold_{name}.txt").write_text(profile_text(pr, "cumulative", 60))
        bench = triton.testing.do_bench(call_of(ours, *big), warmup=50, rep=300, return_mode="median") * 1e3
        kernels = kernel_us(call_of(ours, *big))
        torch._dynamo.reset()  # else the tiny shapes below would recompile the graph with dynamic shapes
        ours = torch.compile(w.fn, backend="loopnest", options=OPTIONS)
        us = host_us({k: call_of(fn, *tiny) for k, fn in (('eager', w.fn), ('inductor', torch.compile(w.fn)),
                                                         ('loopnest', ours))}, torch.cuda.synchronize)
        row = [us['eager'], us['inductor'], us['loopnest']]
        print(f"| {name} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.1f} | {cold:.2f} | {bench:.1f} | "
              f"{kernels:.1f} |", flush=True)
        if opts.profile:
            call = call_of(ours, *tiny)
            with cProfile.Profile() as pr:
                for _ in range(2000):
                    call()
                torch.cuda.synchronize()
            Path(opts.profile, f"calls_{name}.txt").write_text(profile_text(pr, "tottime", 40))
    if opts.profile:
        for name in opts.workloads[:3]:
            out = subprocess.run([sys.executable, "-c", WARM, name], capture_output=True, text=True)
            Path(opts.profile, f"warm_{name}.txt").write_text(out.stdout + out.stderr[-3000:])


if __name__ == "__main__":
    main()
