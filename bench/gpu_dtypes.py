"""Correctness of the new and training rows in float32, float16 and bfloat16, at GPU sizes.

Run on the device: python bench/gpu_dtypes.py [--size gpu|cpu|cache|tiny] [--device cuda|cpu] [WORKLOAD ...]
(default: the eight new and training rows). Every floating input of a row is cast to each dtype
(a bfloat16 row's logits become float32 and float16 too); eager and loopnest (Triton, defaults)
then run on the same cast values, and both are compared with the float64 results of those
values (``workloads.mismatch``; a workload that calls ``.float()`` computes that part of its
reference in float32: relative error per result, forward results against
``TOLERANCE``, gradients against ``GRAD_TOLERANCE``). Prints one markdown table: the relative
error of each result of each column and whether loopnest is within the tolerance
(or, where eager is not either, within 1.5x eager's error: ``verdict``). Exits 1 when any
loopnest result is off, so a device run fails loudly.
"""
from __future__ import annotations

import argparse
import sys

import torch

from loopnest.autotune.workloads import (NEW_ROWS, TRAIN_ROWS, WORKLOADS, float64_results,
                                         grad_output, mismatch, relative_error, result_dtypes,
                                         training_step)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BACKENDS = {"cuda": "triton", "cpu": "cpp"}
torch._dynamo.config.recompile_limit = 64


def cast(args: tuple, dtype: torch.dtype) -> tuple:
    """``args`` with every floating tensor in ``dtype`` (keeping requires_grad)."""
    return tuple(a.detach().to(dtype).requires_grad_(a.requires_grad) if a.is_floating_point() else a
                 for a in args)


def errors(got, want: tuple) -> list[float]:
    """The relative error of each floating result."""
    got = got if isinstance(got, tuple) else (got,)
    return [relative_error(g, w) for g, w in zip(got, want) if w.dtype.is_floating_point]


def verdict(ours: list[float], eager: list[float], why: str | None) -> str:
    """ok when every result is within its tolerance (``why`` is None); "as eager" when a result
    outside it errs no more than 1.5x eager's same result (a float32 result computed through a
    16-bit rounding inside the graph carries that rounding's error: rmsnorm_bf16 in float16
    returns bf16(x_hat) * w in float32); else WRONG."""
    if why is None:
        return "ok"
    if all(o <= 1.5 * e + 1e-12 for o, e in zip(ours, eager)):
        return f"ok, as eager ({why})"
    return "WRONG: " + why


def check_row(name: str, size: str, dtype: torch.dtype, device: str) -> dict:
    """Eager's and loopnest's errors on row ``name`` in ``dtype`` on ``device``, and loopnest's
    mismatch."""
    w = WORKLOADS[name]
    base = w.train_inputs(size, device) if w.train else w.inputs(size, device)
    args = cast(base, dtype)
    want, dtypes = float64_results(w, args), result_dtypes(w, args)
    torch._dynamo.reset()
    compiled = torch.compile(w.fn, backend="loopnest", options={"backend": BACKENDS[device], "tune": "off"})
    if w.train:
        with torch.no_grad():
            grad_out = grad_output(w.fn(*[a.detach() for a in args]))
        eager, got = training_step(w.fn, args, grad_out), training_step(compiled, args, grad_out)
    else:
        with torch.no_grad():
            eager, got = w.fn(*args), compiled(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    ours, theirs = errors(got, want), errors(eager, want)
    return dict(eager=theirs, loopnest=ours, verdict=verdict(ours, theirs, mismatch(got, want, dtypes, w.train, w.rounds_to)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(NEW_ROWS + TRAIN_ROWS))
    parser.add_argument("--size", default="gpu", choices=("gpu", "cpu", "cache", "tiny"))
    parser.add_argument("--device", default="cuda", choices=sorted(BACKENDS),
                        help="cpu: the C++ backend (a smoke test at small sizes)")
    opts = parser.parse_args()
    where = torch.cuda.get_device_name() if opts.device == "cuda" else "CPU"
    print(f"# {where}, torch {torch.__version__}, size {opts.size}")
    print("| workload | dtype | eager rel. error per result | loopnest rel. error per result | loopnest |")
    print("|---|---|---|---|---|")
    bad = 0
    for name in opts.workloads:
        for dtype in DTYPES:
            r = check_row(name, opts.size, dtype, opts.device)
            bad += r["verdict"].startswith("WRONG")
            print(f"| {name} | {str(dtype)[6:]} | {' / '.join(f'{e:.1e}' for e in r['eager'])} | "
                  f"{' / '.join(f'{e:.1e}' for e in r['loopnest'])} | {r['verdict']} |", flush=True)
            if opts.device == "cuda":
                torch.cuda.empty_cache()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
