"""The Triton backend's tunable parameters: one frozen, self-validating config per kernel."""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

from ...core.hardware import HardwareInfo


class Strategy(Enum):
    """How a reduction kernel walks its rows (a tunable parameter)."""

    PERSISTENT = "persistent"  # a whole row at once (one program / one thread owns it)
    LOOPED = "looped"          # a row in chunks, accumulators carried across chunks
    SPLIT = "split"            # one long reduction split across programs/threads, then combined
    SPLIT_SYNC = "split_sync"  # rows split across programs that wait for each other in one launch


SPLIT_STRATEGIES = (Strategy.SPLIT, Strategy.SPLIT_SYNC)


MAX_TILE_NUMEL = 1 << 20  # triton.language.TRITON_MAX_TENSOR_NUMEL
_LIMITS = {"XBLOCK": 8192, "YBLOCK": 1024, "RBLOCK": 1 << 16, "num_warps": 32, "SPLIT": 8192}


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class TritonConfig:
    """How one Triton kernel is tiled and launched.

    ``XBLOCK`` rows (or pointwise elements) per program; ``YBLOCK`` > 1 makes pointwise kernels
    use 2D ``YBLOCK x XBLOCK`` tiles; ``RBLOCK`` reduced elements per step. ``strategy`` says how
    a reduction walks its rows: the whole row in one block (persistent), in ``RBLOCK`` chunks
    (looped), split across ``SPLIT`` programs whose partials a second launch combines (split),
    or split across ``SPLIT`` programs that exchange partials through a barrier in one launch, each
    keeping its slice of the row on chip (or in L2) between phases (split_sync).
    """

    XBLOCK: int = 1024
    YBLOCK: int = 1
    RBLOCK: int = 1
    num_warps: int = 4
    num_stages: int = 1
    strategy: Strategy = Strategy.PERSISTENT
    SPLIT: int = 1

    def __post_init__(self):
        if isinstance(self.strategy, str):
            try:
                object.__setattr__(self, "strategy", Strategy(self.strategy))
            except ValueError:
                raise ValueError(f"strategy must be one of {[s.value for s in Strategy]}, "
                                 f"got {self.strategy!r}") from None
        if not isinstance(self.strategy, Strategy):
            raise TypeError(f"strategy must be a Strategy or its name, got {self.strategy!r}")
        for name, hi in _LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {value!r}")
            if name != "SPLIT" and not _is_pow2(value):
                raise ValueError(f"{name}={value} must be a power of two")
            if not 1 <= value <= hi:
                raise ValueError(f"{name}={value} is outside 1..{hi}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise ValueError(f"num_stages={self.num_stages!r} is outside 1..8")
        if self.XBLOCK * max(self.YBLOCK, self.RBLOCK) > MAX_TILE_NUMEL:
            raise ValueError(f"tile of {self.XBLOCK} x {max(self.YBLOCK, self.RBLOCK)} elements exceeds "
                             f"Triton's limit of {MAX_TILE_NUMEL}")
        if (self.strategy in SPLIT_STRATEGIES) != (self.SPLIT > 1):
            raise ValueError(f"SPLIT={self.SPLIT} needs strategy 'split' or 'split_sync', and those need "
                             f"SPLIT >= 2 (got strategy {self.strategy.value!r})")

    def to_json(self) -> dict:
        """The config as a JSON-ready dict (strategy by name)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["strategy"] = self.strategy.value
        return out

    @staticmethod
    def from_json(data: dict) -> "TritonConfig":
        """Validate and build a config from stored JSON (unknown keys are an error)."""
        unknown = set(data) - {f.name for f in fields(TritonConfig)}
        if unknown:
            raise ValueError(f"unknown Triton config keys: {sorted(unknown)}")
        return TritonConfig(**data)


def config_from_json(data: dict, hardware: HardwareInfo) -> TritonConfig:
    """A stored config (its bounds do not depend on the hardware it was tuned on)."""
    return TritonConfig.from_json(dict(data))


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
