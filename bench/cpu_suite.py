"""CPU suite: eager vs Inductor (C++) vs loopnest (C++, defaults and tuned), side by side.

Prints one markdown table: median ms of each, loopnest's speedups, the fraction of this machine's
copy bandwidth each reaches (bytes = every input read once + every output written once; the copy
bandwidth is measured in the same run, on buffers of the size class's footprint) and the cold
compile times. Every column's results are checked against float64 (``workloads.mismatch``); a
row whose column is off says WRONG. "loopnest tuned" compiles with ``tune="sweep"`` and a few trials per kernel
(``--trials``; 0 leaves the column out), its winners kept in a tuning DB made for this run only.
"direct" is loopnest's defaults called as other compilers call it, ``loopnest.compile_fx`` on the
``make_fx`` graph, without Dynamo's frame around each call (forward rows only): at cache sizes
that frame alone costs eager's own kernels 40-90 µs per call on a 2-core host, which this column
separates from the kernels'. "floor" is eager's own kernels through ``torch.compile`` with Dynamo's
``eager`` backend: the least any ``torch.compile`` backend can add to a call, so eager/floor is the
most that a backend whose kernels only match eager's can reach on the row.
Timings are interleaved round by round so the shared machine's noise hits every column alike; a
round times each column's calls back to back for about ``ROUND_S`` (the median round counts),
after one untimed call, and each round starts one column further on: what a column leaves behind
(its buffers in a large L3, the memory system's state) slows the column after it for several
calls, so a fixed order penalizes a fixed column (a layernorm's loopnest column read 5.4 ms
right after Inductor's and 3.7 ms as the next column).
Training rows (``train``) are timed as one step, forward and backward (``training_step``), and
count ``Workload.min_bytes``. The memory columns give, for each column, the peak bytes torch's
allocator holds during one call (outputs and gradients included), and the resident set's growth
per call over ``common.MEMORY_CALLS`` more calls (0 unless a call leaks).

Run: python bench/cpu_suite.py [--size cpu|cache] [--rounds N] [--trials N] [WORKLOAD ...|new|train]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
kernel pays page faults for a freshly unmapped output on every call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import memory_use, print_memory_table, reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))
os.environ["LOOPNEST_DB"] = f"sqlite:///{tempfile.mkdtemp(prefix='loopnest-db-')}/tuning.db"

import torch  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import loopnest  # noqa: E402
from loopnest.autotune.workloads import (NEW_ROWS, TEN, TRAIN_ROWS, WORKLOADS, float64_results,  # noqa: E402
                                         grad_output, mismatch, result_dtypes, training_step)
from loopnest.backends.cpp.compile import prebuild_header  # noqa: E402

torch._inductor.config.fx_graph_cache = False
torch._dynamo.config.recompile_limit = 64

# Bytes each copy-bandwidth buffer holds, per size class: far beyond the caches for "cpu", the
# suite's footprint (inputs of 2-8 MB) for "cache".
COPY_BYTES = {"cpu": 256 << 20, "cache": 4 << 20}
COLUMNS = ("eager", "inductor", "loopnest", "tuned", "direct", "floor")
ROUND_S = 0.02  # a round times each column for about this long (one call, for calls longer than it)


def copy_gbs(size: str, repeat: int = 30) -> float:
    """This machine's copy bandwidth in GB/s (read + write bytes), the best of ``repeat`` copies
    of a ``COPY_BYTES[size]`` float32 buffer with torch's threads."""
    src = torch.randn(COPY_BYTES[size] // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best / 1e9


def timed_first_call(fn, args) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def compiled(fn, trials: int, args: tuple | None) -> dict:
    """The compiled versions of ``fn`` this suite compares, by column (no tuned one for 0 trials,
    no direct one without ``args``, the inputs its ``make_fx`` graph is traced with)."""
    tuning = {"trials": trials, "db_url": os.environ["LOOPNEST_DB"]}
    out = {"floor": torch.compile(fn, backend="eager"), "inductor": torch.compile(fn),
           "loopnest": torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})}
    if trials:
        out["tuned"] = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "sweep", "tuning": tuning})
    if args is not None:
        out["direct"] = loopnest.compile_fx(make_fx(fn)(*args), list(args), backend="cpp", tune="off")
    return out


def run(name: str, size: str, rounds: int, trials: int, gbs: float) -> dict:
    w = WORKLOADS[name]
    args = w.train_inputs(size) if w.train else w.inputs(size)
    torch._dynamo.reset()
    grad_out = grad_output(w.fn(*args)) if w.train else None

    def call(fn):
        return (lambda: training_step(fn, args, grad_out)) if w.train else (lambda: fn(*args))

    want, dtypes = float64_results(w, args), result_dtypes(w, args)
    expect = call(w.fn)()
    fns, cold, wrong = {"eager": call(w.fn)}, {}, {}
    for column, fn in compiled(w.fn, trials, None if w.train else args).items():
        got, cold[column] = timed_first_call(call(fn), ())
        why = mismatch(got, want, dtypes, w.train, w.rounds_to)
        if why is not None:
            print(f"MISMATCH {name}/{column} {why}", flush=True)
            wrong[column] = why
        fns[column] = call(fn)
    times, fastest = {k: [] for k in fns}, float("inf")
    for _ in range(3):
        for fn in fns.values():
            t0 = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t0)
    calls = max(1, min(1000, round(ROUND_S / fastest)))  # back-to-back calls per round, the same for all
    order = list(fns)
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            fn = fns[k]
            fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[k].append((time.perf_counter() - t0) / calls)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    med.setdefault("tuned", float("nan"))
    med.setdefault("direct", float("nan"))
    memory = {k: memory_use(fn) for k, fn in fns.items()}
    moved = w.min_bytes(args, expect[0] if w.train else expect)
    frac = {k: moved / (v / 1e3) / (gbs * 1e9) for k, v in med.items()}
    return dict(name=name, ms=med, frac=frac, cold=cold, mb=moved / 1e6, memory=memory, wrong=wrong)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(TEN),
                        help="workload names; 'new' and 'train' stand for the new and the training rows")
    parser.add_argument("--size", default="cpu", choices=sorted(COPY_BYTES), help="size class of the inputs")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--trials", type=int, default=8,
                        help="configs tried per kernel for the tuned column (0: no tuned column)")
    opts = parser.parse_args()
    groups = {"new": NEW_ROWS, "train": TRAIN_ROWS}
    names = [n for spec in opts.workloads for n in groups.get(spec, (spec,))]
    gbs = copy_gbs(opts.size)
    header_s = prebuild_header()
    print(f"# CPU suite, size {opts.size}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"measured copy bandwidth {gbs:.1f} GB/s ({COPY_BYTES[opts.size] >> 20} MB buffers), "
          f"{opts.trials} trials per kernel, {time.strftime('%Y-%m-%d')}; "
          f"precompiled headers built once in {header_s:.1f} s, apart from the cold compile columns")
    print("| workload | MB moved | eager ms | inductor ms | loopnest ms | tuned ms | direct ms | floor ms "
          "| inductor/loopnest | inductor/tuned | eager/loopnest | eager/tuned | eager/direct | eager/floor "
          "| frac eager | frac inductor | frac loopnest | frac tuned | frac direct | frac floor "
          "| cold inductor s | cold loopnest s | cold tuned s |")
    print("|---" * 23 + "|")
    ratios: dict[str, list[float]] = {"loopnest": [], "tuned": []}
    memory = []
    for name in names:
        r = run(name, opts.size, opts.rounds, opts.trials, gbs)
        ms, fr, cold = r["ms"], r["frac"], r["cold"]
        for k in ratios:
            ratios[k].append(ms["inductor"] / ms[k])
        shown = name + "".join(f" ({k} WRONG)" for k in r["wrong"])
        print(f"| {shown} | {r['mb']:.0f} | " + " | ".join(f"{ms[k]:.2f}" for k in COLUMNS)
              + f" | {ms['inductor'] / ms['loopnest']:.2f} | {ms['inductor'] / ms['tuned']:.2f} "
              f"| {ms['eager'] / ms['loopnest']:.2f} | {ms['eager'] / ms['tuned']:.2f} "
              f"| {ms['eager'] / ms['direct']:.2f} | {ms['eager'] / ms['floor']:.2f} | "
              + " | ".join(f"{fr[k]:.2f}" for k in COLUMNS)
              + f" | {cold['inductor']:.2f} | {cold['loopnest']:.2f} | {cold.get('tuned', float('nan')):.1f} |",
              flush=True)
        memory.append((name, r["memory"]))
    print_memory_table(memory, COLUMNS[:3])
    print("\ngeometric mean of inductor/loopnest time ratios: "
          f"defaults {statistics.geometric_mean(ratios['loopnest']):.2f}, "
          f"tuned {statistics.geometric_mean(ratios['tuned']):.2f}")


if __name__ == "__main__":
    main()
