"""Kernel time of one Triton kernel under many configs: where the heuristics stand in the space.

Cases: reductions over a strided dim (middle-dim means, column sums), against a grid of looped and
split configs with tiles wider along the contiguous dim than the search space's rows allow; and
the backward kernels of the training rows that reduce across their rows (a norm's weight
gradient), against XBLOCK x num_warps x num_stages x programs per multiprocessor. Each config is
verified against eager, then timed as a study times a trial (``harness.time``: ``do_bench`` with
the L2 flushed); for the strided cases, eager, Inductor and a copy of the input are timed beside
them. Prints the default, the best configs and the peers, with each time's fraction of copy
bandwidth (``--copy-gbs``) over the bytes the kernel must move.

Rows (``layernorm``, ...): the suite row's kernel as persistent tiles of 1-4 rows and as looped
chunks (Inductor's form: the row read again from L2 for the normalization). Pointwise cases
(``outer_broadcast``, ...): flat blocks and 2-D tiles over odd-sized and broadcast inputs.

Run on the device: python bench/kernel_configs.py [--configs 60] [CASE ...]
Check the script on a CPU: TRITON_INTERPRET=1 python bench/kernel_configs.py --configs 3 --small
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402

from loopnest.autotune.harness import GraphHarness  # noqa: E402
from loopnest.autotune.sweep import SweepTarget, compile_target, flat_tensors, training_targets  # noqa: E402
from loopnest.autotune.workloads import WORKLOADS  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.backends.triton import codegen  # noqa: E402
from loopnest.backends.triton.heuristics import sm_count  # noqa: E402
from loopnest.backends.triton.params import Strategy, TritonConfig, next_pow2  # noqa: E402

STRIDED = {  # name: (fn, shape at GPU size, shape for --small)
    "mean_mid": (lambda x: x.mean(1), (32, 2048, 512), (3, 40, 24)),
    "mean_mid_64x512x1024": (lambda x: x.mean(1), (64, 512, 1024), (2, 24, 40)),
    "sum_dim0": (lambda x: x.sum(0), (32768, 8192), (96, 40)),
    "sum_dim0_narrow": (lambda x: x.sum(0), (262144, 1024), (300, 8)),
    "mean_dim0_3d": (lambda x: x.mean(0), (256, 1024, 128), (9, 8, 16)),
}
SHORT = {  # reductions over a short dim, strided or contiguous, the row held whole: (fn, shape, shape for --small)
    "softmax_dim1_nchw": (lambda x: torch.softmax(x, 1), (16, 21, 128, 128), (2, 5, 8, 8)),
    "amax_rows_37": (lambda x: x.amax(-1), (200000, 37), (50, 37)),  # contiguous short rows
    "layernorm_rows_64": (lambda x: torch.nn.functional.layer_norm(x, (64,)), (262144, 64), (50, 64)),
}
POINTWISE = {  # pointwise over broadcast or odd-sized inputs: name: (fn, shapes, shapes for --small)
    "outer_broadcast": (lambda a, b: torch.exp(a + b), ((4000, 1), (1, 4001)), ((40, 1), (1, 41))),
    "bias_add_odd": (lambda x, b: x + b, ((4000, 4001), (4001,)), ((40, 41), (41,))),
    "scale_odd": (lambda x: x * 2, ((3000, 3001),), ((30, 31),)),
}
ACROSS = ("layernorm_train", "rmsnorm_train_bf16")  # their backward kernel that reduces across rows
ROWS = ("layernorm", "rmsnorm_bf16", "add_layernorm")  # suite rows reduced along contiguous rows


def strided_grid(count: int, seed: int = 0) -> list[tuple[TritonConfig, int]]:
    """``count`` distinct looped/split configs with tiles of 1024-8192 elements."""
    rng, out = random.Random(seed), set()
    while len(out) < count:
        xb, rb = rng.choice((32, 64, 128, 256, 512)), rng.choice((4, 8, 16, 32, 64))
        if not 1024 <= xb * rb <= 8192:
            continue
        split = rng.choice((1, 1, 2, 4, 8, 16, 32))
        out.add((TritonConfig(XBLOCK=xb, RBLOCK=rb, num_warps=rng.choice((4, 8, 16)),
                              num_stages=rng.choice((1, 2, 3, 4)), SPLIT=split,
                              strategy=Strategy.LOOPED if split == 1 else Strategy.SPLIT), 0))
    return sorted(out, key=lambda c: json.dumps(c[0].to_json()))


def across_grid(default: TritonConfig, count: int, seed: int = 0) -> list[tuple[TritonConfig, int]]:
    """``count`` distinct (config, programs per multiprocessor) points for a kernel reducing across rows."""
    rng, out = random.Random(seed), set()
    points = [(x, w, s, p) for x in (1, 2, 4, 8) for w in (4, 8, 16, 32) for s in (1, 2, 3) for p in (1, 2, 4)]
    for x, w, s, p in rng.sample(points, min(count, len(points))):
        out.add((TritonConfig(XBLOCK=x, RBLOCK=default.RBLOCK, num_warps=w, num_stages=s), p))
    return sorted(out, key=lambda c: (json.dumps(c[0].to_json()), c[1]))


def short_grid(row: int) -> list[tuple[TritonConfig, int]]:
    """Persistent tiles of the whole short row by 32-1024 rows (the rows' dim contiguous), 2-16 warps."""
    return [(TritonConfig(XBLOCK=x, RBLOCK=next_pow2(row), num_warps=w, strategy=Strategy.PERSISTENT), 0)
            for x in (32, 64, 128, 256, 512, 1024) for w in (2, 4, 8, 16) if x * next_pow2(row) <= 32768]


def rows_grid(row: int) -> list[tuple[TritonConfig, int]]:
    """Persistent tiles of one to four rows, and looped chunks of a quarter to half a row (the
    row read again for the later phases, from L2), over 4-16 warps."""
    out = [(TritonConfig(XBLOCK=x, RBLOCK=row, num_warps=w, strategy=Strategy.PERSISTENT), 0)
           for x in (1, 2, 4) for w in (4, 8, 16)]
    out += [(TritonConfig(XBLOCK=1, RBLOCK=rb, num_warps=w, num_stages=s, strategy=Strategy.LOOPED), 0)
            for rb in (row // 4, row // 2) for w in (4, 8) for s in (1, 2)]
    return out


def pointwise_grid() -> list[tuple[TritonConfig, int]]:
    """Flat blocks of 512-4096 elements and 2-D tiles of 4 rows (``YBLOCK``), over 4 or 8 warps."""
    return [(TritonConfig(XBLOCK=x, YBLOCK=y, num_warps=w), 0)
            for x in (512, 1024, 2048, 4096) for y in (1, 4) for w in (4, 8)]


def _frac(moved: int, us: float, copy_gbs: float) -> float:
    return moved / (us * 1e-6) / (copy_gbs * 1e9)


def peer_us(fn, x, *rest) -> dict:
    """Eager, Inductor and a copy of ``x``: kernel-time medians (µs) from ``do_bench`` of
    ``fn(x, *rest)``."""
    from triton.testing import do_bench

    if x.device.type != "cuda":
        return {}
    torch._dynamo.reset()
    inductor = torch.compile(fn)
    inductor(x, *rest)
    out = torch.empty_like(x)
    return {"eager": do_bench(lambda: fn(x, *rest)) * 1e3, "inductor": do_bench(lambda: inductor(x, *rest)) * 1e3,
            "copy_of_input": do_bench(lambda: out.copy_(x)) * 1e3}


def run_case(target: SweepTarget, pick, configs, copy_gbs: float, peers=None) -> dict:
    """The default config and ``configs`` ((config, programs per multiprocessor or 0) pairs) of
    the kernel ``pick(kernels)`` of ``target``'s graph, verified and timed."""
    backend = registry.get("triton")
    compiled_fn = compile_target(target, backend)
    lowered = compiled_fn.lowered
    args = list(compiled_fn.codegen.process_inputs(*target.inputs))
    expected = flat_tensors(target.fn(*target.inputs))
    harness = GraphHarness(lowered.compiled, lambda g: flat_tensors(lowered.run(list(args), g)), expected)
    kernel = pick(lowered.compiled.schedule.kernels)
    default = backend.default_config(kernel)
    moved = sum(t.numel() * t.element_size() for t in flat_tensors(target.inputs) + expected)
    rows, standard = [], codegen.ACROSS_PROGRAMS
    for config, per_sm in [(default, 0)] + [c for c in configs if c != (default, 0)]:
        codegen.ACROSS_PROGRAMS = per_sm * sm_count() if per_sm else standard
        try:
            launcher = backend.compile([(kernel, config)]).launchers[kernel.name]
        finally:
            codegen.ACROSS_PROGRAMS = standard
        row = {"config": config.to_json(), "programs_per_sm": per_sm or None}
        check, _ = harness.verify(kernel, launcher)
        if not check.ok:
            rows.append({**row, "wrong": check.message})
            continue
        us = min(harness.time(kernel, launcher).p50_us for _ in range(2))
        rows.append({**row, "us": us, "frac": _frac(moved, us, copy_gbs)})
    timed = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    return {"case": target.name, "kernel": kernel.name, "bytes": moved, "default": rows[0], "best": timed[:8],
            "wrong": [r for r in rows if "wrong" in r][:3],
            "peers": {k: {"us": v, "frac": _frac(moved, v, copy_gbs)} for k, v in (peers or {}).items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=60)
    p.add_argument("--copy-gbs", type=float, default=4281.0)
    p.add_argument("--small", action="store_true", help="interpreter-sized shapes")
    p.add_argument("cases", nargs="*", default=list(STRIDED) + list(SHORT) + list(POINTWISE) + list(ACROSS) + list(ROWS))
    opts = p.parse_args()
    for name in opts.cases:
        if name in ACROSS:
            target = training_targets(WORKLOADS[name], "triton", "tiny" if opts.small else "gpu")[1]
            kernels = compile_target(target, "triton").lowered.compiled.schedule.kernels
            across = next(k for k in kernels if k.across)
            configs = across_grid(registry.get("triton").default_config(across), opts.configs)
            result = run_case(target, lambda ks: next(k for k in ks if k.across), configs, opts.copy_gbs)
        elif name in ROWS:
            w = WORKLOADS[name]
            args = w.inputs("tiny" if opts.small else "gpu", device=registry.get("triton").device)
            result = run_case(SweepTarget(name, w.fn, args), lambda ks: ks[0], rows_grid(next_pow2(args[0].shape[-1])),
                              opts.copy_gbs, peer_us(w.fn, *args))
        elif name in POINTWISE:
            fn, shapes, small = POINTWISE[name]
            args = tuple(torch.randn(*shape, device=registry.get("triton").device) for shape in (small if opts.small else shapes))
            result = run_case(SweepTarget(name, fn, args), lambda ks: ks[0], pointwise_grid(), opts.copy_gbs,
                              peer_us(fn, *args))
        elif name in SHORT:
            fn, shape, small = SHORT[name]
            x = torch.randn(*(small if opts.small else shape), device=registry.get("triton").device)
            result = run_case(SweepTarget(name, fn, (x,)), lambda ks: ks[0], short_grid(x.shape[1]),
                              opts.copy_gbs, peer_us(fn, x))
        else:
            fn, shape, small = STRIDED[name]
            x = torch.randn(*(small if opts.small else shape), device=registry.get("triton").device)
            result = run_case(SweepTarget(name, fn, (x,)), lambda ks: ks[0], strided_grid(opts.configs),
                              opts.copy_gbs, peer_us(fn, x))
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
