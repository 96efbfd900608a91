"""Every IR op rendered by the Triton backend, compared with eager PyTorch (interpreter on CPU)."""
import math

import pytest
import torch

import loopnest as ln
from loopnest.backends.triton import ops as triton_ops
from loopnest.dsl.functions import apply
from loopnest.ir.ops import Op
from test_triton import DEVICE, check, pytestmark, rand, run  # noqa: F401

F32 = torch.float32


def special(*shape):
    """Random values with NaN, +-inf, zeros and exact halves planted."""
    x = rand(*shape).flatten()
    x[::7] = float("nan")
    x[1::11] = float("inf")
    x[2::13] = float("-inf")
    x[3::9] = 0.0
    x[4::10] = torch.arange(x[4::10].numel(), dtype=x.dtype, device=x.device) - 2.5
    return x.reshape(shape)


def domain(kind, shape=(5, 12), dtype=F32):
    gens = {
        "any": lambda: rand(*shape, dtype=dtype),
        "wide": lambda: rand(*shape, dtype=dtype, lo=-12, hi=12),
        "pos": lambda: rand(*shape, dtype=dtype, lo=0.05, hi=9),
        "unit": lambda: rand(*shape, dtype=dtype, lo=-0.95, hi=0.95),
        "ge1": lambda: rand(*shape, dtype=dtype, lo=1.0, hi=9),
        "gtm1": lambda: rand(*shape, dtype=dtype, lo=-0.9, hi=3) * torch.tensor([1.0, 1e-6], dtype=dtype,
                                                                               device=DEVICE).repeat(6),
        "small": lambda: rand(*shape, dtype=dtype, lo=-4, hi=4) * torch.tensor([1.0, 1e-6], dtype=dtype,
                                                                              device=DEVICE).repeat(6),
        "tan": lambda: rand(*shape, dtype=dtype, lo=-1.4, hi=1.4),
        "halves": lambda: (rand(*shape, dtype=torch.float64, lo=-6, hi=6) * 2).round().to(dtype) / 2,
        "special": lambda: special(*shape).to(dtype),
        "nonzero": lambda: rand(*shape, dtype=dtype, lo=0.5, hi=4) * torch.where(
            rand(*shape) > 0, 1.0, -1.0).to(dtype),
        "ints": lambda: rand(*shape, dtype=torch.float64, lo=-3, hi=4).floor().to(dtype),
    }
    return gens[kind]()


UNARY = {
    Op.NEG: (torch.neg, "any"), Op.ABS: (torch.abs, "any"), Op.RECIPROCAL: (torch.reciprocal, "nonzero"),
    Op.SIGN: (torch.sign, "halves"), Op.EXP: (torch.exp, "any"), Op.EXP2: (torch.exp2, "any"),
    Op.EXP_FTZ: (torch.exp, "any"),  # "any" stays above -87, where it is exp
    Op.EXPM1: (torch.expm1, "small"), Op.LOG: (torch.log, "pos"), Op.LOG2: (torch.log2, "pos"),
    Op.LOG10: (torch.log10, "pos"), Op.LOG1P: (torch.log1p, "gtm1"), Op.SQRT: (torch.sqrt, "pos"),
    Op.RSQRT: (torch.rsqrt, "pos"), Op.SIN: (torch.sin, "any"), Op.COS: (torch.cos, "any"),
    Op.TAN: (torch.tan, "tan"), Op.ASIN: (torch.asin, "unit"), Op.ACOS: (torch.acos, "unit"),
    Op.ATAN: (torch.atan, "wide"), Op.SINH: (torch.sinh, "small"), Op.COSH: (torch.cosh, "any"),
    Op.TANH: (torch.tanh, "small"), Op.ASINH: (torch.asinh, "wide"), Op.ACOSH: (torch.acosh, "ge1"),
    Op.ATANH: (torch.atanh, "unit"), Op.SIGMOID: (torch.sigmoid, "wide"), Op.ERF: (torch.erf, "any"),
    Op.ERFC: (torch.erfc, "any"), Op.ERFINV: (torch.erfinv, "unit"), Op.FLOOR: (torch.floor, "special"),
    Op.CEIL: (torch.ceil, "special"), Op.TRUNC: (torch.trunc, "special"), Op.ROUND: (torch.round, "halves"),
    Op.ISNAN: (torch.isnan, "special"), Op.ISINF: (torch.isinf, "special"),
}
BINARY = {
    Op.ADD: (torch.add, "any", "any"), Op.SUB: (torch.sub, "any", "any"), Op.MUL: (torch.mul, "any", "any"),
    Op.TRUEDIV: (torch.div, "any", "nonzero"), Op.FLOORDIV: (torch.floor_divide, "wide", "nonzero"),
    Op.MOD: (torch.remainder, "wide", "nonzero"), Op.FMOD: (torch.fmod, "wide", "nonzero"),
    Op.POW: (torch.pow, "ints", "ints"), Op.ATAN2: (torch.atan2, "special", "any"),
    Op.MAXIMUM: (torch.maximum, "special", "any"), Op.MINIMUM: (torch.minimum, "special", "any"),
    Op.COPYSIGN: (torch.copysign, "any", "special"),
    Op.EQ: (torch.eq, "halves", "halves"), Op.NE: (torch.ne, "halves", "halves"),
    Op.LT: (torch.lt, "halves", "halves"), Op.LE: (torch.le, "halves", "halves"),
    Op.GT: (torch.gt, "halves", "halves"), Op.GE: (torch.ge, "halves", "halves"),
}
INTEGER = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.FLOORDIV: torch.floor_divide,
    Op.MOD: torch.remainder, Op.FMOD: torch.fmod, Op.MAXIMUM: torch.maximum, Op.MINIMUM: torch.minimum,
    Op.BITAND: torch.bitwise_and, Op.BITOR: torch.bitwise_or, Op.BITXOR: torch.bitwise_xor,
    Op.LSHIFT: torch.bitwise_left_shift, Op.RSHIFT: torch.bitwise_right_shift,
    Op.EQ: torch.eq, Op.LT: torch.lt, Op.GE: torch.ge,
}
INTEGER_UNARY = {Op.NEG: torch.neg, Op.ABS: torch.abs, Op.SIGN: torch.sign, Op.BITNOT: torch.bitwise_not}
LOGICAL = {Op.AND: torch.logical_and, Op.OR: torch.logical_or, Op.XOR: torch.logical_xor,
           Op.EQ: torch.eq, Op.NE: torch.ne, Op.MAXIMUM: torch.maximum, Op.MINIMUM: torch.minimum}


def test_every_op_has_a_rendering_and_a_test():
    assert set(triton_ops.PORTABLE) | {Op.CAST} == set(Op)  # CAST: ops.render_cast
    tested = set(UNARY) | set(BINARY) | set(INTEGER) | set(INTEGER_UNARY) | set(LOGICAL)
    tested |= {Op.NOT, Op.WHERE, Op.CAST, Op.POW}
    assert tested == set(Op)


def _compile_op(op, dtypes, shape=(5, 12)):
    return apply(op, *placeholders(dtypes, shape))


def placeholders(dtypes, shape=(5, 12)):
    return [ln.placeholder(f"a{k}", shape, d) for k, d in enumerate(dtypes)]


@pytest.mark.parametrize("op", list(UNARY), ids=lambda o: o.name)
def test_unary_float32(op):
    fn, kind = UNARY[op]
    x = domain(kind)
    check(run(_compile_op(op, [ln.float32]), x), fn(x))


@pytest.mark.parametrize("op", list(BINARY), ids=lambda o: o.name)
def test_binary_float32(op):
    fn, ka, kb = BINARY[op]
    a, b = domain(ka), domain(kb, shape=(5, 12))
    if op is Op.POW:  # negative bases with integer exponents, positive bases with fractional ones
        a = torch.cat([a[:3], domain("pos")[3:]])
        b = torch.cat([b[:3], domain("any")[3:]])
    check(run(_compile_op(op, [ln.float32, ln.float32]), a, b), fn(a, b))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64, torch.uint8])
def test_integer_ops(dtype):
    lo, hi = (0, 120) if dtype == torch.uint8 else (-120, 120)
    a = rand(5, 12, dtype=torch.float64, lo=lo, hi=hi).to(dtype)
    b = rand(5, 12, dtype=torch.float64, lo=1, hi=6).to(dtype)
    if dtype != torch.uint8:
        b = b * torch.where(rand(5, 12) > 0, 1, -1).to(dtype)
    shifts = b.abs()
    xa, xb, xs = placeholders([ln.ir.dtypes.to_dtype(dtype)] * 3)
    outs = [apply(op, xa, xs if op in (Op.LSHIFT, Op.RSHIFT) else xb) for op in INTEGER]
    outs += [apply(op, xa) for op in INTEGER_UNARY]
    results = run(outs, a, b, shifts, inputs=[xa, xb, xs], name="ints")
    for op, out in zip(list(INTEGER) + list(INTEGER_UNARY), results):
        if op in INTEGER_UNARY:
            check(out, INTEGER_UNARY[op](a))
        else:
            check(out, INTEGER[op](a, shifts if op in (Op.LSHIFT, Op.RSHIFT) else b))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8])
def test_integer_pow(dtype):
    a = rand(5, 12, dtype=torch.float64, lo=-4, hi=5).floor().to(dtype)
    b = rand(5, 12, dtype=torch.float64, lo=0, hi=6).floor().to(dtype)
    ldt = ln.ir.dtypes.to_dtype(dtype)
    check(run(_compile_op(Op.POW, [ldt, ldt]), a, b), torch.pow(a, b))


def test_logical_ops():
    a, b = rand(5, 12) > 0, rand(5, 12, lo=-2, hi=3) > 0
    xa, xb = placeholders([ln.bool, ln.bool])
    results = run([apply(op, xa, xb) for op in LOGICAL] + [apply(Op.NOT, xa)], a, b)
    for fn, out in zip(list(LOGICAL.values()) + [None], results):
        check(out, fn(a, b) if fn else torch.logical_not(a))


def test_where_and_casts():
    c = rand(5, 12) > 0
    x, y = domain("wide"), domain("any")
    i = rand(5, 12, dtype=torch.float64, lo=-100, hi=100).to(torch.int64)
    xc, xx, xy = placeholders([ln.bool, ln.float32, ln.float32])
    xi = ln.placeholder("i", (5, 12), ln.int64)
    outs = [ln.where(xc, xx, xy), ln.cast(xx, ln.int32), ln.cast(xx, ln.float16), ln.cast(xx, ln.bfloat16),
            ln.cast(xi, ln.float32), ln.cast(xx, ln.bool), ln.cast(xi, ln.bool), ln.cast(xc, ln.float32),
            ln.cast(xx, ln.float64), ln.cast(xi, ln.int8), ln.cast(ln.cast(xx, ln.float16), ln.float32) * 3,
            ln.cast(xc, ln.int32) + 1]
    refs = [torch.where(c, x, y), x.to(torch.int32), x.half(), x.bfloat16(), i.float(), x.bool(), i.bool(),
            c.float(), x.double(), i.to(torch.int8), x.half().float() * 3, c.int() + 1]
    for out, ref in zip(run(outs, c, x, y, i, name="casts"), refs):
        check(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", [Op.ADD, Op.MUL, Op.TRUEDIV, Op.EXP, Op.TANH, Op.SIGMOID, Op.MAXIMUM, Op.SQRT,
                                Op.ERF, Op.FLOORDIV], ids=lambda o: o.name)
def test_narrow_floats(op, dtype):
    ldt = ln.ir.dtypes.to_dtype(dtype)
    if op in BINARY:
        fn, ka, kb = BINARY[op]
        a, b = domain(ka, dtype=dtype), domain(kb, dtype=dtype)
        check(run(_compile_op(op, [ldt, ldt]), a, b), fn(a, b))
    else:
        fn, kind = UNARY[op]
        x = domain(kind, dtype=dtype)
        check(run(_compile_op(op, [ldt]), x), fn(x))


@pytest.mark.parametrize("op", [Op.ADD, Op.MUL, Op.EXP, Op.LOG, Op.SIN, Op.SQRT, Op.TANH, Op.EXPM1,
                                Op.FLOORDIV, Op.MOD, Op.POW, Op.ROUND], ids=lambda o: o.name)
def test_float64(op):
    tbl = BINARY.get(op) or UNARY[op]
    args = [domain(kind, dtype=torch.float64) for kind in tbl[1:]]
    if op is Op.POW:
        args[0] = args[0].abs() + 0.5
    out = run(_compile_op(op, [ln.float64] * len(args)), *args)
    check(out, tbl[0](*args))


def test_constants_keep_their_dtype():
    """Literals take their tensor's type in Triton; float64 and int8 constants must stay exact."""
    x = ln.placeholder("x", (5, 12), ln.float64)
    i = ln.placeholder("i", (5, 12), ln.int8)
    a = rand(5, 12, dtype=torch.float64)
    b = rand(5, 12, dtype=torch.float64, lo=-100, hi=100).to(torch.int8)
    out = run([x * 0.1 + 1e-300, i * 3 + 100, ln.where(x > 0, 1e-40, 2.0), ln.cast(x, ln.float32) * 1e39],
              a, b, name="consts")
    check(out[0], a * 0.1 + 1e-300, rtol=0, atol=0)
    check(out[1], b * 3 + 100)
    check(out[2], torch.where(a > 0, 1e-40, 2.0).float(), rtol=0, atol=0)
    assert math.isinf(out[3].abs().max().item())
