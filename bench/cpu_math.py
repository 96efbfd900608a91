"""Compute efficiency of pointwise math on the CPU: eager vs loopnest, in ns per element.

Each function runs on float32 inputs (random, scaled to cover the interesting range) at two sizes:
``l2`` (64K elements, 256 KB in + 256 KB out, one thread: the data stays in that core's L2, so the
time is the math's) and ``l3`` (1M elements, 4 MB in + 4 MB out, all of torch's threads). loopnest
is called through ``compile_fx`` on the ``make_fx`` graph, not through ``torch.compile``: the
numbers are the kernel and loopnest's call path, without Dynamo's frame. The ``x * 0.5`` row is the
floor (a copy that touches the same bytes); "over floor" is a column's time minus its own floor row,
which is what the math costs where it does not hide under the memory traffic. Columns are timed
round by round, interleaved, and every loopnest result is checked against float64 first.

Run: python bench/cpu_math.py [--rounds N] [FUNCTION ...]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
call pays page faults for a freshly unmapped output.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import loopnest as ln  # noqa: E402

# name -> (function, input scale): inputs are randn * scale
FUNCTIONS = {
    "x * 0.5": (lambda x: x * 0.5, 3.0),
    "exp": (lambda x: torch.exp(x), 3.0),
    "log": (lambda x: torch.log(x.abs() + 1e-3), 3.0),
    "tanh": (lambda x: torch.tanh(x), 3.0),
    "erf": (lambda x: torch.erf(x), 3.0),
    "sigmoid": (lambda x: torch.sigmoid(x), 3.0),
    "silu": (lambda x: F.silu(x), 3.0),
    "gelu": (lambda x: F.gelu(x), 3.0),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), 3.0),
}
SIZES = {"l2": (1 << 16, 1), "l3": (1 << 20, None)}  # elements, threads (None: torch's default)
CALL_S = 0.01  # a round times about this long per column


def per_element_ns(fn, x, rounds: int) -> dict[str, float]:
    """Median ns per element of eager ``fn`` and of loopnest's compile of it, rounds interleaved."""
    compiled = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")
    want = fn(x.double()).float()  # 1 + erf(x / sqrt 2) cancels below x = -3: GELU is good to 1e-6 absolute there
    torch.testing.assert_close(compiled(x), want, rtol=4e-6, atol=1e-6)
    columns = {"eager": lambda: fn(x), "loopnest": lambda: compiled(x)}
    t0 = time.perf_counter()
    fn(x)
    calls = max(1, round(CALL_S / (time.perf_counter() - t0)))
    times = {k: [] for k in columns}
    for _ in range(rounds):
        for k, call in columns.items():
            call()
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            times[k].append((time.perf_counter() - t0) / calls / x.numel() * 1e9)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("functions", nargs="*", default=list(FUNCTIONS), help=f"any of {', '.join(FUNCTIONS)}")
    parser.add_argument("--rounds", type=int, default=15)
    opts = parser.parse_args()
    unknown = [f for f in opts.functions if f not in FUNCTIONS]
    if unknown:
        raise SystemExit(f"unknown function(s) {unknown}: choose from {', '.join(FUNCTIONS)}")
    names = ["x * 0.5"] + [f for f in opts.functions if f != "x * 0.5"]
    default_threads = torch.get_num_threads()
    print(f"# CPU math, ns per element, torch {torch.__version__}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
    print("| function | size | threads | eager | loopnest | eager over floor | loopnest over floor | eager / loopnest |")
    print("|---" * 8 + "|")
    gen = torch.Generator().manual_seed(0)
    for size, (n, threads) in SIZES.items():
        torch.set_num_threads(threads or default_threads)
        floor = None
        for name in names:
            fn, scale = FUNCTIONS[name]
            x = torch.randn(n, generator=gen) * scale
            ns = per_element_ns(fn, x, opts.rounds)
            floor = floor or ns
            over = {k: ns[k] - floor[k] for k in ns}
            print(f"| {name} | {size} | {torch.get_num_threads()} | {ns['eager']:.3f} | {ns['loopnest']:.3f} "
                  f"| {over['eager']:.3f} | {over['loopnest']:.3f} | {ns['eager'] / ns['loopnest']:.2f} |", flush=True)
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
