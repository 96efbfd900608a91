"""The C++ backend's tunable parameters."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CppConfig:
    """How a C++ kernel runs. ``threads=0`` lets OpenMP use every core."""

    threads: int = 0

    def __post_init__(self):
        if not isinstance(self.threads, int) or isinstance(self.threads, bool):
            raise TypeError(f"threads must be an int, got {self.threads!r}")
        if not 0 <= self.threads <= 4 * (os.cpu_count() or 1):
            raise ValueError(f"threads={self.threads} is outside 0..{4 * (os.cpu_count() or 1)}")

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "CppConfig":
        """Validate and build a config from stored JSON (unknown keys are an error)."""
        unknown = set(data) - {"threads"}
        if unknown:
            raise ValueError(f"unknown C++ config keys: {sorted(unknown)}")
        return CppConfig(**data)
