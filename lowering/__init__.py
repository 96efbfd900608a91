"""ATen FX graphs -> loopnest IR: one table of lowering rules keyed by ATen overload
(``registry.LOWERINGS``), decompositions, Extern fallbacks, and the torch.compile backend."""
from . import gather, indexing, pointwise, pooling, reductions, views  # noqa: F401 - they register rules
from .registry import LOWERINGS, LoweringError, Unsupported, register_lowering

__all__ = ["LOWERINGS", "LoweringError", "Unsupported", "register_lowering"]
