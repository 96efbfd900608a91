"""Plain values exchanged with the tuning DB: keys, hardware descriptions, winners, trials.

These are what the rest of loopnest sees (through :mod:`loopnest.db.api`); ORM rows never leave
the database layer. Nothing here imports SQLAlchemy (the read path of :mod:`loopnest.db.read`
starts without it).
"""
from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from loopnest.core.hardware import HardwareInfo, HardwareKind  # noqa: F401 - part of db's API


# The IR's dtype names (ir/dtypes.py; tests/test_db.py checks the two agree): the DB stores names only.
DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                         "uint8", "bool"})
KERNEL_HASH = re.compile(r"[0-9a-f]{8,64}")  # a structural hash is lowercase hex (ir/hashing.py: 20 digits)
CORRUPT = object()  # what a JSON column holds when its stored text does not decode


class TrialState(enum.StrEnum):
    """Outcome of one measured config; only ``ok`` trials may become winners."""

    OK = "ok"
    INVALID = "invalid"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    RUNNING = "running"


class RequestState(enum.StrEnum):
    """Where a tuning request is: waiting, leased by a worker, or finished one way or another."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


def utcnow() -> datetime:
    """Current time as naive UTC (stored identically on SQLite and PostgreSQL)."""
    return datetime.now(UTC).replace(tzinfo=None)


class LookupKind(enum.StrEnum):
    """How a lookup answered; only EXACT is a measured result for the caller's setup."""

    EXACT = "exact"  # same key, same software: use the config as measured
    STALE = "stale"  # same key, other software or codegen: a warm start, re-measure
    NEAREST = "nearest"  # same kernel/hardware/dtypes/rank, other sizes: a warm start
    MISS = "miss"


def json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a plain JSON dict (str keys, finite numbers); ValueError otherwise."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a dict, got {type(value).__name__}")
    try:
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not plain JSON: {exc}") from None


def kernel_hash(value: Any, what: str = "kernel hash") -> str:
    """``value`` if it is a structural hash (8 to 64 lowercase hex digits); ValueError otherwise."""
    if not isinstance(value, str) or not KERNEL_HASH.fullmatch(value):
        raise ValueError(f"{what} must be 8 to 64 lowercase hex digits, got {value!r}")
    return value


def dtype_names(value: Any, what: str = "dtypes") -> tuple[str, ...]:
    """``value`` (a list or tuple of IR dtype names) as a tuple; ValueError naming an unknown one."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"{what} must be a list of dtype names, got {value!r}")
    for d in value:
        if not isinstance(d, str) or d not in DTYPE_NAMES:
            raise ValueError(f"{what} holds unknown dtype {d!r}; known: {', '.join(sorted(DTYPE_NAMES))}")
    return tuple(value)


def positive_float(value: Any, what: str) -> float:
    """``value`` as a finite float > 0; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be finite and > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TuningKey:
    """What a winner is stored under: kernel, backend, concrete sizes, dtypes, hardware."""

    kernel_hash: str
    backend: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    hardware: HardwareInfo

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        kernel_hash(self.kernel_hash)
        dtype_names(self.dtypes, "TuningKey.dtypes")
        if not self.backend:
            raise ValueError("TuningKey needs a backend")
        for s in self.sizes:
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ValueError(f"TuningKey.sizes must be ints >= 0, got {self.sizes!r}")

    @property
    def sizes_key(self) -> str:
        """Canonical size text stored in the unique key, e.g. ``(8192, 2048) -> "8192x2048"``."""
        return "x".join(str(s) for s in self.sizes)

    @property
    def dtypes_key(self) -> str:
        """Canonical dtype text stored in the unique key, e.g. ``"float32,int64"``."""
        return ",".join(self.dtypes)


@dataclass(frozen=True)
class WinnerRecord:
    """The best known config for one tuning key, with how and where it was measured."""

    kernel_hash: str
    name: str
    backend: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    hardware: HardwareInfo
    config: dict[str, Any]
    time_us: float
    default_time_us: float | None
    software: dict[str, Any]
    stale: bool = False
    trial_id: int | None = None
    updated_at: datetime | None = None
    speedup: float | None = field(init=False)

    def __post_init__(self) -> None:
        default = self.default_time_us
        object.__setattr__(self, "speedup", default / self.time_us if default else None)

    @property
    def key(self) -> TuningKey:
        """The tuning key this record is stored under."""
        return TuningKey(self.kernel_hash, self.backend, self.sizes, self.dtypes, self.hardware)

    def to_json(self) -> dict[str, Any]:
        """JSON form, as written by ``export_jsonl`` and read by ``import_jsonl``."""
        return {
            "kernel": self.kernel_hash, "name": self.name, "backend": self.backend,
            "sizes": list(self.sizes), "dtypes": list(self.dtypes),
            "hardware": self.hardware.to_dict(), "config": self.config,
            "time_us": self.time_us, "default_time_us": self.default_time_us,
            "speedup": self.speedup, "stale": self.stale, "software": self.software,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True)
class TrialRecord:
    """One measured or failed config; failures keep their reason and no timings."""

    id: int
    kernel_hash: str
    backend: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    hardware_fingerprint: str
    config: dict[str, Any]
    state: TrialState
    message: str | None
    p20_us: float | None
    p50_us: float | None
    p80_us: float | None
    verified_error: float | None
    host: str
    study: str | None
    created_at: datetime


@dataclass(frozen=True)
class LookupResult:
    """Answer of ``TuningDB.lookup``: a kind, and the winner it is based on (None on a miss)."""

    kind: LookupKind
    winner: WinnerRecord | None = None
    distance: float | None = None  # log-size distance, for NEAREST

    @property
    def config(self) -> dict[str, Any] | None:
        """The stored config (measured for EXACT, a warm start otherwise)."""
        return self.winner.config if self.winner else None

    @property
    def is_measured(self) -> bool:
        """True only when the config was measured for exactly this key and software."""
        return self.kind == LookupKind.EXACT
