"""Matmuls over permuted rows run on the rows in memory order (lowering/matmul_rows.py): the
copy into the permuted order is gone, the consumers read the product in that order, and the
results are eager's."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest
from conftest import assert_close
from loopnest.lowering.matmul_rows import rows_in_memory_order

aten = torch.ops.aten
B, S, H, DH, N = 3, 5, 2, 4, 6


def _sequence_first_projection(x, w, b):
    """What nn.MultiheadAttention(batch_first=True) does off its fast path: the batch-first input
    goes sequence-first for its projection, whose result a pointwise op reads."""
    s, bsz, d = x.shape[1], x.shape[0], x.shape[2]
    return torch.relu((x.transpose(0, 1).reshape(s * bsz, d) @ w).view(s, bsz, -1) + b)


def _batch_first_heads_out(y, w, b, r):
    """Its out-projection: heads (batch, heads, seq, dim) laid out batch-first in memory, viewed
    sequence-first for an addmm whose result goes back batch-first into a residual add."""
    s, bsz = y.shape[2], y.shape[0]
    flat = y.permute(2, 0, 1, 3).reshape(s * bsz, -1)
    return torch.addmm(b, flat, w).view(s, bsz, -1).transpose(0, 1) + r


def _matmul_lhs_source(gm):
    (mm,) = [n for n in gm.graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    lhs = mm.args[0] if mm.target is aten.mm.default else mm.args[1]
    while lhs.op == "call_function" and lhs.target in (aten.view.default, aten.permute.default):
        lhs = lhs.args[0]
    return lhs


def test_a_projection_of_transposed_rows_reads_the_input_as_it_lies(backend):
    x, w, b = torch.randn(B, S, H * DH), torch.randn(H * DH, N), torch.randn(N)
    gm = make_fx(_sequence_first_projection)(x, w, b)
    before = gm.code
    rewritten = rows_in_memory_order(gm)
    assert gm.code == before, "the caller's graph is left alone"
    assert _matmul_lhs_source(rewritten).op == "placeholder", "no copy of x before the matmul"
    assert not any(n.target is aten.clone.default and n.args[0].op == "call_function"
                   and n.args[0].args[0].op == "placeholder" for n in rewritten.graph.nodes)
    fn = loopnest.compile_fx(gm, [x, w, b], backend=backend.name, tune="off")
    assert_close(fn(x, w, b), _sequence_first_projection(x, w, b), "sequence-first projection")


def test_an_out_projection_of_batch_first_heads_runs_on_them_as_they_lie(backend):
    y = torch.randn(B, S, H, DH).transpose(1, 2)  # (batch, heads, seq, dim), batch-first in memory
    w, b, r = torch.randn(H * DH, N), torch.randn(N), torch.randn(B, S, N)
    gm = make_fx(_batch_first_heads_out)(y, w, b, r)
    rewritten = rows_in_memory_order(gm)
    assert _matmul_lhs_source(rewritten).op == "placeholder", "the heads are read where they lie"
    fn = loopnest.compile_fx(gm, [y, w, b, r], backend=backend.name, tune="off")
    assert_close(fn(y, w, b, r), _batch_first_heads_out(y, w, b, r), "out-projection")


def test_a_product_that_no_kernel_reads_keeps_the_copy():
    """A product returned as it is (or fed to another matmul) would need a copy of its own, as
    large as the output: the graph is left as it is."""
    x, w = torch.randn(B, S, 8), torch.randn(8, 24)
    returned = make_fx(lambda x, w: x.transpose(0, 1).reshape(-1, 8) @ w)(x, w)
    assert rows_in_memory_order(returned) is returned
    chained = make_fx(lambda x, w: (x.transpose(0, 1).reshape(-1, 8) @ w) @ w.T)(x, w)
    assert rows_in_memory_order(chained) is chained


def test_columns_that_are_not_innermost_in_memory_keep_the_copy():
    x, w = torch.randn(8, S, B), torch.randn(8, N)  # the contracted dim is outermost
    gm = make_fx(lambda x, w: torch.relu(x.permute(2, 1, 0).reshape(-1, 8) @ w))(x, w)
    assert rows_in_memory_order(gm) is gm


def test_an_addmm_whose_bias_has_a_row_for_each_row_keeps_the_copy(backend):
    """Rows of the bias matrix pair with rows of the product: the rows cannot move alone."""
    x, w, bias = torch.randn(B, S, 8), torch.randn(8, N), torch.randn(S * B, N)

    def f(x, w, bias):
        return torch.relu(torch.addmm(bias, x.transpose(0, 1).reshape(-1, 8), w))
    gm = make_fx(f)(x, w, bias)
    assert rows_in_memory_order(gm) is gm
    fn = loopnest.compile_fx(gm, [x, w, bias], backend=backend.name, tune="off")
    assert_close(fn(x, w, bias), f(x, w, bias), "addmm with a full bias")
