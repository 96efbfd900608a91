"""The one interface every code generator implements, and what its compile returns.

Everything the rest of loopnest asks of a backend goes through ``Backend``: which device and
hardware it serves, a kernel's search space and default config, config validation, codegen,
compile, the timing of one launch, and the software versions that make a tuned winner stale.
"""
from __future__ import annotations

import functools
import hashlib
import platform
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from ..core.hardware import HardwareInfo, HardwareKind
from ..core.space import SearchSpace
from ..core.timing import BenchOptions, Timing
from ..ir.index import Index
from ..ir.nodes import Graph
from ..scheduler import Schedule, schedule
from ..scheduler.kernel import Kernel

# A launcher runs one kernel: launcher(buffers: dict[name, torch.Tensor], syms: dict[name, int]).
Launcher = Callable[[dict, dict], None]
Config = Any  # a backend's frozen config dataclass (to_json / from_json)


class PositionalLaunch:
    """A launch with its symbol values fixed (what a launcher's ``bind(syms)`` returns) that takes
    its buffers either by name from a dict, ``launch(buffers)``, or in ``names`` order,
    ``launch.run(*tensors)``: the form the generated call functions of ``runtime/fast_call.py``
    use, with no dict per call."""

    __slots__ = ("names", "run")

    def __init__(self, names: Sequence[str], run: Callable[..., None]):
        self.names = tuple(names)
        self.run = run

    def __call__(self, buffers: dict) -> None:
        self.run(*[buffers[n] for n in self.names])


@dataclass(frozen=True)
class Artifact:
    """What ``Backend.compile`` built for some kernels of a graph: a launcher per kernel name, and
    the files on disk (generated sources; shared libraries when the backend links ahead)."""

    launchers: Mapping[str, Launcher]
    sources: tuple[Path, ...] = ()
    libraries: tuple[Path, ...] = ()


class Backend(Protocol):
    """Code generation, compilation, launch and timing for one kind of device."""

    name: str                    # "cpp", "triton": the key of its winners in the tuning DB
    hardware_kind: HardwareKind  # the hardware its winners are measured on
    can_prebuild: bool           # compiles candidates ahead, in other processes (``prebuild``)
    stores_broadcast_tables: bool  # stores a transcendental value read at many points once (``schedule_for``)
    splits_runs: bool            # reads rows made of runs far apart as partials, in memory order (``schedule_for``)
    split_rows_below: int | None  # ... when the kernel has fewer rows than this (None: any)

    @property
    def device(self) -> str:
        """The torch device type its kernels take tensors on ("cpu", "cuda")."""

    def hardware(self, device: str | None = None) -> HardwareInfo:
        """The machine ``device`` (default: the backend's device) as the tuning DB keys it."""

    def software(self) -> dict[str, Any]:
        """Versions whose change makes a stored winner stale (compiler actually used, codegen)."""

    def space(self, kernel: Kernel, hardware: HardwareInfo) -> SearchSpace:
        """The tunable knobs of ``kernel`` on ``hardware``; the default config is a point of it."""

    def reduces_across_rows(self, rdomain: tuple[Index, ...]) -> bool:
        """True when a reduction over the rows of a row kernel reducing ``rdomain`` may join that
        kernel (``KReduction.across``); the scheduler asks it for each such fusion."""

    def default_config(self, kernel: Kernel) -> Config:
        """The heuristic config used when the tuning database has no entry."""

    def config_from_json(self, data: Mapping[str, Any], hardware: HardwareInfo) -> Config:
        """A config from stored JSON, bounded by the ``hardware`` it was tuned on (not this
        machine); ValueError if invalid. Checks that need the kernel are ``space(...).validate``."""

    def codegen(self, kernel: Kernel, config: Config) -> str:
        """Source code of one kernel."""

    def compile(self, kernels: Sequence[tuple[Kernel, Config]]) -> Artifact:
        """Build the kernels of a graph together."""

    def prebuild(self, kernel: Kernel, config: Config, timeout: float | None,
                 cancel: threading.Event | None = None) -> None:
        """Compile one candidate into the code cache ahead of its measurement (only when
        ``can_prebuild``); raises the backend's compile error or a TimeoutError, past ``timeout``
        or, where the backend can stop a build, once ``cancel`` is set."""

    def time(self, run: Callable[[], None], options: BenchOptions) -> Timing:
        """Quantiles of ``run()``'s time, measured the way this device must be measured."""


def software_versions(**extra: Any) -> dict[str, Any]:
    """The versions every backend's winners depend on, plus the backend's own ``extra``."""
    return {"torch": str(torch.__version__), "python": platform.python_version(), **extra}


def codegen_sources(backend_folder: Path) -> tuple[Path, ...]:
    """What decides a backend's generated code besides the kernel's IR: its folder, the shared
    emitter, and the semantics of the IR's ops and reductions it renders."""
    ir = Path(__file__).parents[1] / "ir"
    return backend_folder, Path(__file__).parent / "emitter.py", ir / "ops.py", ir / "reductions.py"


@functools.cache
def source_digest(*folders: Path) -> str:
    """A digest of the Python sources under ``folders``: a backend's codegen version.

    Derived, not bumped by hand: any change to the code that generates or launches a kernel (or
    interprets its config) makes winners measured before it stale, so none is served unmeasured.
    """
    h = hashlib.sha256()
    for folder in map(Path, folders):
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else [folder]:
            h.update(f"{path.relative_to(folder.parent)}\0".encode() + path.read_bytes())
    return h.hexdigest()[:16]


def schedule_for(graph: Graph, backend: Backend, name: str = "graph") -> Schedule:
    """``graph`` fused into kernels the way ``backend`` runs them (its reductions across rows, and
    whether values broadcast to many points are stored or recomputed); every caller that keys
    kernels for ``backend`` (compiles, tuning requests) schedules through here."""
    return schedule(graph, name, across_rows=backend.reduces_across_rows,
                    store_tables=backend.stores_broadcast_tables, split_runs=backend.splits_runs,
                    split_rows_below=backend.split_rows_below)
