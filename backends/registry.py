"""Backends by name."""
from __future__ import annotations

from functools import lru_cache

from .cpp.backend import CppBackend

_FACTORIES = {"cpp": CppBackend}


def register_backend(name: str, factory) -> None:
    """Make a backend available to ``get_backend(name)``."""
    _FACTORIES[name] = factory
    get_backend.cache_clear()


@lru_cache(maxsize=None)
def get_backend(name: str):
    """The backend instance called ``name`` ("cpp" or "triton")."""
    if name == "triton" and name not in _FACTORIES:
        from .triton.backend import TritonBackend  # imported lazily: triton is heavy to import

        _FACTORIES["triton"] = TritonBackend
    if name not in _FACTORIES:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(set(_FACTORIES) | {'triton'})}")
    return _FACTORIES[name]()
