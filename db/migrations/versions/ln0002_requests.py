"""The tuning service's queue: ln_requests.

Revision ID: ln0002
Revises: ln0001
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "ln0002"
down_revision = "ln0001"
branch_labels = None
depends_on = None

REQUEST_STATES = ("pending", "running", "done", "failed", "cancelled")


def upgrade() -> None:
    """Create ln_requests."""
    op.create_table(
        "ln_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("active_key", sa.String(length=512), nullable=True),
        sa.Column("kernel_hash", sa.String(length=128), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("ir_text", sa.Text(), nullable=False),
        sa.Column("sizes", sa.JSON(), nullable=False),
        sa.Column("dtypes", sa.JSON(), nullable=False),
        sa.Column("symbols", sa.JSON(), nullable=False),
        sa.Column("hardware_kind", sa.String(length=16), nullable=False),
        sa.Column("hardware_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("hardware_capability", sa.String(length=64), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(*REQUEST_STATES, name="ln_request_state", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("owner", sa.String(length=256), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
        sa.Column("requested_by", sa.String(length=256), nullable=False),
        sa.Column("study", sa.String(length=512), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ln_requests")),
        sa.UniqueConstraint("active_key", name="uq_ln_requests_active_key"),
    )
    op.create_index("ix_ln_requests_claim", "ln_requests", ["state", "priority", "created_at"])


def downgrade() -> None:
    """Drop ln_requests."""
    op.drop_index("ix_ln_requests_claim", table_name="ln_requests")
    op.drop_table("ln_requests")
