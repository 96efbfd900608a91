"""Process-wide event counts that tests and benchmarks assert on (``loopnest.counters``)."""
from __future__ import annotations

from collections import Counter

KEYS = ("graphs_compiled", "kernels_generated", "kernels_compiled", "code_cache_hits", "benchmarks_run")


class Counters(Counter):
    """A ``collections.Counter`` whose standard keys always exist, with ``reset()``."""

    def __init__(self):
        super().__init__({k: 0 for k in KEYS})

    def reset(self) -> None:
        """Set every count back to zero."""
        self.clear()
        self.update({k: 0 for k in KEYS})


counters = Counters()
