"""The one interface every code generator implements."""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from ..scheduler.kernel import Kernel

# A launcher runs one kernel: launcher(buffers: dict[name, torch.Tensor], syms: dict[name, int]).
Launcher = Callable[[dict, dict], None]


class Backend(Protocol):
    """Code generation, compilation and launch for one kind of device."""

    name: str
    device: str

    def default_config(self, kernel: Kernel) -> Any:
        """The heuristic config used when the tuning database has no entry."""

    def validate_config(self, kernel: Kernel, data: dict) -> Any:
        """A config built from stored JSON, or ValueError if it is not valid for ``kernel``."""

    def codegen(self, kernel: Kernel, config: Any) -> str:
        """Source code of one kernel."""

    def compile(self, kernels: Sequence[tuple[Kernel, Any]]) -> dict[str, Launcher]:
        """Build all kernels of a graph together; launchers keyed by kernel name."""
