"""Optuna's storage in the tuning DB's database, one per URL.

On SQLite, Optuna's engine gets the same discipline as the tuning DB's: a busy timeout, and
``BEGIN IMMEDIATE`` for every transaction, so the heartbeat thread and the main thread queue for
the write lock instead of failing a lock upgrade.
"""
from __future__ import annotations

from functools import lru_cache

import optuna
from sqlalchemy import event, make_url

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
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s,
                                         grace_period=grace_s)
    if sqlite:
        event.listen(storage.engine, "connect", _sqlite_connect)
        event.listen(storage.engine, "begin", _sqlite_begin)
        storage.engine.dispose()  # pooled connections opened before the listeners existed
    return storage


def open_study(storage: optuna.storages.BaseStorage | None, name: str,
               sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create or load the study ``name`` (minimizing the median time in µs)."""
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                               load_if_exists=True)
