"""The backward kernel of a training row under several configs: which tiling, program count and
pipelining reads the row's gradients fastest, before the heuristics are changed to choose it.

The backward graph AOTAutograd hands over is captured with its real inputs, compiled by loopnest
under each variant (a config for its row kernel, and codegen switches such as
``ACROSS_PROGRAMS``), checked against the same graph run by PyTorch, and timed with ``do_bench``
(the kernels alone: no torch.compile entry). Fractions are of the 4281 GB/s copy on the bytes the
backward must move (every input of its graph read once, every output written once).

Run on the device: python bench/train_variants.py [layernorm_train rmsnorm_train_bf16 ...]
Check on a CPU: TRITON_INTERPRET=1 python bench/train_variants.py --size cache
"""
from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from common import triton_median_ms, triton_registers  # noqa: E402
from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition  # noqa: E402

from loopnest.autotune.workloads import WORKLOADS, training_step  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.backends.base import schedule_for  # noqa: E402
from loopnest.backends.triton import codegen  # noqa: E402
from loopnest.backends.triton.params import TritonConfig  # noqa: E402
from loopnest.lowering.decompositions import decomposition_table  # noqa: E402
from loopnest.lowering.fx_lowering import FxLowering  # noqa: E402
from loopnest.pipeline import compile_graph  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
ACROSS = "ACROSS_PROGRAMS"


def _rows(xblock: int = 1, warps: int = 8, stages: int = 1) -> dict:
    return dict(XBLOCK=xblock, RBLOCK=4096, num_warps=warps, num_stages=stages, strategy="persistent")


VARIANTS = [  # (label, config of the row kernel or None for the default, codegen switches)
    ("default", None, {}),
    ("XBLOCK 1, 8 warps", _rows(), {}),
    ("XBLOCK 1, 4 warps", _rows(warps=4), {}),
    ("XBLOCK 1, 4 warps, 528 programs", _rows(warps=4), {ACROSS: 528}),
    ("XBLOCK 1, 16 warps", _rows(warps=16), {}),
    ("XBLOCK 1, 8 warps, 132 programs", _rows(), {ACROSS: 132}),
    ("XBLOCK 1, 8 warps, 528 programs", _rows(), {ACROSS: 528}),
    ("XBLOCK 2, 8 warps", _rows(xblock=2), {}),
    ("XBLOCK 2, 4 warps", _rows(xblock=2, warps=4), {}),
    ("XBLOCK 2, 16 warps", _rows(xblock=2, warps=16), {}),
    ("XBLOCK 2, 8 warps, 132 programs", _rows(xblock=2), {ACROSS: 132}),
    ("XBLOCK 2, 8 warps, 528 programs", _rows(xblock=2), {ACROSS: 528}),
    ("XBLOCK 4, 8 warps", _rows(xblock=4), {}),
    ("XBLOCK 4, 16 warps", _rows(xblock=4, warps=16), {}),
]


@triton.jit
def rms_bwd_kernel(X, W, G, RSTD, DX, WS, ROWS: tl.constexpr, N: tl.constexpr, PER: tl.constexpr,
                   PREFETCH: tl.constexpr):
    """RMSNorm's backward over PER consecutive rows: dx per row, the weight gradient's partial
    per program; with PREFETCH the next row's loads are issued before this row's reduction."""
    pid = tl.program_id(0)
    cols = tl.arange(0, N)
    acc = tl.zeros([N], tl.float32)
    start = pid * PER
    g_next = tl.load(G + start * N + cols)
    x_next = tl.load(X + start * N + cols)
    for i in range(PER):
        row = start + i
        if PREFETCH:
            g = g_next.to(tl.float32)
            x = x_next.to(tl.float32)
            nxt = tl.minimum(row + 1, ROWS - 1)
            g_next = tl.load(G + nxt * N + cols)
            x_next = tl.load(X + nxt * N + cols)
        else:
            g = tl.load(G + row * N + cols).to(tl.float32)
            x = tl.load(X + row * N + cols).to(tl.float32)
        w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
        r = tl.load(RSTD + row)
        gw = g * w
        dot = tl.sum(gw * x, 0)
        dx = gw * r + (dot * -0.5 * r * r * r / N) * (2.0 * x)
        tl.store(DX + row * N + cols, dx.to(tl.bfloat16))
        acc += g * (x * r).to(tl.bfloat16).to(tl.float32)
    tl.store(WS + pid * N + cols, acc)


def rms_bwd_variant(per: int, warps: int, prefetch: bool):
    """The hand-written RMSNorm backward as a call on the backward graph's inputs."""
    def call(x, w, rstd, g):
        rows, n = x.shape
        dx = torch.empty_like(x)
        ws = torch.empty(rows // per, n, device=x.device, dtype=torch.float32)
        rms_bwd_kernel[(rows // per,)](x, w, g, rstd, dx, ws, ROWS=rows, N=n, PER=per, PREFETCH=prefetch,
                                       num_warps=warps)
        return dx, ws.sum(0).to(w.dtype)
    return call


HAND = {"rmsnorm_train_bf16": [(f"hand-written, {per} rows per program, {w} warps{', prefetch' if pf else ''}",
                                rms_bwd_variant(per, w, pf))
                               for per, w, pf in [(128, 8, False), (128, 8, True), (128, 16, True), (64, 8, True),
                                                  (16, 8, True), (16, 16, False), (256, 8, True)]]}


def backward_graph(name: str, size: str):
    """The row's backward ATen graph and the real inputs it was called with."""
    w = WORKLOADS[name]
    found = []

    def grab(gm, example_inputs):
        found.append(gm)
        if len(found) == 1:
            return make_boxed_func(gm.forward)

        def record(args):
            found.append([a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args])
            return gm(*args)
        record._boxed_call = True
        return record

    step = aot_function(w.fn, fw_compiler=grab, bw_compiler=grab, decompositions=decomposition_table(),
                        partition_fn=min_cut_rematerialization_partition)  # as torch.compile(backend="loopnest")
    training_step(step, w.train_inputs(size, device=DEVICE))
    return found[1], found[2]


def probe(name: str, size: str, copy_gbs: float, variants: bool = True) -> None:
    """Print one table: each variant's time and fraction of copy for ``name``'s backward."""
    gm, args = backward_graph(name, size)
    want = [t for t in gm(*args) if isinstance(t, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in [*args, *want] if isinstance(t, torch.Tensor))
    graph = FxLowering(gm).run().graph
    backend = registry.get("triton")
    kernels = schedule_for(graph, backend, name).kernels
    row = max(kernels, key=lambda k: k.bytes_moved().as_int() or 0)
    print(f"\n## {name} backward ({len(kernels)} kernels, {nbytes / 1e6:.0f} MB)\n"
          "| variant | ms | frac of copy | relative error, worst output | registers/spills |\n|---|---|---|---|---|")
    for label, config, switches in (VARIANTS if variants else VARIANTS[:1]):
        saved = {k: getattr(codegen, k) for k in switches}
        try:
            for k, v in switches.items():
                setattr(codegen, k, v)
            configs = {row.name: TritonConfig(**config)} if config else {}
            compiled = compile_graph(graph, backend, name, configs)
            got = [t for t in compiled(*args) if isinstance(t, torch.Tensor)]
            err = max((((g.double() - e.double()).norm() / e.double().norm()).item() for g, e in zip(got, want)),
                      default=0.0)
            ms = triton_median_ms(compiled, args)
            regs = " ".join(triton_registers(compiled))
        finally:
            for k, v in saved.items():
                setattr(codegen, k, v)
        print(f"| {label} | {ms:.4f} | {nbytes / (ms * 1e-3) / 1e9 / copy_gbs:.2f} | {err:.1e} | {regs} |", flush=True)
    for label, call in HAND.get(name, []):
        if args[0].shape[0] % 256:
            continue
        got = call(*args)
        err = max(((g.double() - e.double()).norm() / e.double().norm()).item() for g, e in zip(got, want))
        ms = triton_median_ms(call, args)
        print(f"| {label} | {ms:.4f} | {nbytes / (ms * 1e-3) / 1e9 / copy_gbs:.2f} | {err:.1e} | |", flush=True)


def main() -> None:
    """Probe each chosen training row."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="*", default=["layernorm_train", "rmsnorm_train_bf16"])
    p.add_argument("--size", default="gpu")
    p.add_argument("--copy-gbs", type=float, default=4281.0)
    p.add_argument("--default-only", action="store_true", help="loopnest's default config only (and HAND's)")
    a = p.parse_args()
    for name in a.rows:
        probe(name, a.size, a.copy_gbs, not a.default_only)


if __name__ == "__main__":
    main()
