"""Matrix products over a permuted copy of a tensor run on the tensor as it lies
(``lowering/row_order.py``): the copy kernel goes away and the results stay eager's."""
import os
import subprocess
import sys

import pytest
import torch

import loopnest as ln
from loopnest.lowering import row_order

L, N, K, M = 24, 5, 16, 12


def compiled_and_kernels(fn, *args):
    """``fn`` through ``torch.compile(backend="loopnest")``, and its number of loopnest kernels."""
    kernels = ln.explain(fn, *args, backend="cpp").num_kernels
    return torch.compile(fn, backend="loopnest", options={"backend": "cpp"}), kernels


def scaled_randn(*shape):
    return torch.randn(*shape) * 3


def test_mm_of_a_transposed_copy_reads_the_input_in_place():
    x, w = scaled_randn(N, L, K), scaled_randn(M, K)

    def fn(x, w):  # nn.MultiheadAttention(batch_first=True)'s in-projection, then a kernel
        return (torch.mm(x.transpose(0, 1).contiguous().view(L * N, K), w.t()).view(L, N, M) + 1).relu()

    compiled, kernels = compiled_and_kernels(fn, x, w)
    assert kernels == 1  # the add and relu; no copy of x
    torch.testing.assert_close(compiled(x, w), fn(x, w))


@pytest.mark.parametrize("bias_shape, rewritten", [((M,), True), ((1, M), True), ((L * N, M), False)])
def test_addmm_with_a_bias_row_is_rewritten_and_a_full_bias_is_not(bias_shape, rewritten):
    x, w, b = scaled_randn(N, L, K), scaled_randn(K, M), scaled_randn(*bias_shape)

    def fn(x, w, b):
        flat = x.permute(1, 0, 2).contiguous().view(L * N, K)
        return torch.addmm(b, flat, w).view(L, N, M) * 2

    compiled, kernels = compiled_and_kernels(fn, x, w, b)
    assert kernels == (1 if rewritten else 2)
    torch.testing.assert_close(compiled(x, w, b), fn(x, w, b))


def test_a_copy_read_elsewhere_is_kept_and_a_permuted_last_dim_is_not_rewritten():
    x, w = scaled_randn(N, L, K), scaled_randn(K, M)

    def shared(x, w):
        copy = x.transpose(0, 1).contiguous()
        return torch.mm(copy.view(L * N, K), w), copy * 2

    def last_dim_moved(x, w):  # rows of the copy are not rows of x
        return torch.mm(x.permute(0, 2, 1).contiguous().view(N * K, L), x[0, :, :M])

    for fn in (shared, last_dim_moved):
        compiled, _ = compiled_and_kernels(fn, x, w)
        torch.testing.assert_close(compiled(x, w), fn(x, w))


def test_multihead_attention_batch_first_matches_eager_without_the_input_copy(monkeypatch):
    mha = torch.nn.MultiheadAttention(K, 2, batch_first=True).eval()
    x = scaled_randn(N, L, K)

    def fn(x):
        return mha(x, x, x, need_weights=False)[0]

    with torch.no_grad():  # inference: in training the copy is saved for the backward, and stays
        compiled, kernels = compiled_and_kernels(fn, x)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
        torch._dynamo.reset()
        monkeypatch.setattr(row_order, "find", lambda node: None)
        assert ln.explain(fn, x, backend="cpp").num_kernels == kernels + 1  # the copy of x


def test_triton_backend_reads_the_product_in_source_order(tmp_path):
    """The rewrite is in the lowering: the Triton backend (CPU tensors in Triton's interpreter)
    reads the permuted view of the product as the C++ one does."""
    code = f'''
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch, loopnest as ln
x, w, b = torch.randn({N}, {L}, {K}) * 3, torch.randn({K}, {M}), torch.randn({M})
def fn(x, w, b):
    return (torch.addmm(b, x.transpose(0, 1).contiguous().view({L * N}, {K}), w).view({L}, {N}, {M}) + 1).relu()
with torch.no_grad():
    assert ln.explain(fn, x, w, b, backend="triton").num_kernels == 1
    got = torch.compile(fn, backend="loopnest", options={{"backend": "triton"}})(x, w, b)
torch.testing.assert_close(got, fn(x, w, b))
print("ok")
'''
    env = dict(os.environ, LOOPNEST_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"
