"""Kernel-level timing against the user's call: do they rank a kernel's configs alike?

For ``x.mean(1)`` on a (64, 512, 1024) float32 tensor (the middle-dimension mean a sweep once made
slower): the default config and ``--configs`` random valid points of the space, each verified,
then timed the two ways against the default: as a study times a trial (``harness.time``: the
backend's timing, ``do_bench`` with the L2 flushed on a GPU; best of two) and as the final
decision times the user's call (``harness.user_call`` in ``final.WallTimer`` rounds, 5 rounds of
each, alternating). Prints one JSON object; each row has both times and the default's beside them.

Run on the device: python bench/timing_conditions.py [--configs 30]
Check the script on a CPU: TRITON_INTERPRET=1 python bench/timing_conditions.py --configs 2 --shape 2 8 16
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile

os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cold-"))

import torch  # noqa: E402

from loopnest.autotune.final import WallTimer  # noqa: E402
from loopnest.autotune.harness import GraphHarness  # noqa: E402
from loopnest.autotune.sweep import SweepTarget, compile_target, flat_tensors  # noqa: E402
from loopnest.backends import registry  # noqa: E402
from loopnest.core.space import InvalidConfig  # noqa: E402


def sample(space, count: int, seed: int = 0) -> list:
    """``count`` random points of ``space`` that its constraints accept."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        try:
            out.append(space.config({k.name: rng.choice(k.choices) for k in space.knobs}))
        except InvalidConfig:
            pass
    return out


def row(harness, kernel, backend, config, default_launcher, timer) -> dict:
    """One config timed both ways, each beside the default."""
    launcher = backend.compile([(kernel, config)]).launchers[kernel.name]
    check, _ = harness.verify(kernel, launcher)
    if not check.ok:
        return {"config": config.to_json(), "wrong": check.message}
    kernel_us = min(harness.time(kernel, launcher).p50_us for _ in range(2))
    kernel_default_us = min(harness.time(kernel, default_launcher).p50_us for _ in range(2))
    run, default_run = harness.user_call(kernel, launcher), harness.user_call(kernel, default_launcher)
    call, call_default = [], []
    for _ in range(5):
        call_default.append(timer(None, default_run))
        call.append(timer(None, run))
    return {"config": config.to_json(), "kernel_us": kernel_us, "kernel_default_us": kernel_default_us,
            "call_us": statistics.median(call), "call_default_us": statistics.median(call_default)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=30)
    p.add_argument("--shape", type=int, nargs=3, default=(64, 512, 1024))
    opts = p.parse_args()
    backend = registry.get("triton")
    x = torch.randn(*opts.shape, device=backend.device)
    t = SweepTarget("mean_mid", lambda x: x.mean(1), (x,))
    compiled_fn = compile_target(t, backend)
    lowered = compiled_fn.lowered
    args = list(compiled_fn.codegen.process_inputs(*t.inputs))
    harness = GraphHarness(lowered.compiled, lambda g: flat_tensors(lowered.run(list(args), g)),
                           flat_tensors(t.fn(*t.inputs)))
    kernel = lowered.compiled.schedule.kernels[0]
    default = backend.default_config(kernel)
    default_launcher = backend.compile([(kernel, default)]).launchers[kernel.name]
    timer = WallTimer(backend.device, 0.02)
    configs = [default] + sample(backend.space(kernel, backend.hardware()), opts.configs)
    rows = [row(harness, kernel, backend, c, default_launcher, timer) for c in configs]
    print(json.dumps({"shape": list(opts.shape), "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
