"""Lowering and scheduling time of real FX graphs (no codegen, no g++).

Traces a stack of TransformerEncoderLayers (eval) with make_fx, lowers the ATen graph to IR, then
times verify + schedule (fusion, kernel building, memory planning) on its own.
Run: python bench/schedule_latency.py [--layers 3]
"""
from __future__ import annotations

import argparse

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from loopnest.ir.verify import verify
from loopnest.lowering.fx_lowering import FxLowering
from loopnest.pipeline import gc_paused
from loopnest.scheduler import schedule

from common import median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=3)
    opts = parser.parse_args()
    torch.backends.mha.set_fastpath_enabled(False)
    model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
                                  for _ in range(opts.layers)]).eval()
    x = torch.randn(4, 64, 256)
    with torch.no_grad():
        gm = make_fx(model, pre_dispatch=False)(x)
    nodes = len(gm.graph.nodes)
    program = FxLowering(gm).run()
    ir_nodes = len(program.graph.nodes)

    def lower():
        with gc_paused():
            FxLowering(gm).run()

    def sched():
        with gc_paused():
            verify(program.graph)
            schedule(program.graph, "stack")

    kernels = len(schedule(program.graph, "stack").kernels)
    print(f"{opts.layers} TransformerEncoderLayers: {nodes} FX nodes -> {ir_nodes} IR nodes -> {kernels} kernels")
    print(f"lowering (FX -> IR): median {median_ms(lower, 7, collect=True):.1f} ms")
    print(f"verify + schedule:   median {median_ms(sched, 7, collect=True):.1f} ms")


if __name__ == "__main__":
    main()
