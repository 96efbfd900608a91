"""The backends by name and by device: the one place that maps either to a backend.

Importing it is cheap (no torch): each backend is built on first use, and ``config_from_json``
validates a stored config through the backend's parameter module alone, so the tuning DB's
command line checks imported rows without loading torch or Triton.
"""
from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

if TYPE_CHECKING:
    from ..core.hardware import HardwareInfo
    from .base import Backend


def _cpp() -> "Backend":
    from .cpp.backend import CppBackend  # imports on first use: see the module docstring

    return CppBackend()


def _triton() -> "Backend":
    from .triton.backend import TritonBackend  # triton takes seconds to import

    return TritonBackend()


def _cpp_config(data: dict, hardware: "HardwareInfo"):
    from .cpp.params import config_from_json

    return config_from_json(data, hardware)


def _triton_config(data: dict, hardware: "HardwareInfo"):
    from .triton.params import config_from_json

    return config_from_json(data, hardware)


# name -> (backend factory, stored-config validator)
_BACKENDS: dict[str, tuple[Callable[[], "Backend"], Callable[[dict, "HardwareInfo"], Any]]] = {
    "cpp": (_cpp, _cpp_config), "triton": (_triton, _triton_config)}
_FOR_DEVICE = {"cpu": "cpp", "cuda": "triton"}  # device type -> the backend that serves it


def names() -> tuple[str, ...]:
    """The names of every backend."""
    return tuple(_BACKENDS)


def _known(name: str) -> str:
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(_BACKENDS)}")
    return name


@cache
def get(name: str) -> "Backend":
    """The backend called ``name``."""
    return _BACKENDS[_known(name)][0]()


def config_from_json(name: str, data: Mapping[str, Any], hardware: "HardwareInfo"):
    """A stored config of backend ``name``, bounded by the ``hardware`` it was tuned on
    (``Backend.config_from_json`` without building the backend); ValueError if invalid."""
    return _BACKENDS[_known(name)][1](dict(data), hardware)


def for_device(device) -> "Backend":
    """The backend for tensors on ``device`` ("cpu", "cuda:1", a torch.device): Triton for a
    CUDA GPU, C++ for the CPU."""
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind not in _FOR_DEVICE:
        raise ValueError(f"no loopnest backend for device {device!r}; supported: {', '.join(_FOR_DEVICE)}")
    return get(_FOR_DEVICE[kind])


def for_inputs(values: Iterable) -> "Backend":
    """The backend for a graph whose example inputs are ``values``: Triton if any tensor is on a
    CUDA device, else C++."""
    cuda = any(getattr(getattr(x, "device", None), "type", None) == "cuda" for x in values)
    return for_device("cuda" if cuda else "cpu")


def for_this_machine() -> "Backend":
    """Triton when this machine has a CUDA device, else C++."""
    import torch

    return for_device("cuda" if torch.cuda.is_available() else "cpu")


def resolve(backend: "str | Backend | None", inputs: Iterable = ()) -> "Backend":
    """``backend`` as a Backend: by name, as given, or (None) chosen by the inputs' device."""
    if backend is None:
        return for_inputs(inputs)
    return get(backend) if isinstance(backend, str) else backend
