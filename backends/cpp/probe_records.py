"""The answers of one-time probes of this host (does gold link, do transposes pay in registers),
kept as small JSON records under the cache directory's ``cpp/probes``.

A record is trusted only if every field has its type; anything else (a torn or foreign file) is
probed again. A cache directory that cannot be written leaves the answer to the process.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from ...core import settings
from ...core.files import atomic_write

log = logging.getLogger("loopnest")


def record_path(name: str, *parts: str) -> Path:
    """Where the record of probe ``name`` keyed by ``parts`` (its source, compiler, CPU) lives."""
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return settings.cache_dir("cpp") / "probes" / f"{name}-{key[:24]}.json"


def read_record(path: Path, fields: dict[str, type]) -> dict | None:
    """The record at ``path`` if it holds every one of ``fields`` with its type; None if there is
    none, or (with a warning) if it is malformed."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and all(isinstance(record.get(f), t) for f, t in fields.items()):
        return record
    log.warning("loopnest: probe record %s is malformed; probing again", path)
    return None


def keep_record(path: Path, record: dict) -> None:
    """Write ``record`` to ``path``; a cache directory that cannot be written only warns."""
    try:
        atomic_write(path, json.dumps(record) + "\n")
    except OSError as e:
        log.warning("loopnest: could not keep the probe's answer in %s (%s)", path, e)
