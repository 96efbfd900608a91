"""Alembic migration environment of the tuning DB (loaded by path by loopnest.db.schema)."""
