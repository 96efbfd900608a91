"""Alembic environment for loopnest's tuning DB, run programmatically by ``loopnest.db.schema``.

The caller passes an open connection, inside its transaction, as
``config.attributes["connection"]``.
loopnest keeps its own version table so Optuna's ``alembic_version`` table never collides.
"""
from __future__ import annotations

from alembic import context

from loopnest.db.models import Base
from loopnest.db.schema import VERSION_TABLE


def _include_name(name: str | None, type_: str, parent_names: dict[str, str | None]) -> bool:
    """Limit autogenerate to loopnest's ``ln_`` tables (Optuna's may share the database)."""
    return type_ != "table" or (name or "").startswith("ln_")


def run_migrations_online() -> None:
    """Run the pending migrations on the connection handed over by the caller."""
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=_include_name,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("loopnest migrations run online only (through loopnest.db.schema)")
run_migrations_online()
