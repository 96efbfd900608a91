"""C++ code for each reduction op: state, initial value, update, combine of partials, result."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.ops import ReduceOp
from ...scheduler.kernel import KReduction
from .ops import ctype

_IDENTITY = {
    ReduceOp.SUM: "0", ReduceOp.PROD: "1", ReduceOp.ANY: "false", ReduceOp.ALL: "true",
}


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
    var: str  # base name of the state variables

    @property
    def op(self) -> ReduceOp:
        return self.r.op

    @property
    def ty(self) -> str:
        return acc_type(self.r)

    @property
    def is_float(self) -> bool:
        return self.r.dtype.is_float

    def state(self) -> list[tuple[str, str]]:
        """(type, name) of every state variable."""
        v, t = self.var, self.ty
        if self.op is ReduceOp.WELFORD:
            return [(t, f"{v}_mean"), (t, f"{v}_m2"), (t, f"{v}_n")]
        if self.op.is_arg:
            return [(t, f"{v}_val"), ("int64_t", f"{v}_idx")]
        if self.op in (ReduceOp.MAX, ReduceOp.MIN) and self.is_float:
            return [(t, v), ("bool", f"{v}_nan")]
        return [(t, v)]

    def init(self, prefix: str = "") -> list[str]:
        """Declarations with initial values (names get ``prefix``)."""
        v, t = prefix + self.var, self.ty
        if self.op is ReduceOp.WELFORD:
            return [f"{t} {v}_mean = 0, {v}_m2 = 0, {v}_n = 0;"]
        if self.op.is_arg:
            return [f"{t} {v}_val = {self._extreme_start()}; int64_t {v}_idx = -1;"]
        if self.op in (ReduceOp.MAX, ReduceOp.MIN):
            decl = f"{t} {v} = {self._extreme_start()};"
            return [decl + (f" bool {v}_nan = false;" if self.is_float else "")]
        return [f"{t} {v} = {_IDENTITY[self.op]};"]

    def _extreme_start(self) -> str:
        lim = f"std::numeric_limits<{self.ty}>"
        want_max = self.op in (ReduceOp.MAX, ReduceOp.ARGMAX)
        if self.is_float:
            return f"-{lim}::infinity()" if want_max else f"{lim}::infinity()"
        return f"{lim}::lowest()" if want_max else f"{lim}::max()"

    def simd_clauses(self) -> list[str] | None:
        """``reduction(...)`` clauses when the update vectorizes under ``omp simd``; else None."""
        v = self.var
        if self.op in (ReduceOp.SUM,):
            return [f"reduction(+:{v})"]
        if self.op is ReduceOp.PROD:
            return [f"reduction(*:{v})"]
        if self.op is ReduceOp.ANY:
            return [f"reduction(||:{v})"]
        if self.op is ReduceOp.ALL:
            return [f"reduction(&&:{v})"]
        if self.op in (ReduceOp.MAX, ReduceOp.MIN):
            kind = "max" if self.op is ReduceOp.MAX else "min"
            return [f"reduction({kind}:{v})"] + ([f"reduction(||:{v}_nan)"] if self.is_float else [])
        return None

    def update(self, value: str, flat_r: str) -> list[str]:
        """Fold one element ``value`` (at flat reduction position ``flat_r``) into the state."""
        v, t = self.var, self.ty
        op = self.op
        if op is ReduceOp.SUM:
            return [f"{v} += ({t})({value});"]
        if op is ReduceOp.PROD:
            return [f"{v} *= ({t})({value});"]
        if op is ReduceOp.ANY:
            return [f"{v} = {v} || {value};"]
        if op is ReduceOp.ALL:
            return [f"{v} = {v} && {value};"]
        if op in (ReduceOp.MAX, ReduceOp.MIN):
            cmp = ">" if op is ReduceOp.MAX else "<"
            lines = [f"{v} = ({value}) {cmp} {v} ? ({value}) : {v};"]
            if self.is_float:
                lines.append(f"{v}_nan = {v}_nan || (({value}) != ({value}));")
            return lines
        if op.is_arg:
            cmp = ">" if op is ReduceOp.ARGMAX else "<"
            nan = f" || (({value}) != ({value}) && {v}_val == {v}_val)" if self.is_float else ""
            return [f"if ({v}_idx < 0 || ({value}) {cmp} {v}_val{nan}) {{ {v}_val = {value}; {v}_idx = {flat_r}; }}"]
        if op is ReduceOp.WELFORD:
            return [f"{{ {t} x_ = {value}; {v}_n += 1; {t} d_ = x_ - {v}_mean; {v}_mean += d_ / {v}_n; "
                    f"{v}_m2 += d_ * (x_ - {v}_mean); }}"]
        raise NotImplementedError(op)

    def combine(self, other: str) -> list[str]:
        """Fold the partial state named ``other``+suffixes into this one (thread partials)."""
        v, o = self.var, other
        op = self.op
        if op is ReduceOp.SUM:
            return [f"{v} += {o};"]
        if op is ReduceOp.PROD:
            return [f"{v} *= {o};"]
        if op is ReduceOp.ANY:
            return [f"{v} = {v} || {o};"]
        if op is ReduceOp.ALL:
            return [f"{v} = {v} && {o};"]
        if op in (ReduceOp.MAX, ReduceOp.MIN):
            cmp = ">" if op is ReduceOp.MAX else "<"
            lines = [f"{v} = {o} {cmp} {v} ? {o} : {v};"]
            if self.is_float:
                lines.append(f"{v}_nan = {v}_nan || {o}_nan;")
            return lines
        if op.is_arg:
            cmp = ">" if op is ReduceOp.ARGMAX else "<"
            better = f"{o}_val {cmp} {v}_val"
            if self.is_float:
                better = f"({better} || ({o}_val != {o}_val && {v}_val == {v}_val))"
            tie = f"{o}_val == {v}_val" + (f" || ({o}_val != {o}_val && {v}_val != {v}_val)" if self.is_float else "")
            return [f"if ({o}_idx >= 0 && ({v}_idx < 0 || {better} || (({tie}) && {o}_idx < {v}_idx))) "
                    f"{{ {v}_val = {o}_val; {v}_idx = {o}_idx; }}"]
        if op is ReduceOp.WELFORD:
            t = self.ty
            return [f"if ({o}_n > 0) {{ {t} n_ = {v}_n + {o}_n; {t} d_ = {o}_mean - {v}_mean; "
                    f"{v}_mean += d_ * {o}_n / n_; {v}_m2 += {o}_m2 + d_ * d_ * {v}_n * {o}_n / n_; {v}_n = n_; }}"]
        raise NotImplementedError(op)

    def finish(self) -> list[str]:
        """Statements run once the state has seen every element."""
        v = self.var
        if self.op in (ReduceOp.MAX, ReduceOp.MIN) and self.is_float:
            return [f"if ({v}_nan) {v} = std::numeric_limits<{self.ty}>::quiet_NaN();"]
        return []

    def result(self, output: int) -> str:
        """The name of output ``output`` of the reduction."""
        v = self.var
        if self.op is ReduceOp.WELFORD:
            return f"{v}_mean" if output == 0 else f"{v}_m2"
        if self.op.is_arg:
            return f"{v}_idx"
        return v

