"""Hand-written Triton row kernels beside loopnest's generated ones: what a different kernel
structure would give on the suite's long-row workloads, before codegen is changed to emit it.

Variants (each verified against float64, then timed with ``do_bench`` beside eager, Inductor and
loopnest's defaults in the same run; a full call each, so the cross-entropy variants include the
mean over the row losses):

* ``ce_vocab_bf16`` (4096 x 128256 bf16 logits): looped rows whose chunk is ``R`` sub-rows of ``W``
  elements, each sub-row held by one warp, so the chunk's max and sum need no barrier across
  warps; each sub-row keeps its own running max and sum, combined once at the end of the row.
  Codegen has emitted this form since (``codegen._subrows``), in chunks of 4096.
* ``few_rows_logsoftmax`` (128 x 262144) and ``wide_softmax`` (1024 x 131072): rows split across
  ``SPLIT`` programs of one launch that exchange each slice's (max, sum of exp) once, instead of
  the max and then the sum (two barriers); the softmax keeps ``exp(x - slice max)`` in registers
  and rescales it, one exp per element. Codegen has emitted both since (``codegen.
  one_pass_statistics``, ``codegen._reuse_exp_terms``).
* ``mean_mid`` ((32, 2048, 512) float32, ``x.mean(1)``): tiles of columns x rows, the reduced dim
  split over programs that add into a zeroed output with atomics; a copy and a full sum of the
  same tensor show what a kernel of this size reaches at all.

``--generated`` times loopnest's own kernels for these rows instead, under configs and codegen
switches given in ``GENERATED`` (each with its kernels' registers and spills from Triton, and its
source written to ``--dump``), to find what separates them from the hand-written ones.

Run on the device: python bench/row_variants.py [--copy-gbs 4281] [--generated [--dump DIR]] [--no-peers] [ROW ...]
Check the kernels on a CPU: TRITON_INTERPRET=1 python bench/row_variants.py --small (the split
variants wait for each other's programs, which the interpreter runs one by one: GPU only)
"""
from __future__ import annotations

import argparse
import itertools
import os
import tempfile

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import loopnest  # noqa: E402,F401  (registers the torch.compile backend)
from common import triton_median_ms, triton_registers  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.backends.base import schedule_for  # noqa: E402
from loopnest.backends.triton import codegen, emit, reductions  # noqa: E402
from loopnest.backends.triton.params import Strategy, TritonConfig  # noqa: E402
from loopnest.lowering.decompositions import decomposition_table  # noqa: E402
from loopnest.lowering.fx_lowering import FxLowering  # noqa: E402
from loopnest.pipeline import compile_graph  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"


@triton.jit
def _ce_chunk(x, m, s, EXP2: tl.constexpr):
    """One chunk's update of each sub-row's running (max, sum of exp)."""
    top = tl.maximum(m, tl.max(x, 1, keep_dims=True))
    shift = tl.where(top == float("-inf"), 0.0, top)
    LOG2E: tl.constexpr = 1.4426950408889634
    if EXP2 == 1:  # exp(x - m) as exp2(x * log2 e - m * log2 e): one multiply-add, the flushing ex2
        s = s * tl.exp2((m - shift) * LOG2E) + tl.sum(tl.exp2(x * LOG2E - shift * LOG2E), 1, keep_dims=True)
    elif EXP2 == 2:  # exp(x - m) as exp2((x - m) * log2 e): tl.exp's own arithmetic, the flushing ex2
        s = s * tl.exp2((m - shift) * LOG2E) + tl.sum(tl.exp2((x - shift) * LOG2E), 1, keep_dims=True)
    else:
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 1, keep_dims=True)
    return top, s


@triton.jit
def ce_subrow_kernel(X, T, OUT, N: tl.constexpr, R: tl.constexpr, W: tl.constexpr, PREFETCH: tl.constexpr,
                     EXP2: tl.constexpr):
    """One row's cross-entropy loss: logsumexp(x) - x[t], the row read once in chunks of R x W
    (with PREFETCH, each chunk's loads issued before the previous chunk's math)."""
    row = tl.program_id(0).to(tl.int64)
    base = X + row * N
    offs = tl.arange(0, R)[:, None] * W + tl.arange(0, W)[None, :]
    m = tl.full([R, 1], float("-inf"), tl.float32)
    s = tl.zeros([R, 1], tl.float32)
    FULL: tl.constexpr = (N // (R * W)) * (R * W)
    if PREFETCH and FULL > 0:
        x = tl.load(base + offs)
        for start in range(R * W, FULL, R * W):
            nxt = tl.load(base + start + offs)
            m, s = _ce_chunk(x.to(tl.float32), m, s, EXP2)
            x = nxt
        m, s = _ce_chunk(x.to(tl.float32), m, s, EXP2)
    else:
        for start in range(0, FULL, R * W):
            m, s = _ce_chunk(tl.load(base + start + offs).to(tl.float32), m, s, EXP2)
    if FULL < N:
        idx = FULL + offs
        m, s = _ce_chunk(tl.load(base + idx, mask=idx < N, other=float("-inf")).to(tl.float32), m, s, EXP2)
    big = tl.max(tl.max(m, 1), 0)
    total = tl.sum(tl.sum(s * tl.exp(m - big), 1), 0)
    t = tl.load(T + row)
    picked = tl.load(base + t).to(tl.float32)
    tl.store(OUT + row, big + tl.log(total) - picked)


@triton.jit
def split_rows_kernel(X, Y, WS, CNT, epoch, N: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                      SOFTMAX: tl.constexpr):
    """Softmax or log_softmax of rows split into SPLIT slices of BLOCK (N == SPLIT * BLOCK): one
    exchange of (slice max, slice sum) through WS, one barrier on CNT[row]."""
    pid = tl.program_id(0)
    row = pid // SPLIT
    offs = (pid % SPLIT) * BLOCK + tl.arange(0, BLOCK)
    base = row.to(tl.int64) * N
    x = tl.load(X + base + offs)
    m = tl.max(x, 0)
    e = tl.exp(x - m)
    tl.store(WS + pid * 2, m)
    tl.store(WS + pid * 2 + 1, tl.sum(e, 0))
    tl.debug_barrier()
    arrived = tl.atomic_add(CNT + row, 1, sem="acq_rel") + 1
    while arrived < SPLIT * epoch:
        arrived = tl.atomic_add(CNT + row, 0, sem="acquire")
    tl.debug_barrier()
    k = (row * SPLIT + tl.arange(0, SPLIT)) * 2
    ms = tl.load(WS + k, cache_modifier=".cg")
    ss = tl.load(WS + k + 1, cache_modifier=".cg")
    big = tl.max(ms, 0)
    total = tl.sum(ss * tl.exp(ms - big), 0)
    if SOFTMAX:
        tl.store(Y + base + offs, e * (tl.exp(m - big) / total))
    else:
        tl.store(Y + base + offs, x - big - tl.log(total))


@triton.jit
def mid_mean_kernel(X, OUT, M: tl.constexpr, N: tl.constexpr, RB: tl.constexpr, XB: tl.constexpr,
                    S: tl.constexpr):
    """``x.mean(1)`` of a (B, M, N) tensor: program (b, column block, slice) sums M // S rows of
    XB columns in [RB, XB] tiles (each row of a tile contiguous); slices add into a zeroed OUT."""
    pid = tl.program_id(0)
    s = pid % S
    cb = (pid // S) % (N // XB)
    b = pid // (S * (N // XB))
    cols = cb * XB + tl.arange(0, XB)
    offs = tl.arange(0, RB)[:, None] * N + cols[None, :]
    base = X + b.to(tl.int64) * M * N + s * (M // S) * N
    acc = tl.zeros([RB, XB], tl.float32)
    for r in range(0, M // S, RB):
        acc += tl.load(base + r * N + offs)
    total = tl.sum(acc, 0) / M
    if S == 1:
        tl.store(OUT + b * N + cols, total)
    else:
        tl.atomic_add(OUT + b * N + cols, total, sem="relaxed")


def mid_variant(xb: int, rb: int, split: int, warps: int, stages: int):
    """The tiled middle-dimension mean as a call (a zeroed output when slices add into it)."""
    def call(x):
        b, m, n = x.shape
        out = (torch.zeros if split > 1 else torch.empty)(b, n, device=x.device, dtype=torch.float32)
        mid_mean_kernel[(b * (n // xb) * split,)](x, out, M=m, N=n, RB=rb, XB=xb, S=split, num_warps=warps,
                                                  num_stages=stages)
        return out
    return call


def ce_fn(logits, target):
    return torch.nn.functional.cross_entropy(logits.float(), target)


def ce_variant(r: int, w: int, warps: int, stages: int, prefetch: bool = False, exp2: int = 0):
    """The sub-row cross-entropy as a call: row losses, then their mean."""
    def call(logits, target):
        rows, n = logits.shape
        out = torch.empty(rows, device=logits.device, dtype=torch.float32)
        ce_subrow_kernel[(rows,)](logits, target, out, N=n, R=r, W=w, PREFETCH=prefetch, EXP2=exp2,
                                  num_warps=warps, num_stages=stages)
        return out.mean()
    return call


def split_variant(split: int, warps: int, softmax: bool):
    """The one-barrier split row kernel as a call (its counter grows by SPLIT per call)."""
    state = {}

    def call(x):
        rows, n = x.shape
        if "cnt" not in state:
            state.update(cnt=torch.zeros(rows, device=x.device, dtype=torch.int32), epoch=0,
                         ws=torch.empty(rows * split * 2, device=x.device, dtype=torch.float32))
        state["epoch"] += 1
        y = torch.empty_like(x)
        split_rows_kernel[(rows * split,)](x, y, state["ws"], state["cnt"], state["epoch"], N=n, SPLIT=split,
                                           BLOCK=n // split, SOFTMAX=softmax, num_warps=warps)
        return y
    return call


def rows(small: bool) -> dict:
    """name -> (eager fn, inputs, min bytes, [(variant name, call), ...])."""
    g = torch.Generator().manual_seed(0)
    ce_shape, few, wide = ((8, 3000), (4, 8192), (4, 4096)) if small else \
        ((4096, 128256), (128, 262144), (1024, 131072))
    logits = (torch.randn(*ce_shape, generator=g) * 2).to(torch.bfloat16).to(DEVICE)
    target = torch.randint(0, ce_shape[1], (ce_shape[0],), generator=g).to(DEVICE)
    x_few = torch.randn(*few, generator=g).to(DEVICE)
    x_wide = torch.randn(*wide, generator=g).to(DEVICE)
    # (R, W, warps, stages, prefetch, exp2: 0 tl.exp, 1 one multiply-add and exp2, 2 tl.exp's form with exp2)
    ce_grid = [(32, 128, 8, 2, False, 0), (32, 128, 8, 2, False, 1), (32, 128, 8, 2, False, 2),
               (16, 128, 8, 2, False, 1), (16, 128, 8, 2, False, 2), (16, 256, 8, 2, False, 2),
               (32, 128, 8, 2, True, 2)]
    if small:
        ce_grid = [(4, 64, 2, 1, False, 0), (2, 128, 4, 2, True, 1), (4, 64, 2, 1, True, 2)]
    # the interpreter runs programs one after another: a program waiting for the others never returns
    splits = [] if INTERPRET else [(4, 4), (8, 4)] if small else \
        [(s, w) for s, w in itertools.product((8, 16, 32), (8, 16)) if few[1] // s <= 32768]
    wide_splits = [] if INTERPRET else [(4, 4)] if small else list(itertools.product((8, 16), (8, 16)))
    x_mid = torch.randn(*((2, 256, 64) if small else (32, 2048, 512)), generator=g).to(DEVICE)
    mid_grid = [(4, 16, 1, 1, 1), (4, 16, 2, 1, 1)] if small else \
        [(32, 32, 1, 8, 1), (128, 16, 1, 4, 2), (128, 16, 4, 4, 2), (128, 32, 4, 8, 2), (256, 16, 4, 8, 2),
         (128, 16, 8, 4, 2), (64, 32, 2, 4, 2), (512, 8, 4, 4, 2), (128, 8, 8, 2, 3), (256, 32, 8, 8, 2)]
    lsm = lambda x: torch.log_softmax(x, -1)  # noqa: E731
    sm = lambda x: torch.softmax(x, -1)  # noqa: E731
    return {
        "ce_vocab_bf16": (ce_fn, (logits, target), logits.numel() * 2 + target.numel() * 8,
                          [(f"subrows R{r} W{w} w{nw} s{st}{' prefetch' * pf}{('', ' exp2 fma', ' exp2')[e2]}",
                           ce_variant(r, w, nw, st, pf, e2)) for r, w, nw, st, pf, e2 in ce_grid]),
        "few_rows_logsoftmax": (lsm, (x_few,), x_few.numel() * 8,
                                [(f"one barrier SPLIT{s} w{w}", split_variant(s, w, False)) for s, w in splits]),
        "wide_softmax": (sm, (x_wide,), x_wide.numel() * 8,
                         [(f"one barrier SPLIT{s} w{w}", split_variant(s, w, True)) for s, w in wide_splits]),
        "mean_mid": (lambda x: x.mean(1), (x_mid,), x_mid.numel() * 4,
                     [(f"tiles {xb}x{rb} split {sp} w{w} s{st}", mid_variant(xb, rb, sp, w, st))
                      for xb, rb, sp, w, st in mid_grid]),
    }


_ONE_PASS = codegen.one_pass_statistics
TWO_BARRIERS = {"one_pass_statistics": lambda kernel, config: _ONE_PASS(kernel, config)
                and config.strategy is not Strategy.SPLIT_SYNC}  # each statistic at its own barrier


# split_sync as generated before 2026-12-05 19:00 UTC: partials read as [1, SBLOCK] tiles, rows addressed by
# one int32 offset (wide_softmax: 96 registers, two programs per multiprocessor; now 80 and three)
TILED_PARTIALS = {"ROW_POINTERS": False, "VECTOR_PARTIALS": False}


def _sync(split: int, warps: int, rblock: int = 16384) -> dict:
    """A split_sync config: one row per program group, ``split`` slices of ``rblock`` elements."""
    return dict(XBLOCK=1, RBLOCK=rblock, num_warps=warps, strategy="split_sync", SPLIT=split)


def _fma_exp(x: str, dtype=None) -> str:
    """``flushing_exp`` of ``a - b`` as ``exp2(a * log2 e - b * log2 e)``: one multiply-add per
    element where ``b`` is a row value, at the price of ``b * log2 e``'s rounding (|b| * 2**-24)."""
    a, _, b = x.partition(" - ")
    return f"tl.exp2({a} * 1.4426950408889634 - ({b}) * 1.4426950408889634)"


# row -> [(label, config of the row kernel or None for the default, {codegen attribute: value})]
GENERATED = {
    "wide_softmax": [
        ("default", None, {}),
        ("tiled partials, one offset (before)", None, TILED_PARTIALS),
        ("fused w16", _sync(8, 16), {}),
        ("two barriers w8", _sync(8, 8), TWO_BARRIERS),
        ("two barriers w16", _sync(8, 16), TWO_BARRIERS),
    ],
    "few_rows_logsoftmax": [
        ("default", None, {}),
        ("tiled partials, one offset (before)", None, TILED_PARTIALS),
        ("fused SPLIT16 w16", _sync(16, 16), {}),
        ("fused SPLIT16 w8", _sync(16, 8), {}),
        ("two barriers SPLIT32 w8", _sync(32, 8, 8192), TWO_BARRIERS),
        ("two barriers SPLIT16 w16", _sync(16, 16), TWO_BARRIERS),
    ],
    "mean_mid": [
        ("default", None, {}),
        ("64x32 w16", dict(XBLOCK=64, RBLOCK=32, num_warps=16, strategy="looped"), {}),
        ("32x64 w16", dict(XBLOCK=32, RBLOCK=64, num_warps=16, strategy="looped"), {}),
    ],
    "ce_vocab_bf16": [
        ("default", None, {}),
        ("exp2 as one multiply-add", None, {"flushing_exp": _fma_exp}),
        ("no sub-rows", None, {"SUBROW": 1 << 20}),
        ("sub-rows RBLOCK 4096", dict(XBLOCK=1, RBLOCK=4096, num_warps=8, num_stages=2, strategy="looped"), {}),
        ("sub-rows RBLOCK 4096 s3", dict(XBLOCK=1, RBLOCK=4096, num_warps=8, num_stages=3, strategy="looped"), {}),
        ("sub-rows RBLOCK 2048 w4", dict(XBLOCK=1, RBLOCK=2048, num_warps=4, num_stages=2, strategy="looped"), {}),
        ("sub-rows of 256, RBLOCK 4096", dict(XBLOCK=1, RBLOCK=4096, num_warps=8, num_stages=2, strategy="looped"),
         {"SUBROW": 256}),
    ],
}


def generated(name: str, fn, args, nbytes: int, copy_gbs: float, dump: str | None) -> None:
    """Time loopnest's kernels for ``name`` under each of ``GENERATED[name]``."""
    gm = torch.fx.experimental.proxy_tensor.make_fx(fn, decomposition_table=decomposition_table(),
                                                    tracing_mode="fake")(*args)
    graph = FxLowering(gm).run().graph
    backend = registry.get("triton")
    kernels = schedule_for(graph, backend, name).kernels
    want = fn(*(t.double() if t.is_floating_point() else t for t in args))
    print(f"\n## {name}, loopnest's kernels ({nbytes / 1e6:.0f} MB minimum)\n"
          "| variant | ms | frac of copy | max error | registers / spills per kernel |\n|---|---|---|---|---|")
    for label, config, switches in GENERATED[name]:
        where = {k: next(m for m in (codegen, emit, reductions) if hasattr(m, k)) for k in switches}
        saved = {k: getattr(where[k], k) for k in switches}
        try:
            for k, v in switches.items():
                setattr(where[k], k, v)
            configs = {k.name: (TritonConfig(**config) if config and k is kernels[0] else backend.default_config(k))
                       for k in kernels}
            compiled = compile_graph(graph, backend, name, configs)  # kernel names as in configs
            call = lambda *a: compiled(*a)  # noqa: E731
            got = call(*args)
            got = got[0] if isinstance(got, (tuple, list)) else got
            err = (got.double() - want).abs().max().item()
            ms = triton_median_ms(call, args)
            regs = triton_registers(compiled)
            if dump:
                for k, c in configs.items():
                    kernel = next(x for x in kernels if x.name == k)
                    with open(os.path.join(dump, f"{name}_{label.replace(' ', '_')}_{k}.py"), "w") as f:
                        f.write(f"# {c}\n" + backend.codegen(kernel, c))
        finally:
            for k, v in saved.items():
                setattr(where[k], k, v)
        print(f"| {label} | {ms:.4f} | {nbytes / (ms * 1e-3) / 1e9 / copy_gbs:.2f} | {err:.1e} | {' '.join(regs)} |",
              flush=True)


def references(x: torch.Tensor) -> list:
    """What the device does with a tensor of the row's size: a copy (read and write) and a full
    sum (read only), so a row's fraction can be set beside the best the size allows."""
    return [("x.clone()", torch.clone, 2 * x.numel() * x.element_size()),
            ("x.sum()", torch.sum, x.numel() * x.element_size())]


def main() -> None:
    """Verify and time every variant of the chosen rows; print one table per row."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="*")
    p.add_argument("--copy-gbs", type=float, default=4281.0)
    p.add_argument("--small", action="store_true", help="small shapes (with TRITON_INTERPRET=1 on a CPU)")
    p.add_argument("--generated", action="store_true", help="loopnest's kernels under GENERATED's variants")
    p.add_argument("--dump", help="a folder for the generated sources (with --generated)")
    p.add_argument("--no-peers", action="store_true", help="the hand-written variants alone (no eager, Inductor "
                   "or loopnest defaults: no compile time)")
    a = p.parse_args()
    table = rows(a.small)
    for name in a.rows or list(table):
        fn, args, nbytes, variants = table[name]
        if a.generated:
            generated(name, fn, args, nbytes, a.copy_gbs, a.dump)
            continue
        want = fn(*(t.double() if t.is_floating_point() else t for t in args))
        peers = [] if a.no_peers else [("eager", fn)]
        if not INTERPRET and not a.no_peers:
            peers += [("inductor max-autotune", torch.compile(fn, mode="max-autotune-no-cudagraphs"))]
        if not a.no_peers:
            peers += [("loopnest defaults", torch.compile(fn, backend="loopnest", options={"tune": "off"}))]
        print(f"\n## {name} ({nbytes / 1e6:.0f} MB minimum)\n"
              "| variant | ms | frac of copy | max error |\n|---|---|---|---|")
        for label, call in peers + variants:
            got = call(*args)
            err = (got.double() - want).abs().max().item()
            ms = triton_median_ms(call, args)
            print(f"| {label} | {ms:.4f} | {nbytes / (ms * 1e-3) / 1e9 / a.copy_gbs:.2f} | {err:.1e} |", flush=True)
        for label, call, moved in ([] if INTERPRET else references(args[0])):
            ms = triton_median_ms(call, (args[0],))
            print(f"| reference: {label} | {ms:.4f} | {moved / (ms * 1e-3) / 1e9 / a.copy_gbs:.2f} | |", flush=True)


if __name__ == "__main__":
    main()
