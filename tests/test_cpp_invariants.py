"""C++ pointwise kernels compute what does not change along their innermost loop once before it
(``codegen._invariant_values``): a channel's scale from its statistics and weight is not
recomputed per element. Results match eager; the square root sits outside the vector loop."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from conftest import assert_close

G = torch.Generator().manual_seed(6)
W, B, MEAN, VAR = torch.randn(16, generator=G), torch.randn(16, generator=G), torch.randn(16, generator=G), \
    torch.rand(16, generator=G) + 0.1
CASES = {
    "group norm + silu": lambda x: F.silu(F.group_norm(x, 4, W, B)),
    "batch norm (eval) + relu": lambda x: F.relu(F.batch_norm(x, MEAN, VAR, W, B, training=False)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(2, 16, 8, 8), (3, 16, 5, 7)])
def test_channel_scales_are_computed_once_per_channel(name, shape):
    fn = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    x[0, 1, 2, 3] = float("nan")
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    assert_close(got, fn(x), name)
    torch._dynamo.reset()  # static sizes for each shape
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    body = info.kernels[-1].source_path.read_text()
    body = body[body.rindex('extern "C" LN_VECTORS_'):]
    loop = body.index("#pragma omp simd")
    assert "sqrt(" in body[:loop] and "sqrt(" not in body[loop:]


def test_symbolic_rows_hoist_only_where_the_loop_runs():
    """With symbolic sizes a row of 0 elements skips what is hoisted: nothing reads ``w``'s row
    there (its tensor may be empty), and every other row gets its value."""
    fn = lambda x, w: x * (w.abs().sqrt() + 1.0)  # noqa: E731
    compiled = torch.compile(fn, backend="loopnest", options={"backend": "cpp", "tune": "off"}, dynamic=True)
    gen = torch.Generator().manual_seed(8)
    for rows, cols in [(4, 7), (5, 0), (3, 33)]:
        x, w = torch.randn(rows, cols, generator=gen), torch.randn(rows, 1, generator=gen)
        assert_close(compiled(x, w), fn(x, w), f"{rows}x{cols}")


@pytest.mark.parametrize("channels", [16, 3])
def test_channel_scales_along_the_innermost_dim_go_into_a_table(channels):
    """Channels-last, the channel is the innermost loop: the scale is computed once per channel
    into a table before the parallel loops, not per element (``codegen.inner_tables``)."""
    w, b, mean, var = (torch.randn(channels, generator=G), torch.randn(channels, generator=G),
                       torch.randn(channels, generator=G), torch.rand(channels, generator=G) + 0.1)
    fn = lambda x: F.relu6(F.batch_norm(x, mean, var, w, b, training=False))  # noqa: E731
    x = torch.randn(2, channels, 5, 7, generator=torch.Generator().manual_seed(3)).contiguous(
        memory_format=torch.channels_last)
    x[1, 0, 2, 3] = float("nan")
    got = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")(x)
    assert_close(got, fn(x), "batch norm, channels-last")
    torch._dynamo.reset()
    info = ln.explain(fn, x, backend="cpp", tune="off").graphs[0]
    body = info.kernels[-1].source_path.read_text()
    body = body[body.rindex('extern "C" LN_VECTORS_'):]
    parallel = body.index("#pragma omp parallel")
    assert "lnt" in body[:parallel] and "sqrt(" in body[:parallel] and "sqrt(" not in body[parallel:]
