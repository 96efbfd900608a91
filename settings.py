"""Process-wide settings read from the environment once, overridable in code."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Root of loopnest's on-disk caches: ``LOOPNEST_CACHE_DIR`` or the user cache dir."""
    root = os.environ.get("LOOPNEST_CACHE_DIR") or platformdirs.user_cache_dir("loopnest")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def debug_enabled() -> bool:
    """``LOOPNEST_DEBUG=1`` writes IR and generated source of each compiled graph to disk."""
    return os.environ.get("LOOPNEST_DEBUG", "") not in ("", "0")


def poison_outputs() -> bool:
    """``LOOPNEST_POISON=1`` fills every buffer loopnest allocates with NaN (or a sentinel) first,
    so elements a kernel fails to write show up in tests."""
    return os.environ.get("LOOPNEST_POISON", "") not in ("", "0")
