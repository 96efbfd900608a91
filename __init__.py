"""loopnest: a kernel compiler and autotuning service for PyTorch programs.

``import loopnest as ln``; build kernels with the DSL (``ln.placeholder``, math, reductions,
``ln.compile``) or hand loopnest ATen FX graphs.
"""
from .counters import counters
from .dsl.compile import compile
from .dsl.functions import (abs, all, any, argmax, argmin, broadcast_to, cast, cos, erf, exp, gather,
                            log, max, maximum, mean, min, minimum, permute, pow, prod, reshape, rsqrt,
                            sigmoid, sin, sqrt, sum, tanh, var_mean, where)
from .dsl.tensor import Tensor, placeholder
from .ir.dtypes import (bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64, uint8)
from .lowering import Explanation, compile_fx, explain
from .runtime.compiled import InputError

bool = bool_  # noqa: A001 - ln.bool mirrors torch.bool

__all__ = [
    "Tensor", "placeholder", "compile", "counters", "InputError", "compile_fx", "explain", "Explanation",
    "abs", "all", "any", "argmax", "argmin", "broadcast_to", "cast", "cos", "erf", "exp", "gather",
    "log", "max", "maximum", "mean", "min", "minimum", "permute", "pow", "prod", "reshape", "rsqrt",
    "sigmoid", "sin", "sqrt", "sum", "tanh", "var_mean", "where",
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
]
