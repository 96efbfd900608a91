"""A compiled graph as a callable: checks inputs, allocates buffers, runs kernels and externs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .. import settings
from ..ir.index import Index, Sym, evaluate
from ..ir.dtypes import Kind
from ..ir.nodes import Buffer, BufferRef, Extern, Layout
from ..scheduler import Schedule
from ..scheduler.kernel import Kernel


class InputError(TypeError):
    """A compiled graph was called with arguments that do not fit its inputs."""


@dataclass(frozen=True)
class _Binding:
    """Symbol ``name`` is dimension ``dim`` of input ``arg``."""

    name: str
    arg: int
    dim: int


class CompiledGraph:
    """Runs a schedule with the launchers a backend built for its kernels."""

    def __init__(self, schedule: Schedule, launchers: dict, device: str = "cpu", name: str = "graph"):
        self.schedule = schedule
        self.graph = schedule.graph
        self.launchers = launchers
        self.device = device
        self.name = name
        self.inputs: list[Buffer] = [self.graph.buffers[n] for n in self.graph.inputs]
        self.bindings = _bindings(self.inputs)
        self.steps = [(s, launchers[s.name]) if isinstance(s, Kernel) else (s, None) for s in schedule.steps]
        self.extern_outputs = {o for s in schedule.externs for o in s.outs}
        self.memory = schedule.memory
        self.allocations = [self.graph.buffers[n] for n in self._allocated()]
        self.planned = [(self.graph.buffers[b], slot) for b, slot in self.memory.slot_of.items()]
        self.poison = settings.poison_outputs()

    def _allocated(self) -> list[str]:
        """Buffers allocated one by one: outputs and intermediates outside the memory plan."""
        outs = [o.buffer for o in self.graph.outputs]
        names = dict.fromkeys(outs + list(self.schedule.intermediates))
        inputs = set(self.graph.inputs)
        return [n for n in names if n not in self.memory.slot_of and n not in self.extern_outputs
                and n not in inputs]

    def __call__(self, *args: torch.Tensor):
        env = self.check_inputs(args)
        buffers = {b.name: t for b, t in zip(self.inputs, args)}
        for b in self.allocations:
            buffers[b.name] = _allocate(b, env, self.device, self.poison)
        if self.planned:
            slots = [torch.empty(_eval(n, env), dtype=torch.uint8, device=self.device) for n in self.memory.slots]
            for b, slot in self.planned:
                buffers[b.name] = _slot_view(slots[slot], b, env, self.poison)
        for step, launch in self.steps:
            if launch is not None:
                launch(buffers, env)
            else:
                _run_extern(step, buffers, self.graph.buffers, env)
        return tuple(_view(buffers[o.buffer], o.layout, env) for o in self.graph.outputs)

    def check_inputs(self, args: Sequence) -> dict[str, int]:
        """Validate argument count, types, dtypes and shapes; return symbol values."""
        if len(args) != len(self.inputs):
            names = ", ".join(b.name for b in self.inputs)
            raise InputError(f"{self.name} takes {len(self.inputs)} tensors ({names}), got {len(args)}")
        env: dict[str, int] = {}
        for b, t in zip(self.inputs, args):
            if not isinstance(t, torch.Tensor):
                raise InputError(f"argument {b.name!r} must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype != b.dtype.torch:
                raise InputError(f"argument {b.name!r} must have dtype {b.dtype.torch}, got {t.dtype}")
            if t.dim() != len(b.sizes):
                raise InputError(f"argument {b.name!r} must have rank {len(b.sizes)} "
                                 f"(shape {_shape(b.sizes)}), got shape {tuple(t.shape)}")
            if t.device.type != self.device:
                raise InputError(f"argument {b.name!r} is on {t.device}, the graph was compiled for "
                                 f"{self.device}")
        for bind in self.bindings:
            value = args[bind.arg].shape[bind.dim]
            if env.setdefault(bind.name, value) != value:
                raise InputError(f"size {bind.name} is {env[bind.name]} from an earlier argument but "
                                 f"{value} in dimension {bind.dim} of {self.inputs[bind.arg].name!r}")
        for b, t in zip(self.inputs, args):
            expect = tuple(evaluate(s, env) for s in b.sizes)
            if tuple(t.shape) != expect:
                raise InputError(f"argument {b.name!r} must have shape {expect}, got {tuple(t.shape)}")
        return env


def _shape(sizes) -> str:
    return "(" + ", ".join(str(s) for s in sizes) + ")"


def _bindings(inputs: list[Buffer]) -> list[_Binding]:
    out = []
    for k, b in enumerate(inputs):
        for d, s in enumerate(b.sizes):
            if len(s.terms) == 1 and s.const == 0 and s.terms[0][1] == 1 and len(s.terms[0][0]) == 1:
                atom = s.terms[0][0][0]
                if isinstance(atom, Sym):
                    out.append(_Binding(atom.name, k, d))
    return out


def _eval(e: Index, env: dict[str, int]) -> int:
    c = e.as_int()
    return c if c is not None else evaluate(e, env)


def _allocate(b: Buffer, env: dict[str, int], device: str, poison: bool) -> torch.Tensor:
    sizes = [_eval(s, env) for s in b.layout.sizes]
    strides = [_eval(s, env) for s in b.layout.strides]
    t = torch.empty_strided(sizes, strides, dtype=b.dtype.torch, device=device)
    return _poison(t, b) if poison else t


def _poison(t: torch.Tensor, b: Buffer) -> torch.Tensor:
    """Fill with NaN (floats) or a sentinel, so elements no kernel writes stand out."""
    return t.fill_(float("nan") if b.dtype.is_float else _POISON[b.dtype.kind])


_POISON = {Kind.INT: -77, Kind.UINT: 77, Kind.BOOL: True}


def _slot_view(slot: torch.Tensor, b: Buffer, env: dict[str, int], poison: bool) -> torch.Tensor:
    """Contiguous buffer ``b`` placed at the start of a planned memory slot."""
    sizes = [_eval(s, env) for s in b.layout.sizes]
    numel = 1
    for n in sizes:
        numel *= n
    t = slot[: numel * b.dtype.itemsize].view(b.dtype.torch).view(sizes)
    return _poison(t, b) if poison else t


def _view(t: torch.Tensor, layout: Layout, env: dict[str, int]) -> torch.Tensor:
    """``t`` seen through ``layout``, whose offset counts from ``t``'s first element (as kernels
    do: they get ``t.data_ptr()``), not from the start of its storage."""
    sizes = [_eval(s, env) for s in layout.sizes]
    strides = [_eval(s, env) for s in layout.strides]
    offset = _eval(layout.offset, env)
    if list(t.shape) == sizes and list(t.stride()) == strides and offset == 0:
        return t
    return t.as_strided(sizes, strides, t.storage_offset() + offset)


def _run_extern(node: Extern, buffers: dict[str, torch.Tensor], decls: dict[str, Buffer],
                env: dict[str, int]) -> None:
    def tensor_of(ref: BufferRef) -> torch.Tensor:
        t = buffers[ref.name]
        return t if ref.layout is None else _view(t, ref.layout, env)

    for name, value in zip(node.outs, node.call(tensor_of)):
        buffers[name] = _conform(value, decls[name], env)


def _conform(t: torch.Tensor, decl: Buffer, env: dict[str, int]) -> torch.Tensor:
    """The extern's result in the layout the kernels were generated for (a copy if it differs)."""
    strides = [_eval(s, env) for s in decl.layout.strides]
    sizes = [_eval(s, env) for s in decl.layout.sizes]
    if list(t.shape) != sizes:
        raise RuntimeError(f"extern produced shape {tuple(t.shape)} for {decl.name}, expected {tuple(sizes)}")
    if all(n <= 1 or a == b for a, b, n in zip(t.stride(), strides, sizes)):
        return t
    out = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
