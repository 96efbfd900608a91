"""What the lowering layer needs to compile a graph: typed, validated, no strings to interpret."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..backends import registry
from ..backends.base import Backend
from ..pipeline import Tuner


@dataclass(frozen=True)
class CompileOptions:
    """``backend``: the backend, or None to follow the inputs' device (``registry.for_inputs``).
    ``tuner``: chooses kernel configs (None: the backend's heuristics). ``recorder``: called
    with each compiled graph (``runner.LoweredGraph``), for ``explain``. ``cudagraphs``: replay
    inference graphs on CUDA as one captured CUDA graph (static shapes; outputs are overwritten
    by the next call, as in Inductor's reduce-overhead mode).
    """

    backend: Backend | None = None
    tuner: Tuner | None = None
    recorder: Callable | None = None
    cudagraphs: bool = False

    def __post_init__(self):
        if self.recorder is not None and not callable(self.recorder):
            raise TypeError("loopnest: recorder must be callable")
        if not isinstance(self.cudagraphs, bool):
            raise TypeError(f"loopnest: cudagraphs must be True or False, got {self.cudagraphs!r}")

    def backend_for(self, example_inputs: Iterable) -> Backend:
        """The backend to use: the explicit one, else by the device of the example inputs."""
        return self.backend if self.backend is not None else registry.for_inputs(example_inputs)
