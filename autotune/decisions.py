"""Where a kernel's config came from: what ``CompiledGraph.tuning`` holds for each kernel (and,
for a kernel with symbolic sizes, for each size it was called at)."""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from ..core.space import SearchSpace
from ..db.api import LookupKind, LookupResult, TuningKey

log = logging.getLogger("loopnest.autotune")


class Source(enum.StrEnum):
    """Where a kernel's config came from."""

    DB = "db"            # an exact winner of the tuning DB, validated
    BUCKET = "bucket"    # a winner at other sizes of the same size bucket (symbolic sizes only), validated
    SWEEP = "sweep"      # tuned by this compile (or, for symbolic sizes, at the first call in the bucket)
    DEFAULT = "default"  # the backend's heuristics


@dataclass(frozen=True)
class Decision:
    """Where a kernel's config came from (``source``), and ``lookup``: what the DB had (exact,
    stale, nearest, miss, invalid, unkeyed, no-db; for symbolic sizes also dynamic, bucket and
    bucket-invalid). ``sizes`` and ``bucket``: the loop sizes and size bucket of a decision
    taken at call time (empty for one taken at compile time)."""

    kernel: str
    source: Source
    lookup: str
    config: dict[str, Any]
    note: str = ""
    sizes: tuple[int, ...] = ()
    bucket: tuple[int, ...] = ()


def decide(kernel: str, found: LookupResult, key: TuningKey, space: SearchSpace, default: dict) -> tuple[Decision, Any]:
    """The decision for what an exact-key lookup ``found``, and the validated config (None: the
    default runs; a stale or nearest winner is a warm start only, an invalid one is skipped)."""
    if found.kind is LookupKind.MISS:
        return Decision(kernel, Source.DEFAULT, "miss", default), None
    if found.kind is not LookupKind.EXACT:
        what = ("measured with other software" if found.kind is LookupKind.STALE
                else f"at the nearest shape {found.winner.sizes}")
        note = f"warm start only: a winner {what}, {found.winner.time_us:.1f} us there"
        return Decision(kernel, Source.DEFAULT, found.kind.value, default, note), None
    try:
        config = space.validate(found.config)
    except ValueError as exc:
        log.warning("tuning DB: skipping the stored config of %s (%s %s): %s", kernel,
                    key.kernel_hash, key.sizes_key, exc)
        return Decision(kernel, Source.DEFAULT, "invalid", default, f"stored config rejected: {exc}"), None
    return Decision(kernel, Source.DB, "exact", config.to_json(), f"{found.winner.time_us:.1f} us"), config
