"""PyTorch's C helpers for allocating and viewing tensors, the ones Inductor's generated code calls
(no trip through the dispatcher's Python layer), with plain torch calls where a build lacks them."""
from __future__ import annotations

import torch

try:
    from torch._C._dynamo.guards import _empty_strided_cpu, _empty_strided_cuda, _reinterpret_tensor
except ImportError:  # pragma: no cover - older or other builds of torch
    _empty_strided_cpu = _empty_strided_cuda = None

    def _reinterpret_tensor(t: torch.Tensor, sizes, strides, offset: int) -> torch.Tensor:
        return t.as_strided(sizes, strides, t.storage_offset() + offset)


def allocator(device: str):
    """``empty(sizes, strides, dtype)`` on ``device`` ("cuda": the current CUDA device)."""
    fast = {"cpu": _empty_strided_cpu, "cuda": _empty_strided_cuda}.get(device)
    if fast is not None:
        return fast
    return lambda sizes, strides, dtype: torch.empty_strided(sizes, strides, dtype=dtype, device=device)


reinterpret_tensor = _reinterpret_tensor


def device_flag(device: str) -> str:
    """The tensor attribute that says a tensor is on ``device`` ("is_cuda", "is_cpu"): read per
    call, it builds no device object."""
    return "is_cuda" if device == "cuda" else "is_cpu"
