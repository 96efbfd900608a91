"""Whole models side by side: eager, Inductor and loopnest, in inference or training, on one device.

For each model of ``model_zoo``: cold compile time (the first call, with empty code caches) of
Inductor and loopnest, the largest difference from eager, then the time per call of back-to-back
calls (synchronized at the end of each round on CUDA), interleaved round by round so a shared
machine's noise hits every column alike. Prints one markdown table and the geometric means of the
speedups over eager. ``cpu_models.py`` and ``gpu_models.py`` are the entry points.

With ``--train`` a call is one training step: the model in train mode, its output's mean square
as the loss, then the gradients of every parameter and floating input (``torch.autograd.grad``,
so nothing accumulates between steps). The error column is then the largest difference from
eager's gradients, relative to each gradient's largest entry.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from typing import Callable

import torch

from loopnest.backends.cpp.compile import prebuild_header

from family_training import worst_error
from model_families import FAMILIES
from model_zoo import MODELS, instantiate

SETS = {"zoo": MODELS, "families": FAMILIES}

torch._dynamo.config.recompile_limit = 64
torch._inductor.config.fx_graph_cache = False


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def cold_call(fn, args, device: str) -> tuple[object, float]:
    """(output, seconds) of the first call of a compiled function (the compile included)."""
    t0 = time.perf_counter()
    out = fn(*args)
    _sync(device)
    return out, time.perf_counter() - t0


def per_call_us(fn, args, device: str, calls: int) -> float:
    """Microseconds per call over ``calls`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    _sync(device)
    return (time.perf_counter() - t0) / calls * 1e6


def calls_for(fn, args, device: str, target_s: float = 0.05) -> int:
    """How many calls fill about ``target_s`` seconds (at least 3)."""
    one = per_call_us(fn, args, device, 3) * 1e-6
    return max(3, int(target_s / max(one, 1e-7)))


def training_step(fn, wrt: list[torch.Tensor]) -> Callable:
    """A call of ``fn`` as one training step: the mean square of its output as the loss, then
    the gradients of ``wrt``."""
    def step(*args):
        return torch.autograd.grad(fn(*args).float().square().mean(), wrt)
    return step


def difference(got, want) -> float:
    """The largest difference of an output from eager's; of gradients (tuples), relative to each
    gradient's largest entry, skipping those that are zero in exact arithmetic
    (``family_training.worst_error``)."""
    if isinstance(want, tuple):
        return worst_error(got, want)
    return (got.float() - want.float()).abs().max().item()


def run_model(name: str, device: str, rounds: int, variants: dict[str, dict], catalog: dict = MODELS,
              inductor: dict[str, dict] | None = None, train: bool = False) -> dict:
    """Times and cold compiles of ``name`` (of ``catalog``) for eager, each Inductor column
    (``torch.compile`` keyword arguments by name; default: one, "inductor") and each loopnest
    variant; with ``train``, of training steps (the module docstring says what one is)."""
    model, args = instantiate(name, device, catalog=catalog)
    torch._dynamo.reset()
    if train:
        model.train()
        args = tuple(a.requires_grad_() if a.is_floating_point() else a for a in args)
        wrt = [p for p in model.parameters() if p.requires_grad] + [a for a in args if a.requires_grad]
    call = (lambda fn: training_step(fn, wrt)) if train else (lambda fn: fn)
    with contextlib.nullcontext() if train else torch.no_grad():
        expect = call(model)(*args)
        fns = {"eager": call(model)}
        cold, error = {}, {}
        compiled = {k: torch.compile(model, **kw) for k, kw in (inductor or {"inductor": {}}).items()}
        compiled.update({k: torch.compile(model, backend="loopnest", options=o) for k, o in variants.items()})
        for key, fn in compiled.items():
            fn = call(fn)
            got, cold[key] = cold_call(fn, args, device)
            error[key] = difference(got, expect)
            fns[key] = fn
        for fn in fns.values():
            for _ in range(3):
                fn(*args)
        _sync(device)
        counts = {k: calls_for(fn, args, device) for k, fn in fns.items()}
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(rounds):
            for key, fn in fns.items():
                times[key].append(per_call_us(fn, args, device, counts[key]))
    return {"name": name, "us": {k: statistics.median(v) for k, v in times.items()}, "cold": cold, "error": error}


def geomean(values) -> float:
    """Geometric mean of positive numbers."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(device: str, variants: dict[str, dict], describe: Callable[[], str],
         inductor: dict[str, dict] | None = None, train_variants: dict[str, dict] | None = None) -> None:
    """Parse the command line, run every model, print the table; ``describe()`` names the machine
    (called after the command line is parsed, so that ``--help`` needs no device); ``inductor``:
    Inductor's columns as in ``run_model``; ``train_variants``: loopnest's columns under
    ``--train`` (default: ``variants``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", help="models of the set (default: all of them)")
    parser.add_argument("--set", choices=sorted(SETS), default="zoo",
                        help="zoo: transformer and conv blocks (model_zoo.py); families: the other layers (model_families.py)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--train", action="store_true", help="time training steps instead of inference calls")
    opts = parser.parse_args()
    if opts.train:
        variants = train_variants or variants
    catalog = SETS[opts.set]
    opts.models = opts.models or list(catalog)
    unknown = sorted(set(opts.models) - set(catalog))
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(catalog)}")
    header_s = prebuild_header() if device == "cpu" else 0.0
    print(f"# models ({opts.set}, {'training steps' if opts.train else 'inference'}) on {describe()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"median of {opts.rounds} rounds" + (f"; precompiled headers built once in {header_s:.1f} s, apart from "
                                               "the cold columns" if device == "cpu" else ""))
    inductor = inductor or {"inductor": {}}
    compiled = [*inductor, *variants]
    names = ["eager", *compiled]
    print("| model | " + " | ".join(f"{k} µs" for k in names) + " | "
          + " | ".join(f"{k} / eager" for k in compiled) + " | "
          + " | ".join(f"{k} cold s" for k in compiled) + f" | max {'relative gradient ' if opts.train else ''}error (" + " / ".join(compiled) + ") |")
    print("|---" * (3 * len(compiled) + 3) + "|")
    rows = []
    for name in opts.models:
        r = run_model(name, device, opts.rounds, variants, catalog, inductor, opts.train)
        rows.append(r)
        us, cold = r["us"], r["cold"]
        speed = [us["eager"] / us[k] for k in compiled]
        errors = " / ".join(f"{r['error'][k]:.1e}" for k in compiled)
        print(f"| {name} | " + " | ".join(f"{us[k]:.0f}" for k in names) + " | "
              + " | ".join(f"{s:.2f}x" for s in speed) + " | "
              + " | ".join(f"{cold[k]:.2f}" for k in compiled) + f" | {errors} |", flush=True)
    print()
    for key in compiled:
        print(f"geomean speedup over eager, {key}: {geomean(r['us']['eager'] / r['us'][key] for r in rows):.2f}x; "
              f"total cold compile {sum(r['cold'][key] for r in rows):.1f} s")
