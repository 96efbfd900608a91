"""Triton source for a kernel, plus the plan of launches that runs it.

Kernel kinds and the functions they become (one ``@triton.jit`` function each, named after the
kernel so profilers show ``ln_softmax_0``):

* pointwise: 1D tiles of ``XBLOCK`` elements, or 2D ``YBLOCK x XBLOCK`` tiles when loads and
  stores are contiguous along different dims (a transpose), so both stay coalesced;
* reductions over rows, ``[XBLOCK, RBLOCK]`` tiles: *persistent* (the whole row in one block,
  all phases share loaded values) or *looped* (one loop over ``RBLOCK`` chunks per phase,
  accumulators carried as lanes);
* *split* reductions (full reductions, or few long rows): per phase, ``NAME_split{k}`` writes one
  partial state per (row, program) to a workspace and ``NAME_combine{k}`` merges them; finished
  values go to small workspaces that later phases read;
* rows with reductions *across* them (``KReduction.across``: a norm's weight gradient): persistent
  rows, each of at most ``ACROSS_PROGRAMS`` programs looping over row blocks and folding the
  across values into lanes of its own; ``NAME`` stores each program's column partials to a
  workspace and ``NAME_cols`` reduces them per column and runs the column stores;
* *split_sync* rows (long rows, few rows): one launch whose programs split each row and exchange
  partial states through a barrier after each phase, so a program's slice stays on chip (or in
  L2) from the first phase to the last. Triton's interpreter runs programs one after another, so
  there (no program could wait for a later one) split_sync configs run as split.

Every function takes the buffers' data pointers, then the symbolic sizes, then workspaces, then
its constexpr block sizes and ``IDX64`` (int64 index arithmetic when some buffer has 2**31
elements or more).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...ir import dtypes as dt
from ...ir.expr import AccRef, Apply, Expr, loads, walk
from ...ir.ops import Op
from ...ir.index import Index, Indirect, as_var, floordiv, product
from ...scheduler.kernel import Kernel, signature
from ...scheduler.online_softmax import online_softmax
from .emit import KernelContext, TritonEmitter, identifier, mask_arg
from .indexing import Axis, flatten_vars, transposed_split
from .mathlib import helpers_for
from .ops import tl_type
from .params import SPLIT_STRATEGIES, Strategy, TritonConfig, next_pow2
from .reductions import TritonAccumulator
from .settings import TritonSettings

INDENT = "    "
INDEX32_LIMIT = 2 ** 31
_HEADER = "import triton\nimport triton.language as tl\n"
_LIBDEVICE = "from triton.language.extra import libdevice\n"
_ROW, _TILE, _COLS = "[XBLOCK, 1]", "[XBLOCK, RBLOCK]", "[1, RBLOCK]"
SUBROW = 128  # elements of a looped row's sub-row (``_Generator._subrows``)
ROW_POINTERS = True  # split_sync kernels address rows as ptr + row offset + element offset (emit.address)
VECTOR_PARTIALS = True  # split_sync rows of one program read softmax partials as vectors (_reduce_partials)
ACROSS_PROGRAMS = 264   # programs of a row kernel with reductions across rows (two per H200 multiprocessor)
COLS_BLOCK, PARTS_BLOCK = 32, 64  # columns and partials per step of the combine over programs
_XR = frozenset({"x", "r"})


def _bf16_pointwise(kernel: Kernel) -> bool:
    """A pointwise kernel whose every result is bfloat16: approximate tanh cannot be seen there."""
    return not kernel.reductions and all(kernel.buffers[b].dtype == dt.bfloat16 for b in kernel.outputs)


@dataclass(frozen=True)
class Arg:
    """One runtime argument: a buffer, a symbolic size or a workspace, by name."""

    kind: str  # "buffer" | "sym" | "workspace"
    name: str


@dataclass(frozen=True)
class Workspace:
    """Scratch memory a launch plan needs (partials and finished values of split reductions,
    arrival counters of split_sync kernels: those start at zero)."""

    name: str
    dtype: torch.dtype
    numel: Index
    zeroed: bool = False


@dataclass(frozen=True)
class Launch:
    """One launch of one generated function over ``grid`` programs."""

    fn: str
    args: tuple[Arg, ...]
    grid: Index
    constexprs: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class Program:
    """Generated source of one kernel and how to run it."""

    name: str
    source: str
    launches: tuple[Launch, ...]
    workspaces: tuple[Workspace, ...]
    index64: bool | None          # None: decided per call from ``extents``
    extents: tuple[Index, ...]    # element extents whose size decides int64 indexing
    max_rnumel: int | None        # persistent kernels: the longest row RBLOCK covers


def _divides(numel: Index, block: int) -> bool:
    n = numel.as_int()
    return n is not None and n % block == 0


def _cdiv(n: Index, block: int) -> Index:
    return floordiv(n + (block - 1), Index.of(block))


def check_config(kernel: Kernel, config: TritonConfig) -> None:
    """Raise ValueError if ``config`` cannot run ``kernel``."""
    if not kernel.reductions:
        if config.strategy in SPLIT_STRATEGIES:
            raise ValueError(f"{kernel.name} is pointwise; the {config.strategy.value} strategy needs a reduction")
        return
    if config.YBLOCK != 1:
        raise ValueError(f"{kernel.name} is a reduction; YBLOCK (2D pointwise tiles) must be 1")
    rnumel = product(kernel.rdomain).as_int()
    if kernel.across and config.strategy is not Strategy.PERSISTENT:
        raise ValueError(f"{kernel.name} reduces across its rows: that needs the persistent strategy, "
                         f"got {config.strategy.value}")
    if config.strategy is Strategy.PERSISTENT and rnumel is not None and rnumel > config.RBLOCK:
        raise ValueError(f"{kernel.name}: persistent strategy needs RBLOCK >= {rnumel}, "
                         f"got {config.RBLOCK}")


def generate(kernel: Kernel, config: TritonConfig, settings: TritonSettings) -> Program:
    """The Triton module source and launch plan of ``kernel`` under ``config``."""
    if kernel.across and product(kernel.rdomain).as_int() is None:
        raise ValueError(f"kernel {kernel.name}: the Triton backend runs reductions across rows "
                         f"({', '.join(r.name for r in kernel.across)}) only for rows of a known length")
    check_config(kernel, config)
    if one_pass_statistics(kernel, config):
        kernel = online_softmax(kernel)
    return _Generator(kernel, config, settings).program()


def one_pass_statistics(kernel: Kernel, config: TritonConfig) -> bool:
    """Whether ``kernel`` takes its softmax statistics in one reduction under ``config``: where
    each phase reads its row from memory again (looped and split strategies, split_sync slices
    longer than one block), which saves a pass, and where a row's programs meet at a barrier per
    statistic (split_sync slices of one block), which saves a barrier: the (max, sum) of each
    slice meet once (H200: log_softmax over 128 x 262144 0.65 -> 0.72 of copy, softmax over
    1024 x 131072 0.74 -> 0.79; bench/row_variants.py). Not for persistent rows, whose block
    stays in registers with no barrier to save."""
    return bool(kernel.reductions) and config.strategy is not Strategy.PERSISTENT


class _Generator:
    def __init__(self, kernel: Kernel, config: TritonConfig, settings: TritonSettings):
        self.k = kernel
        self.cfg = config
        self.settings = settings
        self.sig = signature(kernel)
        self.xnumel = product(kernel.pdomain)
        self.rnumel = product(kernel.rdomain)
        self.pvars = tuple(as_var(v) for v in kernel.pvars())
        self.rvars = tuple(as_var(v) for v in kernel.rvars())
        self.functions: list[str] = []
        self.launches: list[Launch] = []
        self.workspaces: list[Workspace] = []

    # -- assembly -------------------------------------------------------------------------------
    def program(self) -> Program:
        if not self.k.reductions:
            self._pointwise()
        elif self.cfg.strategy is Strategy.SPLIT_SYNC and not self.settings.interpret:
            self._split_sync()
        elif self.cfg.strategy in SPLIT_STRATEGIES:  # the interpreter runs programs one by one
            self._split()
        elif self.k.across:
            self._rows_across()
        else:
            self._rows(self.cfg.strategy is Strategy.PERSISTENT)
        body = "\n\n".join(self.functions)
        head = _HEADER + (_LIBDEVICE if "libdevice." in body else "")
        source = "\n\n".join(part for part in (head, helpers_for(body), body) if part) + "\n"
        extents = self._extents()
        static = all(e.as_int() is not None for e in extents)
        index64 = any(e.as_int() >= INDEX32_LIMIT for e in extents) if static else None
        persistent = self.k.reductions and self.cfg.strategy is Strategy.PERSISTENT
        return Program(self.k.name, source, tuple(self.launches), tuple(self.workspaces), index64,
                       extents, self.cfg.RBLOCK if persistent else None)

    def _extents(self) -> tuple[Index, ...]:
        out = [self.xnumel * self.cfg.SPLIT, self.rnumel]
        for name in self.sig.buffers:
            lay = self.k.buffers[name].layout
            out.append(lay.offset + 1 + sum(((n - 1) * s for n, s in zip(lay.sizes, lay.strides)),
                                            Index.of(0)))
        return tuple(out)

    def _context(self, axes: list[Axis], masked: set[str]) -> KernelContext:
        ctx = KernelContext(self.k, {a.name: a for a in axes}, frozenset(masked),
                            portable=self.settings.portable_math, debug=self.settings.debug,
                            index_checks=self.settings.index_checks, interpret=self.settings.interpret,
                            fast_tanh=not self.settings.portable_math and _bf16_pointwise(self.k))
        for a in axes:
            ctx.subs.update(flatten_vars(a))
        return ctx

    def _function(self, name: str, ctx: KernelContext, lines: list[str], constexprs: list,
                  workspaces: list[str], grid: Index, num_warps: int | None = None) -> None:
        name = identifier(name)  # kernel names come from user-chosen graph names
        ws_names = list(dict.fromkeys(workspaces + ctx.loaded))
        params = ([ctx.ptr(b) for b in self.sig.buffers] + [ctx.sym(s) for s in self.sig.symbols]
                  + ws_names + [f"{c}: tl.constexpr" for c, _ in constexprs] + ["IDX64: tl.constexpr"])
        decorator = "@triton.jit(debug=True)" if self.settings.debug or ctx.asserts else "@triton.jit"
        self.functions.append(f"{decorator}\ndef {name}({', '.join(params)}):\n" + "\n".join(lines))
        args = ([Arg("buffer", b) for b in self.sig.buffers] + [Arg("sym", s) for s in self.sig.symbols]
                + [Arg("workspace", w) for w in ws_names])
        self.launches.append(Launch(name, tuple(args), grid, tuple(constexprs),
                                    num_warps or self.cfg.num_warps, self.cfg.num_stages))

    def _prologue(self, em: TritonEmitter, axes: list[Axis]) -> None:
        """Symbol widening for IDX64, axis extents and the program id."""
        if self.sig.symbols:
            em.line("if IDX64:")
            for s in self.sig.symbols:
                em.line(f"{INDENT}{em.ctx.sym(s)} = tl.full([], {em.ctx.sym(s)}, tl.int64)")
        for a in axes:
            constant = ": tl.constexpr" if a.numel.as_int() is not None else ""
            em.line(f"{a.name}numel{constant} = {em.index(a.numel)}")
        em.line("pid = tl.program_id(0)")
        em.line("if IDX64:")
        em.line(f"{INDENT}pid = pid.to(tl.int64)")

    def _masks(self, em: TritonEmitter, axes: list[Axis], ends: dict[str, str] | None = None) -> None:
        for a in axes:
            if a.name in em.ctx.masked:
                end = (ends or {}).get(a.name, f"{a.name}numel")
                em.line(f"{a.mask} = {a.index} < {end}")

    def _accumulators(self) -> list[TritonAccumulator]:
        return [TritonAccumulator(r, f"acc{k}") for k, r in enumerate(self.k.reductions)]

    # -- pointwise ------------------------------------------------------------------------------
    def _pointwise(self) -> None:
        cfg, k = self.cfg, self.k
        two_d = cfg.YBLOCK > 1 and len(k.pdomain) >= 2
        if two_d:
            s = transposed_split(k) or len(k.pdomain) - 1
            axes = [Axis("y", product(k.pdomain[:s]), self.pvars[:s], 0),
                    Axis("x", product(k.pdomain[s:]), self.pvars[s:], 1)]
        else:
            axes = [Axis("x", self.xnumel, self.pvars, 0)]
        blocks = {"x": cfg.XBLOCK, "y": cfg.YBLOCK}
        ctx = self._context(axes, {a.name for a in axes if not _divides(a.numel, blocks[a.name])})
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        if two_d:
            em.line("xblocks = (xnumel + XBLOCK - 1) // XBLOCK")
            em.line("xindex = (pid % xblocks) * XBLOCK + tl.arange(0, XBLOCK)[None, :]")
            em.line("yindex = (pid // xblocks) * YBLOCK + tl.arange(0, YBLOCK)[:, None]")
        else:
            em.line("xindex = pid * XBLOCK + tl.arange(0, XBLOCK)")
        self._masks(em, axes)
        shape = "[YBLOCK, XBLOCK]" if two_d else "[XBLOCK]"
        for st in k.elem_stores:
            em.store(st.buffer, st.index, st.value, frozenset(ctx.axes), shape)
        grid = _cdiv(axes[-1].numel, cfg.XBLOCK) * (_cdiv(axes[0].numel, cfg.YBLOCK) if two_d else 1)
        constexprs = [("XBLOCK", cfg.XBLOCK)] + ([("YBLOCK", cfg.YBLOCK)] if two_d else [])
        self._function(k.name, ctx, lines, constexprs, [], grid)

    # -- reductions over rows -------------------------------------------------------------------
    def _row_axes(self) -> list[Axis]:
        return [Axis("x", self.xnumel, self.pvars, 0), Axis("r", self.rnumel, self.rvars, 1)]

    def _rows(self, persistent: bool) -> None:
        cfg, k = self.cfg, self.k
        r_exact = self.rnumel == cfg.RBLOCK if persistent else _divides(self.rnumel, cfg.RBLOCK)
        masked = {name for name, exact in (("x", _divides(self.xnumel, cfg.XBLOCK)), ("r", r_exact)) if not exact}
        axes = self._row_axes()
        ctx = self._context(axes, masked)
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        em.line("xindex = pid * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        self._masks(em, axes[:1])
        self._rbase(em)
        if persistent:
            em.line("rindex = rbase")
            self._masks(em, axes[1:])
        for phase in range(k.num_phases):
            accs = self._phase(em, phase, persistent, "0", "rnumel")
            for acc in accs:
                self._publish(em, acc)
        for st in k.row_stores:
            em.store(st.buffer, st.index, st.value, frozenset({"x"}), _ROW)
        constexprs = [("XBLOCK", cfg.XBLOCK), ("RBLOCK", cfg.RBLOCK)]
        self._function(k.name, ctx, lines, constexprs, [], _cdiv(self.xnumel, cfg.XBLOCK))

    def _phase(self, em: TritonEmitter, phase: int, whole: bool, start: str, end: str,
               exp_terms: dict[str, str] | None = None) -> list:
        """Reductions and element stores of ``phase`` over one block (``whole``) or a loop over
        ``[start, end)``; returns the phase's accumulators."""
        accs = [a for a in self._accumulators() if a.r.level == phase]
        stores = [s for s in self.k.elem_stores if s.phase == phase]
        if whole:
            self._block_phase(em, accs, stores, exp_terms)
        else:
            self._loop_phase(em, accs, stores, start, end)
        return accs

    @staticmethod
    def _rbase(em: TritonEmitter) -> None:
        em.line("rbase = tl.arange(0, RBLOCK)[None, :]")
        em.line("if IDX64:")
        em.line(f"{INDENT}rbase = rbase.to(tl.int64)")

    def _tile(self, em: TritonEmitter, acc: TritonAccumulator, tile: str = _TILE) -> str:
        """The reduction's element values as a full tile (``[XBLOCK, RBLOCK]``) of its value type."""
        e, vt = acc.r.body, acc.value_type
        name, deps = em.emit(e), em.ctx.deps(e)
        if not deps:
            return em.assign(f"tl.full({tile}, {name}, {vt})", "v")
        value = name if tl_type(e.dtype) == vt else f"{name}.to({vt})"
        if deps != _XR:
            value = f"tl.broadcast_to({value}, {tile})"
        return name if value == name else em.assign(value, "v")

    def _lanes(self, em: TritonEmitter, acc: TritonAccumulator, prefix: str) -> dict[str, str]:
        names = acc.names(prefix)
        lanes = acc.lanes(self._tile(em, acc), em.ctx.mask(_XR), "rindex", _TILE)
        for suffix, expr in lanes.items():
            em.line(f"{names[suffix]} = {expr}")
        return names

    def _block_phase(self, em: TritonEmitter, accs, stores, exp_terms: dict[str, str] | None = None) -> None:
        """Persistent: reduce whole rows at once; state ends in ``acc.names()``; ``exp_terms``
        names the exps of EXP_SUM accumulators that a later phase reuses (``_reuse_exp_terms``)."""
        for acc in accs:
            for line in acc.block(self._tile(em, acc), em.ctx.mask(_XR), "rindex", _TILE, acc.names(),
                                  (exp_terms or {}).get(acc.var)):
                em.line(line)
        for st in stores:
            em.store(st.buffer, st.index, st.value, _XR, _TILE)

    def _loop_phase(self, root: TritonEmitter, accs, stores, start: str, end: str) -> None:
        """Looped: one pass over ``[start, end)`` in RBLOCK chunks; state ends in ``acc.names()``.
        Over a whole static row that RBLOCK does not divide, the full chunks run unmasked and the
        last, partial chunk runs once after the loop with the mask."""
        if not accs and not stores:
            return
        carried = {acc.var: acc.names(acc.var + "_lanes") for acc in accs}
        subrows = self._subrows(accs, stores)
        tile, base = _TILE, "rbase"
        if subrows:
            width = self.cfg.RBLOCK // subrows
            tile, base = f"[{subrows}, {width}]", "rsub"
            root.line(f"rsub = tl.arange(0, {subrows})[:, None] * {width} + tl.arange(0, {width})[None, :]")
            root.line("if IDX64:")
            root.line(f"{INDENT}rsub = rsub.to(tl.int64)")
        for acc in accs:
            for line in acc.carry(carried[acc.var], tile, subrows):
                root.line(line)
        ctx = root.ctx
        chunks = [(f"for roffset in range({start}, {end}, RBLOCK):", INDENT, ctx.masked)]
        if "r" in ctx.masked and (start, end) == ("0", "rnumel") and self.rnumel.as_int() is not None:
            full = self.rnumel.as_int() // self.cfg.RBLOCK * self.cfg.RBLOCK
            chunks = [(f"for roffset in range({start}, {full}, RBLOCK):", INDENT, ctx.masked - {"r"}),
                      (f"roffset = {full}", "", ctx.masked)]
        for header, indent, masked in chunks:
            # the chunk's hoisted lines land in root while it is emitted: before its header
            saved, ctx.masked = ctx.masked, masked
            body = self._chunk(root, accs, stores, carried, end, indent, tile, base, subrows)
            ctx.masked = saved
            root.line(header)
            root.lines.extend(body)
        for acc in accs:
            for line in acc.finish(carried[acc.var], acc.names(), subrows):
                root.line(line)
        if subrows:  # a later loop assigns rindex (and its mask) as [XBLOCK, RBLOCK]: Triton keeps types
            root.line("rindex = rbase")
            self._masks(root, [ctx.axes["r"]], {"r": end})

    def _subrows(self, accs, stores) -> int:
        """Sub-rows per chunk of a looped row whose phase only takes softmax statistics (0: none).

        A chunk of ``RBLOCK`` elements is ``RBLOCK // SUBROW`` sub-rows of ``SUBROW``, each within
        one warp, with a running max and sum each: the chunk's max needs no exchange between warps
        (a block-wide max per chunk waits for every warp), and the sub-rows meet once, after the
        row. H200, cross-entropy over 4096 x 128256 bf16 logits: 0.312 -> 0.301 ms (0.79 -> 0.81 of
        copy; bench/row_variants.py --generated); the hand-written form reaches 0.288 (0.85), with
        sub-rows of 256 0.83, of 512 0.66-0.72. With each sub-row's max and sum held as a ``[R]``
        vector (``TritonAccumulator.carry``) and exps that flush subnormals: 0.260 (0.94)."""
        cfg = self.cfg
        only_statistics = bool(accs) and not stores and all(a.is_exp_sum for a in accs)
        if cfg.strategy is not Strategy.LOOPED or cfg.XBLOCK != 1 or not only_statistics:
            return 0
        return cfg.RBLOCK // SUBROW if cfg.RBLOCK >= 2 * SUBROW else 0

    def _chunk(self, root: TritonEmitter, accs, stores, carried: dict, end: str, indent: str,
               tile: str = _TILE, base: str = "rbase", subrows: int = 0) -> list[str]:
        """The statements folding the chunk at ``roffset`` into ``carried`` (indented by
        ``indent`` below ``root``: a loop body, or the tail chunk after the loop), over a chunk
        of shape ``tile`` whose offsets are ``base``."""
        body: list[str] = []
        inner = TritonEmitter(root.ctx, body, root.indent + indent, parent=root, loop_axes=frozenset({"r"}))
        inner.line(f"rindex = roffset + {base}")
        self._masks(inner, [root.ctx.axes["r"]], {"r": end})
        for acc in accs:
            value = self._tile(inner, acc, tile)
            for line in acc.fold(carried[acc.var], value, inner.ctx.mask(_XR), "rindex", tile, subrows):
                inner.line(line)
        for st in stores:
            inner.store(st.buffer, st.index, st.value, _XR, tile)
        return body

    @staticmethod
    def _publish(em: TritonEmitter, acc: TritonAccumulator, scalar: bool = False) -> list[str]:
        """Bind the finished outputs of ``acc`` and make them visible to later expressions;
        ``scalar``: as 0-d values (a row of one program reduced from its partials: see
        ``_split_sync``)."""
        names = []
        for k, expr in enumerate(acc.results(acc.names())):
            name = f"{acc.var}_out{k}"
            em.line(f"{name} = tl.reshape({expr}, [])" if scalar else f"{name} = {expr}")
            em.ctx.acc_values[(acc.r.name, k)] = name
            names.append(name)
        return names

    # -- reductions across rows ------------------------------------------------------------------
    def _prefetch_rows(self, em: TritonEmitter, inner: TritonEmitter) -> None:
        """Software-pipelines the row loop of ``_rows_across``: each row block's tiles are loaded
        one iteration ahead (into loop-carried ``pf`` values, the first before the loop), so
        the next rows stream in while this block reduces and stores (rows past the end are
        masked). Triton's own pipelining (``num_stages``) leaves this loop alone:
        RMSNorm's backward on 32768x4096 bf16 took 0.267 ms either way, 0.222 prefetched."""
        streams = list(dict.fromkeys(
            n for e in self.k.expressions() for n in loads(e)
            if em.ctx.index_deps(n.index) == {"x", "r"} and not any(isinstance(a, Indirect) for i in n.index
                                                                      for a in i.atoms())))
        if not streams:
            return
        carried = [em.fresh("pf") for _ in streams]
        em.line("xnext = pid * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        for name, e in zip(carried, streams):
            em.line(f"{name} = {em.load_at_rows(e, 'xnext')}")
        for name, e in zip(carried, streams):
            inner.cache[e] = inner.assign(name + (".to(tl.float32)" if e.dtype.is_low_precision else ""))
        inner.line("xnext = xindex + NPROG * XBLOCK")
        for name, e in zip(carried, streams):
            inner.line(f"{name} = {inner.load_at_rows(e, 'xnext')}")

    def _rows_across(self) -> None:
        """Persistent rows, ``NPROG`` programs each looping over every ``NPROG``-th row block. The
        row reductions and stores run per row block as in ``_rows``; values that do not vary along
        the rows (a weight) are loaded once per program, before the loop. Each across reduction
        folds its values into ``[XBLOCK, RBLOCK]`` lanes carried over the loop, reduces them over
        the rows once at the end and stores the program's partial per column, which ``_columns``
        combines."""
        cfg, k = self.cfg, self.k
        rows = self.xnumel.as_int()
        nprog = ACROSS_PROGRAMS if rows is None else max(1, min(ACROSS_PROGRAMS, -(-rows // cfg.XBLOCK)))
        masked = {name for name, exact in (("x", _divides(self.xnumel, cfg.XBLOCK)),
                                           ("r", self.rnumel == cfg.RBLOCK)) if not exact}
        axes = self._row_axes()
        ctx = self._context(axes, masked)
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        self._rbase(em)
        em.line("rindex = rbase")
        self._masks(em, axes[1:])
        across = [a for a in self._accumulators() if a.r.across]
        carried = {a.var: a.names(a.var + "_cols") for a in across}
        for a in across:
            for c in a.components():
                em.line(f"{carried[a.var][c.suffix]} = tl.full({_TILE}, {c.identity}, {c.tl_type})")
        body: list[str] = []
        inner = TritonEmitter(ctx, body, INDENT * 2, parent=em, loop_axes=frozenset({"x"}))
        inner.line("xindex = xstart + tl.arange(0, XBLOCK)[:, None]")
        self._masks(inner, axes[:1])
        self._prefetch_rows(em, inner)
        for phase in range(k.num_phases):
            mine = [a for a in self._accumulators() if a.r.level == phase]
            self._block_phase(inner, [a for a in mine if not a.r.across],
                              [s for s in k.elem_stores if s.phase == phase])
            for a in mine:
                if a.r.across:
                    new = self._lanes(inner, a, a.var + "_new")
                    for line in a.merge(carried[a.var], new):
                        inner.line(line)
                else:
                    self._publish(inner, a)
        for st in k.row_stores:
            inner.store(st.buffer, st.index, st.value, frozenset({"x"}), _ROW)
        em.line("for xstart in range(pid * XBLOCK, xnumel, NPROG * XBLOCK):")
        lines.extend(body)
        partial = self._partial_workspaces(across, nprog * self.rnumel)
        rmask = mask_arg(ctx.mask({"r"}))
        for a in across:
            for line in a.reduce(carried[a.var], a.names(), axis="0"):
                em.line(line)
            for suffix, name in a.names().items():
                em.line(f"tl.store({partial[a.var][suffix]} + (pid * rnumel + rindex), {name}{rmask})")
        workspaces = [w for a in across for w in partial[a.var].values()]
        constexprs = [("XBLOCK", cfg.XBLOCK), ("RBLOCK", cfg.RBLOCK), ("NPROG", nprog)]
        self._function(k.name, ctx, lines, constexprs, workspaces, Index.of(nprog))
        self._columns(across, partial, nprog)

    def _columns(self, across: list, partial: dict, nprog: int) -> None:
        """``NAME_cols``: per block of ``RBLOCK`` columns, the ``NPROG`` partials of each across
        reduction reduced in steps of ``SBLOCK``, then the kernel's column stores."""
        k = self.k
        axes = [Axis("r", self.rnumel, self.rvars, 1)]
        ctx = self._context(axes, set() if _divides(self.rnumel, COLS_BLOCK) else {"r"})
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        em.line("rindex = pid * RBLOCK + tl.arange(0, RBLOCK)[None, :]")
        self._masks(em, axes)
        em.line("sbase = tl.arange(0, SBLOCK)[:, None]")
        lanes = {a.var: a.names(a.var + "_lanes") for a in across}
        for a in across:
            for c in a.components():
                em.line(f"{lanes[a.var][c.suffix]} = tl.full([SBLOCK, RBLOCK], {c.identity}, {c.tl_type})")
        em.line("for soffset in range(0, NPROG, SBLOCK):")
        em.line(f"{INDENT}sindex = soffset + sbase")
        mask = " & ".join(m for m in ("(sindex < NPROG)", ctx.mask({"r"})) if m)
        for a in across:
            part = a.names(a.var + "_part")
            for c in a.components():
                em.line(f"{INDENT}{part[c.suffix]} = tl.load({partial[a.var][c.suffix]} + (sindex * rnumel + rindex), "
                        f"mask={mask}, other={c.identity})")
            for line in a.merge(lanes[a.var], part):
                em.line(INDENT + line)
        for a in across:
            for line in a.reduce(lanes[a.var], a.names(), axis="0"):
                em.line(line)
            self._publish(em, a)
        for st in k.col_stores:
            em.store(st.buffer, st.index, st.value, frozenset({"r"}), _COLS)
        constexprs = [("RBLOCK", COLS_BLOCK), ("SBLOCK", PARTS_BLOCK), ("NPROG", nprog)]
        workspaces = [w for a in across for w in partial[a.var].values()]
        self._function(f"{k.name}_cols", ctx, lines, constexprs, workspaces, _cdiv(self.rnumel, COLS_BLOCK),
                       num_warps=4)

    # -- rows split across programs that wait for each other -----------------------------------
    def _split_sync(self) -> None:
        """One launch: the ``SPLIT`` consecutive programs of a row block each reduce their slice,
        publish partial states, meet at a barrier (an arrival counter per row block) and all reduce
        the partials themselves, then go on to the next phase over the same slice. A slice of one
        block stays in registers across phases; a longer one is read again from L2 (all programs
        in flight hold about ``programs x slice`` bytes). With one row per program, softmax
        statistics reduced from the partials are 0-d values: as ``[1, 1]`` tiles of the partials'
        layout, Triton broadcast them to the slice's layout through shared memory at the slice's
        full size (8198 shared-memory stores and 137 barriers per program in log_softmax's PTX,
        against 6 and 10; 25x slower on the H200). Other statistics stay ``[1, 1]``: made 0-d,
        log_softmax's two-barrier kernel ran 0.097 -> 0.142 ms. Programs only wait for programs of
        their own row block, which are dispatched together: no deadlock while SPLIT programs fit
        on the GPU at once (``space`` bounds SPLIT by the multiprocessors)."""
        cfg, k = self.cfg, self.k
        axes = self._row_axes()
        ctx = self._context(axes, {"r"} | ({"x"} if not _divides(self.xnumel, cfg.XBLOCK) else set()))
        rnumel = self.rnumel.as_int()
        whole = rnumel is not None and rnumel <= cfg.SPLIT * cfg.RBLOCK  # one block per slice
        ctx.row_pointers = ROW_POINTERS and whole  # looped slices: 103 -> 127 registers (log_softmax, 16 warps)
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        self._slice(em, axes)
        vector = VECTOR_PARTIALS and cfg.XBLOCK == 1 and any(a.is_exp_sum for a in self._accumulators())
        self._sindex(em, vector)
        rows = _cdiv(self.xnumel, cfg.XBLOCK)
        self.workspaces.append(Workspace("ws_arrived", torch.int32, rows, zeroed=True))
        em.line("arrived_ptr = ws_arrived + pid // SPLIT")
        if whole:
            em.line("rindex = rstart + rbase")
            self._masks(em, axes[1:], {"r": "rend"})
        workspaces, barriers = ["ws_arrived"], 0
        exp_terms = {a.var: f"{a.var}_terms" for a in self._accumulators() if a.is_exp_sum} if whole else {}
        for phase in range(k.num_phases):
            accs = self._phase(em, phase, whole, "rstart", "rend", exp_terms)
            if not accs:
                continue
            partial = self._partial_workspaces(accs)
            workspaces += [w for acc in accs for w in partial[acc.var].values()]
            self._store_partials(em, accs, partial)
            barriers += 1
            self._barrier(em, barriers)
            for acc in accs:
                scalar = cfg.XBLOCK == 1 and acc.is_exp_sum
                self._reduce_partials(em, acc, partial, cached=False, vector=scalar and vector)
                self._publish(em, acc, scalar=scalar)
                if acc.var in exp_terms:
                    self._reuse_exp_terms(em, acc, exp_terms[acc.var])
        body: list[str] = []
        inner = TritonEmitter(ctx, body, INDENT * 2, parent=em)  # values hoist; stores stay inside
        for st in k.row_stores:
            inner.store(st.buffer, st.index, st.value, frozenset({"x"}), _ROW)
        if body:
            em.line("if sid == 0:")
            lines.extend(body)
        constexprs = [("XBLOCK", cfg.XBLOCK), ("RBLOCK", cfg.RBLOCK), ("SPLIT", cfg.SPLIT),
                      ("SBLOCK", next_pow2(cfg.SPLIT))]
        self._function(k.name, ctx, lines, constexprs, workspaces, rows * cfg.SPLIT)

    def _reuse_exp_terms(self, em: TritonEmitter, acc: TritonAccumulator, terms: str) -> None:
        """A later phase's ``exp(x - max)`` (softmax's output) as the slice's own terms times one
        factor per row, ``exp(x - m*) * exp(m* - max)``, where ``m*`` is the slice's max (0 when
        infinite): one exp per element instead of two, and a division of it by a row value (the
        sum) one multiply by a row factor. An infinite max or a NaN makes the factor or the sum
        NaN where eager's ``exp(x - max)`` is NaN. H200, softmax over 1024x131072: 0.79 -> 0.84
        of copy with the exps reused (the hand-written form reached 0.94)."""
        body, top = acc.r.body, em.ctx.acc_values[(acc.r.name, 0)]

        def is_exp(n: Expr) -> bool:
            return (isinstance(n, Apply) and n.op is Op.EXP and isinstance(n.args[0], Apply)
                    and n.args[0].op is Op.SUB and n.args[0].args[0] == body
                    and isinstance(n.args[0].args[1], AccRef)
                    and (n.args[0].args[1].name, n.args[0].args[1].output) == (acc.r.name, 0))

        nodes = list(dict.fromkeys(n for st in self.k.elem_stores for n in walk(st.value)))
        divisions = [n for n in nodes if isinstance(n, Apply) and n.op is Op.TRUEDIV and is_exp(n.args[0])
                     and "r" not in em.ctx.deps(n.args[1]) and n not in em.cache]
        for n in divisions:
            factor = em.assign(f"{acc.exp(f'{terms}_shift - {top}')} / {em.emit(n.args[1])}")
            em.cache[n] = em.assign(f"{terms} * {factor}")
        used = {a for n in nodes if isinstance(n, Apply) and n not in divisions for a in n.args}
        used |= {st.value for st in self.k.elem_stores}
        for n in nodes:
            if is_exp(n) and n in used and n not in em.cache:
                em.cache[n] = em.assign(f"{terms} * {acc.exp(f'{terms}_shift - {top}')}")

    @staticmethod
    def _barrier(em: TritonEmitter, count: int) -> None:
        """Wait until every program of this row block has arrived here (the ``count``-th barrier):
        a CTA barrier orders this program's partial stores before one thread's release-acquire
        increment of the counter, and its spin acquires the other programs' stores."""
        em.line("tl.debug_barrier()")
        em.line('arrived = tl.atomic_add(arrived_ptr, 1, sem="acq_rel") + 1')
        em.line(f"while arrived < SPLIT * {count}:")
        em.line(f'{INDENT}arrived = tl.atomic_add(arrived_ptr, 0, sem="acquire")')
        em.line("tl.debug_barrier()")

    # -- split reductions -----------------------------------------------------------------------
    def _split(self) -> None:
        accs = self._accumulators()
        fin: dict[tuple[str, int], str] = {}
        for acc in accs:
            for k, dtype in enumerate(acc.result_dtypes()):
                fin[(acc.r.name, k)] = f"fin_{acc.var}_{k}"
                self.workspaces.append(Workspace(fin[(acc.r.name, k)], dtype, self.xnumel))
        last = max(a.r.level for a in accs)
        for phase in range(self.k.num_phases):
            mine = [a for a in accs if a.r.level == phase]
            partial = self._partial_workspaces(mine)
            self._split_stage(phase, mine, partial, fin)
            if mine:
                self._combine_stage(phase, mine, partial, fin, row_stores=phase == last)

    def _split_stage(self, phase: int, accs, partial: dict, fin: dict) -> None:
        cfg, k = self.cfg, self.k
        axes = self._row_axes()
        ctx = self._context(axes, {"r"} | ({"x"} if not _divides(self.xnumel, cfg.XBLOCK) else set()))
        ctx.acc_loads = dict(fin)
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        self._slice(em, axes)
        stores = [s for s in k.elem_stores if s.phase == phase]
        self._loop_phase(em, accs, stores, "rstart", "rend")
        self._store_partials(em, accs, partial)
        constexprs = [("XBLOCK", cfg.XBLOCK), ("RBLOCK", cfg.RBLOCK), ("SPLIT", cfg.SPLIT)]
        ws = [w for acc in accs for w in partial[acc.var].values()]
        self._function(f"{k.name}_split{phase}", ctx, lines, constexprs, ws,
                       _cdiv(self.xnumel, cfg.XBLOCK) * cfg.SPLIT)

    def _slice(self, em: TritonEmitter, axes: list[Axis]) -> None:
        """Rows and slice of a split program: ``XBLOCK`` rows, the ``sid``-th of ``SPLIT`` chunks
        of ``rchunk`` elements (a multiple of RBLOCK), ``[rstart, rend)``."""
        em.line("xindex = (pid // SPLIT) * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        em.line("sid = pid % SPLIT")
        self._masks(em, axes[:1])
        self._rbase(em)
        em.line("rchunk = (rnumel + SPLIT * RBLOCK - 1) // (SPLIT * RBLOCK) * RBLOCK")
        em.line("rstart = sid * rchunk")
        em.line("rend = tl.minimum(rstart + rchunk, rnumel)")

    @staticmethod
    def _store_partials(em: TritonEmitter, accs, partial: dict) -> None:
        xmask = em.ctx.mask({"x"})
        where = f", mask={xmask}" if xmask else ""
        for acc in accs:
            for suffix, name in acc.names().items():
                em.line(f"tl.store({partial[acc.var][suffix]} + (xindex * SPLIT + sid), {name}{where})")

    def _partial_workspaces(self, accs, numel: Index | None = None) -> dict:
        """One workspace per state component of each of ``accs``: a value per (row, program), or
        ``numel`` values."""
        partial = {}
        for acc in accs:
            partial[acc.var] = {c.suffix: f"ws_{acc.var}{c.suffix}" for c in acc.components()}
            for c in acc.components():
                self.workspaces.append(Workspace(partial[acc.var][c.suffix], c.torch_dtype,
                                                 self.xnumel * self.cfg.SPLIT if numel is None else numel))
        return partial

    def _reduce_partials(self, em: TritonEmitter, acc, partial: dict, cached: bool = True,
                         vector: bool = False) -> None:
        """Load the ``SPLIT`` partial states of each row (``[XBLOCK, SBLOCK]``) and reduce them into
        ``acc.names()``; ``cached=False`` reads them past L1 (other programs wrote them this launch).
        ``vector``: one row's softmax statistics (XBLOCK 1), loaded as ``[SBLOCK]`` vectors and
        reduced to 0-d values: as ``[1, SBLOCK]`` tiles each thread held all the partials while it
        held its slice (split_sync softmax over 131072 columns, 8 warps: 96 registers -> 92; with
        ``emit.address``'s row pointers 80, three programs per multiprocessor instead of two)."""
        sblock = next_pow2(self.cfg.SPLIT)
        partial_mask = ("svmask" if vector else "smask") if sblock != self.cfg.SPLIT else None
        masks = [m for m in (None if vector else em.ctx.mask({"x"}), partial_mask) if m]
        where = f", mask={' & '.join(masks)}" if masks else ""
        modifier = "" if cached else ', cache_modifier=".cg"'
        index = "(pid // SPLIT) * SPLIT + svector" if vector else "xindex * SPLIT + sindex"
        lanes = acc.names(acc.var + "_part")
        for c in acc.components():
            other = f", other={c.identity}" if masks else ""
            em.line(f"{lanes[c.suffix]} = tl.load({partial[acc.var][c.suffix]} + "
                    f"({index}){where}{other}{modifier})")
        for line in acc.reduce(lanes, acc.names(), vector=vector):
            em.line(line)

    def _sindex(self, em: TritonEmitter, vector: bool = False) -> None:
        """``sindex``: the partials of a row as ``[1, SBLOCK]``; ``vector``: also ``svector``, as
        ``[SBLOCK]`` (``_reduce_partials``)."""
        em.line("sindex = tl.arange(0, SBLOCK)[None, :]")
        if vector:
            em.line("svector = tl.arange(0, SBLOCK)")
        if next_pow2(self.cfg.SPLIT) != self.cfg.SPLIT:
            em.line("smask = sindex < SPLIT")
            if vector:
                em.line("svmask = svector < SPLIT")

    def _combine_stage(self, phase: int, accs, partial: dict, fin: dict, row_stores: bool) -> None:
        cfg, k = self.cfg, self.k
        axes = self._row_axes()[:1]
        sblock = next_pow2(cfg.SPLIT)
        ctx = self._context(axes, set() if _divides(self.xnumel, cfg.XBLOCK) else {"x"})
        ctx.acc_loads = dict(fin)
        lines: list[str] = []
        em = TritonEmitter(ctx, lines, INDENT)
        self._prologue(em, axes)
        em.line("xindex = pid * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        self._masks(em, axes)
        self._sindex(em)
        xwhere = f", mask={ctx.mask({'x'})}" if ctx.mask({"x"}) else ""
        for acc in accs:
            self._reduce_partials(em, acc, partial)
            for j, name in enumerate(self._publish(em, acc)):
                em.line(f"tl.store({fin[(acc.r.name, j)]} + xindex, {name}{xwhere})")
        if row_stores:
            for st in k.row_stores:
                em.store(st.buffer, st.index, st.value, frozenset({"x"}), _ROW)
        constexprs = [("XBLOCK", cfg.XBLOCK), ("SBLOCK", sblock), ("SPLIT", cfg.SPLIT)]
        ws = [w for acc in accs for w in partial[acc.var].values()]
        ws += [fin[(acc.r.name, j)] for acc in accs for j in range(len(acc.result_dtypes()))]
        self._function(f"{k.name}_combine{phase}", ctx, lines, constexprs, ws,
                       _cdiv(self.xnumel, cfg.XBLOCK), num_warps=min(cfg.num_warps, 4))
