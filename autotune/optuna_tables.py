"""Optuna's tables in the tuning DB's database, reached through SQLAlchemy alone: ``autotune db gc``
repairs them without importing Optuna (or creating its tables where no sweep has run)."""
from __future__ import annotations

from sqlalchemy import Engine, MetaData, delete, inspect, select

# The tables of Optuna's RDB storage (optuna/storages/_rdb/models.py; tests/test_settings.py checks
# the list against the installed Optuna).
OPTUNA_TABLES = frozenset({
    "studies", "study_directions", "study_user_attributes", "study_system_attributes", "trials",
    "trial_user_attributes", "trial_system_attributes", "trial_params", "trial_values",
    "trial_intermediate_values", "trial_heartbeats", "version_info",
})


def delete_orphans(engine: Engine) -> int:
    """Delete rows of Optuna's tables whose study or trial row is gone; return how many (0 where
    Optuna's tables do not exist). The foreign keys are read from the database; parents come first
    (``sorted_tables``), so a deleted study's trials go before their parameters."""
    deleted = 0
    with engine.begin() as conn:
        present = sorted(OPTUNA_TABLES & set(inspect(conn).get_table_names()))
        if not present:
            return 0
        if conn.dialect.name == "sqlite":  # a trial and its parameters go in one transaction, checked at commit
            conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")
        metadata = MetaData()
        metadata.reflect(conn, only=present)
        for table in metadata.sorted_tables:
            for fk in table.foreign_keys:
                deleted += conn.execute(delete(table).where(fk.parent.not_in(select(fk.column)))).rowcount
    return deleted
