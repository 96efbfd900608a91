"""Tuned softmax under dynamic shapes, C++ backend: ``torch.compile(dynamic=True)`` against the
static tuned kernel at each size, side by side in one process, plus the host cost of choosing
configs per size.

1. For each row count (2048 columns), a static compile sweeps the softmax kernel at that size
   (``tune="sweep"``) and stores its winner in a fresh tuning DB. One ``dynamic=True`` compile
   (``tune="db"``) is then called at every size: at its first call at a size it finds that
   winner (the key of the kernel specialized at the call's sizes is the static kernel's) and
   runs it from the symbolic kernel. Both are timed alternately, ``--rounds`` rounds of
   ``--repeat`` calls each; the table shows the median ms of each, dynamic / static per round
   (median, min, max), and the ratio of the best rounds (the least disturbed on a shared
   machine). The comparison includes the cost of symbolic sizes in the generated code.
2. Dispatch: the same two kinds of graph at a tiny size (8x16, one thread, a stored winner),
   the median host time per call, dynamic minus static, each function called ``--calls`` times,
   the functions taking turns every 10 calls (a change of load hits all alike). Through
   ``torch.compile`` three numbers side by side, the four functions taking turns: with loopnest,
   with ``backend="aot_eager"`` (Dynamo and AOTAutograd without loopnest: the framework's share,
   what the same front end costs any backend), and their difference (loopnest's share). Then
   loopnest's own layers alone: ``LoweredGraph.run`` (the FX calling convention, called with the
   arguments Dynamo passes) and ``CompiledGraph`` (call plans).

    python bench/dynamic_tuning.py [--rows 512 4096 32768] [--cols 2048] [--trials 8] [--rounds 7]
                                   [--dispatch-only]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import reexec_with_malloc_thresholds  # noqa: E402

reexec_with_malloc_thresholds()
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="ln-dyn-"))

import torch  # noqa: E402

from loopnest.autotune.keys import tuning_key  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.backends.cpp.params import CppConfig  # noqa: E402
from loopnest.db.api import open_db  # noqa: E402

torch._dynamo.config.recompile_limit = 64


def softmax(x):
    return torch.softmax(x, -1)


def compiled(dynamic: bool, tuning: dict, tune: str):
    """A fresh torch.compile of softmax on the C++ backend, and the graphs it compiles."""
    graphs = []
    fn = torch.compile(lambda x: softmax(x), backend="loopnest", dynamic=dynamic,
                       options={"backend": "cpp", "tune": tune, "tuning": tuning, "recorder": graphs.append})
    return fn, graphs


def timed(fn, x, repeat: int) -> float:
    """Median ms of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def side_by_side(rows: list[int], cols: int, trials: int, rounds: int, repeat: int, url: str) -> None:
    tuning = {"db_url": url, "trials": trials, "measure_s": 0.3}
    static = {}
    for r in rows:
        fn, graphs = compiled(False, tuning, "sweep")
        fn(torch.randn(r, cols))
        static[r] = (fn, graphs[0].compiled)
    dynamic, graphs = compiled(True, tuning, "db")
    inputs = {r: torch.randn(r, cols) for r in rows}
    for r in rows:
        torch.testing.assert_close(dynamic(inputs[r]), softmax(inputs[r]))
    graph = graphs[0].compiled
    print(f"one dynamic graph for {len(rows)} sizes (graphs compiled: {len(graphs)})")
    print(f"{'rows x cols':>13} {'static config':>34} {'dynamic decision':>22} {'static ms':>10} "
          f"{'dynamic ms':>10} {'dyn/static (min..max)':>24} {'best/best':>9}")
    for r in rows:
        fn, static_graph = static[r]
        (decision,) = static_graph.tuning.values()
        name = graph.schedule.kernels[0].name
        dyn = graph.tuning[f"{name}@{r}x{cols}"]
        assert dyn.config == decision.config, (dyn, decision)
        s_ms, d_ms, ratios = [], [], []
        for _ in range(rounds):
            s_ms.append(timed(fn, inputs[r], repeat))
            d_ms.append(timed(dynamic, inputs[r], repeat))
            ratios.append(d_ms[-1] / s_ms[-1])
        config = CppConfig.from_json(decision.config)
        label = f"threads={config.threads} {config.schedule},{config.grain}"
        print(f"{r:>7}x{cols:<5} {label + ' (' + decision.source + ')':>34} {dyn.source + ' ' + dyn.lookup:>22} "
              f"{statistics.median(s_ms):>10.3f} {statistics.median(d_ms):>10.3f} "
              f"{statistics.median(ratios):>8.3f} ({min(ratios):.3f}..{max(ratios):.3f}) "
              f"{min(d_ms) / min(s_ms):>9.3f}")


def dispatch_overhead(calls: int, url: str) -> None:
    cpp = registry.get("cpp")
    x = torch.randn(8, 16)
    tuning = {"db_url": url}
    static_fn, static_graphs = compiled(False, tuning, "off")
    static_fn(x)
    kernel = static_graphs[0].compiled.schedule.kernels[0]
    key = tuning_key(kernel, "cpp", cpp.hardware())
    db = open_db(url)
    db.register_kernel(key.kernel_hash, "cpp", "softmax", kernel.text())
    db.store_winner(key, CppConfig(threads=1).to_json(), 1.0, 2.0, cpp.software())
    static_fn, static_graphs = compiled(False, tuning, "db")
    dynamic_fn, dynamic_graphs = compiled(True, tuning, "db")
    static_fn(x), dynamic_fn(x)
    s_graph, d_graph = static_graphs[-1].compiled, dynamic_graphs[-1].compiled
    name = d_graph.schedule.kernels[0].name
    print(f"\ndispatch at 8x16: static {next(iter(s_graph.tuning.values())).source}, "
          f"dynamic {d_graph.tuning[f'{name}@8x16'].source} {d_graph.tuning[f'{name}@8x16'].config}")
    frontend = [torch.compile(softmax, backend="aot_eager", dynamic=d) for d in (False, True)]
    for f in frontend:
        f(x)
    through = per_call({"loopnest static": static_fn, "loopnest dynamic": dynamic_fn,
                        "aot_eager static": frontend[0], "aot_eager dynamic": frontend[1]}, x, calls)
    us = {name: statistics.median(times) / 1e3 for name, times in through.items()}
    loopnest, framework = (us[f"{b} dynamic"] - us[f"{b} static"] for b in ("loopnest", "aot_eager"))
    print(f"through torch.compile, {calls} calls each, median µs per call: "
          + ", ".join(f"{name} {t:.2f}" for name, t in us.items()))
    print(f"dynamic - static: with loopnest {loopnest:+.2f} µs, with aot_eager (the framework's share) "
          f"{framework:+.2f} µs, difference (loopnest's share) {loopnest - framework:+.2f} µs")
    s_lowered, d_lowered = static_graphs[-1], dynamic_graphs[-1]
    args = []  # what Dynamo passes the dynamic graph (its symbols' values, then the tensor)
    d_lowered.run = lambda a, compiled=None: args.append(list(a)) or type(d_lowered).run(d_lowered, a, compiled)
    dynamic_fn(x)
    del d_lowered.run
    layers = {"LoweredGraph.run": (lambda t: s_lowered.run([t]), lambda t: d_lowered.run(list(args[0]))),
              "CompiledGraph": (s_graph, d_graph)}
    for level, (static, dynamic) in layers.items():
        own = {k: statistics.median(v) / 1e3 for k, v in per_call({"s": static, "d": dynamic}, x, calls).items()}
        print(f"{level:>16}: median static {own['s']:.2f} µs, dynamic {own['d']:.2f} µs, "
              f"dynamic - static {own['d'] - own['s']:+.2f} µs")


def per_call(fns: dict, x, calls: int, block: int = 10) -> dict[str, list[int]]:
    """Host ns of each of ``calls`` calls of each function; the functions take turns every
    ``block`` calls, so a change of load hits all alike."""
    times: dict[str, list[int]] = {name: [] for name in fns}
    for _ in range(max(1, calls // block)):
        for name, fn in fns.items():
            out = times[name]
            for _ in range(block):
                t0 = time.perf_counter_ns()
                fn(x)
                out.append(time.perf_counter_ns() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[512, 4096, 32768])
    parser.add_argument("--cols", type=int, default=2048)
    parser.add_argument("--trials", type=int, default=8, help="configs measured per static sweep")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=20, help="calls per round")
    parser.add_argument("--calls", type=int, default=100_000, help="calls per graph for the dispatch cost")
    parser.add_argument("--dispatch-only", action="store_true", help="measure the dispatch cost only")
    args = parser.parse_args()
    url = f"sqlite:///{tempfile.mkdtemp(prefix='ln-dyn-db-')}/tuning.db"
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, tuning DB {url}")
    if not args.dispatch_only:
        side_by_side(args.rows, args.cols, args.trials, args.rounds, args.repeat, url)
    dispatch_overhead(args.calls, url)


if __name__ == "__main__":
    main()
