"""What makes a generated split_sync row kernel slow when its softmax statistics meet at one
barrier: the generated source of one workload's row kernel, launched directly under textual
mutations (each timed with ``do_bench``, with its registers and spills), to find the statement
that separates it from a fast hand-written one. It found where not to look; the cause, row
values broadcast through shared memory, showed in the PTX (``codegen._Generator._split_sync``).

Run on the device: python bench/split_sync_probe.py [--workload few_rows_logsoftmax]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile

import torch
import triton
from torch.fx.experimental.proxy_tensor import make_fx

from loopnest.autotune.workloads import WORKLOADS
from loopnest.backends import registry
from loopnest.backends.base import schedule_for
from loopnest.backends.triton import codegen
from loopnest.backends.triton.codegen import generate
from loopnest.backends.triton.settings import TritonSettings
from loopnest.lowering.decompositions import decomposition_table
from loopnest.lowering.fx_lowering import FxLowering

SHIFT = 'tl.where(tl.abs(acc0_max) == float("inf"), 0.0, acc0_max)'
SPIN = ("    arrived = tl.atomic_add(arrived_ptr, 1, sem=\"acq_rel\") + 1\n"
        "    while arrived < SPLIT * 1:\n        arrived = tl.atomic_add(arrived_ptr, 0, sem=\"acquire\")\n"
        "    tl.debug_barrier()\n")
PARTIAL_SUM = ('tl.reduce(acc0_part_sum * tl.minimum(tl.exp(tl.where(tl.abs(acc0_part_max) == float("inf"), '
               '0.0, acc0_part_max) - tl.where(tl.abs(acc0_max) == float("inf"), 0.0, acc0_max)), '
               '3.4028234663852886e+38), 1')
# name -> [(old, new), ...] applied to the generated source (one barrier for the statistics)
MUTATIONS = {
    "as generated": [],
    "a second barrier after the first": [(SPIN, SPIN + SPIN.replace("SPLIT * 1", "SPLIT * 2"))],
    "partial sums not rescaled": [(PARTIAL_SUM, "tl.reduce(acc0_part_sum, 1")],
    "no .cg on the partials": [(', cache_modifier=".cg")', ")")],
    "no barrier (wrong results)": [(SPIN, "")],
    "each program reads its own partials (wrong results)": [
        ("(xindex * SPLIT + sindex), cache_modifier", "(xindex * SPLIT + sid + sindex * 0), cache_modifier")],
    "row reloaded after the barrier": [
        ("    t2 = (t1 - acc0_out0)",
         "    t1r = tl.load(b_in__x__1 + (rindex + xindex*262144), mask=rmask, other=0)\n    t2 = (t1r - acc0_out0)")],
    "output reads the max only": [("t9 = (t2 - t8)", "t9 = t2")],
    "output without the statistics": [("tl.store(b_buf6 + (rindex + xindex*262144), t9, mask=rmask)",
                                       "tl.store(b_buf6 + (rindex + xindex*262144), t1, mask=rmask)")],
}
def main() -> None:
    """Generate, mutate, launch, time."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="few_rows_logsoftmax")
    a = p.parse_args()
    w = WORKLOADS[a.workload]
    args = w.inputs("gpu", device="cuda")
    gm = make_fx(w.fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*args)
    backend = registry.get("triton")
    (kernel,) = schedule_for(FxLowering(gm).run().graph, backend, a.workload).kernels
    cfg = backend.default_config(kernel)
    program = generate(kernel, cfg, TritonSettings(interpret=False, debug=False))  # one barrier
    one_pass = codegen.one_pass_statistics
    codegen.one_pass_statistics = lambda k, c: False  # each statistic at its own barrier
    two_barriers = generate(kernel, cfg, TritonSettings(interpret=False, debug=False))
    codegen.one_pass_statistics = one_pass
    x = args[0]
    want = w.fn(x)
    print(f"{a.workload}: {cfg}\n| source | ms | registers / spills | max error |\n|---|---|---|---|")
    runs = [(name, program, edits) for name, edits in MUTATIONS.items()] + [("two barriers", two_barriers, [])]
    for name, prog, edits in runs:
        source = prog.source
        for old, new in edits:
            if old not in source:
                print(f"| {name} | not applicable | | |")
                break
            source = source.replace(old, new)
        else:
            ms, regs, err = _time(source, prog, cfg, x, want)
            print(f"| {name} | {ms:.4f} | {regs} | {err:.1e} |", flush=True)


def _time(source: str, program, cfg, x, want):
    path = os.path.join(tempfile.mkdtemp(), "probe.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"probe_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, program.launches[0].fn)
    y = torch.empty_like(x)
    spaces = [(torch.zeros if ws.zeroed else torch.empty)(int(ws.numel.as_int()), device="cuda", dtype=ws.dtype)
              for ws in program.workspaces]

    def call():
        for ws, t in zip(program.workspaces, spaces):
            if ws.zeroed:
                t.zero_()
        return fn[(x.shape[0] * cfg.SPLIT,)](x, y, *spaces, XBLOCK=1, RBLOCK=cfg.RBLOCK, SPLIT=cfg.SPLIT,
                                             SBLOCK=triton.next_power_of_2(cfg.SPLIT), IDX64=False,
                                             num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    compiled = call()
    torch.cuda.synchronize()
    err = (y - want).abs().max().item()
    ms = triton.testing.do_bench(call, warmup=10, rep=100, return_mode="median")
    return ms, f"{compiled.n_regs} / {compiled.n_spills}", err


if __name__ == "__main__":
    main()
