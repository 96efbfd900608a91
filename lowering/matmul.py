"""addmm whose result only feeds pointwise ops: ATen's mm, then a bias add that fuses into them.

ATen's addmm first copies the broadcast bias into its output (a full write of the output, 62 µs
of a 4 MB one on the 2-core Xeon), then multiplies into it. Where every use of the result is
pointwise (the GELU of an MLP, a residual add), the add costs nothing inside the kernel that
reads the product anyway. Inductor makes the same split (``unfuse_bias_add_to_pointwise``).
"""
from __future__ import annotations

import torch

from ..ir.ops import Op
from . import extern as ext
from .pointwise import compute
from .registry import LoweringContext, Unsupported, register_lowering

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_BLAS = "matrix multiply: called through ATen (BLAS)"


def feeds_only_pointwise(node: torch.fx.Node) -> bool:
    """Whether ``node`` has uses and each, looking through views, is a pointwise ATen op."""
    if not node.users:
        return False
    for user in node.users:
        if user.target in _VIEWS:
            if not feeds_only_pointwise(user):
                return False
        elif not (isinstance(user.target, torch._ops.OpOverload) and torch.Tag.pointwise in user.target.tags):
            return False
    return True


@register_lowering(aten.addmm.default)
def addmm(ctx: LoweringContext, bias, a, b, *, beta=1, alpha=1):
    """``bias + a @ b`` as ATen's mm and a loopnest add, where every use of the result is
    pointwise and the result a float; else ATen's addmm."""
    dtype = ctx.out_dtype()
    if beta != 1 or alpha != 1 or not dtype.is_float or not feeds_only_pointwise(ctx.node):
        raise Unsupported(_BLAS)
    product = ext.lower_call(ctx, aten.mm.default, (1, 2), (a, b), _BLAS)
    return compute(ctx, Op.ADD, (product, bias), dtype)
