"""FX graph of ATen ops -> DSL tensors -> ``ir.Graph``, plus what the runtime needs to call it.

Each FX node is lowered by its rule from ``registry.LOWERINGS`` (or becomes an Extern call), the
result is checked against the node's traced shape and cast to its traced dtype, and the graph's
outputs are built by ``dsl.build.GraphBuilder``. ``LoweredProgram`` records how the FX calling
convention maps onto the compiled graph: which arguments are tensors, where each symbolic size
comes from, which outputs are passed-through inputs, SymInts or constants, and which inputs are
mutated (``copy_`` into an input).
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._ops import HigherOrderOperator, OpOverload

from ..core.trees import map_leaves
from ..dsl import functions as dslf
from ..dsl.build import GraphBuilder, strided_layout
from ..dsl.tensor import PlaceholderSrc, Tensor, placeholder, view_root
from ..ir import dtypes as dt
from ..ir.index import Index, bare_symbol, contiguous_strides, is_nonneg, symbols_in
from ..ir.nodes import Graph, Layout, domain_vars
from . import extern as ext
from . import row_order, symbolic, tensors
from .carriers import Carrier, carrier_of
from .registry import LOWERINGS, LoweringContext, LoweringError, Unsupported, input_name
from .symbolic import shape_of, strides_of, to_index
from .tensors import in_layout

aten = torch.ops.aten
_IGNORED = {aten._assert_scalar.default, aten.sym_constrain_range_for_size.default,
            aten._assert_tensor_metadata.default, aten.sym_constrain_range.default}


@dataclass
class Fallback:
    """An ATen op called through ATen instead of compiled, and why."""

    op: str
    reason: str
    node: str


@dataclass
class TensorInput:
    """FX argument ``position`` is a tensor, compiled with ``layout``."""

    position: int
    tensor: Tensor
    contiguous: bool
    strides: tuple[Index, ...]
    carrier: Carrier | None = None  # a complex or unsigned argument, held as ``carrier.ir_dtype``


@dataclass
class LoweredProgram:
    """The IR graph of an FX graph and the map between the two calling conventions."""

    graph: Graph
    num_args: int
    tensor_inputs: list[TensorInput]
    constants: list[torch.Tensor]             # get_attr tensors, bound after the arguments
    sym_sources: dict[str, tuple[int, int | None]]  # symbol -> (argument, dim or None for a SymInt)
    carriers: list[str]                       # symbols passed as stride-0 "size carrier" tensors
    outputs: Any                              # FX output tree with ``OutputLeaf`` leaves
    mutations: list[tuple[int, "OutputLeaf"]]  # (argument, value) pairs: arg.copy_(value)
    fallbacks: list[Fallback] = field(default_factory=list)


class FxLowering:
    """Lowers one FX GraphModule whose nodes carry traced values (``meta["val"]``)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.env: dict[torch.fx.Node, Any] = {}
        self.tensor_inputs: list[TensorInput] = []
        self.constants: list[tuple[Tensor, torch.Tensor]] = []
        self.dim_sources: dict[str, tuple[int, int]] = {}       # symbol -> (argument, dim)
        self.scalar_sources: dict[str, tuple[int, None]] = {}  # symbol -> (SymInt argument, None)
        self.fallbacks: list[Fallback] = []
        self.mutations: list[tuple[int, Tensor]] = []
        self.carried: dict[int, Carrier] = {}  # DSL tensor id -> how it carries a complex/unsigned value
        self.num_args = 0

    # -- driver ---------------------------------------------------------------------------------
    def run(self) -> LoweredProgram:
        """Lower every node and build the IR graph."""
        output = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "get_attr":
                self.env[node] = self._get_attr(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                output = node.args[0]
            else:
                raise LoweringError(f"{node.format_node()}: {node.op} nodes are not ATen; trace the "
                                    f"graph with make_fx or AOTAutograd first")
        return self._build(output)

    def _placeholder(self, node: torch.fx.Node):
        position = self.num_args
        self.num_args += 1
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            shape = shape_of(val)
            carrier = carrier_of(val)
            contiguous = val.is_contiguous()
            if carrier is None:
                t = placeholder(input_name(node), shape, dt.to_dtype(val.dtype))
                strides = contiguous_strides(shape) if contiguous else strides_of(val)
            else:
                t = placeholder(input_name(node), carrier.shape(shape), carrier.ir_dtype)
                strides = contiguous_strides(t.shape) if contiguous else carrier.strides(strides_of(val))
                self.carried[t.id] = carrier
            self.tensor_inputs.append(TensorInput(position, t, contiguous, strides, carrier))
            for d, s in enumerate(shape):
                name = bare_symbol(s)
                if name is not None:
                    self.dim_sources.setdefault(name, (position, d))
            return t
        if isinstance(val, torch.SymInt):
            index = to_index(val)
            name = bare_symbol(index)
            if name is not None:
                self.scalar_sources.setdefault(name, (position, None))
            return index
        if val is None or isinstance(val, (bool, int, float)):
            return val
        raise LoweringError(f"{node.format_node()}: unsupported graph input {type(val).__name__}")

    def _get_attr(self, node: torch.fx.Node):
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            raise LoweringError(f"{node.format_node()}: attribute of type {type(value).__name__}")
        carrier = carrier_of(value)
        if carrier is not None:
            value = carrier.to_ir(value).contiguous()
        t = placeholder(f"const_{len(self.constants)}", tuple(value.shape), dt.to_dtype(value.dtype))
        self.constants.append((t, value))
        if carrier is not None:
            self.carried[t.id] = carrier
        return t

    # -- call_function ---------------------------------------------------------------------------
    def _call(self, node: torch.fx.Node):
        target = node.target
        if target is operator.getitem:
            return self._arg(node.args[0])[node.args[1]]
        if target in _IGNORED:
            return None
        val = node.meta.get("val")
        if not isinstance(target, (OpOverload, HigherOrderOperator)) or _is_scalar(val):
            return self._scalar(node, val)
        args, kwargs = self._arg(node.args), self._arg(dict(node.kwargs))
        ctx = LoweringContext(node)
        if isinstance(target, HigherOrderOperator):
            reason = f"higher-order op {target.name()} (e.g. a mutating custom op): called as is"
            return self._extern(ctx, args, kwargs, reason)
        if target is aten.copy_.default:
            return self._copy_into(node, *args)
        carrier = _carrier_in(node)
        if carrier is not None:
            return self._extern(ctx, args, kwargs, carrier.reason)
        rule = LOWERINGS.get(target)
        if rule is None:
            order = row_order.find(node)
            if order is not None:  # the product of the source's rows as they lie, then a view
                args = list(args)
                args[order.lhs_position] = order.lhs(self.env[order.source])
                return order.result(self._extern(ctx, tuple(args), kwargs, ext.default_reason(target)))
            return self._extern(ctx, args, kwargs, ext.default_reason(target))
        try:
            result = rule(ctx, *args, **kwargs)
        except Unsupported as e:
            return self._extern(ctx, args, kwargs, str(e))
        return _conform(node, result, val)

    def _scalar(self, node, val):
        """Size arithmetic (``sym_size``, ``s0 * s1``, ...): the traced value says the result."""
        if isinstance(val, torch.SymInt) or (isinstance(val, int) and not isinstance(val, bool)):
            return to_index(val)
        if isinstance(val, (bool, float)):
            return val
        if isinstance(val, torch.SymFloat):  # a mean over a dynamic batch divides by float(s0)
            size = symbolic.float_size(val)
            if size is not None:
                return tensors.cast(tensors.size_value(size), dt.float64)
            operands = self._arg(node.args)
            if node.target in _FLOAT_ARITHMETIC:  # a batch norm's unbiased variance: numel / C
                operands = [tensors.cast(tensors.size_value(a), dt.float64) if isinstance(a, Index) else a
                            for a in operands]
                if any(isinstance(a, Tensor) for a in operands):
                    return node.target(*operands)  # a 0-d float64 tensor, as Python computes SymFloats in double
        raise LoweringError(f"{node.format_node()}: {node.target} is not an ATen op and its value "
                            f"{val!r} is not a size")

    def _extern(self, ctx: LoweringContext, args, kwargs, reason: str):
        self.fallbacks.append(Fallback(str(ctx.node.target), reason, ctx.node.name))
        result = ext.lower_extern(ctx, args, kwargs, reason)
        for out, val in zip(result if isinstance(result, tuple) else (result,),
                            ctx.val if isinstance(ctx.val, (tuple, list)) else (ctx.val,)):
            if isinstance(out, Tensor) and carrier_of(val) is not None:
                self.carried[out.id] = carrier_of(val)
        return result

    def _copy_into(self, node, dst, src, non_blocking=False):
        """``dst.copy_(src)`` on a graph input (functionalized input mutation)."""
        if not isinstance(dst, Tensor) or not isinstance(dst.src, PlaceholderSrc):
            raise LoweringError(f"{node.format_node()}: copy_ into a non-input tensor")
        carrier = self.carried.get(dst.id)
        src_carrier = self.carried.get(src.id) if isinstance(src, Tensor) else None
        if carrier is not None and getattr(src_carrier, "dtype", None) != carrier.dtype:
            raise LoweringError(f"{node.format_node()}: copy_ of a {getattr(src, 'dtype', type(src).__name__)} "
                                f"value into a {carrier.dtype} input is not supported; copy a "
                                f"{carrier.dtype} tensor into it")
        value = dslf.broadcast_to(dslf.cast(src, dst.dtype), dst.shape) if isinstance(src, Tensor) else src
        if src_carrier is not None:
            self.carried[value.id] = src_carrier
        position = next(i.position for i in self.tensor_inputs if i.tensor is dst)
        self.mutations.append((position, value))
        return value

    def _arg(self, tree):
        """An FX argument tree with nodes replaced by their lowered values, SymInts by Index."""
        def leaf(a):
            if isinstance(a, torch.fx.Node):
                return self.env[a]
            return to_index(a) if isinstance(a, torch.SymInt) else a
        return map_leaves(leaf, tree)

    def _laid_out(self, a):
        """An FX output leaf lowered, a computed tensor in the layout eager gives it
        (``tensors.in_layout``)."""
        value = self._arg(a)
        if isinstance(a, torch.fx.Node) and isinstance(value, Tensor):
            return in_layout(value, a.meta.get("val"))
        return value

    # -- building -----------------------------------------------------------------------------------
    def _build(self, output) -> LoweredProgram:
        graph_outputs: list[Tensor] = []
        slot: dict[int, int] = {}
        inputs = {ti.tensor.id: ti.position for ti in self.tensor_inputs}

        def leaf(v):
            if isinstance(v, Tensor):
                if v.id in inputs:
                    return OutputLeaf(LeafKind.ARG, inputs[v.id])
                view = self._input_view(v)
                if view is not None:
                    return OutputLeaf(LeafKind.ARG_VIEW, view)
                if v.id not in slot:
                    slot[v.id] = len(graph_outputs)
                    graph_outputs.append(v)
                return OutputLeaf(LeafKind.GRAPH, slot[v.id], self.carried.get(v.id))
            if isinstance(v, Index):
                c = v.as_int()
                return OutputLeaf(LeafKind.VALUE, c) if c is not None else OutputLeaf(LeafKind.SIZE, v)
            return OutputLeaf(LeafKind.VALUE, v)

        plan = map_leaves(leaf, map_leaves(self._laid_out, output))
        mutations = [(pos, leaf(v)) for pos, v in self.mutations]
        sources, carriers = self._symbol_sources()
        carrier_tensors = [placeholder(f"sym_{name}", (name,), dt.float32) for name in carriers]
        layouts = {ti.tensor.src.name: Layout(ti.tensor.shape, ti.strides) for ti in self.tensor_inputs}
        for t, _ in self.constants:
            layouts[t.src.name] = Layout.contiguous(t.shape)
        for t in carrier_tensors:
            layouts[t.src.name] = Layout(t.shape, (Index.of(0),))
        dsl_inputs = ([ti.tensor for ti in self.tensor_inputs] + [t for t, _ in self.constants]
                      + carrier_tensors)
        graph = GraphBuilder(layouts).build(dsl_inputs, graph_outputs)
        return LoweredProgram(graph, self.num_args, self.tensor_inputs, [c for _, c in self.constants],
                              sources, carriers, plan, mutations, self.fallbacks)

    def _input_view(self, t: Tensor) -> tuple[int, Layout] | None:
        """(argument, layout) if ``t`` is a strided view of a tensor argument: returned as a view of
        the argument at run time instead of a copy (e.g. transposed weights saved for backward)."""
        root, index = view_root(t)
        ti = next((ti for ti in self.tensor_inputs if ti.tensor is root), None)
        if ti is None or root is t or ti.carrier is not None:
            return None
        layout = strided_layout(t.shape, domain_vars(t.shape, "i"), Layout(root.shape, ti.strides).flat_index(index))
        if layout is None or any(not is_nonneg(s) for s in layout.strides + (layout.offset,)):
            return None
        return ti.position, layout

    def _symbol_sources(self) -> tuple[dict, list[str]]:
        """Where each symbol's value comes from; symbols known only from SymInt arguments get a
        size-carrier input so the compiled graph can bind them."""
        in_dims = self.dim_sources
        scalars = {k: v for k, v in self.scalar_sources.items() if k not in in_dims}
        for ti in self.tensor_inputs:
            for s in ti.tensor.shape + ti.strides:
                missing = symbols_in(s) - set(in_dims) - set(scalars)
                if missing:
                    raise LoweringError(f"input {ti.tensor.src.name} has size {s}: cannot bind "
                                        f"{', '.join(sorted(missing))} from the graph's arguments")
        return {**scalars, **in_dims}, sorted(scalars)


class LeafKind(enum.StrEnum):
    """What an output of the FX graph is at run time."""

    GRAPH = "graph"        # compiled output k
    ARG = "arg"            # an input passed through
    ARG_VIEW = "arg_view"  # a strided view of an input: (argument, Layout)
    SIZE = "size"          # an Index evaluated at run time
    VALUE = "value"        # a constant


@dataclass(frozen=True)
class OutputLeaf:
    """One output value of the FX graph (see ``LeafKind``)."""

    kind: LeafKind
    value: Any
    carrier: Carrier | None = None  # a GRAPH output carrying a complex/unsigned value


def _carrier_in(node: torch.fx.Node) -> Carrier | None:
    """The carrier of the first complex/unsigned tensor among the node's traced output and
    arguments (None if it has none: loopnest's rules can lower it)."""
    val = node.meta.get("val")
    values = list(val) if isinstance(val, (tuple, list)) else [val]
    values += [a.meta.get("val") for a in node.all_input_nodes]
    return next((c for c in map(carrier_of, values) if c is not None), None)


_FLOAT_ARITHMETIC = frozenset({operator.truediv, operator.mul, operator.add, operator.sub, operator.neg})  # of SymFloats


def _is_scalar(val) -> bool:
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def _conform(node: torch.fx.Node, result, val):
    """Check a rule's result against the traced value; cast to the traced dtype."""
    if isinstance(result, Tensor) and isinstance(val, torch.Tensor):
        return _conform_tensor(node, result, val)
    if isinstance(result, tuple) and isinstance(val, (tuple, list)):
        return tuple(_conform_tensor(node, r, v) if isinstance(r, Tensor) else r for r, v in zip(result, val))
    return result


def _conform_tensor(node: torch.fx.Node, t: Tensor, val: torch.Tensor) -> Tensor:
    shape = shape_of(val)
    if tuple(t.shape) != shape:
        raise LoweringError(f"{node.format_node()}: the rule for {node.target} produced shape "
                            f"{tuple(map(str, t.shape))}, the traced value has {tuple(map(str, shape))}")
    dtype = dt.to_dtype(val.dtype)
    return t if t.dtype == dtype else dslf.cast(t, dtype)
