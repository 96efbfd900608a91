"""CPU convolutions run channels-last, as Inductor runs them where oneDNN is built in.

ATen's CPU convolution of an NCHW tensor takes a slow path for depthwise and 1x1 kernels: a
depthwise 3x3 over 8 x 192 x 28 x 28 float32 takes 2.70 ms there and 0.25 ms on the same data laid
out channels-last (this 2-core AVX-512 host, 2026-12-06); a 1x1 convolution 0.46 against 0.25. So
a convolution's input is handed over channels-last: the kernel that computes it writes it so
(``tensors.in_layout``), a channels-last extern result (the previous convolution's) passes as is,
and anything else is copied once. The result comes back channels-last; the kernels that read it
follow its strides, and graph outputs keep eager's layout. A convolution whose result is itself
a graph output keeps eager's layout throughout.
"""
from __future__ import annotations

import torch

from ..dsl.tensor import ExternSrc, PlaceholderSrc, PointwiseSrc, Tensor
from . import tensors as T

aten = torch.ops.aten

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def channels_last_call(node: torch.fx.Node, args: tuple, traced: list):
    """``(args, traced, result)`` for calling the convolution ``node`` on a channels-last input:
    its lowered positional arguments with the input arranged so, the traced values of the
    argument leaves to lay them out by (``extern._in_traced_layouts``), and the traced result of
    that call; None where the convolution keeps eager's layout."""
    x_val = traced[0] if traced else None
    if not _wanted(node, x_val):
        return None
    fmt = torch.channels_last if x_val.ndim == 4 else torch.channels_last_3d
    x = args[0]
    if not isinstance(x, Tensor):
        return None
    with x_val.fake_mode:
        x_cl = x_val.contiguous(memory_format=fmt)
        rest = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args[1:]]
        result = node.target(x_cl, *rest, **node.kwargs)
    if not result.is_contiguous(memory_format=fmt):
        return None
    if not isinstance(x.src, PointwiseSrc) and not _laid_out(x, x_val, fmt):
        x = T.copy(x)  # a kernel of its own, which ``in_layout`` lays out channels-last
    return (x, *args[1:]), [x_cl, *traced[1:]], result


def _wanted(node: torch.fx.Node, x_val) -> bool:
    if node.target is not aten.convolution.default or not isinstance(x_val, torch.Tensor):
        return False
    if x_val.device.type != "cpu" or x_val.ndim not in (4, 5) or x_val.dtype not in DTYPES:
        return False
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    if any(not isinstance(s, int) for s in (*x_val.shape, *x_val.stride())):
        return False
    weight = node.args[1].meta.get("val") if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node) else None
    groups = node.args[8] if len(node.args) > 8 else node.kwargs.get("groups", 1)
    if not isinstance(weight, torch.Tensor) or not (groups > 1 or all(k == 1 for k in weight.shape[2:])):
        return False  # a dense convolution of a larger kernel gains less than its layout changes cost
    return not any(u.op == "output" for u in node.users)


def _laid_out(x: Tensor, x_val: torch.Tensor, fmt) -> bool:
    """Whether ``x`` is already stored channels-last: a graph input eager traced so, or an extern
    result (a convolution's) with those strides."""
    if isinstance(x.src, PlaceholderSrc):
        return x_val.is_contiguous(memory_format=fmt)
    if isinstance(x.src, ExternSrc):
        strides = x.src.call.outputs[x.src.output][2]
        if strides is None:
            return x_val.is_contiguous(memory_format=fmt) and x_val.is_contiguous()
        wanted = torch.empty_strided(tuple(x_val.shape), (1,) * x_val.ndim, device="meta").contiguous(
            memory_format=fmt).stride()
        return all(n <= 1 or a.as_int() == b for a, b, n in zip(strides, wanted, x_val.shape))
    return False
