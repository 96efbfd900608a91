"""Questions about the tuning DB that the CLI asks (thin helpers over ``db.api``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends import registry
from ..db.records import HardwareInfo, LookupResult, TuningKey, WinnerRecord

if TYPE_CHECKING:  # the DB commands that only read start without the ORM that db.api imports
    from ..db.api import TuningDB
    from ..db.read import TuningReader


def kernel_winners(db: TuningReader, ident: str) -> list[WinnerRecord]:
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


def validate_stored_config(backend: str, config: dict, hardware: HardwareInfo) -> None:
    """A ``db.api.ConfigValidator``: raise ValueError unless ``config`` is a valid config of
    ``backend`` on the ``hardware`` it was tuned on (checks that need the kernel's IR run when a
    machine that holds it serves the row)."""
    try:
        registry.config_from_json(backend, config, hardware)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {backend} config {config}: {exc}") from None


def best(db: TuningDB, ident: str, sizes: tuple[int, ...]) -> list[LookupResult]:
    """This machine's answer for the kernel(s) ``ident`` at ``sizes``: exact, stale, nearest or miss."""
    seen: set[tuple[str, str, tuple]] = set()
    out = []
    for w in kernel_winners(db, ident):
        if (w.kernel_hash, w.backend, w.dtypes) in seen:
            continue
        seen.add((w.kernel_hash, w.backend, w.dtypes))
        backend = registry.get(w.backend)
        out.append(db.lookup(TuningKey(w.kernel_hash, w.backend, sizes, w.dtypes, backend.hardware()),
                             backend.software()))
    return out


@dataclass(frozen=True)
class StaleWinner:
    """A winner measured under other software than this machine's (re-tune candidate)."""

    winner: WinnerRecord
    changed: dict[str, tuple[Any, Any]]  # version -> (stored, current)


def stale_winners(db: TuningReader) -> list[StaleWinner]:
    """Winners marked stale, or whose software differs from this machine's current versions."""
    current: dict[str, dict] = {}  # only the backends the DB holds winners of (triton is slow to import)
    out = []
    for w in db.winners():
        if w.backend not in current:
            current[w.backend] = registry.get(w.backend).software() if w.backend in registry.names() else {}
        now = current[w.backend]
        changed = {k: (w.software.get(k), now.get(k)) for k in set(w.software) | set(now)
                   if w.software.get(k) != now.get(k)}
        if changed or w.stale:
            out.append(StaleWinner(w, changed))
    return out
