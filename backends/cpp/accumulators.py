"""C++ code for each reduction op, rendered from its description in ``ir/reductions.py``.

An accumulator is scalar (``index=""``) or one element of lane arrays (``index="[j]"``): lane
arrays let ``omp simd`` vectorize reductions with no built-in reduction clause (Welford, argmax)
and hold one accumulator per column when a kernel reduces over an outer dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.reductions import Combine, Component, Init, Lift, Reduction, Rule
from ...ir.nodes import KReduction
from .ops import ctype

# Elementwise combines: (fold one element x into a, merge a partial x into a, omp simd clause).
_COMBINE = {
    Combine.ADD: ("{a} += ({t})({x});", "{a} += {x};", "+"),
    Combine.MUL: ("{a} *= ({t})({x});", "{a} *= {x};", "*"),
    Combine.MAX: ("{a} = ({x}) > {a} ? ({x}) : {a};", "{a} = {x} > {a} ? {x} : {a};", "max"),
    Combine.MIN: ("{a} = ({x}) < {a} ? ({x}) : {a};", "{a} = {x} < {a} ? {x} : {a};", "min"),
    Combine.OR: ("{a} |= {x};", "{a} |= {x};", "|"),
    Combine.AND: ("{a} &= {x};", "{a} &= {x};", "&"),
}
_LIFT = {Lift.VALUE: "{v}", Lift.ISNAN: "(({v}) != ({v}))"}


def _init(init: Init, t: str, is_float: bool) -> str:
    lim = f"std::numeric_limits<{t}>"
    if init is Init.LOWEST:
        return f"-{lim}::infinity()" if is_float else f"{lim}::lowest()"
    if init is Init.HIGHEST:
        return f"{lim}::infinity()" if is_float else f"{lim}::max()"
    return "-1" if init is Init.NO_INDEX else init.value  # index -1: nothing seen yet


@dataclass
class Accumulator:
    """Names and code of one reduction's state in a C++ kernel."""

    r: KReduction
    var: str          # base name of the state variables
    index: str = ""   # "" for scalars, "[j]" for an element of lane arrays
    wide: bool = False  # float32 sums and products in double (reductions across rows: one sequential
                        # sum per column and thread, where a row's sum has a vector of partials)

    @property
    def spec(self) -> Reduction:
        return self.r.op.spec

    @property
    def is_float(self) -> bool:
        return self.r.dtype.is_float

    def state(self) -> tuple[Component, ...]:
        return self.spec.state(self.r.dtype)

    def ctype(self, c: Component) -> str:
        """The C type of a component (flags are ints: ``|`` and ``&`` on ints vectorize)."""
        if c.rule is Rule.FLAG:
            return "int"
        t = ctype(c.dtype(self.r.dtype))
        return "double" if self.wide and t == "float" and c.combine in (Combine.ADD, Combine.MUL) else t

    @property
    def ty(self) -> str:
        """The C type of the component elements fold into."""
        return self.ctype(self.state()[0])

    def parts(self) -> list[tuple[str, str, str]]:
        """(C type, name suffix, initial value) of every state variable."""
        return [(self.ctype(c), c.suffix, _init(c.init, self.ctype(c), c.dtype(self.r.dtype).is_float))
                for c in self.state()]

    def ref(self, suffix: str = "", index: str | None = None) -> str:
        return f"{self.var}{suffix}{self.index if index is None else index}"

    def declare(self, lanes: str | None = None) -> list[str]:
        """Declarations with initial values; with ``lanes``, arrays of that many elements."""
        if lanes is None:
            return [f"{t} {self.var}{s} = {v};" for t, s, v in self.parts()]
        decls = [f"{t} {self.var}{s}[{lanes}];" for t, s, _ in self.parts()]
        inits = " ".join(f"{self.var}{s}[j] = {v};" for _, s, v in self.parts())
        return decls + [f"for (int64_t j = 0; j < {lanes}; ++j) {{ {inits} }}"]

    def simd_clauses(self) -> list[str] | None:
        """``reduction(...)`` clauses when a scalar update vectorizes under ``omp simd``; else None."""
        if self.spec.joint:
            return None
        return [f"reduction({_COMBINE[c.combine][2]}:{self.var}{c.suffix})" for c in self.state()]

    def update(self, value: str, position: str, count: str | None = None) -> list[str]:
        """Fold ``value`` (the element at flat reduction ``position``) into the state. ``count``:
        how many elements the state holds with this one, when that is the same for every lane of
        the vectorized loop (Welford's mean then multiplies by one reciprocal per loop instead of
        dividing per element)."""
        joint, t = self.spec.joint, self.ty
        if joint is None:
            return [_COMBINE[c.combine][0].format(a=self.ref(c.suffix), t=self.ctype(c),
                                                  x=_LIFT[c.lift].format(v=value)) for c in self.state()]
        if joint in (Combine.ARGMAX, Combine.ARGMIN):
            val, idx = self.ref("_val"), self.ref("_idx")
            cmp = ">" if joint is Combine.ARGMAX else "<"
            nan = f" || (({value}) != ({value}) && {val} == {val})" if self.is_float else ""
            return [f"if ({idx} < 0 || ({value}) {cmp} {val}{nan}) {{ {val} = {value}; {idx} = {position}; }}"]
        if joint is Combine.EXP_SUM:
            return self._fold_exp_sum(value, f"std::exp(x_ - {self._shifted('hi_')})")
        mean, m2, n = self.ref("_mean"), self.ref("_m2"), self.ref("_n")
        step = f"d_ / {n}" if count is None else f"d_ * (({t})1 / ({t})({count}))"
        return [f"{{ {t} x_ = {value}; {n} += 1; {t} d_ = x_ - {mean}; {mean} += {step}; "
                f"{m2} += d_ * (x_ - {mean}); }}"]

    def combine(self, other: "Accumulator", other_index: str | None = None) -> list[str]:
        """Fold another partial state (a thread's or a lane's) into this one."""
        def o(suffix: str = "") -> str:
            return other.ref(suffix, other_index)

        joint = self.spec.joint
        if joint is None:
            return [_COMBINE[c.combine][1].format(a=self.ref(c.suffix), x=o(c.suffix)) for c in self.state()]
        if joint in (Combine.ARGMAX, Combine.ARGMIN):
            return self._combine_arg(o("_val"), o("_idx"))
        if joint is Combine.EXP_SUM:
            return self._fold_exp_sum(o("_max"), self._scaled(o("_sum"), "x_", "hi_"))
        t = self.ty
        mean, m2, n = self.ref("_mean"), self.ref("_m2"), self.ref("_n")
        return [f"if ({o('_n')} > 0) {{ {t} n_ = {n} + {o('_n')}; {t} d_ = {o('_mean')} - {mean}; "
                f"{mean} += d_ * {o('_n')} / n_; {m2} += {o('_m2')} + d_ * d_ * {n} * {o('_n')} / n_; "
                f"{n} = n_; }}"]

    def _shifted(self, m: str) -> str:
        """``m*``: ``m`` where finite, else 0 (the shift the sum of an EXP_SUM state is taken at)."""
        return f"(std::isinf({m}) ? ({self.ty})0 : {m})"

    def _scaled(self, s: str, m: str, top: str) -> str:
        """The sum ``s`` taken at ``m*`` rescaled to ``top*``, the factor capped at the largest finite
        value so that a sum of 0 (only -inf seen) stays 0."""
        t = self.ty
        return (f"{s} * std::min(std::exp({self._shifted(m)} - {self._shifted(top)}), "
                f"std::numeric_limits<{t}>::max())")

    def _fold_exp_sum(self, omax: str, osum: str) -> list[str]:
        """Merge in the (max, sum) pair ``omax``/``osum`` (``osum`` may read ``x_``, the other max,
        and ``hi_``, the larger of the two)."""
        t, m, s = self.ty, self.ref("_max"), self.ref("_sum")
        return [f"{{ {t} x_ = {omax}; {t} hi_ = x_ > {m} ? x_ : {m}; "
                f"{s} = {self._scaled(s, m, 'hi_')} + {osum}; {m} = hi_; }}"]

    def _combine_arg(self, oval: str, oidx: str) -> list[str]:
        val, idx = self.ref("_val"), self.ref("_idx")
        cmp = ">" if self.spec.joint is Combine.ARGMAX else "<"
        better = f"{oval} {cmp} {val}"
        tie = f"{oval} == {val}"
        if self.is_float:
            better = f"({better} || ({oval} != {oval} && {val} == {val}))"
            tie = f"({tie} || ({oval} != {oval} && {val} != {val}))"
        return [f"if ({oidx} >= 0 && ({idx} < 0 || {better} || ({tie} && {oidx} < {idx}))) "
                f"{{ {val} = {oval}; {idx} = {oidx}; }}"]

    def finish(self) -> list[str]:
        """Statements run once the state has seen every element: a set NaN flag makes outputs NaN
        (an EXP_SUM's max reads NaN where its sum is)."""
        if self.spec.joint is Combine.EXP_SUM:
            m, s = self.ref("_max"), self.ref("_sum")
            return [f"if ({s} != {s}) {m} = {s};"]
        flags = [c for c in self.state() if c.lift is Lift.ISNAN]
        return [f"if ({self.ref(f.suffix)}) {self.ref(s)} = std::numeric_limits<{self.ty}>::quiet_NaN();"
                for f in flags for s in self.spec.outputs]

    def result(self, output: int) -> str:
        """The expression holding output ``output`` of the reduction (flags read as bools)."""
        c = self.spec.component(self.spec.outputs[output])
        return f"({self.ref(c.suffix)} != 0)" if c.rule is Rule.FLAG else self.ref(c.suffix)
