"""Schema versioning of the tuning DB: Alembic, run programmatically, no alembic.ini.

Opening a database brings its schema to this loopnest's head revision inside one transaction
(serialized between processes: ``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL;
between threads by a lock, since Alembic's ``context`` is process-global).
A database written by a newer loopnest, or one whose ``ln_`` tables lack a version table, is
refused with an error instead of being modified. A database already at ``HEAD`` is recognized by
one query, without importing Alembic (a tenth of a second the DB commands need not pay); this
module imports SQLAlchemy only when it migrates, so the read path can use ``HEAD`` without it.
"""
from __future__ import annotations

import threading
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy import Connection, Engine

HEAD = "ln0002"  # the newest revision in migrations/versions (tests/test_db.py checks it)
VERSION_TABLE = "ln_alembic_version"
TABLE_PREFIX = "ln_"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x6C6E5F6462  # "ln_db": serializes concurrent migrations on PostgreSQL
_PROCESS_LOCK = threading.Lock()  # alembic's `context` proxy is process-global state


class SchemaError(RuntimeError):
    """The database's schema cannot be used by this version of loopnest."""


def alembic_config() -> "Config":
    """An Alembic config pointing at loopnest's bundled migration scripts."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    return cfg


def head_revision(script: "ScriptDirectory | None" = None) -> str:
    """The schema revision this version of loopnest writes and expects, from the scripts."""
    from alembic.script import ScriptDirectory

    head = (script or ScriptDirectory.from_config(alembic_config())).get_current_head()
    assert head is not None, "loopnest ships without migrations"
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision stamped in the database's ``ln_alembic_version`` table, or None."""
    from alembic.runtime.migration import MigrationContext

    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


def stamped(engine: Engine) -> str | None:
    """The database's revision by one plain query (None without a version table)."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with engine.connect() as conn:
            return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    except SQLAlchemyError:
        return None


def migrate(engine: Engine) -> str:
    """Upgrade the database to the head revision (no-op when current); return the revision."""
    if stamped(engine) == HEAD:
        return HEAD
    from alembic import command
    from alembic.script import ScriptDirectory
    from sqlalchemy import text

    cfg = alembic_config()
    script = ScriptDirectory.from_config(cfg)
    head = head_revision(script)
    with _PROCESS_LOCK, engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        current = current_revision(conn)
        if current == head:
            return head
        _check_upgradable(conn, script, current, head)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return head


def _check_upgradable(
    conn: Connection, script: "ScriptDirectory", current: str | None, head: str
) -> None:
    """Raise SchemaError unless ``current`` is a revision this loopnest knows, or None on a
    database without loopnest tables (every known revision is ``head`` or older)."""
    from sqlalchemy import inspect

    url = conn.engine.url.render_as_string(hide_password=True)
    if current is None:
        tables = sorted(t for t in inspect(conn).get_table_names() if t.startswith(TABLE_PREFIX))
        tables = [t for t in tables if t != VERSION_TABLE]
        if tables:
            raise SchemaError(
                f"tuning database {url} has loopnest tables {tables} but no {VERSION_TABLE} "
                "table, so its schema version is unknown; refusing to modify it "
                "(point LOOPNEST_DB at a new database, or drop those tables)"
            )
        return
    from alembic.util import CommandError

    try:
        known = script.get_revision(current) is not None
    except CommandError:
        known = False
    if not known:
        raise SchemaError(
            f"tuning database {url} has schema revision {current!r}, but this loopnest "
            f"expects {head!r} and does not know {current!r}: it was written by a newer "
            "loopnest; upgrade loopnest"
        )
