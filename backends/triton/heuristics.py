"""Default Triton configs from a kernel's sizes, used when the tuning database has no entry.

Rules (fp32 sizes; 16-bit dtypes allow rows twice as long):

* pointwise: ``XBLOCK`` 1024 (less for tiny kernels), 4 warps; 32x32 2D tiles for transposes;
* rows of at most 8192 elements: persistent, ``RBLOCK = next_pow2(row)``, several rows per
  program when rows are short; 4 warps up to RBLOCK 1024, 8 up to 4096, 16 above;
* longer rows (or rows of unknown length): looped in chunks of ``RBLOCK`` 1024 (or 2048);
* reductions whose reduced dim is strided (e.g. a sum over dim 0): tiles wide in ``x`` so each
  load stays contiguous along the rows;
* full reductions: persistent in one program when small, else split across about two programs
  per multiprocessor and combined by a second launch.
"""
from __future__ import annotations

import functools

import torch

from ...ir.expr import loads
from ...ir.index import as_var, product
from ...scheduler.kernel import Kernel, Strategy
from .indexing import contiguous_var, transposed_split
from .params import TritonConfig, next_pow2

H200_SMS = 132
PERSISTENT_ROW_BYTES = 8192 * 4
LOOPED_RBLOCK_BYTES = 1024 * 4


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """Streaming multiprocessors of the current CUDA device (132, an H200's, without one)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return H200_SMS


def _warps(rblock: int) -> int:
    return 4 if rblock <= 1024 else 8 if rblock <= 4096 else 16


def _prev_pow2(n: int) -> int:
    return 1 if n < 1 else 1 << (int(n).bit_length() - 1)


def _elem_bytes(kernel: Kernel) -> int:
    sizes = [kernel.buffers[b].dtype.itemsize for b in kernel.inputs] or [4]
    return max(2, min(max(sizes), 4))


def _strided_reduction(kernel: Kernel) -> bool:
    """True when the main loads move contiguously along the rows rather than the reduced dims."""
    rvars = {as_var(v) for v in kernel.rvars()}
    votes = 0
    for r in kernel.reductions:
        for node in loads(r.body):
            var = contiguous_var(kernel, node.buffer, node.index)
            votes += 1 if var is not None and var not in rvars else -1 if var in rvars else 0
    return votes > 0


def default_config(kernel: Kernel) -> TritonConfig:
    """The heuristic config for ``kernel`` (see the module docstring)."""
    if not kernel.reductions:
        return _pointwise(kernel)
    if not kernel.pdomain:
        return _full_reduction(kernel)
    return _rows(kernel)


def _pointwise(kernel: Kernel) -> TritonConfig:
    numel = product(kernel.pdomain).as_int()
    if transposed_split(kernel) is not None:
        return TritonConfig(XBLOCK=32, YBLOCK=32, num_warps=4)
    xblock = 1024 if numel is None else max(16, min(1024, next_pow2(numel)))
    return TritonConfig(XBLOCK=xblock, num_warps=4 if xblock >= 512 else 2)


def _rows(kernel: Kernel) -> TritonConfig:
    rows = product(kernel.pdomain).as_int()
    row = product(kernel.rdomain).as_int()
    item = _elem_bytes(kernel)
    if _strided_reduction(kernel):
        rblock = min(next_pow2(row), 64) if row else 64
        xblock = 64 if rows is None else max(1, min(64, next_pow2(rows)))
        strategy = Strategy.PERSISTENT if row is not None and row <= rblock else Strategy.LOOPED
        return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=4, strategy=strategy)
    if row is not None and row * item <= PERSISTENT_ROW_BYTES:
        rblock = next_pow2(row)
        xblock = max(1, min(4096 // rblock, _rows_per_program(rows)))
        return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=_warps(rblock * xblock),
                            strategy=Strategy.PERSISTENT)
    rblock = LOOPED_RBLOCK_BYTES // item
    return TritonConfig(XBLOCK=1, RBLOCK=rblock, num_warps=_warps(rblock), strategy=Strategy.LOOPED)


def _rows_per_program(rows: int | None) -> int:
    """Rows per program that still leave two programs per multiprocessor."""
    if rows is None:
        return 1
    return _prev_pow2(max(1, rows // (2 * sm_count())))


def _full_reduction(kernel: Kernel) -> TritonConfig:
    n = product(kernel.rdomain).as_int()
    item = _elem_bytes(kernel)
    if n is not None and n * item <= PERSISTENT_ROW_BYTES:
        rblock = next_pow2(n)
        return TritonConfig(XBLOCK=1, RBLOCK=rblock, num_warps=_warps(rblock), strategy=Strategy.PERSISTENT)
    rblock = LOOPED_RBLOCK_BYTES // item
    chunks = 2 * sm_count() if n is None else max(2, min(2 * sm_count(), -(-n // (rblock * 4))))
    return TritonConfig(XBLOCK=1, RBLOCK=rblock, num_warps=_warps(rblock), strategy=Strategy.SPLIT,
                        SPLIT=min(chunks, 1024))
