"""CPU attention over short key sequences: two batched matmuls around one softmax kernel
(``lowering/short_attention.py``) instead of ATen's flash attention, forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln
from loopnest.lowering.short_attention import MAX_KEYS, short_attention

flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


# Static shapes in every test: a recompile at another size would make them symbolic, and symbolic
# sequence lengths keep flash attention.
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _qkv(batch, heads, length, keys, dim, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, length, dim, generator=g, dtype=dtype),
            torch.randn(batch, heads, keys, dim, generator=g, dtype=dtype),
            torch.randn(batch, heads, keys, dim, generator=g, dtype=dtype))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7, 8), (1, 2, 9, 4, 16), (2, 1, 1, MAX_KEYS, 4), (1, 1, 1, 1, 1),
                                   (3, 2, 17, 1, 5)])
def test_matches_flash_attention_values_and_layouts(shape, causal):
    q, k, v = _qkv(*shape)
    want_out, want_lse = flash(q.double(), k.double(), v.double(), is_causal=causal, scale=0.3)
    out, lse = short_attention(q, k, v, is_causal=causal, scale=0.3)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    fl_out, fl_lse = flash(q, k, v, is_causal=causal, scale=0.3)
    assert (out.stride(), lse.stride()) == (fl_out.stride(), fl_lse.stride())


def test_output_laid_out_as_a_strided_query():
    """A projection viewed as heads (MultiheadAttention's (L, B, H*E) rows): the output keeps that
    order in memory, as flash attention's does, so the caller's views of it stay valid."""
    length, batch, heads, dim = 6, 2, 3, 4
    qkv = torch.randn(3, length, batch, heads * dim)
    q, k, v = (t.view(length, batch, heads, dim).permute(1, 2, 0, 3) for t in qkv)
    out, _ = short_attention(q, k, v)
    fl_out, _ = flash(q, k, v)
    assert out.stride() == fl_out.stride()
    torch.testing.assert_close(out, fl_out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["mask", "dropout", "bfloat16", "long", "grouped", "empty"])
def test_other_calls_keep_flash_attention(case):
    q, k, v = _qkv(1, 2, 4, MAX_KEYS + 1 if case == "long" else 4, 8,
                   dtype=torch.bfloat16 if case == "bfloat16" else torch.float32)
    kwargs = {"attn_mask": torch.zeros(4, 4)} if case == "mask" else {}
    if case == "grouped":
        k, v = k[:, :1], v[:, :1]
    if case == "empty":
        q = q[:, :, :0]
    assert short_attention(q, k, v, 0.1 if case == "dropout" else 0.0, **kwargs) is NotImplemented


def _attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("shape", [(2, 4, 16, 16, 8), (3, 2, 17, 1, 5), (1, 1, 3, 200, 64)])
def test_compiled_short_attention_runs_matmuls_and_one_kernel(shape):
    q, k, v = _qkv(*shape)
    with torch.no_grad():
        explained = ln.explain(_attention, q, k, v)
        got = torch.compile(_attention, backend="loopnest")(q, k, v)
    ops = [f.op for f in explained.fallbacks]
    assert ops.count("aten.bmm.default") == 2 and not any("flash" in op for op in ops), ops
    assert explained.num_kernels == 1
    torch.testing.assert_close(got, _attention(q, k, v), rtol=1e-5, atol=1e-5)


def test_compiled_long_attention_keeps_flash_attention():
    q, k, v = _qkv(1, 2, 4, MAX_KEYS + 8, 8)
    with torch.no_grad():
        explained = ln.explain(_attention, q, k, v)
    assert [f.op for f in explained.fallbacks] == [str(flash)]


@pytest.mark.parametrize("magnitude", [1.0, 3e4])
def test_training_keeps_flash_attention_and_matches_eager(magnitude):
    """A differentiated graph keeps ATen's op: its backward (an ATen call) recomputes the scores
    with its own blocked matmuls and reads the forward's log-sum-exp, so the forward must round
    them as it does. With ours, scores of about 1e9 (q and k at 3e4) differed from the
    recomputed ones by more than exp's range, and the gradients were NaN where eager's are not."""
    q, k, v = (t * magnitude for t in _qkv(2, 3, 7, 7, 8, seed=1))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    grad = torch.randn(2, 3, 7, 8)
    graphs = []
    torch.compile(_attention, backend="loopnest", options={"recorder": graphs.append})(q, k, v).backward(grad)
    forward_ops = [f.op for f in graphs[0].program.fallbacks]
    assert forward_ops == [str(flash)], forward_ops
    _attention(*ref).backward(grad)
    for got, want in zip((q, k, v), ref):
        assert torch.isfinite(want.grad).all()
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5 * magnitude)
