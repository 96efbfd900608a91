"""Whether this CPU reads 16 x 16 blocks whose row loads span two lines faster transposed in
registers (``ln_transpose16``) than element by element: measured once per CPU and compiler, and
kept in the cache directory.

Where an input's row stride is not a whole number of 64-byte lines, each of a block's 16 row
loads spans two lines. On a 2-core AVX-512 Xeon the register transpose then lost up to 2x
(1000 x 777: 410 µs element by element, 662 transposed), where a Zen 4 EPYC gained 1.5x on the
same shape (2026-12-06 and 12-07, ``tiling.py``): the hosts disagree, so each host is asked. The
probe transposes a 1000 x 777 float32 matrix (3 MB, cache-resident) both ways, on one thread,
with the loops the generated kernels use.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import time

import torch

from ...core import settings
from ...core.hardware import compiler_version, this_cpu
from . import compile as cc
from .ops import PRELUDE
from .probe_records import keep_record, read_record, record_path

log = logging.getLogger("loopnest")

ROWS, COLS = 1000, 777  # the transposed input: its row stride, 777 floats, splits every row load
MARGIN = 0.9  # the transpose must take at most this fraction of the element loads' time

SOURCE = f"""
constexpr int64_t rows = {ROWS}, cols = {COLS};  // constants, as in a generated kernel of these sizes
extern "C" void probe_elements(const float* __restrict__ x, float* __restrict__ y) {{
  for (int64_t c0 = 0; c0 + 16 <= cols; c0 += 16)  // the whole blocks, as probe_registers
    for (int64_t r0 = 0; r0 + 16 <= rows; r0 += 16)
      for (int64_t c = c0; c < c0 + 16; ++c) {{
        #pragma omp simd
        for (int64_t r = r0; r < r0 + 16; ++r) y[c * rows + r] = x[r * cols + c] * 2.0f;
      }}
}}
extern "C" void probe_registers(const float* __restrict__ x, float* __restrict__ y) {{
  for (int64_t c0 = 0; c0 + 16 <= cols; c0 += 16)
    for (int64_t r0 = 0; r0 + 16 <= rows; r0 += 16) {{
      alignas(64) float block[256];
      ln_transpose16(&x[r0 * cols + c0], cols, block);
      for (int64_t c = c0; c < c0 + 16; ++c) {{
        #pragma omp simd
        for (int64_t r = r0; r < r0 + 16; ++r) y[c * rows + r] = block[(c - c0) * 16 + (r - r0)] * 2.0f;
      }}
    }}
}}
"""


@functools.cache
def split_lines_in_registers() -> bool:
    """True if this CPU transposes blocks of split-line rows faster in registers (by ``MARGIN``);
    measured on the first call per CPU and compiler, then read back from the cache directory
    (a record that does not parse as one is measured again). False, with a warning, where the
    probe cannot be built or run."""
    cxx = settings.current().cxx
    path = record_path("transpose", SOURCE, PRELUDE, " ".join(cc.flags()), compiler_version(cxx) or "",
                       this_cpu().name, this_cpu().capability)
    record = read_record(path, {"elements_us": float, "registers_us": float})
    if record is not None:
        return record["registers_us"] <= MARGIN * record["elements_us"]
    try:
        elements_us, registers_us = _measure()
    except (cc.CompileError, OSError) as e:  # no verdict: the element loads, which always work
        log.warning("loopnest: the transpose probe did not run (%s); split-line transposes keep element loads", e)
        return False
    keep_record(path, {"elements_us": elements_us, "registers_us": registers_us})
    return registers_us <= MARGIN * elements_us


def _measure() -> tuple[float, float]:
    """µs per transpose of the probe's matrix, element loads and registers (best of 7 rounds)."""
    lib = cc.load(cc.build(PRELUDE + SOURCE))
    x = torch.randn(ROWS, COLS)
    y = torch.empty(COLS, ROWS)
    best = {}
    for name in ("probe_elements", "probe_registers"):
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        args = (x.data_ptr(), y.data_ptr())
        fn(*args)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(5):
                fn(*args)
            times.append((time.perf_counter() - t0) / 5 * 1e6)
        best[name] = min(times)
    return best["probe_elements"], best["probe_registers"]
