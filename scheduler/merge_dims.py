"""Kernels whose inner dims every access walks as one run are written over one dim: the
innermost dims of a pointwise kernel, and the innermost reduced dims of a reduction.

A kernel over (8, 64, 32, 32) whose loads and stores all step through the last two dims as one
contiguous run (NCHW activations, 32x32 images) would otherwise be written as a parallel loop over
8 x 64 x 32 rows of 32 elements: a vector loop of two iterations, and everything that depends
only on the outer dims (a group norm's statistics, a channel's scale) worked out again for each
row of 32. Merged, the inner loop runs over 1024 elements, and what does not change along it is
computed once per 1024.

Dims ``a`` (size A) and ``b`` (size B, innermost) merge when every flat index the kernel reads
or writes is affine in both with ``stride(a) == B * stride(b)`` (both may be 0), and no index
value, indirect position or product uses them otherwise. The merged variable ``q`` stands in for
``a = q // B`` and ``b = q % B``, which every flat index recombines into ``stride(b) * q``.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.expr import IndexValue, Load, substitute_vars, walk
from ..ir.index import Index, Var, as_var, stride_along
from ..ir.nodes import KStore
from .kernel import Kernel


def merged_inner_dims(kernel: Kernel) -> Kernel:
    """``kernel`` with its innermost dims merged while ``_mergeable`` allows; ``kernel`` itself
    when it has reductions or cannot merge its last two dims."""
    if kernel.reductions or kernel.row_stores or kernel.col_stores:
        return kernel
    while len(kernel.pdomain) >= 2 and _mergeable(kernel, "pdomain"):
        kernel = _merge_last_two(kernel, "pdomain")
    return kernel


def merged_reduced_dims(kernel: Kernel) -> Kernel:
    """``kernel`` with its innermost reduced dims merged while every access walks them as one
    run: a mean over the (H, W) of NCHW activations, or a group norm's (C / G, H, W), then takes
    the vectorized paths written for one reduced dim instead of scalar nested loops (a variance
    over (32, 3136) ran scalar Welford updates, one division per element). ``kernel`` itself when
    it has reductions across rows (their results are stored by reduced position)."""
    if not kernel.reductions or kernel.col_stores or any(r.across for r in kernel.reductions):
        return kernel
    while len(kernel.rdomain) >= 2 and _mergeable(kernel, "rdomain"):
        kernel = _merge_last_two(kernel, "rdomain")
    return kernel


def _dims(kernel: Kernel, field: str) -> tuple[list[Var], tuple[Index, ...]]:
    """The loop variables and sizes of ``kernel``'s ``field`` ("pdomain" or "rdomain")."""
    vars_ = kernel.pvars() if field == "pdomain" else kernel.rvars()
    return [as_var(v) for v in vars_], getattr(kernel, field)


def _mergeable(kernel: Kernel, field: str) -> bool:
    """True if every access walks the last two dims of ``field`` as one run (module docstring)."""
    vars_, domain = _dims(kernel, field)
    a, b = vars_[-2], vars_[-1]
    inner, outer = domain[-1].as_int(), domain[-2].as_int()
    if inner is None or outer is None or min(inner, outer) < 1:
        return False  # symbolic, or nothing to run
    accesses = [(s.buffer, s.index) for s in kernel.elem_stores + kernel.row_stores]
    for root in kernel.expressions():
        for node in walk(root):
            if isinstance(node, IndexValue) and ({a, b} & node.index.atoms()):
                return False  # the position itself is a value (iota, a mask)
            if isinstance(node, Load):
                accesses.append((node.buffer, node.index))
    for buffer, index in accesses:
        flat = kernel.buffers[buffer].layout.flat_index(index)
        sa, sb = stride_along(flat, a), stride_along(flat, b)
        if sa is None or sb is None or sa != inner * sb:
            return False
    return True


def _merge_last_two(kernel: Kernel, field: str) -> Kernel:
    """``kernel`` with the last two dims of its ``field`` ("pdomain" or "rdomain") as one."""
    vars_, domain = _dims(kernel, field)
    inner = domain[-1]
    merged_domain = (*domain[:-2], domain[-2] * inner)
    merged = Index.of(Var(vars_[-2].name, merged_domain[-1]))
    mapping = {vars_[-2]: merged // inner, vars_[-1]: merged % inner}
    memo: dict = {}

    def stores(kind):
        return [KStore(s.buffer, tuple(i.subs(mapping) for i in s.index), substitute_vars(s.value, mapping, memo),
                       s.phase) for s in kind]
    reductions = [replace(r, body=substitute_vars(r.body, mapping, memo)) for r in kernel.reductions]
    return replace(kernel, **{field: merged_domain}, elem_stores=stores(kernel.elem_stores),
                   row_stores=stores(kernel.row_stores), reductions=reductions)
