"""A TransformerEncoderLayer forward (eval) compiles to no more kernels than Inductor's."""
import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import loopnest
from loopnest.lowering.short_attention import MAX_KEYS


# Inductor calls flash attention at every length. So do we above MAX_KEYS; at or below it, our
# attention is two matmuls around one softmax kernel, followed by a copy that lays the output out
# as flash attention's is: two kernels Inductor does not have.
@pytest.mark.parametrize("length, attention_kernels", [(MAX_KEYS + 4, 0), (16, 2)])
def test_transformer_encoder_layer_kernel_count_vs_inductor(length, attention_kernels):
    torch.backends.mha.set_fastpath_enabled(False)  # the fused fast path would hide the graph
    torch._dynamo.reset()  # no automatic-dynamic sizes left over from other tests
    try:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
        x = torch.randn(2, length, 64)
        with torch.no_grad():
            ours = loopnest.explain(layer, x).num_kernels
            torch._dynamo.reset()
            _, code = run_and_get_code(torch.compile(layer), x)
        theirs = len(set(re.findall(r"(cpp_fused_\w+) = async_compile", "\n".join(code))))
        assert theirs > 0
        assert ours - attention_kernels <= theirs, f"loopnest {ours} kernels, Inductor {theirs}"
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
        torch._dynamo.reset()


def test_explain_reports_intermediate_memory_with_and_without_reuse():
    torch.backends.mha.set_fastpath_enabled(False)
    torch._dynamo.reset()
    try:
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
        with torch.no_grad():
            graph = loopnest.explain(layer, torch.randn(2, 16, 64)).graphs[0]
        assert 0 < graph.intermediate_bytes <= graph.intermediate_bytes_no_reuse
        assert "bytes with buffer reuse" in str(loopnest.explain(torch.sin, torch.randn(4)))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
        torch._dynamo.reset()
