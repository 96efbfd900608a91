"""The C++ backend's search space: only the knobs the generated code of a kernel actually uses.

* ``threads``: 0 (all cores, the default) and the powers of two below the core count;
* ``schedule`` x ``grain``: the OpenMP schedule of the parallel loop (pointwise, rows, columns);
  full reductions split their range by hand and have none;
* ``lanes``: when a reduction phase runs through lane arrays (Welford, argmax/argmin rows);
* ``chunk``: when the kernel reduces over an outer dimension (columns); 0 derives it;
* ``stores``: when a row kernel's last pass can stream its stores (``streaming.py``);
* ``column_split``: when a column reduction can run with its rows split across threads
  (``split_rows.py``);
* ``transposed_reads``: when a tiled pointwise kernel has an input it can read a block at a time
  (``tiling.py``).
"""
from __future__ import annotations

from ...core.hardware import HardwareInfo
from ...core.space import Knob, SearchSpace
from ...scheduler.kernel import Kernel
from .accumulators import Accumulator
from .codegen import as_written, generate, reduces_outer_dim
from .params import COLUMN_SPLITS, SCHEDULES, STORES, TRANSPOSED_READS, VECTOR_WIDTHS, CppConfig, config_from_json
from .split_rows import can_split_rows
from .streaming import last_level_cache_bytes
from .tiling import block_reads, transposed_dim

LANES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CHUNKS = (0, 16, 32, 64, 128, 256, 512, 1024, 2048)  # 0: from the sizes and threads
ROW_GRAINS = (0, 1, 8, 64)            # rows or columns per scheduling chunk
ROW_VECTOR_CHOICES = (0, 1, 4, 8)     # vectors of partial states of a row reduction (0: by the sizes)
ELEMENT_GRAINS = (0, 1024, 16384)     # elements per chunk of a 1-D pointwise loop


def thread_choices(cores: int) -> tuple[int, ...]:
    """0 (every core) and each power of two below ``cores``."""
    return (0,) + tuple(1 << k for k in range(max(cores, 1).bit_length()) if (1 << k) < cores)


def uses_lanes(kernel: Kernel) -> bool:
    """True if some reduction phase runs through lane arrays (so ``lanes`` changes the code)."""
    if not kernel.reductions or len(kernel.rdomain) != 1 or reduces_outer_dim(kernel):
        return False
    return any(Accumulator(r, "_").simd_clauses() is None for r in as_written(kernel).reductions if not r.across)


def uses_row_vectors(kernel: Kernel) -> bool:
    """True if a row reduction folds through ``omp simd`` clauses (so ``row_vectors`` changes the
    code: ``row_lanes.py``)."""
    if not kernel.reductions or len(kernel.rdomain) != 1 or reduces_outer_dim(kernel):
        return False
    return any(Accumulator(r, "_").simd_clauses() is not None
               for r in as_written(kernel).reductions if not r.across)


def can_stream(kernel: Kernel) -> bool:
    """True if forcing streaming stores changes the kernel's code (``stores`` is then a knob):
    row kernels, and pointwise kernels that move at least a quarter of the last-level cache (a
    kernel measured alone cannot see what streaming a smaller output out of the cache costs the
    kernel that reads it next)."""
    if not kernel.elem_stores or (kernel.reductions and len(kernel.pdomain) != 1):
        return False
    moved = kernel.bytes_moved().as_int()
    if not kernel.reductions and (moved is None or 4 * moved < last_level_cache_bytes()):
        return False
    return "ln_stream_line(&" in generate(kernel, CppConfig(stores="stream"), index_checks=False)


def search_space(kernel: Kernel, hardware: HardwareInfo) -> SearchSpace:
    """The knobs that matter for ``kernel`` on ``hardware``; the rest fixed at their defaults."""
    default = CppConfig()
    knobs = [Knob("threads", thread_choices(hardware.cores))]
    if not (kernel.reductions and not kernel.pdomain):  # full reductions split by hand: no loop schedule
        one_d = not kernel.reductions and len(kernel.pdomain) == 1
        knobs += [Knob("schedule", SCHEDULES, ordered=False),
                  Knob("grain", ELEMENT_GRAINS if one_d else ROW_GRAINS)]
    if uses_lanes(kernel):
        knobs.append(Knob("lanes", LANES))
    if uses_row_vectors(kernel):
        knobs.append(Knob("row_vectors", ROW_VECTOR_CHOICES))
    if kernel.reductions and reduces_outer_dim(kernel):
        knobs.append(Knob("chunk", CHUNKS))
    if kernel.reductions and reduces_outer_dim(kernel) and can_split_rows(kernel):
        knobs.append(Knob("column_split", COLUMN_SPLITS, ordered=False))
    if can_stream(kernel):
        knobs.append(Knob("stores", STORES, ordered=False))
    tiled = transposed_dim(kernel)
    if tiled is not None and block_reads(kernel, tiled):
        knobs.append(Knob("transposed_reads", TRANSPOSED_READS, ordered=False))
    if "avx512f" in hardware.capability.split(","):
        knobs.append(Knob("vector_width", VECTOR_WIDTHS))
    tuned = {k.name for k in knobs}
    fixed = {name: value for name, value in default.to_json().items() if name not in tuned}
    return SearchSpace("cpp", lambda data: config_from_json(data, hardware), tuple(knobs), fixed)
