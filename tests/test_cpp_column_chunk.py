"""How wide a column task of a C++ reduction over an outer dim is (``codegen.column_chunk``), and
that every width computes the same sums."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import loopnest as ln
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.codegen import MIN_AUTO_CHUNK, column_chunk, generate
from loopnest.backends.cpp.params import MAX_CHUNK, CppConfig
from loopnest.scheduler.kernel import signature
from test_backends import kernels_of


def column_sum(*shape):
    x = ln.placeholder("x", shape, ln.float32)
    (kernel,) = kernels_of([ln.sum(x, 0)], [x])
    return kernel


@pytest.mark.parametrize("columns, threads, chunk", [
    (4096, 2, 2048), (4096, 16, 256), (4096, 64, 64),  # one task per thread
    (4096, 3, 512), (4096, 12, 128),                    # the busiest thread within 8/7 of the average
    (4097, 2, 512), (100, 2, MIN_AUTO_CHUNK),
])
def test_widest_chunk_that_keeps_every_thread_busy(columns, threads, chunk):
    assert column_chunk(column_sum(64, columns), CppConfig(threads=threads), 4) == chunk


@given(columns=st.integers(2, 20000), threads=st.integers(1, 128), column_bytes=st.sampled_from([4, 8, 12, 24]))
@settings(max_examples=300, deadline=None)
def test_auto_chunk_bounds(columns, threads, column_bytes):
    chunk = column_chunk(column_sum(8, columns), CppConfig(threads=threads), column_bytes)
    assert MIN_AUTO_CHUNK <= chunk <= MAX_CHUNK and chunk & (chunk - 1) == 0
    assert chunk == MIN_AUTO_CHUNK or chunk * column_bytes <= 16 << 10
    tasks = -(-columns // chunk)
    assert chunk == MIN_AUTO_CHUNK or 8 * tasks >= 7 * threads * -(-tasks // threads)


def test_a_chunk_that_divides_the_columns_is_a_constant_trip_count():
    source = generate(column_sum(64, 4096), CppConfig(threads=2), True)
    assert "constexpr int64_t w_ = 2048;" in source
    assert "std::min<int64_t>" not in source.split("pc_ =")[1].split("\n")[1]


@pytest.mark.parametrize("chunk", [0, 16, 256, 2048])
@pytest.mark.parametrize("shape", [(33, 4096), (17, 4097), (5, 3, 300)])
def test_every_chunk_sums_alike(shape, chunk):
    kernel = column_sum(*shape)
    backend = CppBackend()
    launcher = backend.compile([(kernel, CppConfig(chunk=chunk))]).launchers[kernel.name]
    a = torch.randn(shape)
    out = torch.full(shape[1:], float("nan"))
    launcher({name: out if name in kernel.outputs else a for name in signature(kernel).buffers}, {})
    torch.testing.assert_close(out, a.double().sum(0).float(), rtol=1e-5, atol=1e-4)
