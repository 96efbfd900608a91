"""The C++ backend's tunable parameters."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ...core.hardware import HardwareInfo

SCHEDULES = ("static", "dynamic", "guided")  # OpenMP loop schedules of the parallel loop
STORES = ("auto", "plain", "stream")  # how a row kernel's last pass stores (streaming.py)
COLUMN_SPLITS = ("auto", "chunks", "rows")  # how a column reduction divides its work among threads
MAX_THREADS = 1024  # a sanity bound; a config is bounded by the cores of the machine it was tuned on
MAX_CHUNK = 2048  # columns per thread: 8 KB of float partials each, in L1 with the rows streaming by
VECTOR_WIDTHS = (512, 256)  # bits of the vectors a kernel's loops are vectorized with, at most
ROW_VECTORS = (0, 1, 2, 4, 8)  # vectors of partial states of a row reduction (0: by the sizes)
TRANSPOSED_READS = ("auto", "gather", "registers")  # how a tiled kernel reads an input across its lines


@dataclass(frozen=True)
class CppConfig:
    """How a C++ kernel runs.

    ``threads``: OpenMP threads (0: all cores); ``lanes``: partial states per row for reductions
    vectorized through lane arrays (Welford, argmax); ``chunk``: adjacent columns one thread owns
    when a kernel reduces over an outer dimension (0: from the sizes and the thread count, see
    ``codegen.column_chunk``); ``schedule`` and ``grain``: the OpenMP
    schedule of the parallel loop over rows, columns or elements and its chunk size (0: the
    schedule's default, for ``static`` one contiguous block per thread); ``stores``: whether a
    row kernel's last pass writes with streaming stores ("auto": when its output exceeds the
    last-level cache, ``streaming.py``); ``column_split``: how a kernel that reduces over an
    outer dimension divides its work, "chunks" of adjacent columns per thread or "rows" (each
    thread folds a block of whole rows into partials of every column, combined afterwards;
    ``codegen.splits_rows``), "auto" choosing by the sizes and thread count; ``vector_width``:
    the widest vectors its loops use, in bits (512: the widest the CPU has; under -march=native
    GCC prefers 256-bit vectors on AVX-512 Xeons, which halves the lanes of every loop and calls
    the 8-lane variants of the vector math); ``row_vectors``: vectors of partial states a row's
    sum, max or min keeps (0: by the sizes, ``row_lanes.vectors``); ``transposed_reads``: how a
    pointwise kernel tiled for an input read across its lines reads it (``tiling.py``): one
    element at a time ("gather") or whole 16 x 16 blocks transposed in registers ("registers"),
    "auto" choosing by the input's row stride and the CPU.
    """

    threads: int = 0
    lanes: int = 16
    chunk: int = 0
    schedule: str = "static"
    grain: int = 0
    stores: str = "auto"
    column_split: str = "auto"
    vector_width: int = 512
    row_vectors: int = 0
    transposed_reads: str = "auto"

    def __post_init__(self):
        if not isinstance(self.threads, int) or isinstance(self.threads, bool):
            raise TypeError(f"threads must be an int, got {self.threads!r}")
        if not 0 <= self.threads <= MAX_THREADS:
            raise ValueError(f"threads={self.threads} is outside 0..{MAX_THREADS}")
        for name, low, high in (("lanes", 1, 1024), ("chunk", 0, MAX_CHUNK)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high \
                    or value & (value - 1):
                zero = " or 0" if low == 0 else ""
                raise ValueError(f"{name} must be a power of two in 1..{high}{zero}, got {value!r}")
        if self.stores not in STORES:
            raise ValueError(f"stores must be one of {STORES}, got {self.stores!r}")
        if self.column_split not in COLUMN_SPLITS:
            raise ValueError(f"column_split must be one of {COLUMN_SPLITS}, got {self.column_split!r}")
        if self.vector_width not in VECTOR_WIDTHS:
            raise ValueError(f"vector_width must be one of {VECTOR_WIDTHS}, got {self.vector_width!r}")
        if self.row_vectors not in ROW_VECTORS:
            raise ValueError(f"row_vectors must be one of {ROW_VECTORS}, got {self.row_vectors!r}")
        if self.transposed_reads not in TRANSPOSED_READS:
            raise ValueError(f"transposed_reads must be one of {TRANSPOSED_READS}, got {self.transposed_reads!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not isinstance(self.grain, int) or isinstance(self.grain, bool) or not 0 <= self.grain <= 1 << 16:
            raise ValueError(f"grain must be an int in 0..65536, got {self.grain!r}")

    @property
    def omp_schedule(self) -> str:
        """The ``schedule(...)`` clause of the parallel loop."""
        return f"schedule({self.schedule}{f', {self.grain}' if self.grain else ''})"

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict, cores: int | None = None) -> "CppConfig":
        """Validate and build a config from stored JSON (unknown keys are an error); ``cores``:
        those of the machine it was tuned on, which bound ``threads``."""
        unknown = set(data) - {f.name for f in fields(CppConfig)}
        if unknown:
            raise ValueError(f"unknown C++ config keys: {sorted(unknown)}")
        config = CppConfig(**data)
        if cores is not None and config.threads > cores:
            raise ValueError(f"threads={config.threads} exceeds the {cores} cores of the machine it was tuned on")
        return config


def config_from_json(data: dict, hardware: HardwareInfo) -> CppConfig:
    """A stored config, its threads bounded by the cores of the ``hardware`` it was tuned on."""
    return CppConfig.from_json(dict(data), hardware.cores)
