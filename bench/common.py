"""Helpers the benchmark scripts share."""
import gc
import os
import statistics
import sys
import time

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "17179869184", "MALLOC_TRIM_THRESHOLD_": "17179869184"}


def reexec_with_malloc_thresholds() -> None:
    """Re-run this script with glibc keeping freed blocks mapped (``MALLOC``: 16 GiB), so no kernel
    pays page faults for a freshly unmapped output on every call."""
    if any(os.environ.get(k) != v for k, v in MALLOC.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC})


def tensor_bytes(values) -> int:
    """Bytes of a tensor, or of all the tensors in a (nested) sequence."""
    if hasattr(values, "element_size"):
        return values.numel() * values.element_size()
    return sum(tensor_bytes(v) for v in values)


def median_ms(fn, repeat: int, collect: bool = False) -> float:
    """Median ms of ``repeat`` calls of ``fn`` after a warm-up call (``collect``: gc before each)."""
    fn()
    times = []
    for _ in range(repeat):
        if collect:
            gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3
