"""Inference graphs on CUDA replayed as one captured CUDA graph (``options={"cudagraphs": ...}``).

``"auto"`` (the default) replays a graph only where that is invisible to the caller and pays:
more than one launch (two kernels, or an ATen call, which may launch many), static shapes, no
writes into its inputs, outputs that are its own results (each returned as a fresh copy, so they
outlive the next call as eager's do), its arguments or views of them (made again from each
call's arguments), buffers held by the graph's memory pool within ``pool_bytes`` (a 512th of
the device's memory, at least 64 MB), and little memory traffic per call and launch
(``BYTES_PER_CALL``, ``BYTES_PER_LAUNCH``): where each kernel is short, the host's work to
issue it is what a call waits on, and the replay saves it; where kernels stream hundreds of MB
the GPU is the bound, and copying the outputs out would only add to it (the copy counts as
traffic: embedding_head's 32 MB log-probabilities, copied out, made its replay 1.2x slower than
its plain call on an H100). ``True`` replays every static inference graph with reduce-overhead
semantics (outputs overwritten by the next call); ``False`` never replays.

A plain training step's forward and backward graphs (``plain_training``) replay by ``"auto"``'s
rules under either mode: their outputs are saved for the backward or become gradients, which no
later call may overwrite. The forward's outputs that are its inputs (saved for the backward) are
those inputs; the backward checks the strides of its incoming gradients, which no guard fixes.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..ir.index import evaluate
from ..ir.nodes import BufferKind, Extern
from ..runtime.cudagraphs import CudaGraphRunner
from .extern import ExternFn
from .runner import LoweredGraph

POOL_BYTES = 64 << 20  # a graph's pool holds at least this much (``pool_bytes``)
POOL_SHARE = 512  # ... or this share of the device's memory: 156 MB of an H100's 80 GB
# ~5 µs of memory traffic at 2-3 TB/s: about what the host spends issuing one launch
BYTES_PER_LAUNCH = 16 << 20
# ~20 µs of traffic: what the host spends on a call itself besides its launches (checks, the call
# plan, a training step's autograd wrapper; embedding_head's forward took 50 µs a launch all told)
BYTES_PER_CALL = 64 << 20
COPY_BYTES = 16 << 20  # inputs copied before each replay, at least this much allowed (``copy_limit``)
# ATen ops whose results' sizes or values reach the host: they synchronize, and a capture fails
_SYNCS = {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output}


def auto_declines(lowered: LoweredGraph) -> str | None:
    """Why ``cudagraphs="auto"`` runs ``lowered`` without a CUDA graph; None if it replays it."""
    program, compiled = lowered.program, lowered.compiled
    if program.mutations:
        return "it writes into its inputs"
    if program.sym_sources or program.carriers:
        return "its sizes are symbolic"
    if not lowered.flat_outputs:
        return "its outputs are not plain results of the graph"
    externs = [step for step in compiled.schedule.steps if isinstance(step, Extern)]
    for step in externs:
        if not _capturable(step.fn, compiled.device):
            return f"its ATen call {step.target} may wait on the GPU, which a capture cannot"
    if len(compiled.steps) < 2 and not externs:
        return "it is one kernel: a replay and the copy of its outputs would launch twice"
    launches, moved, held = _traffic(lowered)
    limit = pool_bytes(compiled.device)
    if held > limit:
        return f"its buffers take {held} bytes (at most {limit} are held in a graph's pool)"
    if moved > _host_bound_bytes(launches):
        return f"its {launches} launches move {moved} bytes: bound by the GPU, not by the host"
    return None


def _traffic(lowered: LoweredGraph) -> tuple[int, int, int]:
    """(launches, bytes moved, bytes held outside the inputs) of a replayed call of a static
    graph: every buffer in memory counted once (the rest live in registers), and each result it
    returns twice more, read and written by the copy out of the graph's memory."""
    compiled = lowered.compiled
    buffers = compiled.graph.buffers
    results = {o.buffer for o in compiled.graph.outputs}
    materialized = {*compiled.graph.inputs, *results, *compiled.schedule.intermediates, *compiled.extern_outputs}
    held = moved = 0
    for name in materialized:
        size = evaluate(buffers[name].nbytes, {})
        own = buffers[name].kind is not BufferKind.INPUT
        moved += size * (3 if own and name in results else 1)
        held += size if own else 0
    return len(compiled.steps), moved, held


def copy_limit(lowered: LoweredGraph) -> int:
    """The most input bytes a replay of ``lowered`` may copy in before it runs: ``COPY_BYTES``,
    or what keeps the graph's traffic, copies included, within the bound under which issuing the
    call costs the host more than the GPU's work (``_host_bound_bytes``)."""
    launches, moved, _ = _traffic(lowered)
    return max(COPY_BYTES, _host_bound_bytes(launches) - moved)


def _host_bound_bytes(launches: int) -> int:
    """The most memory traffic a call of ``launches`` launches may have for the host's work to
    issue it to take longer than the GPU's to run it."""
    return BYTES_PER_CALL + BYTES_PER_LAUNCH * launches


def pool_bytes(device: str) -> int:
    """The most memory one replayed graph's pool may keep on ``device`` between calls."""
    if device != "cuda" or not torch.cuda.is_available():
        return POOL_BYTES
    return max(POOL_BYTES, torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory // POOL_SHARE)


def _capturable(fn, device: str) -> bool:
    """Whether an extern call can run inside a capture: an ATen op whose results stay on the
    device (no host-side sizes or values) and that takes no tensor from another device."""
    if not isinstance(fn, ExternFn) or not isinstance(fn.op, torch._ops.OpOverload):
        return False
    return not _SYNCS & set(fn.op.tags) and all(d is None or d.type == device for d in fn.devices)


class CudaGraphBoxed:
    """A graph (AOTAutograd's boxed convention) replayed through one CUDA graph, per ``mode``
    (True or "auto", above); graphs with inputs that are not CUDA tensors (CPU scalars, seeds),
    and graphs that write into their inputs (the capture's own run would apply the write once
    more), run normally. ``varying`` and ``warmup``: see ``CudaGraphRunner``."""

    def __init__(self, lowered: LoweredGraph, mode: bool | str = True, varying: Sequence[int] = (),
                 warmup: int = 1):
        self.lowered = lowered
        self.declined = auto_declines(lowered) if mode == "auto" else \
            ("it writes into its inputs" if lowered.program.mutations else None)
        self.runner = CudaGraphRunner(lambda *args: lowered.run(list(args)), warmup, checked=mode is True,
                                      fresh_outputs=mode == "auto",
                                      max_copy_bytes=copy_limit(lowered) if self.declined is None and mode == "auto" else None,
                                      varying=varying)
        self._boxed_call = True

    @property
    def replays(self) -> bool:
        """Whether calls go through the captured graph (after the warm-up and capture calls)."""
        return self.declined is None and self.runner.declined is None

    def __call__(self, args: list):
        if self.declined is None:
            if all(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
                return self.runner(*args)
        return self.lowered.run(list(args))
