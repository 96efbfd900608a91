"""loopnest: a kernel compiler and autotuning service for PyTorch programs.

``import loopnest as ln``; build kernels with the DSL (``ln.placeholder``, math, reductions,
``ln.compile``) or hand loopnest ATen FX graphs (``ln.compile_fx``, ``torch.compile(...,
backend="loopnest")``). Names are imported on first use (PEP 562), so ``loopnest.db`` and the
``autotune`` command line start without importing torch.
"""
from __future__ import annotations

import importlib

_DSL_FUNCTIONS = ("abs", "all", "any", "argmax", "argmin", "broadcast_to", "cast", "cos", "erf", "exp", "gather",
                  "log", "max", "maximum", "mean", "min", "minimum", "permute", "pow", "prod", "reshape", "rsqrt",
                  "sigmoid", "sin", "sqrt", "sum", "tanh", "var_mean", "where")
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8")
# public name -> (module, attribute)
_EXPORTS = {
    "compile": ("dsl.compile", "compile"), "Tensor": ("dsl.tensor", "Tensor"),
    "placeholder": ("dsl.tensor", "placeholder"), "counters": ("core.counters", "counters"),
    "InputError": ("runtime.compiled", "InputError"), "compile_fx": ("api", "compile_fx"),
    "explain": ("api", "explain"), "Explanation": ("lowering.explain", "Explanation"),
    "bool": ("ir.dtypes", "bool_"),  # ln.bool mirrors torch.bool
    **{name: ("dsl.functions", name) for name in _DSL_FUNCTIONS},
    **{name: ("ir.dtypes", name) for name in _DTYPES},
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'loopnest' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
