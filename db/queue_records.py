"""Plain values of the tuning service's queue: hardware targets, new requests, request records.

A request is data only (IR text, sizes, dtypes, symbol values, target, budget): never code.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from loopnest.core.hardware import HardwareInfo, HardwareKind
from loopnest.db.records import RequestState

_FINGERPRINT = re.compile(r"[0-9a-f]{20}")
_ALIASES = {"avx512": "avx512f", "gpu": "cuda"}


@dataclass(frozen=True)
class HardwareTarget:
    """The machines a request may be tuned on: one fingerprint, or any machine of a kind that has
    a capability (``any sm_90``, ``any avx512f cpu``, ``any cpu``)."""

    kind: str
    fingerprint: str | None = None
    capability: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", HardwareKind(self.kind).value)

    @classmethod
    def of(cls, hardware: HardwareInfo) -> HardwareTarget:
        """Exactly this machine model."""
        return cls(hardware.kind, fingerprint=hardware.fingerprint)

    @classmethod
    def parse(cls, text: str, kind: str) -> HardwareTarget:
        """``text`` is a 20-hex fingerprint or ``any [CAPABILITY] [cpu|cuda|gpu]``; ``kind`` is the
        backend's hardware kind, used when the text names none."""
        words = [_ALIASES.get(w, w) for w in text.strip().lower().split()]
        if len(words) == 1 and _FINGERPRINT.fullmatch(words[0]):
            return cls(kind, fingerprint=words[0])
        if not words or words[0] != "any" or len(words) > 3:
            raise ValueError(f"hardware target {text!r}: expected a 20-hex-digit fingerprint (autotune hardware "
                             "prints it) or 'any [CAPABILITY] [cpu|cuda]', e.g. 'any sm_90', 'any avx512 cpu'")
        kinds = [w for w in words[1:] if w in {k.value for k in HardwareKind}]
        if kinds and kinds[-1] != kind:
            raise ValueError(f"hardware target {text!r} names {kinds[-1]} hardware, but the backend runs on {kind}")
        capability = [w for w in words[1:] if w not in kinds]
        return cls(kind, capability=capability[0] if capability else None)

    def matches(self, hardware: HardwareInfo) -> bool:
        """Whether ``hardware`` may tune a request for this target."""
        if self.fingerprint is not None:
            return hardware.fingerprint == self.fingerprint
        return hardware.kind == self.kind and (self.capability is None
                                               or self.capability in hardware.capability.split(","))

    @property
    def label(self) -> str:
        """``fingerprint``, or ``any CAPABILITY KIND``."""
        if self.fingerprint is not None:
            return self.fingerprint
        return " ".join(["any"] + ([self.capability] if self.capability else []) + [self.kind])


@dataclass(frozen=True)
class NewRequest:
    """What ``RequestQueue.enqueue`` stores for one kernel (see ``ln_requests``)."""

    kernel_hash: str
    backend: str
    name: str
    ir_text: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    target: HardwareTarget
    trials: int
    symbols: dict[str, int] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int = 3
    requested_by: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        for name in ("trials", "max_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"a request's {name} must be an int >= 1, got {value!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"a request's priority must be an int, got {self.priority!r}")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in self.sizes):
            raise ValueError(f"a request's sizes must be ints >= 0, got {self.sizes!r}")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in self.symbols.values()):
            raise ValueError(f"a request's symbol values must be ints, got {self.symbols!r}")

    @property
    def active_key(self) -> str:
        """The coalescing key: requests for the same kernel, sizes, dtypes and target merge."""
        return "|".join((self.kernel_hash, self.backend, "x".join(map(str, self.sizes)),
                         ",".join(self.dtypes), self.target.label))


@dataclass(frozen=True)
class RequestRecord:
    """A stored request as the queue answers it (``to_json`` is ``autotune queue``'s row)."""

    id: int
    state: RequestState
    kernel_hash: str
    name: str
    backend: str
    ir_text: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    symbols: dict[str, int]
    target: HardwareTarget
    priority: int
    trials: int
    attempts: int
    max_attempts: int
    owner: str | None
    requested_by: str
    study: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_until: datetime | None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``autotune queue --format json``."""
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None
        return {
            "id": self.id, "state": self.state.value, "kernel": self.kernel_hash, "name": self.name,
            "backend": self.backend, "sizes": list(self.sizes), "dtypes": list(self.dtypes),
            "hardware": self.target.label, "priority": self.priority, "trials": self.trials,
            "attempts": self.attempts, "max_attempts": self.max_attempts, "owner": self.owner,
            "requested_by": self.requested_by, "study": self.study, "created_at": iso(self.created_at),
            "started_at": iso(self.started_at), "finished_at": iso(self.finished_at), "error": self.error,
        }
