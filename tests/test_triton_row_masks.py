"""Triton row reductions whose rows fill the block exactly but whose row count does not (a row
mask alone, ``[XBLOCK, 1]``): Welford's count covers the whole tile, so a layernorm or a variance
over such rows divides by the row's length, not by one (dynamic row counts, or static counts
that are not a multiple of the rows per program)."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from conftest import assert_close

G = torch.Generator().manual_seed(11)
W, B = torch.randn(64, generator=G), torch.randn(64, generator=G)
CASES = {
    "layernorm": lambda x: F.layer_norm(x, (64,), W, B),
    "var_mean": lambda x: torch.var_mean(x, -1),
    "layernorm softmax": lambda x: F.layer_norm(x, (64,)).softmax(-1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_of_a_whole_block_with_a_row_mask(name):
    fn = CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="loopnest", dynamic=True, options={"backend": "triton", "tune": "off"})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        for rows in (64, 61, 7, 130):
            x = torch.randn(rows, 64, generator=G).to(device) * 3 + 1
            got, want = compiled(x), fn(x)
            for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
                assert_close(g.cpu(), w.cpu(), f"{name}, {rows} rows")


@pytest.mark.parametrize("rows", [1001, 37])
def test_static_rows_that_do_not_fill_the_last_program(rows):
    """Static sizes too: 1001 rows of 64 put several rows in a program and mask the last ones."""
    fn = CASES["layernorm"]
    x = torch.randn(rows, 64, generator=G) * 3 + 1
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="triton", tune="off")(x)
    assert_close(got, fn(x), f"layernorm, {rows} rows")
