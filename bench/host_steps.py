"""Host time per call of whole models, and of each step of loopnest's call plan, on CUDA.

Run on the device: python bench/host_steps.py MODEL [MODEL ...] (names from ``model_zoo``).
For each model: microseconds of host time per call (back-to-back calls, the GPU drained between
rounds) of eager, Inductor, loopnest through torch.compile and loopnest's call plan alone, then
of every step of the plan (a kernel launch or an ATen call), to show where loopnest's host time
goes beside the others'.
"""
from __future__ import annotations

import sys
import time

import torch

import loopnest.runtime.compiled as rc
from model_zoo import each_on_cuda

torch._dynamo.config.recompile_limit = 64


def host_us(fn, calls: int = 200, rounds: int = 5) -> float:
    """Best over ``rounds`` of the host time per call of ``calls`` back-to-back calls."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def captured_plan(fn, args):
    """(call plan, its arguments) of the next call of the loopnest-compiled ``fn``."""
    seen = []
    run = rc.CallPlan.run

    def capture(plan, plan_args, poison):
        seen.append((plan, list(plan_args)))
        return run(plan, plan_args, poison)

    rc.CallPlan.run = capture
    try:
        fn(*args)
    finally:
        rc.CallPlan.run = run
    return seen[0]


def plan_buffers(plan, args) -> dict:
    """Every buffer of one run of ``plan``, allocated as the plan allocates them and filled by
    running its steps once."""
    buffers = dict(zip(plan.inputs, args))
    for name, sizes, strides, dtype, _ in plan.allocations:
        buffers[name] = plan.empty(sizes, strides, dtype)
    if plan.views:
        arena = plan.empty((plan.arena,), (1,), torch.uint8)
        for name, dtype, sizes, strides, offset, _ in plan.views:
            buffers[name] = rc._reinterpret_tensor(arena.view(dtype), sizes, strides, offset)
    for step in plan.steps:
        step(buffers)
    return buffers


def main(names: list[str]) -> None:
    for name, model, args in each_on_cuda(names):
        with torch.no_grad():
            ours = torch.compile(model, backend="loopnest", options={"backend": "triton", "tune": "off"})
            inductor = torch.compile(model)
            ours(*args)
            inductor(*args)
            plan, plan_args = captured_plan(ours, args)
            print(f"{name}: eager {host_us(lambda: model(*args)):.1f} us, inductor {host_us(lambda: inductor(*args)):.1f}, "
                  f"loopnest {host_us(lambda: ours(*args)):.1f}, its call plan {host_us(lambda: plan.run(plan_args, False)):.1f}")
            buffers, total = plan_buffers(plan, plan_args), 0.0
            for step in plan.steps:
                us = host_us(lambda: step(buffers))
                total += us
                print(f"   {getattr(step, 'name', type(step).__name__):50s} {us:7.1f} us")
            print(f"   steps, summed: {total:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
