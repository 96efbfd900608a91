"""Engines and sessions for the tuning DB (SQLite and PostgreSQL).

SQLite runs in WAL mode with a busy timeout, and SQLAlchemy (not the sqlite3 module) emits
``BEGIN``: ``BEGIN IMMEDIATE`` for writing sessions so concurrent writers queue on the busy
timeout instead of failing on a lock upgrade, and DDL (migrations) is transactional.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from loopnest.db.jsonl import STRICT_JSON

if TYPE_CHECKING:  # the ORM is imported by the writers only (the read path starts faster without it)
    from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000
SUPPORTED = ("postgresql", "sqlite")
_WRITE_OPTION = "loopnest_write"


class UnsupportedDatabase(ValueError):
    """The URL names a database loopnest's tuning DB does not support."""


class DatabaseUnavailable(ValueError):
    """The tuning DB cannot be opened or written; the message says why and what to do."""


def unavailable(url: str, exc: BaseException) -> DatabaseUnavailable | None:
    """The error to raise when ``exc`` shows the tuning DB at ``url`` cannot be used (a file that is
    not a database, a folder that is not writable, a server that does not answer); None when
    ``exc`` is another kind of error."""
    if not isinstance(exc, DBAPIError):
        return None
    parsed = make_url(url)
    detail = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    if parsed.get_backend_name() != "sqlite":
        where = parsed.render_as_string(hide_password=True)
        if isinstance(exc.orig, Exception) and "connect" in detail.lower():
            return DatabaseUnavailable(f"cannot connect to the tuning DB {where}: {detail}; check that the "
                                       "server runs and that the URL's host, port, user and database are right")
        return DatabaseUnavailable(f"tuning DB {where}: {detail}")
    path = parsed.database or ":memory:"
    hints = {
        "file is not a database": f"{path} is not a SQLite database; point --db (or LOOPNEST_DB) at a tuning "
                                  "DB file, or at a path where a new one may be created",
        "unable to open database file": f"cannot open the tuning DB {path}: its folder is missing or not "
                                        "writable (SQLite also writes -wal and -shm files beside it); choose "
                                        "a writable --db (or LOOPNEST_DB)",
        "readonly database": f"the tuning DB {path} is read-only here; make it and its folder writable, or "
                             "choose another --db (or LOOPNEST_DB)",
        "database is locked": f"the tuning DB {path} stayed locked by another process for "
                              f"{SQLITE_BUSY_TIMEOUT_MS // 1000} s; retry when it is done",
    }
    found = next((hint for text, hint in hints.items() if text in detail), None)
    return DatabaseUnavailable(found or f"tuning DB {path}: {detail}")


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError:
        raise UnsupportedDatabase(
            f"{url!r} is not a database URL; expected sqlite:///PATH/tuning.db or "
            "postgresql+psycopg://USER@HOST:PORT/DATABASE") from None


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates the directory of a SQLite file if needed."""
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED:
        raise UnsupportedDatabase(
            f"tuning DB URL {parsed.render_as_string()} uses {backend!r}; "
            f"supported: {', '.join(SUPPORTED)}"
        )
    if backend == "postgresql":
        return create_engine(parsed, pool_pre_ping=True)
    database = parsed.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        folder = Path(database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailable(f"cannot create the folder {folder} of the tuning DB {database}: "
                                      f"{exc.strerror}; choose another --db (or LOOPNEST_DB)") from None
    engine = create_engine(parsed, json_deserializer=STRICT_JSON.decode)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    """Per connection: WAL, busy timeout, foreign keys, and no implicit BEGIN from sqlite3."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: WAL switch may wait
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    """Open the transaction: IMMEDIATE (write lock now) unless the session only reads."""
    writes = conn.get_execution_options().get(_WRITE_OPTION, True)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def read_only(engine: Engine) -> Engine:
    """``engine`` for transactions that only read: on SQLite they begin without the write lock."""
    return engine.execution_options(**{_WRITE_OPTION: False})


def session_factory(engine: Engine) -> tuple[sessionmaker[Session], sessionmaker[Session]]:
    """(writing, read-only) session factories; they differ only in SQLite's BEGIN mode."""
    from sqlalchemy.orm import sessionmaker

    return (
        sessionmaker(engine, expire_on_commit=False),
        sessionmaker(read_only(engine), expire_on_commit=False),
    )


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back (then re-raises) on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def dialect_insert(session: Session, model: Any) -> Any:
    """An INSERT supporting ``on_conflict_do_update/nothing`` for the session's database."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(model)
