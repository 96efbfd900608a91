"""Options of ``compile_fx`` and of the ``torch.compile(backend="loopnest")`` backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch

BACKENDS = ("cpp", "triton")
TUNE_MODES = ("off", "db", "sweep")


@dataclass(frozen=True)
class CompileOptions:
    """``backend``: "cpp", "triton" or None (follow the inputs' device: CUDA -> triton, else cpp).

    ``tune``: "off" (heuristic defaults), "db" (tuning-database winners, defaults on a miss) or
    "sweep" (tune missing kernels and store their winners). ``tuning``: a dict of
    ``autotune.TuneSettings`` fields (trials, time_budget_s, sampler, db_url, ...).
    ``recorder``: called with each compiled graph (``runner.LoweredGraph``), for ``explain``.
    ``cudagraphs``: replay inference graphs on CUDA as one captured CUDA graph (static shapes;
    outputs are overwritten by the next call, as in Inductor's reduce-overhead mode).
    """

    backend: str | None = None
    tune: str = "db"
    recorder: Callable | None = None
    cudagraphs: bool = False
    tuning: dict | None = None

    def __post_init__(self):
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"loopnest: backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.tune not in TUNE_MODES:
            raise ValueError(f"loopnest: tune must be one of {TUNE_MODES}, got {self.tune!r}")
        if self.recorder is not None and not callable(self.recorder):
            raise TypeError("loopnest: recorder must be callable")
        if self.tuning is not None and not isinstance(self.tuning, dict):
            raise TypeError(f"loopnest: tuning must be a dict of TuneSettings fields, got {self.tuning!r}")
        if not isinstance(self.cudagraphs, bool):
            raise TypeError(f"loopnest: cudagraphs must be True or False, got {self.cudagraphs!r}")

    @staticmethod
    def from_dict(options: dict | None) -> "CompileOptions":
        """Validate a ``torch.compile(..., options=...)`` dict."""
        options = dict(options or {})
        known = ("backend", "tune", "recorder", "cudagraphs", "tuning")
        unknown = set(options) - set(known)
        if unknown:
            raise ValueError(f"loopnest: unknown options {sorted(unknown)}; known: {', '.join(known)}")
        return CompileOptions(**options)

    def backend_for(self, example_inputs: Iterable) -> str:
        """The backend to use: the explicit one, else by the device of the example inputs."""
        if self.backend is not None:
            return self.backend
        for x in example_inputs:
            if isinstance(x, torch.Tensor) and x.device.type == "cuda":
                return "triton"
        return "cpp"
