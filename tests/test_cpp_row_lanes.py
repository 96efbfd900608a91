"""C++ row reductions over lane arrays of several vectors (``backends/cpp/row_lanes.py``): when
the default takes them, and results against eager with rows that end mid-step, NaN and +-inf."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp import row_lanes
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from loopnest.backends.registry import get
from loopnest.core.hardware import this_cpu
from test_backends import kernels_of, softmax
from test_cpp_split_rows import run

REDUCTIONS = {  # name: (DSL, eager)
    "sum": (lambda x: ln.sum(x, 1), lambda a: a.sum(1)),
    "max": (lambda x: ln.max(x, 1), lambda a: a.amax(1)),
    "min": (lambda x: ln.min(x, 1), lambda a: a.amin(1)),
    "sum_sq": (lambda x: ln.sum(x * x, 1), lambda a: (a * a).sum(1)),
}


def row_kernel(shape, build, dtype=ln.float32):
    x = ln.placeholder("x", shape, dtype)
    (kernel,) = kernels_of([build(x)], [x])
    return kernel


def test_the_default_takes_four_vectors_where_the_data_fits_a_quarter_of_the_cache(monkeypatch):
    kernel = row_kernel((512, 2048), REDUCTIONS["sum"][0])  # 4 MB read
    monkeypatch.setattr(row_lanes, "last_level_cache_bytes", lambda: 32 << 20)
    assert row_lanes.vectors(kernel, CppConfig()) == 4
    assert "_l[64]" in generate(kernel, CppConfig()) and "_l[32]" in generate(kernel, CppConfig(vector_width=256))
    monkeypatch.setattr(row_lanes, "last_level_cache_bytes", lambda: 8 << 20)
    assert row_lanes.vectors(kernel, CppConfig()) == 1 and "_l[" not in generate(kernel, CppConfig())
    assert row_lanes.vectors(kernel, CppConfig(row_vectors=2)) == 2
    assert "_l[32]" in generate(kernel, CppConfig(row_vectors=2))


@pytest.mark.parametrize("cols", [64, 1000, 129, 5])
@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_rows_by_lanes_match_eager(kind, cols):
    build, eager = REDUCTIONS[kind]
    kernel = row_kernel((37, cols), build)
    a = torch.randn(37, cols, generator=torch.Generator().manual_seed(cols)) * 3
    a[3, cols // 2] = float("nan")
    a[5, -1] = float("inf")
    a[6, 0] = float("-inf")
    (got,) = run(kernel, CppConfig(threads=2, row_vectors=4), a)
    torch.testing.assert_close(got, eager(a), rtol=1e-5, atol=1e-4, equal_nan=True)


def test_integer_sums_by_lanes_are_exact():
    kernel = row_kernel((9, 3001), lambda x: ln.sum(x, 1), ln.int64)
    a = torch.randint(-(1 << 40), 1 << 40, (9, 3001), generator=torch.Generator().manual_seed(1))
    (got,) = run(kernel, CppConfig(threads=2, row_vectors=8), a)
    assert torch.equal(got, a.sum(1))


def test_row_vectors_is_a_knob_of_row_reductions_only():
    space = get("cpp").space
    rows = space(row_kernel((64, 96), REDUCTIONS["sum"][0]), this_cpu())
    assert next(k for k in rows.knobs if k.name == "row_vectors").choices == (0, 1, 4, 8)
    columns = space(row_kernel((64, 96), lambda x: ln.sum(x, 0)), this_cpu())
    assert "row_vectors" not in {k.name for k in columns.knobs}


@pytest.mark.parametrize("row_vectors, vector_width", [(1, 512), (4, 512), (2, 256)])
def test_row_math_in_blocks_matches_the_rest_of_the_row_bit_for_bit(row_vectors, vector_width):
    """A row's math runs inline on each step's lane arrays (``vector_blocks.write_blocks``) and
    on a zero-padded block for the rest of the row: the same bits for the same input."""
    lanes = row_vectors * vector_width // 32
    cols = 2 * lanes + 7  # two steps of lanes, then 7 elements in the rest of the row
    kernel = row_kernel((5, cols), lambda x: softmax(x, 1))
    a = torch.randn(5, lanes, generator=torch.Generator().manual_seed(lanes)) * 4
    a = torch.cat([a, a, a[:, :7]], 1)  # the rest of the row repeats the first 7 elements
    source = generate(kernel, CppConfig(row_vectors=row_vectors, vector_width=vector_width))
    assert source.count("lnv::blocks<") == 2 and "ln_expf(" not in source
    (got,) = run(kernel, CppConfig(threads=2, row_vectors=row_vectors, vector_width=vector_width), a)
    assert torch.equal(got[:, -7:], got[:, :7]) and torch.equal(got[:, lanes:2 * lanes], got[:, :lanes])
    torch.testing.assert_close(got, torch.softmax(a, 1))


@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_short_rows_take_lanes_at_one_vector_and_fold_them_in_halves(kind, monkeypatch):
    """Rows up to ``SHORT_ROW`` elements run in lane arrays even where the kernel keeps one
    vector (``omp simd reduction`` would merge its 16 copies one by one); longer rows keep the
    plain loop. Element j of the rest of a row updates lane j; the lanes fold in halving steps."""
    monkeypatch.setattr(row_lanes, "last_level_cache_bytes", lambda: 1 << 10)  # one vector
    build, eager = REDUCTIONS[kind]
    short, long = row_kernel((37, 200), build), row_kernel((37, row_lanes.SHORT_ROW + 1), build)
    source = generate(short, CppConfig())
    assert "_l[16]" in source and "reduction(" not in source and "_l[j + 8]" in source
    assert "_l[" not in generate(long, CppConfig())
    a = torch.randn(37, 200, generator=torch.Generator().manual_seed(7)) * 3
    a[3, 100], a[5, -1], a[6, 0] = float("nan"), float("inf"), float("-inf")
    (got,) = run(short, CppConfig(threads=2), a)
    torch.testing.assert_close(got, eager(a), rtol=1e-5, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("cols", [37, 77, 100, 771])  # rests of 5, 13, 36 (two vectors and 4), 3
@pytest.mark.parametrize("fn", ["sum", "amax", "layernorm", "softmax"])
def test_short_rests_fold_into_the_scalar_states(fn, cols):
    """A rest shorter than a vector updates the scalar states, not the first lanes (row_lanes.py):
    no lane of the array is written narrower than the fold reads it; results as eager's, NaN rows
    included."""
    x = ln.placeholder("x", (33, cols), ln.float32)
    build = {"sum": lambda t: ln.sum(t, 1), "amax": lambda t: ln.max(t, 1),
             "layernorm": lambda t: (t - ln.mean(t, 1, keepdim=True)) * ln.rsqrt(
                 ln.mean((t - ln.mean(t, 1, keepdim=True)) ** 2, 1, keepdim=True) + 1e-5),
             "softmax": lambda t: softmax(t)}[fn]
    (kernel,) = kernels_of([build(x)], [x])
    src = generate(kernel, CppConfig())
    rest = (cols % 32 if cols < 64 else cols % 64) % 16
    rest_loop = f"for (int64_t r0 = {cols - rest}; r0 < {cols}; ++r0)", f"const int64_t r0 = {cols - rest} + j;"
    assert any(loop in src for loop in rest_loop), src
    a = torch.randn(33, cols)
    a[4, cols - 1] = float("nan")  # in the rest
    a[5, 0] = float("nan")         # in the lanes
    want = {"sum": lambda t: t.sum(1), "amax": lambda t: t.amax(1),
            "layernorm": lambda t: torch.nn.functional.layer_norm(t, (cols,)),
            "softmax": lambda t: torch.softmax(t, 1)}[fn](a)
    torch.testing.assert_close(ln.compile(build(x), backend="cpp")(a), want, rtol=1e-5, atol=1e-5, equal_nan=True)
