"""Two checkouts of loopnest side by side: the loopnest column of the suite, this one and another.

Each round runs every workload once per checkout, each checkout in a fresh process, the order
swapped every round (other, this, this, other, ...), so both see the same machine state and the
same share of first and second places; the table gives each workload's median time over the
rounds for both and their ratio, then the geometric mean. It shows that a refactor kept the
speed. A training row (``layernorm_train``, ...) is timed as one step: the forward pass, then
the backward.

    git worktree add /tmp/old/loopnest REV        # a folder holding a `loopnest` package folder
    python bench/compare_revisions.py --other /tmp/old --device cpu   # C++ backend
    python bench/compare_revisions.py --other /tmp/old --device cuda  # Triton backend, on a GPU

CPU runs keep glibc from unmapping freed blocks (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` = 16 GiB), as the CPU suite does.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common import MALLOC, run_in_checkout

CHILD = r"""
import json, statistics, sys, time, torch
try:
    from loopnest.api import loopnest_backend
except ImportError:  # revisions before loopnest.api
    from loopnest.lowering.dynamo import loopnest_backend
from loopnest.autotune.workloads import WORKLOADS
device, names, runs, size = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4]
options = {"backend": "triton" if device == "cuda" else "cpp", "tune": "off"}
out = {}
for name in names:
    w = WORKLOADS[name]
    size_class = size or ("gpu" if device == "cuda" else "cpu")
    compiled = torch.compile(w.fn, backend=loopnest_backend, options=options)
    if getattr(w, "train", False):  # one step: forward, then backward (revisions that have training rows)
        from loopnest.autotune.workloads import training_step
        args = w.train_inputs(size_class, device=device)
        fn = lambda *a: training_step(compiled, a)
    else:
        args, fn = w.inputs(size_class, device=device), compiled
    fn(*args)
    if device == "cuda":
        import triton.testing
        out[name] = triton.testing.do_bench(lambda: fn(*args), warmup=50, rep=300, return_mode="median")
    else:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter(); fn(*args); times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e3
    torch._dynamo.reset()
print(json.dumps(out))
"""


def run_checkout(path: Path | None, device: str, names: list[str], runs: int, size: str) -> dict[str, float]:
    """Median ms per workload, in a new process importing loopnest from ``path`` (None: this one);
    ``size``: the inputs' size class ("": the device's)."""
    return run_in_checkout(CHILD, [device, ",".join(names), runs, size], path, MALLOC)


def main() -> None:
    from loopnest.autotune.workloads import TEN

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(TEN))
    parser.add_argument("--other", type=Path, required=True, help="folder holding the other `loopnest` package")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15, help="timed calls per workload per round (CPU)")
    parser.add_argument("--size", default="", help="size class of the inputs (default: cpu or gpu, by --device)")
    opts = parser.parse_args()
    times: dict[str, dict[str, list[float]]] = {"other": {}, "this": {}}
    for k in range(opts.rounds):  # ABBA: the checkout run second in a pair can be 14% slower
        pair = (("other", opts.other), ("this", None))
        for label, path in (pair if k % 2 == 0 else pair[::-1]):
            for name, ms in run_checkout(path, opts.device, opts.workloads, opts.runs, opts.size).items():
                times[label].setdefault(name, []).append(ms)
    print(f"| workload | other ms | this ms | this / other |  ({opts.device}, {opts.size or 'default'} sizes, "
          f"{opts.rounds} rounds)")
    print("|---|---|---|---|")
    ratios = []
    for name in opts.workloads:
        other, this = statistics.median(times["other"][name]), statistics.median(times["this"][name])
        ratios.append(this / other)
        print(f"| {name} | {other:.3f} | {this:.3f} | {this / other:.3f} |")
    print(f"\ngeometric mean of this/other time ratios: {statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    main()
