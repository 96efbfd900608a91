"""Streaming stores in C++ pointwise kernels (``streaming.pointwise_streams``): which kernels
stream, and that their outputs, aligned or not, with or without a tail, equal eager."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp import streaming
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.space import can_stream
from test_backends import kernels_of
from test_cpp_streaming import STREAMED, launch

STREAM = CppConfig(stores="stream")


def pointwise_kernel(shape, dtype, body, out_dtype=None):
    """The one kernel of ``body(x, b)`` over x of ``shape`` and b of its last dim."""
    x = ln.placeholder("x", shape, dtype)
    b = ln.placeholder("b", shape[-1:], dtype)
    y = body(x, b)
    (kernel,) = kernels_of([y if out_dtype is None else ln.cast(y, out_dtype)], [x, b])
    return kernel


def run(kernel, shape, dtype, config, offset=0, out_dtype=None, seed=0):
    """The kernel's output under ``config``, written ``offset`` elements past a NaN-poisoned
    buffer's start (an offset that is not a multiple of a line leaves every line unaligned)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = {"x": torch.randn(shape, generator=gen).to(dtype), "b": torch.randn(shape[-1:], generator=gen).to(dtype)}
    numel, out_dtype = torch.Size(shape).numel(), out_dtype or dtype
    out = torch.full((numel + offset,), float("nan"), dtype=out_dtype)[offset:].view(shape)
    launch(kernel, config, inputs, out)
    return inputs, out


CASES = {  # name: (shape, dtype, body, eager, out dtype)
    "add_1d": ((4099,), torch.float32, lambda x, b: x + b, lambda x, b: x + b, None),
    "add_rows": ((9, 256), torch.float32, lambda x, b: x * 2 + b, lambda x, b: x * 2 + b, None),
    "sigmoid_1d": ((1000,), torch.float32, lambda x, b: ln.sigmoid(x + b), lambda x, b: torch.sigmoid(x + b), None),
    "exp_rows": ((7, 64), torch.float32, lambda x, b: ln.exp(x) * b, lambda x, b: torch.exp(x) * b, None),
    "bf16_rows": ((5, 96), torch.bfloat16, lambda x, b: x + b, lambda x, b: x + b, None),
    # rows not of whole lines: each streams from its first aligned line
    "odd_rows": ((6, 101), torch.float32, lambda x, b: x * 2 + b, lambda x, b: x * 2 + b, None),
    "bf16_1d": ((333,), torch.bfloat16, lambda x, b: x * b, lambda x, b: x * b, None),
    "f16_tanh_rows": ((3, 128), torch.float16, lambda x, b: ln.tanh(x) + b, lambda x, b: torch.tanh(x) + b, None),
    "f32_to_bf16": ((6, 64), torch.float32, lambda x, b: x - b, lambda x, b: (x - b).bfloat16(), torch.bfloat16),
}


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_streamed_pointwise_kernels_equal_eager_and_plain_stores(name, offset):
    shape, dtype, body, eager, out_dtype = CASES[name]
    kernel = pointwise_kernel(shape, getattr(ln, str(dtype).removeprefix("torch.")), body,
                              out_dtype and getattr(ln, str(out_dtype).removeprefix("torch.")))
    source = generate(kernel, STREAM)
    assert STREAMED in source and source.count("ln_stream_fence();") == 1, source
    inputs, streamed = run(kernel, shape, dtype, STREAM, offset, out_dtype)
    _, plain = run(kernel, shape, dtype, CppConfig(stores="plain"), 0, out_dtype)
    torch.testing.assert_close(streamed, plain, rtol=0, atol=0, equal_nan=False)
    want = eager(inputs["x"].double(), inputs["b"].double()).to(out_dtype or dtype)
    torch.testing.assert_close(streamed, want, atol=1e-5, rtol=torch.finfo(out_dtype or dtype).eps * 2)


def test_auto_streams_pointwise_kernels_larger_than_the_last_level_cache(monkeypatch):
    kernel = pointwise_kernel((64, 1024), ln.float32, lambda x, b: x + b)  # 512 KB moved
    assert STREAMED not in generate(kernel, CppConfig())
    monkeypatch.setattr(streaming, "last_level_cache_bytes", lambda: 256 << 10)
    assert STREAMED in generate(kernel, CppConfig())
    assert STREAMED not in generate(kernel, CppConfig(stores="plain"))


def test_the_tuner_chooses_the_stores_of_pointwise_kernels_that_fill_the_cache(monkeypatch):
    kernel = pointwise_kernel((64, 1024), ln.float32, lambda x, b: x + b)  # 512 KB moved
    monkeypatch.setattr("loopnest.backends.cpp.space.last_level_cache_bytes", lambda: 4 << 20)
    assert not can_stream(kernel)
    monkeypatch.setattr("loopnest.backends.cpp.space.last_level_cache_bytes", lambda: 2 << 20)
    assert can_stream(kernel)


def test_a_tiled_kernel_streams_the_rows_of_whole_blocks_only():
    """A kernel tiled for a transposed read (``tiling.py``) streams each row of a whole block (one
    line), fencing once per thread; the blocks the domain cuts keep plain stores; by default
    ("auto") it does not stream (``pointwise_blocks`` says why)."""
    x = ln.placeholder("x", (64, 40), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) * 2], [x])  # 40 x 64: the last row of blocks is cut
    source = generate(kernel, STREAM)
    assert source.count("ln_stream_line(") == 1 and source.count("ln_stream_fence();") == 1, source
    assert "ln_stream_line(" not in generate(kernel, CppConfig())


def test_short_rows_that_are_not_whole_lines_keep_plain_stores():
    kernel = pointwise_kernel((9, 13), ln.float32, lambda x, b: x - b)  # no whole line in a row
    assert STREAMED not in generate(kernel, STREAM)
    inputs, out = run(kernel, (9, 13), torch.float32, STREAM, offset=1)
    torch.testing.assert_close(out, inputs["x"] - inputs["b"], rtol=0, atol=0)


def test_rows_that_are_not_whole_lines_keep_plain_stores():
    kernel = pointwise_kernel((9, 100), ln.float32, lambda x, b: ln.sigmoid(x) * b)
    assert STREAMED not in generate(kernel, STREAM)
