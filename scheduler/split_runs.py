"""Reductions whose rows are runs far apart in memory, split so that every kernel reads in memory
order.

Batch-norm statistics over NCHW activations reduce each channel over (N, H, W): a row of N runs
of H * W contiguous elements, C * H * W apart. One kernel walking the rows reads memory run by
run, out of order. A GPU gets only C rows to spread over its SMs (a (32, 64, 56, 56) mean took
0.32 ms on an H100 where Inductor took 0.03), and a CPU's prefetchers start over at each run
(2.29 ms where ``x.sum((2, 3)).sum(0)`` took 0.53). The kernel becomes up to three:

- **partials**: one row per run, the rows in the order the runs lie in memory (N x C rows of
  H * W), each storing its row's reduction outputs;
- **combine**: the original rows, each reducing its N partials, then the original row stores;
- **apply**: the element stores of later phases (batch norm's normalization), one pointwise
  kernel over the whole domain that reads the statistics the combine stored.

Sums, products, max, min, any and all combine as they reduce; a max's NaN survives as a NaN
partial. Welford's partials all count the same n elements, so the combined mean is the mean of
the partial means and ``m2 = sum(m2_i) + n * sum((mean_i - mean)^2)`` (Chan et al.): two phases
of sums over the partials, exact in exact arithmetic and as stable as Welford itself.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.expr import AccRef, Apply, Const, Expr, Load, loads, rewrite, substitute_vars, walk
from ..ir.index import Index, as_var, product, stride_along
from ..ir.nodes import Buffer, KReduction, KStore, Layout, domain_vars
from ..ir.ops import Op, ReduceOp
from .kernel import Kernel
from .merge_dims import merged_reduced_dims
from .reduced_order import memory_order

MIN_RUN = 32  # elements: a shorter run costs more in per-row work and partials than it saves
COMBINE_AS_REDUCED = frozenset({ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.ANY,
                                ReduceOp.ALL})


def split_into_runs(kernel: Kernel, rows_below: int | None = None) -> tuple[list[Kernel], dict[str, Buffer]]:
    """``kernel`` as partials, combine and (when it has element stores) apply kernels, with the
    buffers they add; ``[kernel]`` and no buffers when its rows are not runs apart
    (``run_split``), or are ``rows_below`` or more."""
    rows = product(kernel.pdomain).as_int()
    merged = run_split(kernel) if rows_below is None or (rows is not None and rows < rows_below) else None
    if merged is None:
        return [kernel], {}
    order = _run_order(merged)
    partials, parts = _partials(kernel.name, merged, order)
    combine, stats = _combine(kernel.name, merged, order, parts, _read_by_element_stores(kernel))
    kernels = [partials, combine] + ([_apply(kernel, stats)] if kernel.elem_stores else [])
    added = {b.name: b for b in [*parts.values(), *stats.values()]}
    buffers = {**kernel.buffers, **added}
    return [replace(k, buffers=buffers) for k in kernels], added


def run_split(kernel: Kernel) -> Kernel | None:
    """``kernel`` with its innermost reduced dims merged into one run when it should be split
    (module docstring), else None: a reduction of rows (not a full one) of known sizes, every
    reduction of level 0 and of a kind that combines, whose merged reduced dims still number two
    or more, the innermost a run of at least ``MIN_RUN`` elements that every load walking it
    walks contiguously."""
    if (not kernel.pdomain or not kernel.reductions or kernel.col_stores
            or any(r.level or r.across or not _combines(r.op) for r in kernel.reductions)
            or any(d.as_int() is None for d in kernel.pdomain + kernel.rdomain)
            or _reloads(kernel)):
        return None
    merged = merged_reduced_dims(kernel)
    if len(merged.rdomain) < 2 or merged.rdomain[-1].as_int() < MIN_RUN:
        return None
    inner = as_var(merged.rvars()[-1])
    strides = [stride_along(_flat(merged, ld), inner) for r in merged.reductions for ld in loads(r.body)]
    if 1 not in strides or any(s not in (0, 1) for s in strides):
        return None
    return merged


def _combines(op: ReduceOp) -> bool:
    return op in COMBINE_AS_REDUCED or op is ReduceOp.WELFORD


def _reloads(kernel: Kernel) -> bool:
    """Whether the kernel loads a buffer it stores (a value stored in one phase, read in a later)."""
    stored = set(kernel.outputs)
    return any(ld.buffer in stored for e in kernel.expressions() for ld in loads(e))


def _flat(kernel: Kernel, ld: Load) -> Index:
    return kernel.buffers[ld.buffer].layout.flat_index(ld.index)


def _run_order(merged: Kernel) -> list[Index]:
    """The row dims of the partials kernel (``merged``'s row dims and outer reduced dims), in the
    order the runs lie in ``merged``'s largest input."""
    biggest = max((ld for r in merged.reductions for ld in loads(r.body)),
                  key=lambda ld: merged.buffers[ld.buffer].nbytes.as_int() or 0)
    return memory_order(list(merged.pvars()) + list(merged.rvars()[:-1]), _flat(merged, biggest))


def _partials(name: str, merged: Kernel, order: list[Index]) -> tuple[Kernel, dict[tuple[str, int], Buffer]]:
    """The kernel reducing each run, its rows in ``order``, and the buffers (one per reduction
    output, keyed by (reduction, output)) it stores."""
    pdomain = tuple(as_var(v).size for v in order)
    new_p = domain_vars(pdomain, "p")
    (new_r,) = domain_vars(merged.rdomain[-1:], "r")
    mapping = {as_var(v): p for v, p in zip(order, new_p)} | {as_var(merged.rvars()[-1]): new_r}
    memo: dict = {}
    reductions, stores, parts = [], [], {}
    for r in merged.reductions:
        reductions.append(replace(r, body=substitute_vars(r.body, mapping, memo)))
        for o, dtype in enumerate(r.op.spec.output_dtypes(r.dtype)):
            parts[(r.name, o)] = Buffer(f"{name}_{r.name}_part{o}", dtype, Layout.contiguous(pdomain))
            stores.append(KStore(parts[(r.name, o)].name, new_p, AccRef(r.name, o, dtype)))
    return Kernel(f"{name}_partials", pdomain, merged.rdomain[-1:], reductions, [], stores, merged.nodes,
                  merged.buffers), parts


def _combine(name: str, merged: Kernel, order: list[Index], parts: dict[tuple[str, int], Buffer],
             stats: dict[tuple[str, int], AccRef]) -> tuple[Kernel, dict[tuple[str, int], Buffer]]:
    """The kernel reducing each original row's partials into its reduction outputs, with the
    original row stores, and storing the outputs in ``stats`` for the apply kernel; and those
    stored statistics' buffers."""
    outer = merged.rdomain[:-1]
    new_r = domain_vars(outer, "r")
    to_new = {v: r for v, r in zip(merged.rvars()[:-1], new_r)}
    index = tuple(to_new.get(v, v) for v in order)  # the partials' index in this kernel's variables
    count = product(outer).as_int()
    reductions, value_of = [], {}
    for r in merged.reductions:
        if r.op is ReduceOp.WELFORD:
            found, (mean, m2) = _welford_combine(r, parts, index, count, merged.rdomain[-1].as_int())
            reductions += found
            value_of[(r.name, 0)], value_of[(r.name, 1)] = mean, m2
            continue
        part = parts[(r.name, 0)]
        reductions.append(KReduction(r.name, r.op, Load(part.name, index, part.dtype), part.dtype, 0))

    def reread(node: Expr, _) -> Expr | None:
        if isinstance(node, AccRef) and (node.name, node.output) in value_of:
            value = value_of[(node.name, node.output)]
            return value if value.dtype == node.dtype else Apply(Op.CAST, (value,), node.dtype)
        return None

    memo: dict = {}
    stores = [replace(s, value=rewrite(s.value, reread, memo)) for s in merged.row_stores]
    stat_buffers = {}
    for key, ref in stats.items():
        stat_buffers[key] = Buffer(f"{name}_{ref.name}_stat{ref.output}", ref.dtype, Layout.contiguous(merged.pdomain))
        stores.append(KStore(stat_buffers[key].name, merged.pvars(), rewrite(ref, reread, memo)))
    return Kernel(f"{name}_combine", merged.pdomain, outer, reductions, [], stores, merged.nodes,
                  merged.buffers), stat_buffers


def _welford_combine(r: KReduction, parts, index: tuple[Index, ...], count: int, n: int):
    """The reductions combining Welford partials of ``n`` elements each, ``count`` of them, and the
    (mean, m2) they give (module docstring)."""
    mean_part, m2_part = parts[(r.name, 0)], parts[(r.name, 1)]
    dtype = mean_part.dtype
    means = Load(mean_part.name, index, dtype)
    sum_means, sum_m2, sum_dev = (f"{r.name}_{s}" for s in ("means", "m2s", "devs"))
    mean = Apply(Op.TRUEDIV, (AccRef(sum_means, 0, dtype), Const(float(count), dtype)), dtype)
    dev = Apply(Op.SUB, (means, mean), dtype)
    reductions = [KReduction(sum_means, ReduceOp.SUM, means, dtype, 0),
                  KReduction(sum_m2, ReduceOp.SUM, Load(m2_part.name, index, dtype), dtype, 0),
                  KReduction(sum_dev, ReduceOp.SUM, Apply(Op.MUL, (dev, dev), dtype), dtype, 1)]
    spread = Apply(Op.MUL, (Const(float(n), dtype), AccRef(sum_dev, 0, dtype)), dtype)
    return reductions, (mean, Apply(Op.ADD, (AccRef(sum_m2, 0, dtype), spread), dtype))


def _read_by_element_stores(kernel: Kernel) -> dict[tuple[str, int], AccRef]:
    """The reduction outputs ``kernel``'s element stores read, by (reduction, output)."""
    found = {(node.name, node.output): node for s in kernel.elem_stores for node in walk(s.value)
             if isinstance(node, AccRef)}
    return dict(sorted(found.items()))


def _apply(kernel: Kernel, stats: dict[tuple[str, int], Buffer]) -> Kernel:
    """``kernel``'s element stores as a pointwise kernel over its rows and reduced dims, in the
    order its first store walks memory, reading the statistics the combine kernel stored."""
    first = kernel.elem_stores[0]
    dims = memory_order(list(kernel.pvars() + kernel.rvars()),
                        kernel.buffers[first.buffer].layout.flat_index(first.index))
    domain = tuple(as_var(v).size for v in dims)
    new_p = domain_vars(domain, "p")
    mapping = {as_var(v): p for v, p in zip(dims, new_p)}
    row = tuple(i.subs(mapping) for i in kernel.pvars())

    def load_stat(node: Expr, _) -> Expr | None:
        if isinstance(node, AccRef):
            buf = stats[(node.name, node.output)]
            return Load(buf.name, row, buf.dtype)
        return None

    memo: dict = {}
    stores = [KStore(s.buffer, tuple(i.subs(mapping) for i in s.index),
                     rewrite(substitute_vars(s.value, mapping, memo), load_stat), 0) for s in kernel.elem_stores]
    return Kernel(f"{kernel.name}_apply", domain, (), [], stores, [], kernel.nodes, kernel.buffers)
