"""Built-in workloads: torch functions with example inputs at GPU, CPU, cache and tiny sizes.

The ``cache`` sizes hold 2-8 MB of inputs: they fit in L2/L3, so compute efficiency shows on a
few cores the way it does on a many-core host, where the data spreads across many caches.

Each is compiled through the ATen lowering (``loopnest.compile_fx``), so tuning sees the kernels
a PyTorch user gets. ``resolve("module:function")`` loads a user workload: a function of no
arguments returning ``(fn, example_inputs)``. Benches import ``WORKLOADS`` from here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Workload:
    """``fn(*inputs)``; ``make_inputs(rows, cols, gen)`` builds inputs from a row/column size."""

    name: str
    fn: Callable
    make_inputs: Callable[[int, int, torch.Generator], tuple]
    sizes: dict[str, tuple[int, int]]  # size class -> (rows, cols); cols=0 for 1-D workloads
    about: str

    def inputs(self, size_class: str = "cpu", device: str = "cpu", seed: int = 0) -> tuple:
        """Example inputs at ``size_class`` sizes, on ``device``."""
        if size_class not in self.sizes:
            raise ValueError(f"size class must be one of {sorted(self.sizes)}, got {size_class!r}")
        rows, cols = self.sizes[size_class]
        gen = torch.Generator().manual_seed(seed)
        return tuple(t.to(device) for t in self.make_inputs(rows, cols, gen))


def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def _rows(rows, cols, gen):
    return (_randn(gen, rows, cols),)


def _rows_wb(rows, cols, gen):
    return _randn(gen, rows, cols), _randn(gen, cols), _randn(gen, cols)


def _sizes(gpu, cpu, tiny=(64, 96), cache=None) -> dict[str, tuple[int, int]]:
    """Sizes by class; ``cache`` defaults to the CPU rows / 16 (2-8 MB for the CPU sizes here)."""
    cache = cache or (max(1, cpu[0] // 16), cpu[1])
    return {"gpu": gpu, "cpu": cpu, "cache": cache, "tiny": tiny}


def gelu_scale_bias(x, s, b):
    return F.gelu(x * s + b)


def softmax(x):
    return torch.softmax(x, -1)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rmsnorm_bf16(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w


def add_layernorm(x, y, w, b):
    return F.layer_norm(x + y, (x.shape[-1],), w, b)


def sum_dim0(x):
    return x.sum(0)


def full_absmax(x):
    return x.abs().amax()


def var_mean(x):
    return torch.var_mean(x, dim=1)


def logsumexp_ce(x, t):
    return (torch.logsumexp(x, 1) - x.gather(1, t[:, None]).squeeze(1)).mean()


def bias_gelu_bf16(x, b):
    return F.gelu(x + b, approximate="tanh")


def attn_softmax(scores, mask):
    """Scaled, masked attention probabilities (heads x queries x keys)."""
    return torch.softmax(scores * 0.125 + mask, -1)


def swiglu(a, g):
    return F.silu(g) * a


def residual_rmsnorm(x, r, w):
    """A transformer block's residual add followed by RMSNorm (returns both)."""
    h = x + r
    return h, h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _attn_inputs(rows, cols, gen):
    heads = max(1, rows // cols)
    mask = torch.triu(torch.full((cols, cols), float("-inf")), 1)
    return _randn(gen, heads, cols, cols), mask


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("gelu_scale_bias", gelu_scale_bias, _rows_wb, _sizes((32768, 8192), (8192, 4096), cache=(256, 4096)), "gelu(x*s+b)"),
    Workload("softmax", softmax, _rows, _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)), "softmax(x, -1)"),
    Workload("layernorm", layernorm, _rows_wb, _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)),
             "layer_norm(x, (C,), w, b)"),
    Workload("rmsnorm_bf16", rmsnorm_bf16,
             lambda r, c, g: (_randn(g, r, c, dtype=torch.bfloat16), _randn(g, c, dtype=torch.bfloat16)),
             _sizes((32768, 4096), (8192, 2048), cache=(1024, 2048)),
             "(x.float()*rsqrt(mean(x.float()^2)+1e-6)).to(bf16)*w"),
    Workload("add_layernorm", add_layernorm,
             lambda r, c, g: (_randn(g, r, c), _randn(g, r, c), _randn(g, c), _randn(g, c)),
             _sizes((32768, 4096), (8192, 2048), cache=(256, 2048)), "layer_norm(x+y, (C,), w, b)"),
    Workload("sum_dim0", sum_dim0, _rows, _sizes((32768, 8192), (8192, 4096), cache=(256, 4096)), "x.sum(0)"),
    Workload("full_absmax", full_absmax, lambda r, c, g: (_randn(g, r),),
             _sizes((1 << 28, 0), (1 << 25, 0), (5000, 0), cache=(1 << 20, 0)), "x.abs().amax()"),
    Workload("var_mean", var_mean, _rows, _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)), "var_mean(x, dim=1)"),
    Workload("logsumexp_ce", logsumexp_ce,
             lambda r, c, g: (_randn(g, r, c), torch.randint(0, c, (r,), generator=g)),
             _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)),
             "(logsumexp(x,1) - x.gather(1,t[:,None]).squeeze(1)).mean()"),
    Workload("bias_gelu_bf16", bias_gelu_bf16,
             lambda r, c, g: (_randn(g, r, c, dtype=torch.bfloat16), _randn(g, c, dtype=torch.bfloat16)),
             _sizes((8192, 16384), (4096, 4096), cache=(512, 4096)), "gelu(x+b, approximate='tanh'), bf16"),
    Workload("attn_softmax", attn_softmax, _attn_inputs, _sizes((32 * 2048, 2048), (8 * 1024, 1024), (2 * 48, 48), (4 * 512, 512)),
             "softmax(scores*0.125 + causal_mask, -1) over heads x queries x keys"),
    Workload("swiglu", swiglu, lambda r, c, g: (_randn(g, r, c), _randn(g, r, c)),
             _sizes((32768, 8192), (8192, 4096), cache=(128, 4096)), "silu(g) * a"),
    Workload("residual_rmsnorm", residual_rmsnorm,
             lambda r, c, g: (_randn(g, r, c), _randn(g, r, c), _randn(g, c)),
             _sizes((32768, 4096), (8192, 2048), cache=(256, 2048)), "h = x + r; (h, h*rsqrt(mean(h^2)+1e-6)*w)"),
]}
TEN = ("gelu_scale_bias", "softmax", "layernorm", "rmsnorm_bf16", "add_layernorm", "sum_dim0",
       "full_absmax", "var_mean", "logsumexp_ce", "bias_gelu_bf16")


def resolve(spec: str) -> Workload | Callable[[], tuple]:
    """A built-in workload by name, or the ``module:function`` returning ``(fn, inputs)``."""
    if spec in WORKLOADS:
        return WORKLOADS[spec]
    module, sep, attr = spec.partition(":")
    if not sep:
        raise ValueError(f"unknown workload {spec!r}: use one of {', '.join(WORKLOADS)} or module:function")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load workload {spec!r}: {exc}") from None
    if not callable(factory):
        raise ValueError(f"workload {spec!r} is not callable")
    return factory

