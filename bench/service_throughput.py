"""Throughput of the tuning service: wall time for N worker processes to drain the requests of a
set of workloads, for each N, with the winners' times against the first run's.

Each run starts from an empty database (a SQLite file in a temp dir, or with ``--postgres URL``
a fresh database created on that server), enqueues one request per kernel of the workloads
(``loopnest.autotune.request``), starts N ``autotune worker`` processes sharing the one device,
and times from the workers' start until no request is pending or running. Requests per minute
and the wall time are printed per N, and the winners' times of each run are compared with the
first run's (median and worst ratio over the keys both runs tuned): parallel compiles and
serialized timing should speed the drain up without making the winners slower. The last column
is how long the device lock was held (every worker's timing windows, from ``--timing-log``): as
it nears the wall time, the device is the bottleneck and more workers cannot help.

Run it (CPU, this machine)::

    python bench/service_throughput.py --device cpu --workers 1,2 --trials 4 --size tiny

On one GPU (the H200), the suite at GPU sizes with 1, 2 and 4 workers sharing it::

    python bench/service_throughput.py --device cuda --workers 1,2,4 --trials 10

On a host with several GPUs, one worker per GPU (``autotune worker --devices 0,..``, each process
seeing its own GPU; NCCL's and NVSHMEM's multicast off in its environment), the same requests
and budget with 1 and 2 GPUs, then the winners of each run timed side by side in one process::

    python bench/service_throughput.py --device cuda --gpus 1,2 --trials 10 --side-by-side

Each run's table row also says what its database holds: measured trials, configs measured twice
within one study, Optuna trials finished without a measured row (lost) or still RUNNING, and the
most winner rows any key has (1: exactly one per key).

``--workloads`` picks other built-in workloads (default: the ten of the suite), ``--measure``
the CPU seconds spent timing a config, ``--postgres`` a PostgreSQL server to run against.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import torch
from sqlalchemy import create_engine, make_url, text
from torch.fx.experimental.proxy_tensor import make_fx

from loopnest.api import compile_fx
from loopnest.autotune.requests import request_workloads
from loopnest.autotune.worker import NO_MULTICAST
from loopnest.autotune.workloads import WORKLOADS
from loopnest.db.api import TuningDB
from loopnest.db.models import RequestState
from loopnest.db.queue import RequestQueue

SUITE = list(WORKLOADS)[:10]


def fresh_db(postgres: str | None, tmp: str, label: str) -> str:
    """An empty database URL: a SQLite file, or a new database on the PostgreSQL server."""
    if postgres is None:
        return f"sqlite:///{tmp}/{label}.db"
    name = f"ln_bench_{label}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(postgres).set(database=name).render_as_string(hide_password=False)


def drop_db(postgres: str | None, url: str) -> None:
    """Drop a database ``fresh_db`` created on the PostgreSQL server (a SQLite file goes with its dir)."""
    if postgres is None:
        return
    admin = create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def drain(url: str, workers: int, backend: str, measure: float, timing_log: str, triton_cache: str,
          gpus: int = 0) -> float:
    """Start ``workers`` worker processes sharing the device, or with ``gpus`` one ``autotune worker
    --devices 0,..`` that runs a worker per GPU; seconds until the queue has no pending or running
    request.

    The workers compile into ``triton_cache``, a directory of this run's own: a run after another
    would otherwise find the other's compiled candidates in Triton's cache and skip their compiles."""
    queue = RequestQueue(TuningDB(url))
    args = [sys.executable, "-m", "loopnest.cli", "worker", "--db", url, "--backend", backend, "--idle-exit", "5",
            "--measure", str(measure), "--timing-log", timing_log]
    if gpus:
        args += ["--devices", ",".join(str(d) for d in range(gpus))]
    env = {**os.environ, "TRITON_CACHE_DIR": triton_cache, **NO_MULTICAST}
    start = time.perf_counter()
    procs = [subprocess.Popen(args, stderr=subprocess.DEVNULL, env=env) for _ in range(1 if gpus else workers)]
    while any(r.state in (RequestState.PENDING, RequestState.RUNNING) for r in queue.list()):
        if all(p.poll() is not None for p in procs):
            raise RuntimeError("every worker exited with requests left; run one by hand to see why")
        time.sleep(0.2)
    elapsed = time.perf_counter() - start
    for p in procs:
        p.wait()
    return elapsed


def run(n: int, args, backend: str, tmp: str, gpus: bool = False) -> dict:
    """One drain of the workloads' requests by ``n`` workers (``n`` GPUs with ``gpus``) into a
    fresh database; its counts, wall time, winners and integrity (``integrity``)."""
    label = f"g{n}" if gpus else f"w{n}"
    url = fresh_db(args.postgres, tmp, label)
    ids = request_workloads(args.workloads, backend, args.size, trials=args.trials, db_url=url)
    timing_log = os.path.join(tmp, f"{label}.timing.jsonl")
    wall = drain(url, n, backend, args.measure, timing_log, os.path.join(tmp, f"{label}.triton"), n if gpus else 0)
    db = TuningDB(url)
    records = RequestQueue(db).list()
    winners = {(w.kernel_hash, w.key.sizes_key, w.key.dtypes_key): w.time_us for w in db.winners()}
    done = sum(1 for r in records if r.state == RequestState.DONE)
    db.close()
    checks = integrity(url)
    if not args.keep:
        drop_db(args.postgres, url)
    return {"workers": n, "requests": len(ids), "done": done, "failed": len(records) - done, "wall_s": wall,
            "per_minute": 60.0 * done / wall, "winners": winners, "lock_s": lock_held_s(timing_log),
            "url": url, **checks}


def integrity(url: str) -> dict:
    """What a drain left in its database: measured trials, configs measured twice in one study,
    Optuna trials still RUNNING, Optuna trials finished without a measured row (lost), and the
    most winner rows any key has (1 when every key has exactly one)."""
    engine = create_engine(url)
    with engine.connect() as conn:
        per_study = conn.execute(text(
            "SELECT study, COUNT(*), COUNT(DISTINCT CAST(config AS TEXT)) FROM ln_trials GROUP BY study")).all()
        running = conn.execute(text("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'")).scalar()
        finished = dict(conn.execute(text(
            "SELECT s.study_name, COUNT(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
            "WHERE t.state <> 'RUNNING' GROUP BY s.study_name")).all())
        most = conn.execute(text(
            "SELECT MAX(c) FROM (SELECT COUNT(*) AS c FROM ln_winners "
            "GROUP BY kernel_id, hardware_id, sizes_key, dtypes_key) AS per_key")).scalar()
    engine.dispose()
    measured = {study: count for study, count, _ in per_study}
    return {"trials": sum(measured.values()), "duplicates": sum(c - d for _, c, d in per_study),
            "running": running, "lost": sum(max(0, n - measured.get(study, 0)) for study, n in finished.items()),
            "winner_rows_per_key": most or 0}


def lock_held_s(timing_log: str) -> float:
    """Seconds the device lock was held (every worker's timing windows; they never overlap)."""
    if not os.path.exists(timing_log):  # no request got as far as timing
        return 0.0
    with open(timing_log) as f:
        windows = [json.loads(line) for line in f if line.strip()]
    return sum(w["end"] - w["start"] for w in windows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--workers", default="1,2", help="worker counts to run, e.g. 1,2,4")
    p.add_argument("--gpus", help="GPU counts to run instead, e.g. 1,2,4: one worker per GPU (autotune worker --devices)")
    p.add_argument("--trials", type=int, default=10, help="budget per request")
    p.add_argument("--size", choices=("gpu", "cpu", "cache", "tiny"), help="default: gpu on cuda, else cpu")
    p.add_argument("--workloads", nargs="+", default=SUITE)
    p.add_argument("--measure", type=float, default=0.1, help="CPU seconds timing one config")
    p.add_argument("--postgres", metavar="URL", help="run on fresh databases of this server (default: SQLite)")
    p.add_argument("--side-by-side", action="store_true",
                   help="then time each workload compiled from each run's winners, interleaved in this process")
    args = p.parse_args()
    args.keep = args.side_by_side
    if args.gpus and args.device != "cuda":
        p.error("--gpus needs --device cuda")
    backend = "triton" if args.device == "cuda" else "cpp"
    size = args.size or ("gpu" if args.device == "cuda" else "cpu")
    counts = [int(x) for x in (args.gpus or args.workers).split(",")]
    unit = "GPUs" if args.gpus else "workers"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            results.append(run(n, args, backend, tmp, gpus=bool(args.gpus)))
            if len(results) == 1:
                print(f"| {unit} | requests | done | failed | wall s | requests/min | speedup | winners vs "
                      f"{counts[0]} {unit}: median, worst | device lock held s | trials | measured twice | "
                      "lost | left running | winner rows per key |")
                print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            print_row(results[-1], results[0])
        if args.side_by_side:
            print_side_by_side(args.workloads, [r["url"] for r in results], [f"{n} {unit}" for n in counts],
                               backend, size, args.device)
            for r in results:
                drop_db(args.postgres, r["url"])


def print_side_by_side(workloads: list[str], urls: list[str], labels: list[str], backend: str, size: str,
                       device: str, rounds: int = 5, calls: int = 20) -> None:
    """Each workload compiled from each database's winners (``tune="db"``), timed in interleaved
    rounds of ``calls`` synchronized calls; the median round of each, and its ratio to the first's."""
    columns = [f"{x} ms" for x in labels] + [f"{x} / {labels[0]}" for x in labels[1:]]
    print(f"\n| workload | {' | '.join(columns)} |\n|---|" + "---|" * len(columns))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name in workloads:
        w = WORKLOADS[name]
        inputs = w.inputs(size, device=device)
        graph = make_fx(w.fn)(*inputs)
        fns = [compile_fx(graph, inputs, backend=backend, tune="db", tuning={"db_url": url}) for url in urls]
        times = [[] for _ in fns]
        for _ in range(rounds):
            for k, fn in enumerate(fns):
                fn(*inputs)
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(*inputs)
                sync()
                times[k].append((time.perf_counter() - t0) / calls * 1e3)
        ms = [statistics.median(t) for t in times]
        cells = [f"{m:.4f}" for m in ms] + [f"{m / ms[0]:.3f}" for m in ms[1:]]
        print(f"| {name} | {' | '.join(cells)} |", flush=True)


def print_row(r: dict, base: dict) -> None:
    """One table row, printed as soon as its run ends (a run cut short still reports the others)."""
    common = [k for k in r["winners"] if k in base["winners"]]
    ratios = [r["winners"][k] / base["winners"][k] for k in common] or [float("nan")]
    worst = max(common, key=lambda k: r["winners"][k] / base["winners"][k], default=None)
    print(f"| {r['workers']} | {r['requests']} | {r['done']} | {r['failed']} | {r['wall_s']:.1f} | "
          f"{r['per_minute']:.1f} | {base['wall_s'] / r['wall_s']:.2f}x | "
          f"{statistics.median(ratios):.3f}, {max(ratios):.3f} ({len(common)} keys) | "
          f"{r['lock_s']:.1f} ({r['lock_s'] / r['wall_s']:.0%}) | {r['trials']} | {r['duplicates']} | {r['lost']} | "
          f"{r['running']} | {r['winner_rows_per_key']} |", flush=True)
    if worst is not None and r is not base:
        print(f"  worst key: kernel {worst[0][:12]} at {worst[1]} {worst[2]}: {r['winners'][worst]:.1f} µs against "
              f"{base['winners'][worst]:.1f} µs", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
