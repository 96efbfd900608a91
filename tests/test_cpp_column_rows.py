"""C++ column reductions fold several rows per pass over their partial states
(``column_rows.py``): bit-identical to one row per pass, remainder rows included, for chunks of
columns and for rows split across threads, and used by the split-rows code only where its
partials outgrow L1."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import loopnest as ln
from loopnest.backends.cpp import column_rows
from loopnest.backends.cpp.codegen import generate
from loopnest.backends.cpp.params import CppConfig
from test_backends import kernels_of
from test_cpp_split_rows import REDUCTIONS, column_kernel, run

FOLDED = f"p_ + {column_rows.ROWS_PER_PASS} <="  # the loop over groups of rows


def outputs(kernel, config, a, monkeypatch, per_pass):
    with monkeypatch.context() as m:
        m.setattr(column_rows, "ROWS_PER_PASS", per_pass)
        return run(kernel, config, a)


@pytest.mark.parametrize("split", ["chunks", "rows"])
@pytest.mark.parametrize("shape", [(1003, 37), (7, 3001), (4098, 520), (3, 16)])
@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_rows_per_pass_give_the_results_of_one_row_per_pass(kind, shape, split, monkeypatch):
    build, eager = REDUCTIONS[kind]
    kernel = column_kernel(shape, build)
    a = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    config = CppConfig(threads=2, column_split=split)
    folded = outputs(kernel, config, a, monkeypatch, column_rows.ROWS_PER_PASS)
    for got, one, want in zip(folded, outputs(kernel, config, a, monkeypatch, 1), eager(a.double())):
        assert torch.equal(got, one), "the same additions in the same order"
        if got.dtype == torch.int64:
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=1e-6 * shape[0])


@pytest.mark.parametrize("shape, split, folded", [
    ((4096, 512), "chunks", True),   # chunks read rows in short runs: several rows are concurrent streams
    ((4096, 512), "rows", False),    # 2 KB of partials stay in L1: one row per pass measured faster
    ((4096, 3001), "rows", True),    # 12 KB of partials share L1 with the rows
])
def test_rows_are_folded_for_chunks_and_for_split_rows_with_partials_beyond_l1(shape, split, folded):
    code = generate(column_kernel(shape, REDUCTIONS["sum"][0]), CppConfig(threads=2, column_split=split))
    assert (FOLDED in code) is folded


def test_a_column_reduction_that_also_stores_elements_folds_its_rows(monkeypatch):
    x = ln.placeholder("x", (1001, 300), ln.float32)
    kernel = next(k for k in kernels_of([ln.exp(x) * 2, ln.sum(ln.exp(x), 0)], [x]) if k.reductions)
    config = CppConfig(threads=2, column_split="chunks")
    assert FOLDED in generate(kernel, config)
    a = torch.randn(1001, 300)
    expect = {tuple(o.shape): o for o in (a.exp() * 2, a.exp().sum(0))}
    for got, one in zip(run(kernel, config, a), outputs(kernel, config, a, monkeypatch, 1)):
        assert torch.equal(got, one)
        torch.testing.assert_close(got, expect[tuple(got.shape)], rtol=1e-5, atol=1e-4)




@pytest.mark.parametrize("split", ["chunks", "rows"])
def test_two_passes_over_the_rows_of_one_kernel_compile_and_match_eager(split):
    """Batch norm's shape: the statistics' pass over the rows, then the pass that writes the
    shifted rows, both folding rows in one scope (each declares its row counter in a block of
    its own)."""
    x = ln.placeholder("x", (1001, 300), ln.float32)
    shifted = x - ln.max(x, 0)
    kernel = next(k for k in kernels_of([shifted], [x]) if k.reductions)
    config = CppConfig(threads=2, column_split=split)
    assert generate(kernel, config).count(FOLDED) == 2
    a = torch.randn(1001, 300, generator=torch.Generator().manual_seed(5))
    (got,) = run(kernel, config, a)
    assert torch.equal(got, a - a.amax(0))


def test_per_column_values_are_computed_once_per_column():
    """A log_softmax over a middle dim (columns path): log of each column's sum is computed once
    per chunk of columns into an array (``column_values``), not once per row; results match."""
    from loopnest.backends.cpp.backend import CppBackend
    from loopnest.scheduler.kernel import signature
    from test_backends import log_softmax

    x = ln.placeholder("x", (4, 50, 33), ln.float32)
    (kernel,) = kernels_of([log_softmax(x, axis=1)], [x])
    src = generate(kernel, CppConfig())
    assert src.count("ln_logf(") == 1 and "cv" in src, src
    a = torch.randn(4, 50, 33, generator=torch.Generator().manual_seed(5))
    out = torch.full((4, 50, 33), float("nan"))
    launcher = CppBackend().compile([(kernel, CppConfig())]).launchers[kernel.name]
    launcher({n: out if n in kernel.outputs else a for n in signature(kernel).buffers}, {})
    torch.testing.assert_close(out, torch.log_softmax(a, 1))


def _compiled(fn, x, monkeypatch, slab_bytes):
    """``fn`` compiled for ``x`` with ``PREFETCH_SLAB_BYTES`` at ``slab_bytes``, and its C++."""
    with monkeypatch.context() as m:
        m.setattr(column_rows, "PREFETCH_SLAB_BYTES", slab_bytes)
        compiled = ln.compile_fx(make_fx(fn)(x), [x], backend="cpp", tune="off")
    return compiled, compiled.lowered.stats.source_path.read_text()


@pytest.mark.parametrize("shape, prefetches", [
    ((9, 33, 160), True),     # rows not a multiple of a pass, outer count odd
    ((6, 64, 300), True),
    ((2, 64, 2000), False),   # 512 KB slabs: beyond PREFETCH_SLAB_BYTES
    ((4, 8, 3000), False),    # columns in several chunks: the next item is the next chunk
])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "standardize"])
def test_passes_over_slabs_prefetch_the_next_slab_without_changing_results(op, shape, prefetches, monkeypatch):
    fn = {"softmax": lambda t: torch.softmax(t, 1), "log_softmax": lambda t: torch.log_softmax(t, 1),
          "standardize": lambda t: (t - t.mean(1, keepdim=True)) * (t.var(1, keepdim=True) + 1e-5).rsqrt()}[op]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5)) * 3
    on, source = _compiled(fn, x, monkeypatch, column_rows.PREFETCH_SLAB_BYTES)
    off, plain = _compiled(fn, x, monkeypatch, 0)
    assert ("__builtin_prefetch" in source) is prefetches
    assert "__builtin_prefetch" not in plain
    got = on(x)
    assert torch.equal(got, off(x)), "a prefetch changes no result"
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
