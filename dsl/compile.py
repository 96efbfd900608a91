"""``ln.compile``: DSL outputs -> a callable on torch tensors, specialized per stride pattern."""
from __future__ import annotations

from typing import Sequence

import torch

from ..backends import registry
from ..backends.base import Backend
from ..ir.index import Index, bare_symbol, contiguous_strides
from ..ir.nodes import Layout
from ..pipeline import compile_graph
from ..runtime.compiled import CompiledGraph, InputError, check_count, check_tensor
from .build import GraphBuilder
from .nonempty import requirements
from .tensor import PlaceholderSrc, Tensor, placeholders_in_creation_order


class CompiledFunction:
    """The callable ``ln.compile`` returns. A new input stride pattern compiles once more."""

    def __init__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor], backend: Backend, single: bool,
                 name: str):
        self.outputs = list(outputs)
        self.inputs = list(inputs)
        self.input_names = [t.src.name for t in self.inputs]
        self.backend = backend
        self.single = single
        self.name = name
        self.specializations: dict[tuple, CompiledGraph] = {}
        self.nonempty = requirements(self.outputs)  # max/min/argmax/argmin: no empty dimension

    def __call__(self, *args):
        check_count(self.name, self.input_names, args, "tensors")
        key = tuple(_stride_key(t, a) for t, a in zip(self.inputs, args))
        if self.nonempty:
            env = _symbol_values(self.inputs, args)
            for need in self.nonempty:
                need.check(env)
        compiled = self.specializations.get(key)
        if compiled is None:
            compiled = self.compile_for(args)
            self.specializations[key] = compiled
        out = compiled(*args)
        return out[0] if self.single else out

    def compile_for(self, args) -> CompiledGraph:
        """Compile for the layouts of ``args``."""
        return compile_graph(self.graph(*args), self.backend, self.name)

    def graph(self, *args):
        """The IR graph for example ``args`` (for inspection)."""
        layouts = {t.src.name: _layout(t, a) for t, a in zip(self.inputs, args)}
        return GraphBuilder(layouts).build(self.inputs, self.outputs)


def _symbol_values(inputs: Sequence[Tensor], args) -> dict[str, int]:
    """Each symbolic size named by a placeholder's dimension, bound from ``args``' shapes."""
    return {name: a.shape[d] for t, a in zip(inputs, args) for d, s in enumerate(t.shape)
            if (name := bare_symbol(s)) is not None}


def _stride_key(t: Tensor, a) -> tuple:
    check_tensor(t.src.name, a, t.dtype.torch, t.ndim)
    if a.is_contiguous():
        return ("contiguous",)
    return tuple(a.stride()) + tuple(a.shape)


def _layout(t: Tensor, a: torch.Tensor) -> Layout:
    """Contiguous inputs keep symbolic strides; others are specialized to their exact strides."""
    if a.is_contiguous():
        return Layout(t.shape, contiguous_strides(t.shape))
    _check_overlap(t.src.name, a)
    return Layout(t.shape, tuple(Index.of(s) for s in a.stride()))  # offsets count from data_ptr()


def _check_overlap(name: str, a: torch.Tensor) -> None:
    dims = sorted((s, n) for s, n in zip(a.stride(), a.shape) if n > 1 and s != 0)
    extent = 1
    for s, n in dims:
        if s < 0:
            raise InputError(f"argument {name!r} has a negative stride {a.stride()}; pass x.contiguous()")
        if s < extent:
            raise InputError(f"argument {name!r} has overlapping strides {a.stride()} for shape "
                             f"{tuple(a.shape)}; pass x.contiguous()")
        extent = s * n


def compile(outputs, inputs: Sequence[Tensor] | None = None, backend: str | Backend = "cpp",  # noqa: A001
            name: str = "dsl"):
    """Compile DSL ``outputs`` (one tensor, or a list/tuple) into a callable on torch tensors.

    ``inputs`` defaults to the placeholders the outputs use, in creation order; the callable takes
    tensors positionally in that order and returns one tensor or a tuple, like ``outputs``.
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"ln.compile outputs must be DSL tensors, got {type(o).__name__}")
    if inputs is None:
        inputs = placeholders_in_creation_order(outs)
    for t in inputs:
        if not isinstance(t, Tensor) or not isinstance(t.src, PlaceholderSrc):
            raise TypeError(f"ln.compile inputs must be placeholders, got {t!r}")
    return CompiledFunction(outs, list(inputs), registry.resolve(backend), single, name)
