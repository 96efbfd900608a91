"""More model families for the whole-model benchmarks (``--set families``): the layers the
transformer and conv blocks of ``model_zoo`` leave out.

Depthwise and 1x1 convolutions (ConvNeXt, MobileNet), a ViT with its patch embedding, Swin-style
window attention (views and permutes), a U-Net decoder step (nearest upsampling, concatenation),
squeeze-excitation, a top-2 mixture of experts (gathers), a sum of losses (label smoothing, KL
divergence), masked attention with a cumulative sum, pixel and channel shuffles with activations,
and a bf16 autocast MLP. Each found a case the suite's rows did not (bench/RESULTS.md,
2026-12-06 09:08).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from model_zoo import Model


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 convolution, channels-last LayerNorm, GELU MLP, layer scale, residual."""

    def __init__(self, c=96):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.rand(c))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.ln(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class InvertedResidual(nn.Module):
    """MobileNetV2: 1x1 expansion, depthwise 3x3, 1x1 projection, batch norms, ReLU6, residual."""

    def __init__(self, c=32, expand=6):
        super().__init__()
        h = c * expand
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class ViT(nn.Module):
    """Patch embedding, class token and positions, one pre-norm encoder layer, a linear head."""

    def __init__(self, d=192):
        super().__init__()
        self.patches = nn.Conv2d(3, d, 16, 16)
        self.cls, self.pos = nn.Parameter(torch.randn(1, 1, d)), nn.Parameter(torch.randn(1, 197, d))
        self.layer = nn.TransformerEncoderLayer(d, 3, 4 * d, dropout=0.0, batch_first=True, norm_first=True,
                                                activation="gelu")
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 100)

    def forward(self, x):
        y = self.patches(x).flatten(2).transpose(1, 2)
        y = torch.cat([self.cls.expand(y.shape[0], -1, -1), y], 1) + self.pos
        return self.head(self.norm(self.layer(y))[:, 0])


class WindowAttention(nn.Module):
    """Swin-style attention inside 7x7 windows with a learned position bias, windows partitioned
    and merged back by views and permutes, residual."""

    def __init__(self, d=96, window=7, heads=3):
        super().__init__()
        self.window, self.heads = window, heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.bias = nn.Parameter(torch.randn(heads, window * window, window * window))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):  # (B, H, W, C)
        b, h, w, c = x.shape
        k, n = self.window, self.window * self.window
        y = self.norm(x).view(b, h // k, k, w // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
        q, key, v = self.qkv(y).reshape(y.shape[0], n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        att = (q * (c // self.heads) ** -0.5) @ key.transpose(-2, -1) + self.bias
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(-1, n, c)
        y = self.out(y).view(b, h // k, w // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return x + y


class UNetUp(nn.Module):
    """A U-Net decoder step: nearest 2x upsampling, the skip concatenated, 3x3 convolution,
    GroupNorm, SiLU."""

    def __init__(self, c=64):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(2 * c, c, 3, padding=1), nn.GroupNorm(8, c)

    def forward(self, x, skip):
        y = torch.cat([F.interpolate(x, scale_factor=2, mode="nearest"), skip], 1)
        return F.silu(self.norm(self.conv(y)))


class SqueezeExcitation(nn.Module):
    """Convolution, batch norm, ReLU, squeeze-excitation gate, residual, global average pool."""

    def __init__(self, c=128, r=16):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.fc1, self.fc2 = nn.Linear(c, c // r), nn.Linear(c // r, c)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        gate = torch.sigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3))))))
        return F.adaptive_avg_pool2d(y * gate[:, :, None, None] + x, 1).flatten(1)


class TopTwoExperts(nn.Module):
    """A router's softmax, its top 2 experts renormalized, each token through its experts'
    weights (gathered), weighted sum."""

    def __init__(self, d=256, experts=8):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.weight = nn.Parameter(torch.randn(experts, d, d) * 0.05)

    def forward(self, x):
        probs, picks = self.router(x).softmax(-1).topk(2, -1)
        probs = probs / probs.sum(-1, keepdim=True)
        y = torch.einsum("td,tkdo->tko", x, self.weight[picks])
        return (y * probs[..., None]).sum(1)


class Losses(nn.Module):
    """Label-smoothed cross-entropy, KL divergence between softmaxes, MSE of sigmoids, and an
    argmax accuracy term, summed."""

    def forward(self, logits, target, other):
        ce = F.cross_entropy(logits, target, label_smoothing=0.1)
        kl = F.kl_div(F.log_softmax(logits, -1), F.softmax(other, -1), reduction="batchmean")
        accuracy = (logits.argmax(-1) == target).float().mean()
        return ce + kl + F.mse_loss(logits.sigmoid(), other.sigmoid()) - 0.01 * accuracy


class MaskedAttention(nn.Module):
    """Single-head attention with a key padding mask (masked_fill with -inf), masked outputs,
    cumulative sum over the sequence."""

    def __init__(self, d=128):
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x, mask):
        att = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(x.shape[-1])
        att = att.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)
        return torch.where(mask[..., None], att @ x, torch.zeros_like(x)).cumsum(1)


class Shuffles(nn.Module):
    """Convolution, pixel shuffle, channel shuffle, then hardswish + leaky ReLU - ELU + clamp."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 64, 3, padding=1)

    def forward(self, x):
        y = F.pixel_shuffle(self.conv(x), 2)
        b, c, h, w = y.shape
        y = y.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
        return F.hardswish(y) + F.leaky_relu(y, 0.1) - F.elu(y) + y.clamp(-1, 1)


class AutocastMlp(nn.Module):
    """A SiLU MLP and residual LayerNorm under bf16 autocast, then a float32 softmax."""

    def __init__(self, d=256):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.LayerNorm(d)

    def forward(self, x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return self.norm(x + self.fc2(F.silu(self.fc1(x)))).float().softmax(-1)


def _randn(*shape):
    return lambda gen, device: (torch.randn(*shape, generator=gen).to(device),)


def _up_and_skip(gen, device):
    return tuple(torch.randn(*s, generator=gen).to(device) for s in ((2, 64, 16, 16), (2, 64, 32, 32)))


def _logits_and_targets(gen, device):
    logits, other = torch.randn(64, 1000, generator=gen), torch.randn(64, 1000, generator=gen)
    return logits.to(device), torch.randint(0, 1000, (64,), generator=gen).to(device), other.to(device)


def _sequence_and_mask(gen, device):
    return torch.randn(4, 100, 128, generator=gen).to(device), (torch.rand(4, 100, generator=gen) > 0.3).to(device)


FAMILIES = {m.name: m for m in [
    Model("convnext_block", ConvNeXtBlock, _randn(4, 96, 28, 28)),
    Model("inverted_residual", InvertedResidual, _randn(8, 32, 28, 28)),
    Model("vit", ViT, _randn(2, 3, 224, 224)),
    Model("window_attention", WindowAttention, _randn(2, 28, 28, 96)),
    Model("unet_up", UNetUp, _up_and_skip),
    Model("squeeze_excitation", SqueezeExcitation, _randn(4, 128, 14, 14)),
    Model("top2_experts", TopTwoExperts, _randn(128, 256)),
    Model("losses", Losses, _logits_and_targets),
    Model("masked_attention", MaskedAttention, _sequence_and_mask),
    Model("shuffles", Shuffles, _randn(4, 16, 32, 32)),
    Model("autocast_mlp", AutocastMlp, _randn(256, 256)),
]}
