"""Few short rows split across programs or not (``heuristics.FEW_ROWS_SPLIT_NUMEL``), side by side.

For each case, the graph is compiled twice in this process through ``loopnest.compile_fx`` (no
Dynamo), once with the threshold at 0 (every few-row reduction of rows of at least
``FEW_ROWS_SPLIT`` elements split, the rule before the threshold) and once at its value; then
both are timed in interleaved rounds: wall time per call of back-to-back calls (what a small model
waiting on the host sees) and ``do_bench``'s median with the L2 flushed (the GPU time).

Run on the device: python bench/few_rows_split.py
Check the script on a CPU: TRITON_INTERPRET=1 python bench/few_rows_split.py --smoke
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest
from loopnest.backends.triton import heuristics
from loopnest.lowering.decompositions import decomposition_table
from model_zoo import instantiate


def cases(device: str, smoke: bool) -> dict:
    """name -> (function, arguments)."""
    gen = torch.Generator().manual_seed(0)
    model, args = instantiate("conv_gn_silu", device)
    x = torch.randn(8, 64, 32, 32, generator=gen).to(device)
    w, b = torch.randn(64, generator=gen).to(device), torch.randn(64, generator=gen).to(device)
    rows = torch.randn(8, 16384, generator=gen).to(device)
    found = {"conv_gn_silu (model)": (model, args),
             "group_norm 8x64x32x32, 8 groups": (lambda x, w, b: F.group_norm(x, 8, w, b), (x, w, b)),
             "log_softmax 8x16384": (lambda x: torch.log_softmax(x, -1), (rows,))}
    return dict(list(found.items())[1:2]) if smoke else found


def compiled(fn, args, threshold: int):
    heuristics.FEW_ROWS_SPLIT_NUMEL = threshold
    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    out = loopnest.compile_fx(gm, list(args), backend="triton", tune="off")
    out(*args)
    configs = {k: c.strategy.value for k, c in out.lowered.compiled.configs.items()}
    return out, configs


def wall_us(fn, args, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--smoke", action="store_true", help="compile one case and print its configs (no timing)")
    opts = p.parse_args()
    device = "cpu" if opts.smoke else "cuda"
    default = heuristics.FEW_ROWS_SPLIT_NUMEL
    print("| case | configs, split always | configs, threshold | wall µs split / threshold | "
          "GPU µs split / threshold |\n|---|---|---|---|---|")
    for name, (fn, args) in cases(device, opts.smoke).items():
        split, split_cfg = compiled(fn, args, 0)
        kept, kept_cfg = compiled(fn, args, default)
        heuristics.FEW_ROWS_SPLIT_NUMEL = default
        if opts.smoke:
            print(f"| {name} | {split_cfg} | {kept_cfg} | - | - |")
            continue
        walls, gpus = {"split": [], "kept": []}, {"split": [], "kept": []}
        for _ in range(opts.rounds):
            for label, f in (("split", split), ("kept", kept)):
                walls[label].append(wall_us(f, args, 200))
                gpus[label].append(triton.testing.do_bench(lambda: f(*args), return_mode="median") * 1e3)
        w = {k: statistics.median(v) for k, v in walls.items()}
        g = {k: statistics.median(v) for k, v in gpus.items()}
        print(f"| {name} | {split_cfg} | {kept_cfg} | {w['split']:.1f} / {w['kept']:.1f} | "
              f"{g['split']:.1f} / {g['kept']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
