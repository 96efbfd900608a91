"""Host time per call of whole models, and of each step of loopnest's call plan, on CUDA.

Run on the device: python bench/host_steps.py MODEL [MODEL ...] (names from ``model_zoo``).
For each model: microseconds of host time per call (back-to-back calls, the GPU drained between
rounds) of eager, of Dynamo alone (``backend="eager"``: its frame and guards around eager's own
ops), Inductor, loopnest through torch.compile and loopnest's written-out call plan alone
(``fast_call``), then of every step of the plan (a kernel launch or an ATen call), to show where
loopnest's host time goes beside the others'.
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


class EntryRecorder:
    """Records the call plans loopnest writes out (``CallPlan.entry``) and the arguments of each
    written function's first call, while compiling: ``taken`` is (plan, entry, its arguments,
    the plan's own arguments) per plan."""

    def __init__(self):
        self.taken: list[tuple] = []
        self._entry = rc.CallPlan.entry

    def __enter__(self):
        recorder = self

        def entry(plan, positions, constants, picks, kind, poison):
            fn = recorder._entry(plan, positions, constants, picks, kind, poison)
            if fn is None:
                return None

            def first(args):
                if not any(t[0] is plan for t in recorder.taken):
                    recorder.taken.append((plan, fn, args, [args[i] for i in positions] + list(constants)))
                return fn(args)
            return first

        rc.CallPlan.entry = entry
        return self

    def __exit__(self, *exc):
        rc.CallPlan.entry = self._entry


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
            with EntryRecorder() as recorder:
                ours = torch.compile(model, backend="loopnest", options={"backend": "triton", "tune": "off"})
                for _ in range(3):
                    ours(*args)
            inductor = torch.compile(model)
            dynamo_only = torch.compile(model, backend="eager")
            inductor(*args)
            dynamo_only(*args)
            print(f"{name}: eager {host_us(lambda: model(*args)):.1f} us, Dynamo alone "
                  f"{host_us(lambda: dynamo_only(*args)):.1f}, inductor {host_us(lambda: inductor(*args)):.1f}, "
                  f"loopnest {host_us(lambda: ours(*args)):.1f}")
            for plan, entry, entry_args, plan_args in recorder.taken:
                print(f"  plan {plan.name}: written out {host_us(lambda: entry(entry_args)):.1f} us, "
                      f"walked {host_us(lambda: plan.run(plan_args, False)):.1f} us")
                buffers, total = plan_buffers(plan, plan_args), 0.0
                for step in plan.steps:
                    us = host_us(lambda: step(buffers))
                    total += us
                    print(f"   {getattr(step, 'name', type(step).__name__):50s} {us:7.1f} us")
                print(f"   steps, summed: {total:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
