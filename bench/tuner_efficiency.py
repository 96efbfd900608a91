"""Tuner efficiency: how fast each sampler finds the best config of a real C++ reduction kernel.

1. Measure every point of the kernel's search space once with the tuner's own machinery
   (parallel g++ builds, each candidate verified against eager PyTorch, then timed alone on the
   populated buffers) and keep the table (JSON, reused by later runs with ``--table``).
2. Replay the samplers (TPE, random, CMA-ES) against that table through the same Optuna loop a
   sweep runs (``autotune.study.StudyLoop``, default config enqueued first), five seeds each.
3. Report, per sampler, the median number of measured configs needed to come within 3% of the
   exhaustive best, and the median best-so-far curve. The target: TPE within 3% in at most 30%
   of the exhaustive count. The numbers are appended to bench/RESULTS.md with date and machine.

Run: python bench/tuner_efficiency.py [--workload var_mean] [--size cpu] [--table FILE] [--seeds 5]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
kernel pays page faults for a freshly unmapped output on every call.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()

import optuna  # noqa: E402

from loopnest.autotune.evaluate import KernelEvaluator, Outcome  # noqa: E402
from loopnest.autotune.harness import GraphHarness  # noqa: E402
from loopnest.autotune.options import TuneSettings  # noqa: E402
from loopnest.autotune.study import StudyLoop, enqueue_warm_starts, make_sampler  # noqa: E402
from loopnest.autotune.sweep import compile_target, flat_tensors, target  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.core.space import config_key  # noqa: E402
from loopnest.core.timing import BenchOptions, Timing  # noqa: E402
from loopnest.db.api import HardwareInfo, TrialState  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SAMPLERS = ("tpe", "random", "cmaes")
WITHIN = 1.03
CHECKPOINTS = (1, 5, 10, 20, 30, 40, 60, 80, 100, 150, 200)


def setup(workload: str, size: str, hardware: HardwareInfo | None = None, measure_s: float = 0.3):
    """(kernel, space, evaluator) for the workload's reduction kernel with the largest space on
    ``hardware`` (default: this machine; a replay uses the space of the machine that measured)."""
    t = target(workload, "cpp", size)
    fn = compile_target(t, "cpp")
    compiled = fn.lowered.compiled
    args = list(fn.codegen.process_inputs(*t.inputs))
    harness = GraphHarness(compiled, lambda g: flat_tensors(fn.lowered.run(list(args), g)),
                           flat_tensors(t.fn(*t.inputs)), BenchOptions(budget_s=measure_s))
    cpp = registry.get("cpp")
    hardware = hardware or cpp.hardware()
    kernel = max(compiled.schedule.kernels, key=lambda k: (bool(k.reductions), cpp.space(k, hardware).size))
    space = cpp.space(kernel, hardware)
    evaluator = KernelEvaluator(kernel, cpp, harness, 120.0, os.cpu_count() or 1)
    return kernel, space, evaluator


def measure_all(workload: str, size: str, measure_s: float) -> dict:
    """Time every point of the space once on this machine; returns the table."""
    kernel, space, evaluator = setup(workload, size, measure_s=measure_s)
    print(f"{kernel.name} of {workload} ({size}): {space.describe()}", flush=True)
    points = list(space.points())
    valid = [(v, c) for v, c in points if not isinstance(c, Exception)]
    rows = []
    chunk = 4 * evaluator.workers
    for start in range(0, len(valid), chunk):
        part = valid[start:start + chunk]
        for (values, config), outcome in zip(part, evaluator.evaluate([c for _, c in part])):
            rows.append({"values": values, "state": outcome.state.value,
                         "p50_us": outcome.timing.p50_us if outcome.ok else None})
        print(f"  measured {len(rows)}/{len(valid)}", flush=True)
    default = registry.get("cpp").default_config(kernel)
    return {"workload": workload, "size": size, "kernel": kernel.structural_hash,
            "machine": registry.get("cpp").hardware().to_dict(), "default": space.values(default),
            "date": datetime.date.today().isoformat(), "rows": rows}


class TableEvaluator:
    """An ``Evaluator`` that looks timings up in a recorded table instead of measuring."""

    def __init__(self, space, table: dict):
        self.space = space
        self.times = {config_key(space.config(r["values"])): r["p50_us"] for r in table["rows"]}

    def evaluate(self, configs, started=None) -> list[Outcome]:
        times = [self.times.get(config_key(c)) for c in configs]
        return [Outcome(TrialState.OK, timing=Timing(t, t, t, 1)) if t is not None
                else Outcome(TrialState.RUNTIME_ERROR, "failed when measured") for t in times]

    def invalid(self, values, reason) -> Outcome:
        return Outcome(TrialState.INVALID, reason)


def replay(space, table: dict, sampler: str, seed: int, workers: int, max_trials: int) -> list[float]:
    """Best-so-far time after each of at most ``max_trials`` measured configs, for one sampler and seed."""
    n = sum(1 for r in table["rows"] if r["p50_us"] is not None)
    settings = TuneSettings(trials=min(len(table["rows"]), max_trials), time_budget_s=1e9, sampler=sampler, seed=seed,
                            workers=workers, early_stop=False)  # the whole curve
    study = optuna.create_study(direction="minimize", sampler=make_sampler(sampler, space, n, seed))
    enqueue_warm_starts(study, space, [(space.config(table["default"]), "default")])
    result = StudyLoop(study, space, TableEvaluator(space, table), settings, "replay").run()
    values = (float("inf") if value is None else value for _, value in result.history)
    return list(itertools.accumulate(values, min))  # the best so far


def trials_to_target(curve: list[float], optimum: float) -> int:
    """Measured configs until the best is within 3% of the optimum (len+1 if not within the replay)."""
    return next((k + 1 for k, v in enumerate(curve) if v <= WITHIN * optimum), len(curve) + 1)


def report(space, table: dict, seeds: int, workers: int, max_trials: int) -> tuple[str, bool]:
    """Replay every sampler; returns (markdown summary, whether TPE met the target)."""
    times = [r["p50_us"] for r in table["rows"] if r["p50_us"] is not None]
    optimum, n = min(times), len(times)
    marks_at = [k for k in CHECKPOINTS if k <= min(n, max_trials)]
    default = TableEvaluator(space, table).times[config_key(space.config(table["default"]))]
    lines = [f"- space: {space.describe()}; {n} configs measured ({len(table['rows']) - n} failed); "
             f"exhaustive best {optimum:.1f} µs, default {default:.1f} µs ({default / optimum:.2f}x the best)",
             f"- replay batch (parallel compiles per round): {workers}; target: within {WITHIN - 1:.0%} "
             f"of the best in at most 30% of {n} = {int(0.3 * n)} configs", "",
             "| sampler | trials to 3% per seed | median | % of exhaustive | " +
             " | ".join(f"best/opt @{k}" for k in marks_at) + " |",
             "|---|---|---|---|" + "---|" * len(marks_at)]
    met = False
    for sampler in SAMPLERS:
        curves = [replay(space, table, sampler, seed, workers, max_trials) for seed in range(seeds)]
        hits = [trials_to_target(c, optimum) for c in curves]
        median = statistics.median(hits)
        marks = [statistics.median(c[min(k, len(c)) - 1] / optimum for c in curves) for k in marks_at]
        shown = ", ".join(str(h) if h <= len(c) else f">{len(c)}" for h, c in zip(hits, curves))
        lines.append(f"| {sampler} | {shown} | {median:g} | {100 * median / n:.0f}% | "
                     + " | ".join(f"{m:.3f}" for m in marks) + " |")
        if sampler == "tpe":
            met = median <= 0.3 * n
        print(lines[-1], flush=True)
    return "\n".join(lines), met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="var_mean")
    parser.add_argument("--size", default="cpu", choices=("cpu", "tiny"))
    parser.add_argument("--table", type=Path, help="JSON table: reused if it exists, else written")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="replay batch size")
    parser.add_argument("--measure-s", type=float, default=0.3, help="seconds of timing per config")
    parser.add_argument("--measure-only", action="store_true", help="write the table (--table), replay later")
    parser.add_argument("--max-trials", type=int, default=250, help="replay length per sampler and seed")
    parser.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = parser.parse_args()
    if args.table and args.table.exists():
        table = json.loads(args.table.read_text())
    else:
        table = measure_all(args.workload, args.size, args.measure_s)
        if args.table:
            args.table.write_text(json.dumps(table, indent=1))
        if args.measure_only:
            return 0
    machine = {k: v for k, v in table["machine"].items() if k != "fingerprint"}
    _, space, _ = setup(table["workload"], table["size"], HardwareInfo(**machine))
    summary, met = report(space, table, args.seeds, args.workers, args.max_trials)
    table_note = f" --table {args.table}" if args.table else ""
    text = (f"\n## {datetime.date.today().isoformat()} — tuner efficiency, {table['workload']} ({table['size']}) "
            f"on {machine['name']}, {machine['cores']} cores {machine['capability']}\n"
            f"`python bench/tuner_efficiency.py --workload {table['workload']} --size {table['size']}{table_note} "
            f"--workers {args.workers}` (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_=17179869184; every "
            f"config timed once on {table['date']}, verified against eager PyTorch; samplers replayed against "
            f"that table, {args.seeds} seeds, at most {args.max_trials} configs each). "
            f"TPE target {'met' if met else 'NOT met'}.\n{summary}\n")
    print(text)
    if not args.no_append:
        with RESULTS.open("a") as fp:
            fp.write(text)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
