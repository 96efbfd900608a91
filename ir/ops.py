"""The scalar op set of the IR: every op declared once, with its exact semantics.

Both backends render exactly this set (``backends/cpp/ops.py``, ``backends/triton/ops.py``) and the
NumPy reference interpreter (``ir/interpret.py``) evaluates it; a test checks that each covers
every op. Semantics follow PyTorch eager wherever the two could differ.
"""
from __future__ import annotations

from enum import Enum

from .reductions import ReduceOp  # noqa: F401 - declared with its semantics in ir/reductions.py


class Op(Enum):
    """Scalar ops. The value is (arity, doc)."""

    # arithmetic
    ADD = (2, "a + b")
    SUB = (2, "a - b")
    MUL = (2, "a * b")
    TRUEDIV = (2, "a / b, in floating point")
    FLOORDIV = (2, "floor(a / b): rounds toward -inf, like torch.floor_divide")
    MOD = (2, "a - floor(a/b)*b: sign of b, like torch.remainder / Python %")
    FMOD = (2, "a - trunc(a/b)*b: sign of a, like torch.fmod / C fmod")
    POW = (2, "a ** b")
    ATAN2 = (2, "atan2(a, b)")
    MAXIMUM = (2, "max(a, b); NaN if either is NaN (torch.maximum)")
    MINIMUM = (2, "min(a, b); NaN if either is NaN (torch.minimum)")
    COPYSIGN = (2, "|a| with the sign of b")
    NEG = (1, "-a")
    ABS = (1, "|a|")
    RECIPROCAL = (1, "1 / a")
    SIGN = (1, "-1, 0 or 1; 0 for 0 and for NaN, like torch.sign")
    # transcendental
    EXP = (1, "e ** a")
    EXP_FTZ = (1, "e ** a where a >= -87; where a < -87 (e ** a < 2 ** -125), e ** a or 0, as the backend "
                  "finds fastest. The terms of a softmax sum, exp(x - max(x)), whose sum is at least 1 "
                  "(scheduler/online_softmax.flush_exp_terms); never makes a subnormal float")
    EXP2 = (1, "2 ** a")
    EXPM1 = (1, "e ** a - 1, accurate near 0")
    LOG = (1, "natural log")
    LOG2 = (1, "log base 2")
    LOG10 = (1, "log base 10")
    LOG1P = (1, "log(1 + a), accurate near 0")
    SQRT = (1, "square root")
    RSQRT = (1, "1 / sqrt(a)")
    SIN = (1, "sine")
    COS = (1, "cosine")
    TAN = (1, "tangent")
    ASIN = (1, "arc sine")
    ACOS = (1, "arc cosine")
    ATAN = (1, "arc tangent")
    SINH = (1, "hyperbolic sine")
    COSH = (1, "hyperbolic cosine")
    TANH = (1, "hyperbolic tangent")
    ASINH = (1, "inverse hyperbolic sine")
    ACOSH = (1, "inverse hyperbolic cosine")
    ATANH = (1, "inverse hyperbolic tangent")
    SIGMOID = (1, "1 / (1 + e ** -a)")
    ERF = (1, "error function")
    ERFC = (1, "1 - erf(a)")
    ERFINV = (1, "inverse error function")
    # rounding
    FLOOR = (1, "round toward -inf")
    CEIL = (1, "round toward +inf")
    TRUNC = (1, "round toward 0")
    ROUND = (1, "round half to even (torch.round)")
    # predicates
    ISNAN = (1, "a != a")
    ISINF = (1, "|a| == inf")
    EQ = (2, "a == b")
    NE = (2, "a != b")
    LT = (2, "a < b")
    LE = (2, "a <= b")
    GT = (2, "a > b")
    GE = (2, "a >= b")
    # logical (bool operands)
    AND = (2, "a and b")
    OR = (2, "a or b")
    XOR = (2, "a != b on bools")
    NOT = (1, "not a")
    # bitwise (integer operands)
    BITAND = (2, "a & b")
    BITOR = (2, "a | b")
    BITXOR = (2, "a ^ b")
    BITNOT = (1, "~a")
    LSHIFT = (2, "a << b")
    RSHIFT = (2, "a >> b (arithmetic for signed)")
    # selection and conversion
    WHERE = (3, "a ? b : c")
    CAST = (1, "convert to the node's dtype (float->int truncates; ->bool is a != 0)")

    @property
    def arity(self) -> int:
        return self.value[0]

    @property
    def doc(self) -> str:
        return self.value[1]


COMPARISONS = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})
PREDICATES = COMPARISONS | {Op.ISNAN, Op.ISINF}
LOGICAL = frozenset({Op.AND, Op.OR, Op.XOR, Op.NOT})
BITWISE = frozenset({Op.BITAND, Op.BITOR, Op.BITXOR, Op.BITNOT, Op.LSHIFT, Op.RSHIFT})
# Ops that are only defined on floating point; integer inputs are promoted to float first.
FLOAT_ONLY = frozenset({
    Op.TRUEDIV, Op.ATAN2, Op.EXP, Op.EXP_FTZ, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P,
    Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH,
    Op.ASINH, Op.ACOSH, Op.ATANH, Op.SIGMOID, Op.ERF, Op.ERFC, Op.ERFINV, Op.RECIPROCAL,
})
INT_ONLY = BITWISE
# Ops that cost a library call or a long polynomial each (not a single instruction).
TRANSCENDENTAL = frozenset({
    Op.POW, Op.ATAN2, Op.EXP, Op.EXP_FTZ, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SIN,
    Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH,
    Op.SIGMOID, Op.ERF, Op.ERFC, Op.ERFINV,
})
