"""Print the scheduled kernels of a workload and the source a backend generates for each, with
the default config (or a config given as JSON), without running anything: no GPU needed.

python bench/show_kernels.py few_rows_logsoftmax --backend triton [--size gpu] [--config '{"RBLOCK": 8192}']

A training row (``layernorm_train``, ...) shows the forward graph's kernels, then the backward's,
as AOTAutograd hands them over.
"""
from __future__ import annotations

import argparse
import json

import torch
from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
from torch.fx.experimental.proxy_tensor import make_fx

from loopnest.autotune.workloads import WORKLOADS, training_step
from loopnest.backends import registry
from loopnest.backends.base import schedule_for
from loopnest.lowering.fx_lowering import FxLowering
from loopnest.lowering.decompositions import decomposition_table


def main() -> None:
    """Print each kernel's IR, its config and its generated source."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--backend", default="triton", choices=("triton", "cpp"))
    p.add_argument("--size", default="gpu")
    p.add_argument("--config", help="JSON config applied to every kernel (default: the heuristic's)")
    a = p.parse_args()
    w = WORKLOADS[a.workload]
    backend = registry.get(a.backend)
    for name, gm in graphs(w, a.size):
        graph = FxLowering(gm).run().graph
        for k in schedule_for(graph, backend, name).kernels:
            config = backend.default_config(k) if a.config is None else \
                backend.config_from_json(json.loads(a.config), backend.hardware("cpu"))
            print(k.text(), "\n#", config, "\n", backend.codegen(k, config), sep="")


def graphs(w, size: str) -> list:
    """``(name, ATen graph)`` of one call, or of a training step's forward and backward."""
    if not w.train:
        return [(w.name, make_fx(w.fn, decomposition_table=decomposition_table(), tracing_mode="fake")(
            *w.inputs(size)))]
    found = []

    def grab(gm, example_inputs):
        found.append((f"{w.name}_{'bwd' if found else 'fwd'}", gm))
        return make_boxed_func(gm.forward)

    with torch._subclasses.FakeTensorMode():
        args = w.train_inputs(size)
        step = aot_function(w.fn, fw_compiler=grab, bw_compiler=grab, decompositions=decomposition_table(),
                            partition_fn=min_cut_rematerialization_partition)  # as torch.compile(backend="loopnest")
        training_step(step, args)
    return found


if __name__ == "__main__":
    main()
