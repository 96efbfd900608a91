"""loopnest's entry points for other compilers: ``compile_fx``, the ``torch.compile`` backend and
``explain``. They turn what a user writes (backend names, tune modes, tuning settings as a dict)
into the typed objects the layers below take: a ``Backend`` from the registry and a tuner from
``autotune``, passed down explicitly.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from .autotune.compile_time import tuner_for
from .autotune.options import TuneSettings
from .backends import registry
from .core import settings
from .lowering import api as lowering_api
from .lowering.dynamo import AtenCompiler
from .lowering.explain import Explanation, GraphInfo
from .lowering.options import CompileOptions
from .lowering.runner import LoweredGraph

OPTIONS = ("backend", "tune", "tuning", "recorder", "cudagraphs")
# torch.compile's mode -> the options it stands for; the tuning budget comes from the settings
# (LOOPNEST_TUNE_TRIALS), since torch.compile refuses ``options=`` next to ``mode=``.
MODES = {
    "default": {},
    "max-autotune": {"tune": "sweep", "cudagraphs": True},
    "max-autotune-no-cudagraphs": {"tune": "sweep", "cudagraphs": False},
    "reduce-overhead": {"cudagraphs": True},
}


def compile_options(backend: str | None = None, tune: str = "db", tuning: dict | TuneSettings | None = None,
                    recorder: Callable | None = None, cudagraphs: bool | str = "auto") -> CompileOptions:
    """Options from what a user writes: ``backend`` "cpp", "triton" or None (by the inputs'
    device); ``tune`` "off" (heuristics), "db" (stored winners), "sweep" (tune what the tuning
    DB lacks) or "queue" (stored winners now, the rest enqueued for ``autotune worker``);
    ``tuning``: ``autotune.TuneSettings`` or its fields as a dict (trials, db_url, ...);
    ``cudagraphs``: "auto", True or False (``lowering.graph_replay``)."""
    try:
        chosen = registry.get(backend) if backend is not None else None
    except ValueError as exc:
        raise ValueError(f"loopnest: {exc}") from None
    if backend == "triton" and not settings.current().triton_interpret and not torch.cuda.is_available():
        raise ValueError("loopnest: backend 'triton' needs a CUDA GPU and none is visible; set TRITON_INTERPRET=1 "
                         "to run Triton kernels on the CPU in Triton's interpreter (slow: for tests)")
    if tuning is not None and not isinstance(tuning, (dict, TuneSettings)):
        raise TypeError(f"loopnest: tuning must be a dict of TuneSettings fields, got {tuning!r}")
    tune_settings = TuneSettings(**tuning) if isinstance(tuning, dict) else tuning
    try:
        tuner = tuner_for(tune, tune_settings)
    except ValueError as exc:
        raise ValueError(f"loopnest: {exc}") from None
    return CompileOptions(backend=chosen, tuner=tuner, recorder=recorder, cudagraphs=cudagraphs)


def compile_fx(gm, example_inputs: Sequence | None = None, backend: str | None = None, tune: str = "db",
               tuning: dict | TuneSettings | None = None):
    """Compile ``gm`` with loopnest; returns a callable with ``gm``'s calling convention.

    ``gm``: an ATen graph (``make_fx``, AOTAutograd), a torch-level Dynamo graph (run through
    AOTAutograd here, so it trains), or an ``ExportedProgram`` (parameters and buffers bound from
    the program; the callable takes the user inputs). ``backend``, ``tune``, ``tuning``: as in
    ``compile_options``.
    """
    return lowering_api.compile_fx(gm, example_inputs, compile_options(backend, tune, tuning))


def loopnest_backend(gm: torch.fx.GraphModule, example_inputs: Sequence, options: dict | None = None,
                     mode: str | None = None, **kwargs):
    """The ``torch.compile(backend="loopnest")`` backend (an entry point in pyproject): forward and
    backward through AOTAutograd, compiled by loopnest. ``options``: ``compile_options``'s
    arguments as a dict; ``mode``: one of ``MODES`` (CUDA graphs apply to CUDA inference graphs
    only, so on the CPU "reduce-overhead" is the default)."""
    if kwargs:
        raise ValueError(f"loopnest backend: unexpected arguments {sorted(kwargs)}; pass options={{...}}")
    options = dict(options or {}) or options_for_mode(mode)
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ValueError(f"loopnest: unknown options {sorted(unknown)}; known: {', '.join(OPTIONS)}")
    opts = compile_options(**options)
    return AtenCompiler(opts, opts.backend_for(example_inputs)).aot(gm, example_inputs)


def options_for_mode(mode: str | None) -> dict:
    """The options torch.compile's ``mode`` stands for (see ``MODES``)."""
    if mode not in MODES and mode is not None:
        raise ValueError(f"loopnest: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    options = dict(MODES[mode or "default"])
    if options.get("tune") == "sweep":
        options["tuning"] = {"trials": settings.current().tune_trials}
    return options


def explain(fn, *example_inputs, dynamic: bool | None = None, **options) -> Explanation:
    """Compile ``fn`` (function or module) with ``torch.compile(backend="loopnest")``, run it once
    on ``example_inputs``, and describe every graph compiled during that run, with each kernel's
    config decision. ``dynamic``: torch.compile's (True: symbolic sizes, configs chosen per size
    bucket at call time); ``options`` are the backend's (``backend=``, ``tune=``, ``tuning=``)."""
    recorded: list[LoweredGraph] = []
    compiled = torch.compile(fn, backend=loopnest_backend, dynamic=dynamic,
                             options={**options, "recorder": recorded.append})
    compiled(*example_inputs)
    return Explanation([GraphInfo.from_lowered(g) for g in recorded])
