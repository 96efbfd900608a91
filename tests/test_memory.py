"""Training steps free their buffers as soon as the step ends: no reference cycle keeps a step's
tensors alive until Python's cyclic GC happens to run (which let resident memory grow by one
step's buffers per step, until the process was killed), and the resident set stays flat over
100 training steps after warm-up."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def cyclic_tensors(step, steps: int = 3) -> list[torch.Tensor]:
    """Tensors only the cyclic GC could free, after ``steps`` calls of ``step`` (one warm-up
    call first, so compiling does not count)."""
    step()
    while gc.collect():  # earlier tests' cycles go first, with what their finalizers resurrected
        pass
    gc.disable()
    try:
        for _ in range(steps):
            step()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, torch.Tensor)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def training_step(fn, *inputs):
    def step():
        out = fn(*inputs)
        (out if out.dim() == 0 else out.square().mean()).backward()
        for t in inputs:
            t.grad = None
    return step


def cross_entropy(x, t):
    return F.cross_entropy(x.float(), t)


CASES = {
    "cross_entropy": lambda: (cross_entropy, torch.randn(64, 1000, requires_grad=True), torch.randint(0, 1000, (64,))),
    "cross_entropy_bf16": lambda: (cross_entropy, torch.randn(32, 4096, dtype=torch.bfloat16, requires_grad=True),
                                   torch.randint(0, 4096, (32,))),
    "softmax": lambda: (lambda x: torch.softmax(x, -1), torch.randn(128, 256, requires_grad=True)),
    "layernorm": lambda: (lambda x, w, b: F.layer_norm(x, (256,), w, b), torch.randn(128, 256, requires_grad=True),
                          torch.randn(256, requires_grad=True), torch.randn(256, requires_grad=True)),
}


@pytest.mark.parametrize("case", CASES)
def test_training_steps_leave_no_cyclic_garbage(case):
    fn, *inputs = CASES[case]()
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    assert cyclic_tensors(training_step(compiled, *inputs)) == []


def test_transformer_block_training_steps_leave_no_cyclic_garbage():
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    compiled = torch.compile(block, backend="loopnest", options={"backend": "cpp", "tune": "off"})
    x = torch.randn(4, 10, 32, requires_grad=True)

    def step():
        compiled(x).square().mean().backward()
        block.zero_grad(set_to_none=True)
        x.grad = None

    assert cyclic_tensors(step) == []


RSS_OVER_STEPS = """
import json, os, sys, torch, torch.nn.functional as F
rows, cols, warmup, steps = map(int, sys.argv[1:])
page = os.sysconf("SC_PAGE_SIZE")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page


torch.manual_seed(0)
x, t = torch.randn(rows, cols, requires_grad=True), torch.randint(0, cols, (rows,))
compiled = torch.compile(lambda x, t: F.cross_entropy(x, t), backend="loopnest", options={"backend": "cpp", "tune": "off"})


def step():
    compiled(x, t).backward()
    x.grad = None


for _ in range(warmup):
    step()
trace = [rss()]
for _ in range(steps):
    step()
    trace.append(rss())
print(json.dumps(trace))
"""


def test_resident_memory_is_flat_over_100_cross_entropy_training_steps():
    """After 10 warm-up steps, 100 more forward + backward steps of a compiled cross-entropy never
    raise the resident set by one step's buffers (x, its gradient and one buffer of x's size)."""
    rows, cols = 256, 4096
    step_bytes = 3 * rows * cols * 4
    # A fixed mmap threshold (it also stops glibc from raising it) gives each tensor of 64 KiB or
    # more its own mapping, unmapped when freed: the resident set follows live memory.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    run = subprocess.run([sys.executable, "-c", RSS_OVER_STEPS, str(rows), str(cols), "10", "100"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    trace = json.loads(run.stdout.splitlines()[-1])
    growth_mb = [round((b - trace[0]) / 2**20, 1) for b in trace]
    assert max(trace) - trace[0] < step_bytes, f"MB above the first step, every 10th step: {growth_mb[::10]}"
