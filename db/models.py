"""ORM models of the tuning database: every table is prefixed ``ln_``.

The prefix keeps loopnest's tables apart from Optuna's RDB storage tables, which may live in the
same database. Models hold data only; queries live in :mod:`loopnest.db.api`.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from loopnest.db.records import CORRUPT, RequestState, TrialState, utcnow  # noqa: F401 - re-exported


class CheckedJSON(TypeDecorator):
    """JSON that reads a value which does not decode as ``CORRUPT`` instead of raising, so one
    damaged row is skipped (``db.api`` warns) instead of breaking every query that reads it."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect, coltype):
        decode = super().result_processor(dialect, coltype)

        def process(value):
            try:
                return decode(value) if decode else value
            except (TypeError, ValueError):
                return CORRUPT
        return process

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base holding loopnest's metadata (and only loopnest's tables)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: CheckedJSON, list[Any]: CheckedJSON}


class Hardware(Base):
    """One machine model (GPU or CPU) that timings were measured on."""

    __tablename__ = "ln_hardware"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    capability: Mapped[str] = mapped_column(String(256))
    cores: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Kernel(Base):
    """A kernel identified by its size-independent structural hash, per backend."""

    __tablename__ = "ln_kernels"
    __table_args__ = (UniqueConstraint("structural_hash", "backend", name="uq_ln_kernels_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    structural_hash: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(256))
    ir_text: Mapped[str | None] = mapped_column(Text)  # NULL: imported, IR not seen here
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


TRIAL_STATE_TYPE = Enum(
    TrialState,
    name="ln_trial_state",
    native_enum=False,
    length=16,
    values_callable=lambda states: [s.value for s in states],
)


class Trial(Base):
    """One measured (or failed) config of a kernel at concrete sizes on one hardware."""

    __tablename__ = "ln_trials"
    __table_args__ = (
        Index("ix_ln_trials_key", "kernel_id", "hardware_id", "sizes_key", "dtypes_key"),
        Index("ix_ln_trials_study", "study"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("ln_kernels.id", ondelete="CASCADE"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("ln_hardware.id", ondelete="CASCADE"))
    sizes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    dtypes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    sizes_key: Mapped[str] = mapped_column(String(256))
    dtypes_key: Mapped[str] = mapped_column(String(256))
    config: Mapped[dict[str, Any]] = mapped_column(CheckedJSON)
    state: Mapped[TrialState] = mapped_column(TRIAL_STATE_TYPE)
    message: Mapped[str | None] = mapped_column(Text)
    p20_us: Mapped[float | None] = mapped_column(Float)
    p50_us: Mapped[float | None] = mapped_column(Float)
    p80_us: Mapped[float | None] = mapped_column(Float)
    verified_error: Mapped[float | None] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(256))
    study: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Winner(Base):
    """The best known config for one tuning key: one row per key, upserted."""

    __tablename__ = "ln_winners"
    __table_args__ = (
        UniqueConstraint(
            "kernel_id", "hardware_id", "sizes_key", "dtypes_key", name="uq_ln_winners_key"
        ),
        Index("ix_ln_winners_neighbours", "kernel_id", "hardware_id", "dtypes_key", "rank"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("ln_kernels.id", ondelete="CASCADE"))
    hardware_id: Mapped[int] = mapped_column(ForeignKey("ln_hardware.id", ondelete="CASCADE"))
    sizes_key: Mapped[str] = mapped_column(String(256))
    dtypes_key: Mapped[str] = mapped_column(String(256))
    rank: Mapped[int] = mapped_column(Integer)
    sizes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    dtypes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    config: Mapped[dict[str, Any]] = mapped_column(CheckedJSON)
    time_us: Mapped[float] = mapped_column(Float)
    default_time_us: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    software: Mapped[dict[str, Any]] = mapped_column(CheckedJSON)
    stale: Mapped[bool] = mapped_column(Boolean, default=False)
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("ln_trials.id", ondelete="SET NULL")
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)  # time measured


REQUEST_STATE_TYPE = Enum(
    RequestState, name="ln_request_state", native_enum=False, length=16,
    values_callable=lambda states: [s.value for s in states],
)


class TuneRequest(Base):
    """A kernel to tune, as data: its IR text, sizes, dtypes, target hardware and budget.

    ``active_key`` is the coalescing key while the request is pending or running and NULL once it
    is finished, so a unique constraint keeps one live request per key. A running request holds
    a lease (``owner`` until ``lease_until``) that its worker's heartbeats extend.
    """

    __tablename__ = "ln_requests"
    __table_args__ = (
        UniqueConstraint("active_key", name="uq_ln_requests_active_key"),
        Index("ix_ln_requests_claim", "state", "priority", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    active_key: Mapped[str | None] = mapped_column(String(512))
    kernel_hash: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(256))
    ir_text: Mapped[str] = mapped_column(Text)
    sizes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    dtypes: Mapped[list[Any]] = mapped_column(CheckedJSON)
    symbols: Mapped[dict[str, Any]] = mapped_column(CheckedJSON)  # symbolic size -> value
    hardware_kind: Mapped[str] = mapped_column(String(16))
    hardware_fingerprint: Mapped[str | None] = mapped_column(String(64))  # NULL: any of the kind
    hardware_capability: Mapped[str | None] = mapped_column(String(64))   # e.g. sm_90, avx512f
    priority: Mapped[int] = mapped_column(Integer, default=0)
    trials: Mapped[int] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[RequestState] = mapped_column(REQUEST_STATE_TYPE)
    owner: Mapped[str | None] = mapped_column(String(256))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime)
    requested_by: Mapped[str] = mapped_column(String(256))
    study: Mapped[str | None] = mapped_column(String(512))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
