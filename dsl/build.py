"""Turn a DAG of DSL tensors into an ``ir.Graph``: one node per op, views as index remaps."""
from __future__ import annotations

from typing import Sequence

from ..core.trees import map_leaves
from ..ir import dtypes as dt
from ..ir.expr import Apply, Const, Expr, IndexValue, Load
from ..ir.index import Index, Indirect, Sym, Var
from ..ir.nodes import (Buffer, BufferKind, BufferRef, Extern, Graph, Layout, OutputView, Pointwise,
                        Reduction, domain_vars, interleave)
from ..ir.ops import Op
from .tensor import (ExternSrc, GatherSrc, PlaceholderSrc, PointwiseSrc, ReductionSrc, Tensor, ViewSrc,
                     iter_tensors, view_root)


class GraphBuilder:
    """Builds one IR graph from DSL outputs, given a layout for every placeholder."""

    def __init__(self, input_layouts: dict[str, Layout]):
        self.graph = Graph()
        self.input_layouts = input_layouts
        self.buffer_of: dict[int, str] = {}   # tensor id -> buffer name
        self.reductions: dict[int, Reduction] = {}
        self.externs: dict[int, Extern] = {}
        self.counter = 0

    def build(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> Graph:
        """Create buffers and nodes for everything ``outputs`` depends on."""
        for t in inputs:
            self._placeholder(t)
        for t in iter_tensors(outputs):
            if isinstance(t.src, PlaceholderSrc) and t.id not in self.buffer_of:
                raise ValueError(f"placeholder {t.src.name!r} is used by the outputs but is not "
                                 f"among the compiled inputs")
            if isinstance(t.src, PointwiseSrc):
                self._pointwise(t)
            elif isinstance(t.src, ReductionSrc):
                self._reduction(t)
            elif isinstance(t.src, ExternSrc):
                self._extern(t)
        for t in outputs:
            self.graph.outputs.append(self._output(t))
        return self.graph

    def _name(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def _placeholder(self, t: Tensor) -> None:
        name = t.src.name
        if name in self.graph.buffers:
            raise ValueError(f"two placeholders are named {name!r}")
        self.graph.add_buffer(Buffer(name, t.dtype, self.input_layouts[name], BufferKind.INPUT))
        self.graph.inputs.append(name)
        self.buffer_of[t.id] = name

    def _new_buffer(self, stem: str, t: Tensor) -> str:
        name = self._name(stem)
        self.graph.add_buffer(Buffer(name, t.dtype, Layout.contiguous(t.shape)))
        return name

    def _pointwise(self, t: Tensor) -> None:
        src: PointwiseSrc = t.src
        idx = domain_vars(t.shape, "i")
        compute = [self.load(a, idx) if isinstance(a, Tensor) else _scalar(a, k, t, src)
                   for k, a in enumerate(src.args)]
        out = self._new_buffer("buf", t)
        body = Apply(src.op, tuple(compute), t.dtype)
        self.graph.nodes.append(Pointwise(f"{src.op.name.lower()}_{self.counter}", out, t.shape, body))
        self.buffer_of[t.id] = out

    def _reduction(self, t: Tensor) -> None:
        src: ReductionSrc = t.src
        node = self.reductions.get(src.node_id)
        if node is None:
            arg = src.arg
            kept = tuple(s for k, s in enumerate(arg.shape) if k not in src.axes)
            rsizes = tuple(arg.shape[k] for k in src.axes)
            ivars, rvars = domain_vars(kept, "i"), domain_vars(rsizes, "r")
            body = self.load(arg, interleave(ivars, rvars, src.axes))
            outs = tuple(self._new_buffer("buf", t) for _ in range(src.op.num_outputs))
            node = Reduction(f"{src.op.value}_{self.counter}", outs, kept, rsizes, src.op, body, src.axes)
            self.graph.nodes.append(node)
            self.reductions[src.node_id] = node
        self.buffer_of[t.id] = node.outs[src.output]

    def _extern(self, t: Tensor) -> None:
        call = t.src.call
        node = self.externs.get(call.node_id)
        if node is None:
            args = map_leaves(self._extern_arg, call.args)
            kwargs = map_leaves(self._extern_arg, call.kwargs)
            outs = []
            for shape, dtype, strides in call.outputs:
                name = self._name("ext")
                layout = Layout.contiguous(shape) if strides is None else Layout(
                    tuple(shape), tuple(Index.of(x) for x in strides))
                self.graph.add_buffer(Buffer(name, dtype, layout))
                outs.append(name)
            short = call.target.split(".")[1] if call.target.startswith("aten.") else call.target
            node = Extern(f"{short}_{self.counter}", tuple(outs), call.target, call.fn, tuple(args), kwargs,
                          call.reason)
            self.graph.nodes.append(node)
            self.externs[call.node_id] = node
        self.buffer_of[t.id] = node.outs[t.src.output]

    def _extern_arg(self, a):
        if not isinstance(a, Tensor):
            return a
        name, layout = self.realize(a)
        base = self.graph.buffers[name].layout
        return BufferRef(name, None if layout == base else layout)

    def realize(self, t: Tensor, allow_input: bool = True) -> tuple[str, Layout]:
        """A buffer holding ``t`` and the layout to view it with (strided views need no copy)."""
        root, index = view_root(t)
        name = self.buffer_of.get(root.id)
        if name is not None and (allow_input or self.graph.buffers[name].kind is not BufferKind.INPUT):
            base = self.graph.buffers[name].layout
            if t is root:
                return name, base
            layout = strided_layout(t.shape, domain_vars(t.shape, "i"), base.flat_index(index))
            if layout is not None:
                return name, layout
        idx = domain_vars(t.shape, "i")
        name = self._new_buffer("copy", t)
        self.graph.nodes.append(Pointwise(f"copy_{self.counter}", name, t.shape, self.load(t, idx)))
        return name, self.graph.buffers[name].layout

    def load(self, t: Tensor, index: tuple[Index, ...]) -> Expr:
        """The scalar expression reading DSL tensor ``t`` at ``index``."""
        src = t.src
        if isinstance(src, ViewSrc):
            return self.load(src.base, src.remap(index))
        if isinstance(src, GatherSrc):
            position = self.load(src.index, index)
            if position.dtype != dt.int64:
                position = Apply(Op.CAST, (position,), dt.int64)
            base_index = list(index)
            base_index[src.axis] = Index.of(Indirect(position, src.base.shape[src.axis], src.check))
            return self.load(src.base, tuple(base_index))
        return Load(self.buffer_of[t.id], index, t.dtype)

    def _output(self, t: Tensor) -> OutputView:
        """Outputs never alias inputs; strided views of computed buffers are returned as views."""
        name, layout = self.realize(t, allow_input=False)
        self.graph.buffers[name].kind = BufferKind.OUTPUT
        return OutputView(name, layout)


def _scalar(value, position: int, t: Tensor, src: PointwiseSrc) -> Expr:
    """A Python scalar operand as a constant of the dtype the op computes in."""
    if isinstance(value, Index):
        return IndexValue(value, dt.int64)
    if src.op is Op.WHERE:
        return Const(value, dt.bool_ if position == 0 else t.dtype)
    tensors = [a for a in src.args if isinstance(a, Tensor)]
    return Const(value, tensors[0].dtype if tensors else t.dtype)


def strided_layout(shape, variables, flat: Index) -> Layout | None:
    """The layout whose offsets are ``flat`` over ``variables``, if ``flat`` is linear in them."""
    strides = {v: Index.of(0) for v in variables}
    offset = Index.of(0)
    for m, c in flat.terms:
        vs = [a for a in m if isinstance(a, Var)]
        if any(not isinstance(a, (Var, Sym)) for a in m) or len(vs) > 1:
            return None
        term = Index((((tuple(a for a in m if isinstance(a, Sym))), c),)) if len(m) > len(vs) else Index.of(c)
        if vs:
            key = Index.of(vs[0])
            if key not in strides:
                return None
            strides[key] = strides[key] + term
        else:
            offset = offset + term
    offset = offset + flat.const
    return Layout(tuple(shape), tuple(strides[v] for v in variables), offset)
