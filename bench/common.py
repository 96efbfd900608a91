"""Helpers the benchmark scripts share."""
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "17179869184", "MALLOC_TRIM_THRESHOLD_": "17179869184"}
MEMORY_CALLS = 30  # calls over which memory_use measures the growth per call (after a third as many)


def reexec_with_malloc_thresholds() -> None:
    """Re-run this script with glibc keeping freed blocks mapped (``MALLOC``: 16 GiB), so no kernel
    pays page faults for a freshly unmapped output on every call."""
    if any(os.environ.get(k) != v for k, v in MALLOC.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC})


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


def run_in_checkout(code: str, args: list[str], path=None, env: dict | None = None):
    """Run the Python ``code`` in a new process importing loopnest from the folder ``path`` (None:
    this checkout), with a fresh code cache and ``env`` on top of ours (None removes a variable);
    the JSON its last line prints."""
    env = {**os.environ, "LOOPNEST_CACHE_DIR": tempfile.mkdtemp(prefix="ln-bench-"), **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise SystemExit(f"the run of {path or 'this checkout'} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rss_bytes() -> int:
    """This process's resident set now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_allocated_bytes(fn) -> int:
    """The most bytes torch's CPU allocator holds while ``fn()`` runs, above what it held before
    (the profiler's memory events summed in time order; the resident set cannot show this when
    glibc keeps freed blocks mapped)."""
    import torch.profiler

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    held = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        held += event.self_cpu_memory_usage
        peak = max(peak, held)
    return peak


def cuda_allocated_bytes() -> int:
    """Bytes torch's CUDA allocator holds in live tensors, once the queued work is done."""
    import torch

    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def cuda_peak_allocated_bytes(fn) -> int:
    """The most bytes torch's CUDA allocator holds while ``fn()`` runs, above what it held before."""
    import torch

    start = cuda_allocated_bytes()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - start


def memory_use(fn, device: str = "cpu") -> tuple[float, float]:
    """(peak MB allocated during one call of ``fn``, MB held memory grows per call over
    ``MEMORY_CALLS`` calls after a third as many to settle). On the CPU the growth is the resident
    set's and the peak comes from the profiler; on CUDA both are the caching allocator's counts of
    bytes in tensors (its cached free blocks are not counted)."""
    held, peak = (cuda_allocated_bytes, cuda_peak_allocated_bytes) if device == "cuda" else \
        (rss_bytes, peak_allocated_bytes)
    for _ in range(MEMORY_CALLS // 3):
        fn()
    start = held()
    for _ in range(MEMORY_CALLS):
        fn()
    growth = (held() - start) / MEMORY_CALLS
    return peak(fn) / 1e6, growth / 1e6


def print_memory_table(rows: list[tuple[str, dict]], columns) -> None:
    """The memory table of a suite: per workload (``rows``: name and ``memory_use`` per column),
    each column's peak MB per call, then each column's growth in MB per call ("-": a column the
    row does not have)."""
    def cells(mem: dict, which: int, fmt: str) -> str:
        return " | ".join(format(mem[k][which], fmt) if k in mem else "-" for k in columns)

    print("\n| workload | " + " | ".join(f"peak MB {k}" for k in columns) + " | "
          + " | ".join(f"MB/call growth {k}" for k in columns) + " |")
    print("|---" * (1 + 2 * len(columns)) + "|")
    for name, mem in rows:
        print(f"| {name} | {cells(mem, 0, '.0f')} | {cells(mem, 1, '.2f')} |")


def triton_registers(compiled) -> list[str]:
    """``registers/spills`` of each Triton launch of a compiled graph (none under Triton's
    interpreter, which compiles nothing)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return []
    out = []
    for launcher in compiled.artifact.launchers.values():
        for step in launcher.bind({}).steps:
            k = step.compiled(step.warmup_args())
            k._init_handles()
            out.append(f"{k.n_regs}/{k.n_spills}")
    return out


def triton_median_ms(fn, args) -> float:
    """Median ms of ``fn(*args)`` from ``triton.testing.do_bench`` (NaN under Triton's
    interpreter, where a time says nothing)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return float("nan")
    import triton.testing
    return triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median")


def device_copy_gbs() -> float:
    """This card's copy bandwidth in GB/s (read + write bytes): the median time of copying a
    1 GiB float32 buffer (many times larger than L2) into another."""
    import torch
    import triton.testing
    buffers = [torch.randn(1 << 28, device="cuda"), torch.empty(1 << 28, device="cuda")]
    ms = triton.testing.do_bench(lambda: buffers[1].copy_(buffers[0]), return_mode="median")
    buffers.clear()
    torch.cuda.empty_cache()
    return 2 * (1 << 28) * 4 / (ms / 1e3) / 1e9
