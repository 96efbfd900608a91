"""A small torch reference interpreter for kernels and graphs: the oracle of tests and the tuner.

Index expressions are evaluated as integer tensors over the loop grid (one broadcastable axis per
loop variable) and scalar ops with torch, following ``ir.ops`` semantics: float16/bfloat16 math
in float32, casts to narrow floats round, integer division by zero gives 0, max/min propagate
NaN, arg reductions take the first extreme (NaN counts as extreme). Reductions accumulate in
float64/int64 and round to the accumulator's dtype, so results are at least as accurate as the
backends'. Rows are evaluated in blocks to bound memory.

``KernelInterpreter(kernel)`` is called like a backend launcher: ``(buffers, syms)``.
``interpret_graph(graph, args)`` evaluates an ``ir.Graph`` node by node, without fusion.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .dtypes import DType, compute_dtype, to_dtype
from .expr import AccRef, Apply, Const, Expr, IndexValue, Load
from .index import FloorDiv, Index, Indirect, Mod, Sym, Var, as_var, bare_symbol, evaluate
from .nodes import Buffer, BufferRef, Extern, Graph, KReduction, KStore, Pointwise, Reduction
from .ops import Op
from .reductions import Combine, Component, Lift, ReduceOp, Rule

BLOCK_ELEMENTS = 1 << 22  # grid points evaluated at once (rows are split into blocks)

Value = torch.Tensor | int


def torch_compute(dtype: DType) -> torch.dtype:
    """The torch dtype values of ``dtype`` are computed in."""
    return compute_dtype(dtype).torch


def _nan_safe_int(fn: Callable) -> Callable:
    """An integer op where a zero divisor gives 0 (as in the backends) instead of raising."""
    def op(a, b):
        if a.dtype.is_floating_point or b.dtype.is_floating_point:
            return fn(a, b)
        zero = b == 0
        return torch.where(zero, torch.zeros_like(a), fn(a, torch.where(zero, torch.ones_like(b), b)))
    return op


def _pow(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.bool:
        return a | ~b
    if a.dtype.is_floating_point:
        return torch.pow(a, b)
    neg = b < 0  # integer a ** negative b: 1 for a == 1, +-1 for a == -1, else 0
    special = torch.where(a == 1, 1, torch.where(a == -1, torch.where(b % 2 != 0, -1, 1), 0)).to(a.dtype)
    return torch.where(neg, special, torch.pow(a, torch.where(neg, torch.zeros_like(b), b)))


# Every scalar op of ir.ops.Op except CAST (handled with the node's dtype); tests check coverage.
OPS: dict[Op, Callable[..., torch.Tensor]] = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.TRUEDIV: torch.div,
    Op.FLOORDIV: _nan_safe_int(torch.floor_divide), Op.MOD: _nan_safe_int(torch.remainder),
    Op.FMOD: _nan_safe_int(torch.fmod), Op.POW: _pow, Op.ATAN2: torch.atan2,
    Op.MAXIMUM: torch.maximum, Op.MINIMUM: torch.minimum, Op.COPYSIGN: torch.copysign,
    Op.NEG: lambda a: a if a.dtype == torch.bool else torch.neg(a),
    Op.ABS: lambda a: a if a.dtype == torch.bool else torch.abs(a),
    Op.RECIPROCAL: torch.reciprocal, Op.SIGN: torch.sign,
    Op.EXP: torch.exp, Op.EXP_FTZ: lambda a: torch.where(a < -87, 0, torch.exp(a)), Op.EXP2: torch.exp2,
    Op.EXPM1: torch.expm1, Op.LOG: torch.log,
    Op.LOG2: torch.log2, Op.LOG10: torch.log10, Op.LOG1P: torch.log1p, Op.SQRT: torch.sqrt,
    Op.RSQRT: torch.rsqrt, Op.SIN: torch.sin, Op.COS: torch.cos, Op.TAN: torch.tan,
    Op.ASIN: torch.asin, Op.ACOS: torch.acos, Op.ATAN: torch.atan, Op.SINH: torch.sinh,
    Op.COSH: torch.cosh, Op.TANH: torch.tanh, Op.ASINH: torch.asinh, Op.ACOSH: torch.acosh,
    Op.ATANH: torch.atanh, Op.SIGMOID: torch.sigmoid, Op.ERF: torch.erf, Op.ERFC: torch.erfc,
    Op.ERFINV: torch.erfinv,
    Op.FLOOR: lambda a: torch.floor(a) if a.dtype.is_floating_point else a,
    Op.CEIL: lambda a: torch.ceil(a) if a.dtype.is_floating_point else a,
    Op.TRUNC: lambda a: torch.trunc(a) if a.dtype.is_floating_point else a,
    Op.ROUND: lambda a: torch.round(a) if a.dtype.is_floating_point else a,
    Op.ISNAN: torch.isnan, Op.ISINF: torch.isinf,
    Op.EQ: torch.eq, Op.NE: torch.ne, Op.LT: torch.lt, Op.LE: torch.le, Op.GT: torch.gt, Op.GE: torch.ge,
    Op.AND: torch.logical_and, Op.OR: torch.logical_or, Op.XOR: torch.logical_xor,
    Op.NOT: torch.logical_not,
    Op.BITAND: torch.bitwise_and, Op.BITOR: torch.bitwise_or, Op.BITXOR: torch.bitwise_xor,
    Op.BITNOT: torch.bitwise_not, Op.LSHIFT: torch.bitwise_left_shift,
    Op.RSHIFT: torch.bitwise_right_shift, Op.WHERE: torch.where,
}


def cast(value: torch.Tensor, dst: DType) -> torch.Tensor:
    """Convert a computed value to ``dst``'s compute type, rounding through narrow floats."""
    if dst.is_bool:
        return value != 0 if value.dtype != torch.bool else value
    if dst.is_low_precision:
        return value.to(torch.float32).to(dst.torch).to(torch.float32)
    return value.to(dst.torch)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t``'s memory from its first element (what a kernel pointer sees)."""
    extent = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    return t.as_strided((extent,), (1,))


@dataclass
class _Scope:
    """Values visible while evaluating one block of a loop nest."""

    env: dict[str, int]
    buffers: dict[str, torch.Tensor]       # flat views
    decls: dict[str, Buffer]
    vars: dict[str, torch.Tensor] = field(default_factory=dict)
    accs: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    memo: dict[Expr, torch.Tensor] = field(default_factory=dict)

    # -- index expressions ------------------------------------------------------------------
    def index(self, e: Index) -> Value:
        total: Value = e.const
        for monomial, coeff in e.terms:
            term: Value = coeff
            for atom in monomial:
                term = term * self.atom(atom)
            total = total + term
        return total

    def atom(self, a) -> Value:
        if isinstance(a, Var):
            return self.vars[a.name] if a.name in self.vars else self.env[a.name]
        if isinstance(a, Sym):
            return self.env[a.name]
        if isinstance(a, (FloorDiv, Mod)):  # Python ints or int64 tensors: both round toward -inf
            num, den = self.index(a.num), self.index(a.den)
            return num // den if isinstance(a, FloorDiv) else num % den
        if isinstance(a, Indirect):
            value = self.expr(a.value).to(torch.int64)
            bound = self.index(a.bound)
            if a.check is None:
                return value
            wrapped = torch.where(value < 0, value + bound, value) if a.check.wrap else value
            bad = (wrapped < 0) | (wrapped >= bound)
            if bool(bad.any()):
                raise IndexError(a.check.message(int(value[bad].flatten()[0]), int(bound)))
            return wrapped
        raise TypeError(f"unknown index atom {a!r}")

    # -- scalar expressions -----------------------------------------------------------------
    def expr(self, e: Expr) -> torch.Tensor:
        hit = self.memo.get(e)
        if hit is None:
            hit = self._eval(e)
            self.memo[e] = hit
        return hit

    def _eval(self, e: Expr) -> torch.Tensor:
        target = torch_compute(e.dtype)
        if isinstance(e, Const):
            return torch.tensor(e.value, dtype=target)
        if isinstance(e, Load):
            offset = self.index(self.decls[e.buffer].layout.flat_index(e.index))
            return self.buffers[e.buffer][offset].to(target)
        if isinstance(e, IndexValue):
            return torch.as_tensor(self.index(e.index)).to(target)
        if isinstance(e, AccRef):
            return self.accs[(e.name, e.output)].to(target)
        if isinstance(e, Apply):
            args = [self.expr(a) for a in e.args]
            if e.op is Op.CAST:
                return cast(args[0], e.dtype)
            return OPS[e.op](*args).to(target)
        raise TypeError(f"cannot interpret {e!r}")

    def store(self, buffer: str, index: Sequence[Index], value: Expr, shape: tuple[int, ...]) -> None:
        decl = self.decls[buffer]
        offsets = torch.as_tensor(self.index(decl.layout.flat_index(tuple(index)))).expand(shape)
        data = cast(self.expr(value), decl.dtype).to(decl.dtype.torch).expand(shape)
        self.buffers[buffer][offsets.reshape(-1)] = data.reshape(-1)


def evaluate_positions(value: Expr, var: str, extent: int) -> torch.Tensor:
    """The int64 values of ``value`` (an expression of index values of loop variable ``var``
    alone, reading no memory) for ``var`` over ``[0, extent)``."""
    scope = _Scope(env={}, buffers={}, decls={}, vars={var: torch.arange(extent, dtype=torch.int64)})
    return scope.expr(value).to(torch.int64).expand(extent)


# Elementwise combines as reductions of the last axis (OR/AND act on 0/1 flags).
_FOLD = {Combine.ADD: torch.sum, Combine.MUL: torch.prod, Combine.MAX: torch.amax, Combine.MIN: torch.amin,
         Combine.OR: torch.amax, Combine.AND: torch.amin}


def _lift(c: Component, v: torch.Tensor) -> torch.Tensor:
    if c.lift is Lift.ISNAN:
        return torch.isnan(v)
    if c.rule is Rule.FLAG:
        return v != 0
    if c.rule is Rule.WIDE:
        return v.to(torch.float64 if v.dtype.is_floating_point else torch.int64)
    return v


def reduce_values(op: ReduceOp, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Reduce the last axis of ``v`` as ``ir.reductions`` describes ``op``; sums and Welford keep
    float64/int64 precision, flags finish as bools."""
    spec = op.spec
    if spec.joint is Combine.WELFORD:
        x = v.to(torch.float64)
        mean = x.mean(-1, keepdim=True)
        return mean.squeeze(-1), ((x - mean) ** 2).sum(-1)
    if spec.joint is Combine.EXP_SUM:
        x = v.to(torch.float64)
        m = x.amax(-1)
        shift = torch.where(torch.isinf(m), 0.0, m)
        s = torch.exp(x - shift[..., None]).sum(-1)
        return torch.where(torch.isnan(s), float("nan"), m), s
    if spec.joint is not None:  # argmax/argmin: the first extreme, or the first NaN
        v = v.to(torch.uint8) if v.dtype == torch.bool else v  # torch has no bool argmax
        best = v.argmax(-1) if spec.joint is Combine.ARGMAX else v.argmin(-1)
        if v.dtype.is_floating_point:
            nan = torch.isnan(v)
            best = torch.where(nan.any(-1), nan.to(torch.uint8).argmax(-1), best)
        return (best,)
    comps = spec.state(to_dtype(v.dtype))
    state = {c.suffix: _FOLD[c.combine](_lift(c, v), -1) for c in comps}
    outs = tuple(state[s] for s in spec.outputs)
    flag = next((state[c.suffix] for c in comps if c.lift is Lift.ISNAN), None)
    return outs if flag is None else tuple(torch.where(flag, float("nan"), x) for x in outs)


@dataclass
class LoopNest:
    """A backend-neutral loop nest: rows (``pvars``) x reduced dims (``rvars``), as in a Kernel."""

    pvars: tuple[tuple[str, Index], ...]
    rvars: tuple[tuple[str, Index], ...]
    reductions: Sequence
    elem_stores: Sequence
    row_stores: Sequence
    col_stores: Sequence = ()  # results of reductions across the rows, stored after every block

    @property
    def num_phases(self) -> int:
        levels = [r.level + 1 for r in self.reductions] + [s.phase + 1 for s in self.elem_stores]
        return max(levels, default=1)

    def run(self, buffers: dict[str, torch.Tensor], decls: dict[str, Buffer], env: dict[str, int]) -> None:
        """Evaluate the nest, writing its stores into ``buffers``."""
        flat = {name: _flat(t) for name, t in buffers.items()}
        psizes = [evaluate(n, env) for _, n in self.pvars]
        rsizes = [evaluate(n, env) for _, n in self.rvars]
        partials: dict[str, list[tuple[torch.Tensor, ...]]] = {r.name: [] for r in self.reductions if r.across}
        if all(s > 0 for s in psizes):
            rows = psizes[0] if psizes else 1
            per_row = max(1, math.prod(psizes[1:]) * max(1, math.prod(rsizes)))
            step = max(1, BLOCK_ELEMENTS // per_row)
            for lo in range(0, rows, step):
                scope = _Scope(dict(env), flat, decls)
                self._block(scope, psizes, rsizes, lo, min(rows, lo + step), partials)
        if self.col_stores:
            self._col_stores(_Scope(dict(env), flat, decls), rsizes, partials)

    def _col_stores(self, scope: _Scope, rsizes: list[int], partials: dict[str, list]) -> None:
        """Combine each reduction across rows over the blocks' partial results, then store."""
        for axis, (var, _) in enumerate(self.rvars):
            shape = [1] * len(rsizes)
            shape[axis] = rsizes[axis]
            scope.vars[var] = torch.arange(rsizes[axis]).reshape(shape)
        for r in (r for r in self.reductions if r.across):
            blocks = partials[r.name]
            outs = reduce_values(r.op, torch.zeros(math.prod(rsizes), 0, dtype=torch_compute(r.dtype))) \
                if not blocks else tuple(reduce_values(r.op, torch.stack([b[k] for b in blocks], -1))[k]
                                         for k in range(r.op.num_outputs))
            for k, out in enumerate(outs):
                scope.accs[(r.name, k)] = out.reshape(rsizes)
        for s in self.col_stores:
            scope.store(s.buffer, s.index, s.value, tuple(rsizes))

    def _block(self, scope: _Scope, psizes: list[int], rsizes: list[int], lo: int, hi: int,
               partials: dict[str, list]) -> None:
        ndim = len(psizes) + len(rsizes)
        sizes = ([hi - lo] + psizes[1:] if psizes else []) + rsizes
        for axis, (name, _) in enumerate(self.pvars + self.rvars):
            shape = [1] * ndim
            shape[axis] = sizes[axis]
            start = lo if axis == 0 and psizes else 0
            scope.vars[name] = torch.arange(start, start + sizes[axis]).reshape(shape)
        full = tuple(sizes)
        row = tuple(sizes[: len(psizes)]) + (1,) * len(rsizes)
        for phase in range(self.num_phases):
            for r in (r for r in self.reductions if r.level == phase):
                if r.across:
                    partials[r.name].append(self._reduce_across(scope, r, full, len(rsizes)))
                else:
                    self._reduce(scope, r, full, row)
            scope.memo.clear()
            for s in (s for s in self.elem_stores if s.phase == phase):
                scope.store(s.buffer, s.index, s.value, full)
        scope.memo.clear()
        for s in self.row_stores:
            scope.store(s.buffer, s.index, s.value, row)

    def _reduce_across(self, scope: _Scope, r, full, rdims: int) -> tuple[torch.Tensor, ...]:
        """The block's partial result of a reduction across rows: one per point of the rdomain."""
        v = scope.expr(r.body).expand(full)
        cols = math.prod(full[len(full) - rdims:]) if rdims else 1
        return reduce_values(r.op, v.reshape(-1, cols).transpose(0, 1))

    def _reduce(self, scope: _Scope, r, full, row) -> None:
        v = scope.expr(r.body).expand(full).reshape(row[: len(self.pvars)] + (-1,))
        for k, out in enumerate(reduce_values(r.op, v)):
            scope.accs[(r.name, k)] = out.reshape(row)


class KernelInterpreter:
    """Evaluates a scheduler ``Kernel``; called like a launcher: ``(buffers, syms)``."""

    def __init__(self, kernel):
        self.kernel = kernel
        k = kernel
        self.nest = LoopNest(_named(k.pvars(), k.pdomain), _named(k.rvars(), k.rdomain),
                             k.reductions, k.elem_stores, k.row_stores, k.col_stores)

    def __call__(self, buffers: dict[str, torch.Tensor], syms: dict[str, int]) -> None:
        self.nest.run({n: buffers[n] for n in set(self.kernel.inputs) | set(self.kernel.outputs)},
                      self.kernel.buffers, syms)


def _named(vars_: Sequence[Index], sizes: Sequence[Index]) -> tuple[tuple[str, Index], ...]:
    return tuple((as_var(v).name, n) for v, n in zip(vars_, sizes))


def _node_nest(node: Pointwise | Reduction, graph: Graph) -> LoopNest:
    ivars = node.index_vars()
    pvars = _named(ivars, node.domain)
    if isinstance(node, Pointwise):
        return LoopNest(pvars, (), (), (KStore(node.out, ivars, node.body),), ())
    red = KReduction(node.name, node.op, node.body, node.body.dtype, 0)
    stores = tuple(KStore(out, ivars, AccRef(node.name, k, graph.buffers[out].dtype))
                   for k, out in enumerate(node.outs))
    return LoopNest(pvars, _named(node.reduction_vars(), node.rdomain), (red,), (), stores)


def bind_symbols(graph: Graph, args: Sequence[torch.Tensor]) -> dict[str, int]:
    """Symbol values from the shapes of ``args`` (the graph's inputs, in order)."""
    env: dict[str, int] = {}
    for name, t in zip(graph.inputs, args):
        for d, size in enumerate(graph.buffers[name].sizes):
            if (sym := bare_symbol(size)) is not None:
                env.setdefault(sym, t.shape[d])
    return env


def interpret_graph(graph: Graph, args: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Evaluate ``graph`` on ``args`` node by node (no fusion); returns its outputs."""
    env = bind_symbols(graph, args)
    values: dict[str, torch.Tensor] = dict(zip(graph.inputs, args))
    for node in graph.nodes:
        if isinstance(node, Extern):
            _run_extern(node, values, graph, env)
            continue
        for out in node.outputs:
            values[out] = _allocate(graph.buffers[out], env)
        _node_nest(node, graph).run(values, graph.buffers, env)
    return tuple(strided_view(values[o.buffer], o.layout, env) for o in graph.outputs)


def _allocate(b: Buffer, env: dict[str, int]) -> torch.Tensor:
    sizes = [evaluate(s, env) for s in b.layout.sizes]
    strides = [evaluate(s, env) for s in b.layout.strides]
    t = torch.empty_strided(sizes, strides, dtype=b.dtype.torch)
    return t.fill_(float("nan")) if b.dtype.is_float else t.zero_()


def strided_view(t: torch.Tensor, layout, env: dict[str, int]) -> torch.Tensor:
    """``t`` seen through ``layout``, whose offset counts from ``t``'s first element."""
    sizes = [evaluate(s, env) for s in layout.sizes]
    strides = [evaluate(s, env) for s in layout.strides]
    return t.as_strided(sizes, strides, t.storage_offset() + evaluate(layout.offset, env))


def _run_extern(node: Extern, values: dict[str, torch.Tensor], graph: Graph, env: dict[str, int]) -> None:
    def tensor_of(ref: BufferRef) -> torch.Tensor:
        t = values[ref.name]
        return t if ref.layout is None else strided_view(t, ref.layout, env)

    for name, value in zip(node.outs, node.call(tensor_of, env)):
        out = _allocate(graph.buffers[name], env)
        out.copy_(value)
        values[name] = out
