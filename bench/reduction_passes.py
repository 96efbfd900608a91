"""A float mean over reduced axes split by a kept one, in one pass against two, on the CPU.

``lowering.reductions._inner_first`` reduces the trailing group first where the trailing group
holds at least ``MIN_INNER`` elements. This script compiles each shape twice in one process with
``loopnest.compile_fx`` (the threshold set beyond reach, then at its value), and times eager and
both builds in interleaved rounds (wall clock over enough calls to take ~20M elements per
round). Kernel counts show which build is which.

Run: python bench/reduction_passes.py [--rounds N]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised.
"""
from __future__ import annotations

import argparse
import statistics
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()

import torch  # noqa: E402

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import loopnest  # noqa: E402
from loopnest.lowering import reductions  # noqa: E402

SHAPES = [((64, 256, 300), (0, 2)), ((8, 256, 300), (0, 2)), ((64, 16, 4096), (0, 2)), ((512, 64, 64), (0, 2)),
          ((4, 32, 100), (0, 2)), ((16, 64, 1024), (0, 2)), ((128, 3, 8192), (0, 2)), ((32, 512, 96), (0, 2)),
          ((32, 64, 56, 56), (0, 2, 3))]


def builds(dims, x: torch.Tensor) -> dict:
    """eager, and loopnest's one-pass and two-pass builds of ``x.mean(dims)`` (``compile_fx``,
    which lowers at once, so each build sees its own threshold), with their kernel counts."""
    fn = lambda t: t.mean(dims)  # noqa: E731
    graph = make_fx(fn)(x)
    fns, kernels = {"eager": fn}, {}
    default = reductions.MIN_INNER
    try:
        for name, limit in (("one pass", 1 << 62), ("two passes", default)):
            reductions.MIN_INNER = limit
            fns[name] = loopnest.compile_fx(graph, [x], backend="cpp", tune="off")
            kernels[name] = len(fns[name].lowered.compiled.steps)
    finally:
        reductions.MIN_INNER = default
    return fns, kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; ms per call, medians of {opts.rounds} rounds")
    print("| shape | dims | kernels | eager | one pass | two passes | eager / two | one / two |\n"
          "|---|---|---|---|---|---|---|---|")
    for shape, dims in SHAPES:
        x = torch.randn(*shape)
        fns, kernels = builds(dims, x)
        want = fns["eager"](x)
        for name, f in fns.items():
            got = f(x)
            got = got[0] if isinstance(got, (tuple, list)) else got
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name} {shape}: {m}")
        calls = max(3, int(2e7 // x.numel()))
        times = {k: [] for k in fns}
        for _ in range(opts.rounds):
            for k, f in fns.items():
                t = time.perf_counter()
                for _ in range(calls):
                    f(x)
                times[k].append((time.perf_counter() - t) / calls * 1e3)
        m = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {shape} | {dims} | {kernels['one pass']} / {kernels['two passes']} | {m['eager']:.4f} | {m['one pass']:.4f} | {m['two passes']:.4f} "
              f"| {m['eager'] / m['two passes']:.2f} | {m['one pass'] / m['two passes']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
