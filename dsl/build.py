"""Turn a DAG of DSL tensors into an ``ir.Graph``: one node per op, views as index remaps."""
from __future__ import annotations

from typing import Sequence

from ..ir import dtypes as dt
from ..ir.expr import Apply, Const, Expr, IndexValue, Load
from ..ir.index import Index, Indirect
from ..ir.nodes import (Buffer, BufferKind, Graph, Layout, OutputView, Pointwise, Reduction, domain_vars,
                        interleave)
from ..ir.ops import Op
from .tensor import GatherSrc, PlaceholderSrc, PointwiseSrc, ReductionSrc, Tensor, ViewSrc, iter_tensors


class GraphBuilder:
    """Builds one IR graph from DSL outputs, given a layout for every placeholder."""

    def __init__(self, input_layouts: dict[str, Layout]):
        self.graph = Graph()
        self.input_layouts = input_layouts
        self.buffer_of: dict[int, str] = {}   # tensor id -> buffer name
        self.reductions: dict[int, Reduction] = {}
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
        layout = self.input_layouts[name]
        self.graph.add_buffer(Buffer(name, t.dtype, layout, BufferKind.INPUT))
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
        if src.op is Op.CAST:
            body = Apply(Op.CAST, (compute[0],), t.dtype)
        else:
            body = Apply(src.op, tuple(compute), t.dtype)
        out = self._new_buffer("buf", t)
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
            base_index[src.axis] = Index.of(Indirect(position, src.base.shape[src.axis]))
            return self.load(src.base, tuple(base_index))
        return Load(self.buffer_of[t.id], index, t.dtype)

    def _output(self, t: Tensor) -> OutputView:
        name = self.buffer_of.get(t.id)
        buf = self.graph.buffers.get(name) if name else None
        if buf is None or buf.kind is BufferKind.INPUT:
            # views and placeholders are copied: outputs never alias inputs or other buffers
            idx = domain_vars(t.shape, "i")
            name = self._new_buffer("out", t)
            self.graph.nodes.append(Pointwise(f"copy_{self.counter}", name, t.shape, self.load(t, idx)))
            buf = self.graph.buffers[name]
        buf.kind = BufferKind.OUTPUT
        return OutputView(name, buf.layout)


def _scalar(value, position: int, t: Tensor, src: PointwiseSrc) -> Expr:
    """A Python scalar operand as a constant of the dtype the op computes in."""
    if isinstance(value, Index):
        return IndexValue(value, dt.int64)
    if src.op is Op.WHERE:
        return Const(value, dt.bool_ if position == 0 else t.dtype)
    tensors = [a for a in src.args if isinstance(a, Tensor)]
    return Const(value, tensors[0].dtype if tensors else t.dtype)
