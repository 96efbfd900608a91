"""Streaming stores in a C++ row kernel's last pass (``backends/cpp/streaming.py``): which passes
stream, and that streamed outputs, aligned or not, equal eager."""
import re

import pytest
import torch
import torch.nn.functional as F

import loopnest as ln
from loopnest.backends.cpp import streaming
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.space import can_stream
from loopnest.scheduler.kernel import signature
from test_backends import kernels_of, softmax

STREAMED = "ln_stream_line(&"


def layernorm_kernel(rows, cols):
    x = ln.placeholder("x", (rows, cols), ln.float32)
    w, b = ln.placeholder("w", (cols,), ln.float32), ln.placeholder("b", (cols,), ln.float32)
    mean = ln.mean(x, 1, keepdim=True)
    var = ln.mean((x - mean) * (x - mean), 1, keepdim=True)
    (kernel,) = kernels_of([(x - mean) * ln.rsqrt(var + 1e-5) * w + b], [x, w, b])
    return kernel


def softmax_kernel(rows, cols):
    x = ln.placeholder("x", (rows, cols), ln.float32)
    e = ln.exp(x - ln.max(x, 1, keepdim=True))
    (kernel,) = kernels_of([e / ln.sum(e, 1, keepdim=True)], [x])
    return kernel


def launch(kernel, config, inputs, out):
    launcher = CppBackend().compile([(kernel, config)]).launchers[kernel.name]
    launcher({n: out if n in kernel.outputs else inputs[n] for n in signature(kernel).buffers}, {})


@pytest.mark.parametrize("offset", [0, 3])  # 3 floats: no block of the output is aligned, all store plainly
def test_streamed_layernorm_equals_eager(offset):
    kernel = layernorm_kernel(37, 256)
    assert STREAMED in generate(kernel, CppConfig(stores="stream"))
    inputs = {"x": torch.randn(37, 256), "w": torch.randn(256), "b": torch.randn(256)}
    out = torch.full((37 * 256 + offset,), float("nan"))[offset:].view(37, 256)
    launch(kernel, CppConfig(stores="stream"), inputs, out)
    want = F.layer_norm(inputs["x"].double(), (256,), inputs["w"].double(), inputs["b"].double()).float()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_a_pass_that_reads_what_it_writes_keeps_plain_stores():
    kernel = softmax_kernel(8, 256)  # the last pass rescales the exponentials it stored before
    assert STREAMED not in generate(kernel, CppConfig(stores="stream"))
    assert not can_stream(kernel)
    x = torch.randn(8, 256)
    out = torch.full((8, 256), float("nan"))
    launch(kernel, CppConfig(stores="stream"), {"x": x}, out)
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_rows_that_are_not_whole_lines_keep_plain_stores():
    assert STREAMED not in generate(layernorm_kernel(8, 100), CppConfig(stores="stream"))


def test_auto_streams_outputs_larger_than_the_last_level_cache(monkeypatch):
    kernel = layernorm_kernel(16, 1024)  # 64 KB stored, rows of 4 KB
    assert can_stream(kernel)
    assert STREAMED not in generate(kernel, CppConfig(stores="plain"))
    monkeypatch.setattr(streaming, "last_level_cache_bytes", lambda: 1 << 20)
    assert STREAMED not in generate(kernel, CppConfig())
    monkeypatch.setattr(streaming, "last_level_cache_bytes", lambda: 32 << 10)
    assert STREAMED in generate(kernel, CppConfig())


def test_auto_keeps_plain_stores_on_short_rows(monkeypatch):
    """Each streamed row ends with a fence, which rows under ``STREAM_ROW_BYTES`` do not repay."""
    monkeypatch.setattr(streaming, "last_level_cache_bytes", lambda: 32 << 10)
    short = layernorm_kernel(64, 256)  # 64 KB stored, rows of 1 KB
    assert can_stream(short) and STREAMED not in generate(short, CppConfig())
    assert STREAMED in generate(short, CppConfig(stores="stream"))  # still the tuner's to choose


def test_last_level_cache_size_is_read():
    assert streaming.last_level_cache_bytes() >= 1 << 20


def test_an_unknown_stores_mode_is_refused():
    with pytest.raises(ValueError, match="stores must be one of"):
        CppConfig(stores="fast")


def rmsnorm_kernel(rows, cols, dtype):
    x = ln.placeholder("x", (rows, cols), dtype)
    w = ln.placeholder("w", (cols,), dtype)
    xf = ln.cast(x, ln.float32)
    normed = ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, 1, keepdim=True) + 1e-6), dtype)
    (kernel,) = kernels_of([normed * w], [x, w])
    return kernel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("offset", [0, 5])  # 5 halves: no line of the output is aligned
def test_streamed_half_precision_rows_equal_plain_stores(dtype, offset):
    kernel = rmsnorm_kernel(19, 256, getattr(ln, str(dtype).removeprefix("torch.")))
    code = generate(kernel, CppConfig(stores="stream"))
    # 32 halves: one 64-byte line per block (float16 rows run in blocks of their own: row_blocks.py)
    assert STREAMED in code and ("rb_ += 32" in code or "r0b_ += 32" in code)
    gen = torch.Generator().manual_seed(offset)
    inputs = {"x": torch.randn(19, 256, generator=gen).to(dtype), "w": torch.randn(256, generator=gen).to(dtype)}
    outs = []
    for stores, pad in (("stream", offset), ("plain", 0)):
        out = torch.full((19 * 256 + pad,), float("nan"), dtype=dtype)[pad:].view(19, 256)
        launch(kernel, CppConfig(stores=stores), inputs, out)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    x = inputs["x"].float()
    want = (x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)).to(dtype) * inputs["w"]
    # float32 differences may move a normalized value across a rounding boundary of ``dtype``:
    # one step of it (eps), rounded again by the product with w
    torch.testing.assert_close(outs[0], want, rtol=2 * torch.finfo(dtype).eps, atol=1e-5)


def test_rows_of_halves_that_are_not_whole_lines_keep_plain_stores():
    assert STREAMED not in generate(rmsnorm_kernel(8, 48, ln.bfloat16), CppConfig(stores="stream"))


PREFETCH = re.compile(r"__builtin_prefetch\(&b_\w+\[\(p0 \+ 1\)\*256 \+ rb_\]\);")


def test_rows_in_l1_prefetch_the_next_row_and_equal_eager():
    """Plain stores in blocks of one line of the input, the next row's line prefetched in each;
    the last row prefetches past the end of the input, which never faults."""
    kernel = layernorm_kernel(37, 256)
    assert streaming.wants_next_row_prefetch(kernel)
    source = generate(kernel, CppConfig())
    assert len(PREFETCH.findall(source)) == 1 and STREAMED not in source and "rb_ += 16)" in source
    inputs = {"x": torch.randn(37, 256), "w": torch.randn(256), "b": torch.randn(256)}
    out = torch.full((37, 256), float("nan"))
    launch(kernel, CppConfig(), inputs, out)
    want = F.layer_norm(inputs["x"].double(), (256,), inputs["w"].double(), inputs["b"].double()).float()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_half_precision_rows_prefetch_in_blocks_of_one_line_and_equal_plain_rows(monkeypatch):
    kernel = rmsnorm_kernel(19, 256, ln.bfloat16)
    source = generate(kernel, CppConfig())
    # the last pass stores bfloat16 a block at a time (row_blocks.py): 32 halves, one line
    assert source.count("__builtin_prefetch(&b_x[p0*256 + r0 + 256]);") == 1 and "r0b_ += 32)" in source
    inputs = {"x": torch.randn(19, 256).to(torch.bfloat16), "w": torch.randn(256).to(torch.bfloat16)}
    outs = []
    for prefetching in (True, False):
        monkeypatch.setattr("loopnest.backends.cpp.codegen.wants_next_row_prefetch", lambda k, on=prefetching: on)
        out = torch.full((19, 256), float("nan"), dtype=torch.bfloat16)
        launch(kernel, CppConfig(), inputs, out)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_long_rows_and_one_pass_kernels_do_not_prefetch():
    long_rows = softmax_kernel(2, streaming.PREFETCH_ROW_BYTES // 4 + 16)
    assert not streaming.wants_next_row_prefetch(long_rows)
    assert "__builtin_prefetch" not in generate(long_rows, CppConfig())
    x = ln.placeholder("x", (8, 256), ln.float32)
    (row_sum,) = kernels_of([ln.sum(x, 1)], [x])
    assert not streaming.wants_next_row_prefetch(row_sum)


def test_a_pass_that_rescales_in_place_prefetches_the_input_its_row_read_first():
    """softmax's last pass reads only its output: it prefetches the next row of the input that
    the row's first passes load, and not the output's next row, which the first pass writes."""
    softmax_rows = generate(softmax_kernel(8, 256), CppConfig())
    prefetches = re.findall(r"__builtin_prefetch\(&(\w+)\[\(p0 \+ 1\)", softmax_rows)
    assert prefetches == ["b_x"], softmax_rows
    x = torch.randn(8, 256) * 4
    torch.testing.assert_close(ln.compile(softmax(ln.placeholder("x", (8, 256), ln.float32)), backend="cpp")(x),
                               torch.softmax(x, 1))
