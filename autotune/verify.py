"""Comparing a candidate's outputs with a reference: exact for integers, dtype-fit for floats.

A float element passes when ``|got - want| <= atol + rtol*|want| + scale*max|want|``: the last
term allows the rounding of long reductions (a sum's error grows with the magnitude of the
partial sums, not of the result). NaN must match NaN; outputs are poisoned with NaN (integers
with a sentinel) before a candidate runs, so elements it fails to write show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..runtime.compiled import poison_value

# dtype -> (atol, rtol, scale)
TOLERANCES = {
    torch.float16: (2e-3, 2e-3, 1e-3),
    torch.bfloat16: (2e-2, 2e-2, 4e-3),
    torch.float32: (1e-5, 1e-4, 1e-5),
    torch.float64: (1e-9, 1e-9, 1e-10),
}


@dataclass(frozen=True)
class Check:
    """Verification result: ``error`` is the worst element's error over its allowance (<= 1 passes)."""

    ok: bool
    error: float
    message: str = ""


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with its dtype's poison value (``runtime.compiled.poison_value``), in place."""
    return t.fill_(poison_value(t.dtype))


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A new poisoned tensor with ``t``'s shape, strides, dtype and device."""
    return poison(torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device))


def compare_one(got: torch.Tensor, want: torch.Tensor) -> Check:
    """Compare one output with its reference."""
    if not isinstance(got, torch.Tensor):
        return Check(False, float("inf"), f"got {type(got).__name__}, expected a tensor")
    if got.shape != want.shape or got.dtype != want.dtype:
        return Check(False, float("inf"), f"got {got.dtype}{tuple(got.shape)}, "
                                          f"expected {want.dtype}{tuple(want.shape)}")
    got, want = got.detach(), want.detach().to(got.device)  # compared where they live (GPU outputs stay)
    if not want.dtype.is_floating_point:
        bad = int((got != want).sum())
        return Check(bad == 0, 0.0 if bad == 0 else float("inf"),
                     "" if bad == 0 else f"{bad} of {want.numel()} elements differ (exact match needed)")
    atol, rtol, scale = TOLERANCES[want.dtype]
    g, w = got.double(), want.double()
    nan_mismatch = int((torch.isnan(g) != torch.isnan(w)).sum())
    if nan_mismatch:
        return Check(False, float("inf"), f"{nan_mismatch} of {want.numel()} elements are NaN on one side only")
    finite = torch.isfinite(w)
    inf_mismatch = int(((~finite & ~torch.isnan(w)) & (g != w)).sum())
    if inf_mismatch:
        return Check(False, float("inf"), f"{inf_mismatch} infinite elements differ")
    if not finite.any():
        return Check(True, 0.0)
    wf, gf = w[finite], g[finite]
    allowed = atol + rtol * wf.abs() + scale * float(wf.abs().max())
    ratio = ((gf - wf).abs() / allowed).max().item()
    if ratio <= 1.0:
        return Check(True, ratio)
    worst = int(((gf - wf).abs() / allowed).argmax())
    return Check(False, ratio, f"max error {ratio:.3g}x the {want.dtype} tolerance "
                               f"(got {gf[worst].item():.6g}, expected {wf[worst].item():.6g})")


def compare(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> Check:
    """Compare every output; the first failure explains the result."""
    if len(got) != len(want):
        return Check(False, float("inf"), f"got {len(got)} outputs, expected {len(want)}")
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want)):
        check = compare_one(g, w)
        if not check.ok:
            return Check(False, check.error, f"output {k}: {check.message}")
        worst = max(worst, check.error)
    return Check(True, worst)
