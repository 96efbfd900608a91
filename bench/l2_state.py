"""What the L2's state before a call costs short kernels: each workload timed three ways.

``dirty``: as ``triton.testing.do_bench`` times (and so ``gpu_suite.py``): before each call a
256 MB buffer is zeroed, which leaves the whole L2 holding dirty lines that the timed kernel
must write back to DRAM while it runs. ``clean``: before each call the same buffer is read (a
sum), which evicts everything and leaves only clean lines. ``warm``: no flush (inputs that fit
stay in L2). Eager, Inductor and loopnest are timed side by side, each cell the median of one
CUDA-event time per call, and the fraction of the copy bandwidth measured in the same run is
taken on ``Workload.min_bytes``. A kernel that moves little more than the L2 holds pays the
dirty flush's write-back in full: ``clean / dirty`` shows how much of its time that was.

Run on the device: python bench/l2_state.py [--calls 200] mean_mid sum_dim0 ...
"""
from __future__ import annotations

import argparse
import statistics

import torch

from common import device_copy_gbs
from loopnest.autotune.workloads import WORKLOADS

FLUSH_BYTES = 256 << 20  # triton.testing.do_bench's cache buffer


def event_ms(fn, before, calls: int) -> float:
    """Median ms of ``fn()`` over ``calls`` calls, each timed alone by CUDA events after ``before()``."""
    for _ in range(3):
        before()
        fn()
    times = []
    for _ in range(calls):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="+", choices=sorted(n for n, w in WORKLOADS.items() if not w.train))
    parser.add_argument("--calls", type=int, default=200)
    a = parser.parse_args()
    cache = torch.empty(FLUSH_BYTES // 4, device="cuda")
    flushes = {"dirty": lambda: cache.zero_(), "clean": lambda: cache.sum(), "warm": lambda: None}
    gbs = device_copy_gbs()
    print(f"copy {gbs:.0f} GB/s (1 GB buffers); ms (fraction of copy on each row's minimum bytes)")
    print("| row | variant | dirty | clean | warm | clean / dirty |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in a.workloads:
        w = WORKLOADS[name]
        args = w.inputs("gpu", device="cuda")
        fns = {"eager": w.fn, "inductor": torch.compile(w.fn),
               "loopnest": torch.compile(w.fn, backend="loopnest", options={"backend": "triton", "tune": "off"})}
        floor_ms = w.min_bytes(args, w.fn(*args)) / gbs / 1e6
        for variant, fn in fns.items():
            ms = {k: event_ms(lambda: fn(*args), f, a.calls) for k, f in flushes.items()}
            cells = " | ".join(f"{ms[k]:.4f} ({floor_ms / ms[k]:.2f})" for k in flushes)
            print(f"| {name} | {variant} | {cells} | {ms['clean'] / ms['dirty']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
