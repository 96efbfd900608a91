"""The backends by name and by device: the one place that maps either to a backend."""
from __future__ import annotations

from functools import cache
from typing import Callable, Iterable

import torch

from .base import Backend
from .cpp.backend import CppBackend


def _triton() -> Backend:
    from .triton.backend import TritonBackend  # triton takes seconds to import: only when asked for

    return TritonBackend()


_FACTORIES: dict[str, Callable[[], Backend]] = {"cpp": CppBackend, "triton": _triton}
_FOR_DEVICE = {"cpu": "cpp", "cuda": "triton"}  # device type -> the backend that serves it


def names() -> tuple[str, ...]:
    """The names of every backend."""
    return tuple(_FACTORIES)


@cache
def get(name: str) -> Backend:
    """The backend called ``name``."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(_FACTORIES)}")
    return _FACTORIES[name]()


def for_device(device: str | torch.device) -> Backend:
    """The backend for tensors on ``device`` (a CUDA GPU: Triton; the CPU: C++)."""
    kind = torch.device(device).type
    if kind not in _FOR_DEVICE:
        raise ValueError(f"no loopnest backend for device {device!r}; supported: {', '.join(_FOR_DEVICE)}")
    return get(_FOR_DEVICE[kind])


def for_inputs(values: Iterable) -> Backend:
    """The backend for a graph whose example inputs are ``values``: Triton if any tensor is on a
    CUDA device, else C++."""
    cuda = any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in values)
    return for_device("cuda" if cuda else "cpu")


def for_this_machine() -> Backend:
    """Triton when this machine has a CUDA device, else C++."""
    return for_device("cuda" if torch.cuda.is_available() else "cpu")


def resolve(backend: str | Backend | None, inputs: Iterable = ()) -> Backend:
    """``backend`` as a Backend: by name, as given, or (None) chosen by the inputs' device."""
    if backend is None:
        return for_inputs(inputs)
    return get(backend) if isinstance(backend, str) else backend
