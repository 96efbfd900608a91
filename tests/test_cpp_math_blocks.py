"""C++ math in blocks where the loop around it cannot vectorize as written
(``backends/cpp/vector_blocks.py``, ``row_lanes.inner_lanes``): a sum over two reduced dims that
calls vector math runs its innermost dim in lane arrays, and a libm function with a libmvec
variant runs on a block's array. Each case matches eager, and its kernel is written so."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp.ops import has_libmvec
from conftest import assert_close


def _kl(logits, other):
    return F.kl_div(F.log_softmax(logits, -1), F.softmax(other, -1), reduction="batchmean")


def _shuffled_elu(x):
    y = F.pixel_shuffle(x, 2)
    b, c, h, w = y.shape
    y = y.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)
    return F.elu(y) + F.leaky_relu(y, 0.1)


def _kernel_sources(fn, *args) -> list[str]:
    info = ln.explain(fn, *args, backend="cpp", tune="off").graphs[0]
    return [k.source_path.read_text() for k in info.kernels]


@pytest.mark.usefixtures("fresh_dynamo")  # each shape compiled static, not after automatic dynamic
@pytest.mark.parametrize("shape, blocks", [((64, 1000), True), ((5, 37), False), ((3, 16), False)])
def test_a_sum_over_rows_of_softmax_terms_matches_eager(shape, blocks):
    """KL divergence with batchmean: one sum over (rows, columns) of terms that read each row's
    statistics and call exp and log; rows of 1000 (full lane steps, a rest, a scalar tail) take
    log on blocks, rows of 37 and 16 (one vector) call libmvec's vector log from their simd loop."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(shape, generator=g), torch.randn(shape, generator=g) * 3
    got = ln.compile_fx(make_fx(_kl)(a, b), [a, b], backend="cpp", tune="off")(a, b)
    assert_close(got, _kl(a, b), "kl_div")
    sources = _kernel_sources(_kl, a, b)
    if blocks:
        full = [s for s in sources if "log_(v)" in s]
        assert full and all("lnv::blocks<" in s for s in full)
    else:
        assert any("ln_logf(" in s.split("void k_", 1)[1] for s in sources)


@pytest.mark.skipif(not has_libmvec(), reason="no libmvec: expm1 is called per element")
@pytest.mark.parametrize("shape", [(2, 16, 8, 8), (1, 8, 5, 3)])
def test_libm_math_after_a_pixel_shuffle_runs_on_blocks(shape):
    """The shuffle's reads (``w / 2``, ``w % 2``) keep the element loop scalar; ELU's expm1 runs
    on a block's array, through libmvec's vector variant."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    x[0, 0, 0, 0] = float("nan")
    got = ln.compile_fx(make_fx(_shuffled_elu)(x), [x], backend="cpp", tune="off")(x)
    assert_close(got, _shuffled_elu(x), "elu after pixel_shuffle")
    (source,) = _kernel_sources(_shuffled_elu, x)
    assert "= expm1f(lnv_a" in source
