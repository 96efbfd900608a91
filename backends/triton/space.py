"""The Triton backend's search space over ``TritonConfig``.

* pointwise: ``XBLOCK``, ``YBLOCK`` (only for kernels tiled in 2D, e.g. transposes),
  ``num_warps``, ``num_stages``;
* reductions with rows: ``XBLOCK`` rows per program, ``RBLOCK``, ``strategy`` (persistent,
  looped, split or split_sync), ``SPLIT`` (programs per row, split strategies only),
  ``num_warps``, ``num_stages``;
* rows that also reduce across them (a norm's weight gradient): only ``XBLOCK``,
  ``num_warps`` and ``num_stages``; such a kernel runs whole rows persistently, so the other
  knobs would only name invalid points (98% of the full space for layernorm's backward, where
  10 trials measured 3 configs);
* full reductions: ``RBLOCK``, ``strategy`` (persistent, looped or split), ``SPLIT`` (used by the
  split strategy only: other strategies take ``SPLIT = 1``), ``num_warps``, ``num_stages``.

Static constraints reject a config before compiling it: ``TritonConfig``'s own limits (tile size,
powers of two), ``codegen.check_config`` (a persistent ``RBLOCK`` shorter than the row), and on a
GPU a per-thread register budget (a tile of more than ``MAX_ELEMENTS_PER_THREAD`` values per
thread cannot stay in registers) and, for split_sync, at most one program per row and
multiprocessor (the programs of a row wait for each other, so all of them must fit at once). The default config is always a point of the space.
"""
from __future__ import annotations

from ...core.hardware import HardwareInfo, HardwareKind
from ...core.space import Knob, SearchSpace
from ...ir.index import product
from ...scheduler.kernel import Kernel
from .codegen import check_config
from .heuristics import default_config
from .indexing import transposed_split
from .params import SPLIT_STRATEGIES, Strategy, TritonConfig, next_pow2

MAX_ELEMENTS_PER_THREAD = 512
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3)
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ROW_SPLITS = SPLITS[:8]
MAX_RBLOCK = 1 << 16


def _pow2_range(lo: int, hi: int) -> tuple[int, ...]:
    """The powers of two from ``lo`` (itself one) up to ``hi``."""
    return tuple(1 << k for k in range(lo.bit_length() - 1, hi.bit_length()))


def _with(choices: tuple, value) -> tuple:
    """``choices`` plus ``value`` (kept sorted when numeric), so the default is always a point."""
    if value in choices:
        return choices
    return tuple(sorted(choices + (value,))) if isinstance(value, int) else choices + (value,)


def _from_json(data: dict) -> TritonConfig:
    """Build a config; strategies other than split take SPLIT = 1 whatever the knob says."""
    data = dict(data)
    if data.get("strategy") not in (s.value for s in SPLIT_STRATEGIES):
        data["SPLIT"] = 1
    return TritonConfig.from_json(data)


def _knobs(kernel: Kernel) -> list[Knob]:
    if not kernel.reductions:
        knobs = [Knob("XBLOCK", _pow2_range(16, 8192))]
        if transposed_split(kernel) is not None:
            knobs.append(Knob("YBLOCK", _pow2_range(1, 128)))
        return knobs + [Knob("num_warps", WARPS[:5]), Knob("num_stages", STAGES[:2])]
    row = product(kernel.rdomain).as_int()
    top = min(MAX_RBLOCK, next_pow2(row)) if row else MAX_RBLOCK
    rblocks = _pow2_range(min(16, top), top)
    if not kernel.pdomain:
        strategies = (Strategy.PERSISTENT.value, Strategy.LOOPED.value, Strategy.SPLIT.value)
        return [Knob("RBLOCK", rblocks), Knob("strategy", strategies, ordered=False),
                Knob("SPLIT", SPLITS), Knob("num_warps", WARPS), Knob("num_stages", STAGES)]
    if kernel.across:  # whole rows, persistent: RBLOCK, strategy and SPLIT stay the default's
        return [Knob("XBLOCK", _pow2_range(1, 64)), Knob("num_warps", WARPS), Knob("num_stages", STAGES)]
    strategies = tuple(s.value for s in Strategy)
    return [Knob("XBLOCK", _pow2_range(1, 64)), Knob("RBLOCK", rblocks),
            Knob("strategy", strategies, ordered=False), Knob("SPLIT", ROW_SPLITS),
            Knob("num_warps", WARPS), Knob("num_stages", STAGES)]


def search_space(kernel: Kernel, hardware: HardwareInfo) -> SearchSpace:
    """The tiling/launch knobs of ``kernel``; constraints as in the module docstring."""
    default = default_config(kernel).to_json()
    knobs = tuple(Knob(k.name, _with(k.choices, default[k.name]), k.ordered) for k in _knobs(kernel))
    names = {k.name for k in knobs}
    fixed = {name: value for name, value in default.items() if name not in names}
    gpu = hardware.kind == HardwareKind.CUDA

    def constraint(config: TritonConfig) -> str | None:
        try:
            check_config(kernel, config)
        except ValueError as exc:
            return str(exc)
        if gpu and config.strategy is Strategy.SPLIT_SYNC and config.SPLIT > hardware.cores:
            return (f"split_sync needs its {config.SPLIT} programs per row on the GPU at once; "
                    f"{hardware.name} has {hardware.cores} multiprocessors")
        per_thread = config.XBLOCK * max(config.YBLOCK, config.RBLOCK) // (32 * config.num_warps)
        if gpu and per_thread > MAX_ELEMENTS_PER_THREAD:
            return (f"tile {config.XBLOCK}x{max(config.YBLOCK, config.RBLOCK)} puts {per_thread} "
                    f"values in each of {32 * config.num_warps} threads (limit {MAX_ELEMENTS_PER_THREAD})")
        return None

    return SearchSpace("triton", _from_json, knobs, fixed, constraint)

