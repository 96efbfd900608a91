"""float16 converted a block at a time (half_blocks.py) and row passes in blocks (row_blocks.py):
the conversion instructions give the integer spelling's bits, at both vector widths, in
pointwise kernels and in every kind of row pass, with and without elements after the last block;
bfloat16 stores in blocks give torch's bits too."""
import pytest
import torch
import torch.nn.functional as F

import loopnest as ln
from loopnest.backends.cpp.backend import CppBackend
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.scheduler.kernel import signature
from test_backends import kernels_of, layernorm, softmax

WIDTHS = [512, 256]  # 256: the F16C path


def run(kernel, config, inputs, out):
    """Launch ``kernel`` under ``config`` on ``inputs`` (by name) into ``out`` (its one output)."""
    launcher = CppBackend().compile([(kernel, config)]).launchers[kernel.name]
    launcher({n: out if n in kernel.outputs else inputs[n] for n in signature(kernel).buffers}, {})
    return out


def special_halves(n: int) -> torch.Tensor:
    """``n`` halves: every class of value (subnormals, infinities, NaN, the largest), then random."""
    gen = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=gen) * 3).half()
    special = torch.tensor([0.0, -0.0, 6e-8, -6e-8, 3e-5, 65504.0, -65504.0, float("inf"), -float("inf"),
                            float("nan")], dtype=torch.float16)
    x[: len(special)] = special[:n]
    return x


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("n", [32 * 7, 32 * 7 + 13])  # whole blocks; then elements after the last block
def test_pointwise_halves_round_as_torch(width, n):
    x = ln.placeholder("x", (n,), ln.float16)
    # one multiply: the float32 value is the same whether or not g++ contracts to FMA
    (kernel,) = kernels_of([ln.cast(ln.cast(x, ln.float32) * 1.7, ln.float16)], [x])
    config = CppConfig(vector_width=width)
    src = generate(kernel, config)
    assert "ln_halves_to_f<" in src and "ln_f_to_halves<" in src, src
    a = special_halves(n)
    got = run(kernel, config, {"x": a}, torch.full((n,), float("nan"), dtype=torch.float16))
    want = (a.float() * 1.7).half()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


@pytest.mark.parametrize("width", WIDTHS)
def test_ties_round_to_even_in_blocks(width):
    """Floats halfway between halves (normal and subnormal) round to the even one, as torch."""
    ties = torch.cat([(torch.arange(1, 1025, dtype=torch.float32) + 0.5) * 2.0**-24,   # subnormal halves
                      1.0 + (torch.arange(0, 1024, dtype=torch.float32) + 0.5) * 2.0**-10])  # [1, 2)
    x = ln.placeholder("x", (len(ties),), ln.float32)
    (kernel,) = kernels_of([ln.cast(x, ln.float16)], [x])
    config = CppConfig(vector_width=width)
    assert "ln_f_to_halves<" in generate(kernel, config)
    got = run(kernel, config, {"x": ties}, torch.empty(len(ties), dtype=torch.float16))
    assert torch.equal(got.view(torch.int16), ties.half().view(torch.int16))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("cols", [256, 301])  # whole blocks; a row with elements after its last block
def test_half_layernorm_rows_in_blocks(width, cols):
    x = ln.placeholder("x", (37, cols), ln.float16)
    xf = ln.cast(x, ln.float32)
    mean = ln.mean(xf, 1, keepdim=True)
    var = ln.mean((xf - mean) * (xf - mean), 1, keepdim=True)
    (kernel,) = kernels_of([ln.cast((xf - mean) * ln.rsqrt(var + 1e-5), ln.float16)], [x])
    config = CppConfig(vector_width=width)
    src = generate(kernel, config)
    assert "r0b_ += 32" in src and "ln_halves_to_f<" in src and "ln_f_to_halves<" in src, src
    a = torch.randn(37, cols).half()
    got = run(kernel, config, {"x": a}, torch.full((37, cols), float("nan"), dtype=torch.float16))
    want = F.layer_norm(a.double(), (cols,)).half()
    torch.testing.assert_close(got, want, rtol=2 * torch.finfo(torch.float16).eps, atol=1e-3)


@pytest.mark.parametrize("cols", [64, 300])
def test_half_softmax_exp_inline_in_blocks(cols):
    """The rescale pass computes its exp on the block's array (row_blocks.py) and reads the row's
    halves from the block's floats."""
    x = ln.placeholder("x", (16, cols), ln.float16)
    (kernel,) = kernels_of([ln.cast(softmax(ln.cast(x, ln.float32)), ln.float16)], [x])
    src = generate(kernel, CppConfig())
    assert "lnv::exp_(" in src and "ln_halves_to_f<" in src, src
    a = torch.randn(16, cols).half() * 4
    a[3, 5] = float("-inf")
    got = run(kernel, CppConfig(), {"x": a}, torch.full((16, cols), float("nan"), dtype=torch.float16))
    torch.testing.assert_close(got, torch.softmax(a.double(), -1).half(), rtol=2e-3, atol=1e-4)


def test_the_last_pass_prefetches_the_next_row():
    """A row kernel that prefetches its next row (streaming.wants_next_row_prefetch) keeps doing so
    when its last pass runs in blocks: one prefetch per 64-byte line, 32 halves a line."""
    x = ln.placeholder("x", (64, 1024), ln.float16)
    xf = ln.cast(x, ln.float32)
    (kernel,) = kernels_of([ln.cast(xf * ln.rsqrt(ln.mean(xf * xf, 1, keepdim=True) + 1e-6), ln.float16)], [x])
    src = generate(kernel, CppConfig())
    assert src.count("__builtin_prefetch(") == 1 and "+ 1024]);" in src, src


def test_torch_compile_half_models_match_eager():
    """Through the whole path (FX, lowering, scheduling): float16 GELU of a layernorm, odd width."""
    def fn(x, w):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w)) * torch.sigmoid(x)

    x, w = torch.randn(5, 7, 333).half(), torch.randn(333).half()
    got = torch.compile(fn, backend="loopnest")(x, w)
    want = fn(x.float(), w.float()).half()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_rounding_between_ops_is_a_block_call(width):
    """A float rounded to float16 inside an element's value (between two ops of a float16 graph)
    rounds a vector at a time (vector_blocks.block_impl), to torch's bits: ties, subnormals,
    overflow to infinity, NaN."""
    x = ln.placeholder("x", (4 * 32 + 7,), ln.float32)
    (kernel,) = kernels_of([ln.cast(ln.cast(ln.cast(x, ln.float16), ln.float32) * 1.7, ln.float16)], [x])
    config = CppConfig(vector_width=width)
    src = generate(kernel, config)
    assert "lnv::round_half_(" in src, src
    a = torch.randn(4 * 32 + 7) * 10
    a[:8] = torch.tensor([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 2.5 * 2.0**-24, 70000.0, -65520.0, float("nan"),
                          float("inf"), 1e-30])
    got = run(kernel, config, {"x": a}, torch.empty(len(a), dtype=torch.float16))
    want = (a.half().float() * 1.7).half()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


def test_math_calls_nested_in_rounds():
    """erf of a rounded value: the rounding's block first, then the erf's (vector_blocks._levels)."""
    x = ln.placeholder("x", (8, 96), ln.float16)
    r = ln.cast(ln.cast(ln.cast(x, ln.float32) * 1.3, ln.float16), ln.float32)
    (kernel,) = kernels_of([ln.cast(ln.erf(r) * r, ln.float16)], [x])
    src = generate(kernel, CppConfig())
    assert src.index("lnv::round_half_(") < src.index("lnv::erf_("), src
    a = torch.randn(8, 96).half()
    got = run(kernel, CppConfig(), {"x": a}, torch.empty(8, 96, dtype=torch.float16))
    rounded = (a.float() * 1.3).half().double()
    torch.testing.assert_close(got, (torch.erf(rounded) * rounded).half(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("width", WIDTHS)  # 512: vcvtneps2bf16 where the CPU has it; 256: the integer spelling
def test_bfloat16_stores_in_blocks_round_as_torch(width):
    """bfloat16 stores round a block at a time to torch's bits: ties to even, overflow to
    infinity, and float32 denormals kept as bfloat16 denormals (the instruction would flush
    them, so a vector holding one takes the integer spelling); vectors without one beside them."""
    gen = torch.Generator().manual_seed(0)
    ties = 1.0 + (torch.arange(0, 512, dtype=torch.float32) + 0.5) * 2.0**-7  # halfway between bf16s in [1, 2)
    denormals = torch.tensor([1e-39, -3e-39, 7e-41, 1.1e-38, -1e-45, 2e-39, 0.0, -0.0] * 2)  # one vector
    special = torch.tensor([float("inf"), -float("inf"), 3.4e38, -3.4e38, 1.17549435e-38, 0.0, -0.0, 1.0] * 2)
    x_all = torch.cat([ties, denormals, special, torch.randn(32 * 9 - 32, generator=gen) * 1e3])
    x = ln.placeholder("x", (len(x_all),), ln.float32)
    (kernel,) = kernels_of([ln.cast(x, ln.bfloat16)], [x])
    config = CppConfig(vector_width=width)
    assert "ln_f_to_bf16s<" in generate(kernel, config)
    got = run(kernel, config, {"x": x_all}, torch.full((len(x_all),), float("nan"), dtype=torch.bfloat16))
    assert torch.equal(got.view(torch.int16), x_all.bfloat16().view(torch.int16))


@pytest.mark.parametrize("width", WIDTHS)
def test_bfloat16_rounding_between_ops_matches_torch(width):
    """A cast to bfloat16 read back as float (``ln_round_bf16``, no trip through 16 bits) gives
    torch's bits: ties to even, overflow to infinity, denormals, signed zeros; NaN stays NaN."""
    gen = torch.Generator().manual_seed(1)
    ties = 1.0 + (torch.arange(0, 256, dtype=torch.float32) + 0.5) * 2.0**-7
    special = torch.tensor([float("inf"), -float("inf"), 3.4e38, -3.4e38, 3.3961776e38, 1e-39, -7e-41,
                            -1e-45, 0.0, -0.0, float("nan"), -float("nan"), 1.17549435e-38, 1.0, -1.0, 65504.0])
    x_all = torch.cat([ties, special, torch.randn(512, generator=gen) * 1e3, torch.randn(256, generator=gen) * 1e-38])
    x = ln.placeholder("x", (len(x_all),), ln.float32)
    (kernel,) = kernels_of([ln.cast(ln.cast(x, ln.bfloat16), ln.float32) * 3.0], [x])
    config = CppConfig(vector_width=width)
    assert "ln_round_bf16(" in generate(kernel, config)
    got = run(kernel, config, {"x": x_all}, torch.full((len(x_all),), float("nan")))
    want = x_all.bfloat16().float() * 3.0
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


@pytest.mark.parametrize("cols", [3008, 3001])
def test_float16_row_passes_in_blocks_reduce_in_lane_arrays(cols):
    """Rows of float16 longer than a short row, at one vector of partial states: the passes that
    convert halves run in blocks, and their reductions keep lane arrays across the blocks (an
    ``omp simd reduction`` per block merged its 16 lanes one after another every 32 elements:
    3.4x eager's time on a float16 layernorm). The softmax failed to compile before: its max pass
    and its last pass both ran in blocks and declared the same block variable in one scope."""
    x = ln.placeholder("x", (6, cols), ln.float16)
    w, b = ln.placeholder("w", (cols,), ln.float32), ln.placeholder("b", (cols,), ln.float32)
    xf = ln.cast(x, ln.float32)
    config = CppConfig(row_vectors=1)
    a = torch.randn(6, cols).half()
    weights = {"w": torch.randn(cols), "b": torch.randn(cols)}
    for out, want in ((softmax(xf), torch.softmax(a.float(), -1)),
                      (layernorm(xf, w, b), F.layer_norm(a.float(), (cols,), weights["w"], weights["b"]))):
        (kernel,) = kernels_of([ln.cast(out, ln.float16)], [x, w, b])
        src = generate(kernel, config)
        assert "ln_halves_to_f<" in src and "reduction(" not in src, src
        got = run(kernel, config, {"x": a, **weights}, torch.full((6, cols), float("nan"), dtype=torch.float16))
        torch.testing.assert_close(got, want.half(), atol=2e-3, rtol=2e-3)
