"""The suite graphs written in PyTorch: kernel counts through ``loopnest.explain`` and results."""
import pytest
import torch
import torch.nn.functional as F

import loopnest
from conftest import assert_close


def rmsnorm_bf16(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w


def logsumexp_ce(x, t):
    return (torch.logsumexp(x, 1) - x.gather(1, t[:, None]).squeeze(1)).mean()


R, C = 24, 96
SUITE = {
    "gelu_scale_bias": (lambda x, s, b: F.gelu(x * s + b), lambda: (torch.randn(R, C), torch.randn(C), torch.randn(C))),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(R, C),)),
    "layernorm": (lambda x, w, b: F.layer_norm(x, (C,), w, b), lambda: (torch.randn(R, C), torch.randn(C), torch.randn(C))),
    "rmsnorm_bf16": (rmsnorm_bf16, lambda: (torch.randn(R, C, dtype=torch.bfloat16), torch.randn(C, dtype=torch.bfloat16))),
    "add_layernorm": (lambda x, y, w, b: F.layer_norm(x + y, (C,), w, b),
                      lambda: (torch.randn(R, C), torch.randn(R, C), torch.randn(C), torch.randn(C))),
    "sum_dim0": (lambda x: x.sum(0), lambda: (torch.randn(R, C),)),
    "full_absmax": (lambda x: x.abs().amax(), lambda: (torch.randn(R * C * 3),)),
    "var_mean": (lambda x: torch.var_mean(x, dim=1), lambda: (torch.randn(R, C),)),
    "logsumexp_ce": (logsumexp_ce, lambda: (torch.randn(R, C), torch.randint(0, C, (R,)))),
    "bias_gelu_bf16": (lambda x, b: F.gelu(x + b, approximate="tanh"),
                       lambda: (torch.randn(R, C, dtype=torch.bfloat16), torch.randn(C, dtype=torch.bfloat16))),
}
# The row losses and their mean reduce over different loops (each row, then all rows): the
# mean is a second kernel. Every other suite graph is one kernel, as with Inductor's C++ backend.
EXPECTED = {"logsumexp_ce": 2}


@pytest.mark.parametrize("name", sorted(SUITE))
def test_suite_graph_is_one_kernel_and_matches_eager(name):
    fn, make = SUITE[name]
    torch.manual_seed(0)
    args = make()
    explanation = loopnest.explain(fn, *args, backend="cpp")
    assert explanation.num_kernels == EXPECTED.get(name, 1), str(explanation)
    assert not explanation.fallbacks, str(explanation)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"})(*args)
    want = fn(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        if w.dtype == torch.bfloat16:
            torch.testing.assert_close(g, w, atol=2e-2, rtol=1.6e-2)  # one bf16 rounding apart
        else:
            assert_close(g, w, name)
