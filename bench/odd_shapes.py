"""Shapes outside the suite: eager, Inductor and loopnest side by side, one process, CPU or GPU.

Odd sizes, few long rows, many short ones, reductions over the first and middle dimensions,
transposed and strided reads, bf16: the kind of shape a heuristic tuned on the suite's rows can
lose on. Each case moves tens of MB, so a CPU call takes milliseconds and Dynamo's frame (tens
of µs) weighs little. Both compilers go through ``torch.compile`` (loopnest with the backend the
device takes); each result is checked against eager, then the three columns are timed in
interleaved rounds: wall clock over calls on the CPU, ``triton.testing.do_bench`` (L2 flushed)
on CUDA.

Run: python bench/odd_shapes.py [--device cpu|cuda] [--rounds N] [CASE-SUBSTRING ...]
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised, so no
CPU call pays page faults for a freshly unmapped output.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import loopnest  # noqa: E402,F401  (registers the backend)


def cases(device: str = "cpu") -> dict:
    """name -> (function, inputs on ``device``)."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
    bf16 = torch.bfloat16
    return {
        "softmax 3001x2999": (lambda x: torch.softmax(x, -1), (randn(3001, 2999),)),
        "softmax dim0 4096x1024": (lambda x: torch.softmax(x, 0), (randn(4096, 1024),)),
        "log_softmax dim1 64x100x333": (lambda x: torch.log_softmax(x, 1), (randn(64, 100, 333),)),
        "log_softmax 16x200003": (lambda x: torch.log_softmax(x, -1), (randn(16, 200003),)),
        "layernorm 8192x771": (lambda x, w, b: F.layer_norm(x, (771,), w, b), (randn(8192, 771), randn(771), randn(771))),
        "layernorm 65536x96": (lambda x, w, b: F.layer_norm(x, (96,), w, b), (randn(65536, 96), randn(96), randn(96))),
        "rmsnorm bf16 4096x5120": (lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(bf16) * w,
                                   (randn(4096, 5120, dtype=bf16), randn(5120, dtype=bf16))),
        "sum dim1 256x1000x30": (lambda x: x.sum(1), (randn(256, 1000, 30),)),
        "mean dims 0,2 64x256x300": (lambda x: x.mean((0, 2)), (randn(64, 256, 300),)),
        "mean dims 0,2 of a transposed copy 700x256x64": (lambda x: x.transpose(0, 2).contiguous().mean((0, 2)),
                                                          (randn(700, 256, 64),)),
        "sum dims 0,2 32x512x96": (lambda x: x.sum((0, 2)), (randn(32, 512, 96),)),
        "mean dims 0,2,3 NCHW 32x64x56x56": (lambda x: x.mean((0, 2, 3)), (randn(32, 64, 56, 56),)),
        "var dim0 1000x4097": (lambda x: x.var(0), (randn(1000, 4097),)),
        "amax 200000x37": (lambda x: x.amax(-1), (randn(200000, 37),)),
        "argmax 4096x4097": (lambda x: x.argmax(-1), (randn(4096, 4097),)),
        "sum all bf16 16M": (lambda x: x.float().sum(), (randn(1 << 24, dtype=bf16),)),
        "add transposed 2048x3001": (lambda x, y: x.t() + y, (randn(3001, 2048), randn(2048, 3001))),
        "permute 64x512x300": (lambda x: x.permute(0, 2, 1).contiguous() * 2, (randn(64, 512, 300),)),
        "add transposed 1024x768": (lambda x, y: x.t() + y, (randn(768, 1024), randn(1024, 768))),
        "permute 64x512x320": (lambda x: x.permute(0, 2, 1).contiguous() * 2, (randn(64, 512, 320),)),
        "silu strided 4096x8192[:, ::2]": (lambda x: F.silu(x[:, ::2]), (randn(4096, 8192),)),
        "gelu bf16 3000x3001": (lambda x: F.gelu(x), (randn(3000, 3001, dtype=bf16),)),
        "leaky where 5000x3333": (lambda x: torch.where(x > 0, x, 0.1 * x), (randn(5000, 3333),)),
        "standardize cols 8192x1000": (lambda x: (x - x.mean(0)) / x.std(0), (randn(8192, 1000),)),
        "cross_entropy 256x50257": (lambda x, t: F.cross_entropy(x, t),
                                    (randn(256, 50257), torch.randint(0, 50257, (256,), generator=g).to(device))),
        "masked_fill softmax 3000x3008": (lambda x, m: x.masked_fill(m, -1e9).softmax(-1),
                                          (randn(3000, 3008), randn(3000, 3008) > 0.3)),
        "layernorm fp16 3000x3008": (lambda x: F.layer_norm(x, (3008,)), (randn(3000, 3008, dtype=torch.float16),)),
        "sigmoid fp16 3000x3008": (torch.sigmoid, (randn(3000, 3008, dtype=torch.float16),)),
        "gather rows 65536 of 50000x256": (lambda w, i: w[i] * 2, (randn(50000, 256), torch.randint(0, 50000, (65536,), generator=g).to(device))),
        "cat 3 x 2000x1001": (lambda a, b, c: torch.cat([a, b * 2, c], 1), (randn(2000, 1001), randn(2000, 1001), randn(2000, 1001))),
        "pad 1000x1000 by 3": (lambda x: F.pad(x, (3, 3, 3, 3)) + 1, (randn(1000, 1000),)),
        "broadcast outer 4000x1 + 1x4001": (lambda a, b: torch.exp(a + b), (randn(4000, 1), randn(1, 4001))),
        "int32 mixed 4000x4001": (lambda a, b: (a * 3 + b) % 7, (torch.randint(-99, 99, (4000, 4001), generator=g, dtype=torch.int32).to(device),
                                                               torch.randint(-99, 99, (4000, 4001), generator=g, dtype=torch.int32).to(device))),
        "clamp pow 3000x3001": (lambda x: x.clamp(-1, 1).pow(3) + x.abs().sqrt(), (randn(3000, 3001),)),
        "batchnorm stats NCHW 32x64x56x56": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), (randn(32, 64, 56, 56),)),
        "batchnorm stats NCHW 32x512x7x7": (lambda x: (x.mean((0, 2, 3)), x.var((0, 2, 3))), (randn(32, 512, 7, 7),)),
        "batchnorm train relu NCHW 32x64x56x56": (lambda x, w, b: F.relu(F.batch_norm(x, None, None, w, b, training=True)),
                                                  (randn(32, 64, 56, 56), randn(64), randn(64))),
        "batchnorm train NCHW 64x256x14x14": (lambda x: F.batch_norm(x, None, None, training=True), (randn(64, 256, 14, 14),)),
        "softmax dim1 NCHW 16x21x128x128": (lambda x: torch.softmax(x, 1), (randn(16, 21, 128, 128),)),
        "logsumexp 1000x10007": (lambda x: torch.logsumexp(x, -1), (randn(1000, 10007),)),
        "add 8192x2048": (lambda x, y: x + y, (randn(8192, 2048), randn(8192, 2048))),
        "bias add 8192x2048": (lambda x, b: x + b, (randn(8192, 2048), randn(2048))),
        "relu 8192x2048": (torch.relu, (randn(8192, 2048),)),
        "add bf16 8192x2048": (lambda x, y: x + y, (randn(8192, 2048, dtype=bf16), randn(8192, 2048, dtype=bf16))),
    }


def round_ms(call, device: str) -> float:
    """ms per call of one timing round: do_bench's median on CUDA, the mean of ~50 ms of calls on the CPU."""
    if device == "cuda":
        import triton.testing
        return triton.testing.do_bench(call, warmup=10, rep=50, return_mode="median")
    t0 = time.perf_counter()
    call()
    calls = max(1, int(0.05 / max(time.perf_counter() - t0, 1e-6)))
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - t0) / calls * 1e3


def close(got, want) -> bool:
    """Whether ``got`` matches eager's ``want`` within a tolerance fit for its dtype."""
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(close(a, b) for a, b in zip(got, want))
    tol = 2e-2 if want.dtype in (torch.bfloat16, torch.float16) else 1e-4
    return want.shape == got.shape and torch.allclose(got.float(), want.float(), rtol=tol, atol=tol)


def main() -> None:
    """Print each case's median ms per column, the ratios, and whether both compilers agree with eager."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", help="substrings of the case names to run (default: all)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = p.parse_args()
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"# torch {torch.__version__}, {where}; ms per call, medians of {a.rounds} rounds")
    print("| case | MB | eager | Inductor | loopnest | eager / loopnest | Inductor / loopnest | checks |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    backend = "triton" if a.device == "cuda" else "cpp"
    for name, (fn, args) in cases(a.device).items():
        if a.cases and not any(c in name for c in a.cases):
            continue
        torch._dynamo.reset()
        columns = {"eager": fn, "inductor": torch.compile(fn),
                   "loopnest": torch.compile(fn, backend="loopnest", options={"backend": backend, "tune": "off"})}
        want = fn(*args)
        checks = "/".join("ok" if close(columns[c](*args), want) else "WRONG" for c in ("inductor", "loopnest"))
        times = {c: [] for c in columns}
        for _ in range(a.rounds):
            for c, f in columns.items():
                times[c].append(round_ms(lambda: f(*args), a.device))
        ms = {c: statistics.median(v) for c, v in times.items()}
        mb = (sum(t.nbytes for t in args) + sum(t.nbytes for t in (want if isinstance(want, tuple) else (want,)))) / 1e6
        ratios.append((ms["eager"] / ms["loopnest"], ms["inductor"] / ms["loopnest"]))
        print(f"| {name} | {mb:.0f} | {ms['eager']:.3f} | {ms['inductor']:.3f} | {ms['loopnest']:.3f} | "
              f"{ms['eager'] / ms['loopnest']:.2f} | {ms['inductor'] / ms['loopnest']:.2f} | {checks} |", flush=True)
    if ratios:
        geo = [math.exp(statistics.fmean(math.log(r[k]) for r in ratios)) for k in (0, 1)]
        print(f"geomean eager / loopnest {geo[0]:.2f}, Inductor / loopnest {geo[1]:.2f}")


if __name__ == "__main__":
    main()
