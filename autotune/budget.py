"""A study's trial budget, enforced across every process that shares its storage.

The budget is counted in Optuna's storage, the way ``optuna.study.MaxTrialsCallback`` counts: the
study's trials read back with ``Study.get_trials``, never a counter of ours. A trial spends the
budget when it measures a new config under this software: it is marked so (``BUDGET_ATTR``) right
after it is asked, and counts while it runs and after it finished, unless it was interrupted
(Ctrl-C, or failed by the heartbeat check after its process died). An interrupted config is
measured again by the next run, and the budget counts it once.

Race-free, not merely bounded: the count, the ask and the mark happen under the study's lock
(``study_lock``), held across processes and hosts, so the next process's count includes the trial.
The lock is a PostgreSQL advisory lock keyed by the study's id, taken in a transaction of Optuna's
own engine; on SQLite (one host) an OS file lock beside the database, because SQLite's write lock
cannot be held across Optuna's separate connection without blocking Optuna itself.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import filelock
import optuna
from optuna.trial import FrozenTrial, TrialState as OptunaState
from sqlalchemy import make_url, text

from ..db.api import DatabaseUnavailable

BUDGET_ATTR = "ln_budget"        # user attribute: the software tag whose budget the trial spends
INTERRUPTED_ATTR = "interrupted"  # user attribute of a trial whose measurement was cut short
_PG_NAMESPACE = 0x6C6E5F62       # "ln_b": first key of pg_advisory_xact_lock(namespace, study id)
_MEMORY_LOCK = threading.Lock()  # in-memory storage lives in one process


def interrupted(trial: FrozenTrial) -> bool:
    """A failed trial whose measurement never finished: cut short (Ctrl-C), or failed by the
    heartbeat check after its process died (it has no outcome)."""
    attrs = trial.user_attrs
    return trial.state == OptunaState.FAIL and (
        bool(attrs.get(INTERRUPTED_ATTR)) or "state" not in attrs or attrs.get("message") == "interrupted")


def spends_budget(trial: FrozenTrial, tag: str) -> bool:
    """Whether ``trial`` counts toward the budget of software ``tag`` (see the module docstring)."""
    return trial.user_attrs.get(BUDGET_ATTR) == tag and trial.state in (
        OptunaState.RUNNING, OptunaState.COMPLETE, OptunaState.FAIL) and not interrupted(trial)


def spent(trials: Iterable[FrozenTrial], tag: str) -> int:
    """How many of ``trials`` spend the budget of software ``tag``."""
    return sum(1 for t in trials if spends_budget(t, tag))


def to_remeasure(trials: Iterable[FrozenTrial], tag: str, measured: set[str]) -> list[FrozenTrial]:
    """Interrupted trials of ``tag`` whose params nobody measured or queued since (one per params)."""
    seen = set(measured)
    seen |= {_params_key(t.system_attrs.get("fixed_params", t.params)) for t in trials
             if t.state == OptunaState.WAITING}
    out = []
    for t in trials:
        if t.user_attrs.get(BUDGET_ATTR) == tag and interrupted(t) and _params_key(t.params) not in seen:
            seen.add(_params_key(t.params))
            out.append(t)
    return out


def _params_key(params: dict) -> str:
    return repr(sorted(params.items()))


@contextmanager
def study_lock(study: optuna.Study) -> Iterator[None]:
    """Hold ``study``'s budget lock across processes (see the module docstring)."""
    storage = getattr(study._storage, "_backend", study._storage)  # noqa: SLF001 - no public accessor
    if not isinstance(storage, optuna.storages.RDBStorage):
        with _MEMORY_LOCK:
            yield
        return
    study_id = study._study_id  # noqa: SLF001
    if storage.engine.dialect.name == "postgresql":
        with storage.engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT pg_advisory_xact_lock(:ns, :id)"), {"ns": _PG_NAMESPACE, "id": study_id})
            yield
        return
    database = make_url(storage.url).database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        with _MEMORY_LOCK:
            yield
        return
    path = Path(database).expanduser().resolve()
    lock = filelock.FileLock(str(path.with_name(f".{path.name}-study-{study_id}.lock")))
    try:
        lock.acquire()
    except OSError as exc:
        raise DatabaseUnavailable(f"cannot create the lock file {lock.lock_file} beside the tuning DB: "
                                  f"{exc.strerror}; the folder of a SQLite tuning DB must be writable") from None
    try:
        yield
    finally:
        lock.release()
