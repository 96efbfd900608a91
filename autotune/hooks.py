"""Each backend's tuning hooks, from its ``backends/<name>/space.py``: a table, not branches."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from ..db.api import HardwareInfo
from ..scheduler.kernel import Kernel
from .space import SearchSpace

SPACE_MODULES = {"cpp": "loopnest.backends.cpp.space", "triton": "loopnest.backends.triton.space"}


@dataclass(frozen=True)
class TuningHooks:
    """``search_space(kernel, hardware)``; ``config_from_json(data)`` validates a stored config
    without its kernel (imports); ``prebuild(kernel, config, timeout)`` compiles a candidate
    ahead of its measurement in a separate process, or is None when the backend compiles on
    first launch."""

    search_space: Callable[[Kernel, HardwareInfo], SearchSpace]
    config_from_json: Callable[[dict], Any]
    prebuild: Callable[[Kernel, Any, float | None], None] | None


@lru_cache(maxsize=None)
def tuning_hooks(backend: str) -> TuningHooks:
    """The hooks of ``backend`` (its space module is imported on first use: triton is heavy)."""
    if backend not in SPACE_MODULES:
        raise ValueError(f"no search space for backend {backend!r}; known: {sorted(SPACE_MODULES)}")
    module = importlib.import_module(SPACE_MODULES[backend])
    return TuningHooks(module.search_space, module.config_from_json, getattr(module, "prebuild", None))


def validate_stored_config(backend: str, config: dict) -> None:
    """A ``db.api.ConfigValidator``: raise ValueError unless ``config`` is a valid ``backend`` config."""
    try:
        tuning_hooks(backend).config_from_json(dict(config))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {backend} config {config}: {exc}") from None
