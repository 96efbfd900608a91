"""Blocks for pointwise kernels that read an input across its lines (a transpose, a channels-last
input under a row-major output).

Such a kernel's inner loop walks its stores contiguously but one input with a stride, one line
per element; the next element of each line comes back an outer iteration later, after the
lines have left L1. Looping over TILE x TILE blocks of (the dim that input is contiguous along,
the innermost dim) reads each of its lines TILE times in a row, while the stores stay
contiguous runs of TILE elements.
"""
from __future__ import annotations

from ...ir.expr import Load, walk
from ...ir.index import as_var, stride_along
from ...scheduler.kernel import Kernel

TILE = 16  # elements a side: one 64-byte line of float32 along the input's contiguous dim


def transposed_dim(kernel: Kernel) -> int | None:
    """The domain dim to block with the innermost one, or None to keep plain loops: a pointwise
    kernel whose stores are contiguous along the innermost dim, one of whose loads is strided
    along it and contiguous along another dim, both dims spanning at least a block."""
    if kernel.reductions or kernel.row_stores or kernel.col_stores or len(kernel.pdomain) < 2:
        return None
    pv = [as_var(v) for v in kernel.pvars()]
    sizes = [s.as_int() for s in kernel.pdomain]
    inner = pv[-1]
    if sizes[-1] is None or sizes[-1] < TILE:
        return None
    for s in kernel.elem_stores:
        if stride_along(kernel.buffers[s.buffer].layout.flat_index(s.index), inner) != 1:
            return None
    for s in kernel.elem_stores:
        for node in walk(s.value):
            if not isinstance(node, Load):
                continue
            flat = kernel.buffers[node.buffer].layout.flat_index(node.index)
            if stride_along(flat, inner) in (0, 1, None):
                continue
            for k, v in enumerate(pv[:-1]):
                if stride_along(flat, v) == 1 and sizes[k] is not None and sizes[k] >= TILE:
                    return k
    return None
