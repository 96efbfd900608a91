"""Triton backend specifics: every reduction strategy (forced configs) on test_backends' programs,
configs and their heuristics, generated source, the code cache, and compiling for a real GPU.

Correctness with default configs, shared with the C++ backend, is in tests/test_backends.py; every
IR op is in tests/test_triton_ops.py. Runs in Triton's CPU interpreter on machines without a GPU
(each test runs inside ``settings.scope(triton_interpret=True)``; the backend passes the mode to
``triton.jit`` itself, so nothing depends on the environment or on import order). Outputs are
NaN-poisoned by conftest (LOOPNEST_POISON) so unwritten elements show.
"""
import dataclasses
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

import loopnest as ln
from loopnest.backends import registry
from loopnest.backends.triton import settings as triton_settings
from loopnest.backends.triton.compile import compile_ahead, load_module
from loopnest.backends.triton.indexing import transposed_split
from loopnest.backends.triton.launch import StaticLaunch, static_kernel, static_launcher_class
from loopnest.backends.triton import heuristics
from loopnest.backends.triton.heuristics import H200_SMS
from loopnest.backends.triton.params import SPLIT_STRATEGIES, Strategy, TritonConfig, next_pow2
from loopnest.core import settings
from loopnest.dsl.functions import apply
from loopnest.ir.index import product
from loopnest.ir.ops import Op
from loopnest.pipeline import compile_graph
from loopnest.scheduler import schedule
from test_backends import (CASES, KERNEL_SPREAD, REDUCTION_CASES, check_outputs, kernels_of, softmax,
                           spread_kernels)

INTERPRET = not torch.cuda.is_available()  # on a GPU machine the kernels compile for real
DEVICE = "cpu" if INTERPRET else "cuda"
pytestmark = [# the interpreter evaluates both sides of tl.where with numpy, which warns on nan/inf
              pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
              # ... and converts runtime loop bounds with int(), which numpy deprecates for 1-element arrays
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]


def rand(*shape, dtype=torch.float32, lo=-3.0, hi=3.0, gen=None):
    """Uniform random values in [lo, hi) (never all zeros)."""
    g = gen or torch.Generator().manual_seed(hash(shape) % 1000)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype).to(DEVICE)


def tolerances(dtype):
    return {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2),
            torch.float64: (1e-10, 1e-10)}.get(dtype, (3e-5, 3e-5))


def check(out, ref, rtol=None, atol=None):
    assert out.dtype == ref.dtype and out.shape == ref.shape, (out.dtype, ref.dtype, out.shape, ref.shape)
    if ref.dtype.is_floating_point:
        dr, da = tolerances(ref.dtype)
        torch.testing.assert_close(out, ref, rtol=rtol or dr, atol=atol or da, equal_nan=True)
    else:
        assert torch.equal(out.cpu(), ref.cpu()), (out, ref)


def run(outputs, *args, config=None, name="t", inputs=None):
    """Compile ``outputs`` for the triton backend and run it; ``config(kernel)`` forces configs."""
    f = ln.compile(outputs, inputs=inputs, backend="triton", name=name)
    if config is None:
        return f(*args)
    graph = f.graph(*args)
    backend = registry.get("triton")
    configs = {k.name: config(k) if k.reductions else backend.default_config(k)
               for k in schedule(graph, name).kernels}
    out = compile_graph(graph, registry.get("triton"), name, configs)(*args)
    return out[0] if f.single else out


def persistent(xblock=2):
    return lambda k: TritonConfig(XBLOCK=xblock, RBLOCK=next_pow2(product(k.rdomain).as_int()),
                                  strategy="persistent")


def looped(xblock=2, rblock=8):
    return lambda k: TritonConfig(XBLOCK=xblock, RBLOCK=rblock, strategy="looped")


def split(xblock=1, rblock=4, parts=3):
    return lambda k: TritonConfig(XBLOCK=xblock, RBLOCK=rblock, strategy="split", SPLIT=parts)


def split_sync(xblock=1, rblock=4, parts=3):
    return lambda k: TritonConfig(XBLOCK=xblock, RBLOCK=rblock, strategy="split_sync", SPLIT=parts)


STRATEGIES = {"persistent": persistent(), "persistent1": persistent(1), "looped": looped(), "looped1": looped(1, 16),
              "split": split(), "split2": split(2, 8, 4), "split_sync": split_sync(2, 8, 3)}


def test_backend_device_follows_interpreter_mode():
    assert registry.get("triton").device == DEVICE


def test_interpreter_works_when_triton_was_imported_first():
    """Another test (or the user) may import triton before TRITON_INTERPRET is set, which makes
    ``tl.sum``/``tl.max`` compiled-mode functions; generated kernels must not depend on them."""
    code = textwrap.dedent("""
        import os, torch, triton.language
        os.environ["TRITON_INTERPRET"] = "1"
        import loopnest as ln
        x = ln.placeholder("x", (5, 37), ln.float32)
        e = ln.exp(x - ln.max(x, 1, keepdim=True))
        outs = [e / ln.sum(e, 1, keepdim=True), ln.argmax(x, 1), ln.var_mean(x, 1)[0], ln.any(x > 2, 1)]
        a = torch.randn(5, 37)
        got = ln.compile(outs, backend="triton")(a)
        for g, w in zip(got, [torch.softmax(a, 1), a.argmax(1), a.var(1), (a > 2).any(1)]):
            torch.testing.assert_close(g, w)
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_interpreter_is_active_and_outputs_poisoned():
    assert triton_settings.current().interpret == INTERPRET
    assert settings.current().poison


# -- configs ----------------------------------------------------------------------------------------
def test_config_round_trip_and_validation():
    cfg = TritonConfig(XBLOCK=4, RBLOCK=256, num_warps=8, strategy="looped")
    assert TritonConfig.from_json(cfg.to_json()) == cfg
    assert cfg.to_json()["strategy"] == "looped"
    for bad in ({"XBLOCK": 3}, {"RBLOCK": 0}, {"num_warps": 64}, {"num_stages": 0}, {"strategy": "nope"},
                {"XBLOCK": 8192, "RBLOCK": 1024}, {"SPLIT": 4}, {"strategy": "split"}, {"XBLOCK": True}):
        with pytest.raises((ValueError, TypeError)):
            TritonConfig(**bad)
    with pytest.raises(ValueError, match="unknown"):
        TritonConfig.from_json({"XBLOCK": 4, "BLOCK": 2})


def test_validate_config_checks_the_kernel():
    x = ln.placeholder("x", (4, 100), ln.float32)
    kernel = schedule(ln.compile(ln.sum(x, 1)).graph(rand(4, 100)), "v").kernels[0]
    backend = registry.get("triton")
    space = backend.space(kernel, backend.hardware())
    assert space.validate({**backend.default_config(kernel).to_json(), "RBLOCK": 128}).RBLOCK == 128
    with pytest.raises(ValueError, match="not in this kernel's search space"):
        space.validate({**backend.default_config(kernel).to_json(), "RBLOCK": 64, "strategy": "persistent"})


# -- reductions under each strategy ----------------------------------------------------------------
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("case", REDUCTION_CASES)
def test_forced_strategy_matches_eager(case, strategy):
    """test_backends' reduction programs (which run there with default configs) under each strategy."""
    program = CASES[case].program(symbolic=False)
    args = [t.to(DEVICE) for t in program.make(CASES[case].rows[0])]
    out = run(program.outputs, *args, inputs=program.inputs, config=STRATEGIES[strategy], name=case)
    check_outputs(out, program, args, f"{case} {strategy}")


@pytest.mark.parametrize("cols, tail", [(100, 96), (96, None)])
def test_looped_rows_run_full_chunks_unmasked_and_the_partial_chunk_once(cols, tail):
    """A looped row whose length RBLOCK does not divide: the loop covers the full chunks without a
    mask, the last chunk runs once after it, masked; the statistics and the stores stay exact."""
    x = ln.placeholder("x", (3, cols), ln.float32)
    (kernel,) = kernels_of([softmax(x)], [x])
    config = TritonConfig(XBLOCK=1, RBLOCK=32, strategy="looped")
    source = registry.get("triton").codegen(kernel, config)
    if tail is None:
        assert "roffset = " not in source and "rmask" not in source
    else:
        assert f"for roffset in range(0, {tail}, RBLOCK):" in source and f"roffset = {tail}" in source
        loop = source[source.index("for roffset in range(0, "):source.index(f"roffset = {tail}")]
        assert "rmask" not in loop
    xs = rand(3, cols, lo=-30, hi=30)
    out = run(softmax(x), xs, inputs=[x], config=lambda k: config)
    check(out, torch.softmax(xs, -1))


def test_full_sum_large_default_is_split():
    x = ln.placeholder("x", (300, 120), ln.float32)
    a = rand(300, 120)
    f = ln.compile(ln.sum(x), backend="triton")
    check(f(a), a.sum(), rtol=1e-4)
    compiled = next(iter(f.specializations.values()))
    (cfg,) = compiled.configs.values()
    assert cfg.strategy.value == "split"
    source = compiled.backend.codegen(compiled.schedule.kernels[0], cfg)
    assert "def ln_dsl_0_split0(" in source and "def ln_dsl_0_combine0(" in source


def test_persistent_config_rejects_longer_rows_at_run_time():
    x = ln.placeholder("x", ("N", "C"), ln.float32)
    f = ln.compile(ln.sum(x, 1), backend="triton")
    graph = f.graph(rand(3, 8))
    (kernel,) = schedule(graph, "rows").kernels
    compiled = compile_graph(graph, registry.get("triton"), "rows", {kernel.name: TritonConfig(XBLOCK=1, RBLOCK=8)})
    a = rand(3, 8)
    check(compiled(a)[0], a.sum(1))
    with pytest.raises(RuntimeError, match="persistent block of 8"):
        compiled(rand(3, 9))


@pytest.mark.skipif(not INTERPRET, reason="a failed device assert leaves the CUDA context unusable")
def test_gather_bounds_check_in_debug_mode():
    x = ln.placeholder("x", (4, 8), ln.float32)
    idx = ln.placeholder("idx", (4, 3), ln.int64)
    bad = torch.tensor([[0, 1, 2], [3, 4, 8], [0, 0, 0], [1, 1, 1]], device=DEVICE)
    with settings.scope(debug=True):
        f = ln.compile(ln.gather(x, 1, idx), backend="triton", name="dbg")
        source = registry.get("triton").codegen(*_only_kernel(f, rand(4, 8), bad))
        assert "gather: index out of range" in source
        with pytest.raises(Exception, match="out of range"):
            f(rand(4, 8), bad)
    ok = bad.clamp(max=7)
    check(f(rand(4, 8), ok), torch.gather(rand(4, 8), 1, ok))


def _only_kernel(f, *args):
    compiled = f.compile_for(args)
    (kernel,) = compiled.schedule.kernels
    return kernel, compiled.configs[kernel.name]


def test_transposed_access_uses_2d_tiles():
    x = ln.placeholder("x", (37, 50), ln.float32)
    a = rand(37, 50)
    kernel, cfg = _only_kernel(ln.compile(ln.permute(x, 1, 0) + 1), a)
    cfg = registry.get("triton").default_config(kernel)
    assert cfg.YBLOCK > 1
    source = registry.get("triton").codegen(kernel, cfg)
    assert "yindex" in source and "[YBLOCK, XBLOCK]" not in source.split("def ")[0]


def test_a_per_channel_load_keeps_1d_tiles():
    """x[n, c, h, w] * s[c] reads s contiguously along c, but at one address per stored row: a
    broadcast, not a transpose, so the kernel stays one flat 1D loop (2D tiles of 64 over rows
    of 14 x 14 left a quarter of their lanes idle and made a batch norm's apply 3x slower)."""
    x, s = ln.placeholder("x", (4, 6, 14, 14), ln.float32), ln.placeholder("s", (6, 1, 1), ln.float32)
    a, b = rand(4, 6, 14, 14), rand(6, 1, 1)
    kernel, cfg = _only_kernel(ln.compile(x * s, backend="triton"), a, b)
    assert transposed_split(kernel) is None and cfg.YBLOCK == 1
    check(run([x * s], a, b)[0], a * b)


def test_graph_names_become_identifiers():
    x = ln.placeholder("x", (3, 4), ln.float32)
    a = rand(3, 4)
    out = run([x * 2, ln.sum(x, 1)], a, name="my graph+1")
    check(out[0], a * 2)
    check(out[1], a.sum(1))


def test_index64_path_runs():
    """Force int64 index arithmetic (normally only for buffers of 2**31+ elements)."""
    x = ln.placeholder("x", (5, 37), ln.float32)
    a = rand(5, 37)
    f = ln.compile(softmax(x), backend="triton")
    compiled = f.compile_for((a,))
    launcher = next(iter(compiled.launchers.values()))
    assert launcher.program.index64 is False
    launcher.program = dataclasses.replace(launcher.program, index64=True)
    check(compiled(a)[0], torch.softmax(a, 1))


# -- generated source, caching, heuristics --------------------------------------------------------
def _kernels(outputs, *args, name="k"):
    return schedule(ln.compile(outputs).graph(*args), name).kernels


def _source(kernel, config):
    return registry.get("triton").codegen(kernel, config)


def test_source_shape_per_strategy():
    x = ln.placeholder("x", (8, 32), ln.float32)
    (kernel,) = _kernels(softmax(x), rand(8, 32), name="softmax")
    persistent_src = _source(kernel, TritonConfig(XBLOCK=2, RBLOCK=32, strategy="persistent"))
    assert "def ln_softmax_0(" in persistent_src  # the kernel's name, as profilers show it
    assert persistent_src.count("tl.load(b_x") == 1  # all three phases share one load
    assert "for roffset" not in persistent_src and "mask" not in persistent_src  # 8x32 tiles exactly
    looped_src = _source(kernel, TritonConfig(XBLOCK=1, RBLOCK=16, strategy="looped"))
    assert looped_src.count("for roffset in range(0, rnumel, RBLOCK)") == 2  # max and sum of exp in one pass
    ragged = _source(kernel, TritonConfig(XBLOCK=4, RBLOCK=64, strategy="persistent"))
    assert "rmask = rindex < rnumel" in ragged and "xmask" not in ragged


def test_contiguous_offsets_fold_to_flat_index():
    x = ln.placeholder("x", ("A", "B", "C"), ln.float32)
    (kernel,) = _kernels(x * 2, rand(2, 3, 4))
    src = _source(kernel, registry.get("triton").default_config(kernel))
    assert "tl.load(b_x + (xindex)" in src and "//" not in src


def test_code_cache_and_counters():
    x = ln.placeholder("x", (3, 5), ln.float32)
    a = rand(3, 5)
    ln.counters.reset()
    check(run(ln.exp(x) * 0.25, a, name="cached"), torch.exp(a) * 0.25)
    first = dict(ln.counters)
    check(run(ln.exp(x) * 0.25, a, name="cached"), torch.exp(a) * 0.25)
    assert first["kernels_generated"] == 1
    assert ln.counters["kernels_generated"] == 2
    assert ln.counters["kernels_compiled"] == first["kernels_compiled"] <= 1
    assert ln.counters["code_cache_hits"] == first["code_cache_hits"] + 1
    files = list(settings.cache_dir("triton").rglob("*.py"))
    assert any("def ln_cached_0(" in f.read_text() for f in files)


def _check_heuristic(kernel, cfg: TritonConfig) -> None:
    """What a default config must satisfy, whatever the thresholds of backends/triton/heuristics.py."""
    rows = product(kernel.pdomain).as_int() if kernel.pdomain else 1
    row = product(kernel.rdomain).as_int() if kernel.reductions else None
    assert (cfg.strategy in SPLIT_STRATEGIES) == (cfg.SPLIT > 1)
    if not kernel.reductions:
        assert cfg.RBLOCK == 1 and cfg.SPLIT == 1
        assert (cfg.YBLOCK > 1) == (transposed_split(kernel) is not None), "2D tiles exactly for transposes"
        if rows is not None and cfg.YBLOCK == 1:  # no more elements per program than the kernel has,
            assert cfg.XBLOCK <= max(next_pow2(rows), 32 * cfg.num_warps)  # unless one per thread
        return
    if cfg.strategy is Strategy.PERSISTENT:  # the whole reduced range in one block, not twice it
        assert row is not None and row <= cfg.RBLOCK < 2 * row
    elif cfg.strategy is Strategy.LOOPED:  # more than one step
        assert row is None or cfg.RBLOCK < row
    elif cfg.strategy is Strategy.SPLIT:  # full reductions only; every program gets at least one full block
        assert not kernel.pdomain and (row is None or cfg.RBLOCK * cfg.SPLIT <= row)
    else:  # split_sync: rows; no program with an empty slice, all programs of a row on an H200 at once
        chunk = -(-row // (cfg.SPLIT * cfg.RBLOCK)) * cfg.RBLOCK
        assert kernel.pdomain and (cfg.SPLIT - 1) * chunk < row and cfg.SPLIT <= H200_SMS
    if kernel.pdomain:
        assert rows is None or cfg.XBLOCK <= next_pow2(rows), "no program of only masked rows"
    else:
        assert cfg.XBLOCK == 1
        if row is None or row >= 1 << 20:
            assert cfg.strategy is Strategy.SPLIT, "a large full reduction spreads over many programs"


@pytest.mark.parametrize("name", list(KERNEL_SPREAD))
def test_default_config_properties(name):
    """Over test_backends' spread of kernels (where the default is also checked to be a point of
    the search space, on this machine and on an H200)."""
    backend = registry.get("triton")
    for kernel in spread_kernels(name):
        _check_heuristic(kernel, backend.default_config(kernel))


def test_16_bit_rows_take_larger_tiles():
    """Rows loaded from 16-bit tensors move half the bytes per element, so a program takes more
    of them than of the same rows in float32 (when there are rows enough)."""
    def tile(dtype):
        x = ln.placeholder("x", (32768, 1024), dtype)
        xf = ln.cast(x, ln.float32)
        (kernel,) = kernels_of([xf / ln.sum(xf, 1, keepdim=True)], [x])
        cfg = registry.get("triton").default_config(kernel)
        return cfg.XBLOCK * cfg.RBLOCK
    assert tile(ln.bfloat16) > tile(ln.float32)


def test_per_row_loads_do_not_vote_for_column_tiles():
    """A row kernel whose reduction reads only a per-row value (cross-entropy's backward sums a
    one-hot of the target) streams its rows in a later phase: it keeps row tiles. Voting with the
    target's load had given it 32x32 column tiles (5x slower on an H200)."""
    x = ln.placeholder("x", (4096, 128256), ln.bfloat16)
    t = ln.placeholder("t", (4096, 1), ln.float32)
    per_row = ln.sum(ln.broadcast_to(t, (4096, 128256)), 1, keepdim=True)
    grad = ln.exp(ln.cast(x, ln.float32)) * per_row
    (kernel,) = kernels_of([ln.cast(grad, ln.bfloat16)], [x, t])
    assert kernel.reductions and kernel.elem_stores
    cfg = registry.get("triton").default_config(kernel)
    assert cfg.XBLOCK == 1 and cfg.RBLOCK >= 1024, cfg


def _gpu_cases():
    x, y = ln.placeholder("x", ("N", 48), ln.float32), ln.placeholder("y", (6, 48), ln.bfloat16)
    i = ln.placeholder("i", ("N", 5), ln.int64)
    a, b = torch.rand(6, 48), torch.rand(6, 48, dtype=torch.bfloat16)
    ia = torch.zeros(6, 5, dtype=torch.int64)
    yf = ln.cast(y, ln.float32)
    unary = (Op.TANH, Op.ERFINV, Op.EXPM1, Op.LOG1P, Op.ROUND, Op.TRUNC, Op.ASINH, Op.SQRT, Op.RSQRT)
    math_ops = [apply(op, x) for op in unary] + [apply(op, x, x) for op in (Op.POW, Op.ATAN2, Op.FLOORDIV)]
    return {
        "libdevice_math": (math_ops, [a], None),
        "softmax_persistent": (softmax(x), [a], persistent(1)),
        "softmax_looped": (softmax(x), [a], looped(1, 16)),
        "welford_arg_prod_split": ([ln.var_mean(x, 1)[0], ln.argmax(x, 1), ln.prod(x, 1)], [a],
                                   split(2, 8, 4)),
        "full_reduction": ([ln.sum(x), ln.argmin(x), ln.any(x > 0)], [a], split(1, 32, 8)),
        "softmax_split_sync": (softmax(x), [a], split_sync(2, 16, 3)),
        "welford_arg_split_sync_looped": ([ln.var_mean(x, 1)[0], ln.argmax(x, 1)], [a], split_sync(1, 4, 3)),
        "transpose_gather": ([ln.permute(x, 1, 0) * 2, ln.gather(x, 1, i)], [a, ia], None),
        "bf16": (ln.cast(yf / ln.sum(yf, 1, keepdim=True), ln.bfloat16), [b], looped(2, 32)),
        "bf16_fast_tanh": (ln.cast(ln.tanh(yf) * 0.5, ln.bfloat16), [b], None),
    }


def compile_gpu_cases() -> int:
    """Generate the GPU flavour of the source (libdevice math, device asserts) for the cases above
    and compile it with Triton's real compiler down to cubins for sm_90; returns the count.
    Runs in a process without TRITON_INTERPRET (the interpreter patches triton.language)."""
    backend, count = registry.get("triton"), 0
    assert not triton_settings.current().interpret
    for case, (outs, args, config) in _gpu_cases().items():
        sources = []
        for kernel in schedule(ln.compile(outs).graph(*args), case).kernels:
            cfg = config(kernel) if config and kernel.reductions else backend.default_config(kernel)
            program = backend.program(kernel, cfg)
            sources.append(program.source)
            module = load_module(program.source, interpret=False)
            dtypes = {name: buf.dtype.torch for name, buf in kernel.buffers.items()}
            for index64 in (False, True):
                for compiled in compile_ahead(program, module, dtypes, index64=index64):
                    assert compiled.asm["cubin"]
                    _check_static_launch_arguments(compiled)
                    count += 1
        assert "libdevice." in "".join(sources) or case != "libdevice_math"
        assert "gather: index out of range" in "".join(sources) or case != "transpose_gather"
        assert ("tanh.approx.f32" in "".join(sources)) == (case == "bf16_fast_tanh"), case
    return count


def _check_static_launch_arguments(compiled) -> None:
    """The arguments passed to PyTorch's prebuilt launcher are the kernel's non-constexpr
    parameters, as many as its type string has."""
    if static_launcher_class() is None:
        return
    static, keep = static_kernel(compiled)
    names = compiled.src.fn.arg_names
    assert [names[i] for i in keep] == [n for n in names if compiled.src.signature[n] != "constexpr"]
    assert len(keep) == len(static.arg_tys) and "O" in static.arg_tys
    # the bound launch makes the very C call the wrapper's own run makes
    calls = []
    static.C_impl = types.SimpleNamespace(_launch_kernel=lambda *a: calls.append(a))
    static.function = 1234  # as if loaded
    args = [f"arg{i}" for i in range(len(names))]
    static.run(3, 1, 1, 77, *[args[i] for i in keep])
    bound = StaticLaunch(static, keep)
    bound(3, 77, args)
    assert bound.direct is not None and calls[0] == calls[1]


def test_gpu_source_compiles_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0", "LOOPNEST_DEBUG": "1"}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_triton; "
            "print('compiled', test_triton.compile_gpu_cases())")
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split("compiled")[-1]) >= 22


def test_evict_first_only_on_one_phase_kernels_of_a_few_l2s():
    small = ln.placeholder("x", (64, 128), ln.float32)
    (col_sum,) = _kernels(ln.sum(small, 0), rand(64, 128))
    assert heuristics.evict_first(col_sum)
    assert "evict_first" in _source(col_sum, registry.get("triton").default_config(col_sum))
    (softmax_rows,) = _kernels(softmax(small), rand(64, 128))
    assert not heuristics.evict_first(softmax_rows)  # three phases: the second reads hit L2
    rows = heuristics.EVICT_FIRST_L2S * heuristics.l2_bytes() // (4 * 1024) + 1
    big = ln.placeholder("y", (rows, 1024), ln.float32)
    (big_sum,) = _kernels(ln.sum(big, 0), torch.empty(rows, 1024, device="meta"))
    assert not heuristics.evict_first(big_sum)
    assert "evict_first" not in _source(big_sum, registry.get("triton").default_config(big_sum))
    symbolic = ln.placeholder("z", ("R", "C"), ln.float32)
    (sym_sum,) = _kernels(ln.sum(symbolic, 0), rand(64, 128))
    assert heuristics.evict_first(sym_sum) == (sym_sum.bytes_moved().as_int() is not None)
