"""A compiled graph as a callable: checks inputs, allocates buffers, runs kernels and externs."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from ..backends.base import Artifact, Backend, Launcher
from ..backends.tensor_helpers import allocator as _allocator, device_flag, reinterpret_tensor as _reinterpret_tensor
from ..core import settings
from ..core.trees import map_leaves
from ..ir.index import Index, bare_symbol, evaluate
from ..ir.nodes import Buffer, BufferRef, Extern, Layout
from ..scheduler import Schedule
from ..scheduler.kernel import Kernel
from . import fast_call
from .fast_call import PLAIN_TENSORS


class InputError(TypeError):
    """A compiled graph was called with arguments that do not fit its inputs."""


def check_count(what: str, names: Sequence[str], args: Sequence, noun: str = "arguments") -> None:
    """InputError unless there is one argument per name."""
    if len(args) != len(names):
        raise InputError(f"{what} takes {len(names)} {noun} ({', '.join(names)}), got {len(args)}")


def check_tensor(name: str, value, dtype: torch.dtype | None = None, rank: int | None = None,
                 shape: str = "") -> torch.Tensor:
    """``value`` if it is a tensor of ``dtype`` and ``rank`` (when given), else InputError."""
    if not isinstance(value, torch.Tensor):
        raise InputError(f"argument {name!r} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout is not torch.strided:
        raise InputError(f"argument {name!r} is a {value.layout} tensor: compiled graphs read strided "
                         "memory; pass value.to_dense()")
    if type(value) not in PLAIN_TENSORS and _holds_no_data(value):
        raise InputError(f"argument {name!r} is a {type(value).__name__} without data (a fake or meta "
                         "tensor): a compiled graph runs on real tensors; call it outside FakeTensorMode")
    if dtype is not None and value.dtype != dtype:
        raise InputError(f"argument {name!r} must have dtype {dtype}, got {value.dtype}")
    if rank is not None and value.dim() != rank:
        raise InputError(f"argument {name!r} must have rank {rank}{f' (shape {shape})' if shape else ''}, "
                         f"got shape {tuple(value.shape)}")
    return value


def _holds_no_data(t: torch.Tensor) -> bool:
    """Whether tensor subclass ``t`` has no memory a kernel could read (FakeTensor, functional
    wrappers of one, subclasses without storage): its data pointer would be null or raise."""
    if is_fake(t):
        return True
    try:
        return t.numel() > 0 and t.untyped_storage().data_ptr() == 0
    except (RuntimeError, NotImplementedError):
        return True


def _negation_resolved(t: torch.Tensor) -> torch.Tensor:
    """A lazily negated view (``z.conj().imag``: its memory holds minus its values) as a tensor
    of the same strides holding its values: kernels read memory, and the graph was compiled for
    those strides."""
    resolved = t.resolve_neg()
    if resolved.stride() == t.stride():
        return resolved
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(resolved)


@dataclass(frozen=True)
class _Binding:
    """Symbol ``name`` is dimension ``dim`` of input ``arg``."""

    name: str
    arg: int
    dim: int


MAX_PLANS = 256  # call plans kept per compiled graph
ARENA_ALIGN = 64  # bytes: where each memory slot starts in a call's arena


class SizeDispatch(Protocol):
    """Chooses, once per call sizes, the launchers of kernels with symbolic sizes (the tuner's
    ``autotune.dispatch.SizeTuner``)."""

    def resolve(self, graph: "CompiledGraph", env: dict[str, int]) -> tuple[Mapping[str, Launcher], Mapping[str, Any]]:
        """Launchers to run at symbol values ``env`` instead of ``graph.launchers`` (by kernel
        name), and the decisions behind them (merged into ``graph.tuning``)."""


class CompiledGraph:
    """Runs a schedule with what a backend built for its kernels (``artifact``).

    Complete when constructed: ``configs`` holds each kernel's config, ``tuning`` where it came
    from (the tuner's decisions; empty without one). ``with_launchers`` makes a new graph with
    some kernels replaced (the tuner's candidates) instead of patching this one.

    With a ``dispatch`` (kernels with symbolic sizes under a tuner), the first call at new sizes
    asks it which launchers run there; the answer goes into that call plan, and its decisions
    into ``tuning`` as ``kernel@sizes`` entries (kept for the sizes whose plans are kept).

    Everything a call does that depends only on the input shapes (symbol values, buffer sizes,
    grids, scalar kernel arguments) is worked out once per shape into a ``CallPlan``; a call with
    known shapes only checks dtypes and devices, allocates and launches.
    """

    def __init__(self, schedule: Schedule, artifact: Artifact, backend: Backend, name: str = "graph",
                 configs: Mapping[str, Any] | None = None, tuning: Mapping[str, Any] | None = None,
                 poison: bool | None = None, dispatch: SizeDispatch | None = None):
        self.schedule = schedule
        self.graph = schedule.graph
        self.artifact = artifact
        self.launchers: Mapping[str, Launcher] = artifact.launchers
        self.backend = backend
        self.device = backend.device
        self.name = name
        self.configs = dict(configs or {})
        self.tuning = dict(tuning or {})
        self.dispatch = dispatch
        self.inputs: list[Buffer] = [self.graph.buffers[n] for n in self.graph.inputs]
        self.bindings = _bindings(self.inputs)
        self._plans: dict[tuple, CallPlan] = {}
        self.steps = [(s, self.launchers[s.name]) if isinstance(s, Kernel) else (s, None) for s in schedule.steps]
        self.extern_outputs = {o for s in schedule.externs for o in s.outs}
        self.memory = schedule.memory
        self.allocations = [self.graph.buffers[n] for n in self._allocated()]
        self.planned = [(self.graph.buffers[b], slot) for b, slot in self.memory.slot_of.items()]
        self.poison = settings.current().poison if poison is None else poison
        self._dtypes = tuple(b.dtype.torch for b in self.inputs)
        self._device_flag = device_flag(self.device)

    def with_launchers(self, overrides: Mapping[str, Launcher], poison: bool | None = None) -> "CompiledGraph":
        """A new graph that runs ``overrides`` in place of those kernels' launchers (and, with
        ``poison``, starts every buffer it allocates poisoned); it has no ``dispatch``: it runs
        exactly these launchers at every size."""
        artifact = Artifact({**self.launchers, **overrides}, self.artifact.sources, self.artifact.libraries)
        return CompiledGraph(self.schedule, artifact, self.backend, self.name, self.configs, self.tuning,
                             self.poison if poison is None else poison)

    def _allocated(self) -> list[str]:
        """Buffers allocated one by one: outputs and intermediates outside the memory plan."""
        outs = [o.buffer for o in self.graph.outputs]
        names = dict.fromkeys(outs + list(self.schedule.intermediates))
        inputs = set(self.graph.inputs)
        return [n for n in names if n not in self.memory.slot_of and n not in self.extern_outputs
                and n not in inputs]

    def __call__(self, *args: torch.Tensor):
        try:
            key = tuple([a.shape for a in args])
            plan = self._plans.get(key)
        except AttributeError:  # not a tensor: check_inputs says which
            key = plan = None
        if plan is None or not self._accepts(args):
            env = self.check_inputs(args)
            args = tuple(_negation_resolved(a) if a.is_neg() else a for a in args)
            if plan is not None:
                return plan.run(args, self.poison)
            plan = self.plan(env)
            if len(self._plans) >= MAX_PLANS:  # dynamic shapes seen at many sizes: start over
                self._plans.clear()
                self.tuning = {k: d for k, d in self.tuning.items() if "@" not in k}
            self._plans[key] = plan
        return plan.run(args, self.poison)

    def call_plan(self, *args: torch.Tensor) -> "CallPlan | None":
        """The call plan kept for the shapes of ``args`` (None before a call with them)."""
        return self._plans.get(tuple(a.shape for a in args))

    def _accepts(self, args: Sequence[torch.Tensor]) -> bool:
        flag = self._device_flag
        for a, dtype in zip(args, self._dtypes):
            if a.dtype is not dtype or not getattr(a, flag) or type(a) not in PLAIN_TENSORS or a.is_neg():
                return False
        return True

    def plan(self, env: dict[str, int]) -> "CallPlan":
        """The call plan for symbol values ``env`` (see ``CallPlan``), with the launchers the
        ``dispatch`` chooses there."""
        if self.dispatch is None:
            return CallPlan(self, env)
        launchers, decisions = self.dispatch.resolve(self, env)
        self.tuning.update(decisions)
        return CallPlan(self, env, launchers)

    def check_inputs(self, args: Sequence) -> dict[str, int]:
        """Validate argument count, types, dtypes and shapes; return symbol values."""
        check_count(self.name, [b.name for b in self.inputs], args, "tensors")
        env: dict[str, int] = {}
        for b, t in zip(self.inputs, args):
            check_tensor(b.name, t, b.dtype.torch, len(b.sizes), f"({', '.join(map(str, b.sizes))})")
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


class CallPlan:
    """One compiled graph's call for fixed symbol values: sizes, strides, memory slots, output
    views and launches (bound to the symbol values when the launcher can ``bind``) worked out once.
    ``launchers`` replace the graph's own for those kernels (chosen for these sizes).

    Launchers that can compile ahead (``bound.warmup``) are all warmed up here, in parallel threads
    when there are several, so a graph's kernels compile side by side instead of one per launch."""

    def __init__(self, graph: CompiledGraph, env: dict[str, int], launchers: Mapping[str, Launcher] | None = None):
        self.env = env
        self.allocations = [(b.name, tuple(evaluate(s, env) for s in b.layout.sizes),
                             tuple(evaluate(s, env) for s in b.layout.strides), b.dtype.torch,
                             poison_value(b.dtype.torch))
                            for b in graph.allocations]
        # the memory plan's slots side by side in one arena, each at an aligned offset
        offsets, self.arena = [], 0
        for n in (graph.memory.slots if graph.planned else ()):
            offsets.append(self.arena)
            self.arena += -(-evaluate(n, env) // ARENA_ALIGN) * ARENA_ALIGN
        self.views = []
        for b, slot in graph.planned:
            sizes = tuple(evaluate(s, env) for s in b.layout.sizes)
            strides = tuple(evaluate(s, env) for s in b.layout.strides)  # contiguous: the plan holds no other
            self.views.append((b.name, b.dtype.torch, sizes, strides, offsets[slot] // b.dtype.itemsize,
                               poison_value(b.dtype.torch)))
        self.arena_dtypes = list(dict.fromkeys(dtype for _, dtype, *_ in self.views))
        chosen = launchers or {}
        inputs = set(graph.graph.inputs)
        self.launchers = {step.name: chosen.get(step.name, launch) for step, launch in graph.steps if launch is not None}
        self.steps = [_bind(self.launchers[step.name], env) if launch is not None
                      else BoundExtern(step, graph.graph.buffers, inputs, env, graph.device)
                      for step, launch in graph.steps]
        self.inputs = [b.name for b in graph.inputs]
        self.input_shapes = [tuple(evaluate(s, env) for s in b.sizes) for b in graph.inputs]
        # None: contiguous; else the strides the graph was compiled for (a backward's saved views)
        self.input_strides = [None if b.layout.is_contiguous() else tuple(evaluate(s, env) for s in b.layout.strides)
                              for b in graph.inputs]
        self.input_dtypes = [b.dtype.torch for b in graph.inputs]
        self.name = graph.name
        self.outputs = [(o.buffer, _view_spec(o.layout, env)) for o in graph.graph.outputs]
        self.device = graph.device
        self.empty = _allocator(graph.device)
        _warm_up([run.warmup for run in self.steps if hasattr(run, "warmup")])

    def entry(self, positions: Sequence[int], constants: Sequence[torch.Tensor],
              picks: Sequence[tuple[bool | str | None, object]], kind: type, poison: bool):
        """This plan written out as one function of a caller's argument list (``fast_call.entry``),
        or None where a step cannot be."""
        return fast_call.entry(self, positions, constants, picks, kind, poison)

    @staticmethod
    def as_view(t: torch.Tensor, spec: tuple) -> torch.Tensor:
        """``t`` seen through a result's view spec (``_as_view``)."""
        return _as_view(t, spec)

    def run(self, args: Sequence[torch.Tensor], poison: bool) -> tuple:
        """Allocate, launch every step, return the outputs."""
        empty = self.empty
        buffers = dict(zip(self.inputs, args))
        for name, sizes, strides, dtype, fill in self.allocations:
            t = empty(sizes, strides, dtype)
            buffers[name] = t.fill_(fill) if poison else t
        if self.views:
            arena = empty((self.arena,), (1,), torch.uint8)
            typed = {dtype: arena.view(dtype) for dtype in self.arena_dtypes}
            for name, dtype, sizes, strides, offset, fill in self.views:
                t = _reinterpret_tensor(typed[dtype], sizes, strides, offset)
                buffers[name] = t.fill_(fill) if poison else t
        for run in self.steps:
            run(buffers)
        return tuple(buffers[name] if spec is None else _as_view(buffers[name], spec)
                     for name, spec in self.outputs)


def _bind(launch, env: dict[str, int]):
    """``launch`` with the symbol values fixed: its own ``bind`` when it has one (precomputed grids
    and arguments), else a plain call (launchers swapped in by the autotuner, tests)."""
    bind = getattr(launch, "bind", None)
    return bind(env) if bind is not None else lambda buffers: launch(buffers, env)


_WARMUP_POOL: ThreadPoolExecutor | None = None


def _warm_up(warmups: list) -> None:
    """Run the warm-ups (kernel compiles), several at once when there are several."""
    global _WARMUP_POOL
    if len(warmups) <= 1:
        for w in warmups:
            w()
        return
    if _WARMUP_POOL is None:
        _WARMUP_POOL = ThreadPoolExecutor(max(2, min(16, os.cpu_count() or 2)),
                                          thread_name_prefix="loopnest-compile")
    for future in [_WARMUP_POOL.submit(w) for w in warmups]:
        future.result()


def poison_value(dtype: torch.dtype):
    """What poisoned buffers of ``dtype`` hold, so elements no kernel writes stand out: NaN for
    floats, True for bools, -77 for signed integers (77 unsigned)."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return -77 if dtype.is_signed else 77


def _view_spec(layout: Layout, env: dict[str, int]) -> tuple:
    return (tuple(evaluate(s, env) for s in layout.sizes), tuple(evaluate(s, env) for s in layout.strides),
            evaluate(layout.offset, env))


def _as_view(t: torch.Tensor, spec: tuple) -> torch.Tensor:
    """``t`` seen through ``spec`` (sizes, strides, offset), whose offset counts from ``t``'s first
    element (as kernels do: they get ``t.data_ptr()``), not from the start of its storage."""
    sizes, strides, offset = spec
    if offset == 0 and t.shape == sizes and t.stride() == strides:
        return t
    return _reinterpret_tensor(t, sizes, strides, offset)


def _bindings(inputs: list[Buffer]) -> list[_Binding]:
    return [_Binding(name, k, d) for k, b in enumerate(inputs) for d, s in enumerate(b.sizes)
            if (name := bare_symbol(s)) is not None]


class _Slot(int):
    """Where a buffer argument goes in an extern's argument tree: the index of its tensor."""


class BoundExtern:
    """An extern step with the symbol values fixed: sizes among its arguments evaluated, the view
    of each buffer argument and the layout of each result worked out, the tree of arguments
    flattened where it is flat (the usual ``op(a, b, ...)``), and the op's device and carrier
    conversions left out where no argument needs them. A call fetches the buffers, calls the op
    and files its results."""

    def __init__(self, node: Extern, decls: Mapping[str, Buffer], inputs: set[str], env: dict[str, int],
                 device: str):
        self.name = node.name
        self.device = device
        self.on_device = device_flag(device)
        specialize = getattr(node.fn, "for_device", None)
        self.fn = specialize(device) if specialize is not None else node.fn
        self.refs: list[tuple[str, tuple | None]] = []

        def resolve(a):
            if isinstance(a, BufferRef):
                spec = None if a.layout is None else _view_spec(a.layout, env)
                if spec is not None and a.name not in inputs and spec == _view_spec(decls[a.name].layout, env):
                    spec = None  # made here in that very layout
                self.refs.append((a.name, spec))
                return _Slot(len(self.refs) - 1)
            return evaluate(a, env) if isinstance(a, Index) else a

        self.args, self.kwargs = map_leaves(resolve, list(node.args)), map_leaves(resolve, dict(node.kwargs))
        top = [(k, self.refs[a]) for k, a in enumerate(self.args) if type(a) is _Slot]
        self.flat = len(top) == len(self.refs)  # every buffer a positional argument of its own
        self.fetch = [(k, name, spec) for k, (name, spec) in top]
        self.outs = []
        for name in node.outs:
            layout = decls[name].layout
            self.outs.append((name, tuple(evaluate(s, env) for s in layout.sizes),
                              tuple(evaluate(s, env) for s in layout.strides)))

    def __call__(self, buffers: dict[str, torch.Tensor]) -> None:
        if self.flat:
            args = self.args.copy()
            for k, name, spec in self.fetch:
                args[k] = buffers[name] if spec is None else _reinterpret_tensor(buffers[name], *spec)
            result = self.fn(*args, **self.kwargs)
        else:
            tensors = [buffers[name] if spec is None else _reinterpret_tensor(buffers[name], *spec)
                       for name, spec in self.refs]

            def fill(a):
                return tensors[a] if type(a) is _Slot else a
            result = self.fn(*map_leaves(fill, self.args), **map_leaves(fill, self.kwargs))
        results = (result,) if isinstance(result, torch.Tensor) else result
        for (name, sizes, strides), t in zip(self.outs, results):
            if not getattr(t, self.on_device):
                t = self.moved(t, next((b for b in buffers.values() if getattr(b, self.on_device)), None))
            buffers[name] = t if t.shape == sizes and t.stride() == strides else self.fitted(name, t)

    def moved(self, t: torch.Tensor, near: torch.Tensor | None) -> torch.Tensor:
        """A result the op left on the CPU in a graph on another device (``scalar_tensor`` with no
        device, attention's seeds when it draws no dropout), on the graph's device (``near``'s,
        a tensor there, if given). A 0-d one is filled in, which a CUDA graph can capture (a copy
        from host memory waits for the stream, which a capture cannot)."""
        device = self.device if near is None else near.device
        if t.dim() == 0:
            return torch.full((), t.item(), dtype=t.dtype, device=device)
        return t.to(device)

    def fitted(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """The op's result ``t`` for output ``name`` in the layout the plan expects (a copy when
        its strides differ); RuntimeError when its shape differs."""
        sizes, strides = next((sizes, strides) for out, sizes, strides in self.outs if out == name)
        if t.shape != sizes:
            raise RuntimeError(f"extern {self.name} produced shape {tuple(t.shape)} for {name}, expected {sizes}")
        return restrided(t, strides)


def restrided(t: torch.Tensor, strides: Sequence[int]) -> torch.Tensor:
    """``t`` itself when its strides are ``strides`` (ignoring dimensions of size 1) or it has no
    elements (ATen gives those strides of 0), else a copy laid out with them."""
    if all(n <= 1 or a == b for a, b, n in zip(t.stride(), strides, t.shape)) or t.numel() == 0:
        return t
    out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
