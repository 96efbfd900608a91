"""What the lowering layer needs to compile a graph: typed, validated, no strings to interpret."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from ..backends import registry
from ..backends.base import Backend
from ..pipeline import Tuner


@dataclass(frozen=True)
class CompileOptions:
    """``backend``: the backend, or None to follow the inputs' device (``registry.for_inputs``).
    ``tuner``: chooses kernel configs (None: the backend's heuristics). ``recorder``: called
    with each compiled graph (``runner.LoweredGraph``), for ``explain``. ``cudagraphs``: replay
    inference graphs on CUDA as one captured CUDA graph: ``"auto"`` where that is invisible to
    the caller and pays (small static graphs, outputs copied out), ``True`` for every static one
    (outputs overwritten by the next call, as in Inductor's reduce-overhead mode), ``False``
    never (``graph_replay``).
    """

    backend: Backend | None = None
    tuner: Tuner | None = None
    recorder: Callable | None = None
    cudagraphs: bool | str = "auto"

    def __post_init__(self):
        if self.recorder is not None and not callable(self.recorder):
            raise TypeError("loopnest: recorder must be callable")
        if not isinstance(self.cudagraphs, bool) and self.cudagraphs != "auto":
            raise TypeError(f"loopnest: cudagraphs must be \"auto\", True or False, got {self.cudagraphs!r}")

    def backend_for(self, example_inputs: Iterable) -> Backend:
        """The backend to use: the explicit one, else by the device of the example inputs. An
        explicit backend whose device holds none of the input tensors (0-dim ones such as CPU
        scalars and seeds aside) is an error: the graph would run there and hand its results back
        on that device, not on the inputs'."""
        inputs = list(example_inputs)
        if self.backend is None:
            return registry.for_inputs(inputs)
        devices = sorted({x.device.type for x in inputs if isinstance(x, torch.Tensor) and x.dim() > 0})
        if devices and self.backend.device not in devices:
            raise ValueError(f"loopnest: backend {self.backend.name!r} runs kernels on {self.backend.device}, but "
                             f"the inputs are on {', '.join(devices)}: move them to {self.backend.device}, or "
                             f"leave the backend out to follow the inputs' device")
        return self.backend
