"""Extern fallback: call the ATen op itself at run time, between loopnest kernels.

Output shapes, dtypes and strides come from the node's traced value (the op run on fake tensors
during tracing). Symbolic sizes among the arguments are evaluated at call time by ``Extern.call``
from the symbol values of the running graph. Every fallback records its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..dsl.tensor import extern
from ..ir import dtypes as dt
from .registry import LoweringContext, LoweringError
from .symbolic import shape_of, strides_of

aten = torch.ops.aten

_BY_DESIGN = {
    "mm": "matrix multiply: called through ATen (BLAS)",
    "bmm": "matrix multiply: called through ATen (BLAS)",
    "addmm": "matrix multiply: called through ATen (BLAS)",
    "baddbmm": "matrix multiply: called through ATen (BLAS)",
    "convolution": "convolution: called through ATen",
    "convolution_backward": "convolution: called through ATen",
    "_scaled_dot_product_flash_attention_for_cpu": "attention: called through ATen",
    "_scaled_dot_product_efficient_attention": "attention: called through ATen",
    "_scaled_dot_product_flash_attention": "attention: called through ATen",
    "sort": "sorting: called through ATen",
    "topk": "sorting: called through ATen",
}
_RANDOM = ("rand", "randn", "randint", "bernoulli", "normal", "uniform", "exponential", "multinomial",
           "randperm", "rand_like", "randn_like", "randint_like", "native_dropout")


def default_reason(op) -> str:
    """Why ``op`` has no lowering rule, in words."""
    name = getattr(op, "_opname", None) or getattr(op, "__name__", str(op))
    if name in _BY_DESIGN:
        return _BY_DESIGN[name]
    if name in _RANDOM:
        return "random number generation: called through ATen"
    if isinstance(op, torch._ops.OpOverload) and op.namespace not in ("aten", "prims"):
        return f"custom op {op.namespace}::{name}: called as is"
    return "no lowering rule"


@dataclass
class ExternFn:
    """Calls ``op`` with each tensor argument on the device it was traced on (a graph runs on one device; e.g. CPU philox seeds of CUDA attention are moved to the
    GPU with the other inputs and back here); returns only the tensor results, in order."""

    op: object
    tensor_outputs: tuple[int, ...] | None  # positions of tensors in a tuple result; None: one tensor
    devices: tuple = ()                     # traced device of each positional/keyword tensor argument
    kw_devices: dict | None = None

    def __call__(self, *args, **kwargs):
        args = _on_devices(args, self.devices)
        kwargs = {k: _on_devices(v, (self.kw_devices or {}).get(k)) for k, v in kwargs.items()}
        result = self.op(*args, **kwargs)
        if self.tensor_outputs is None:
            return result
        return tuple(result[k] for k in self.tensor_outputs)


def _on_devices(tree, devices):
    """Tensors moved to their traced device (``devices`` mirrors ``tree``)."""
    if isinstance(tree, torch.Tensor):
        return tree if devices is None or tree.device == devices else tree.to(devices)
    if isinstance(tree, (list, tuple)):
        devs = devices if isinstance(devices, (list, tuple)) else [None] * len(tree)
        return type(tree)(_on_devices(x, d) for x, d in zip(tree, devs))
    return tree


def _traced_devices(tree):
    """The traced device of every tensor-valued FX node in an argument tree (None elsewhere)."""
    if isinstance(tree, torch.fx.Node):
        val = tree.meta.get("val")
        return val.device if isinstance(val, torch.Tensor) else None
    if isinstance(tree, (list, tuple)):
        return tuple(_traced_devices(x) for x in tree)
    return None


def _spec(value: torch.Tensor, node) -> tuple:
    try:
        dtype = dt.to_dtype(value.dtype)
    except TypeError as e:
        raise LoweringError(f"{node.format_node()}: {e}") from None
    strides = None if value.is_contiguous() else strides_of(value)
    return shape_of(value), dtype, strides


def lower_extern(ctx: LoweringContext, args: tuple, kwargs: dict, reason: str):
    """The node as an Extern call; returns a DSL tensor or a tuple (None where ATen returns None)."""
    node, val = ctx.node, ctx.val
    devices = _traced_devices(node.args)
    kw_devices = {k: _traced_devices(v) for k, v in node.kwargs.items()}
    if isinstance(val, torch.Tensor):
        fn = ExternFn(node.target, None, devices, kw_devices)
        (out,) = extern(str(node.target), fn, args, kwargs, [_spec(val, node)], reason)
        return out
    if isinstance(val, (tuple, list)):
        positions = tuple(k for k, v in enumerate(val) if isinstance(v, torch.Tensor))
        if any(v is not None and not isinstance(v, torch.Tensor) for v in val):
            raise LoweringError(f"{node.format_node()}: extern with non-tensor outputs is not supported")
        outs = extern(str(node.target), ExternFn(node.target, positions, devices, kw_devices), args, kwargs,
                      [_spec(val[k], node) for k in positions], reason) if positions else ()
        result = [None] * len(val)
        for k, t in zip(positions, outs):
            result[k] = t
        return tuple(result)
    raise LoweringError(f"{node.format_node()}: cannot call {node.target} through ATen: its traced "
                        f"output is {type(val).__name__}, not tensors")
