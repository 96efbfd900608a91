"""Small inference models built from torch.nn, for the whole-model benchmarks.

Each entry builds a model (random init, eval mode) and its example inputs on a device. They cover
the families users compile: transformer blocks (GPT-2, BERT, LLaMA and T5 style), attention, MLPs,
convolution + normalization blocks and an embedding head. Sizes are small on purpose: at these
sizes a compiled call is bound by its host time and its launches as much as by its kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

D, HEADS, SEQ, BATCH, VOCAB = 256, 4, 128, 8, 8192


class RMSNorm(nn.Module):
    """LLaMA/T5 RMSNorm (T5 style: no mean, no bias)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SelfAttention(nn.Module):
    """Multi-head self-attention through scaled_dot_product_attention."""

    def __init__(self, d: int, heads: int, causal: bool, bias: bool = True):
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class GPT2Block(nn.Module):
    """Pre-norm block: LayerNorm, causal attention, LayerNorm, GELU (tanh) MLP, residuals."""

    def __init__(self, d: int = D):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, HEADS, causal=True)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class BertLayer(nn.Module):
    """Post-norm block: attention, add & LayerNorm, GELU (erf) MLP, add & LayerNorm."""

    def __init__(self, d: int = D):
        super().__init__()
        self.attn = SelfAttention(d, HEADS, causal=False)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.proj(F.gelu(self.fc(x))))


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding over the last dimension of (batch, heads, seq, head_dim)."""
    s, half = x.shape[-2], x.shape[-1] // 2
    freq = torch.exp(torch.arange(half, device=x.device, dtype=torch.float32) * (-math.log(10000.0) / half))
    angle = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * freq[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, causal attention with rotary embeddings (no biases), RMSNorm, SwiGLU MLP."""

    def __init__(self, d: int = D):
        super().__init__()
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, 3 * d, bias=False)
        self.down = nn.Linear(3 * d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(rotary(q), rotary(k), v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class T5Block(nn.Module):
    """T5 encoder block: RMSNorm, attention with a learned position bias, RMSNorm, ReLU MLP."""

    def __init__(self, d: int = D):
        super().__init__()
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(HEADS, SEQ, SEQ))
        self.fc, self.proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) + self.bias[:, :s, :s]
        y = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        x = x + self.out(y.transpose(1, 2).reshape(b, s, d))
        return x + self.proj(F.relu(self.fc(self.n2(x))))


class LnGeluMlp(nn.Module):
    """LayerNorm, Linear, GELU, Linear, residual."""

    def __init__(self, d: int = D):
        super().__init__()
        self.ln, self.fc, self.proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))


class MhaBlock(nn.Module):
    """torch.nn.MultiheadAttention followed by a residual and a LayerNorm."""

    def __init__(self, d: int = D):
        super().__init__()
        self.mha, self.ln = nn.MultiheadAttention(d, HEADS, batch_first=True), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x + self.mha(x, x, x, need_weights=False)[0])


class ConvBnRelu(nn.Module):
    """Conv2d, BatchNorm2d (eval), ReLU, Conv2d, BatchNorm2d, residual, ReLU, max-pool."""

    def __init__(self, c: int = 64):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        for bn in (self.b1, self.b2):
            bn.running_mean.normal_(0, 0.1)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.max_pool2d(F.relu(x + self.b2(self.c2(y))), 2)


class ConvGnSilu(nn.Module):
    """Conv2d, GroupNorm, SiLU (a diffusion U-Net's resnet unit), residual."""

    def __init__(self, c: int = 64):
        super().__init__()
        self.conv, self.gn = nn.Conv2d(c, c, 3, padding=1), nn.GroupNorm(8, c)

    def forward(self, x):
        return x + F.silu(self.gn(self.conv(x)))


class EmbeddingHead(nn.Module):
    """Token embedding, LayerNorm, tied output projection, log_softmax over the vocabulary."""

    def __init__(self, d: int = D, vocab: int = VOCAB):
        super().__init__()
        self.emb, self.ln = nn.Embedding(vocab, d), nn.LayerNorm(d)

    def forward(self, tokens):
        return F.log_softmax(self.ln(self.emb(tokens)) @ self.emb.weight.t(), dim=-1)


@dataclass(frozen=True)
class Model:
    """A model factory and how to make its example inputs on a device."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator, str], tuple]


def _tokens(gen, device):
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen).to(device),)


def _sequence(gen, device):
    return (torch.randn(BATCH, SEQ, D, generator=gen).to(device),)


def _image(gen, device):
    return (torch.randn(BATCH, 64, 32, 32, generator=gen).to(device),)


MODELS = {m.name: m for m in [
    Model("gpt2_block", GPT2Block, _sequence),
    Model("bert_layer", BertLayer, _sequence),
    Model("llama_block", LlamaBlock, _sequence),
    Model("t5_block", T5Block, _sequence),
    Model("transformer_encoder", lambda: nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0,
                                                                    batch_first=True), _sequence),
    Model("mha", MhaBlock, _sequence),
    Model("ln_gelu_mlp", LnGeluMlp, _sequence),
    Model("conv_bn_relu", ConvBnRelu, _image),
    Model("conv_gn_silu", ConvGnSilu, _image),
    Model("embedding_head", EmbeddingHead, _tokens),
]}


def instantiate(name: str, device: str, dtype: torch.dtype = torch.float32, seed: int = 0,
                catalog: dict | None = None):
    """(model in eval mode, example inputs) for ``name`` of ``catalog`` (``MODELS`` by default) on
    ``device``; float inputs in ``dtype``."""
    spec = (MODELS if catalog is None else catalog)[name]
    torch.manual_seed(seed)
    model = spec.build().eval().to(device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in spec.inputs(gen, device))
    return model, inputs


def each_on_cuda(names: list[str]):
    """(name, model, example inputs) on CUDA for each of ``names`` (at least one, all known, else
    the script exits naming the choices), Dynamo's caches reset before each."""
    unknown = sorted(set(names) - set(MODELS))
    if unknown or not names:
        raise SystemExit(f"name models from {sorted(MODELS)}")
    for name in names:
        model, args = instantiate(name, "cuda")
        torch._dynamo.reset()
        yield name, model, args
