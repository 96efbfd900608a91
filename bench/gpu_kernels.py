"""Where the GPU time of a call goes, kernel by kernel: loopnest next to Inductor.

For each workload at GPU sizes (training rows: one forward + backward step), every CUDA kernel
one call launches, with its GPU time from ``torch.profiler`` averaged over several calls (L2 not
flushed between them, so this is for finding the slow kernel, not for the suite's ratios), the
sum per variant, and each loopnest kernel's config. Shows which kernel of a fused step is behind
the peer's.

Run on the device: python bench/gpu_kernels.py [--calls 10] [--max-autotune] WORKLOAD ...|new|train
"""
from __future__ import annotations

import argparse
import collections

import torch

from loopnest.autotune.workloads import NEW_ROWS, TEN, TRAIN_ROWS, WORKLOADS, grad_output, training_step

torch._dynamo.config.recompile_limit = 64
SKIPPED = ("Memset", "Memcpy", "[memset", "[memcpy")


def kernel_times(call, calls: int) -> list[tuple[str, int, float]]:
    """(name, launches per call, GPU µs per call) of each kernel ``call`` launches, in first-launch order."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    total: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(SKIPPED):
            total[e.name] += e.device_time
            count[e.name] += 1
    return [(name, count[name] // calls, total[name] / calls) for name in total]


def variants(fn, max_autotune: bool) -> dict:
    out = {"inductor": torch.compile(fn),
           "loopnest": torch.compile(fn, backend="loopnest", options={"backend": "triton", "tune": "off"})}
    if max_autotune:
        out["inductor_max"] = torch.compile(fn, mode="max-autotune-no-cudagraphs")
    return out


def profile_workload(name: str, calls: int, max_autotune: bool) -> None:
    """Print each variant's kernels for workload ``name``."""
    w = WORKLOADS[name]
    args = w.train_inputs("gpu", device="cuda") if w.train else w.inputs("gpu", device="cuda")
    with torch.no_grad():
        ref = w.fn(*[a.detach() for a in args])
    grad_out = grad_output(ref) if w.train else None
    moved = w.min_bytes(args, ref)
    print(f"\n## {name} ({moved / 1e6:.0f} MB at minimum)")
    for variant, fn in variants(w.fn, max_autotune).items():
        torch._dynamo.reset()
        call = (lambda fn=fn: training_step(fn, args, grad_out)) if w.train else (lambda fn=fn: fn(*args))
        rows = kernel_times(call, calls)
        total = sum(us for _, _, us in rows)
        print(f"{variant}: {len(rows)} kernels, {total:.1f} µs of kernels per call "
              f"({moved / (total * 1e-6) / 1e9:.0f} GB/s on the minimum bytes)")
        for kname, n, us in rows:
            print(f"  {us:9.1f} µs  x{n}  {kname[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="+", help="names; 'ten', 'new' and 'train' stand for groups")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--max-autotune", action="store_true", help="add Inductor max-autotune (slow to compile)")
    opts = parser.parse_args()
    groups = {"ten": TEN, "new": NEW_ROWS, "train": TRAIN_ROWS}
    for name in [n for w in opts.workloads for n in groups.get(w, (w,))]:
        profile_workload(name, opts.calls, opts.max_autotune)


if __name__ == "__main__":
    main()
