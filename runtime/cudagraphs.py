"""Whole-graph CUDA graph capture for static shapes.

The first call runs the compiled graph eagerly (warm-up: Triton compiles, caches fill), the
second captures it into a CUDA graph and every later call replays it, one launch for the whole
graph. An input found at the same address on the warm-up and the capture call (a parameter, a
buffer, an activation the allocator keeps placing there) is captured where it lies, and a replay
reads it in place; every other input is copied into a buffer this runner owns before each replay
(copying the parameters too cost a copy launch per weight on every call). Should a pinned input
move later, the graph is captured again with that input copied; where that would copy more than
the runner's limit, it first waits a few calls for the inputs to settle at their new addresses.

Outputs: with ``fresh_outputs`` (``cudagraphs="auto"``, the default) every replay copies them
into new tensors, one multi-tensor copy launch, so a caller may keep them as it would keep
eager's; an output that is one of the inputs (a forward graph returns the inputs its backward
saves) is that call's input, and a None (a backward's gradient for an input that needs none)
stays None, and a view of an input (a transposed weight saved for a matmul's backward) is made
again from that call's input, at the same sizes, strides and offset. The runner declines, and
runs the graph plainly for good, where a copy could not stand in for eager's results (an output
sharing memory with several inputs) or where the capture fails. Without it
(``cudagraphs=True``) outputs live in the graph's memory and are overwritten by the next call,
as with Inductor's reduce-overhead mode: clone them to keep them longer. Outputs that are inputs
or views of them are still that call's inputs and views, in either mode: never the buffers the
graph read them from.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from .fast_call import arg_view


# Warm-up calls added, at most, while too many input bytes still move between calls: a backward's
# saved tensors settle at fixed addresses only once the forward's replays have run a step or two
SETTLING_CALLS = 4
# Times a capture whose pinned inputs moved waits for them to settle again, at most, before the
# inputs that moved are copied in for good: the forward's own capture moves the backward's saved
# tensors once, after the backward captured with them pinned
RESETTLES = 2


class CudaGraphRunner:
    """Runs ``fn`` (a callable on CUDA tensors of fixed shapes) through a captured CUDA graph.

    ``checked``: compare every call's shapes, strides, dtypes and devices with the captured ones
    (a caller whose guards already ensure them, such as Dynamo's, passes False).
    ``fresh_outputs``: return copies of the outputs (see the module docstring); ``max_copy_bytes``:
    decline when the inputs copied before each replay would exceed it (after up to
    ``SETTLING_CALLS`` more warm-up calls, for inputs that settle where they lie). ``varying``:
    positions of arguments whose strides no guard fixes (a backward graph's incoming gradients):
    a call where one differs from the warm-up call's runs ``fn`` plainly."""

    def __init__(self, fn: Callable, warmup: int = 1, checked: bool = True, fresh_outputs: bool = False,
                 max_copy_bytes: int | None = None, varying: Sequence[int] = ()):
        self.fn = fn
        self.warmup = warmup
        self.checked = checked
        self.fresh_outputs = fresh_outputs
        self.max_copy_bytes = max_copy_bytes
        self.varying = tuple(varying)
        self.varying_layouts: tuple | None = None  # (shape, strides) of each ``varying`` argument
        self.passed: tuple = ()  # per output, its source (fresh_outputs, ``_sources``)
        self._merged = False  # whether some output is an argument, a view of one or None
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs = None
        self._copy_out: CopyOut | None = None  # how replays copy the static outputs (fresh_outputs)
        self.signature: tuple | None = None
        self.warm_addresses: list[int] = []
        self.pinned: set[int] = set()  # inputs the graph reads where the caller's tensor lies
        self.settled_by = warmup + SETTLING_CALLS  # the last call that may wait for inputs to settle
        self.resettles = 0
        self.declined: str | None = None  # why calls run ``fn`` plainly, once they do

    def __call__(self, *args: torch.Tensor):
        if self.declined is not None or torch.cuda.is_current_stream_capturing():
            return self.fn(*args)  # inside a caller's own capture, its graph takes in our launches
        if self.checked or self.signature is None:
            signature = _signature(args)
            if self.signature is None:
                self.signature = signature
            elif signature != self.signature:
                raise ValueError(f"cudagraphs: the graph was captured for inputs {self.signature}, got "
                                 f"{signature}; shapes, strides, dtypes and devices must stay the same "
                                 f"(compile without cudagraphs for dynamic shapes)")
        if self.varying:
            layouts = tuple((args[i].shape, args[i].stride()) for i in self.varying)
            if self.varying_layouts is None:
                self.varying_layouts = layouts
            elif layouts != self.varying_layouts:
                return self.fn(*args)
        self.calls += 1
        if self.calls <= self.warmup:
            self.warm_addresses = [a.data_ptr() for a in args]
            out = self.fn(*args)
            declined, self.passed = _output_sources(out, args)
            if self.fresh_outputs or SHARED in self.passed:
                self.declined = declined
            self._merged = any(p is not None for p in self.passed)
            return out
        if self.graph is None or not self._feed(args):
            if self.graph is not None and self.resettles < RESETTLES and self._over_copy_limit(args):
                self.resettles += 1  # pinned inputs moved: wait for them to settle again
                self.graph, self.settled_by = None, self.calls + SETTLING_CALLS
                self.warm_addresses = [a.data_ptr() for a in args]
                return self.fn(*args)
            if self.graph is None:
                self.pinned = {i for i, a in enumerate(args) if a.data_ptr() == self.warm_addresses[i]}
                if self._over_copy_limit(args) and self.calls <= self.settled_by:
                    self.warm_addresses = [a.data_ptr() for a in args]  # still moving: one more warm-up
                    return self.fn(*args)
            self.declined = self._capture(args)
            if self.declined is not None:
                self._release()
                return self.fn(*args)
        self.graph.replay()
        out = self.static_outputs
        if self.fresh_outputs:
            fresh = self._copy_out.run()
            if isinstance(out, torch.Tensor):
                return fresh[0]
            if self._merged:
                made = iter(fresh)
                fresh = [next(made) if p is None else _passed(p, args) for p in self.passed]
            return type(out)(fresh)
        if self._merged:  # outputs that are this call's inputs or views of them, not the buffers'
            if isinstance(out, torch.Tensor):
                return _passed(self.passed[0], args)
            return type(out)(t if p is None else _passed(p, args) for t, p in zip(out, self.passed))
        return type(out)(out) if isinstance(out, (list, tuple)) else out

    def _feed(self, args: Sequence[torch.Tensor]) -> bool:
        """Copy each argument not at its captured address into its buffer (one multi-tensor copy);
        False, with the pinned inputs that moved unpinned, when the graph must be captured again."""
        moved, targets, sources = set(), [], []
        for i, (static, arg) in enumerate(zip(self.static_inputs, args)):
            if static.data_ptr() != arg.data_ptr():
                if i in self.pinned:
                    moved.add(i)
                else:
                    targets.append(static)
                    sources.append(arg)
        if moved:
            self.pinned -= moved
            return False
        if targets:
            torch._foreach_copy_(targets, sources)
        return True

    def _copied_bytes(self, args: Sequence[torch.Tensor]) -> int:
        return sum(a.nbytes for i, a in enumerate(args) if i not in self.pinned)

    def _over_copy_limit(self, args: Sequence[torch.Tensor]) -> bool:
        return self.max_copy_bytes is not None and self._copied_bytes(args) > self.max_copy_bytes

    def _release(self) -> None:
        """Drop the captured graph, its memory pool and the input buffers: a runner that declined
        runs ``fn`` plainly for good (an earlier capture may still hold hundreds of MB)."""
        self.graph, self.static_inputs, self.static_outputs, self._copy_out = None, [], None, None

    def _capture(self, args: Sequence[torch.Tensor]) -> str | None:
        """Capture ``fn`` on this runner's input buffers; the reason it declines, if it does (the
        caller then drops what the capture made, ``_release``)."""
        if self._over_copy_limit(args):
            return (f"its inputs copied before each replay would be {self._copied_bytes(args)} bytes "
                    f"(at most {self.max_copy_bytes})")
        self.graph = None
        # a copied input's buffer keeps its strides where they are dense (an expanded gradient's are
        # not: its buffer is contiguous, and ``fn`` fits the layout inside the graph)
        self.static_inputs = [a if i in self.pinned else torch.empty_like(a).copy_(a)
                              for i, a in enumerate(args)]
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.fn(*self.static_inputs)  # allocations on the capture stream's pool first
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.static_outputs = self.fn(*self.static_inputs)
        except Exception as exc:  # an op that cannot be captured (a host sync, a CPU tensor)
            _end_failed_capture(args[0].device if args else torch.device("cuda"))
            if not self.fresh_outputs:
                raise
            return f"the capture failed: {type(exc).__name__}: {exc}"
        out = self.static_outputs
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        if self.passed:
            passed = _sources(outs, self.static_inputs)
            if passed != self.passed:  # the capture's outputs are not the warm-up call's inputs
                return "its outputs passed its inputs through at the warm-up call but not at the capture"
        if self.fresh_outputs:
            outs = [t for t, p in zip(outs, self.passed) if p is None]
        self.graph = graph
        self._copy_out = CopyOut(outs) if self.fresh_outputs else None
        return None


class CopyOut:
    """Copies a replay's outputs (the graph's static tensors) into fresh memory, one multi-tensor
    copy launch. Outputs that share their memory (q, k and v split from one projection and saved
    for a backward) and outputs that do not cover their memory densely (a strided view) are
    copied as the whole memory they lie in and made again as views of the copy, at their storage
    offsets and strides: the copies alias one another as the outputs do, and a graph compiled
    for those strides takes them as they are. Every other output is copied by ``empty_like``,
    which keeps a dense tensor's strides."""

    def __init__(self, outputs: Sequence[torch.Tensor]):
        storages: dict[int, list[int]] = {}
        for k, t in enumerate(outputs):
            storages.setdefault(t.untyped_storage().data_ptr(), []).append(k)
        self.sources: list[torch.Tensor] = []  # the static tensors copied, each into fresh memory
        self.rebuild: list[tuple[int, tuple | None]] = [(0, None)] * len(outputs)  # per output: its copy, view
        for ks in storages.values():
            first = outputs[ks[0]]
            if len(ks) == 1 and torch.empty_like(first).stride() == first.stride():  # dense: kept by empty_like
                self.rebuild[ks[0]] = (len(self.sources), None)
                self.sources.append(first)
                continue
            whole = torch.empty(0, dtype=torch.uint8, device=first.device).set_(first.untyped_storage())
            for k in ks:
                t = outputs[k]
                self.rebuild[k] = (len(self.sources), (t.dtype, t.storage_offset(), t.shape, t.stride()))
            self.sources.append(whole)

    def run(self) -> list[torch.Tensor]:
        """Fresh copies of the outputs, in their order."""
        fresh = [torch.empty_like(t) for t in self.sources]
        if fresh:
            torch._foreach_copy_(fresh, self.sources)
        return [fresh[k] if view is None else _viewed(fresh[k], *view) for k, view in self.rebuild]


def _viewed(memory: torch.Tensor, dtype: torch.dtype, offset: int, shape, strides) -> torch.Tensor:
    """A ``dtype`` tensor of ``shape`` and ``strides`` at element ``offset`` of ``memory``'s storage."""
    return torch.empty(0, dtype=dtype, device=memory.device).set_(memory.untyped_storage(), offset, shape, strides)


def _end_failed_capture(device: torch.device) -> None:
    """Leave the process as a failed capture found it. A capture that fails ends before torch
    tells the CUDA random generators it is over, and every later random op outside a graph would
    then fail ("Offset increment outside graph capture"); a capture that completes tells them."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph):
        torch.empty(1, device=device).fill_(0)


NO_OUTPUT = -1  # ``_sources``: the output is None (a gradient for an input that needs none)
SHARED = -2  # ``_sources``: the output shares memory with several inputs


def _sources(outs: Sequence, args: Sequence) -> tuple:
    """Per output: ``NO_OUTPUT`` for None; the position of the argument it is; ``(position,
    sizes, strides, offset)`` for a view of that argument, its offset counted from the
    argument's (``fast_call.arg_view``'s spec); ``SHARED`` for memory of several arguments; None
    for a result of its own."""
    memory: dict[int, list[int]] = {}
    for i, a in enumerate(args):
        memory.setdefault(a.untyped_storage().data_ptr(), []).append(i)

    def source(t):
        if t is None:
            return NO_OUTPUT
        owners = memory.get(t.untyped_storage().data_ptr(), [])
        same = next((i for i in owners if t is args[i]), None)
        if same is not None or not owners:
            return same
        if len(owners) > 1:
            return SHARED
        a = args[owners[0]]
        return owners[0], tuple(t.shape), t.stride(), t.storage_offset() - a.storage_offset()

    return tuple(source(t) for t in outs)


def _passed(source, args: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The output a ``_sources`` entry other than None names, for this call's ``args``."""
    if source == NO_OUTPUT:
        return None
    if isinstance(source, int):
        return args[source]
    return arg_view(args, source)


def _output_sources(out, args: Sequence[torch.Tensor]) -> tuple[str | None, tuple]:
    """For ``out`` (the warm-up call's result): why fresh copies would not behave as it does (not
    a flat sequence of CUDA tensors and Nones; an output that is its input or a view of it alone;
    an output sharing memory with several inputs, which a view of one could not stand in for),
    or None; and its ``_sources``."""
    outs = [out] if isinstance(out, torch.Tensor) else out
    if not isinstance(outs, (list, tuple)) or \
            not all(t is None or isinstance(t, torch.Tensor) and t.is_cuda for t in outs):
        return "its outputs are not a flat sequence of CUDA tensors", ()
    passed = _sources(outs, args)
    if isinstance(out, torch.Tensor) and passed[0] is not None:
        return "its output is its input or a view of it", passed
    if SHARED in passed:
        return "an output shares memory with several inputs", passed
    return None, passed


def _signature(args: Sequence) -> tuple:
    out = []
    for a in args:
        if not isinstance(a, torch.Tensor) or a.device.type != "cuda":
            raise TypeError("cudagraphs: every argument must be a CUDA tensor")
        out.append((tuple(a.shape), tuple(a.stride()), a.dtype, a.device))
    return tuple(out)
