"""Row reductions over short and middling rows on the CPU: eager against loopnest, one process.

Each case is compiled through ``loopnest.compile_fx`` on its ``make_fx`` graph (the call path
another compiler uses, without Dynamo's frame), checked against eager, then both are timed in
interleaved rounds. Short rows are where a reduction's merge of its vector lanes, not its loads,
sets the time (``backends/cpp/row_lanes.py``).

Run: OMP_NUM_THREADS=1 python bench/cpu_short_rows.py [--rounds N] [CASE-SUBSTRING ...]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
call pays page faults for a freshly unmapped output.
"""
from __future__ import annotations

import argparse
import statistics
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import loopnest as ln  # noqa: E402


def _layernorm(cols: int):
    return lambda x, w, b: F.layer_norm(x, (cols,), w, b)


def cases() -> dict:
    """name -> (function, inputs)."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)
    return {
        "layernorm 16384x64": (_layernorm(64), (randn(16384, 64), randn(64), randn(64))),
        "layernorm 4096x256": (_layernorm(256), (randn(4096, 256), randn(256), randn(256))),
        "softmax 16384x64": (lambda x: torch.softmax(x, -1), (randn(16384, 64),)),
        "softmax 4096x256": (lambda x: torch.softmax(x, -1), (randn(4096, 256),)),
        "sum 65536x32": (lambda x: x.sum(-1), (randn(65536, 32),)),
        "amax 16384x128": (lambda x: x.amax(-1), (randn(16384, 128),)),
        "sum 2Mx32 (256 MB)": (lambda x: x.sum(-1), (randn(2097152, 32),)),
        "layernorm 262144x256 (268 MB)": (_layernorm(256), (randn(262144, 256), randn(256), randn(256))),
        "layernorm 512x2048": (_layernorm(2048), (randn(512, 2048), randn(2048), randn(2048))),
    }


def main() -> None:
    """Print eager's and loopnest's median µs per call and their ratio for each case."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", help="substrings of the case names to run (default: all)")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--calls", type=int, default=20, help="calls per round and column")
    a = p.parse_args()
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; µs per call, medians of {a.rounds} rounds")
    print("| case | eager µs | loopnest µs | eager / loopnest |\n|---|---|---|---|")
    for name, (fn, args) in cases().items():
        if a.cases and not any(c in name for c in a.cases):
            continue
        compiled = ln.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")
        torch.testing.assert_close(compiled(*args), fn(*args), rtol=1e-4, atol=1e-4)
        times = {"eager": [], "loopnest": []}
        for _ in range(a.rounds):
            for column, call in (("eager", lambda: fn(*args)), ("loopnest", lambda: compiled(*args))):
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    call()
                times[column].append((time.perf_counter() - t0) / a.calls)
        e, lt = statistics.median(times["eager"]), statistics.median(times["loopnest"])
        print(f"| {name} | {e * 1e6:.1f} | {lt * 1e6:.1f} | {e / lt:.2f} |", flush=True)


if __name__ == "__main__":
    main()
