"""Rows split across programs (split, split_sync) and reductions over middle dims, in Triton.

The fused multi-phase kernels (softmax, log_softmax, cross-entropy) and middle-dimension means
run under forced configs and are compared with eager PyTorch. In Triton's interpreter, which runs
programs one after another, split_sync configs run as split (two launches per phase); on a GPU
these tests run the one-launch kernel whose programs meet at barriers. The heuristics and the
search space are checked at the GPU sizes of the suite's new rows.
"""
import dataclasses

import pytest
import torch

import loopnest as ln
from loopnest.backends import registry
from loopnest.backends.triton import settings as triton_settings
from loopnest.backends.triton.codegen import generate
from loopnest.backends.triton.params import Strategy, TritonConfig
from loopnest.core.space import InvalidConfig
from test_backends import H200, kernels_of, log_softmax, softmax
from test_triton import DEVICE, check, rand, run

pytestmark = [pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]


def cross_entropy(x, t):
    """Per-row loss ``logsumexp(x) - x[t]`` (cross-entropy without the mean)."""
    m = ln.max(x, 1, keepdim=True)
    lse = ln.log(ln.sum(ln.exp(x - m), 1, keepdim=True)) + m
    return ln.reshape(lse, (x.shape[0],)) - ln.reshape(ln.gather(x, 1, t), (x.shape[0],))


def forced(strategy, xblock, rblock, parts):
    return lambda k: TritonConfig(XBLOCK=xblock, RBLOCK=rblock, strategy=strategy, SPLIT=parts, num_warps=2)


# XBLOCK 2 over 5 rows masks a row; slices of one block (whole) and of several blocks (looped);
# SPLIT 3 leaves the last program a shorter slice and needs a mask over the partials.
CONFIGS = {"sync_whole": forced("split_sync", 2, 64, 3), "sync_looped": forced("split_sync", 1, 16, 3),
           "sync_rows": forced("split_sync", 2, 32, 4), "split": forced("split", 2, 16, 3)}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_split_rows_match_eager(fn, config):
    x = ln.placeholder("x", (5, 150), ln.float32)
    a = rand(5, 150)
    out = run({"softmax": softmax, "log_softmax": log_softmax}[fn](x), a, config=CONFIGS[config], inputs=[x])
    want = torch.softmax(a, 1) if fn == "softmax" else torch.log_softmax(a, 1)
    check(out, want)


@pytest.mark.parametrize("config", ["sync_whole", "sync_rows", "sync_one_row"])
def test_split_sync_softmax_of_infinite_and_nan_rows_matches_eager(config):
    """A slice's exps are reused for the output (``_reuse_exp_terms``): rows holding +inf,
    -inf, NaN, or only -inf give eager's NaNs and zeros."""
    x = ln.placeholder("x", (6, 150), ln.float32)
    a = rand(6, 150).cpu()
    a[0, 7] = float("inf")
    a[1, 100:] = float("-inf")
    a[2, 140] = float("nan")
    a[3] = float("-inf")
    a[4, 3], a[4, 120] = float("inf"), float("-inf")
    a = a.to(DEVICE)
    configs = {**CONFIGS, "sync_one_row": forced("split_sync", 1, 64, 3)}
    check(run(softmax(x), a, config=configs[config], inputs=[x]), torch.softmax(a, 1))


@pytest.mark.parametrize("config", list(CONFIGS))
def test_split_cross_entropy_matches_eager(config):
    """Two reduction phases, a gather and a row store that only one program per row makes."""
    x = ln.placeholder("x", (5, 150), ln.float32)
    t = ln.placeholder("t", (5, 1), ln.int64)
    a, ta = rand(5, 150), torch.randint(0, 150, (5, 1), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    out = run(cross_entropy(x, t), a, ta, config=CONFIGS[config], inputs=[x, t])
    check(out, torch.nn.functional.cross_entropy(a, ta[:, 0], reduction="none"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", ["sync_rows", "split", "default"])
@pytest.mark.parametrize("dtype", [ln.float32, ln.bfloat16])
def test_middle_dim_mean_matches_eager(config, dtype):
    """``x.mean(1)`` on a 3-D tensor: the reduced dim is strided, loads run along the last dim."""
    x = ln.placeholder("x", (3, 70, 24), dtype)
    a = rand(3, 70, 24, dtype=dtype.torch)
    out = run(ln.mean(x, 1), a, config=CONFIGS.get(config), inputs=[x])
    check(out, a.float().mean(1).to(dtype.torch))


def _kernel(shape, build, dtype=ln.float32):
    x = ln.placeholder("x", shape, dtype)
    (kernel,) = kernels_of([build(x)], [x])
    return kernel


@pytest.mark.parametrize("shape", [(1024, 131072), (128, 262144), (16, 524288)])
def test_long_or_few_rows_default_to_split_sync(shape):
    """Rows longer than a persistent block, or too few to fill an H200, are split over programs of
    one launch whose slices are one block each (the row stays in registers across phases).
    Runs where the heuristics count an H200's 132 multiprocessors (no GPU, or an H200)."""
    if torch.cuda.is_available() and torch.cuda.get_device_properties(0).multi_processor_count != H200.cores:
        pytest.skip("the thresholds are an H200's")
    kernel = _kernel(shape, log_softmax)
    cfg = registry.get("triton").default_config(kernel)
    assert cfg.strategy is Strategy.SPLIT_SYNC and 2 <= cfg.SPLIT <= H200.cores
    assert cfg.RBLOCK * cfg.SPLIT >= shape[1] > cfg.RBLOCK * (cfg.SPLIT - 1)
    # two programs per multiprocessor, unless that would cut slices below 2048 elements
    assert shape[0] * cfg.SPLIT >= 2 * H200.cores or cfg.RBLOCK == 2048 or shape[1] > 32768


@pytest.mark.parametrize("shape", [(8, 16384), (64, 8192)])
def test_few_small_rows_are_not_split(shape):
    """Few rows holding fewer than 2**22 elements in all (a group norm's groups in a small CNN
    block) stay one program per row: a split's workspace and zeroing launch would cost more host
    time than the GPU time it saves (H200 counts, as above)."""
    if torch.cuda.is_available() and torch.cuda.get_device_properties(0).multi_processor_count != H200.cores:
        pytest.skip("the thresholds are an H200's")
    assert registry.get("triton").default_config(_kernel(shape, log_softmax)).strategy is not Strategy.SPLIT_SYNC
    few_long = registry.get("triton").default_config(_kernel((64, 262144), lambda x: ln.sum(x, 1)))
    assert few_long.strategy is Strategy.SPLIT_SYNC and few_long.SPLIT >= 2, "few rows, 2**24 elements: split"


def test_long_rows_only_reduced_stay_looped():
    """Many long rows that no later phase reads again (cross-entropy's row losses) stay looped."""
    kernel = _kernel((4096, 128256), lambda x: ln.log(ln.sum(ln.exp(x - ln.max(x, 1, keepdim=True)), 1)),
                     ln.bfloat16)
    assert registry.get("triton").default_config(kernel).strategy is Strategy.LOOPED


def test_middle_dim_mean_default_loads_along_the_rows():
    kernel = _kernel((32, 2048, 512), lambda x: ln.mean(x, 1))
    cfg = registry.get("triton").default_config(kernel)
    assert cfg.strategy is Strategy.LOOPED and cfg.XBLOCK == 32
    source = generate(kernel, cfg, triton_settings.TritonSettings(interpret=False, debug=False)).source
    assert "rindex*512" in source.replace(" ", ""), "the reduced dim steps by the inner extent"


def test_split_sync_source_is_one_launch_with_barriers():
    kernel = _kernel((8, 3000), softmax)
    cfg = TritonConfig(XBLOCK=2, RBLOCK=1024, strategy="split_sync", SPLIT=3)
    gpu = generate(kernel, cfg, triton_settings.TritonSettings(interpret=False, debug=False))
    assert len(gpu.launches) == 1 and gpu.launches[0].grid.as_int() == 4 * 3
    assert gpu.source.count("tl.atomic_add(arrived_ptr, 1") == 1, "the softmax statistics meet at one barrier"
    assert 'cache_modifier=".cg"' in gpu.source, "partials of other programs are read past L1"
    assert [w.zeroed for w in gpu.workspaces if w.name == "ws_arrived"] == [True]
    interpreted = generate(kernel, cfg, triton_settings.TritonSettings(interpret=True, debug=False))
    assert len(interpreted.launches) == 3 and "atomic_add" not in interpreted.source
    two_phases = _kernel((8, 3000), lambda x: x - ln.sum(x, 1, keepdim=True) / ln.max(x, 1, keepdim=True))
    assert generate(two_phases, cfg, triton_settings.TritonSettings(interpret=False, debug=False)).source.count(
        "tl.atomic_add(arrived_ptr, 1") == 1, "one barrier per reduction phase"


def test_space_offers_split_for_rows_and_bounds_split_sync():
    kernel = _kernel((128, 262144), log_softmax)
    small = dataclasses.replace(H200, name="a GPU of 32 multiprocessors", cores=32)
    space = registry.get("triton").space(kernel, small)
    default = registry.get("triton").default_config(kernel).to_json()
    assert space.validate(default).strategy is Strategy.SPLIT_SYNC
    for strategy in ("split", "split_sync", "looped"):
        assert strategy in next(k for k in space.knobs if k.name == "strategy").choices
    knobs = {k.name: default[k.name] for k in space.knobs}
    with pytest.raises(InvalidConfig, match="32 multiprocessors"):
        space.config({**knobs, "SPLIT": 64, "RBLOCK": 4096})
    assert space.validate({**default, "SPLIT": 64, "RBLOCK": 4096, "strategy": "split"}).SPLIT == 64


@pytest.mark.parametrize("shape, build, split", [
    ((262144, 1024), lambda x: ln.sum(x, 0), 32),     # 32 row tiles: split for four programs per SM
    ((65536, 2048), lambda x: ln.sum(x, 0), 16),      # 64 row tiles: 528 / 64 rounded up to a power of two
    ((32768, 8192), lambda x: ln.sum(x, 0), 1),       # 256 row tiles: more than the SMs
    ((32, 2048, 512), lambda x: ln.mean(x, 1), 1),    # 512 row tiles: enough programs already
    ((1000, 8), lambda x: ln.sum(x, 0), 1),           # too small to pay for a second launch
])
def test_strided_reductions_split_when_row_tiles_are_few(shape, build, split):
    """A reduction over a strided dim splits that dim across programs only when its row tiles
    leave the multiprocessors idle (H200 counts, as above)."""
    if torch.cuda.is_available() and torch.cuda.get_device_properties(0).multi_processor_count != H200.cores:
        pytest.skip("the thresholds are an H200's")
    cfg = registry.get("triton").default_config(_kernel(shape, build))
    assert cfg.SPLIT == split
    assert cfg.strategy is (Strategy.SPLIT if split > 1 else Strategy.LOOPED)
    assert cfg.XBLOCK == min(32, shape[-1]) and cfg.RBLOCK == 32


def test_split_sync_softmax_takes_one_exp_per_element():
    """The output ``exp(x - max) / sum`` reuses the slice's terms of the sum, times a row factor."""
    kernel = _kernel((4, 4096), softmax)
    settings = triton_settings.TritonSettings(interpret=False, debug=False)
    source = generate(kernel, TritonConfig(XBLOCK=1, RBLOCK=1024, strategy="split_sync", SPLIT=4), settings).source
    assert source.count("acc0_terms = tl.exp2(") == 1
    assert source.count("tl.exp2((acc0_terms_shift - acc0_out0) * 1.4426950408889634) / ") == 1
    # the terms, the partials' rescale and the output's factor flush subnormals (ops.flushing_exp); the sum's
    # factor, one per row, is the graph's own exp
    assert source.count("tl.exp2(") == 3 and source.count("tl.exp(") == 1
    store = next(line for line in source.splitlines() if "tl.store(b_buf" in line)
    value = store.split(", ")[1]
    assert f"{value} = acc0_terms * " in source  # one multiply per element


def test_split_sync_rows_of_one_program_publish_their_statistics_as_scalars():
    """As [1, 1] tiles in the partials' layout, Triton broadcast softmax statistics to the slice
    through shared memory at the slice's full size (25x slower on the H200): 0-d values instead;
    other statistics keep their tiles (0-d, a two-barrier kernel ran 1.5x slower)."""
    kernel = _kernel((8, 3000), softmax)
    settings = triton_settings.TritonSettings(interpret=False, debug=False)
    one_row = generate(kernel, TritonConfig(XBLOCK=1, RBLOCK=1024, strategy="split_sync", SPLIT=3), settings)
    assert "acc0_out0 = tl.reshape(" in one_row.source and "acc0_out1 = tl.reshape(" in one_row.source
    two_rows = generate(kernel, TritonConfig(XBLOCK=2, RBLOCK=1024, strategy="split_sync", SPLIT=3), settings)
    assert "tl.reshape(" not in two_rows.source
    other = _kernel((8, 3000), lambda x: x - ln.sum(x, 1, keepdim=True))  # a plain sum keeps its [1, 1] tile
    one_row = generate(other, TritonConfig(XBLOCK=1, RBLOCK=1024, strategy="split_sync", SPLIT=3), settings)
    assert "tl.reshape(" not in one_row.source


@pytest.mark.parametrize("shape, xblock, warps", [
    ((16, 21, 128, 128), 64, 2),   # softmax over 21 channels: tiles of 64 x 32, two warps
    ((64, 8, 4096), 256, 2),       # a row of 8: wider along the contiguous dim
    ((2, 16, 20), 64, 1),          # 40 rows of 16: a tile no wider than the rows (rounded up)
])
def test_strided_rows_held_whole_take_tiles_of_about_2048(shape, xblock, warps):
    """A softmax over a short strided dim (H200, 2026-12-06: 16x21x128x128 at 67 us with 32 x 32
    tiles on 8 warps, 15.5 us with 64 x 32 on 2, a copy 15.4) holds its rows in ~2048-element
    tiles, a warp per 1024 elements."""
    cfg = registry.get("triton").default_config(_kernel(shape, lambda x: softmax(x, 1)))
    assert cfg.strategy is Strategy.PERSISTENT and cfg.RBLOCK == 1 << (shape[1] - 1).bit_length()
    assert (cfg.XBLOCK, cfg.num_warps) == (xblock, warps)


def test_strided_rows_held_whole_match_eager():
    x = ln.placeholder("x", (2, 5, 8, 8), ln.float32)
    a = rand(2, 5, 8, 8)
    check(run(softmax(x, 1), a, inputs=[x]), torch.softmax(a, 1))
