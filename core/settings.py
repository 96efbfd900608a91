"""Every environment switch loopnest reads, parsed by one rule into one typed, frozen object.

``current()`` is the environment as it is now (or an override installed by ``scope``); settings
are read where they are used, never cached at import time, so a test or a user may change them.
Booleans: "", "0", "false", "off", "no" are off; "1", "true", "on", "yes" are on (any case);
anything else is an error naming the variable.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import platformdirs

_OFF = ("", "0", "false", "off", "no")
_ON = ("1", "true", "on", "yes")


def env_flag(name: str, default: bool = False) -> bool:
    """The boolean environment variable ``name`` (unset: ``default``)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in _OFF:
        return False
    if text in _ON:
        return True
    raise ValueError(f"{name}={raw!r} is not a boolean: use one of {', '.join(_ON[1:] + _OFF[1:])}")


def env_int(name: str, default: int) -> int:
    """The positive integer environment variable ``name`` (unset or empty: ``default``)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r} must be a whole number >= 1")
    return int(raw)


# variable -> (field, what it does); the README's table of environment variables lists these.
VARIABLES = {
    "LOOPNEST_CACHE_DIR": ("cache_dir", "root of the code, AOT and debug caches (default: the user cache dir)"),
    "LOOPNEST_DB": ("db_url", "tuning DB URL, or the path of a SQLite file "
                              "(default: sqlite file in the user cache dir)"),
    "LOOPNEST_DEBUG": ("debug", "write IR and generated source of each graph; Triton bounds-checks loads"),
    "LOOPNEST_POISON": ("poison", "fill every buffer loopnest allocates with NaN or a sentinel first"),
    "LOOPNEST_AOT_CACHE": ("aot_cache", "cache AOTAutograd's plain inference graphs on disk (default on)"),
    "TRITON_INTERPRET": ("triton_interpret", "run Triton kernels in Triton's CPU interpreter"),
    "LOOPNEST_TUNE_TRIALS": ("tune_trials", "configs measured per kernel when torch.compile's mode tunes "
                             "(max-autotune; default 24)"),
    "CXX": ("cxx", "the C++ compiler of the C++ backend (default g++)"),
    "LOOPNEST_INDEX_CHECKS": ("index_checks", "check gather/index/embedding indices at run time, an error "
                              "as in eager (default on; 0 turns the checks off)"),
}


def db_url(value: str | None) -> str | None:
    """A tuning DB URL from what a user wrote: a URL, or anything that starts like one
    (``scheme:``, left for the URL parser to judge), as it is; a filesystem path as the SQLite
    file there (``sqlite:///`` and the absolute path)."""
    if not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value):
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


@dataclass(frozen=True)
class Settings:
    """The environment switches of one moment (see ``VARIABLES``)."""

    cache_dir: Path
    db_url: str | None
    debug: bool
    poison: bool
    aot_cache: bool
    triton_interpret: bool
    tune_trials: int
    cxx: str
    index_checks: bool

    @staticmethod
    def from_env() -> "Settings":
        """The settings the environment asks for now."""
        root = os.environ.get("LOOPNEST_CACHE_DIR") or platformdirs.user_cache_dir("loopnest")
        return Settings(cache_dir=Path(root), db_url=db_url(os.environ.get("LOOPNEST_DB") or None),
                        debug=env_flag("LOOPNEST_DEBUG"), poison=env_flag("LOOPNEST_POISON"),
                        aot_cache=env_flag("LOOPNEST_AOT_CACHE", default=True),
                        triton_interpret=env_flag("TRITON_INTERPRET"),
                        tune_trials=env_int("LOOPNEST_TUNE_TRIALS", 24), cxx=os.environ.get("CXX") or "g++",
                        index_checks=env_flag("LOOPNEST_INDEX_CHECKS", default=True))


_overrides: list[dict] = []


def current() -> Settings:
    """The active settings: the environment as it is now, with the fields ``scope`` overrides."""
    s = Settings.from_env()
    for changes in _overrides:
        s = dataclasses.replace(s, **changes)
    return s


@contextlib.contextmanager
def scope(**changes):
    """Override some settings inside a ``with`` block (tests, ahead-of-time compile checks); the
    other fields still follow the environment."""
    dataclasses.replace(Settings.from_env(), **changes)  # unknown fields fail here, before the block
    _overrides.append(changes)
    try:
        yield current()
    finally:
        _overrides.pop()


def cache_dir(sub: str = "") -> Path:
    """``current().cache_dir / sub``, created if missing."""
    path = current().cache_dir / sub
    path.mkdir(parents=True, exist_ok=True)
    return path
