"""Alembic revisions of the tuning DB schema, one file each; alembic skips this file."""
