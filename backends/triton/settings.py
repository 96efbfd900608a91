"""What the Triton backend reads of loopnest's settings (``core.settings``), as one value."""
from __future__ import annotations

from dataclasses import dataclass

from ...core import settings


@dataclass(frozen=True)
class TritonSettings:
    """``interpret``: kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``): tensors
    live on the CPU and math avoids libdevice, which the interpreter cannot call.
    ``debug``: ``LOOPNEST_DEBUG`` is set: every indirect load is bounds-checked with device asserts.
    ``index_checks``: ``LOOPNEST_INDEX_CHECKS`` (default on): gather/index/embedding positions are
    checked with device asserts, as eager checks them."""

    interpret: bool
    debug: bool
    index_checks: bool = True

    @property
    def device(self) -> str:
        return "cpu" if self.interpret else "cuda"

    @property
    def portable_math(self) -> bool:
        """Use plain ``tl`` math instead of libdevice (the interpreter cannot run extern calls)."""
        return self.interpret


def current() -> TritonSettings:
    """The Triton backend's view of the active settings."""
    s = settings.current()
    return TritonSettings(interpret=s.triton_interpret, debug=s.debug, index_checks=s.index_checks)
