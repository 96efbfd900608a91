"""Reduced dims in memory order.

A reduction over a permuted view loops over its reduced dims in the view's order:
``x.transpose(0, 2).contiguous().mean((0, 2))`` of a (700, 256, 64) ``x`` fuses into one kernel
whose innermost reduced dim steps through ``x`` 16384 elements at a time, and every load misses
(on the CPU it took 15x Inductor's time, which reads ``x`` in order). Where the result does not
depend on the order of the reduced elements, the reduced dims are reordered as the kernel's
largest load lies in memory, the smallest stride innermost: sums, products, extremes, any/all,
Welford and the online softmax's sums. Arg-reductions (ties go to the first position in the
view's order) and reductions across rows (their results are stored by reduced position) keep
their order.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.expr import loads, substitute_vars
from ..ir.index import Index, as_var, stride_along
from ..ir.nodes import KStore, domain_vars
from .kernel import Kernel


def memory_order(dims: list[Index], flat: Index) -> list[Index]:
    """``dims`` outermost first as ``flat`` walks them: by falling stride, ties in their order."""
    return sorted(dims, key=lambda v: -(stride_along(flat, as_var(v)) or 0))


def reduced_in_memory_order(kernel: Kernel) -> Kernel:
    """``kernel`` with its reduced dims in the order its largest load walks memory (module
    docstring); ``kernel`` itself where they are in that order already, or may not move, or the
    load's strides along them are not constants."""
    if len(kernel.rdomain) < 2 or kernel.col_stores or any(r.across or r.op.is_arg for r in kernel.reductions):
        return kernel
    reads = [ld for r in kernel.reductions for ld in loads(r.body)]
    if not reads:
        return kernel
    biggest = max(reads, key=lambda ld: kernel.buffers[ld.buffer].nbytes.as_int() or 0)
    flat = kernel.buffers[biggest.buffer].layout.flat_index(biggest.index)
    rvars = list(kernel.rvars())
    if any(stride_along(flat, as_var(v)) is None for v in rvars):
        return kernel
    order = memory_order(rvars, flat)
    if order == rvars:
        return kernel
    rdomain = tuple(as_var(v).size for v in order)
    mapping = {as_var(v): r for v, r in zip(order, domain_vars(rdomain, "r"))}
    memo: dict = {}

    def stores(kind: list[KStore]) -> list[KStore]:
        return [replace(s, index=tuple(i.subs(mapping) for i in s.index), value=substitute_vars(s.value, mapping, memo))
                for s in kind]
    reductions = [replace(r, body=substitute_vars(r.body, mapping, memo)) for r in kernel.reductions]
    return replace(kernel, rdomain=rdomain, reductions=reductions, elem_stores=stores(kernel.elem_stores),
                   row_stores=stores(kernel.row_stores))
