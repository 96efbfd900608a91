"""A lowered FX graph as a callable with the FX graph's calling convention.

Per call: bind symbol values from argument sizes (and SymInt arguments), bring each tensor
argument to the layout it was compiled for (a copy only when its strides differ), run the compiled
graph, apply input mutations, and rebuild the FX output structure (compiled outputs, inputs passed
through, sizes evaluated, constants).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..backends.base import Backend
from ..ir.index import evaluate
from ..ir.interpret import strided_view
from ..pipeline import Tuner, compile_graph
from ..runtime.compiled import CompiledGraph, InputError, check_tensor, restrided
from ..runtime.fast_call import ARG_VIEW, MISS, arg_view
from ..core.trees import map_leaves
from .fx_lowering import FxLowering, LeafKind, LoweredProgram, OutputLeaf, TensorInput

MAX_ENTRIES = 4  # call plans written out per graph (dynamic shapes seen at many sizes: the rest walk theirs)


@dataclass
class GraphStats:
    """What compiling one FX graph produced (for ``loopnest.explain``)."""

    name: str
    backend: str
    num_fx_nodes: int
    lowering_ms: float
    compile_ms: float
    source_path: Path | None = None
    program: LoweredProgram | None = field(default=None, repr=False)


class LoweredGraph:
    """Calls a compiled graph like the FX graph it came from: ``fn(*args)``."""

    def __init__(self, program: LoweredProgram, compiled: CompiledGraph, stats: GraphStats):
        self.program = program
        self.compiled = compiled
        self.stats = stats
        with unset_fake_temporarily():  # a real tensor, though built while Dynamo traces
            self._carrier = torch.empty(1, device=compiled.device) if program.carriers else None
        self._direct = _direct_outputs(program, compiled.device)
        self._entries: list = []  # call plans written out as functions (fast_call), newest last
        self._written: list = []  # the plans behind them (a plan that cannot be written counts)
        # 0-d tensor arguments and their traced dtypes: Dynamo traces the values of a
        # ``random.Random`` as float32 0-d tensors but passes float64 ones at run time
        self._scalars = tuple((ti.position, ti.tensor.dtype.torch) for ti in program.tensor_inputs
                              if not ti.strides and ti.carrier is None)

    def __call__(self, *args):
        return self.run(list(args))

    @property
    def flat_outputs(self) -> bool:
        """Whether the graph returns a flat sequence of its own results and arguments (or one of
        them), takes tensors contiguous or at constant strides and writes no input
        (``_direct_outputs``)."""
        return self._direct is not None

    def guarded_call(self) -> Callable:
        """``fn(*args)`` for a caller whose guards ensure every call's arguments have the dtypes,
        devices, sizes and strides of the ones this graph was compiled for (Dynamo's tensor
        guards): a static graph on the direct path then runs its one call plan, written out as a
        function (``fast_call``) at the first call, which compiles what launches lazily. Anything
        else calls ``run``, which checks and fits."""
        direct = self._direct
        if direct is None or self.program.sym_sources:
            return lambda *args: self.run(list(args))
        compiled, positions, constants = self.compiled, direct.positions, self.program.constants
        identity = direct.kind in (tuple, list) and \
            direct.outputs == tuple((False, k) for k in range(len(compiled.graph.outputs)))
        kind, picks = direct.kind, direct.outputs
        plan = entry = None

        def call(*args):
            nonlocal plan, entry
            if entry is not None:
                out = entry(args)
                if out is not MISS:
                    return out
            if plan is None:
                plan = compiled.plan(compiled.check_inputs([args[i] for i in positions] + constants))
                entry = plan.entry(positions, constants, picks, kind, compiled.poison)
            outs = plan.run([args[i] for i in positions] + constants, compiled.poison)
            if identity:
                return outs if kind is tuple else list(outs)
            return kind(picked(args, outs, picks))
        if not self._scalars:
            return call
        scalars = self._scalars

        def call_traced_dtypes(*args):
            for position, dtype in scalars:
                if args[position].dtype is not dtype:
                    args = _as_traced(list(args), scalars)
                    break
            return call(*args)
        return call_traced_dtypes

    def run(self, args: list, compiled: CompiledGraph | None = None):
        """Run on a list of arguments (AOTAutograd's boxed convention); ``compiled``: another
        build of the same graph to run instead (the tuner's candidates)."""
        if self._scalars and len(args) == self.program.num_args:
            args = _as_traced(args, self._scalars)
        direct = self._direct
        if direct is not None and len(args) == self.program.num_args:
            if compiled is None:
                for entry in self._entries:
                    out = entry(args)
                    if out is not MISS:
                        return out
            # tensors on the device in the compiled layouts, outputs that are graph results: the
            # tensors go to the compiled graph as they are (anything else takes the path below)
            tensors = [args[i] for i in direct.positions]
            if all(isinstance(t, torch.Tensor) and t.device.type == direct.device
                   and (t.is_contiguous() if strides is None else t.stride() == strides)
                   for t, strides in zip(tensors, direct.strides)):
                outs = (compiled or self.compiled)(*tensors, *self.program.constants)
                if compiled is None and len(self._written) < MAX_ENTRIES:
                    self._write_entry(tensors)
                return direct.kind(picked(args, outs, direct.outputs))
        return self._run(args, compiled or self.compiled)

    def _write_entry(self, tensors: list) -> None:
        """Write out the call plan the direct path just ran (``fast_call``): later calls with
        arguments that fit it run that function, with no walk over the plan."""
        constants = self.program.constants
        plan = self.compiled.call_plan(*tensors, *constants)
        if plan is None or any(plan is p for p in self._written):
            return
        self._written.append(plan)
        direct = self._direct
        entry = plan.entry(direct.positions, constants, direct.outputs, direct.kind, self.compiled.poison)
        if entry is not None:
            self._entries.append(entry)

    def _run(self, args: list, compiled: CompiledGraph):
        p = self.program
        self._check(args)
        env = {name: (int(args[a]) if d is None else args[a].shape[d]) for name, (a, d) in p.sym_sources.items()}
        fitted = [_fit(args[ti.position], ti, env, compiled.device) for ti in p.tensor_inputs]
        tensors = fitted + p.constants
        tensors += [self._carrier.expand(env[name]) for name in p.carriers]
        outs = compiled(*tensors)
        views = {ti.position: t for ti, t in zip(p.tensor_inputs, fitted)}
        for position, leaf in p.mutations:
            args[position].copy_(_value(leaf, outs, args, views, env))
        return map_leaves(lambda leaf: _value(leaf, outs, args, views, env), p.outputs)

    def _check(self, args: list) -> None:
        p = self.program
        if len(args) != p.num_args:
            raise InputError(f"{self.stats.name}: the graph takes {p.num_args} arguments, got {len(args)}")
        for ti in p.tensor_inputs:
            if not isinstance(args[ti.position], torch.Tensor):  # the message is built only on failure
                check_tensor(f"{ti.position} ({ti.tensor.src.name[3:]}) of {self.stats.name}", args[ti.position])


def _as_traced(args: list, scalars: tuple) -> list:
    """``args`` with each 0-d tensor of ``scalars`` (position, traced dtype) in its traced dtype."""
    for position, dtype in scalars:
        a = args[position]
        if isinstance(a, torch.Tensor) and a.dtype is not dtype:
            args[position] = a.to(dtype)
    return args


@dataclass(frozen=True)
class _Direct:
    """How a simple program passes arguments and results through: which arguments are its
    tensors, and which compiled results or arguments, in a list or tuple or alone, are its
    outputs (``kind`` makes the returned value from an iterable of them)."""

    positions: tuple[int, ...]
    # (an argument passed through?, its index); (None, 0): None; (ARG_VIEW, spec): a view of an argument
    outputs: tuple[tuple[bool | str | None, object], ...]
    kind: Callable[[Iterable], object]
    device: str
    strides: tuple[tuple[int, ...] | None, ...]  # of each tensor argument: None where contiguous


def picked(args: list, outs, picks: tuple[tuple[bool | str | None, object], ...]) -> Iterator:
    """The outputs ``picks`` names (``_Direct.outputs``), from the arguments and compiled results."""
    return (None if is_arg is None else arg_view(args, k) if is_arg == ARG_VIEW else args[k] if is_arg else outs[k]
            for is_arg, k in picks)


def only(items: Iterable):
    """The one item of ``items``: the result of a graph that returns one tensor, not a tuple."""
    (item,) = items
    return item


def _direct_outputs(program: LoweredProgram, device: str) -> _Direct | None:
    """The pass-through of ``program`` when it has no carriers or mutations, compiled every tensor
    argument contiguous or at constant strides (a backward graph's transposed saved tensors), and
    returns a flat list or tuple of graph results, arguments (a forward graph returns the inputs
    its backward saves), views of arguments at constant sizes, strides and offsets (a transposed
    weight saved for a matmul's backward) and Nones (a backward graph's gradients of inputs that
    need none), or one of them alone; else None. Symbols are no obstacle: without carriers each
    is a dimension of a tensor argument, which the compiled graph binds itself (its call plans
    are keyed by the shapes), and nothing else here needs them."""
    leaves_, kind = program.outputs, type(program.outputs)
    if isinstance(leaves_, OutputLeaf):
        leaves_, kind = (leaves_,), only
    strides = tuple(None if ti.contiguous else tuple(s.as_int() for s in ti.strides) for ti in program.tensor_inputs)
    if (program.carriers or program.mutations or type(leaves_) not in (list, tuple)
            or any(ti.carrier is not None for ti in program.tensor_inputs)
            or any(s is not None and None in s for s in strides)):  # a symbol among them
        return None
    picks = tuple(_pick(leaf) for leaf in leaves_)
    if None in picks:
        return None
    return _Direct(tuple(ti.position for ti in program.tensor_inputs), picks, kind, device, strides)


def _pick(leaf) -> tuple[bool | str | None, object] | None:
    """``leaf`` as one of ``_Direct.outputs``; None where it cannot be one (a carried value, a
    view at a symbolic layout, anything but a graph result, an argument or None)."""
    if not isinstance(leaf, OutputLeaf) or leaf.carrier is not None:
        return None
    if _is_none(leaf):
        return None, 0
    if leaf.kind is LeafKind.ARG_VIEW:
        view = _constant_view(leaf)
        return None if view is None else (ARG_VIEW, view)
    if leaf.kind in (LeafKind.GRAPH, LeafKind.ARG):
        return leaf.kind is LeafKind.ARG, leaf.value
    return None


def _constant_view(leaf: OutputLeaf) -> tuple | None:
    """``(argument, sizes, strides, offset)`` of an ``ARG_VIEW`` leaf whose layout is constant;
    None for any other leaf."""
    if leaf.kind is not LeafKind.ARG_VIEW:
        return None
    position, layout = leaf.value
    sizes, strides = [s.as_int() for s in layout.sizes], [s.as_int() for s in layout.strides]
    offset = layout.offset.as_int()
    if None in sizes or None in strides or offset is None:
        return None
    return position, tuple(sizes), tuple(strides), offset


def _is_none(leaf: OutputLeaf) -> bool:
    return leaf.kind is LeafKind.VALUE and leaf.value is None


class BoxedGraph:
    """AOTAutograd's calling convention: one list argument."""

    def __init__(self, lowered: LoweredGraph):
        self.lowered = lowered
        self._boxed_call = True  # an instance attribute: wrappers (functools.wraps) copy __dict__

    def __call__(self, args: list):
        return self.lowered.run(args)


def _fit(t: torch.Tensor, ti: TensorInput, env: dict, device: str) -> torch.Tensor:
    """``t`` on the graph's device in the layout the graph was compiled for (copied only when its
    device or strides differ: e.g. CPU scalars and RNG seeds that CUDA graphs take as inputs);
    complex and unsigned arguments as the buffers that carry them."""
    if ti.carrier is not None:
        t = ti.carrier.to_ir(t)
    if t.device.type != device:
        t = t.to(device)
    if ti.contiguous:
        return t if t.is_contiguous() else t.contiguous()
    return restrided(t, [evaluate(s, env) for s in ti.strides])


def _value(leaf: OutputLeaf, outs, args, fitted: dict, env):
    if leaf.kind is LeafKind.GRAPH:
        return outs[leaf.value] if leaf.carrier is None else leaf.carrier.from_ir(outs[leaf.value])
    if leaf.kind is LeafKind.ARG:
        return args[leaf.value]
    if leaf.kind is LeafKind.ARG_VIEW:
        position, layout = leaf.value
        return strided_view(fitted[position], layout, env)
    if leaf.kind is LeafKind.SIZE:
        return evaluate(leaf.value, env)
    return leaf.value


def lower_and_compile(gm: torch.fx.GraphModule, backend: Backend, name: str,
                      tuner: Tuner | None = None) -> LoweredGraph:
    """Lower ``gm`` (nodes carrying traced values) and compile it for ``backend``, with kernel
    configs chosen by ``tuner`` (None: the backend's heuristics; see ``pipeline.compile_graph``)."""
    t0 = time.perf_counter()
    program = FxLowering(gm).run()
    t1 = time.perf_counter()
    with unset_fake_temporarily():  # a sweep runs real kernels on real tensors, even mid-trace
        compiled = compile_graph(program.graph, backend, name, tuner=tuner)
    t2 = time.perf_counter()
    sources = compiled.artifact.sources
    stats = GraphStats(name, backend.name, len(gm.graph.nodes), (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                       sources[0] if sources else None, program)
    return LoweredGraph(program, compiled, stats)
