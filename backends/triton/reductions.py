"""Triton code for each reduction op, rendered from its description in ``ir/reductions.py``, on
tiles whose axis 1 is reduced. Every strategy is built from four steps:

* ``lanes``: the state of single elements of a tile (masked-off lanes hold the identity),
* ``merge``: elementwise merge of two lane states (looped kernels carry lanes across chunks),
* ``reduce``: merge all lanes along axis 1 into one state per row (``keep_dims``: ``[XBLOCK, 1]``),
* ``results``: the finished values of the reduction's outputs.

Split reductions store each row state (per program) to a workspace, and the combine stage loads
those partials as lanes and reduces them again. Float max/min propagate NaN through their own
combine (``mathlib.ln_maximum``: Triton's max ignores NaN), one reduction where a separate NaN flag
took two; argmax/argmin track NaN in a flag and pick the first index of the extreme value.

Rows are reduced with ``tl.reduce`` and Triton's own combine functions rather than ``tl.sum`` /
``tl.max``: those are ``@triton.jit`` functions fixed in whichever mode (interpreter or compiled)
was active when ``triton.language`` was first imported, while ``tl.reduce`` works in both (the
interpreter recognizes the standard combine functions and reduces with numpy). Integers narrower
than 32 bits are reduced as int32, as ``tl.max`` would.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...ir import dtypes as dt
from ...ir.reductions import Combine, Component as ReductionComponent, Init, Lift, Reduction, identity
from ...ir.nodes import KReduction
from .ops import flushing_exp, tl_type

IDX_NONE = "9223372036854775807"  # index of masked lanes: larger than any real index
_NAN = 'float("nan")'
_INF = 'float("inf")'
_SHIFT = "tl.where(tl.abs({m}) == " + _INF + ", 0.0, {m})"  # m*: m where finite, else 0 (EXP_SUM)
_COMBINE = {"sum": "tl.standard._sum_combine", "max": "tl.standard._elementwise_max",
            "min": "tl.standard._elementwise_min", "prod": "ln_prod_combine",
            "max_nan": "ln_maximum", "min_nan": "ln_minimum"}


def reduce_rows(kind: str, x: str, axis: str = "1", keep_dims: bool = True) -> str:
    """``x`` reduced along ``axis`` by ``kind``: sum, max, min, prod, or max_nan / min_nan (a NaN
    wins)."""
    return f"tl.reduce({x}, {axis}, {_COMBINE[kind]}{', keep_dims=True' if keep_dims else ''})"


# What one element contributes to a component, as a tile of the component's type ``t``.
_LIFT = {Lift.VALUE: "{v}", Lift.ISNAN: "({v} != {v}).to(tl.int32)",
         # float32's spelling; ``TritonAccumulator.lanes`` writes it through ``exp`` for every dtype
         Lift.SHIFTED_EXP: flushing_exp("{v} - " + _SHIFT.format(m="{v}")),
         Lift.POSITION: "tl.broadcast_to({rindex}.to(tl.int64), {shape})",
         Lift.ZERO: "tl.full({shape}, 0, {t})", Lift.ONE: "tl.full({shape}, 1, {t})"}
# Elementwise combines: merge of two lane states, and the reduce_rows kind (flags are 0/1: OR is max).
_COMBINE_LANES = {Combine.ADD: "{a} + {b}", Combine.MUL: "{a} * {b}", Combine.MAX: "tl.maximum({a}, {b})",
                  Combine.MIN: "tl.minimum({a}, {b})", Combine.OR: "tl.maximum({a}, {b})",
                  Combine.AND: "tl.minimum({a}, {b})"}
_COMBINE_ROWS = {Combine.ADD: "sum", Combine.MUL: "prod", Combine.MAX: "max", Combine.MIN: "min",
                 Combine.OR: "max", Combine.AND: "min"}
# Float max/min: a NaN on either side wins (the flag component of ``ir/reductions.py`` is dropped).
_NAN_LANES = {Combine.MAX: "ln_maximum({a}, {b})", Combine.MIN: "ln_minimum({a}, {b})"}  # mathlib.py
_NAN_ROWS = {Combine.MAX: "max_nan", Combine.MIN: "min_nan"}


def _held(dtype: dt.DType) -> dt.DType:
    """The dtype Triton reduces ``dtype`` in: integers narrower than 32 bits and bool as int32."""
    return dt.int32 if dtype.is_bool or (dtype.is_int and dtype.itemsize < 4) else dtype


def _identity(init: Init, dtype: dt.DType) -> str:
    if init is Init.NO_INDEX:
        return IDX_NONE
    value = identity(init, dtype)
    return f'float("{value}")' if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Component:
    """One state variable as Triton holds it: its description, dtype and initial value."""

    spec: ReductionComponent
    dtype: dt.DType
    identity: str

    @property
    def suffix(self) -> str:
        return self.spec.suffix

    @property
    def tl_type(self) -> str:
        return tl_type(self.dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype of the component in workspaces."""
        return self.dtype.torch


@dataclass
class TritonAccumulator:
    """Names and code of one reduction's state in a Triton kernel."""

    r: KReduction
    var: str

    @property
    def spec(self) -> Reduction:
        return self.r.op.spec

    @property
    def is_float(self) -> bool:
        return self.r.dtype.is_float

    def components(self) -> list[Component]:
        """The state's components, as Triton holds them: float max/min without their NaN flag,
        which their combine carries in the value (``nan_extreme``)."""
        state = self.spec.state(self.r.dtype)
        if self.nan_extreme:
            state = [c for c in state if c.lift is not Lift.ISNAN]
        held = [(c, _held(c.dtype(self.r.dtype))) for c in state]
        return [Component(c, d, _identity(c.init, d)) for c, d in held]

    @property
    def nan_extreme(self) -> bool:
        """A float max or min: its value propagates NaN through ``_NAN_LANES`` / ``_NAN_ROWS``."""
        return self.spec.joint is None and self.is_float and any(
            c.combine in _NAN_ROWS and c.lift is Lift.VALUE for c in self.spec.state(self.r.dtype))

    def _lane_combine(self, c: Component) -> str:
        return (_NAN_LANES if self.nan_extreme else _COMBINE_LANES)[c.spec.combine]

    def _row_combine(self, c: Component) -> str:
        return (_NAN_ROWS if self.nan_extreme else _COMBINE_ROWS)[c.spec.combine]

    def exp(self, x: str) -> str:
        """``e ** x`` for a softmax sum's terms and rescales: flushed below 2 ** -126, where
        each is negligible beside the sum's largest term, 1 (``ops.flushing_exp``)."""
        return flushing_exp(x, self.components()[0].dtype)

    @property
    def value_type(self) -> str:
        """The Triton type elements are converted to before they are accumulated."""
        return self.components()[0].tl_type

    def result_dtypes(self) -> list[torch.dtype]:
        """Torch dtypes of the finished outputs (workspaces of split reductions hold them)."""
        return [d.torch for d in self.spec.output_dtypes(self.r.dtype)]

    def names(self, prefix: str | None = None) -> dict[str, str]:
        """Variable name of each component (``prefix`` defaults to the accumulator's name)."""
        base = self.var if prefix is None else prefix
        return {c.suffix: base + c.suffix for c in self.components()}

    # -- looped rows: the state carried over chunks ----------------------------------------------
    @property
    def is_exp_sum(self) -> bool:
        """Whether this is a softmax statistics state (max, sum of exp at the max)."""
        return self.spec.joint is Combine.EXP_SUM

    def carry(self, names: dict[str, str], shape: str, subrows: int = 0) -> list[str]:
        """Initial state carried over a loop of ``shape`` chunks: lanes of the tile, but for EXP_SUM,
        whose max is the row's (``[XBLOCK, 1]``), or each sub-row's (``[subrows]``, one row per
        program), so that each element costs one exp. Sub-row statistics are one-dimensional:
        as ``[subrows, 1]`` Triton holds a copy of each beside every element of the thread's
        slice of the chunk, and updates every copy."""
        if self.spec.joint is Combine.EXP_SUM:
            t = self.value_type
            rows = f"[{subrows}]" if subrows else "[XBLOCK, 1]"
            return [f"{names['_max']} = tl.full({rows}, float(\"-inf\"), {t})",
                    f"{names['_sum']} = tl.full({rows if subrows else shape}, 0, {t})"]
        assert not subrows, "only softmax statistics are carried per sub-row"
        return [f"{names[c.suffix]} = tl.full({shape}, {c.identity}, {c.tl_type})" for c in self.components()]

    def fold(self, names: dict[str, str], value: str, mask: str | None, rindex: str, shape: str,
             subrows: int = 0) -> list[str]:
        """Statements folding one chunk of elements ``value`` into the carried state ``names``
        (an EXP_SUM over sub-rows sums each sub-row's terms of the chunk as it goes)."""
        if self.spec.joint is Combine.EXP_SUM:
            t, m, top = self.var + "_chunk", names["_max"], self.var + "_top"
            masked = f"tl.where({mask}, {value}, float(\"-inf\"))" if mask else value
            keep = not subrows
            shift = _SHIFT.format(m=top) if keep else f"{_SHIFT.format(m=top)}[:, None]"
            terms = self.exp(f"{t} - {shift}")
            return [f"{t} = {masked}", f"{top} = tl.maximum({m}, {reduce_rows('max', t, keep_dims=keep)})",
                    f"{names['_sum']} = {names['_sum']} * {self._alpha(m, top)} + "
                    f"{terms if keep else reduce_rows('sum', terms, keep_dims=False)}",
                    f"{m} = {top}"]
        new = self.names(self.var + "_new")
        lanes = self.lanes(value, mask, rindex, shape)
        return [f"{new[k]} = {expr}" for k, expr in lanes.items()] + self.merge(names, new)

    def block(self, value: str, mask: str | None, rindex: str, shape: str, dst: dict[str, str],
              terms: str | None = None) -> list[str]:
        """Statements reducing one block of elements ``value`` (a whole row, or a program's slice)
        into row state ``dst``: its lanes, reduced. EXP_SUM takes the block's max first, then the
        sum of ``exp(x - max*)``: one exp per element, as a looped chunk folds; ``terms`` names
        those exps and ``terms + "_shift"`` the block's ``max*``, for later phases to reuse."""
        if self.spec.joint is Combine.EXP_SUM:
            t, top = self.var + "_block", dst["_max"]
            masked = f"tl.where({mask}, {value}, float(\"-inf\"))" if mask else value
            lines = [f"{t} = {masked}", f"{top} = {reduce_rows('max', t)}"]
            if terms is None:
                return lines + [f"{dst['_sum']} = {reduce_rows('sum', self.exp(f'{t} - {_SHIFT.format(m=top)}'))}"]
            return lines + [f"{terms}_shift = {_SHIFT.format(m=top)}", f"{terms} = {self.exp(f'{t} - {terms}_shift')}",
                            f"{dst['_sum']} = {reduce_rows('sum', terms)}"]
        lanes = self.names(self.var + "_lane")
        exprs = self.lanes(value, mask, rindex, shape)
        return [f"{lanes[k]} = {expr}" for k, expr in exprs.items()] + self.reduce(lanes, dst)

    def finish(self, carried: dict[str, str], dst: dict[str, str], subrows: int = 0) -> list[str]:
        """Statements reducing the state carried over a loop into row state ``dst`` (over the
        sub-rows too, when the chunks had them)."""
        if self.spec.joint is Combine.EXP_SUM and subrows:
            m, top = carried["_max"] + "[:, None]", dst["_max"]
            rows_sum = f"{carried['_sum']}[:, None] * {self._alpha(m, top)}"
            return [f"{top} = {reduce_rows('max', m, '0')}", f"{dst['_sum']} = {reduce_rows('sum', rows_sum, '0')}"]
        if self.spec.joint is Combine.EXP_SUM:
            return [f"{dst['_max']} = {carried['_max']}", f"{dst['_sum']} = {reduce_rows('sum', carried['_sum'])}"]
        return self.reduce(carried, dst)

    # -- the four steps -------------------------------------------------------------------------
    def lanes(self, value: str, mask: str | None, rindex: str, shape: str) -> dict[str, str]:
        """Lane state of the elements ``value`` (a full tile of ``value_type``)."""
        out = {}
        for c in self.components():
            lift = c.spec.lift
            expr = self.exp(f"{value} - {_SHIFT.format(m=value)}") if lift is Lift.SHIFTED_EXP else \
                _LIFT[lift].format(v=value, rindex=rindex, shape=shape, t=c.tl_type)
            if mask is None or lift is Lift.ZERO:  # Welford's m2: 0 is its identity
                out[c.suffix] = expr
            elif lift is Lift.ONE:  # Welford's count: 0 in masked lanes, over the whole tile (a row
                # mask alone is [XBLOCK, 1]: each row then counted one element, not RBLOCK)
                out[c.suffix] = f"tl.where({mask}, {expr}, 0)"
            else:
                out[c.suffix] = f"tl.where({mask}, {expr}, {c.identity})"
        return out

    def merge(self, acc: dict[str, str], new: dict[str, str]) -> list[str]:
        """Statements folding lane state ``new`` (names) into lane state ``acc`` (names)."""
        joint = self.spec.joint
        if joint is Combine.WELFORD:
            t = self.var + "_t"
            return [f"{t}_n = {acc['_n']} + {new['_n']}",
                    f"{t}_d = {new['_mean']} - {acc['_mean']}",
                    f"{t}_w = {new['_n']} / tl.maximum({t}_n, 1.0)",
                    f"{acc['_mean']} = {acc['_mean']} + {t}_d * {t}_w",
                    f"{acc['_m2']} = {acc['_m2']} + {new['_m2']} + {t}_d * {t}_d * {acc['_n']} * {t}_w",
                    f"{acc['_n']} = {t}_n"]
        if joint is Combine.EXP_SUM:
            return self._merge_exp_sum(acc, new)
        if joint is not None:
            better = self._better(new["_val"], acc["_val"], new["_idx"], acc["_idx"])
            t = self.var + "_better"
            return [f"{t} = {better}",
                    f"{acc['_val']} = tl.where({t}, {new['_val']}, {acc['_val']})",
                    f"{acc['_idx']} = tl.where({t}, {new['_idx']}, {acc['_idx']})"]
        return [f"{acc[c.suffix]} = " + self._lane_combine(c).format(a=acc[c.suffix], b=new[c.suffix])
                for c in self.components()]

    def _merge_exp_sum(self, acc: dict[str, str], new: dict[str, str]) -> list[str]:
        m, top = acc["_max"], self.var + "_top"
        return [f"{top} = tl.maximum({m}, {new['_max']})",
                f"{acc['_sum']} = {acc['_sum']} * {self._alpha(m, top)} + {new['_sum']} * {self._alpha(new['_max'], top)}",
                f"{m} = {top}"]

    def _alpha(self, m: str, top: str) -> str:
        """exp(m* - top*), capped so that a sum of 0 (only -inf seen) stays 0 (``ir/reductions.py``)."""
        largest = torch.finfo(self.components()[0].torch_dtype).max
        return f"tl.minimum({self.exp(f'{_SHIFT.format(m=m)} - {_SHIFT.format(m=top)}')}, {largest!r})"

    def _better(self, v: str, a: str, vi: str, ai: str) -> str:
        cmp = ">" if self.spec.joint is Combine.ARGMAX else "<"
        if not self.is_float:
            return f"({v} {cmp} {a}) | (({v} == {a}) & ({vi} < {ai}))"
        return (f"({v} {cmp} {a}) | (({v} != {v}) & ({a} == {a})) | "
                f"((({v} == {a}) | (({v} != {v}) & ({a} != {a}))) & ({vi} < {ai}))")

    def reduce(self, src: dict[str, str], dst: dict[str, str], axis: str = "1", vector: bool = False) -> list[str]:
        """Statements reducing lane state ``src`` along ``axis`` (1: a row's elements; 0, for
        reductions without a joint state only: the rows) into row state ``dst``; ``vector``
        (softmax statistics only): ``src`` is one row's states as a vector, ``dst`` 0-d."""
        joint = self.spec.joint
        if vector:
            assert joint is Combine.EXP_SUM, "only softmax statistics are reduced from a vector"
            top = dst["_max"]
            scaled = f"{src['_sum']} * {self._alpha(src['_max'], top)}"
            return [f"{top} = {reduce_rows('max', src['_max'], '0', keep_dims=False)}",
                    f"{dst['_sum']} = {reduce_rows('sum', scaled, '0', keep_dims=False)}"]
        if axis != "1":
            assert joint is None, f"{self.r.op.value} has a joint state: it reduces along rows only"
            return [f"{dst[c.suffix]} = {reduce_rows(self._row_combine(c), src[c.suffix], axis)}"
                    for c in self.components()]
        if joint is Combine.WELFORD:
            mean, m2, n, dev = src["_mean"], src["_m2"], src["_n"], f"{self.var}_dev"
            return [f"{dst['_n']} = {reduce_rows('sum', n)}",
                    f"{dst['_mean']} = {reduce_rows('sum', f'{mean} * {n}')} / tl.maximum({dst['_n']}, 1.0)",
                    f"{dev} = {mean} - {dst['_mean']}",
                    f"{dst['_m2']} = {reduce_rows('sum', f'{m2} + {n} * {dev} * {dev}')}"]
        if joint is Combine.EXP_SUM:
            top = dst["_max"]
            scaled = f"{src['_sum']} * {self._alpha(src['_max'], top)}"
            return [f"{top} = {reduce_rows('max', src['_max'])}", f"{dst['_sum']} = {reduce_rows('sum', scaled)}"]
        if joint is not None:
            return self._reduce_arg(src, dst)
        return [f"{dst[c.suffix]} = {reduce_rows(self._row_combine(c), src[c.suffix])}"
                for c in self.components()]

    def _reduce_arg(self, src: dict[str, str], dst: dict[str, str]) -> list[str]:
        kind = "max" if self.spec.joint is Combine.ARGMAX else "min"
        val, idx = src["_val"], src["_idx"]
        best = f"{self.var}_best"
        lines = [f"{best} = {reduce_rows(kind, val)}"]
        if self.is_float:
            nan = f"{self.var}_anynan"
            lines += [f"{nan} = {reduce_rows('max', f'({val} != {val}).to(tl.int32)')} > 0",
                      f"{self.var}_hit = tl.where({nan}, {val} != {val}, {val} == {best})",
                      f"{dst['_val']} = tl.where({nan}, {_NAN}, {best})"]
        else:
            lines += [f"{self.var}_hit = {val} == {best}", f"{dst['_val']} = {best}"]
        first = f"tl.where({self.var}_hit, {idx}, {IDX_NONE})"
        lines.append(f"{dst['_idx']} = {reduce_rows('min', first)}")
        return lines

    def results(self, state: dict[str, str]) -> list[str]:
        """Expressions of the finished outputs, from row state ``state``: a set NaN flag makes them
        NaN, flags read as bools, narrow integers held as int32 convert back."""
        if self.spec.joint is Combine.EXP_SUM:  # a NaN element made the sum NaN
            return [f"tl.where({state['_sum']} != {state['_sum']}, {_NAN}, {state['_max']})", state["_sum"]]
        comps = {c.suffix: c for c in self.components()}
        flag = next((c.suffix for c in comps.values() if c.spec.lift is Lift.ISNAN), None)
        out = []
        for suffix, dtype in zip(self.spec.outputs, self.spec.output_dtypes(self.r.dtype)):
            value = state[suffix]
            if flag is not None:
                value = f"tl.where({state[flag]} > 0, {_NAN}, {value})"
            elif dtype.is_bool:
                value = f"({value} != 0)"
            elif tl_type(dtype) != comps[suffix].tl_type:
                value = f"{value}.to({tl_type(dtype)})"
            out.append(value)
        return out
