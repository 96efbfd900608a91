"""CPU attention over short key sequences as two batched matmuls around one softmax kernel.

ATen's CPU flash attention streams keys in blocks with an online softmax: the right plan when the
score matrix is large. When each query row has at most ``MAX_KEYS`` keys the scores of a head fit
in cache, and ``bmm(q, kᵀ)`` (BLAS), one fused loopnest kernel (scale, causal mask, softmax and
the log-sum-exp) and ``bmm(p, v)`` are faster: 1.13x for 8 x 4 heads of 128 x 64, 1.24x for
32 x 4 heads of 64 x 32, 1.04x at 256 keys and 0.98x at 512 (2-core AVX-512 host, bench/RESULTS.md).

The decomposition returns what the ATen op returns, in its layouts: the output laid out as the
query, and the log-sum-exp of the scaled scores as ``(batch, query, head)`` memory viewed as
``(batch, head, query)``. Graphs that are differentiated keep ATen's op
(``decompositions.TRAINING_KEEPS``): its backward recomputes the scores as ATen's forward does.
Anything else (dropout, an explicit mask, grouped heads, 16-bit dtypes, symbolic or longer
sequences, empty tensors) returns ``NotImplemented``: the op stays an ATen call.
"""
from __future__ import annotations

import math

import torch

MAX_KEYS = 256  # keys per query row up to which the matmuls + softmax kernel beat flash attention


def _static(*tensors: torch.Tensor) -> bool:
    return all(isinstance(s, int) for t in tensors for s in t.shape)


def _applies(query, key, value, dropout_p, attn_mask) -> bool:
    return (dropout_p == 0.0 and attn_mask is None and query.dim() == key.dim() == value.dim() == 4
            and query.dtype == key.dtype == value.dtype == torch.float32 and _static(query, key, value)
            and query.shape[1] == key.shape[1] == value.shape[1] and key.shape[2] == value.shape[2]
            and query.shape[3] == key.shape[3] == value.shape[3] and 0 < key.shape[2] <= MAX_KEYS
            and query.numel() > 0)


def _like(t: torch.Tensor, layout_of: torch.Tensor) -> torch.Tensor:
    """``t`` (contiguous) with the dims of ``layout_of`` ordered in memory as they are there."""
    order = sorted(range(t.dim()), key=lambda d: (-layout_of.stride(d), -d))
    if order == list(range(t.dim())):
        return t
    inverse = [order.index(d) for d in range(t.dim())]
    return t.permute(order).contiguous().permute(inverse)


def short_attention(query, key, value, dropout_p: float = 0.0, is_causal: bool = False, *,
                    attn_mask=None, scale=None):
    """``aten._scaled_dot_product_flash_attention_for_cpu`` as matmuls and a softmax, where
    ``_applies``; ``NotImplemented`` (the op kept) elsewhere."""
    if not _applies(query, key, value, dropout_p, attn_mask):
        return NotImplemented
    batch, heads, length, dim = query.shape
    keys = key.shape[2]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    q, k, v = (t.reshape(batch * heads, -1, dim) for t in (query, key, value))
    scores = torch.bmm(q, k.transpose(1, 2)) * scale
    if is_causal:  # top left aligned, as flash attention: query i sees keys 0..i
        rows, cols = (torch.arange(n, device=query.device) for n in (length, keys))
        visible = cols <= rows[:, None]
        scores = torch.where(visible, scores, float("-inf"))
    top = scores.amax(-1, keepdim=True)
    exps = torch.exp(scores - top)
    total = exps.sum(-1, keepdim=True)
    out = torch.bmm(exps / total, v).view(batch, heads, length, dim)
    lse = (top + torch.log(total)).view(batch, heads, length)
    return _like(out, query), lse.permute(0, 2, 1).contiguous().permute(0, 2, 1)
