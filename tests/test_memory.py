"""Training steps free their buffers as soon as the step ends: no reference cycle keeps a step's
tensors alive until Python's cyclic GC happens to run (which let resident memory grow by one
step's buffers per step, until the process was killed)."""
from __future__ import annotations

import gc

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
