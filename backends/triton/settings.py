"""Settings of the Triton backend, read from the environment once and overridable in a scope."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

from ... import settings as ln_settings


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "off", "no")


@dataclass(frozen=True)
class TritonSettings:
    """``interpret``: kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``): tensors
    live on the CPU and math avoids libdevice, which the interpreter cannot call.
    ``debug``: ``LOOPNEST_DEBUG`` is set: indirect loads are bounds-checked with device asserts."""

    interpret: bool
    debug: bool

    @staticmethod
    def from_env() -> "TritonSettings":
        """The settings the environment asks for."""
        return TritonSettings(interpret=_env_flag("TRITON_INTERPRET"), debug=ln_settings.debug_enabled())

    @property
    def device(self) -> str:
        return "cpu" if self.interpret else "cuda"

    @property
    def portable_math(self) -> bool:
        """Use plain ``tl`` math instead of libdevice (the interpreter cannot run extern calls)."""
        return self.interpret


_current: list[TritonSettings] = []


def current() -> TritonSettings:
    """The active settings (read from the environment on first use)."""
    if not _current:
        _current.append(TritonSettings.from_env())
    return _current[-1]


@contextlib.contextmanager
def scope(**changes):
    """Override some settings inside a ``with`` block (tests, ahead-of-time compile checks)."""
    _current.append(dataclasses.replace(current(), **changes))
    try:
        yield _current[-1]
    finally:
        _current.pop()
