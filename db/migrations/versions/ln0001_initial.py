"""Initial schema: ln_hardware, ln_kernels, ln_trials, ln_winners.

Revision ID: ln0001
Revises:
Create Date: 2026-11-29
"""
import sqlalchemy as sa
from alembic import op

revision = "ln0001"
down_revision = None
branch_labels = None
depends_on = None

TRIAL_STATES = (
    "ok", "invalid", "compile_error", "runtime_error", "timeout", "wrong_result", "running",
)


def _fk(table: str, column: str, target: str, ondelete: str) -> sa.ForeignKeyConstraint:
    """A foreign key ``table.column -> target.id``, named as the models' naming convention does."""
    name = op.f(f"fk_{table}_{column}_{target}")
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=name, ondelete=ondelete)


def upgrade() -> None:
    """Create loopnest's four tables."""
    op.create_table(
        "ln_hardware",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("capability", sa.String(length=256), nullable=False),
        sa.Column("cores", sa.Integer(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ln_hardware")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_ln_hardware_fingerprint")),
    )
    op.create_table(
        "ln_kernels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("structural_hash", sa.String(length=128), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("ir_text", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ln_kernels")),
        sa.UniqueConstraint("structural_hash", "backend", name="uq_ln_kernels_key"),
    )
    op.create_table(
        "ln_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("sizes", sa.JSON(), nullable=False),
        sa.Column("dtypes", sa.JSON(), nullable=False),
        sa.Column("sizes_key", sa.String(length=256), nullable=False),
        sa.Column("dtypes_key", sa.String(length=256), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(*TRIAL_STATES, name="ln_trial_state", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p50_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("verified_error", sa.Float(), nullable=True),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("study", sa.String(length=256), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        _fk("ln_trials", "hardware_id", "ln_hardware", "CASCADE"),
        _fk("ln_trials", "kernel_id", "ln_kernels", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ln_trials")),
    )
    op.create_index(
        "ix_ln_trials_key", "ln_trials", ["kernel_id", "hardware_id", "sizes_key", "dtypes_key"]
    )
    op.create_index("ix_ln_trials_study", "ln_trials", ["study"])
    op.create_table(
        "ln_winners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("hardware_id", sa.Integer(), nullable=False),
        sa.Column("sizes_key", sa.String(length=256), nullable=False),
        sa.Column("dtypes_key", sa.String(length=256), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("sizes", sa.JSON(), nullable=False),
        sa.Column("dtypes", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=False),
        sa.Column("default_time_us", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("stale", sa.Boolean(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        _fk("ln_winners", "hardware_id", "ln_hardware", "CASCADE"),
        _fk("ln_winners", "kernel_id", "ln_kernels", "CASCADE"),
        _fk("ln_winners", "trial_id", "ln_trials", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ln_winners")),
        sa.UniqueConstraint(
            "kernel_id", "hardware_id", "sizes_key", "dtypes_key", name="uq_ln_winners_key"
        ),
    )
    op.create_index(
        "ix_ln_winners_neighbours", "ln_winners", ["kernel_id", "hardware_id", "dtypes_key", "rank"]
    )


def downgrade() -> None:
    """Drop loopnest's tables (Optuna's tables, if any, are left alone)."""
    op.drop_table("ln_winners")
    op.drop_table("ln_trials")
    op.drop_table("ln_kernels")
    op.drop_table("ln_hardware")
