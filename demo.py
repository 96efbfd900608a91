"""``python -m loopnest.demo``: compile a DSL softmax with the C++ backend, check it, time it."""
from __future__ import annotations

import time

import torch

import loopnest as ln


def _median_ms(fn, *args, repeat: int = 30) -> float:
    fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    """Build, verify and time the DSL softmax against torch.softmax."""
    x = ln.placeholder("x", ("N", "C"), ln.float32)
    e = ln.exp(x - ln.max(x, axis=1, keepdim=True))
    softmax = ln.compile(e / ln.sum(e, axis=1, keepdim=True), name="softmax")
    a = torch.randn(8192, 2048)
    t0 = time.perf_counter()
    out = softmax(a)
    first = time.perf_counter() - t0
    torch.testing.assert_close(out, torch.softmax(a, -1))
    ours, eager = _median_ms(softmax, a), _median_ms(torch.softmax, a, -1)
    print(f"softmax 8192x2048 float32 on {torch.get_num_threads()} threads: matches torch.softmax")
    print(f"  first call (compile or cache load): {first * 1e3:.0f} ms")
    print(f"  loopnest: {ours:.2f} ms   torch eager: {eager:.2f} ms   ratio eager/loopnest: {eager / ours:.2f}")


if __name__ == "__main__":
    main()
