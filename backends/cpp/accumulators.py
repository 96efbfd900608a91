"""C++ code for each reduction op: state, initial value, update, combine of partials, result.

An accumulator is scalar (``index=""``) or one element of lane arrays (``index="[j]"``): lane
arrays let ``omp simd`` vectorize reductions with no built-in reduction clause (Welford, argmax)
and hold one accumulator per column when a kernel reduces over an outer dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.ops import ReduceOp
from ...scheduler.kernel import KReduction
from .ops import ctype

_IDENTITY = {ReduceOp.SUM: "0", ReduceOp.PROD: "1", ReduceOp.ANY: "false", ReduceOp.ALL: "true"}
_MAXLIKE = (ReduceOp.MAX, ReduceOp.ARGMAX)


def acc_type(r: KReduction) -> str:
    """The C type of the accumulator: float32 or wider for floats, int64 for integer sums."""
    if r.op in (ReduceOp.ANY, ReduceOp.ALL):
        return "bool"
    if r.op in (ReduceOp.SUM, ReduceOp.PROD) and (r.dtype.is_int or r.dtype.is_bool):
        return "int64_t"
    return ctype(r.dtype)


@dataclass
class Accumulator:
    """Names and code of one reduction's state in a C++ kernel."""

    r: KReduction
    var: str          # base name of the state variables
    index: str = ""   # "" for scalars, "[j]" for an element of lane arrays

    @property
    def op(self) -> ReduceOp:
        return self.r.op

    @property
    def ty(self) -> str:
        return acc_type(self.r)

    @property
    def is_float(self) -> bool:
        return self.r.dtype.is_float

    def parts(self) -> list[tuple[str, str, str]]:
        """(C type, name suffix, initial value) of every state variable."""
        t = self.ty
        if self.op is ReduceOp.WELFORD:
            return [(t, "_mean", "0"), (t, "_m2", "0"), (t, "_n", "0")]
        if self.op.is_arg:
            return [(t, "_val", self._extreme_start()), ("int64_t", "_idx", "-1")]
        if self.op in (ReduceOp.MAX, ReduceOp.MIN):
            nan = [("int", "_nan", "0")] if self.is_float else []  # int |: vectorizes, bool || does not
            return [(t, "", self._extreme_start())] + nan
        return [(t, "", _IDENTITY[self.op])]

    def ref(self, suffix: str = "", index: str | None = None) -> str:
        return f"{self.var}{suffix}{self.index if index is None else index}"

    def declare(self, lanes: str | None = None) -> list[str]:
        """Declarations with initial values; with ``lanes``, arrays of that many elements."""
        if lanes is None:
            return [f"{t} {self.var}{s} = {v};" for t, s, v in self.parts()]
        decls = [f"{t} {self.var}{s}[{lanes}];" for t, s, _ in self.parts()]
        inits = " ".join(f"{self.var}{s}[j] = {v};" for _, s, v in self.parts())
        return decls + [f"for (int64_t j = 0; j < {lanes}; ++j) {{ {inits} }}"]

    def _extreme_start(self) -> str:
        lim = f"std::numeric_limits<{self.ty}>"
        if self.is_float:
            return f"-{lim}::infinity()" if self.op in _MAXLIKE else f"{lim}::infinity()"
        return f"{lim}::lowest()" if self.op in _MAXLIKE else f"{lim}::max()"

    def simd_clauses(self) -> list[str] | None:
        """``reduction(...)`` clauses when a scalar update vectorizes under ``omp simd``; else None."""
        v = self.var
        simple = {ReduceOp.SUM: "+", ReduceOp.PROD: "*", ReduceOp.ANY: "||", ReduceOp.ALL: "&&"}
        if self.op in simple:
            return [f"reduction({simple[self.op]}:{v})"]
        if self.op in (ReduceOp.MAX, ReduceOp.MIN):
            kind = "max" if self.op is ReduceOp.MAX else "min"
            return [f"reduction({kind}:{v})"] + ([f"reduction(|:{v}_nan)"] if self.is_float else [])
        return None

    def update(self, value: str, position: str) -> list[str]:
        """Fold ``value`` (the element at flat reduction ``position``) into the state."""
        a, t, op = self.ref(), self.ty, self.op
        if op is ReduceOp.SUM:
            return [f"{a} += ({t})({value});"]
        if op is ReduceOp.PROD:
            return [f"{a} *= ({t})({value});"]
        if op in (ReduceOp.ANY, ReduceOp.ALL):
            return [f"{a} = {a} {'||' if op is ReduceOp.ANY else '&&'} {value};"]
        if op in (ReduceOp.MAX, ReduceOp.MIN):
            cmp = ">" if op is ReduceOp.MAX else "<"
            lines = [f"{a} = ({value}) {cmp} {a} ? ({value}) : {a};"]
            if self.is_float:
                lines.append(f"{self.ref('_nan')} |= (({value}) != ({value}));")
            return lines
        if op.is_arg:
            val, idx = self.ref("_val"), self.ref("_idx")
            cmp = ">" if op is ReduceOp.ARGMAX else "<"
            nan = f" || (({value}) != ({value}) && {val} == {val})" if self.is_float else ""
            return [f"if ({idx} < 0 || ({value}) {cmp} {val}{nan}) {{ {val} = {value}; {idx} = {position}; }}"]
        if op is ReduceOp.WELFORD:
            mean, m2, n = self.ref("_mean"), self.ref("_m2"), self.ref("_n")
            return [f"{{ {t} x_ = {value}; {n} += 1; {t} d_ = x_ - {mean}; {mean} += d_ / {n}; "
                    f"{m2} += d_ * (x_ - {mean}); }}"]
        raise NotImplementedError(op)

    def combine(self, other: "Accumulator", other_index: str | None = None) -> list[str]:
        """Fold another partial state (a thread's or a lane's) into this one."""
        def o(suffix: str = "") -> str:
            return other.ref(suffix, other_index)

        a, op = self.ref(), self.op
        if op is ReduceOp.SUM:
            return [f"{a} += {o()};"]
        if op is ReduceOp.PROD:
            return [f"{a} *= {o()};"]
        if op in (ReduceOp.ANY, ReduceOp.ALL):
            return [f"{a} = {a} {'||' if op is ReduceOp.ANY else '&&'} {o()};"]
        if op in (ReduceOp.MAX, ReduceOp.MIN):
            cmp = ">" if op is ReduceOp.MAX else "<"
            lines = [f"{a} = {o()} {cmp} {a} ? {o()} : {a};"]
            if self.is_float:
                lines.append(f"{self.ref('_nan')} |= {o('_nan')};")
            return lines
        if op.is_arg:
            return self._combine_arg(o("_val"), o("_idx"))
        if op is ReduceOp.WELFORD:
            t = self.ty
            mean, m2, n = self.ref("_mean"), self.ref("_m2"), self.ref("_n")
            return [f"if ({o('_n')} > 0) {{ {t} n_ = {n} + {o('_n')}; {t} d_ = {o('_mean')} - {mean}; "
                    f"{mean} += d_ * {o('_n')} / n_; {m2} += {o('_m2')} + d_ * d_ * {n} * {o('_n')} / n_; "
                    f"{n} = n_; }}"]
        raise NotImplementedError(op)

    def _combine_arg(self, oval: str, oidx: str) -> list[str]:
        val, idx = self.ref("_val"), self.ref("_idx")
        cmp = ">" if self.op is ReduceOp.ARGMAX else "<"
        better = f"{oval} {cmp} {val}"
        tie = f"{oval} == {val}"
        if self.is_float:
            better = f"({better} || ({oval} != {oval} && {val} == {val}))"
            tie = f"({tie} || ({oval} != {oval} && {val} != {val}))"
        return [f"if ({oidx} >= 0 && ({idx} < 0 || {better} || ({tie} && {oidx} < {idx}))) "
                f"{{ {val} = {oval}; {idx} = {oidx}; }}"]

    def finish(self) -> list[str]:
        """Statements run once the state has seen every element."""
        if self.op in (ReduceOp.MAX, ReduceOp.MIN) and self.is_float:
            return [f"if ({self.ref('_nan')}) {self.ref()} = std::numeric_limits<{self.ty}>::quiet_NaN();"]
        return []

    def result(self, output: int) -> str:
        """The expression holding output ``output`` of the reduction."""
        if self.op is ReduceOp.WELFORD:
            return self.ref("_mean") if output == 0 else self.ref("_m2")
        if self.op.is_arg:
            return self.ref("_idx")
        return self.ref()
