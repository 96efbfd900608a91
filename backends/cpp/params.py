"""The C++ backend's tunable parameters."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CppConfig:
    """How a C++ kernel runs.

    ``threads``: OpenMP threads (0: all cores); ``lanes``: partial states per row for reductions
    vectorized through lane arrays (Welford, argmax); ``chunk``: adjacent columns one thread owns
    when a kernel reduces over an outer dimension.
    """

    threads: int = 0
    lanes: int = 16
    chunk: int = 64

    def __post_init__(self):
        if not isinstance(self.threads, int) or isinstance(self.threads, bool):
            raise TypeError(f"threads must be an int, got {self.threads!r}")
        if not 0 <= self.threads <= 4 * (os.cpu_count() or 1):
            raise ValueError(f"threads={self.threads} is outside 0..{4 * (os.cpu_count() or 1)}")
        for name in ("lanes", "chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value > 1024 \
                    or value & (value - 1):
                raise ValueError(f"{name} must be a power of two in 1..1024, got {value!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "CppConfig":
        """Validate and build a config from stored JSON (unknown keys are an error)."""
        unknown = set(data) - {"threads", "lanes", "chunk"}
        if unknown:
            raise ValueError(f"unknown C++ config keys: {sorted(unknown)}")
        return CppConfig(**data)
