"""Compiling an FX graph (make_fx, Dynamo/AOTAutograd) or an ExportedProgram into a callable
(``loopnest.compile_fx`` is this with options made from strings)."""
from __future__ import annotations

import operator
from typing import Sequence

import torch
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode
from torch._ops import HigherOrderOperator, OpOverload
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.experimental.proxy_tensor import make_fx

from ..runtime.compiled import InputError
from .decompositions import decomposition_table, has_decomposition, holds_backward
from .dynamo import AtenCompiler
from .options import CompileOptions
from .runner import LoweredGraph


def compile_fx(gm, example_inputs: Sequence | None, options: CompileOptions):
    """Compile ``gm`` with loopnest; returns a callable with ``gm``'s calling convention.

    ``gm``: an ATen graph (``make_fx``, AOTAutograd), a torch-level Dynamo graph (run through
    AOTAutograd here, so it trains), or an ``ExportedProgram`` (parameters and buffers bound from
    the program; the callable takes the user inputs).
    """
    if isinstance(gm, ExportedProgram):
        return _compile_exported(gm, options)
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"compile_fx takes a torch.fx.GraphModule or an ExportedProgram, got {type(gm).__name__}")
    if example_inputs is None:
        raise TypeError("compile_fx needs example_inputs for a GraphModule")
    codegen = gm.graph._codegen
    flat = list(codegen.process_inputs(*example_inputs))
    compiler = AtenCompiler(options, options.backend_for(flat))
    if not is_aten_graph(gm):
        return _compile_torch_level(gm, flat, compiler)
    if needs_retrace(gm):
        gm = retrace(gm, flat)
    return FxCallable(compiler.compile(gm, "fx"), codegen)


class FxCallable:
    """A compiled FX graph called like the GraphModule (pytree inputs/outputs included)."""

    def __init__(self, lowered: LoweredGraph, codegen):
        self.lowered = lowered
        self.codegen = codegen

    def __call__(self, *args):
        out = self.lowered.run(list(self.codegen.process_inputs(*args)))
        return self.codegen.process_outputs(out)


def _compile_torch_level(gm: torch.fx.GraphModule, flat: list, compiler: AtenCompiler):
    """A torch-level graph through AOTAutograd, which takes a flat argument list and returns a
    flat tuple: Dynamo's graphs are so already; another (``symbolic_trace``, one tensor or a
    nested structure returned, pytree inputs) is compiled with its output flattened and called
    with its own convention."""
    out_node = gm.graph.output_node()
    leaves, spec = pytree.tree_flatten(out_node.args[0])
    if type(gm.graph._codegen) is torch.fx.graph.CodeGen and isinstance(out_node.args[0], tuple) \
            and spec == pytree.tree_flatten(tuple(leaves))[1]:
        return compiler.aot(gm, flat)  # already AOTAutograd's convention: Dynamo's graphs
    flat_gm = torch.fx.GraphModule(gm, _flat_graph(gm, leaves))
    compiled = compiler.aot(flat_gm, flat)
    codegen = gm.graph._codegen

    def call(*args):
        return codegen.process_outputs(pytree.tree_unflatten(list(compiled(*codegen.process_inputs(*args))), spec))
    return call


def _flat_graph(gm: torch.fx.GraphModule, leaves: list) -> torch.fx.Graph:
    """``gm``'s graph taking flat placeholders and returning ``tuple(leaves)``."""
    graph = torch.fx.Graph()
    remap: dict = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            graph.output(tuple(remap[leaf] if isinstance(leaf, torch.fx.Node) else leaf for leaf in leaves))
        else:
            remap[node] = graph.node_copy(node, lambda n: remap[n])
    return graph


def is_aten_graph(gm: torch.fx.GraphModule) -> bool:
    """True if every call is an ATen/custom op overload or size arithmetic (no torch-level calls)."""
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_method"):
            return False
        if node.op == "call_function":
            t = node.target
            if isinstance(t, (OpOverload, HigherOrderOperator)) or t is operator.getitem:
                continue
            if getattr(t, "__module__", None) in ("_operator", "operator", "torch.fx.experimental.sym_node") \
                    and not isinstance(node.meta.get("val"), torch.Tensor):
                continue
            return False
    return True


def needs_retrace(gm: torch.fx.GraphModule) -> bool:
    """True if some node lacks a traced value, mutates, or has a decomposition to apply."""
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function") and "val" not in node.meta:
            return True
        if node.op == "call_function" and isinstance(node.target, OpOverload):
            if has_decomposition(node.target) or node.target._schema.is_mutable:
                return True
    return False


def retrace(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
    """Re-trace ``gm`` functionalized, with the decomposition table, recording traced values;
    a graph traced with symbolic sizes is re-traced symbolically (it stays dynamic)."""
    fn = torch.func.functionalize(torch.fx.Interpreter(gm).run, remove="mutations")
    table = decomposition_table(training=holds_backward(gm))
    fake_mode = detect_fake_mode(example_inputs)
    if fake_mode is not None:
        with fake_mode:
            return make_fx(fn, decomposition_table=table, tracing_mode="real")(*example_inputs)
    mode = "symbolic" if _has_symbolic_sizes(gm) else "fake"
    # a make_fx graph holds its parameters as real tensor constants, which decompositions (group
    # norm's reshape of its weight) then meet inside the fake trace
    return make_fx(fn, decomposition_table=table, tracing_mode=mode, _allow_non_fake_inputs=True)(*example_inputs)


def _has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape):
            return True
    return False


# -- ExportedProgram ----------------------------------------------------------------------------------
def _compile_exported(ep: ExportedProgram, options: CompileOptions) -> "ExportedCallable":
    ep = ep.run_decompositions(decomposition_table(training=holds_backward(ep.graph_module)))
    bound = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            bound.append(None)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = ep.state_dict.get(spec.target)
            bound.append(value if value is not None else ep.constants[spec.target])
        else:
            raise TypeError(f"compile_fx: exported input {spec.arg} of kind {spec.kind.name} is not supported")
    tensors = [b for b in bound if isinstance(b, torch.Tensor)]
    user = [n.meta.get("val") for n, b in zip(ep.graph_module.graph.find_nodes(op="placeholder"), bound) if b is None]
    compiler = AtenCompiler(options, options.backend_for(tensors + user))
    return ExportedCallable(ep, compiler.compile(ep.graph_module, "export"), bound)


class ExportedCallable:
    """An exported program compiled by loopnest: takes the user inputs, returns the user outputs;
    buffer mutations (e.g. BatchNorm running stats) are written back to the bound buffers."""

    def __init__(self, ep: ExportedProgram, lowered: LoweredGraph, bound: list):
        self.lowered = lowered
        self.bound = bound
        self.in_spec = ep.call_spec.in_spec
        self.out_spec = ep.call_spec.out_spec
        sig = ep.graph_signature
        buffers = {spec.target: b for spec, b in zip(sig.input_specs, bound) if spec.kind is InputKind.BUFFER}
        user_positions = [k for k, b in enumerate(bound) if b is None]
        self.output_plan = []  # per graph output: ("user", None) | ("write", tensor) | ("user_input", k)
        for spec in sig.output_specs:
            if spec.kind is OutputKind.BUFFER_MUTATION:
                self.output_plan.append(("write", buffers[spec.target]))
            elif spec.kind is OutputKind.USER_INPUT_MUTATION:
                names = [s.arg.name for s in sig.input_specs]
                self.output_plan.append(("user_input", user_positions.index(names.index(spec.target))))
            else:
                self.output_plan.append(("user", None))

    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if self.in_spec is not None and spec != self.in_spec:
            raise InputError(f"compiled exported program: inputs have structure {spec}, expected {self.in_spec}")
        it = iter(flat)
        full = [next(it) if b is None else b for b in self.bound]
        outs = self.lowered.run(full)
        user = []
        for (kind, target), value in zip(self.output_plan, outs):
            if kind == "write":
                target.copy_(value)
            elif kind == "user_input":
                flat[target].copy_(value)
            else:
                user.append(value)
        return pytree.tree_unflatten(user, self.out_spec) if self.out_spec is not None else tuple(user)
