"""Optuna's storage in the tuning DB's database, one per URL.

On SQLite, Optuna's engine gets the same discipline as the tuning DB's: a busy timeout, and
``BEGIN IMMEDIATE`` for every transaction, so the heartbeat thread and the main thread queue for
the write lock instead of failing a lock upgrade. Rows of Optuna's tables left behind by a study or
trial deleted with foreign keys off (the sqlite3 shell's default) are deleted before a study that
they break is opened again, and by ``autotune db gc``.
"""
from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import optuna
from optuna.storages._rdb import models as optuna_models
from sqlalchemy import event, make_url, select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from .optuna_tables import delete_orphans

log = logging.getLogger("loopnest.autotune")

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_connect(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


@lru_cache(maxsize=None)
def optuna_storage(url: str, heartbeat_s: int, grace_s: int) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at ``url`` with heartbeats (its tables live beside the ``ln_`` ones)."""
    sqlite = make_url(url).get_backend_name() == "sqlite"
    kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}} if sqlite else {"pool_pre_ping": True}
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # "experimental" heartbeats
                storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                                     grace_period=grace_s)
            break
        except (IntegrityError, OperationalError, ProgrammingError) as exc:
            # Another process created Optuna's tables at the same moment ("already exists"): they exist now.
            if attempt == 2 or not isinstance(exc, IntegrityError) and "already exists" not in str(exc):
                raise
            time.sleep(0.1)
    if sqlite:
        event.listen(storage.engine, "connect", _sqlite_connect)
        event.listen(storage.engine, "begin", _sqlite_begin)
        storage.engine.dispose()  # pooled connections opened before the listeners existed
    return storage


def open_study(storage: optuna.storages.BaseStorage | None, name: str,
               sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create or load the study ``name`` (minimizing the median time in µs). Optuna's rows left by
    a study deleted by hand (which make it refuse to create the study again) are deleted first."""
    def create() -> optuna.Study:
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                                   load_if_exists=True)
    try:
        return create()
    except (KeyError, optuna.exceptions.DuplicatedStudyError) as exc:
        if not isinstance(storage, optuna.storages.RDBStorage) or not delete_orphans(storage.engine):
            raise RuntimeError(f"Optuna study {name!r} in {storage_url(storage)} cannot be opened ({exc!r}); "
                               f"delete it (`optuna delete-study --study-name '{name}' --storage URL`) "
                               "and sweep again: loopnest's winners and ln_trials rows are kept") from exc
    log.warning("Optuna study %s: deleted rows left by a study or trial deleted by hand", name)
    return create()


def damaged_rows(storage: optuna.storages.BaseStorage | None) -> list[str]:
    """``table.key=value`` of every row of Optuna's tables whose JSON column does not decode."""
    if not isinstance(storage, optuna.storages.RDBStorage):
        return []
    found = []
    with storage.engine.connect() as conn:
        for table in optuna_models.BaseModel.metadata.sorted_tables:
            (pk,) = table.primary_key.columns
            for column in (c for c in table.columns if c.name.endswith("_json")):
                for key, value in conn.execute(select(pk, column)):
                    try:
                        json.loads(value)
                    except (TypeError, ValueError):
                        found.append(f"{table.name}.{pk.name}={key}")
    return found


@contextmanager
def diagnosed(storage: optuna.storages.BaseStorage | None, name: str) -> Iterator[None]:
    """Turn a study failing on damaged JSON in Optuna's tables into an error naming the rows."""
    try:
        yield
    except ValueError as exc:
        rows = damaged_rows(storage)
        if not rows:
            raise
        raise ValueError(f"Optuna's rows {', '.join(rows)} in {storage_url(storage)} do not hold valid JSON, so "
                         f"study {name!r} cannot be read; delete those rows (or the study) and sweep again") from exc


def storage_url(storage: optuna.storages.BaseStorage | None) -> str:
    """Where ``storage`` keeps its studies, for messages (password hidden)."""
    url = getattr(storage, "url", None)
    return make_url(url).render_as_string(hide_password=True) if url else "memory"
