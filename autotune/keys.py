"""Tuning keys and study names of kernels.

A kernel with symbolic sizes is keyed by the kernel *specialized* at the call's symbol values
(``specialize``): the symbols replaced by their values and the size constants that creates
folded the way the DSL folds them for integer sizes. Its canonical text, and so its hash, is then
the one a static compile at those sizes makes, so winners tuned by either serve the other.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import weakref
from typing import Any, Mapping

from ..db.api import HardwareInfo, TuningKey
from ..ir.expr import Apply, Const, Expr, IndexValue, Load, rewrite, substitute_vars, walk
from ..ir.index import Index, Indirect, Sym, evaluate
from ..ir.nodes import Buffer, Layout
from ..ir.ops import Op
from ..scheduler.kernel import Kernel, signature

# Float arithmetic on two constants, as Python evaluates it when the DSL folds integer sizes, and
# comparisons (``n > 0`` guards a reduction over a possibly empty dim).
_FOLD = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul}
_COMPARE = {Op.EQ: operator.eq, Op.NE: operator.ne, Op.LT: operator.lt, Op.LE: operator.le,
            Op.GT: operator.gt, Op.GE: operator.ge}
_FOLDABLE = {Op.CAST, Op.WHERE, *_FOLD, *_COMPARE}
_HASHES: "weakref.WeakKeyDictionary[Kernel, dict[tuple, str]]" = weakref.WeakKeyDictionary()


def kernel_sizes(kernel: Kernel, env: Mapping[str, int] | None = None) -> tuple[int, ...] | None:
    """Concrete loop sizes (rows then reduced dims), or None if a size is symbolic and unbound."""
    sizes = []
    for n in kernel.pdomain + kernel.rdomain:
        value = n.as_int()
        if value is None:
            try:
                value = evaluate(n, env or {})
            except (KeyError, ValueError):
                return None
        sizes.append(value)
    return tuple(sizes)


def kernel_dtypes(kernel: Kernel) -> tuple[str, ...]:
    """Dtypes of the kernel's buffers: inputs, then outputs."""
    names = list(dict.fromkeys(kernel.inputs + kernel.outputs))
    return tuple(kernel.buffers[n].dtype.name for n in names)


def tuning_key(kernel: Kernel, backend: str, hardware: HardwareInfo,
               env: Mapping[str, int] | None = None) -> TuningKey | None:
    """The key winners of ``kernel`` are stored under (None if its sizes are not known); a kernel
    with symbolic sizes is keyed by its hash specialized at ``env`` (see the module docstring)."""
    sizes = kernel_sizes(kernel, env)
    kernel_hash = kernel_hash_at(kernel, env or {})
    if sizes is None or kernel_hash is None:
        return None
    return TuningKey(kernel_hash, backend, sizes, kernel_dtypes(kernel), hardware)


def kernel_symbols(kernel: Kernel) -> tuple[str, ...]:
    """The symbolic sizes ``kernel`` takes (loop sizes, strides, offsets); empty when static."""
    return signature(kernel).symbols


def kernel_hash_at(kernel: Kernel, env: Mapping[str, int]) -> str | None:
    """The structural hash of ``kernel`` specialized at ``env`` (its own hash when static; None
    when ``env`` lacks one of its symbols). Computed once per kernel and symbol values."""
    names = kernel_symbols(kernel)
    if not names:
        return kernel.structural_hash
    if any(n not in env for n in names):
        return None
    values = tuple(env[n] for n in names)
    known = _HASHES.setdefault(kernel, {})
    if values not in known:
        known[values] = specialize(kernel, dict(zip(names, values))).structural_hash
    return known[values]


def specialize(kernel: Kernel, env: Mapping[str, int]) -> Kernel:
    """``kernel`` with its symbols replaced by the values in ``env``: the loop nest a static
    compile at those sizes schedules (used for keys and for validating configs at those sizes)."""
    mapping = {Sym(name): Index.of(value) for name, value in env.items()}
    memo: dict[Expr, Expr] = {}
    folded: dict[Expr, Expr] = {}

    def index(items: tuple[Index, ...]) -> tuple[Index, ...]:
        return tuple(i.subs(mapping) for i in items)

    constant: set[Expr] = set()  # size values that were constants before: a static trace keeps them

    def fold(node: Expr, visit) -> Expr | None:
        if isinstance(node, Load):
            return _with_indirect_bounds(node, mapping, visit)
        return None if node in constant else _fold_sizes(node, visit)

    def expr(e: Expr) -> Expr:
        constant.update(n for n in walk(e) if isinstance(n, IndexValue) and n.index.as_int() is not None)
        return rewrite(substitute_vars(e, mapping, memo), fold, folded)

    def layout(lay: Layout) -> Layout:
        return Layout(index(lay.sizes), index(lay.strides), lay.offset.subs(mapping))

    return Kernel(
        kernel.name, index(kernel.pdomain), index(kernel.rdomain),
        [dataclasses.replace(r, body=expr(r.body)) for r in kernel.reductions],
        [dataclasses.replace(s, index=index(s.index), value=expr(s.value)) for s in kernel.elem_stores],
        [dataclasses.replace(s, index=index(s.index), value=expr(s.value)) for s in kernel.row_stores],
        list(kernel.nodes), {n: Buffer(b.name, b.dtype, layout(b.layout), b.kind) for n, b in kernel.buffers.items()},
        [dataclasses.replace(s, index=index(s.index), value=expr(s.value)) for s in kernel.col_stores])


def _with_indirect_bounds(node: Load, mapping: Mapping, visit) -> Load:
    """``node`` with the sizes bounding its gathered indices specialized too."""
    index = []
    for i in node.index:
        atoms = {a: Index.of(dataclasses.replace(a, value=visit(a.value), bound=a.bound.subs(mapping)))
                 for a in i.atoms() if isinstance(a, Indirect)}
        index.append(i.subs(atoms) if atoms else i)
    return Load(node.buffer, tuple(index), node.dtype)


def _fold_sizes(node: Expr, visit) -> Expr | None:
    """Fold what specialization made constant: a size read as a value (``index(2048)``), its casts,
    float arithmetic on it (``n - correction``), comparisons (``n > 0``) and the branch they
    select, as the DSL folds integer sizes at trace time. Constants that were already in the
    kernel stay as they are."""
    if isinstance(node, IndexValue):
        value = node.index.as_int()
        return None if value is None else Const(value, node.dtype)
    if not isinstance(node, Apply) or node.op not in _FOLDABLE:
        return None
    args = tuple(visit(a) for a in node.args)
    made = any(new is not old for new, old in zip(args, node.args))
    if node.op is Op.WHERE and isinstance(args[0], Const) and args[0] is not node.args[0]:
        return args[1] if args[0].value else args[2]
    if made and all(isinstance(a, Const) for a in args):
        if node.op in _COMPARE:
            return Const(bool(_COMPARE[node.op](args[0].value, args[1].value)), node.dtype)
        values = [a.value for a in args]
        if node.op is Op.CAST and node.dtype.is_float and not isinstance(values[0], bool):
            return Const(float(values[0]), node.dtype)
        if node.op in _FOLD and node.dtype.is_float and all(a.dtype == node.dtype for a in args):
            return Const(float(_FOLD[node.op](*values)), node.dtype)
    return Apply(node.op, args, node.dtype) if made else node


def study_name(prefix: str, key: TuningKey) -> str:
    """``PREFIX:<tuning key>``: one Optuna study per tuning key."""
    return ":".join((prefix, key.kernel_hash, key.backend, key.sizes_key, key.dtypes_key,
                     key.hardware.fingerprint))


def software_tag(software: Mapping[str, Any]) -> str:
    """A short digest of software versions (trials measured under other versions differ)."""
    text = json.dumps(dict(software), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
