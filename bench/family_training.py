"""Training steps of the model families (``model_families.py``): gradients through loopnest
against eager's.

Run: python bench/family_training.py [--device cpu|cuda] [MODEL ...]

Each model in train mode takes one step: ``out.square().mean()`` (or the loss itself), then the
gradients of every parameter and floating input. Prints the loss and the largest difference from
eager's gradients, relative to each gradient's largest entry; a gradient that is zero in exact
arithmetic (a key bias under softmax) is skipped, since its entries are rounding noise.
"""
from __future__ import annotations

import argparse

import torch

from model_families import FAMILIES
from model_zoo import instantiate

ZERO = 1e-4  # a gradient whose largest entry is below this is rounding noise of a zero gradient


def step(fn, model, args):
    """(loss, gradients of the parameters and floating inputs) of one step of ``fn``."""
    out = fn(*args)
    loss = out.float().square().mean() if out.dim() else out
    wrt = [*model.parameters(), *(a for a in args if a.requires_grad)]
    return loss.detach(), torch.autograd.grad(loss, wrt, allow_unused=True)


def worst_error(got, want) -> float:
    """The largest gradient difference, relative to each gradient's largest entry."""
    worst = 0.0
    for g, w in zip(got, want):
        if (g is None) != (w is None):
            raise AssertionError("a gradient is missing on one side only")
        if w is None or w.abs().max().item() < ZERO:
            continue
        worst = max(worst, (g - w).abs().max().item() / w.abs().max().item())
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", default=list(FAMILIES))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    opts = parser.parse_args()
    torch._dynamo.config.recompile_limit = 64
    for name in opts.models:
        model, args = instantiate(name, opts.device, catalog=FAMILIES)
        model.train()
        args = tuple(a.requires_grad_(True) if a.is_floating_point() else a for a in args)
        torch.manual_seed(0)
        want_loss, want = step(model, model, args)
        torch._dynamo.reset()
        torch.manual_seed(0)
        loss, got = step(torch.compile(model, backend="loopnest"), model, args)
        print(f"{name:20s} loss {loss.item():.5g} (eager {want_loss.item():.5g}), worst gradient error "
              f"{worst_error(got, want):.2e}", flush=True)


if __name__ == "__main__":
    main()
