"""Questions about the tuning DB that the CLI asks (thin helpers over ``db.api``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..db.api import LookupResult, TuningDB, TuningKey, WinnerRecord
from .hardware import current_hardware, software_versions
from .hooks import SPACE_MODULES


def kernel_winners(db: TuningDB, ident: str) -> list[WinnerRecord]:
    """Winners of the kernel(s) whose structural hash starts with ``ident`` or whose name is it."""
    return [w for w in db.winners() if w.kernel_hash.startswith(ident) or w.name == ident]


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"8192x2048"`` -> (8192, 2048)."""
    try:
        sizes = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"sizes must look like 8192x2048, got {text!r}") from None
    if any(s < 0 for s in sizes):
        raise ValueError(f"sizes must be >= 0, got {text!r}")
    return sizes


def device_for(backend: str) -> str:
    """The device whose hardware a ``backend``'s winners were measured on, on this machine."""
    return "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"


def best(db: TuningDB, ident: str, sizes: tuple[int, ...]) -> list[LookupResult]:
    """This machine's answer for the kernel(s) ``ident`` at ``sizes``: exact, stale, nearest or miss."""
    seen: set[tuple[str, str, tuple]] = set()
    out = []
    for w in kernel_winners(db, ident):
        if (w.kernel_hash, w.backend, w.dtypes) in seen:
            continue
        seen.add((w.kernel_hash, w.backend, w.dtypes))
        key = TuningKey(w.kernel_hash, w.backend, sizes, w.dtypes, current_hardware(device_for(w.backend)))
        out.append(db.lookup(key, software_versions(w.backend)))
    return out


@dataclass(frozen=True)
class StaleWinner:
    """A winner measured under other software than this machine's (re-tune candidate)."""

    winner: WinnerRecord
    changed: dict[str, tuple[Any, Any]]  # version -> (stored, current)


def stale_winners(db: TuningDB) -> list[StaleWinner]:
    """Winners marked stale, or whose software differs from this machine's current versions."""
    current = {b: software_versions(b) for b in SPACE_MODULES}
    out = []
    for w in db.winners():
        now = current.get(w.backend, {})
        changed = {k: (w.software.get(k), now.get(k)) for k in set(w.software) | set(now)
                   if w.software.get(k) != now.get(k)}
        if changed or w.stale:
            out.append(StaleWinner(w, changed))
    return out
