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
    passes: int = 0  # training rows: passes over the largest input one step must make (0: inference)
    rounds_to: torch.dtype | None = None  # a 16-bit dtype the computation rounds through (rmsnorm_bf16)

    @property
    def train(self) -> bool:
        """Timed as one training step (``training_step``) rather than one call."""
        return self.passes > 0

    def inputs(self, size_class: str = "cpu", device: str = "cpu", seed: int = 0) -> tuple:
        """Example inputs at ``size_class`` sizes, on ``device``."""
        if size_class not in self.sizes:
            raise ValueError(f"size class must be one of {sorted(self.sizes)}, got {size_class!r}")
        rows, cols = self.sizes[size_class]
        gen = torch.Generator().manual_seed(seed)
        return tuple(t.to(device) for t in self.make_inputs(rows, cols, gen))

    def train_inputs(self, size_class: str = "cpu", device: str = "cpu", seed: int = 0) -> tuple:
        """``inputs`` with every floating-point input (input and weights) requiring grad."""
        return tuple(t.requires_grad_() if t.is_floating_point() else t
                     for t in self.inputs(size_class, device, seed))

    def min_bytes(self, args: tuple, outputs) -> int:
        """Bytes one call (or training step) must move at least.

        Inference: every input read once and every output written once. Training: ``passes``
        over the largest input (layernorm, RMSNorm, softmax: the forward reads x and writes y,
        the backward reads x or y and grad_out and writes grad_x, 5 passes; cross-entropy: the
        forward reads the logits, the backward reads them again and writes their gradient, 3),
        plus each other floating input read by the forward and the backward and its gradient
        written (3 times its size), and each integer input (targets) read twice. Per-row
        statistics a forward may save for the backward are not counted."""
        if not self.train:
            return _nbytes(args) + _nbytes(outputs)
        big = max(args, key=lambda t: t.numel())
        rest = [t for t in args if t is not big]
        return (self.passes * _nbytes([big]) + 3 * _nbytes([t for t in rest if t.is_floating_point()])
                + 2 * _nbytes([t for t in rest if not t.is_floating_point()]))


def _nbytes(tensors) -> int:
    tensors = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
    return sum(t.numel() * t.element_size() for t in tensors)


def grad_output(out: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """The gradient a training step feeds back: random normal values shaped like ``out``, or the
    scalar 1 when ``out`` is a loss."""
    if out.dim() == 0:
        return torch.ones_like(out)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(out.shape, generator=gen).to(dtype=out.dtype, device=out.device)


# Largest ||got - want|| / ||want|| against float64 on the same input values, per result dtype.
# float32: forward results 1e-5; gradients 1e-4, since a weight gradient sums 32768 rows and a
# float32 tree sum of n terms of random sign errs by up to about log2(n) * 2**-24 * sum|t| /
# |sum t| ~ 15 * 6e-8 * sqrt(n) = 1.6e-4 per element (the norm over all elements errs less).
# bfloat16/float16: 1e-2, a few roundings of the stored result (2**-9 relative each, bf16) and of
# the 16-bit intermediates the graph itself rounds (the normalized x before * w in RMSNorm); the
# issue's "1.25 at 0.02" was an elementwise check on sums near 200, where one bf16 step is 1.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 1e-2, torch.float16: 1e-2}
GRAD_TOLERANCE = {**TOLERANCE, torch.float32: 1e-4}


def float64_results(workload: "Workload", args: tuple) -> tuple:
    """The workload's results on ``args`` computed in float64 (a training row: the output and
    the gradients, with ``grad_output`` of the float64 output cast back and forth so both sides
    feed back the same values)."""
    wide = tuple(a.detach().double().requires_grad_(a.requires_grad) if a.is_floating_point() else a
                 for a in args)
    if not workload.train:
        with torch.no_grad():
            out = workload.fn(*wide)
        return out if isinstance(out, tuple) else (out,)
    with torch.no_grad():
        narrow = workload.fn(*[a.detach() for a in args])
    return training_step(workload.fn, wide, grad_output(narrow).double())


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``||got - want|| / ||want||`` in float64 (0 when both are zero)."""
    diff = (got.double() - want.double()).norm().item()
    return diff / max(want.double().norm().item(), 1e-300)


def result_dtypes(workload: "Workload", args: tuple) -> list[torch.dtype]:
    """The dtypes of eager's results on ``args`` (a training row: its output, then the gradient
    of each argument that requires grad)."""
    with torch.no_grad():
        out = workload.fn(*[a.detach() for a in args])
    if workload.train:
        return [out.dtype] + [a.dtype for a in args if a.requires_grad]
    return [o.dtype for o in (out if isinstance(out, tuple) else (out,))]


def mismatch(got, want: tuple, dtypes: list, train: bool, rounds_to: torch.dtype | None = None) -> str | None:
    """Why results ``got`` do not match ``want`` (``float64_results`` on the same inputs), or None:
    each floating result within ``TOLERANCE`` in ``relative_error`` (gradients of a training step:
    ``GRAD_TOLERANCE``) and of dtype ``dtypes[k]``, integers exactly. ``rounds_to``: a 16-bit
    dtype the computation rounds through on the way (``Workload.rounds_to``); every result is then
    allowed that dtype's tolerance too, since a float32 ``bf16(x_hat) * w`` carries bf16 rounding
    flips wherever float32 differences move ``x_hat`` across a rounding boundary."""
    got = got if isinstance(got, tuple) else (got,)
    floor = TOLERANCE[rounds_to] if rounds_to is not None else 0.0
    for k, (g, w, d) in enumerate(zip(got, want, dtypes, strict=True)):
        if not w.dtype.is_floating_point:
            if not torch.equal(g, w):
                return f"result {k}: integers differ"
            continue
        err = relative_error(g, w)
        if g.dtype != d or not err < max(floor, (GRAD_TOLERANCE if train and k else TOLERANCE)[g.dtype]):
            return f"result {k} ({g.dtype}): relative error {err:.3g}"
    return None


def training_step(fn: Callable, args: tuple, grad_out: torch.Tensor | None = None) -> tuple:
    """One step: ``out = fn(*args)``, then the gradients of the arguments that require grad for
    ``grad_out`` (``grad_output(out)`` when None); returns ``(out, *gradients)``, detached."""
    out = fn(*args)
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad(out, wrt, grad_output(out) if grad_out is None else grad_out)
    return (out.detach(), *grads)


def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def _rows(rows, cols, gen):
    return (_randn(gen, rows, cols),)


def _rows_wb(rows, cols, gen):
    return _randn(gen, rows, cols), _randn(gen, cols), _randn(gen, cols)


def _sizes(gpu, cpu, tiny=(64, 96), cache=None) -> dict[str, tuple[int, int]]:
    """Sizes by class; ``cache`` defaults to the CPU rows / 16 (2-8 MB for the CPU sizes here)."""
    cache = cache or (max(1, cpu[0] // 16), cpu[1])  # tests/test_workload_sizes.py checks 2-8 MB
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
    Workload("gelu_scale_bias", gelu_scale_bias, _rows_wb, _sizes((32768, 8192), (8192, 4096), cache=(256, 4096)),
             "gelu(x*s+b)"),
    Workload("softmax", softmax, _rows, _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)), "softmax(x, -1)"),
    Workload("layernorm", layernorm, _rows_wb, _sizes((32768, 4096), (8192, 2048), cache=(512, 2048)),
             "layer_norm(x, (C,), w, b)"),
    Workload("rmsnorm_bf16", rmsnorm_bf16,
             lambda r, c, g: (_randn(g, r, c, dtype=torch.bfloat16), _randn(g, c, dtype=torch.bfloat16)),
             _sizes((32768, 4096), (8192, 2048), cache=(1024, 2048)),
             "(x.float()*rsqrt(mean(x.float()^2)+1e-6)).to(bf16)*w", rounds_to=torch.bfloat16),
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
    Workload("attn_softmax", attn_softmax, _attn_inputs,
             _sizes((32 * 2048, 2048), (8 * 1024, 1024), (2 * 48, 48), (4 * 512, 512)),
             "softmax(scores*0.125 + causal_mask, -1) over heads x queries x keys"),
    Workload("swiglu", swiglu, lambda r, c, g: (_randn(g, r, c), _randn(g, r, c)),
             _sizes((32768, 8192), (8192, 4096), cache=(128, 4096)), "silu(g) * a"),
    Workload("residual_rmsnorm", residual_rmsnorm,
             lambda r, c, g: (_randn(g, r, c), _randn(g, r, c), _randn(g, c)),
             _sizes((32768, 4096), (8192, 2048), cache=(256, 2048)), "h = x + r; (h, h*rsqrt(mean(h^2)+1e-6)*w)"),
]}
TEN = ("gelu_scale_bias", "softmax", "layernorm", "rmsnorm_bf16", "add_layernorm", "sum_dim0",
       "full_absmax", "var_mean", "logsumexp_ce", "bias_gelu_bf16")


def log_softmax(x):
    return torch.log_softmax(x, -1)


def cross_entropy_bf16(logits, target):
    """Llama-style loss: the bf16 logits upcast, then the mean cross-entropy."""
    return F.cross_entropy(logits.float(), target)


def mean_mid(x):
    return x.mean(1)


def _logits_bf16(rows, cols, gen):
    return _randn(gen, rows, cols, dtype=torch.bfloat16), torch.randint(0, cols, (rows,), generator=gen)


def _norm_bf16(rows, cols, gen):
    return _randn(gen, rows, cols, dtype=torch.bfloat16), _randn(gen, cols, dtype=torch.bfloat16)


LLAMA3_VOCAB = 128256
WORKLOADS.update({w.name: w for w in [
    Workload("wide_softmax", softmax, _rows, _sizes((1024, 131072), (64, 131072), (4, 36000), cache=(8, 131072)),
             "softmax(x, -1) over rows longer than one SM holds"),
    Workload("ce_vocab_bf16", cross_entropy_bf16, _logits_bf16,
             _sizes((4096, LLAMA3_VOCAB), (256, LLAMA3_VOCAB), (6, 35000), cache=(16, LLAMA3_VOCAB)),
             "cross_entropy(logits.float(), target), bf16 logits over the Llama-3 vocabulary"),
    Workload("few_rows_logsoftmax", log_softmax, _rows,
             _sizes((128, 262144), (16, 262144), (3, 40000), cache=(4, 262144)),
             "log_softmax(x, -1) over fewer rows than SMs"),
    Workload("mean_mid", mean_mid, lambda r, c, g: (_randn(g, r, 4 * c, c),),
             _sizes((32, 512), (16, 256), (3, 24), cache=(4, 256)),
             "x.mean(1) on (rows, 4*cols, cols): the middle dim"),
    Workload("layernorm_train", layernorm, _rows_wb, _sizes((32768, 4096), (4096, 2048), cache=(512, 2048)),
             "layer_norm forward + backward (grads of x, w, b)", passes=5),
    Workload("rmsnorm_train_bf16", rmsnorm_bf16, _norm_bf16, _sizes((32768, 4096), (4096, 2048), cache=(1024, 2048)),
             "rmsnorm_bf16 forward + backward (grads of x, w)", passes=5, rounds_to=torch.bfloat16),
    Workload("softmax_train", softmax, _rows, _sizes((32768, 4096), (4096, 2048), cache=(512, 2048)),
             "softmax(x, -1) forward + backward (grad of x)", passes=5),
    Workload("ce_train_bf16", cross_entropy_bf16, _logits_bf16,
             _sizes((4096, LLAMA3_VOCAB), (256, LLAMA3_VOCAB), (6, 35000), cache=(16, LLAMA3_VOCAB)),
             "cross_entropy(logits.float(), target) forward + backward (grad of the bf16 logits)", passes=3),
]})
NEW_ROWS = ("wide_softmax", "ce_vocab_bf16", "few_rows_logsoftmax", "mean_mid")
TRAIN_ROWS = ("layernorm_train", "rmsnorm_train_bf16", "softmax_train", "ce_train_bf16")


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

