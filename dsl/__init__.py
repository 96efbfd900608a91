"""The user-facing DSL that builds loopnest IR.

``functions`` installs the tensor operators (``+``, ``<``, ``.sum()``, ...) on ``Tensor``; it is
imported with the package, so a tensor has its operators however it was reached.
"""
from . import functions  # noqa: F401
