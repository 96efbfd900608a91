"""Blocked loops for pointwise kernels that read an input across its lines (``backends/cpp/
tiling.py``): which kernels get them, and that they compute what eager computes."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp import transpose_probe
from loopnest.backends.cpp.tiling import block_reads, reads_in_registers, transposed_dim
from loopnest.core.hardware import this_cpu
from loopnest.scheduler.kernel import signature
from loopnest.ir.index import stride_along
from loopnest.ir import dtypes as dt
from loopnest.ir.expr import Const
from loopnest.ir.index import Index, Indirect, floordiv, var
from test_backends import kernels_of


def compiled_source(fn, *args) -> str:
    info = ln.explain(fn, *args, backend="cpp", tune="off").graphs[0]
    return info.kernels[0].source_path.read_text()


def test_stride_along_reads_affine_terms_only():
    i, j = var("i", 8), var("j", 16)
    vi = next(iter(i.free_vars()))
    assert stride_along(i * 16 + j, vi) == 16
    assert stride_along(j + 3, vi) == 0
    assert stride_along(i * j, vi) is None
    assert stride_along(floordiv(i, Index.of(2)) + j, vi) is None
    gathered = Index.of(Indirect(Const(1, dt.int64), Index.of(8)))
    assert stride_along(gathered + i, vi) is None


def test_a_transposed_read_gets_blocks_and_a_contiguous_one_does_not():
    x, y = ln.placeholder("x", (64, 48), ln.float32), ln.placeholder("y", (48, 64), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) + y], [x, y])
    assert transposed_dim(kernel) == 0
    assert "p0_0 += 16" in generate(kernel, CppConfig())
    (plain,) = kernels_of([y * 2.0], [y])
    assert transposed_dim(plain) is None


@pytest.mark.parametrize("shape", [(1000, 777), (16, 17), (33, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transposed_pointwise_matches_eager(shape, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(dtype)
    y = torch.randn(shape[::-1], generator=gen).to(dtype)

    def fn(x, y):
        return x.t() * 2 + y

    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x, y)
    assert torch.equal(got, fn(x, y))
    assert "+= 16" in compiled_source(fn, x, y)


def test_channels_last_and_row_major_inputs_together():
    """Eager writes the result channels-last (its first input's layout): the row-major input is
    the one read across its lines."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 40, 9, 35, generator=gen).to(memory_format=torch.channels_last)
    y = torch.randn(2, 40, 9, 35, generator=gen)

    def fn(x, y):
        return torch.relu(x - y)

    torch._dynamo.reset()
    got = torch.compile(fn, backend="loopnest", options={"backend": "cpp"})(x, y)
    assert torch.equal(got, fn(x, y)) and got.stride() == fn(x, y).stride()
    assert "_0 += 16" in compiled_source(fn, x, y)


def launch(kernel, config, inputs: dict, out: torch.Tensor) -> torch.Tensor:
    launcher = CppBackend().compile([(kernel, config)]).launchers[kernel.name]
    launcher({n: out if n in kernel.outputs else inputs[n] for n in signature(kernel).buffers}, {})
    return out


@pytest.mark.parametrize("shape", [(64, 48), (512, 80), (1000, 777), (33, 64), (16, 17)])
@pytest.mark.parametrize("reads", ["registers", "gather", "auto"])
@pytest.mark.parametrize("stores", ["plain", "stream"])
def test_blocks_transposed_in_registers_match_eager(shape, reads, stores):
    """Whole blocks read the transposed input through ``ln_transpose16``, blocks cut by the
    domain's end read it element by element, and whole blocks stream their rows where asked:
    either way the difference is eager's, bit for bit, in every element of a NaN-poisoned
    output; a second input read along its lines is untouched."""
    rows, cols = shape
    x, y = ln.placeholder("x", (rows, cols), ln.float32), ln.placeholder("y", (cols, rows), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) - y], [x, y])  # one op: no FMA to contract
    config = CppConfig(transposed_reads=reads, stores=stores)
    src = generate(kernel, config)
    assert ("ln_transpose16(" in src) == bool(reads_in_registers(kernel, 0, config))
    assert ("ln_stream_line(" in src) == (stores == "stream")
    if reads == "registers":
        assert "ln_transpose16(" in src
    gen = torch.Generator().manual_seed(rows)
    a, b = torch.randn(rows, cols, generator=gen), torch.randn(cols, rows, generator=gen)
    for skew in (0, 3):  # an output 3 floats past a line: rows not on lines, stored plainly
        out = torch.full((cols * rows + skew,), float("nan"))[skew:].view(cols, rows)
        got = launch(kernel, config, {"x": a, "y": b}, out)
        assert torch.equal(got, a.t() - b)


def test_which_reads_go_through_registers():
    """float32 inputs contiguous along the block's outer dim are read in blocks; "auto" takes them
    on AVX-512 CPUs where every row stride is a whole number of lines, and for other strides where
    this CPU's probe found the transpose faster."""
    x, y = ln.placeholder("x", (40, 48), ln.float32), ln.placeholder("y", (48, 40), ln.float32)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) + y], [x, y])
    assert list(block_reads(kernel, 0).values()) == [48]
    avx512 = "avx512f" in this_cpu().capability.split(",")
    assert bool(reads_in_registers(kernel, 0, CppConfig())) == avx512
    assert not reads_in_registers(kernel, 0, CppConfig(transposed_reads="gather"))
    odd = ln.placeholder("odd", (40, 37), ln.float32)
    (kernel,) = kernels_of([ln.permute(odd, 1, 0) * 2.0], [odd])
    assert list(block_reads(kernel, 0).values()) == [37]
    split = avx512 and transpose_probe.split_lines_in_registers()
    assert bool(reads_in_registers(kernel, 0, CppConfig())) == split
    assert reads_in_registers(kernel, 0, CppConfig(transposed_reads="registers"))
    half = ln.placeholder("half", (40, 56), ln.bfloat16)  # 112-byte rows: not whole lines
    (kernel,) = kernels_of([ln.permute(half, 1, 0) * 2.0], [half])
    assert transposed_dim(kernel) == 0 and list(block_reads(kernel, 0).values()) == [56]
    assert bool(reads_in_registers(kernel, 0, CppConfig())) == split
    wide = ln.placeholder("wide", (40, 64), ln.float16)
    (kernel,) = kernels_of([ln.permute(wide, 1, 0) * 2.0], [wide])
    assert bool(reads_in_registers(kernel, 0, CppConfig())) == avx512


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reads", ["registers", "gather"])
def test_half_inputs_transposed_in_registers_match_eager(dtype, reads):
    """16-bit inputs are widened as their rows load, then transposed as floats: the result rounds
    as eager's, bit for bit, whole blocks and cut ones alike."""
    rows, cols = 70, 96
    ir = {torch.bfloat16: ln.bfloat16, torch.float16: ln.float16}[dtype]
    x, y = ln.placeholder("x", (rows, cols), ir), ln.placeholder("y", (cols, rows), ir)
    (kernel,) = kernels_of([ln.permute(x, 1, 0) - y], [x, y])
    config = CppConfig(transposed_reads=reads)
    assert ("ln_transpose16_" in generate(kernel, config)) == (reads == "registers")
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(rows, cols, generator=gen).to(dtype), torch.randn(cols, rows, generator=gen).to(dtype)
    got = launch(kernel, config, {"x": a, "y": b}, torch.full((cols, rows), float("nan"), dtype=dtype))
    assert torch.equal(got, a.t() - b)


def test_transposed_reads_is_validated():
    with pytest.raises(ValueError, match="transposed_reads"):
        CppConfig(transposed_reads="shuffle")


def test_the_transpose_probe_measures_once_and_remeasures_a_bad_record(tmp_path, monkeypatch):
    """The probe's verdict is measured on the first call per CPU and compiler, written to the cache
    directory and read back after; a record that is not the probe's is measured again."""
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(transpose_probe, "_measure", lambda: calls.append(1) or (100.0, 50.0))
    transpose_probe.split_lines_in_registers.cache_clear()
    try:
        assert transpose_probe.split_lines_in_registers() and len(calls) == 1
        (record,) = (tmp_path / "cpp" / "probes").iterdir()
        transpose_probe.split_lines_in_registers.cache_clear()
        assert transpose_probe.split_lines_in_registers() and len(calls) == 1  # read back
        record.write_text('["not", "a record"]')
        transpose_probe.split_lines_in_registers.cache_clear()
        assert transpose_probe.split_lines_in_registers() and len(calls) == 2
        monkeypatch.setattr(transpose_probe, "_measure", lambda: (100.0, 95.0))  # within the margin
        record.write_text("{}")
        transpose_probe.split_lines_in_registers.cache_clear()
        assert not transpose_probe.split_lines_in_registers()
    finally:
        transpose_probe.split_lines_in_registers.cache_clear()


def test_the_transpose_probe_runs_both_loops():
    elements_us, registers_us = transpose_probe._measure()
    assert 0 < elements_us < 1e5 and 0 < registers_us < 1e5


def test_a_probe_that_cannot_build_keeps_element_loads(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LOOPNEST_CACHE_DIR", str(tmp_path))

    def broken():
        raise transpose_probe.cc.CompileError("g++ failed on the probe")
    monkeypatch.setattr(transpose_probe, "_measure", broken)
    transpose_probe.split_lines_in_registers.cache_clear()
    try:
        assert not transpose_probe.split_lines_in_registers()
        assert "transpose probe did not run" in caplog.text
        assert not (tmp_path / "cpp" / "probes").exists() or not any((tmp_path / "cpp" / "probes").iterdir())
    finally:
        transpose_probe.split_lines_in_registers.cache_clear()
