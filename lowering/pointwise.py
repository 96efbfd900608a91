"""Elementwise ATen ops: families from small tables (aten op -> IR op), then the compound ones.

Type promotion is read from the traced graph: arithmetic computes in the node's output dtype,
comparisons in ``torch.result_type`` of their operands, so the lowering agrees with eager PyTorch
by construction (integer -> float for ``exp``, tensor-scalar category rules, 0-d tensors).
"""
from __future__ import annotations

import math

import torch

from ..dsl import functions as dslf
from ..dsl.tensor import ExternSrc, GatherSrc, PlaceholderSrc, Tensor, ViewSrc
from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index
from ..ir.ops import PREDICATES, Op
from . import tensors as T
from .registry import LoweringContext, Unsupported, register_family, register_lowering

aten = torch.ops.aten
prims = torch.ops.prims


def operand(value, dtype: DType | None = None):
    """A rule argument as an ``apply`` operand: tensors cast to ``dtype``, SymInts as 0-d tensors."""
    if isinstance(value, Tensor):
        return value if dtype is None else T.cast(value, dtype)
    if isinstance(value, Index):
        t = T.size_value(value)
        return t if dtype is None else T.cast(t, dtype)
    if isinstance(value, (bool, int, float)):
        if dtype is not None and dtype.is_bool:
            return bool(value)
        if dtype is not None and dtype.is_int and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Unsupported(f"symbolic scalar operand {value}")
    raise Unsupported(f"operand of type {type(value).__name__}")


def compute(ctx: LoweringContext, op: Op, args, dtype: DType) -> Tensor:
    """``op`` over ``args`` computed in ``dtype`` (every tensor operand cast to it)."""
    ops = aligned(ctx, [operand(a, dtype) for a in args])
    if not any(isinstance(a, Tensor) for a in ops):
        ops[0] = T.full((), ops[0], dtype)
    return dslf.apply(op, *ops)


def aligned(ctx: LoweringContext, ops: list) -> list:
    """Operands whose symbolic sizes differ from the traced output's only in form (``(s+1)//2`` vs
    ``s//2``, equal under Dynamo's guards) re-labelled with the output's sizes, so they broadcast."""
    out = ctx.out_shape() if isinstance(ctx.val, torch.Tensor) else None
    if out is None:
        return ops
    return [T.relabel(a, out) if isinstance(a, Tensor) else a for a in ops]


def compare_dtype(ctx: LoweringContext, n: int = 2) -> DType:
    """The dtype PyTorch compares operands ``0..n-1`` of the node in."""
    vals = [ctx.arg_val(k) for k in range(n)]
    if n == 1:
        return dt.to_dtype(vals[0].dtype)
    return dt.to_dtype(torch.result_type(*[_SYM_EXAMPLES.get(type(v), v) for v in vals]))


_SYM_EXAMPLES = {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}  # what result_type takes


# -- families -------------------------------------------------------------------------------------
def _arith(op: Op):
    """Compute in the output dtype (covers int->float ops like exp and true division)."""

    def rule(ctx, *args):
        out = ctx.out_dtype()
        if out.is_bool and op in _BOOL_AS:
            return compute(ctx, _BOOL_AS[op], args, out)
        return compute(ctx, op, args, out)

    return rule


_BOOL_AS = {Op.BITAND: Op.AND, Op.BITOR: Op.OR, Op.BITXOR: Op.XOR, Op.BITNOT: Op.NOT,
            Op.ADD: Op.OR, Op.MUL: Op.AND, Op.MAXIMUM: Op.OR, Op.MINIMUM: Op.AND}


def _compare(op: Op):
    def rule(ctx, a, b):
        dtype = compare_dtype(ctx)
        if dtype.is_low_precision:
            a, b = (_rounded(v, dtype) for v in (a, b))
        return compute(ctx, op, (a, b), dtype)

    return rule


def _rounded(value, dtype: DType):
    """A 16-bit float ``value`` rounded to ``dtype`` where it was computed (kernels compute 16-bit
    values and reductions of them in float32 and round them where they are stored), so that a
    comparison sees what eager compares: ``x == amin(x)`` in an amin's backward must hold where
    it held in the forward, or the gradient's tie count is 0 and the gradient NaN."""
    if not isinstance(value, Tensor) or value.dtype != dtype or _held_in_memory(value):
        return value
    return dslf.cast(dslf.cast(value, dt.compute_dtype(dtype)), dtype)


def _held_in_memory(value: Tensor) -> bool:
    """Whether ``value`` reads a graph input or an extern's result through views and gathers
    alone: such values are already in their dtype (a reduction's or a pointwise op's result, used
    in the kernel that computes it, is not)."""
    src = value.src
    while isinstance(src, (ViewSrc, GatherSrc)):
        src = src.base.src
    return isinstance(src, (PlaceholderSrc, ExternSrc))


def _logical(op: Op):
    def rule(ctx, *args):
        return compute(ctx, op, args, dt.bool_)

    return rule


def _on_floats(op: Op):
    """isnan/isinf or rounding: of non-float inputs all False or a copy."""
    def rule(ctx, x):
        if x.dtype.is_float:
            return dslf.apply(op, x)
        return T.full(x.shape, False, dt.bool_) if op in PREDICATES else T.copy(x)

    return rule


def _overloads(*rows) -> dict:
    """``aten.<name>.<overload> -> op`` for every row ``(op, name, overload, ...)``."""
    return {getattr(getattr(aten, name), o): op for op, name, *overloads in rows for o in overloads}


UNARY = _overloads(*((op, op.name.lower(), "default") for op in (
    Op.ABS, Op.NEG, Op.RECIPROCAL, Op.SIGN, Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P,
    Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH,
    Op.ACOSH, Op.ATANH, Op.SIGMOID, Op.ERF, Op.ERFC, Op.ERFINV)), (Op.SIGN, "sgn", "default"),
    (Op.BITNOT, "bitwise_not", "default"))
BINARY = _overloads(
    (Op.MUL, "mul", "Tensor", "Scalar"), (Op.TRUEDIV, "div", "Tensor", "Scalar"),
    (Op.TRUEDIV, "true_divide", "Tensor", "Scalar"), (Op.MUL, "multiply", "Tensor", "Scalar"),
    (Op.MOD, "remainder", "Tensor", "Scalar", "Scalar_Tensor"), (Op.FMOD, "fmod", "Tensor", "Scalar"),
    (Op.POW, "pow", "Tensor_Tensor", "Tensor_Scalar", "Scalar"), (Op.ATAN2, "atan2", "default"),
    (Op.MAXIMUM, "maximum", "default"), (Op.MINIMUM, "minimum", "default"),
    (Op.COPYSIGN, "copysign", "Tensor", "Scalar"), (Op.FLOORDIV, "floor_divide", "default", "Scalar"),
    (Op.BITAND, "bitwise_and", "Tensor", "Scalar", "Scalar_Tensor"),
    (Op.BITOR, "bitwise_or", "Tensor", "Scalar", "Scalar_Tensor"),
    (Op.BITXOR, "bitwise_xor", "Tensor", "Scalar", "Scalar_Tensor"),
    (Op.LSHIFT, "bitwise_left_shift", "Tensor", "Tensor_Scalar", "Scalar_Tensor"),
    (Op.LSHIFT, "__lshift__", "Scalar", "Tensor"),
    (Op.RSHIFT, "bitwise_right_shift", "Tensor", "Tensor_Scalar", "Scalar_Tensor"),
    (Op.RSHIFT, "__rshift__", "Scalar", "Tensor"))
COMPARE = _overloads(*((op, op.name.lower(), "Tensor", "Scalar") for op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)))
LOGICAL = _overloads(*((op, f"logical_{op.name.lower()}", "default") for op in (Op.AND, Op.OR, Op.XOR, Op.NOT)))
FLOAT_PREDICATES = _overloads((Op.ISNAN, "isnan", "default"), (Op.ISINF, "isinf", "default"))
ROUNDING = _overloads(*((op, op.name.lower(), "default") for op in (Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND)))

register_family(UNARY, _arith)
register_family(BINARY, _arith)
register_family(COMPARE, _compare)
register_family(LOGICAL, _logical)
register_family({**FLOAT_PREDICATES, **ROUNDING}, _on_floats)


# -- arithmetic with extra arguments ------------------------------------------------------------
def _scaled(ctx, b, alpha, dtype: DType):
    if alpha is None or alpha == 1:
        return b
    return compute(ctx, Op.MUL, (b, alpha), dtype)


def _add_sub(op: Op, reflected: bool = False):
    """``a + alpha * b``, ``a - alpha * b``, or ``b - alpha * a`` (rsub); bool addition is ``or``."""
    def rule(ctx, a, b, alpha=1):
        out = ctx.out_dtype()
        if out.is_bool and op is Op.ADD:
            return compute(ctx, Op.OR, (a, b), out)
        if reflected:
            a, b = b, a
        return compute(ctx, op, (a, _scaled(ctx, operand(b, out), alpha, out)), out)

    return rule


register_family({aten.add.Tensor: Op.ADD, aten.add.Scalar: Op.ADD, aten.sub.Tensor: Op.SUB,
                 aten.sub.Scalar: Op.SUB}, _add_sub)
register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)(_add_sub(Op.SUB, reflected=True))


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, a, b, rounding_mode=None):
    out = ctx.out_dtype()
    if rounding_mode is None:
        return compute(ctx, Op.TRUEDIV, (a, b), out)
    if rounding_mode == "floor":
        return compute(ctx, Op.FLOORDIV, (a, b), out)
    if out.is_float:
        return dslf.apply(Op.TRUNC, compute(ctx, Op.TRUEDIV, (a, b), out))
    # integer division toward zero: floor, plus one where the signs differ and b does not divide a
    q = compute(ctx, Op.FLOORDIV, (a, b), out)
    r = compute(ctx, Op.MOD, (a, b), out)
    signs_differ = dslf.apply(Op.NE, compute(ctx, Op.LT, (a, 0), out), compute(ctx, Op.LT, (b, 0), out))
    fix = dslf.apply(Op.AND, dslf.apply(Op.NE, r, 0), signs_differ)
    return dslf.where(fix, dslf.apply(Op.ADD, q, 1), q)


@register_lowering(aten.round.decimals)
def _round_decimals(ctx, x, decimals=0):
    scale = 10.0 ** decimals
    if decimals >= 0:
        return dslf.apply(Op.TRUEDIV, dslf.apply(Op.ROUND, dslf.apply(Op.MUL, x, scale)), scale)
    inv = 10.0 ** -decimals
    return dslf.apply(Op.MUL, dslf.apply(Op.ROUND, dslf.apply(Op.TRUEDIV, x, inv)), inv)


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, cond, a, b):
    out = ctx.out_dtype()
    c, x, y = aligned(ctx, [operand(cond, dt.bool_), operand(a, out), operand(b, out)])
    if not any(isinstance(v, Tensor) for v in (c, x, y)):
        c = T.full((), c, dt.bool_)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        x = T.full((), x, out)
    return T.cast(dslf.where(c, x, y), out)


def _clamp(ctx, x, lo=None, hi=None):
    out = ctx.out_dtype()
    y = operand(x, out)
    if lo is not None:
        y = compute(ctx, Op.MAXIMUM, (y, lo), out)
    if hi is not None:
        y = compute(ctx, Op.MINIMUM, (y, hi), out)
    return y if y is not x else T.copy(y)


register_lowering(aten.clamp.default, aten.clamp.Tensor)(_clamp)
register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda ctx, x, lo: _clamp(ctx, x, lo, None))
register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda ctx, x, hi: _clamp(ctx, x, None, hi))
register_lowering(aten.hardtanh.default)(lambda ctx, x, lo=-1.0, hi=1.0: _clamp(ctx, x, lo, hi))


@register_lowering(aten.relu.default)
def _relu(ctx, x):
    return dslf.maximum(x, T.full((), False if x.dtype.is_bool else 0, x.dtype))


def _nan_ignoring(op: Op):
    """fmax/fmin: the non-NaN operand when exactly one is NaN."""

    def rule(ctx, a, b):
        out = ctx.out_dtype()
        x, y = operand(a, out), operand(b, out)
        m = compute(ctx, op, (x, y), out)
        if not out.is_float:
            return m
        return dslf.where(dslf.apply(Op.ISNAN, x), y, dslf.where(dslf.apply(Op.ISNAN, y), x, m))

    return rule


register_lowering(aten.fmax.default)(_nan_ignoring(Op.MAXIMUM))
register_lowering(aten.fmin.default)(_nan_ignoring(Op.MINIMUM))


@register_lowering(aten.hypot.default)
def _hypot(ctx, a, b):
    out = ctx.out_dtype()
    x, y = dslf.apply(Op.ABS, operand(a, out)), dslf.apply(Op.ABS, operand(b, out))
    hi, lo = dslf.maximum(x, y), dslf.minimum(x, y)
    ratio = dslf.where(dslf.apply(Op.EQ, hi, 0.0), 0.0, dslf.apply(Op.TRUEDIV, lo, hi))
    r = dslf.apply(Op.MUL, hi, dslf.sqrt(dslf.apply(Op.ADD, dslf.apply(Op.MUL, ratio, ratio), 1.0)))
    return dslf.where(dslf.apply(Op.ISINF, x) | dslf.apply(Op.ISINF, y), math.inf, r)


@register_lowering(aten.signbit.default)
def _signbit(ctx, x):
    if x.dtype.is_bool:
        return T.full(x.shape, False, dt.bool_)
    if not x.dtype.is_float:
        return dslf.apply(Op.LT, x, 0)
    return dslf.apply(Op.LT, dslf.apply(Op.COPYSIGN, T.full((), 1.0, x.dtype), x), 0.0)


@register_lowering(aten.angle.default)
def _angle(ctx, x):
    """Real input: pi below zero, 0 elsewhere, NaN for NaN."""
    out = ctx.out_dtype()
    y = T.cast(x, out)
    angle = dslf.where(dslf.apply(Op.LT, y, 0.0), math.pi, T.full((), 0.0, out))
    return dslf.where(dslf.apply(Op.ISNAN, y), y, angle) if out.is_float else angle


@register_lowering(aten.heaviside.default)
def _heaviside(ctx, x, values):
    out = ctx.out_dtype()
    x, v = operand(x, out), operand(values, out)
    one, zero = T.full((), 1, out), T.full((), 0, out)
    return dslf.where(dslf.apply(Op.EQ, x, 0), v, dslf.where(dslf.apply(Op.GT, x, 0), one, zero))


# -- conversions and copies ---------------------------------------------------------------------
@register_lowering(aten._to_copy.default)
def _to_copy(ctx, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if device is not None and torch.device(device).type != ctx.arg_val(0).device.type:
        raise Unsupported(f"device transfer to {device}")
    return T.copy(T.cast(x, ctx.out_dtype()))


@register_lowering(prims.convert_element_type.default)
def _convert(ctx, x, dtype):
    return T.copy(T.cast(x, dt.to_dtype(dtype)))


@register_lowering(aten.clone.default, aten.lift_fresh_copy.default)
def _clone(ctx, x, memory_format=None):
    return T.copy(x)


@register_lowering(aten.copy.default)
def _copy(ctx, dst, src, non_blocking=False):
    """Functional ``dst.copy_(src)``: ``src`` broadcast to ``dst``'s shape in ``dst``'s dtype."""
    if not isinstance(src, Tensor):
        return T.full(dst.shape, src, dst.dtype)
    return T.copy(T.expand(T.cast(src, dst.dtype), dst.shape))


@register_lowering(aten.alias.default, aten.detach.default, aten.lift_fresh.default)
def _alias(ctx, x):
    return x


@register_lowering(aten.fill.Scalar, aten.fill.Tensor)
def _fill(ctx, x, value):
    out = ctx.out_dtype()
    if isinstance(value, Tensor):
        return T.expand(T.cast(value, out), x.shape)
    return T.full(x.shape, value, out)
