"""Extern fallback: call the ATen op itself at run time, between loopnest kernels.

Output shapes, dtypes and strides come from the node's traced value (the op run on fake tensors
during tracing). Symbolic sizes among the arguments are evaluated at call time by ``Extern.call``
from the symbol values of the running graph. Every fallback records its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.trees import leaves, map_leaves
from ..dsl.tensor import Tensor, extern
from ..ir import dtypes as dt
from . import conv_layout
from .carriers import Carrier, carrier_of
from .registry import LoweringContext, LoweringError
from .symbolic import shape_of, strides_of, to_index
from .tensors import in_layout

aten = torch.ops.aten

_THROUGH_ATEN = {  # reason -> the ops called through ATen by design
    "matrix multiply: called through ATen (BLAS)": ("mm", "bmm", "addmm", "baddbmm"),
    "convolution: called through ATen": ("convolution", "convolution_backward"),
    "attention: called through ATen": (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention"),
    "sorting: called through ATen": ("sort", "topk"),
    "random number generation: called through ATen": (
        "rand", "randn", "randint", "bernoulli", "normal", "uniform", "exponential", "multinomial", "randperm",
        "rand_like", "randn_like", "randint_like", "native_dropout"),
}
_BY_DESIGN = {name: reason for reason, names in _THROUGH_ATEN.items() for name in names}


def default_reason(op) -> str:
    """Why ``op`` has no lowering rule, in words."""
    name = getattr(op, "_opname", None) or getattr(op, "__name__", str(op))
    if name in _BY_DESIGN:
        return _BY_DESIGN[name]
    if isinstance(op, torch._ops.OpOverload) and op.namespace not in ("aten", "prims"):
        return f"custom op {op.namespace}::{name}: called as is"
    return "no lowering rule"


@dataclass
class ExternFn:
    """Calls ``op`` with each tensor argument on the device it was traced on (a graph runs on one
    device; e.g. CPU philox seeds of CUDA attention are moved to the GPU with the other inputs and
    back here) and in the dtype it was traced with (complex and unsigned tensors arrive as the
    buffers that carry them, ``carriers``); returns only the tensor results, in order."""

    op: object
    tensor_outputs: tuple[int, ...] | None  # positions of tensors in a tuple result; None: one tensor
    devices: tuple = ()  # traced device of each leaf of (args, kwargs), in ``trees.leaves`` order
    carriers: tuple = ()  # the Carrier of each such leaf (None: a loopnest dtype)
    out_carriers: tuple = ()  # the Carrier of each tensor result (None: a loopnest dtype)

    def for_device(self, device_type: str):
        """This call for a graph running on ``device_type``: without the per-call device and
        carrier conversions when no argument needs one (every tensor traced on that kind of device,
        in a loopnest dtype), else itself."""
        if (self.carriers or any(self.out_carriers)
                or any(d is not None and d.type != device_type for d in self.devices)):
            return self
        op, picks = self.op, self.tensor_outputs
        if picks is None:
            return lambda *args, **kwargs: op(*args, **kwargs).resolve_neg()
        return lambda *args, **kwargs: _picked(op(*args, **kwargs), picks)

    def __call__(self, *args, **kwargs):
        if any(d is not None for d in self.devices):
            devices, carriers = iter(self.devices), iter(self.carriers or (None,) * len(self.devices))
            args, kwargs = map_leaves(lambda a: _traced_form(a, next(devices), next(carriers)), (args, kwargs))
        result = self.op(*args, **kwargs)
        results = (result,) if self.tensor_outputs is None else tuple(result[k] for k in self.tensor_outputs)
        inputs = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)] if any(self.out_carriers) else ()
        # kernels read the stored values: a lazily negated view (ATen's _neg_view) is resolved
        results = tuple(r.resolve_neg() if c is None else _carried(r, c, inputs)
                        for r, c in zip(results, self.out_carriers or (None,) * len(results)))
        return results[0] if self.tensor_outputs is None else results


def _picked(result, positions: tuple[int, ...]) -> tuple:
    """The tensors at ``positions`` of a tuple result, lazily negated views resolved."""
    return tuple(result[k].resolve_neg() for k in positions)


def _traced_form(a, device, carrier: Carrier | None):
    """Tensor ``a`` on ``device`` (None: where it is) and in its traced dtype; other values as they are."""
    if not isinstance(a, torch.Tensor):
        return a
    if device is not None and a.device != device:
        a = a.to(device)
    return a if carrier is None else carrier.from_ir(a)


def _carried(r: torch.Tensor, carrier: Carrier, inputs: list) -> torch.Tensor:
    """Result ``r`` as the buffer that carries it; a copy when ``r`` is a view of an argument (its
    memory may be reused once the argument is dead)."""
    storage = r.untyped_storage().data_ptr()
    if any(a.untyped_storage().data_ptr() == storage for a in inputs):
        r = r.clone()
    return carrier.to_ir(r)


def _traced_value(a):
    """The traced value of an FX node (None for anything else)."""
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else None


def _spec(value: torch.Tensor, node) -> tuple:
    carrier = carrier_of(value)
    if carrier is not None:
        strides = None if value.is_contiguous() else carrier.strides(strides_of(value))
        return carrier.shape(shape_of(value)), carrier.ir_dtype, strides
    try:
        dtype = dt.to_dtype(value.dtype)
    except TypeError as e:
        raise LoweringError(f"{node.format_node()}: {e}") from None
    strides = None if value.is_contiguous() else strides_of(value)
    return shape_of(value), dtype, strides


def _in_traced_layouts(tree, traced: list):
    """``tree`` with each computed tensor in the layout of its traced value (``tensors.in_layout``):
    ATen gets its arguments laid out as in eager (a convolution, channels-last)."""
    values = iter(traced)

    def leaf(a):
        v = next(values)
        return in_layout(a, v) if isinstance(a, Tensor) else a
    return map_leaves(leaf, tree)


def _size_output(value, node):
    """A non-tensor output of an extern, as its traced value says it: None, or a size (cuDNN
    attention returns its sequence lengths beside its tensors), which follows from the input
    sizes as a shape does; any other value would come from the data, which the graph cannot know."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, (int, torch.SymInt)):
        return to_index(value)
    raise LoweringError(f"{node.format_node()}: output {value!r} of {node.target} is neither a tensor nor a "
                        f"size; loopnest cannot call an op whose outputs depend on data this way")


def lower_extern(ctx: LoweringContext, args: tuple, kwargs: dict, reason: str):
    """The node as an Extern call; returns a DSL tensor or a tuple (None where ATen returns None)."""
    node, val = ctx.node, ctx.val
    traced = [_traced_value(a) for a in leaves((node.args, node.kwargs))]
    channels_last = conv_layout.channels_last_call(node, args, traced)
    if channels_last is not None:
        args, traced, val = channels_last
    args, kwargs = _in_traced_layouts((args, kwargs), traced)
    devices = tuple(v.device if isinstance(v, torch.Tensor) else None for v in traced)
    carriers = tuple(carrier_of(v) for v in traced)
    if not any(carriers):
        carriers = ()
    if isinstance(val, torch.Tensor):
        fn = ExternFn(node.target, None, devices, carriers, (carrier_of(val),))
        (out,) = extern(str(node.target), fn, args, kwargs, [_spec(val, node)], reason)
        return out
    if isinstance(val, (tuple, list)):
        positions = tuple(k for k, v in enumerate(val) if isinstance(v, torch.Tensor))
        fn = ExternFn(node.target, positions, devices, carriers, tuple(carrier_of(val[k]) for k in positions))
        outs = extern(str(node.target), fn, args, kwargs, [_spec(val[k], node) for k in positions],
                      reason) if positions else ()
        tensors = dict(zip(positions, outs))
        return tuple(tensors[k] if k in tensors else _size_output(v, node) for k, v in enumerate(val))
    raise LoweringError(f"{node.format_node()}: cannot call {node.target} through ATen: its traced "
                        f"output is {type(val).__name__}, not tensors")
