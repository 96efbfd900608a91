"""Where Dynamo's per-call time goes around one op, by input size (CPU).

A backend that returns the graph's own ATen call (no kernels of ours) runs ``x.sum(0)``; each
call is split at the backend's entry and exit into the time before the op (Dynamo's frame: guards,
its wrappers), the op, and after it. A second table runs a 4 x 4 input after an eager op has
streamed a buffer of each size through the caches, so Dynamo's Python runs with what that op
left in L1/L2. Medians of ``--calls`` calls, µs. Runs with glibc keeping freed blocks mapped.

    python bench/dynamo_frame.py
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from common import median_ms, reexec_with_malloc_thresholds

MARKS: dict[str, float] = {}


def timed_backend(gm, example_inputs):
    """Dynamo backend: the graph's own forward, stamping its entry and exit."""
    forward = gm.forward

    def run(*args):
        MARKS["in"] = time.perf_counter()
        out = forward(*args)
        MARKS["out"] = time.perf_counter()
        return out
    return run


def split_calls(fn, x, calls: int, before=None) -> tuple[float, float, float]:
    """Median µs (before the op, the op, after it) of ``calls`` calls of compiled ``fn``."""
    pre, op, post = [], [], []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter()
        fn(x)
        end = time.perf_counter()
        pre.append(MARKS["in"] - start)
        op.append(MARKS["out"] - MARKS["in"])
        post.append(end - MARKS["out"])
    return tuple(round(statistics.median(v) * 1e6, 1) for v in (pre, op, post))


def column_sum(x):
    """The op every call runs: a sum over the rows."""
    return x.sum(0)


def main() -> None:
    """Print both tables."""
    reexec_with_malloc_thresholds()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rows", type=int, nargs="*", default=[4, 64, 256, 1024],
                        help="rows of 4096 float32 (4 rows: a 4 x 4 input instead)")
    args = parser.parse_args()
    print(f"threads {torch.get_num_threads()}")
    print("| input | before the op | the op | after it | eager op alone |")
    print("| --- | --- | --- | --- | --- |")
    for rows in args.rows:
        x = torch.randn(4, 4) if rows == 4 else torch.randn(rows, 4096)
        torch._dynamo.reset()
        compiled = torch.compile(column_sum, backend=timed_backend, dynamic=False)
        compiled(x)
        pre, op, post = split_calls(compiled, x, args.calls)
        alone = median_ms(lambda: column_sum(x), args.calls) * 1e3
        print(f"| {tuple(x.shape)} | {pre} | {op} | {post} | {alone:.1f} |")
    print()
    print("| a 4 x 4 input after an eager op over | before the op | the op | after it |")
    print("| --- | --- | --- | --- |")
    tiny = torch.randn(4, 4)
    torch._dynamo.reset()
    compiled = torch.compile(column_sum, backend=timed_backend, dynamic=False)
    compiled(tiny)
    for rows in args.rows:
        buffer = torch.randn(rows * 4096)
        pre, op, post = split_calls(compiled, tiny, args.calls, before=buffer.neg_)
        print(f"| {rows * 16} KB | {pre} | {op} | {post} |")


if __name__ == "__main__":
    main()
