"""Expression emission for Triton kernels: scopes with CSE and hoisting, loads, stores, masks.

A ``TritonEmitter`` writes the statements of one scope (the kernel body, or the body of a loop
over reduction chunks). A loop scope hands every expression that does not vary along its loop
axes to its parent, so row-invariant work (loads of per-row values, finished accumulators) is
computed once before the loop. Every value is a tile (or a scalar) whose shape follows the axes
it depends on; loads and stores are masked only along axes whose extent the block does not
divide.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ...ir.dtypes import DType
from ...ir.expr import AccRef, Apply, Const, Expr, IndexValue, Load
from ...ir.index import Index, Indirect, Sym, Var
from ...ir.ops import Op
from ...scheduler.kernel import Kernel
from ..emitter import ExprEmitter, IndexPrinter
from ..names import BUFFER, SYMBOL, mangle
from . import heuristics
from .indexing import Axis, fold_divmod
from .ops import render_cast, render_const, render_fast_tanh, render_op, storage_value, tl_type
from .reductions import reduce_rows


def identifier(name: str) -> str:
    """The Python name of the generated function of kernel ``name`` (``ln_<graph name>_<n>``, kept
    readable for profilers): any other character becomes ``_``. It cannot meet a parameter (those
    are mangled) nor a helper (kernel names end in a number, helpers' do not)."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return out if out and not out[0].isdigit() else "_" + out


@dataclass
class KernelContext:
    """What every scope of one generated function shares."""

    kernel: Kernel
    axes: dict[str, Axis]            # tile axes by name
    masked: frozenset[str]           # axes whose loads/stores need a mask
    portable: bool
    debug: bool
    index_checks: bool = True        # LOOPNEST_INDEX_CHECKS: check gather/index positions
    interpret: bool = False          # Triton's interpreter, which skips tl.device_assert
    fast_tanh: bool = False          # hardware tanh.approx: its 2^-11 error is below bf16's
    row_pointers: bool = False       # address rows as ``ptr + row offset + element offset``
    subs: dict[Var, Index] = field(default_factory=dict)        # kernel var -> flat-index expr
    axis_of: dict[str, str] = field(default_factory=dict)       # kernel var name -> axis name
    acc_values: dict[tuple[str, int], str] = field(default_factory=dict)
    acc_loads: dict[tuple[str, int], str] = field(default_factory=dict)  # finished, in workspaces
    loaded: list[str] = field(default_factory=list)                     # workspaces read so far
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    asserts: bool = False            # some check was emitted: the function needs debug=True
    across: frozenset[str] = field(init=False)  # names of the kernel's reductions across rows
    evict_first: bool = field(init=False)  # loads that stream through a loop leave L2 first
    _deps: dict = field(default_factory=dict)

    def __post_init__(self):
        self.across = frozenset(r.name for r in self.kernel.across)
        self.evict_first = heuristics.evict_first(self.kernel)
        for axis in self.axes.values():
            for v in axis.kernel_vars:
                self.axis_of[v.name] = axis.name

    @staticmethod
    def ptr(buffer: str) -> str:
        return mangle(BUFFER, buffer)

    @staticmethod
    def sym(name: str) -> str:
        return mangle(SYMBOL, name)

    def deps(self, e: Expr) -> frozenset[str]:
        """The tile axes the value of ``e`` varies along."""
        hit = self._deps.get(e)
        if hit is not None:
            return hit
        if isinstance(e, (Load, IndexValue)):
            out = self.index_deps(e.index if isinstance(e, Load) else (e.index,))
        elif isinstance(e, AccRef):  # one value per row, or per column for a reduction across rows
            out = frozenset({"r"}) if e.name in self.across else frozenset({"x"})
        elif isinstance(e, Apply):
            out = frozenset().union(*(self.deps(a) for a in e.args))
        else:
            out = frozenset()
        self._deps[e] = out
        return out

    def index_deps(self, index: tuple[Index, ...]) -> frozenset[str]:
        out: set[str] = set()
        for i in index:
            for a in i.atoms():
                if isinstance(a, Var):
                    out.add(self.axis_of[a.name])
                elif isinstance(a, Indirect):
                    out |= self.deps(a.value)
        return frozenset(out)

    def mask(self, axes) -> str | None:
        """The conjunction of the masks of ``axes`` that need one (None when none does)."""
        names = [a.mask for a in sorted(self.axes.values(), key=lambda a: a.dim)
                 if a.name in axes and a.name in self.masked]
        return " & ".join(names) if names else None


class TritonEmitter(ExprEmitter):
    """Renders expressions as Triton statements in one scope."""

    def __init__(self, ctx: KernelContext, lines: list[str], indent: str,
                 parent: "TritonEmitter | None" = None, loop_axes: frozenset[str] = frozenset()):
        super().__init__(lines, indent)
        self.ctx = ctx
        self.parent = parent
        self.loop_axes = loop_axes
        self.indirect: dict[Indirect, str] = {}
        self.index = IndexPrinter(self._atom, div="//", mod="%")

    # -- scopes ---------------------------------------------------------------------------------
    def _hoists(self, e: Expr) -> bool:
        return self.parent is not None and not (self.ctx.deps(e) & self.loop_axes)

    def emit(self, e: Expr) -> str:
        if e not in self.cache and self._hoists(e):
            return self.parent.emit(e)
        return super().emit(e)

    def fresh(self, stem: str = "t") -> str:
        return f"{stem}{next(self.ctx.counter)}"

    def line(self, text: str) -> None:
        self.lines.append(self.indent + text)

    def assign(self, text: str, stem: str = "t") -> str:
        """Bind ``text`` to a fresh name in this scope."""
        name = self.fresh(stem)
        self.line(f"{name} = {text}")
        return name

    def root(self) -> "TritonEmitter":
        return self if self.parent is None else self.parent.root()

    # -- indices ----------------------------------------------------------------------------------
    def _atom(self, a) -> str:
        if isinstance(a, Sym):
            return self.ctx.sym(a.name)
        if isinstance(a, Indirect):
            return self.indirect_name(a)
        return a.name  # a flat tile index (xindex, yindex, rindex)

    def _flat(self, index: Index, rows: str | None = None) -> Index:
        flat = fold_divmod(index.subs(self.ctx.subs))
        if rows is not None:
            x = self.ctx.axes["x"].flat
            flat = flat.subs({x: Index.of(Var(rows, x.size))})
        return flat

    def flat(self, index: Index, rows: str | None = None) -> str:
        """Text of a kernel-level index expression over the tile's flat indices (``rows``: a
        flat row index named in place of ``xindex``)."""
        return self.index(self._flat(index, rows))

    def offset(self, buffer: str, index: tuple[Index, ...], rows: str | None = None) -> str:
        """Element offset of ``buffer[index]`` from the buffer's (view's) data pointer."""
        layout = self.ctx.kernel.buffers[buffer].layout
        return self.flat(layout.flat_index(index) - layout.offset, rows)

    def address(self, buffer: str, index: tuple[Index, ...], rows: str | None = None) -> str:
        """Pointer text of ``buffer[index]``: ``ptr + (offset)``, or with ``ctx.row_pointers``
        ``ptr + (row offset) + (element offset)``, where the row offset is the terms over the row
        index alone: Triton adds it to the pointer once per row, and the elements' offsets stay
        small. As one int32 sum, each element's offset from ``ptr`` is sign-extended and ptxas
        keeps more 64-bit addresses live (split_sync softmax over 131072 columns: 96 registers,
        two programs per multiprocessor; so split, 80 and three; ``bench/sass_loops.py``). Only
        where every term is positive: each part then fits wherever the whole offset does."""
        layout = self.ctx.kernel.buffers[buffer].layout
        flat = self._flat(layout.flat_index(index) - layout.offset, rows)
        ptr = self.ctx.ptr(buffer)
        if self.ctx.row_pointers and "x" in self.ctx.axes and flat.const >= 0 and all(c > 0 for _, c in flat.terms):
            row_var = rows or self.ctx.axes["x"].index
            row = [(m, c) for m, c in flat.terms if all(isinstance(a, Var) and a.name == row_var for a in m)]
            rest = [(m, c) for m, c in flat.terms if (m, c) not in row]
            if row and rest:
                return f"{ptr} + ({self.index(Index(row))}) + ({self.index(Index(rest, flat.const))})"
        return f"{ptr} + ({self.index(flat)})"

    def indirect_name(self, a: Indirect) -> str:
        """The value of a gather index: wrapped from the end where the op allows it, checked
        (``LOOPNEST_INDEX_CHECKS``, or every index under ``LOOPNEST_DEBUG``) and hoisted to the
        outermost scope it does not vary in."""
        if self.parent is not None and not (self.ctx.deps(a.value) & self.loop_axes):
            return self.parent.indirect_name(a)
        hit = self.indirect.get(a)
        if hit is not None:
            return hit
        value = self.emit(a.value)
        bound = self.index(a.bound)
        name = self.assign(value, "ix")
        if a.check is not None and a.check.wrap:
            self.line(f"{name} = tl.where({name} < 0, {name} + {bound}, {name})")
        if self.ctx.debug or (self.ctx.index_checks and a.check is not None):
            self._bounds_check(name, bound, self.ctx.deps(a.value), a)
            self.line(f"{name} = tl.where((0 <= {name}) & ({name} < {bound}), {name}, 0)")  # never read out of range
        self.indirect[a] = name
        return name

    def _bounds_check(self, name: str, bound: str, deps: frozenset[str], a: Indirect) -> None:
        """A device assert (the function gets ``debug=True``) that a gather index is inside
        ``[0, bound)``; in the interpreter, which skips ``tl.device_assert``, a Python ``assert``
        on the same condition reduced over the tile."""
        ok = f"(0 <= {name}) & ({name} < {bound})"
        mask = self.ctx.mask(deps)
        if mask:
            ok = f"{ok} | (({mask}) == 0)"
        valid = f"[-{bound}, {bound})" if a.check is not None and a.check.wrap else f"[0, {bound})"
        what = f"{a.check.op if a.check is not None else 'gather'}: index out of range {valid}"
        if a.check is not None:
            what += f" for dimension {a.check.dim}"
        msg = f"{what} (in loopnest kernel {self.ctx.kernel.name})".replace('"', "'").replace("\\", "/")
        self.ctx.asserts = True
        if not self.ctx.interpret:
            self.line(f'tl.device_assert({ok}, "{msg}")')
            return
        if deps:
            ok = f"{reduce_rows('min', f'({ok}).to(tl.int32)', axis='None')} > 0"
        self.line(f'assert {ok}, "{msg}"')

    # -- ExprEmitter hooks ------------------------------------------------------------------------
    def bind(self, text: str, e: Expr) -> str:
        return self.assign(text)

    def const(self, e: Const) -> str:
        return render_const(e.value, e.dtype)

    def typed(self, e: Expr) -> str:
        """``emit(e)``, with a literal constant turned into a typed scalar (so ``.to`` works)."""
        value = self.emit(e)
        return f"tl.full([], {value}, {tl_type(e.dtype)})" if isinstance(e, Const) else value

    def accref(self, e: AccRef) -> str:
        ctx, key = self.ctx, (e.name, e.output)
        if key not in ctx.acc_values:
            ws = ctx.acc_loads[key]
            ctx.loaded.append(ws)
            ctx.acc_values[key] = self.root().assign(
                f"tl.load({ws} + xindex{mask_arg(ctx.mask({'x'}))})", "fin")
        return ctx.acc_values[key]

    def load(self, e: Load) -> str:
        deps = self.ctx.index_deps(e.index)
        text = self._load_text(self.address(e.buffer, e.index), self.ctx.mask(deps), bool(deps & self.loop_axes))
        return text + ".to(tl.float32)" if e.dtype.is_low_precision else text

    def load_at_rows(self, e: Load, rows: str) -> str:
        """The text of ``e`` loaded at the flat row index ``rows`` in place of ``xindex``, in its
        stored dtype; rows past ``xnumel`` read 0."""
        masks = [f"({rows} < xnumel)", self.ctx.mask(self.ctx.index_deps(e.index) - {"x"})]
        return self._load_text(self.address(e.buffer, e.index, rows), " & ".join(m for m in masks if m), True)

    def _load_text(self, address: str, mask: str | None, streams: bool) -> str:
        """``tl.load`` at ``address``; a load that streams through a loop leaves L2 first
        where ``heuristics.evict_first`` says so."""
        evict = ', eviction_policy="evict_first"' if streams and self.ctx.evict_first else ""
        return f"tl.load({address}{mask_arg(mask, other=True)}{evict})"

    def index_value(self, e: IndexValue) -> str:
        text = self.flat(e.index)
        if not self.ctx.index_deps((e.index,)):
            return f"tl.full([], {text}, {tl_type(e.dtype)})"
        return f"({text}).to({tl_type(e.dtype)})"

    def cast(self, value: str, src: Expr, e: Apply) -> str:
        if isinstance(src, Const):
            value = f"tl.full([], {value}, {tl_type(src.dtype)})"
        return render_cast(value, src.dtype, e.dtype)

    def apply(self, e: Apply, args: list[str]) -> str:
        operand = e.args[1].dtype if e.op is Op.WHERE else e.args[0].dtype
        if e.op is Op.TANH and self.ctx.fast_tanh and tl_type(operand) == "tl.float32":
            return render_fast_tanh(args[0])
        return render_op(e.op, args, operand, self.ctx.portable)

    # -- stores ---------------------------------------------------------------------------------
    def store(self, buffer: str, index: tuple[Index, ...], value: Expr, axes: frozenset[str],
              shape: str) -> None:
        """``buffer[index] = value`` over a tile spanning ``axes`` (of Triton shape ``shape``)."""
        dst: DType = self.ctx.kernel.buffers[buffer].dtype
        v = self.typed(value)
        if dst.is_low_precision or dst.is_bool:
            v = storage_value(v, value.dtype, dst)
        else:
            v = render_cast(v, value.dtype, dst)
        if self.ctx.index_deps(index) != axes:
            address = f"{self.ctx.ptr(buffer)} + (({self.offset(buffer, index)}) + tl.full({shape}, 0, tl.int32))"
        else:
            address = self.address(buffer, index)
        self.line(f"tl.store({address}, {v}{mask_arg(self.ctx.mask(axes))})")


def mask_arg(mask: str | None, other: bool = False) -> str:
    """The ``mask=`` argument of a load (``other``: masked lanes read 0) or store, if any."""
    if mask is None:
        return ""
    return f", mask={mask}, other=0" if other else f", mask={mask}"
