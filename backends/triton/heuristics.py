"""Default Triton configs from a kernel's sizes, used when the tuning database has no entry.

Rules, in elements (16-bit values are computed in float32, so they take the same registers),
checked on an H200 (fractions of copy bandwidth in parentheses):

* pointwise: ``XBLOCK`` 1024 (less for tiny kernels), 4 warps; 64x64 2D tiles with 8 warps for
  transposes (0.94; 32x32: 0.90);
* rows of at most 32768 elements: persistent, ``RBLOCK = next_pow2(row)``, several rows per
  program when rows are short; 4 warps up to RBLOCK 1024, 8 up to 4096, 16 up to 16384, 32
  above (softmax 32768x4096: 0.95; 4096x32768: 0.95, where looping over the row three times
  reaches 0.66; layernorm 4096x32768: 0.90 with 32 warps, 0.85 with 16). Rows read from 16-bit
  tensors move half the bytes per element, so their tiles take up to four times as many
  elements (bf16 RMSNorm 32768x4096: 4 rows and 16 warps per program 0.95, 1 row and 8 warps
  0.83-0.93);
* longer rows (or rows of unknown length): looped in chunks of 4096 elements with 16 warps
  (chunks of 1024 with 4 warps: 0.48; bf16 rmsnorm 4096x65536: 0.72, persistent: 0.44); rows
  whose softmax statistics take one pass (``scheduler/online_softmax.py``: a row max per chunk)
  in chunks of 4096 (32 sub-rows of 128, ``codegen.SUBROW``) with 8 warps and 2 stages
  (cross-entropy's 4096x128256 bf16 logits: 0.297 ms, 0.83 of copy; chunks of 8192: 0.301;
  2048 with 4 warps: 0.301; sub-rows of 256: 0.307);
* reductions whose reduced dim is strided (a sum over dim 0, a mean over the middle dim): 32x32
  tiles, 8 warps, looped, each load contiguous along the rows (0.83; 64x64 with 4 warps, too few
  programs: 0.34); a one-phase loop of a kernel moving at most four L2s loads with ``evict_first``
  (``heuristics.evict_first``).
  ``x.mean(1)`` on (32, 2048, 512): 0.73 (kernel time; 0.75 with ``evict_first``, where a full
  ``x.sum()`` of the same 134 MB reaches 0.65 and its copy 0.92); 64x32: 0.68, 64x16 with
  4 warps: 0.52, 128x8: 0.31; the reduced dim split over 2-4 programs (split or split_sync): 0.59-0.67;
  none of 50 looped and split tilings up to 512x4 beat 0.74 (kernel time; the same time as
  (64, 512, 1024)'s, so this is the launch and ramp of a 134 MB kernel, not the tiling). Where the
  row tiles give fewer programs than multiprocessors the reduced dim is split (split, a second
  launch combining the partials) into enough programs for four per multiprocessor:
  ``x.sum(0)`` on (262144, 1024), 32 row tiles: 0.23 looped, 0.96 split 32 ways (Inductor 0.94);
  on (32768, 8192), 256 row tiles, it stays looped: 0.97-0.98, split 4 ways 0.97-1.00 across runs.
  A strided row of at most 32 is held whole (persistent) in tiles of about 2048 elements, a warp
  per 1024: softmax over dim 1 of 16x21x128x128, 64 x 32 on 2 warps, 0.66 of copy, as a copy of
  the input (32 x 32 on 8 warps: 0.15);
* rows longer than 32768 elements that a later phase reads again to store elementwise results
  (softmax, log_softmax), or rows too few to fill the GPU (fewer than the SMs, at least 8192
  long, 2**22 elements in all): split_sync, each row split across programs of one launch in
  slices of at most 16384
  elements that stay in registers from the first phase to the last (the input is read once
  instead of three times), or, when rows are few, into enough slices for two programs per
  multiprocessor; 8 warps; SPLIT never exceeds the multiprocessors (all programs of a row run
  at once). The softmax statistics of a slice meet at one barrier (``codegen.
  one_pass_statistics``). Generated, H200 (bench/row_variants.py --generated): log_softmax
  128x262144 0.72 of copy (slices of 8192: 0.55; 16 warps: 0.53; two barriers: 0.65), softmax
  1024x131072 0.79 (two barriers: 0.74; looped: 0.41), 0.84 since its output reuses the slice's
  exps (``codegen._reuse_exp_terms``). The hand-written forms reach 0.77 and 0.94. Rows only reduced
  (cross-entropy's 4096x128256 bf16 logits, two reading phases) stay looped: 0.48, where
  split_sync's short programs wait at two barriers each (0.24-0.33 over 4-32 slices);
* rows whose kernel also reduces across them (a norm's weight gradient, ``KReduction.across``;
  the backend takes them only for rows of at most 32768): persistent tiles of ``ROW_TILE``
  elements, one program per 124 rows, each loading its next rows while it reduces the current
  ones (``codegen._prefetch_rows``), which makes registers the limit: 32 elements per thread,
  16 where every streamed tile is 16-bit. Backward of layernorm 32768x4096 float32: 4 warps
  0.95 of copy (255 registers), 8 warps 0.76 (180 registers: one program per multiprocessor);
  of bf16 RMSNorm: 8 warps 0.88 (126 registers), 4 warps 0.82, 16 warps 0.67. Without the
  prefetch 0.82 and 0.70 at best;
* full reductions: persistent in one program up to 32768 elements (one launch and no workspace:
  the mean over 32768 row losses takes 5.5 µs), else split across eight
  programs per multiprocessor in chunks of 2048 with 16 warps, combined by a second launch
  (2**28 floats: 0.99; two programs per multiprocessor with 4 warps: 0.64).
"""
from __future__ import annotations

import functools

import torch

from ...ir.expr import loads
from ...ir.index import as_var, product
from ...ir.reductions import ReduceOp
from ...scheduler.kernel import Kernel
from ...scheduler.online_softmax import online_softmax
from .indexing import transposed_split
from .params import Strategy, TritonConfig, next_pow2

H200_SMS = 132
PERSISTENT_ROW = 32768
LOOPED_RBLOCK = 4096
ONLINE_RBLOCK = 4096  # looped softmax statistics: 32 sub-rows of 128, a running (max, sum) each
SPLIT_RBLOCK = 2048
FULL_PERSISTENT = 32768  # a full reduction this small runs in one program: one launch beats two
SYNC_SLICE = 16384  # elements of a long row one split_sync program holds in registers
SYNC_WARPS = 8  # warps of a split_sync program (64 elements per thread in a slice of 16384)
FEW_ROWS_SPLIT = 8192  # rows at least this long are split when there are fewer than the SMs ...
FEW_ROWS_SPLIT_NUMEL = 1 << 22  # ... and hold this many elements in all: a smaller split's workspace
# and its zeroing launch cost more host time per call than the GPU time the split saves
STRIDED_SPLIT_NUMEL = 1 << 22  # strided reductions smaller than this never split (a second launch)
STRIDED_MIN_CHUNKS = 8  # RBLOCK chunks of the reduced dim each program of a split strided reduction takes at least
STRIDED_HELD_TILE = 2048  # elements per tile of a strided reduction whose row one tile holds
ROW_TILE = 4096  # elements per persistent row tile (32-bit loads; 16-bit loads take four times as many)


EVICT_FIRST_L2S = 4  # a one-phase kernel moving at most this many L2s of bytes loads with evict_first
H200_L2_BYTES = 60 << 20


@functools.lru_cache(maxsize=None)
def l2_bytes() -> int:
    """L2 cache bytes of the current CUDA device (an H200's without one)."""
    return _device_property("L2_cache_size", H200_L2_BYTES)


def evict_first(kernel: Kernel) -> bool:
    """Whether a one-phase kernel's streamed loads leave L2 first. A kernel that moves a few L2s
    of bytes gains (H200, x.mean(1) on 134 MB: 43.5 -> 40.5 us): the dirty lines its predecessor
    left in L2 stay there instead of being written back during it. On 1 GB reads the hint costs
    5-6% (sum_dim0 255 -> 272 us, full_absmax 252 -> 264), so larger and symbolic sizes go without."""
    moved = kernel.bytes_moved().as_int()
    return kernel.num_phases == 1 and moved is not None and moved <= EVICT_FIRST_L2S * l2_bytes()


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """Streaming multiprocessors of the current CUDA device (132, an H200's, without one)."""
    return _device_property("multi_processor_count", H200_SMS)


def _device_property(name: str, default: int) -> int:
    if torch.cuda.is_available():
        return getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), name)
    return default


def _warps(tile: int) -> int:
    return 4 if tile <= 1024 else 8 if tile <= 4096 else 16 if tile <= 16384 else 32


def _prev_pow2(n: int) -> int:
    return 1 if n < 1 else 1 << (int(n).bit_length() - 1)


def _strided_reduction(kernel: Kernel) -> bool:
    """True when the loads that stream through the reduced dims (``Kernel.streaming_loads``)
    move contiguously along the rows rather than the reduced dims."""
    rvars = {as_var(v) for v in kernel.rvars()}
    votes = sum(-1 if unit & rvars else 1 if unit else 0 for unit in kernel.streaming_loads())
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
        return TritonConfig(XBLOCK=64, YBLOCK=64, num_warps=8)
    xblock = 1024 if numel is None else max(16, min(1024, next_pow2(numel)))
    return TritonConfig(XBLOCK=xblock, num_warps=4 if xblock >= 512 else 2)


def _rows(kernel: Kernel) -> TritonConfig:
    rows = product(kernel.pdomain).as_int()
    row = product(kernel.rdomain).as_int()
    if _strided_reduction(kernel):
        return _strided(rows, row)
    split = 1 if kernel.across else _row_split(rows, row, _rereads(kernel))
    rblock = next_pow2(-(-row // split)) if split > 1 else 0
    if split > 1 and _nonempty(row, split, rblock) > 1:
        split = _nonempty(row, split, rblock)
        return TritonConfig(XBLOCK=1, RBLOCK=rblock, num_warps=min(SYNC_WARPS, _warps(rblock)),
                            strategy=Strategy.SPLIT_SYNC, SPLIT=split)
    if row is not None and row <= PERSISTENT_ROW:
        rblock = next_pow2(row)
        if kernel.across:
            return _across(kernel, rows, rblock)
        tile = ROW_TILE * 4 if _narrow_loads(kernel) else ROW_TILE
        xblock = max(1, min(tile // rblock, _rows_per_program(rows)))
        return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=_warps(rblock * xblock),
                            strategy=Strategy.PERSISTENT)
    if any(r.op is ReduceOp.EXP_SUM for r in online_softmax(kernel).reductions):
        return TritonConfig(XBLOCK=1, RBLOCK=ONLINE_RBLOCK, num_warps=8, num_stages=2, strategy=Strategy.LOOPED)
    return TritonConfig(XBLOCK=1, RBLOCK=LOOPED_RBLOCK, num_warps=16, strategy=Strategy.LOOPED)


def _across(kernel: Kernel, rows: int | None, rblock: int) -> TritonConfig:
    """Rows that also reduce across them: ``ROW_TILE`` elements per step of the row loop, 32 per
    thread (16 where every tile the loop streams is 16-bit; see the module docstring)."""
    xblock = max(1, min(ROW_TILE // rblock, _rows_per_program(rows)))
    per_thread = 16 if _narrow_streams(kernel) else 32
    warps = min(32, next_pow2(max(1, rblock * xblock // (32 * per_thread))))
    return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=warps, strategy=Strategy.PERSISTENT)


def _narrow_streams(kernel: Kernel) -> bool:
    """True when every load that moves along both the rows and the reduced dim is 16-bit."""
    pvars, rvars = {as_var(v) for v in kernel.pvars()}, {as_var(v) for v in kernel.rvars()}
    found = []
    for e in kernel.expressions():
        for ld in loads(e):
            free = kernel.buffers[ld.buffer].layout.flat_index(ld.index).free_vars()
            if free & pvars and free & rvars:
                found.append(kernel.buffers[ld.buffer].dtype)
    return bool(found) and all(d.is_low_precision for d in found)


def _strided(rows: int | None, row: int | None) -> TritonConfig:
    """Strided reductions: a row that fits 32 lanes held whole in tiles of ``STRIDED_HELD_TILE``
    elements, a warp per 1024 (softmax over 21 channels of 16x21x128x128 on an H200: 67 us in
    32 x 32 tiles on 8 warps, 15.5 us in 64 x 32 on 2, a copy of the input 15.4); longer rows in
    32x32 tiles, looped, the reduced dim split when the rows' tiles give fewer programs than
    multiprocessors (see the module docstring)."""
    rblock = min(next_pow2(row), 32) if row else 32
    if row is not None and row <= rblock:  # the row held whole: ~2048-element tiles, a warp per 1024
        xblock = max(64, STRIDED_HELD_TILE // rblock)
        xblock = xblock if rows is None else max(1, min(xblock, next_pow2(rows)))
        return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=max(1, min(8, xblock * rblock // 1024)),
                            strategy=Strategy.PERSISTENT)
    xblock = 32 if rows is None else max(1, min(32, next_pow2(rows)))
    split = _strided_split(rows, row, xblock, rblock)
    if split > 1:
        return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=8, strategy=Strategy.SPLIT, SPLIT=split)
    return TritonConfig(XBLOCK=xblock, RBLOCK=rblock, num_warps=8, strategy=Strategy.LOOPED)


def _strided_split(rows: int | None, row: int | None, xblock: int, rblock: int) -> int:
    """Programs per row tile for a strided reduction: enough for four per multiprocessor when
    the row tiles give fewer programs than multiprocessors, each taking at least ``STRIDED_MIN_CHUNKS`` chunks of the
    reduced dim; 1 for kernels too small to pay for the second launch."""
    if rows is None or row is None or rows * row < STRIDED_SPLIT_NUMEL:
        return 1
    programs, sms = -(-rows // xblock), sm_count()
    if programs >= sms:
        return 1
    return min(next_pow2(-(-4 * sms // programs)), _prev_pow2(row // (rblock * STRIDED_MIN_CHUNKS)))


def _rereads(kernel: Kernel) -> bool:
    """True when a phase after the first stores elementwise results (reading the row again)."""
    return any(s.phase > 0 for s in kernel.elem_stores)


def _row_split(rows: int | None, row: int | None, rereads: bool) -> int:
    """Programs per row for split_sync (1: do not split; see the module docstring)."""
    if row is None:
        return 1
    sms = sm_count()
    split = -(-row // SYNC_SLICE) if row > PERSISTENT_ROW and rereads else 1
    if rows is not None and rows < sms and row >= FEW_ROWS_SPLIT and rows * row >= FEW_ROWS_SPLIT_NUMEL:
        split = max(split, min(-(-2 * sms // rows), row // SPLIT_RBLOCK))
    return split if split <= sms else 1


def _nonempty(row: int, split: int, rblock: int) -> int:
    """How many of ``split`` programs get elements, each taking chunks of ``rblock`` (as codegen
    splits a row)."""
    chunk = -(-row // (split * rblock)) * rblock
    return -(-row // chunk)


def _narrow_loads(kernel: Kernel) -> bool:
    """True when every tensor the reductions load holds 16-bit floats."""
    found = [kernel.buffers[node.buffer].dtype for r in kernel.reductions for node in loads(r.body)]
    return bool(found) and all(d.is_low_precision for d in found)


def _rows_per_program(rows: int | None) -> int:
    """Rows per program that still leave two programs per multiprocessor."""
    if rows is None:
        return 1
    return _prev_pow2(max(1, rows // (2 * sm_count())))


def _full_reduction(kernel: Kernel) -> TritonConfig:
    n = product(kernel.rdomain).as_int()
    if n is not None and n <= FULL_PERSISTENT:
        rblock = next_pow2(n)
        return TritonConfig(XBLOCK=1, RBLOCK=rblock, num_warps=_warps(rblock), strategy=Strategy.PERSISTENT)
    chunks = 8 * sm_count() if n is None else max(2, min(8 * sm_count(), -(-n // (SPLIT_RBLOCK * 4))))
    return TritonConfig(XBLOCK=1, RBLOCK=SPLIT_RBLOCK, num_warps=16, strategy=Strategy.SPLIT, SPLIT=chunks)
