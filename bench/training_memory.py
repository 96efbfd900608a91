"""Resident memory of repeated training steps under torch.compile(backend="loopnest"), on the CPU.

For each case: ten warm-up steps (compiles included), then ``--steps`` steps, each a forward
pass and a backward pass; it prints the resident set after warm-up, its peak over the steps, the
growth per step (peak over warm-up, divided by the steps) and one step's own buffers for scale.
A run that passes ``--stop-gb`` of resident memory stops early and says so. With ``--other PATH``
(a folder holding another `loopnest` package folder) the same cases run there too, side by side,
except those named by ``--skip-other`` (a leaking revision can exhaust the machine's memory).
Each checkout runs in its own process, with glibc's default allocator settings (users run so).

    python bench/training_memory.py --steps 100 [--other /tmp/old [--skip-other "softmax 2048x2048"]]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import MALLOC, run_in_checkout

CHILD = r"""
import json, os, sys, torch, torch.nn.functional as F
from torch import nn
try:
    from loopnest.api import loopnest_backend
except ImportError:  # revisions before loopnest.api
    from loopnest.lowering.dynamo import loopnest_backend
steps, stop, skipped = int(sys.argv[1]), float(sys.argv[2]) * 2**30, json.loads(sys.argv[3])
torch.manual_seed(0)


def ce(x, t):
    return F.cross_entropy(x.float(), t)


def block():
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0, batch_first=True)
    return layer, (torch.randn(8, 128, 256, requires_grad=True),)


CASES = {
    "cross_entropy 256x32000 f32": lambda: (ce, (torch.randn(256, 32000, requires_grad=True),
                                                 torch.randint(0, 32000, (256,)))),
    "cross_entropy 512x128256 bf16": lambda: (ce, (torch.randn(512, 128256, dtype=torch.bfloat16,
                                                               requires_grad=True), torch.randint(0, 128256, (512,)))),
    "softmax 2048x2048": lambda: (lambda x: torch.softmax(x, -1), (torch.randn(2048, 2048, requires_grad=True),)),
    "layernorm 2048x2048": lambda: (lambda x, w, b: F.layer_norm(x, (2048,), w, b),
                                    (torch.randn(2048, 2048, requires_grad=True), torch.randn(2048, requires_grad=True),
                                     torch.randn(2048, requires_grad=True))),
    "transformer block 8x128x256": block,
}
out = {}


def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


for name, make in CASES.items():
    if name in skipped:
        continue
    fn, inputs = make()
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    step_bytes = sum(t.numel() * t.element_size() for t in inputs) * 3  # inputs, gradients, outputs
    compiled = torch.compile(fn, backend=loopnest_backend, options={"backend": "cpp", "tune": "off"})

    def step():
        y = compiled(*inputs)
        (y if y.dim() == 0 else y.square().mean()).backward()
        for t in list(inputs) + params:
            t.grad = None

    for _ in range(10):  # compiles, and glibc's arenas settle
        step()
    start = peak = rss()
    done = 0
    while done < steps and peak < stop:
        step()
        done += 1
        peak = max(peak, rss())
    out[name] = {"start_mb": start / 2**20, "peak_mb": peak / 2**20, "steps": done,
                 "growth_mb": (peak - start) / 2**20 / max(done, 1), "step_mb": step_bytes / 2**20}
    del fn, inputs, compiled
    torch._dynamo.reset()
print(json.dumps(out))
"""


def run_checkout(path: Path | None, steps: int, stop_gb: float, skipped: list[str]) -> dict:
    """The measurements of one checkout (None: this one) in a new process with glibc's defaults,
    leaving out the ``skipped`` cases."""
    return run_in_checkout(CHILD, [steps, stop_gb, json.dumps(skipped)], path, dict.fromkeys(MALLOC))


def cell(r: dict | None, steps: int) -> str:
    """One checkout's start, peak and growth per step (None: a case it did not run)."""
    if r is None:
        return "not run | | "
    stopped = f" (stopped after {r['steps']} steps)" if r["steps"] < steps else ""
    return f"{r['start_mb']:.0f} | {r['peak_mb']:.0f} | {r['growth_mb']:.1f}{stopped}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--stop-gb", type=float, default=12.0)
    parser.add_argument("--other", type=Path, help="folder holding another `loopnest` package folder")
    parser.add_argument("--skip-other", action="append", default=[], metavar="CASE",
                        help="a case the --other checkout does not run (repeatable)")
    opts = parser.parse_args()
    runs = {"this": run_checkout(None, opts.steps, opts.stop_gb, [])}
    if opts.other:
        runs["other"] = run_checkout(opts.other, opts.steps, opts.stop_gb, opts.skip_other)
    head = " | ".join(f"{k} start MB | {k} peak MB | {k} growth MB/step" for k in runs)
    print(f"| case | one step's buffers MB | {head} |")
    print("|---|---|" + "---|" * (3 * len(runs)))
    for name, r in runs["this"].items():
        print(f"| {name} | {r['step_mb']:.0f} | " + " | ".join(cell(run.get(name), opts.steps) for run in runs.values())
              + " |")


if __name__ == "__main__":
    main()
