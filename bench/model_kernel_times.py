"""GPU time per call of whole models, kernel by kernel, for eager, Inductor and loopnest.

Run on the device: python bench/model_kernel_times.py MODEL [MODEL ...] (names from ``model_zoo``).
For each model and column: the total GPU time of one call (the profiler's CUDA kernel times over
20 calls, divided by 20) and its twelve longest kernels. Set beside the wall time per call of
``gpu_models.py`` and the host time of ``host_steps.py``, it shows whether a model waits on the
host or on its kernels, and which kernels differ between the columns.
"""
from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from model_zoo import each_on_cuda

torch._dynamo.config.recompile_limit = 64
CALLS = 20


def kernel_times(fn, args) -> list[tuple[str, float, int]]:
    """(kernel name, GPU µs per call, launches per call) of ``fn(*args)``, longest first."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn(*args)
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / CALLS, e.count // CALLS) for e in prof.key_averages()
            if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def main(names: list[str]) -> None:
    for name, model, args in each_on_cuda(names):
        with torch.no_grad():
            columns = {"eager": model, "inductor": torch.compile(model),
                       "loopnest": torch.compile(model, backend="loopnest", options={"tune": "off"})}
            for column, fn in columns.items():
                rows = kernel_times(fn, args)
                print(f"== {name} {column}: GPU µs per call {sum(r[1] for r in rows):.1f}")
                for key, us, count in rows[:12]:
                    print(f"   {us:8.1f} µs  x{count}  {key[:110]}")


if __name__ == "__main__":
    main(sys.argv[1:])
