"""The ``autotune`` command line: a thin table of subcommands over loopnest's Python API.

Every subcommand takes ``--db URL`` (default ``$LOOPNEST_DB``, else a SQLite file in the user
cache dir) and ``--format table|json``. Usage errors print the subcommand's help; any other
error is one ``autotune: ...`` line and exit status 2 (130 after Ctrl-C); a missing optional
dependency (psycopg, matplotlib) is such a line, naming the extra that installs it.

Subcommands import what they use when they run (the tuning DB's SQLAlchemy, torch, Optuna,
matplotlib), so ``autotune --help`` and the DB queries start without torch.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
from typing import Any, Callable, Sequence

from .autotune.options import SAMPLERS, SIZE_CLASSES, TuneSettings
from .backends import registry
from .core.settings import db_url


# -- output ---------------------------------------------------------------------------------------
def duration(us: float | None) -> str:
    """A time in µs with a readable unit: ``41.2 µs``, ``27.3 ms``, ``1.24 s``."""
    if us is None:
        return "-"
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if us >= scale:
            return f"{us / scale:.3g} {unit}"
    return f"{us:.3g} µs"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value) if all(isinstance(v, int) for v in value) else ",".join(map(str, value))
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return "-" if value is None else str(value)


# A column: (title, key of the row, how to print its value); times and ratios align right.
Column = tuple[str, str, Callable[[Any], str]]


def speedup(value: float | None) -> str:
    """A ratio as ``1.23x``."""
    return "-" if value is None else f"{value:.2f}x"


def col(key: str, fmt: Callable[[Any], str] = _cell, title: str | None = None) -> Column:
    """A table column showing ``row[key]`` through ``fmt``."""
    return (title or key, key, fmt)


def table(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """Rows as an aligned text table."""
    cells = [[fmt(r.get(key)) for _, key, fmt in columns] for r in rows]
    right = [fmt in (duration, speedup) for _, _, fmt in columns]
    widths = [max([len(title)] + [len(row[i]) for row in cells]) for i, (title, _, _) in enumerate(columns)]

    def line(values) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    return "\n".join([line([title for title, _, _ in columns])] + [line(row) for row in cells])


def emit(args, rows: Sequence[dict], columns: Sequence[Column]) -> None:
    """Print rows as a table or a JSON array, as ``--format`` asks."""
    if args.format == "json":
        print(json.dumps(list(rows), indent=2, default=str))
    else:
        print(table(rows, columns) if rows else "(nothing)")


def winner_row(w) -> dict:
    """A winner as a JSON object (``db list --format json``)."""
    row = w.to_json()
    row["hardware"] = w.hardware.to_dict()
    return row


WINNER_COLUMNS = (col("name"), col("kernel", lambda h: h[:12]), col("backend"), col("sizes"), col("dtypes"),
                  col("time_us", duration, "time"), col("default_time_us", duration, "default"),
                  col("speedup", speedup), col("stale"), col("config"))


def _db(args):
    from .db.api import open_db, resolve_url

    return open_db(resolve_url(args.db))


def _reader(args):
    """The tuning DB for the commands that only read it (without the ORM: they start faster)."""
    from .db.read import TuningReader, resolve_url

    return TuningReader(resolve_url(args.db))


# -- subcommands ------------------------------------------------------------------------------------
def cmd_sweep(args) -> int:
    from sqlalchemy.exc import DBAPIError

    from .autotune.sweep import sweep, targets
    from .autotune.workloads import resolve
    from .db.api import DatabaseUnavailable, open_db, resolve_url

    backend = registry.get(args.backend) if args.backend else registry.for_this_machine()
    settings = TuneSettings(trials=args.trials, time_budget_s=args.time_budget, timeout_s=args.timeout,
                            sampler=args.sampler, db_url=resolve_url(args.db), study_prefix=args.study,
                            seed=args.seed, force=True, progress=not args.no_progress,
                            early_stop=not args.no_early_stop,
                            **({"workers": args.workers} if args.workers else {}))
    for spec in args.workloads:
        resolve(spec)  # an unknown name is a usage error before anything runs
    open_db(settings.db_url)  # a DB that cannot be used is an error of the command, not of a workload
    rows, failed = [], []
    for spec in args.workloads:
        _check_interrupt()
        print(f"sweeping {spec} on {backend.name} ...", file=sys.stderr)
        try:
            reports = [r for t in targets(spec, backend, args.size) for r in sweep(t, backend, settings)]
        except (DatabaseUnavailable, DBAPIError):
            raise
        except Exception as exc:  # noqa: BLE001 - one workload's failure must not lose the others
            print(f"autotune: sweeping {spec} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed.append(spec)
            continue
        rows += [{"workload": spec, **r.to_json(), "trials": f"{r.ok}/{r.failed}", "winner": r.winner,
                  "in_call_x": r.in_call["default_us"] / r.in_call["challenger_us"] if r.in_call else None,
                  "wall_us": r.wall_s * 1e6 if r.wall_s is not None else None} for r in reports]
    if args.format == "json":
        for row in rows:
            for extra in ("winner", "in_call_x", "wall_us"):  # table columns; JSON has in_call and wall_s
                del row[extra]
    emit(args, rows, (col("workload"), col("kernel"), col("sizes"), col("default_us", duration, "default"),
                      col("best_us", duration, "best"), col("speedup", speedup), col("in_call_x", speedup, "in-call"),
                      col("winner"), col("trials"), col("wall_us", duration, "wall"), col("stored")))
    return 1 if failed else 0


def cmd_db_list(args) -> int:
    with _reader(args) as db:
        winners = db.winners(backend=args.backend, stale=True if args.stale else None)
    if args.kernel:
        winners = [w for w in winners if w.kernel_hash.startswith(args.kernel) or w.name == args.kernel]
    emit(args, [winner_row(w) for w in winners], WINNER_COLUMNS)
    return 0


def cmd_db_show(args) -> int:
    from .autotune.queries import kernel_winners

    with _reader(args) as db:
        winners = kernel_winners(db, args.kernel)
        hashes = {w.kernel_hash for w in winners} or {args.kernel}
        trials = [t for t in db.trials() if any(t.kernel_hash.startswith(h) for h in hashes)]
    if args.format == "json":
        print(json.dumps({"winners": [winner_row(w) for w in winners],
                          "trials": [t.__dict__ for t in trials]}, indent=2, default=str))
        return 0
    print(f"winners of {args.kernel}:")
    emit(args, [winner_row(w) for w in winners], WINNER_COLUMNS)
    print(f"\ntrials ({len(trials)}):")
    rows = [{**t.__dict__, "state": t.state.value} for t in trials]
    emit(args, rows, (col("id"), col("sizes"), col("state"), col("p50_us", duration, "p50"), col("config"),
                      col("message")))
    return 0


def cmd_db_best(args) -> int:
    from .autotune.queries import best, parse_sizes

    results = best(_db(args), args.kernel, parse_sizes(args.sizes))
    rows = [{"kind": r.kind.value, "kernel": r.winner.kernel_hash if r.winner else args.kernel,
             "name": r.winner.name if r.winner else None, "sizes": r.winner.sizes if r.winner else None,
             "time_us": r.winner.time_us if r.winner else None, "measured": r.is_measured,
             "config": r.config} for r in results]
    rows = rows or [{"kind": "miss", "kernel": args.kernel, "measured": False}]  # an unknown name misses too
    emit(args, rows, (col("kind"), col("name"), col("kernel"), col("sizes"), col("time_us", duration, "time"),
                      col("measured"), col("config")))
    return 0


def cmd_db_stale(args) -> int:
    from .autotune.queries import stale_winners

    with _reader(args) as db:
        stale = stale_winners(db)
    rows = [{**winner_row(s.winner), "changed": {k: f"{a} -> {b}" for k, (a, b) in s.changed.items()}}
            for s in stale]
    emit(args, rows, (col("name"), col("kernel", lambda h: h[:12]), col("backend"), col("sizes"),
                      col("time_us", duration, "time"), col("changed")))
    return 0


def cmd_db_export(args) -> int:
    with _reader(args) as db, open(args.out, "w") if args.out else contextlib.nullcontext(sys.stdout) as fp:
        count = db.export_jsonl(fp)
    print(f"exported {count} winners", file=sys.stderr)
    return 0


def cmd_db_import(args) -> int:
    from .autotune.queries import validate_stored_config
    from .db.api import ImportRowError

    db = _db(args)
    try:
        with open(args.file) as fp:
            parsed = db.import_jsonl(fp, validate_stored_config)
    except ImportRowError as exc:
        print(f"autotune: import failed, nothing imported: {exc}", file=sys.stderr)
        return 1
    for line in parsed.duplicates:
        print(f"duplicate key: {line}")
    print(f"imported {len(parsed.records)} winners")
    return 0


def cmd_db_gc(args) -> int:
    from .autotune.optuna_tables import delete_orphans

    db = _db(args)
    repaired = db.repair()
    repaired["optuna_orphans"] = delete_orphans(db.engine)
    row = {"deleted_trials": db.gc(args.older_than), "older_than_days": args.older_than, **repaired}
    emit(args, [row], tuple(col(k) for k in row))
    return 0


def cmd_hardware(args) -> int:
    import torch

    rows = []
    for device in ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]:
        backend = registry.for_device(device)
        rows.append({"device": device, **backend.hardware(device).to_dict(), "software": backend.software()})
    emit(args, rows, tuple(col(k) for k in ("device", "fingerprint", "kind", "name", "capability", "cores",
                                            "memory_bytes")))
    return 0


def cmd_enqueue(args) -> int:
    from .autotune.requests import request_workloads

    ids = request_workloads(args.workloads, args.backend, args.size, priority=args.priority, trials=args.trials,
                            max_attempts=args.max_attempts, hardware=args.hardware, db_url=args.db)
    emit(args, [{"request": i} for i in ids], (col("request"),))
    return 0


def cmd_worker(args) -> int:
    from .autotune.worker import Worker, WorkerOptions, spawn_per_device, visible_devices
    from .db.api import resolve_url

    backend = registry.get(args.backend) if args.backend else registry.for_this_machine()
    devices = visible_devices(args.devices, backend)
    if len(devices) > 1:  # one process per device, each seeing only its own
        flags = {"--db": resolve_url(args.db), "--backend": backend.name, "--lease": args.lease,
                 "--measure": args.measure, "--max-requests": args.max_requests, "--idle-exit": args.idle_exit,
                 "--workers": args.workers, "--timing-log": args.timing_log, "--share-above": args.share_above}
        return spawn_per_device(devices, [str(x) for k, v in flags.items() if v is not None for x in (k, v)])
    options = WorkerOptions(db_url=resolve_url(args.db), backend=backend.name, lease_s=args.lease,
                            idle_exit_s=args.idle_exit, max_requests=args.max_requests, measure_s=args.measure,
                            timing_log=args.timing_log, share_above=args.share_above or None,
                            **({"compile_workers": args.workers} if args.workers else {}))
    served = Worker(options).run()
    print(f"served {served} requests", file=sys.stderr)
    return 0


QUEUE_COLUMNS = (col("id"), col("state"), col("name"), col("backend"), col("sizes"), col("hardware"),
                 col("priority"), col("trials"), col("attempts"), col("owner"), col("age_s", lambda s: f"{s:.0f} s", "age"),
                 col("error", lambda e: "-" if not e else e[:60]))


def cmd_queue(args) -> int:
    from .autotune.requests import cancel, queue_rows, queue_summary

    if args.action == "cancel":
        if args.id is None:
            raise ValueError("queue cancel needs a request ID (`autotune queue` lists them)")
        emit(args, [cancel(args.db, args.id).to_json()], (col("id"), col("state"), col("name")))
        return 0
    rows = queue_rows(args.db)
    if args.format == "json":
        print(json.dumps([{k: v for k, v in r.items() if k != "age_s"} for r in rows], indent=2, default=str))
        return 0
    emit(args, rows, QUEUE_COLUMNS)
    summary = queue_summary(args.db)
    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    return 0


def cmd_report(args) -> int:
    from .autotune.report import write_report  # without matplotlib: one line from _failure

    import optuna

    from .db.api import resolve_url

    url = resolve_url(args.db)
    storage = optuna.storages.RDBStorage(url)
    names = optuna.get_all_study_names(storage)
    if args.study not in names:
        matches = [n for n in names if args.study in n]
        if len(matches) != 1:
            listing = "\n  ".join(names) or "(none)"
            print(f"autotune: no study {args.study!r} in {url}; studies:\n  {listing}", file=sys.stderr)
            return 1
        args.study = matches[0]
    try:
        out = write_report(optuna.load_study(study_name=args.study, storage=storage), args.out)
    except OSError as exc:
        raise ValueError(f"cannot write the report to {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {out}")
    return 0


# -- the parser ----------------------------------------------------------------------------------------
def _common(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """``--db`` and ``--format`` (on subcommands they override the top-level ones only when given)."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--db", default=default(None), type=db_url,
                        help="tuning DB URL, or the path of a SQLite file (default: $LOOPNEST_DB or "
                        "sqlite:///<user cache dir>/tuning.db)")
    parser.add_argument("--format", choices=("table", "json"), default=default("table"), help="output format")


class _SweepParser(argparse.ArgumentParser):
    """Lists the built-in workloads in its help, importing them (and torch) only then."""

    def format_help(self) -> str:
        from .autotune.workloads import WORKLOADS

        self.description = (f"Built-in workloads: {', '.join(WORKLOADS)} (the first ten are the suite's; the "
                            "rest are matmul-free transformer pieces). module:function names a function "
                            "returning (fn, example_inputs).")
        return super().format_help()


def _sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="tune every kernel of built-in or module:function workloads")
    p.__class__ = _SweepParser  # argparse builds every subparser with one class
    p.add_argument("workloads", nargs="+", metavar="WORKLOAD")
    p.add_argument("--backend", choices=registry.names(), help="default: triton with CUDA, else cpp")
    defaults = TuneSettings()
    p.add_argument("--trials", type=int, default=defaults.trials,
                   help=f"configs measured per kernel (default {defaults.trials})")
    p.add_argument("--time-budget", type=float, default=defaults.time_budget_s,
                   help=f"seconds per kernel (default {defaults.time_budget_s:g})")
    p.add_argument("--timeout", type=float, default=defaults.timeout_s,
                   help=f"seconds per trial (default {defaults.timeout_s:g})")
    p.add_argument("--sampler", choices=SAMPLERS, default="auto", help="auto: grid for small spaces, else tpe")
    p.add_argument("--study", default=defaults.study_prefix, metavar="PREFIX",
                   help=f"study name prefix (default {defaults.study_prefix})")
    p.add_argument("--size", choices=SIZE_CLASSES, help="input sizes (default: gpu on CUDA, else cpu)")
    p.add_argument("--seed", type=int, help="sampler seed")
    p.add_argument("--workers", type=int, help="parallel compiles (default: CPU count)")
    p.add_argument("--no-early-stop", action="store_true",
                   help=f"run every trial even when the best stops improving (default: stop, after at least "
                        f"{defaults.early_stop_after} trials)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(handler=cmd_sweep)


def _db_parser(sub) -> None:
    db = sub.add_parser("db", help="query and maintain the tuning database")
    dbsub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    specs: list[tuple[str, str, Callable, Callable]] = [
        ("list", "winners (one per tuning key)", cmd_db_list, lambda p: (
            p.add_argument("--kernel", help="structural hash prefix or name"),
            p.add_argument("--backend", choices=registry.names()),
            p.add_argument("--stale", action="store_true", help="only winners marked stale"))),
        ("show", "a kernel's winners and trials", cmd_db_show,
         lambda p: p.add_argument("kernel", help="structural hash prefix or name")),
        ("best", "this machine's stored config for a kernel at some sizes", cmd_db_best, lambda p: (
            p.add_argument("kernel", help="structural hash prefix or name"),
            p.add_argument("--sizes", required=True, help="loop sizes, e.g. 8192x2048"))),
        ("stale", "winners measured with other software than this machine's", cmd_db_stale, lambda p: None),
        ("export", "write winners as JSON lines", cmd_db_export,
         lambda p: p.add_argument("--out", help="file (default: stdout)")),
        ("import", "read winners from JSON lines (every row validated; a bad row imports nothing)",
         cmd_db_import, lambda p: p.add_argument("file")),
        ("gc", "repair rows left inconsistent by deleted rows; delete old trials that no winner references",
         cmd_db_gc,
         lambda p: p.add_argument("--older-than", type=float, default=30.0, metavar="DAYS")),
    ]
    for name, help_, handler, extra in specs:
        p = dbsub.add_parser(name, help=help_, description=help_)
        extra(p)
        _common(p)
        p.set_defaults(handler=handler)


def _service_parsers(sub) -> None:
    """``enqueue``, ``worker`` and ``queue``: the tuning service."""
    p = sub.add_parser("enqueue", help="ask the tuning service to tune workloads' kernels that lack winners")
    p.add_argument("workloads", nargs="+", metavar="WORKLOAD")
    p.add_argument("--backend", choices=registry.names(), help="default: triton with CUDA, else cpp")
    p.add_argument("--size", choices=SIZE_CLASSES, help="input sizes (default: gpu on CUDA, else cpu)")
    p.add_argument("--priority", type=int, default=0, help="higher is claimed first (default 0)")
    p.add_argument("--trials", type=int, default=TuneSettings().trials, help="budget per kernel")
    p.add_argument("--max-attempts", type=int, default=3, help="tries before a request fails (default 3)")
    p.add_argument("--hardware", help="fingerprint, or 'any sm_90' / 'any avx512 cpu' (default: this machine)")
    _common(p)
    p.set_defaults(handler=cmd_enqueue)
    w = sub.add_parser("worker", help="claim and tune queued requests, one process per device")
    w.add_argument("--devices", default="all", help="all, or CUDA device indices such as 0,1")
    w.add_argument("--backend", choices=registry.names(), help="default: triton with CUDA, else cpp")
    w.add_argument("--max-requests", type=int, help="stop after finishing that many")
    w.add_argument("--idle-exit", type=float, metavar="S", help="stop after S seconds without work")
    w.add_argument("--lease", type=float, default=60.0, metavar="S", help="claim lease, renewed every S/3")
    w.add_argument("--measure", type=float, default=0.25, metavar="S", help="CPU seconds timing one config")
    w.add_argument("--workers", type=int, help="parallel compiles (default: CPU count)")
    w.add_argument("--timing-log", metavar="FILE", help="append each device-lock window as JSON lines")
    w.add_argument("--share-above", type=int, default=16, metavar="N",
                   help="when idle, join the study of a running request of at least N trials (default 16; 0: never)")
    _common(w)
    w.set_defaults(handler=cmd_worker)
    q = sub.add_parser("queue", help="list tuning requests (ages, owners, attempts, throughput) or cancel one")
    q.add_argument("action", nargs="?", choices=("list", "cancel"), default="list")
    q.add_argument("id", nargs="?", type=int, help="the request to cancel")
    _common(q)
    q.set_defaults(handler=cmd_queue)


def build_parser() -> argparse.ArgumentParser:
    """The ``autotune`` argument parser."""
    parser = argparse.ArgumentParser(prog="autotune", description="loopnest autotuner and tuning database")
    _common(parser, top=True)
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the tuner does")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _sweep_parser(sub)
    _db_parser(sub)
    _service_parsers(sub)
    hw = sub.add_parser("hardware", help="this machine's hardware fingerprint and software versions")
    _common(hw)
    hw.set_defaults(handler=cmd_hardware)
    rep = sub.add_parser("report", help="plots of a study: history, parameter importance, best vs default")
    rep.add_argument("study", help="study name (or a unique part of it)")
    rep.add_argument("--out", required=True, help="output file: .png or .html")
    _common(rep)
    rep.set_defaults(handler=cmd_report)
    return parser


# Optional dependencies: module -> (the extra that installs it, what needs it).
EXTRAS = {"psycopg": ("postgres", "a postgresql+psycopg:// tuning DB"), "matplotlib": ("plots", "report")}


def _failure(exc: BaseException, args) -> str | None:
    """The one line to print for an error a user can fix (None: a bug, let it raise)."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] in EXTRAS:
        module = exc.name.partition(".")[0]
        extra, what = EXTRAS[module]
        return f"{what} needs {module}, which is not installed: pip install 'loopnest[{extra}]'"
    if type(exc).__module__.startswith("sqlalchemy"):
        from .db.engine import unavailable
        from .db.read import resolve_url

        exc = unavailable(resolve_url(args.db), exc) or exc
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, (ValueError, OSError)) or type(exc).__module__.startswith("sqlalchemy"):
        text = str(exc).strip().splitlines()
        return text[0] if text else type(exc).__name__
    return None


_INTERRUPTED = threading.Event()


def _on_interrupt(signum, frame) -> None:
    """SIGINT: remember it (a library's import may swallow the KeyboardInterrupt), then raise it."""
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def _check_interrupt() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came and something swallowed it."""
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``autotune`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_interrupt)
    _INTERRUPTED.clear()
    try:
        code = args.handler(args)
        _check_interrupt()
        return code
    except KeyboardInterrupt:
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _INTERRUPTED.is_set():  # an error that Ctrl-C caused (e.g. a half-imported module)
            print("autotune: interrupted", file=sys.stderr)
            return 130
        message = _failure(exc, args)
        if message is None:
            raise
        print(f"autotune: {message}", file=sys.stderr)
        return 2
    finally:
        if signal.getsignal(signal.SIGINT) is _on_interrupt:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
