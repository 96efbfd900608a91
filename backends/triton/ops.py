"""How the Triton backend spells each IR op, constant and cast, and the Triton type of each dtype.

float16/bfloat16 values are loaded, computed and accumulated in float32 and stored narrow; a cast
to a narrow float rounds (a float32 -> narrow -> float32 round trip). Ops are rendered from the
operand dtype; ``portable`` selects plain-``tl`` math (``mathlib``) over libdevice, for the
interpreter.
"""
from __future__ import annotations

import math
from typing import Callable

from ...ir import dtypes as dt
from ...ir.dtypes import DType
from ...ir.ops import Op

TL = {
    dt.float16: "tl.float16", dt.bfloat16: "tl.bfloat16", dt.float32: "tl.float32",
    dt.float64: "tl.float64", dt.int8: "tl.int8", dt.int16: "tl.int16", dt.int32: "tl.int32",
    dt.int64: "tl.int64", dt.uint8: "tl.uint8", dt.bool_: "tl.int1",
}
# Python literals are weakly typed in Triton (they take the other operand's type); alone they are
# int32/float32/int1. Constants of these compute dtypes are printed as literals.
_LITERAL_OK = (dt.float32, dt.int32, dt.bool_)
_F32_MAX = 3.4028234663852886e38


def flushing_exp(x: str, dtype: DType = dt.float32) -> str:
    """Triton text of ``e ** x`` whose results below 2 ** -126 may be 0 (``Op.EXP_FTZ``): the
    multiply by log2(e) that ``tl.exp`` does, then ``tl.exp2``, whose ex2 flushes subnormals. The
    ex2 of ``tl.exp`` keeps them with a scaling around it (``bench/sass_loops.py``: a compare, two
    multiplies and a select more per element), which a row bound by its exps pays for: a
    hand-written cross-entropy over 128256 bf16 columns runs 0.86 -> 0.96 of copy bandwidth on
    the H200 (``bench/row_variants.py``). float64 keeps ``tl.exp``."""
    if dt.compute_dtype(dtype) == dt.float64:
        return f"tl.exp({x})"
    return f"tl.exp2(({x}) * 1.4426950408889634)"


def tl_type(dtype: DType) -> str:
    """The Triton type values of ``dtype`` are computed in (float32 for float16/bfloat16)."""
    return TL[dt.compute_dtype(dtype)]


Render = Callable[[list[str], DType], str]


def _fn(name: str) -> Render:
    return lambda a, _d: f"{name}({', '.join(a)})"


def _infix(sym: str) -> Render:
    return lambda a, _d: f"({a[0]} {sym} {a[1]})"


def _by_kind(*, flt: Render, integer: Render, boolean: Render | None = None) -> Render:
    def render(a: list[str], d: DType) -> str:
        if d.is_bool and boolean is not None:
            return boolean(a, d)
        return flt(a, d) if d.is_float else integer(a, d)

    return render


def _identity_on_bool(inner: Render) -> Render:
    return lambda a, d: a[0] if d.is_bool else inner(a, d)


def _int_sign(a: list[str], d: DType) -> str:
    t = tl_type(d)
    return f"(({a[0]} > 0).to({t}) - ({a[0]} < 0).to({t}))"


def _copysign(a: list[str], d: DType) -> str:
    width = "f64" if dt.compute_dtype(d) == dt.float64 else "f32"
    return f"ln_copysign_{width}({a[0]}, {a[1]})"


def _bitnot(a: list[str], d: DType) -> str:
    if d.kind is dt.Kind.UINT:  # ~ on unsigned overflows in the interpreter; xor with all ones
        return f"({a[0]} ^ {(1 << (8 * d.itemsize)) - 1})"
    return f"(~{a[0]})"


def _isinf(a: list[str], d: DType) -> str:
    return f"(tl.abs({a[0]}) == float(\"inf\"))" if d.is_float else f"({a[0]} != {a[0]})"


# Plain-tl spellings: these run everywhere, including the interpreter.
PORTABLE: dict[Op, Render] = {
    Op.ADD: _infix("+"), Op.SUB: _infix("-"), Op.MUL: _infix("*"), Op.TRUEDIV: _infix("/"),
    Op.FLOORDIV: _by_kind(flt=_fn("ln_floordiv_float"), integer=_fn("ln_floordiv_int")),
    Op.MOD: _fn("ln_mod"),
    Op.FMOD: _infix("%"),
    Op.POW: _by_kind(flt=_fn("ln_pow_float"), integer=_fn("ln_pow_int"),
                     boolean=lambda a, _d: f"({a[0]} | ({a[1]} == 0))"),
    Op.ATAN2: _fn("ln_atan2"),
    Op.MAXIMUM: _by_kind(flt=_fn("ln_maximum"), integer=_fn("tl.maximum"), boolean=_infix("|")),
    Op.MINIMUM: _by_kind(flt=_fn("ln_minimum"), integer=_fn("tl.minimum"), boolean=_infix("&")),
    Op.COPYSIGN: _copysign,
    Op.NEG: _identity_on_bool(lambda a, _d: f"(-{a[0]})"),
    Op.ABS: _identity_on_bool(_fn("tl.abs")),
    Op.RECIPROCAL: lambda a, _d: f"(1.0 / {a[0]})",
    Op.SIGN: _by_kind(flt=_fn("ln_sign_float"), integer=_int_sign, boolean=lambda a, _d: a[0]),
    Op.EXP: _fn("tl.exp"), Op.EXP_FTZ: lambda a, d: flushing_exp(a[0], d), Op.EXP2: _fn("tl.exp2"), Op.EXPM1: _fn("ln_expm1"),
    Op.LOG: _fn("tl.log"), Op.LOG2: _fn("tl.log2"),
    Op.LOG10: lambda a, _d: f"(tl.log2({a[0]}) * 0.30102999566398120)",
    Op.LOG1P: _fn("ln_log1p"), Op.SQRT: _fn("tl.sqrt"), Op.RSQRT: _fn("tl.rsqrt"),
    Op.SIN: _fn("tl.sin"), Op.COS: _fn("tl.cos"),
    Op.TAN: lambda a, _d: f"(tl.sin({a[0]}) / tl.cos({a[0]}))",
    Op.ASIN: _fn("ln_asin"), Op.ACOS: _fn("ln_acos"), Op.ATAN: _fn("ln_atan"),
    Op.SINH: _fn("ln_sinh"), Op.COSH: _fn("ln_cosh"), Op.TANH: _fn("ln_tanh"),
    Op.ASINH: _fn("ln_asinh"), Op.ACOSH: _fn("ln_acosh"), Op.ATANH: _fn("ln_atanh"),
    Op.SIGMOID: lambda a, _d: f"(1.0 / (1.0 + tl.exp(-{a[0]})))",
    Op.ERF: _fn("tl.erf"), Op.ERFC: _fn("ln_erfc"), Op.ERFINV: _fn("ln_erfinv"),
    Op.FLOOR: _fn("tl.floor"), Op.CEIL: _fn("tl.ceil"), Op.TRUNC: _fn("ln_trunc"),
    Op.ROUND: _fn("ln_round_half_even"),
    Op.ISNAN: lambda a, _d: f"({a[0]} != {a[0]})", Op.ISINF: _isinf,
    Op.EQ: _infix("=="), Op.NE: _infix("!="), Op.LT: _infix("<"), Op.LE: _infix("<="),
    Op.GT: _infix(">"), Op.GE: _infix(">="),
    Op.AND: _infix("&"), Op.OR: _infix("|"), Op.XOR: _infix("^"),
    Op.NOT: lambda a, _d: f"({a[0]} == 0)",
    Op.BITAND: _infix("&"), Op.BITOR: _infix("|"), Op.BITXOR: _infix("^"),
    Op.BITNOT: _bitnot, Op.LSHIFT: _infix("<<"), Op.RSHIFT: _infix(">>"),
    Op.WHERE: _fn("tl.where"),
}

# GPU spellings where libdevice is more accurate (sqrt, rsqrt, pow) or has no tl equivalent.
_LIBDEVICE_FLOAT = {
    Op.EXPM1: "expm1", Op.LOG10: "log10", Op.LOG1P: "log1p", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt",
    Op.TAN: "tan", Op.ASIN: "asin", Op.ACOS: "acos", Op.ATAN: "atan", Op.ATAN2: "atan2",
    Op.SINH: "sinh", Op.COSH: "cosh", Op.TANH: "tanh", Op.ASINH: "asinh", Op.ACOSH: "acosh",
    Op.ATANH: "atanh", Op.ERFC: "erfc", Op.ERFINV: "erfinv", Op.TRUNC: "trunc",
    Op.ROUND: "nearbyint", Op.POW: "pow", Op.COPYSIGN: "copysign",
}


def render_op(op: Op, args: list[str], operand: DType, portable: bool) -> str:
    """Triton text of ``op`` on ``args`` whose (compute) dtype is ``operand``."""
    if not portable and operand.is_float and op in _LIBDEVICE_FLOAT:
        return f"libdevice.{_LIBDEVICE_FLOAT[op]}({', '.join(args)})"
    return PORTABLE[op](args, operand)


def render_fast_tanh(arg: str) -> str:
    """The GPU's ``tanh.approx.f32`` (relative error about 2^-11): only for bfloat16 results."""
    return (f'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [{arg}], '
            f'dtype=tl.float32, is_pure=True, pack=1)')


def render_const(value, dtype: DType) -> str:
    """A Triton constant of ``dtype``'s compute type (a literal where Triton types it right)."""
    cdt = dt.compute_dtype(dtype)
    if cdt.is_bool:
        return "True" if value else "False"
    if cdt.is_float:
        value = float(value)
        if cdt == dt.float32 and math.isfinite(value) and abs(value) > _F32_MAX:
            value = math.copysign(math.inf, value)
        text = repr(value) if math.isfinite(value) else f'float("{value}")'
    else:
        text = str(int(value))
    if cdt in _LITERAL_OK:
        return text if not text.startswith("-") else f"({text})"
    return f"tl.full([], {text}, {TL[cdt]})"


def render_cast(value: str, src: DType, dst: DType) -> str:
    """Convert a compute value of ``src`` to a compute value of ``dst`` (narrow floats round)."""
    if dst.is_bool:
        return value if src.is_bool else f"({value} != 0)"
    if dst.is_low_precision:
        if src == dst:
            return value
        return f"{value}.to({TL[dst]}).to(tl.float32)"
    if tl_type(src) != tl_type(dst):
        return f"{value}.to({TL[dst]})"
    return value


def storage_value(value: str, src: DType, dst: DType) -> str:
    """A compute value of ``src`` converted for a store into a buffer of ``dst``."""
    if dst.is_bool:
        return value if src.is_bool else f"({value} != 0)"
    if dst.is_low_precision or tl_type(src) != TL[dst]:
        return f"{value}.to({TL[dst]})"
    return value
