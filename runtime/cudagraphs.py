"""Whole-graph CUDA graph capture for static shapes (``options={"cudagraphs": True}``).

The first call runs the compiled graph eagerly (warm-up: Triton compiles, caches fill), the
second captures it into a CUDA graph and every later call replays it, one launch for the whole
graph. An input found at the same address on the warm-up and the capture call (a parameter, a
buffer, an activation the allocator keeps placing there) is captured where it lies, and a replay
reads it in place; every other input is copied into a buffer this runner owns before each replay
(copying the parameters too cost a copy launch per weight on every call). Should a pinned input
move later, the graph is captured again with that input copied. Outputs live in the graph's
memory and are overwritten by the next call, as with Inductor's reduce-overhead mode: clone them
to keep them longer.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


class CudaGraphRunner:
    """Runs ``fn`` (a callable on CUDA tensors of fixed shapes) through a captured CUDA graph."""

    def __init__(self, fn: Callable, warmup: int = 1):
        self.fn = fn
        self.warmup = warmup
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs = None
        self.signature: tuple | None = None
        self.warm_addresses: list[int] = []
        self.pinned: set[int] = set()  # inputs the graph reads where the caller's tensor lies

    def __call__(self, *args: torch.Tensor):
        signature = _signature(args)
        if self.signature is not None and signature != self.signature:
            raise ValueError(f"cudagraphs: the graph was captured for inputs {self.signature}, got "
                             f"{signature}; shapes, strides, dtypes and devices must stay the same "
                             f"(compile without cudagraphs for dynamic shapes)")
        self.calls += 1
        if self.calls <= self.warmup:
            self.signature = signature
            self.warm_addresses = [a.data_ptr() for a in args]
            return self.fn(*args)
        if self.graph is None:
            self.pinned = {i for i, a in enumerate(args) if a.data_ptr() == self.warm_addresses[i]}
            self._capture(args)
        elif not self._feed(args):
            self._capture(args)
        self.graph.replay()
        out = self.static_outputs
        return type(out)(out) if isinstance(out, (list, tuple)) else out

    def _feed(self, args: Sequence[torch.Tensor]) -> bool:
        """Copy each argument not at its captured address into its buffer; False, with the
        pinned inputs that moved unpinned, when the graph must be captured again."""
        moved = set()
        for i, (static, arg) in enumerate(zip(self.static_inputs, args)):
            if static.data_ptr() != arg.data_ptr():
                if i in self.pinned:
                    moved.add(i)
                else:
                    static.copy_(arg)
        self.pinned -= moved
        return not moved

    def _capture(self, args: Sequence[torch.Tensor]) -> None:
        self.static_inputs = [a if i in self.pinned else
                              torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
                              for i, a in enumerate(args)]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.fn(*self.static_inputs)  # allocations on the capture stream's pool first
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_outputs = self.fn(*self.static_inputs)


def _signature(args: Sequence) -> tuple:
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor) or a.device.type != "cuda":
            raise TypeError("cudagraphs: every argument must be a CUDA tensor")
        out.append((tuple(a.shape), tuple(a.stride()), a.dtype, a.device))
    return tuple(out)
