"""DSL functions: elementwise math with PyTorch's promotion and broadcasting, views, reductions."""
from __future__ import annotations

import builtins
import math
from typing import Sequence

from ..ir import dtypes as dt
from ..ir.dtypes import DType
from ..ir.index import Index, IndexCheck, floordiv, mod, product
from ..ir.ops import COMPARISONS, FLOAT_ONLY, INT_ONLY, LOGICAL, PREDICATES, Op, ReduceOp
from .tensor import (GatherSrc, PointwiseSrc, ReductionSrc, Tensor, ViewSrc, _counter,
                     normalize_axis, shape_str, to_size)


# -- broadcasting and promotion ------------------------------------------------------------------
def broadcast_shapes(*shapes: Sequence[Index], what: str = "broadcast") -> tuple[Index, ...]:
    """numpy-style broadcast of shapes; raises a ValueError naming both shapes on mismatch."""
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        size = Index.of(1)
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0 or s[j] == 1:
                continue
            if size == 1:
                size = s[j]
            elif s[j] != size:
                raise ValueError(f"{what}: shapes {' and '.join(shape_str(x) for x in shapes)} "
                                 f"do not broadcast (dimension {k}: {size} vs {s[j]})")
        out.append(size)
    return tuple(out)


def broadcast_to(x: Tensor, shape: Sequence) -> Tensor:
    """View ``x`` with ``shape``: size-1 or missing leading dims repeat (stride 0, no copy)."""
    shape = tuple(to_size(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    target = broadcast_shapes(x.shape, shape, what="broadcast_to")
    if target != shape:
        raise ValueError(f"broadcast_to: cannot broadcast {shape_str(x.shape)} to {shape_str(shape)}")
    lead = len(shape) - x.ndim
    src_shape = x.shape

    def remap(idx):
        return tuple(Index.of(0) if src_shape[k] == 1 else idx[k + lead] for k in range(len(src_shape)))

    return Tensor(shape, x.dtype, ViewSrc(x, remap, "broadcast_to"))


def result_dtype(args) -> DType:
    """PyTorch's result dtype for tensors and Python scalars mixed."""
    tensors = [a.dtype for a in args if isinstance(a, Tensor)]
    if not tensors:
        raise TypeError("at least one operand must be a DSL tensor")
    out = dt.promote(*tensors)
    for a in args:
        if not isinstance(a, Tensor):
            out = dt.promote_with_scalar(out, a)
    return out


def _as_tensor_or_scalar(value):
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 63:
        raise OverflowError(f"int too big to convert: {value} does not fit in 64 bits (as in PyTorch)")
    if isinstance(value, (Tensor, bool, int, float)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    raise TypeError(f"expected a DSL tensor or a Python scalar, got {type(value).__name__}")


def cast(x: Tensor, dtype) -> Tensor:
    """Convert ``x`` to ``dtype`` (float->int truncates toward zero, ->bool tests != 0)."""
    dtype = dt.to_dtype(dtype)
    if x.dtype == dtype:
        return x
    return Tensor(x.shape, dtype, PointwiseSrc(Op.CAST, (x,)))


def _prepare(args, in_dtype: DType, shape):
    return tuple(broadcast_to(cast(a, in_dtype), shape) if isinstance(a, Tensor) else a for a in args)


def apply(op: Op, *args, dtype: DType | None = None) -> Tensor:
    """Apply scalar ``op`` elementwise with promotion and broadcasting."""
    args = tuple(_as_tensor_or_scalar(a) for a in args)
    if op is Op.POW and _small_int_exponent(args) and dtype is None:
        return _power_by_multiplication(args[0], int(args[1]))
    tensors = [a for a in args if isinstance(a, Tensor)]
    shape = broadcast_shapes(*(t.shape for t in tensors), what=op.name.lower())
    in_dtype = result_dtype(args)
    if op in FLOAT_ONLY and not in_dtype.is_float:
        in_dtype = dt.float32
    if op in INT_ONLY and in_dtype.is_float:
        raise TypeError(f"{op.name.lower()} is defined on integer and bool tensors, got {in_dtype.name}")
    if op in LOGICAL:
        in_dtype = dt.bool_
    out_dtype = dt.bool_ if op in PREDICATES else dtype or in_dtype
    return Tensor(shape, out_dtype, PointwiseSrc(op, _prepare(args, in_dtype, shape)))


def _small_int_exponent(args) -> bool:
    base, exponent = args
    return (isinstance(base, Tensor) and not isinstance(exponent, (Tensor, bool))
            and isinstance(exponent, (int, float)) and float(exponent).is_integer() and 1 <= exponent <= 4
            and (base.dtype.is_float or (base.dtype.is_int and isinstance(exponent, int))))


def _power_by_multiplication(base: Tensor, exponent: int) -> Tensor:
    """``base ** k`` for k in 1..4 as products: exact, and vectorizes where ``pow`` calls do not."""
    result = base
    for _ in range(exponent - 1):
        result = apply(Op.MUL, result, base)
    return result


def _elementwise(op: Op):
    """``fn(x)`` or ``fn(x, y)`` applying ``op``, documented by the op's semantics."""
    fn = (lambda x: apply(op, x)) if op.arity == 1 else (lambda x, y: apply(op, x, y))
    fn.__name__, fn.__doc__ = op.name.lower(), f"Elementwise {op.doc}."
    return fn


abs = _elementwise(Op.ABS)  # noqa: A001 - mirrors torch/numpy naming on purpose
exp = _elementwise(Op.EXP)
log = _elementwise(Op.LOG)
sqrt = _elementwise(Op.SQRT)
rsqrt = _elementwise(Op.RSQRT)
sin = _elementwise(Op.SIN)
cos = _elementwise(Op.COS)
tanh = _elementwise(Op.TANH)
sigmoid = _elementwise(Op.SIGMOID)
erf = _elementwise(Op.ERF)
pow = _elementwise(Op.POW)  # noqa: A001
maximum = _elementwise(Op.MAXIMUM)
minimum = _elementwise(Op.MINIMUM)


def where(cond, x, y) -> Tensor:
    """``x`` where ``cond`` else ``y``, broadcasting all three."""
    cond = _as_tensor_or_scalar(cond)
    x, y = _as_tensor_or_scalar(x), _as_tensor_or_scalar(y)
    if isinstance(cond, Tensor) and cond.dtype != dt.bool_:
        cond = cast(cond, dt.bool_)
    if not builtins.any(isinstance(a, Tensor) for a in (x, y)):
        if not isinstance(cond, Tensor):
            raise TypeError("where: at least one operand must be a DSL tensor")
        x_dtype = dt.promote_with_scalar(dt.promote_with_scalar(dt.bool_, x), y)
    else:
        x_dtype = result_dtype((x, y))
    tensors = [a for a in (cond, x, y) if isinstance(a, Tensor)]
    shape = broadcast_shapes(*(t.shape for t in tensors), what="where")
    cond_b = broadcast_to(cond, shape) if isinstance(cond, Tensor) else bool(cond)
    xs = _prepare((x, y), x_dtype, shape)
    return Tensor(shape, x_dtype, PointwiseSrc(Op.WHERE, (cond_b,) + xs))


# -- views ----------------------------------------------------------------------------------------
def permute(x: Tensor, *dims) -> Tensor:
    """Reorder dimensions: ``out.shape[k] == x.shape[dims[k]]``."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(normalize_axis(d, x.ndim, "permute") for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute: {dims} is not a permutation of the {x.ndim} dims of {shape_str(x.shape)}")
    inverse = [dims.index(d) for d in range(x.ndim)]

    def remap(idx):
        return tuple(idx[k] for k in inverse)

    return Tensor(tuple(x.shape[d] for d in dims), x.dtype, ViewSrc(x, remap, f"permute{dims}"))


def reshape(x: Tensor, *shape) -> Tensor:
    """View with a new shape of the same number of elements (row-major order); one dim may be -1."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    numel = product(x.shape)
    sizes = [None if (isinstance(s, int) and s == -1) else to_size(s) for s in shape]
    if sizes.count(None) > 1:
        raise ValueError(f"reshape: only one dimension may be -1, got {shape}")
    if None in sizes:
        known = product(s for s in sizes if s is not None)
        inferred = floordiv(numel, known)
        if inferred * known != numel:
            raise ValueError(f"reshape: cannot infer -1 in {shape} for {shape_str(x.shape)}")
        sizes[sizes.index(None)] = inferred
    sizes = tuple(sizes)
    if product(sizes) != numel:
        raise ValueError(f"reshape: shape {shape_str(sizes)} has {product(sizes)} elements, "
                         f"{shape_str(x.shape)} has {numel}")
    return reshape_view(x, sizes)


def reshape_view(x: Tensor, sizes: Sequence[Index]) -> Tensor:
    """``x`` read in row-major order as ``sizes`` (the element count is the caller's to check).

    The remap goes through the flat position, then ``% n`` and ``// n`` per source dim from the
    innermost, a form the index simplifier folds back into strides for views of views."""
    sizes = tuple(Index.of(s) for s in sizes)
    if sizes == x.shape:
        return x
    src_shape = x.shape

    def remap(idx):
        flat = Index.of(0)
        for i, n in zip(idx, sizes):
            flat = flat * n + i
        out = []
        for n in reversed(src_shape):
            out.append(mod(flat, n) if n != 1 else Index.of(0))
            flat = floordiv(flat, n)
        return tuple(reversed(out))

    return Tensor(sizes, x.dtype, ViewSrc(x, remap, "reshape"))


def getitem(x: Tensor, key) -> Tensor:
    """Basic indexing: ints, slices with positive steps, ``...`` and ``None``."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > x.ndim:
        raise IndexError(f"too many indices ({n_real}) for a tensor of rank {x.ndim}")
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (x.ndim - builtins.sum(1 for k in expanded if k is not None)))
    out_shape, plan = [], []  # plan: per source dim (start, step, output dim; None for an int index)
    for k in expanded:
        if k is None:
            out_shape.append(Index.of(1))
            continue
        size = x.shape[len(plan)]
        if isinstance(k, bool) or not (isinstance(k, (int, slice)) or hasattr(k, "__index__")):
            raise TypeError(f"unsupported index {k!r}; use ln.gather for tensor indices")
        if isinstance(k, slice):
            start, stop, step = _slice_bounds(k, size)
            plan.append((start, step, len(out_shape)))
            out_shape.append(stop)
        else:
            k = int(k)
            c = size.as_int()
            if c is not None and not -c <= k < c:
                raise IndexError(f"index {k} is out of range for dimension {len(plan)} of size {c}")
            plan.append((Index.of(k) if k >= 0 else size + k, 0, None))

    def remap(idx):
        return tuple(start if dim is None else start + idx[dim] * step for start, step, dim in plan)

    return Tensor(tuple(out_shape), x.dtype, ViewSrc(x, remap, "getitem"))


def _slice_bounds(k: slice, size: Index) -> tuple[Index, Index, int]:
    step = 1 if k.step is None else int(k.step)
    if step <= 0:
        raise ValueError(f"slice step must be positive, got {step}")
    n = size.as_int()
    if n is None:
        start = 0 if k.start in (None, 0) else k.start
        if k.stop is None and step == 1 and isinstance(start, int) and start >= 0:
            return Index.of(start), size - start, 1
        raise ValueError("slicing a symbolic dimension supports only x[a:] with a >= 0")
    start, stop, _ = slice(k.start, k.stop, step).indices(n)
    length = builtins.max(0, (stop - start + step - 1) // step)
    return Index.of(start), Index.of(length), step


def gather(x: Tensor, axis: int, index: Tensor) -> Tensor:
    """``out[i] = x[i with i[axis] := index[i]]`` like ``torch.gather`` (index has x's rank)."""
    axis = normalize_axis(axis, x.ndim, "gather")
    if not isinstance(index, Tensor) or not index.dtype.is_int:
        raise TypeError("gather: index must be an integer DSL tensor")
    if index.ndim != x.ndim:
        raise ValueError(f"gather: index rank {index.ndim} must equal input rank {x.ndim}")
    for k in range(x.ndim):
        if k != axis and index.shape[k] != x.shape[k]:
            raise ValueError(f"gather: index shape {shape_str(index.shape)} does not match input "
                             f"{shape_str(x.shape)} outside axis {axis}")
    return Tensor(index.shape, x.dtype, GatherSrc(x, index, axis, IndexCheck("gather", axis, wrap=False)))


# -- reductions -----------------------------------------------------------------------------------
def _axes(x: Tensor, axis, what: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, x.ndim, what) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"{what}: repeated axis in {tuple(axis)}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, x.ndim, what),)


def _reduce(op: ReduceOp, x: Tensor, axes: tuple[int, ...], keepdim: bool) -> tuple[Tensor, ...]:
    """The outputs of ``op`` over ``axes``, in the dtypes ``ir.reductions`` gives them, except that an
    output of ``x``'s compute dtype keeps ``x``'s dtype (a float16 sum is float16, as in torch)."""
    kept = tuple(s for k, s in enumerate(x.shape) if k not in axes)
    node_id = next(_counter)
    compute = dt.compute_dtype(x.dtype)
    results = []
    for out, dtype in enumerate(op.spec.output_dtypes(x.dtype)):
        t = Tensor(kept, x.dtype if dtype == compute else dtype, ReductionSrc(op, x, axes, out, node_id))
        results.append(_keepdim(t, x, axes) if keepdim else t)
    return tuple(results)


def _keepdim(t: Tensor, x: Tensor, axes) -> Tensor:
    key = tuple(None if k in axes else slice(None) for k in range(x.ndim))
    return getitem(t, key) if axes else t


def _reduction(op: ReduceOp, doc: str):
    """``fn(x, axis=None, keepdim=False)`` reducing with ``op`` (any/all test elements for != 0)."""
    def fn(x: Tensor, axis=None, keepdim: bool = False) -> Tensor:
        flags = op in (ReduceOp.ANY, ReduceOp.ALL)
        return _reduce(op, cast(x, dt.bool_) if flags else x, _axes(x, axis, op.value), keepdim)[0]

    fn.__name__, fn.__doc__ = op.value, doc
    return fn


sum = _reduction(ReduceOp.SUM,  # noqa: A001
                 "Sum over ``axis`` (all when None); integer and bool inputs sum to int64 like torch.")
prod = _reduction(ReduceOp.PROD, "Product over ``axis``.")
max = _reduction(ReduceOp.MAX, "Maximum over ``axis``; NaN if any element is NaN.")  # noqa: A001
min = _reduction(ReduceOp.MIN, "Minimum over ``axis``; NaN if any element is NaN.")  # noqa: A001
any = _reduction(ReduceOp.ANY, "True where any element over ``axis`` is nonzero.")  # noqa: A001
all = _reduction(ReduceOp.ALL, "True where every element over ``axis`` is nonzero.")  # noqa: A001


def _count(x: Tensor, axes) -> Index:
    return product(x.shape[a] for a in axes)


def mean(x: Tensor, axis=None, keepdim: bool = False) -> Tensor:
    """Mean over ``axis`` (floating-point inputs only, like torch)."""
    if not x.dtype.is_float:
        raise TypeError(f"mean: input dtype must be floating point, got {x.dtype.name}")
    axes = _axes(x, axis, "mean")
    total = _reduce(ReduceOp.SUM, x, axes, keepdim)[0]
    return _div_by_count(total, _count(x, axes))


def _div_by_count(t: Tensor, count: Index) -> Tensor:
    n = count.as_int()
    if n is not None:
        return apply(Op.TRUEDIV, t, float(n)) if n else apply(Op.MUL, t, math.nan)
    return apply(Op.TRUEDIV, t, _size_value(count, t))


def _size_value(count: Index, like: Tensor) -> Tensor:
    """A symbolic element count as a 0-d float tensor of ``like``'s dtype."""
    return Tensor((), like.dtype, PointwiseSrc(Op.CAST, (count,)))


def _arg(op: ReduceOp, doc: str):
    """``fn(x, axis=None, keepdim=False)``: the position ``op`` finds along one axis, or in ``x``
    flattened when ``axis`` is None."""
    def fn(x: Tensor, axis=None, keepdim: bool = False) -> Tensor:
        if axis is None:
            out = _reduce(op, reshape(x, (product(x.shape),)), (0,), False)[0]
            return reshape(out, (1,) * x.ndim) if keepdim else out
        return _reduce(op, x, (normalize_axis(axis, x.ndim, op.value),), keepdim)[0]

    fn.__name__, fn.__doc__ = op.value, doc
    return fn


argmax = _arg(ReduceOp.ARGMAX, "Index of the first maximum along ``axis`` (flattened when None), as int64.")
argmin = _arg(ReduceOp.ARGMIN, "Index of the first minimum along ``axis`` (flattened when None), as int64.")


def var_mean(x: Tensor, axis=None, correction: int = 1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """``(var, mean)`` over ``axis`` in one Welford pass; var divides by ``n - correction``."""
    if not x.dtype.is_float:
        raise TypeError(f"var_mean: input dtype must be floating point, got {x.dtype.name}")
    axes = _axes(x, axis, "var_mean")
    mean_t, m2 = _reduce(ReduceOp.WELFORD, x, axes, keepdim)
    n = _count(x, axes)
    c = n.as_int()
    if c is not None:
        denom = float(c - correction)
        var = apply(Op.TRUEDIV, m2, denom) if denom > 0 else apply(Op.MUL, m2, math.inf)
    else:
        var = apply(Op.TRUEDIV, m2, apply(Op.SUB, _size_value(n, m2), float(correction)))
    return var, mean_t


# -- operators on Tensor ------------------------------------------------------------------------
def _binary(op: Op, reflected: bool = False):
    if reflected:
        return lambda self, other: apply(op, other, self)
    return lambda self, other: apply(op, self, other)


def _bool_or_bits(logical: Op, bitwise: Op):
    def fn(self, other):
        dtype = result_dtype((self, other))
        return apply(logical if dtype.is_bool else bitwise, self, other)

    return fn


def _invert(self: Tensor) -> Tensor:
    return apply(Op.NOT if self.dtype.is_bool else Op.BITNOT, self)


_ARITHMETIC = (Op.ADD, Op.SUB, Op.MUL, Op.TRUEDIV, Op.FLOORDIV, Op.MOD, Op.POW)  # __add__, __radd__, ...
_BOOL_OR_BITS = {"and": (Op.AND, Op.BITAND), "or": (Op.OR, Op.BITOR), "xor": (Op.XOR, Op.BITXOR)}
_OPERATORS = {
    **{f"__{op.name.lower()}__": _binary(op) for op in _ARITHMETIC + tuple(COMPARISONS)},
    **{f"__r{op.name.lower()}__": _binary(op, True) for op in _ARITHMETIC},
    **{f"__{r}{name}__": _bool_or_bits(*ops) for name, ops in _BOOL_OR_BITS.items() for r in ("", "r")},
    "__neg__": lambda self: apply(Op.NEG, self),
    "__abs__": lambda self: apply(Op.ABS, self),
    "__invert__": _invert,
    "__getitem__": getitem,
    "__hash__": lambda self: hash(self.id),
}
_METHODS = {
    "sum": sum, "prod": prod, "max": max, "min": min, "mean": mean, "argmax": argmax,
    "argmin": argmin, "any": any, "all": all, "var_mean": var_mean, "permute": permute,
    "reshape": reshape, "broadcast_to": broadcast_to, "exp": exp, "log": log, "sqrt": sqrt,
    "rsqrt": rsqrt, "abs": abs, "sigmoid": sigmoid, "tanh": tanh, "cast": cast,
}
for _name, _fn in {**_OPERATORS, **_METHODS}.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
