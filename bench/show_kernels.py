"""Print the scheduled kernels of a workload and the source a backend generates for each, with
the default config (or a config given as JSON), without running anything: no GPU needed.

python bench/show_kernels.py few_rows_logsoftmax --backend triton [--size gpu] [--config '{"RBLOCK": 8192}']
"""
from __future__ import annotations

import argparse
import json

from torch.fx.experimental.proxy_tensor import make_fx

from loopnest.autotune.workloads import WORKLOADS
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
    gm = make_fx(w.fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*w.inputs(a.size))
    graph = FxLowering(gm).run().graph
    backend = registry.get(a.backend)
    for k in schedule_for(graph, backend, a.workload).kernels:
        config = backend.default_config(k) if a.config is None else backend.config_from_json(json.loads(a.config))
        print(k.text(), "\n#", config, "\n", backend.codegen(k, config), sep="")


if __name__ == "__main__":
    main()
