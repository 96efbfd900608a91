"""Triton code for each reduction op, on tiles whose axis 1 is reduced.

A reduction's state is a few named components (``acc0`` for a sum; ``acc0_val``/``acc0_idx`` for
argmax; ``acc0_mean``/``acc0_m2``/``acc0_n`` for Welford). Every strategy is built from four steps:

* ``lanes``: the state of single elements of a tile (masked-off lanes hold the identity),
* ``merge``: elementwise merge of two lane states (looped kernels carry lanes across chunks),
* ``reduce``: merge all lanes along axis 1 into one state per row (``keep_dims``: ``[XBLOCK, 1]``),
* ``results``: the finished values of the reduction's outputs.

Split reductions store each row state (per program) to a workspace, and the combine stage loads
those partials as lanes and reduces them again. NaN is tracked in a flag for float max/min and
argmax/argmin (Triton's max ignores NaN); argmax/argmin pick the first index of the extreme value.

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
from ...ir.ops import ReduceOp
from ...scheduler.kernel import KReduction
from .ops import TL, tl_type

IDX_NONE = "9223372036854775807"  # index of masked lanes: larger than any real index
_NAN = 'float("nan")'
_COMBINE = {"sum": "tl.standard._sum_combine", "max": "tl.standard._elementwise_max",
            "min": "tl.standard._elementwise_min", "prod": "ln_prod_combine"}


def reduce_rows(kind: str, x: str, axis: str = "1") -> str:
    """``x`` reduced along ``axis`` (``keep_dims``) by ``kind``: sum, max, min or prod."""
    return f"tl.reduce({x}, {axis}, {_COMBINE[kind]}, keep_dims=True)"


@dataclass(frozen=True)
class Component:
    """One state variable: name suffix, Triton type, torch dtype (for workspaces), identity."""

    suffix: str
    tl_type: str
    torch_dtype: torch.dtype
    identity: str


_TORCH = {v: k.torch for k, v in TL.items()}
_DTYPE = {v: k for k, v in TL.items()}


def _extreme(dtype: dt.DType, largest: bool) -> str:
    if dtype.is_float:
        return 'float("inf")' if largest else 'float("-inf")'
    info = torch.iinfo(dtype.torch)
    return str(info.max if largest else info.min)


@dataclass
class TritonAccumulator:
    """Names and code of one reduction's state in a Triton kernel."""

    r: KReduction
    var: str

    @property
    def op(self) -> ReduceOp:
        return self.r.op

    @property
    def is_float(self) -> bool:
        return self.r.dtype.is_float

    @property
    def value_type(self) -> str:
        """The Triton type elements are converted to before they are accumulated."""
        d = self.r.dtype
        if self.op in (ReduceOp.SUM, ReduceOp.PROD) and not d.is_float:
            return "tl.int64"
        if self.op in (ReduceOp.ANY, ReduceOp.ALL) or d.is_bool or (d.is_int and d.itemsize < 4):
            return "tl.int32"
        return tl_type(d)

    @property
    def _bool_result(self) -> bool:
        bool_ops = (ReduceOp.ANY, ReduceOp.ALL, ReduceOp.MAX, ReduceOp.MIN)
        return self.op in bool_ops[:2] or (self.r.dtype.is_bool and self.op in bool_ops)

    def components(self) -> list[Component]:
        vt, op = self.value_type, self.op
        tdt = _TORCH[vt]
        wants_max = op in (ReduceOp.MAX, ReduceOp.ARGMAX)
        d = _DTYPE[vt]
        if op is ReduceOp.WELFORD:
            return [Component(s, vt, tdt, "0") for s in ("_mean", "_m2", "_n")]
        if op.is_arg:
            return [Component("_val", vt, tdt, _extreme(d, not wants_max)),
                    Component("_idx", "tl.int64", torch.int64, IDX_NONE)]
        identity = {ReduceOp.SUM: "0", ReduceOp.PROD: "1", ReduceOp.ANY: "0", ReduceOp.ALL: "1"}
        if op in identity:
            return [Component("", vt, tdt, identity[op])]
        main = Component("", vt, tdt, _extreme(d, not wants_max))
        return [main, Component("_nan", "tl.int32", torch.int32, "0")] if self.is_float else [main]

    def result_dtypes(self) -> list[torch.dtype]:
        """Torch dtypes of the finished outputs (workspaces of split reductions hold them)."""
        op = self.op
        if op is ReduceOp.WELFORD:
            return [_TORCH[self.value_type]] * 2
        if op.is_arg:
            return [torch.int64]
        if self._bool_result:
            return [torch.bool]
        if op in (ReduceOp.MAX, ReduceOp.MIN):
            return [self.r.dtype.torch if not self.is_float else _TORCH[self.value_type]]
        return [_TORCH[self.value_type]]

    def names(self, prefix: str | None = None) -> dict[str, str]:
        """Variable name of each component (``prefix`` defaults to the accumulator's name)."""
        base = self.var if prefix is None else prefix
        return {c.suffix: base + c.suffix for c in self.components()}

    # -- the four steps -------------------------------------------------------------------------
    def lanes(self, value: str, mask: str | None, rindex: str, shape: str) -> dict[str, str]:
        """Lane state of the elements ``value`` (a full tile of ``value_type``)."""
        comps = {c.suffix: c for c in self.components()}

        def masked(expr: str, suffix: str) -> str:
            return expr if mask is None else f"tl.where({mask}, {expr}, {comps[suffix].identity})"

        op = self.op
        if op is ReduceOp.WELFORD:
            vt = self.value_type
            n = f"tl.full({shape}, 1, {vt})" if mask is None else f"tl.where({mask}, 1.0, 0.0).to({vt})"
            return {"_mean": masked(value, "_mean"), "_m2": f"tl.full({shape}, 0, {vt})", "_n": n}
        if op.is_arg:
            idx = f"tl.broadcast_to({rindex}.to(tl.int64), {shape})"
            return {"_val": masked(value, "_val"), "_idx": masked(idx, "_idx")}
        out = {"": masked(value, "")}
        if "_nan" in comps:
            out["_nan"] = masked(f"({value} != {value}).to(tl.int32)", "_nan")
        return out

    def merge(self, acc: dict[str, str], new: dict[str, str]) -> list[str]:
        """Statements folding lane state ``new`` (names) into lane state ``acc`` (names)."""
        op = self.op
        if op is ReduceOp.WELFORD:
            t = self.var + "_t"
            return [f"{t}_n = {acc['_n']} + {new['_n']}",
                    f"{t}_d = {new['_mean']} - {acc['_mean']}",
                    f"{t}_w = {new['_n']} / tl.maximum({t}_n, 1.0)",
                    f"{acc['_mean']} = {acc['_mean']} + {t}_d * {t}_w",
                    f"{acc['_m2']} = {acc['_m2']} + {new['_m2']} + {t}_d * {t}_d * {acc['_n']} * {t}_w",
                    f"{acc['_n']} = {t}_n"]
        if op.is_arg:
            better = self._better(new["_val"], acc["_val"], new["_idx"], acc["_idx"])
            t = self.var + "_better"
            return [f"{t} = {better}",
                    f"{acc['_val']} = tl.where({t}, {new['_val']}, {acc['_val']})",
                    f"{acc['_idx']} = tl.where({t}, {new['_idx']}, {acc['_idx']})"]
        fn = {ReduceOp.SUM: "{a} + {b}", ReduceOp.PROD: "{a} * {b}",
              ReduceOp.MAX: "tl.maximum({a}, {b})", ReduceOp.ANY: "tl.maximum({a}, {b})",
              ReduceOp.MIN: "tl.minimum({a}, {b})", ReduceOp.ALL: "tl.minimum({a}, {b})"}[op]
        lines = [f"{acc['']} = " + fn.format(a=acc[""], b=new[""])]
        if "_nan" in acc:
            lines.append(f"{acc['_nan']} = tl.maximum({acc['_nan']}, {new['_nan']})")
        return lines

    def _better(self, v: str, a: str, vi: str, ai: str) -> str:
        cmp = ">" if self.op is ReduceOp.ARGMAX else "<"
        if not self.is_float:
            return f"({v} {cmp} {a}) | (({v} == {a}) & ({vi} < {ai}))"
        return (f"({v} {cmp} {a}) | (({v} != {v}) & ({a} == {a})) | "
                f"((({v} == {a}) | (({v} != {v}) & ({a} != {a}))) & ({vi} < {ai}))")

    def reduce(self, src: dict[str, str], dst: dict[str, str]) -> list[str]:
        """Statements reducing lane state ``src`` along axis 1 into row state ``dst``."""
        op = self.op
        if op is ReduceOp.WELFORD:
            mean, m2, n, dev = src["_mean"], src["_m2"], src["_n"], f"{self.var}_dev"
            return [f"{dst['_n']} = {reduce_rows('sum', n)}",
                    f"{dst['_mean']} = {reduce_rows('sum', f'{mean} * {n}')} / tl.maximum({dst['_n']}, 1.0)",
                    f"{dev} = {mean} - {dst['_mean']}",
                    f"{dst['_m2']} = {reduce_rows('sum', f'{m2} + {n} * {dev} * {dev}')}"]
        if op.is_arg:
            return self._reduce_arg(src, dst)
        kind = {ReduceOp.SUM: "sum", ReduceOp.PROD: "prod", ReduceOp.MAX: "max", ReduceOp.ANY: "max",
                ReduceOp.MIN: "min", ReduceOp.ALL: "min"}[op]
        lines = [f"{dst['']} = {reduce_rows(kind, src[''])}"]
        if "_nan" in src:
            lines.append(f"{dst['_nan']} = {reduce_rows('max', src['_nan'])}")
        return lines

    def _reduce_arg(self, src: dict[str, str], dst: dict[str, str]) -> list[str]:
        kind = "max" if self.op is ReduceOp.ARGMAX else "min"
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
        """Expressions of the finished outputs, from row state ``state``."""
        op = self.op
        if op is ReduceOp.WELFORD:
            return [state["_mean"], state["_m2"]]
        if op.is_arg:
            return [state["_idx"]]
        value = state[""]
        if "_nan" in state:
            return [f"tl.where({state['_nan']} > 0, {_NAN}, {value})"]
        if self._bool_result:
            return [f"({value} != 0)"]
        if op in (ReduceOp.MAX, ReduceOp.MIN) and self.value_type != tl_type(self.r.dtype):
            return [f"{value}.to({tl_type(self.r.dtype)})"]  # narrow ints were reduced as int32
        return [value]
