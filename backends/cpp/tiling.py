"""Blocks for pointwise kernels that read an input across its lines (a transpose, a channels-last
input under a row-major output).

Such a kernel's inner loop walks its stores contiguously but one input with a stride, one line
per element; the next element of each line comes back an outer iteration later, after the
lines have left L1. Looping over TILE x TILE blocks of (the dim that input is contiguous along,
the innermost dim) reads each of its lines TILE times in a row, while the stores stay
contiguous runs of TILE elements.

Inside a block, each element of such an input is still its own load (g++ writes the strided
loads as scalar loads and inserts). With ``CppConfig.transposed_reads`` "registers", an input
contiguous along the block's outer dim (float32; bfloat16 and float16 widened as loaded) is read
whole: 16 vector loads of its lines and 64 shuffles (``ln_transpose16``) fill a float array the
block's loops then read contiguously; blocks cut by the domain's end keep the element loads.
Measured (kernel alone, one thread): on a 2-core Xeon (AVX-512) ``x.t() + y`` 512 x 512 1.41x,
64 x 4096 1.56x, 2048 x 3001 1.00x, 1024 x 768 0.86x, and 0.6x where the row stride is not a
whole number of lines (1000 x 777: each row load spans two); on a Zen 4 EPYC 1.4-5.1x whatever
the stride (2026-12-07; two threads, float32). So "auto"
takes registers on AVX-512 CPUs where every such input's row stride is a whole number of 64-byte
lines, and for other strides where this CPU's probe measured them faster (``transpose_probe``);
the tuner may choose either way.
"""
from __future__ import annotations

from ...core.hardware import this_cpu
from ...ir import dtypes as dt
from ...ir.expr import Load, walk
from ...ir.index import as_var, stride_along
from ...scheduler.kernel import Kernel
from .params import CppConfig
from .transpose_probe import split_lines_in_registers

TILE = 16  # elements a side: one 64-byte line of float32 along the input's contiguous dim
LINE_BYTES = 64


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


TRANSPOSES = {dt.float32: "ln_transpose16", dt.bfloat16: "ln_transpose16_bf16", dt.float16: "ln_transpose16_f16"}


def block_reads(kernel: Kernel, t: int) -> dict[Load, int]:
    """The loads of ``kernel`` (tiled along domain dim ``t``) that ``ln_transpose16`` (or its
    16-bit variants, ``TRANSPOSES``) can read a block at a time, each with its row stride, in
    elements: loads contiguous along dim ``t`` and strided by a constant along the innermost dim."""
    pv = [as_var(v) for v in kernel.pvars()]
    found: dict[Load, int] = {}
    for s in kernel.elem_stores:
        for node in walk(s.value):
            if not isinstance(node, Load) or node.dtype not in TRANSPOSES or node in found:
                continue
            flat = kernel.buffers[node.buffer].layout.flat_index(node.index)
            stride = stride_along(flat, pv[-1])
            if stride_along(flat, pv[t]) == 1 and stride is not None and abs(stride) >= TILE:
                found[node] = stride
    return found


def reads_in_registers(kernel: Kernel, t: int, config: CppConfig) -> dict[Load, int]:
    """``block_reads`` if ``config`` has them transposed in registers (the module docstring says
    when "auto" does), else none."""
    reads = block_reads(kernel, t)
    if config.transposed_reads == "gather" or not reads:
        return {}
    if config.transposed_reads == "registers":
        return reads
    if "avx512f" not in this_cpu().capability.split(","):
        return {}
    whole_lines = all(stride * load.dtype.itemsize % LINE_BYTES == 0 for load, stride in reads.items())
    return reads if whole_lines or split_lines_in_registers() else {}
