"""C++/OpenMP source for a kernel: parallel over rows, vectorizable inner loops.

Every kernel is ``extern "C" LN_VECTORS_512 void NAME(void** args, const int64_t* syms, int64_t* ln_err)``:
``args`` holds the buffer pointers in ``KernelSignature.buffers`` order, ``syms`` the symbolic sizes
in ``KernelSignature.symbols`` order, ``ln_err`` the error slot (``checks.py``). User names (buffers,
sizes, the kernel) are mangled (``backends/names.py``); the generator's own names never start with
a mangling prefix.
"""
from __future__ import annotations

import itertools
import os
from typing import Callable

from ...ir import dtypes as dt
from ...ir.expr import AccRef, Apply, Const, Expr, IndexValue, Load, walk
from ...ir.index import Index, Indirect, Sym, Var, as_var, product
from ...ir.ops import Op
from ...scheduler.kernel import Kernel, KernelSignature, signature
from ...scheduler.merge_dims import merged_inner_dims, merged_reduced_dims
from ..emitter import ExprEmitter, IndexPrinter
from ..names import BUFFER, KERNEL, SYMBOL, mangle
from . import column_rows, half_blocks, piecewise, position_lanes, row_blocks, row_lanes, vector_blocks
from .accumulators import Accumulator
from .across import AcrossRows
from .blocked_sums import BlockedSums, block_loop, column_step, open_blocks, row_step
from .checks import Deferred, ErrorSite, ZeroDivision, error_sites, is_int_division
from .ops import LIBM, RENDER, STORAGE, ctype, load_value, render_cast, render_const, render_libm, store_value
from .params import MAX_CHUNK, CppConfig
from .reuse import reuse_stored_values
from .split_rows import PARTIALS_BYTES, column_state_bytes, splits_rows, write_split_rows
from .streaming import (line_lanes, pointwise_streams, stream_types, streamed_pass, wants_next_row_prefetch,
                        wants_streaming)
from .tiling import TILE, TRANSPOSES, reads_in_registers, transposed_dim
from .two_pass import two_pass_welford


# Elements (rows x reduced elements) below which a kernel runs on one thread.
PARALLEL_MIN_WORK = 1 << 15
HEAD_ROW_LINES = 4  # streamed pointwise rows that are not whole lines: at least this many lines each


def atom_name(a) -> str:
    """A loop variable or size in C: loop variables are the generator's, sizes are mangled."""
    return mangle(SYMBOL, a.name) if isinstance(a, Sym) else a.name


def kernel_symbol(kernel: Kernel) -> str:
    """The exported C name of ``kernel``'s function."""
    return mangle(KERNEL, kernel.name)


def _reads_memory(e: Expr) -> bool:
    """Whether ``e`` reads a buffer or a position: a value of each element, not of the row."""
    return any(isinstance(n, (Load, IndexValue)) for n in walk(e))


def _row_result(e: Expr) -> bool:
    """Whether ``e`` is computed from this kernel's reductions (and constants) alone."""
    return not _reads_memory(e) and any(isinstance(n, AccRef) for n in walk(e))


class CppEmitter(ExprEmitter):
    """Renders expressions as C++ statements."""

    def __init__(self, kernel: Kernel, lines: list[str], indent: str, accs: dict[str, Accumulator],
                 names, sites: tuple[ErrorSite, ...] = ()):
        super().__init__(lines, indent, names)
        self.varying: frozenset = frozenset()  # loop variables of the loop being written
        self._varies: dict[Expr, bool] = {}
        self.kernel = kernel
        self.accs = accs
        self.sites = sites
        self.deferred: list[Deferred] | None = None  # a list: check varying indices after the loop
        self.indirect: dict[Indirect, str] = {}
        self.guards: dict[Indirect, str] = {}  # checked indices whose failure must skip the load
        self.staged_stores: dict[tuple, str] = {}  # (buffer, index) -> a block array's element (half_blocks.py)
        self.index = IndexPrinter(self._atom)

    def _atom(self, a) -> str:
        if isinstance(a, Indirect):
            return self.indirect[a]
        return atom_name(a)

    def inherit(self, other: "CppEmitter") -> "CppEmitter":
        """Reuse the values ``other`` computed in an enclosing scope (hoisted indices)."""
        self.cache.update(other.cache)
        self.indirect.update(other.indirect)
        self.guards.update(other.guards)
        self.staged_stores.update(other.staged_stores)
        return self

    def prepare_indirect(self, index: Index) -> None:
        """Compute (wrap and check) every indirect position in ``index`` not computed yet."""
        for a in index.atoms():
            if isinstance(a, Indirect) and a not in self.indirect:
                self.indirect[a] = self._indirect(a)

    def _indirect(self, a: Indirect) -> str:
        """``int64_t ix = value``, wrapped from the end where the op allows it, and checked: an
        index out of range records the error and reads position 0 instead. Inside a vectorized
        loop (``deferred``) the check only tracks the least and greatest index, tested after the
        loop (``Deferred``): a branch to ``ln_fail`` would keep the loop from vectorizing."""
        value = self.emit(a.value)
        name = self.fresh("ix")
        bound = self.index(a.bound)
        ind, check = self.indent, a.check
        checked = check is not None and check in self.sites
        self.lines.append(f"{ind}int64_t {name} = {value};")
        if checked and self.deferred is not None:
            lo, hi = self.fresh("lo"), self.fresh("hi")
            self.deferred.append(Deferred(lo, hi, self.sites.index(check) + 1, check.wrap, bound))
            self.lines.append(f"{ind}{lo} = std::min({lo}, {name}); {hi} = std::max({hi}, {name});")
        if check is not None and check.wrap:
            self.lines.append(f"{ind}if ({name} < 0) {name} += {bound};")
        if not checked:
            return name
        ok = self.fresh("ok")
        self.lines.append(f"{ind}const bool {ok} = (uint64_t){name} < (uint64_t)({bound});")
        if a.bound.as_int() is None or a.bound.as_int() < 1:
            self.guards[a] = ok  # the dimension may be empty: no position is safe to read
        if self.deferred is not None:
            self.lines.append(f"{ind}{name} = {ok} ? {name} : 0;")
        else:
            code = self.sites.index(check) + 1
            self.lines.append(f"{ind}if (!{ok}) {{ ln_fail(ln_err, {code}, {value}, {bound}); {name} = 0; }}")
        return name

    def offset(self, buffer: str, index: tuple[Index, ...]) -> str:
        for i in index:
            self.prepare_indirect(i)
        return self.index(self.kernel.buffers[buffer].layout.flat_index(index))

    def bind(self, text: str, e: Expr) -> str:
        name = self.fresh()
        self.lines.append(f"{self.indent}{ctype(e.dtype)} {name} = {text};")
        return name

    def const(self, e: Const) -> str:
        return render_const(e.value, e.dtype)

    def accref(self, e: AccRef) -> str:
        return self.accs[e.name].result(e.output)

    def load(self, e: Load) -> str:
        value = load_value(e.dtype, f"{mangle(BUFFER, e.buffer)}[{self.offset(e.buffer, e.index)}]")
        guards = [self.guards[a] for i in e.index for a in i.atoms() if a in self.guards]
        if guards:
            value = f"({' && '.join(guards)} ? {value} : ({ctype(e.dtype)})0)"
        return value

    def index_value(self, e: IndexValue) -> str:
        self.prepare_indirect(e.index)
        return f"(({ctype(e.dtype)})({self.index(e.index)}))"

    def cast(self, value: str, src: Expr, e: Apply) -> str:
        return render_cast(value, src.dtype, e.dtype)

    def varies(self, e: Expr) -> bool:
        """Whether ``e`` changes inside the loop this emitter writes (its ``varying`` vars)."""
        hit = self._varies.get(e)
        if hit is None:
            hit = any(isinstance(n, (Load, IndexValue)) and any(
                v in self.varying for i in (n.index if isinstance(n, Load) else (n.index,)) for v in i.free_vars())
                for n in walk(e))
            self._varies[e] = hit
        return hit

    def apply(self, e: Apply, args: list[str]) -> str:
        if e.op in LIBM:
            return render_libm(e.op, e.dtype, args[0])
        if is_int_division(e):  # a zero divisor is an error, as in eager on the CPU
            code = self.sites.index(ZeroDivision(e.op)) + 1
            return f"ln_{e.op.name.lower()}_chk({args[0]}, {args[1]}, ln_err, {code})"
        if e.op is Op.TRUEDIV and e.dtype.is_float and _row_result(e.args[1]) and _reads_memory(e.args[0]):
            # divide by a row's reduced value (softmax's sum): multiply by its reciprocal, which
            # the compiler hoists. Decided by the expression alone, so that every pass of a row
            # that computes it rounds it alike (a max over x / t and exp(x / t - max) that
            # disagree overflow at large |x|)
            return f"({args[0]} * ((({ctype(e.dtype)})1) / {args[1]}))"
        if e.op in (Op.ABS, Op.NEG) and e.args[0].dtype.is_bool:
            return args[0]
        return RENDER[e.op](*args)

    def store(self, buffer: str, index: tuple[Index, ...], value: Expr) -> None:
        dtype = self.kernel.buffers[buffer].dtype
        if dtype.is_low_precision and isinstance(value, Apply) and value.op is Op.CAST and value.dtype == dtype:
            value = value.args[0]  # the store rounds once; rounding twice would give the same bits
        v = self.emit(value)
        staged = self.staged_stores.get((buffer, index))
        if staged is not None:  # a float the block rounds after its loop
            self.lines.append(f"{self.indent}{staged} = {v};")
            return
        if value.dtype not in (dtype, dt.compute_dtype(dtype)):  # store_value rounds a compute value
            v = render_cast(v, value.dtype, dtype)
        target = mangle(BUFFER, buffer)
        self.lines.append(f"{self.indent}{target}[{self.offset(buffer, index)}] = {store_value(dtype, v)};")


def _invariant_values(exprs, em: CppEmitter) -> list[Expr]:
    """The largest computations in ``exprs`` that do not change inside ``em``'s loop (a channel's
    scale from its statistics and weight), loads included, to compute once before it: g++
    does not hoist them itself, because OpenMP's outlined loop body loses the buffers'
    ``__restrict__`` and a load may then alias the loop's stores (a group norm's
    ``rsqrt(var + eps) * w[c]``: a square root and a division per vector, 45% of its time)."""
    return largest_applies(exprs, lambda node: not em.varies(node) and not any(
        isinstance(n, Apply) and is_int_division(n) for n in walk(node)))


MAX_TABLE = 16384  # elements of a table over the innermost dim (``inner_tables``): 64 KB of floats
COSTLY = frozenset({Op.SQRT, Op.RSQRT, Op.TRUEDIV})  # a vector of them costs 10-20 cycles


def _table_values(exprs, inner) -> list[Expr]:
    """The largest computations in ``exprs`` that read the loop variable ``inner`` alone (no
    other variable, indirect position or accumulator) and hold a square root or a division, but
    no vector math call (those run on blocks)."""
    def alone(node: Expr) -> bool:
        for n in walk(node):
            if isinstance(n, AccRef) or (isinstance(n, Apply) and (is_int_division(n) or vector_blocks.block_impl(n))):
                return False
            if isinstance(n, (Load, IndexValue)):
                for i in (n.index if isinstance(n, Load) else (n.index,)):
                    if any(not isinstance(a, Var) or a != inner for a in i.atoms()):
                        return False
        return True

    return [n for n in largest_applies(exprs, alone)
            if any(isinstance(x, Apply) and x.op in COSTLY for x in walk(n))
            and any(isinstance(x, (Load, IndexValue)) for x in walk(n))]


def largest_applies(exprs, take: Callable[[Apply], bool]) -> list[Expr]:
    """The computations (``Apply`` nodes) in ``exprs`` that ``take`` accepts, none inside another."""
    found: list[Expr] = []
    seen: set[int] = set()
    stack = list(exprs)
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, Apply):
            continue
        seen.add(id(node))
        if take(node):
            found.append(node)
        else:
            stack.extend(node.args)
    return found


def generate(kernel: Kernel, config: CppConfig, index_checks: bool = True) -> str:
    """The C++ function for ``kernel`` under ``config``; ``index_checks``: check indirect indices
    (``LOOPNEST_INDEX_CHECKS``). The arguments stay in ``kernel``'s signature order."""
    return KernelWriter(as_written(kernel), config, index_checks, signature(kernel)).write()


def as_written(kernel: Kernel) -> Kernel:
    """The kernel the writer renders: reduced dims that every access walks as one run are one dim
    (``scheduler/merge_dims.py``); a row kernel computes Welford over short rows in two passes
    (``two_pass.py``); a row or column kernel stores what a later phase would compute again
    (``reuse.py``); a pointwise kernel runs inner dims that every access walks as one run as one
    dim (``scheduler/merge_dims.py``)."""
    kernel = merged_reduced_dims(kernel)
    if not (kernel.pdomain and kernel.reductions):
        return merged_inner_dims(kernel)
    return reuse_stored_values(kernel if reduces_outer_dim(kernel) else two_pass_welford(kernel))


def reduces_outer_dim(kernel: Kernel) -> bool:
    """True when the loads that stream through the reduced dims are contiguous along the last row
    variable rather than a reduced one.

    Then the kernel runs "columns": each thread owns chunks of adjacent columns and keeps one
    accumulator per column, so every load stays a unit-stride vector load.
    """
    if not kernel.pdomain or not kernel.reductions or kernel.across:
        return False  # reductions across rows run in the rows loop nest
    last_p = as_var(kernel.pvars()[-1])
    rvars = {as_var(v) for v in kernel.rvars()}
    votes = sum(1 if last_p in unit else -1 if unit & rvars else 0 for unit in kernel.streaming_loads())
    return votes > 0


def omp_threads(config: CppConfig) -> int:
    """The threads a kernel's parallel loops run on: the config's, else OpenMP's default
    (``OMP_NUM_THREADS``, else the CPUs this process may run on)."""
    if config.threads:
        return config.threads
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


MIN_AUTO_CHUNK = 64


def column_chunk(kernel: Kernel, config: CppConfig, column_bytes: int) -> int:
    """Adjacent columns per task of a kernel that reduces over an outer dim (its partial states
    take ``column_bytes`` per column): ``config.chunk``, or for 0 the widest power of two, up to
    MAX_CHUNK and to PARTIALS_BYTES of partials, whose tasks keep every thread busy (the busiest
    thread at most 8/7 of the average).

    Each row then streams in runs of ``4 * chunk`` bytes. Short runs lose DRAM pages and the
    prefetchers: a column sum of 8192 x 4096 float32 read 16.5 GB/s in runs of 64 columns and
    27 GB/s in runs of 2048 on 2 cores (bench/RESULTS.md, 2026-12-02).
    """
    if config.chunk:
        return config.chunk
    columns = kernel.pdomain[-1].as_int()
    outer = product(kernel.pdomain[:-1]).as_int()
    if columns is None or outer is None:
        return MIN_AUTO_CHUNK
    threads = omp_threads(config)
    chunk = 1 << (min(MAX_CHUNK, PARTIALS_BYTES // max(column_bytes, 1)).bit_length() - 1)
    while chunk > MIN_AUTO_CHUNK:
        tasks = outer * -(-columns // chunk)
        if chunk < 2 * columns and 8 * tasks >= 7 * threads * -(-tasks // threads):
            break
        chunk //= 2
    return max(chunk, MIN_AUTO_CHUNK)


class KernelWriter:
    """Writes one kernel: pointwise, rows, columns or a full (split) reduction."""

    def __init__(self, kernel: Kernel, config: CppConfig, index_checks: bool = True,
                 sig: KernelSignature | None = None):
        self.k = kernel
        self.sig = signature(kernel) if sig is None else sig
        self.cfg = config
        self.sites = error_sites(kernel, index_checks)
        self.lines: list[str] = []
        self.names = itertools.count(1)  # one counter per kernel: deterministic, collision-free
        self.c = IndexPrinter(atom_name)  # sizes in C syntax (str(Index) writes // for floor)
        work = product(kernel.pdomain) * product(kernel.rdomain)
        self.serial = work.as_int() is not None and work.as_int() < PARALLEL_MIN_WORK  # known small: one thread
        self.threads = f" num_threads({config.threads})" if config.threads else ""
        self.threads += self._parallel_if(work)
        # reductions across rows: each thread's block partials, one element per point of the rdomain
        self.across = {r.name: Accumulator(r, f"blk{n}_", f"[{self.flat_r()}]") for n, r in enumerate(kernel.across)}
        self.streaming = False  # set while the rows loop nest of a streamed kernel is written
        self.prefetching = False  # set while the rows of a kernel that prefetches its next row are written
        self.row_start = 0  # the line where the current row's passes start

    def emitter(self, indent: str, accs: dict[str, Accumulator]) -> CppEmitter:
        return CppEmitter(self.k, self.lines, indent, accs, self.names, self.sites)

    def hoisted(self, indent: str, accs: dict[str, Accumulator], exprs, varying,
                loads: bool = False) -> CppEmitter:
        """An emitter at ``indent`` (outside a loop over ``varying``) that has computed and checked
        every indirect position of ``exprs`` that does not change inside that loop; with
        ``loads`` (the loop runs at least once), every computation that does not change there
        too (``_invariant_values``)."""
        em = self.emitter(indent, accs)
        em.varying = frozenset(as_var(v) for v in varying)
        for root in exprs:
            for node in walk(root):
                if isinstance(node, (Load, IndexValue)):
                    for i in node.index if isinstance(node, Load) else (node.index,):
                        for a in i.atoms():
                            if isinstance(a, Indirect) and not em.varies(a.value):
                                em.prepare_indirect(Index.of(a))
        if accs:
            for node in self._row_values(exprs, em):
                em.emit(node)
        if loads:
            for node in _invariant_values(exprs, em):
                em.emit(node)
        return em

    @staticmethod
    def _row_values(exprs, em: CppEmitter) -> list[Expr]:
        """The largest subexpressions of ``exprs`` that compute from finished accumulators and
        constants alone (a row's mean, its rsqrt): computed once before the loop, not per
        element. Loads stay in the loop (it may run zero times), and so do checked integer
        divisions (their error is recorded only where eager would raise)."""
        ok: dict[Expr, bool] = {}
        for root in exprs:
            for node in walk(root):  # children first
                if isinstance(node, AccRef) or (isinstance(node, IndexValue) and not node.index.free_vars()
                                                and not any(isinstance(a, Indirect) for a in node.index.atoms())):
                    ok[node] = True  # an indirect position may read any variable (a roll's r0 + k mod n)
                elif isinstance(node, Apply):
                    ok[node] = not is_int_division(node) and all(ok.get(a, isinstance(a, Const)) for a in node.args)
        return largest_applies(exprs, lambda node: ok.get(node, False))

    def out(self, indent: str, *stmts: str) -> None:
        self.lines.extend(indent + s for s in stmts)

    def write(self) -> str:
        k, sig = self.k, self.sig
        self.lines.append(f'extern "C" LN_VECTORS_{self.cfg.vector_width} void {kernel_symbol(k)}'
                          f'(void** args, const int64_t* syms, int64_t* ln_err) {{')
        for n, name in enumerate(sig.buffers):
            ty = STORAGE[k.buffers[name].dtype]
            const = "" if name in k.outputs else "const "
            self.out("  ", f"{const}{ty}* __restrict__ {mangle(BUFFER, name)} = ({const}{ty}*)args[{n}];")
        for n, sym in enumerate(sig.symbols):
            self.out("  ", f"const int64_t {mangle(SYMBOL, sym)} = syms[{n}];")
        if not k.reductions:
            self.pointwise()
        elif not k.pdomain:
            self.full_reduction()
        elif reduces_outer_dim(k):
            self.columns()
        else:
            self.rows()
        self.lines.append("}")
        return "\n".join(self.lines)

    # -- loops ----------------------------------------------------------------------------------
    def open_loops(self, vars_, sizes, indent: str, inner_pragma: str | None = None) -> str:
        """Open nested loops (``inner_pragma`` on the innermost); returns the body's indent."""
        for n, (v, size) in enumerate(zip(vars_, sizes)):
            if n == len(vars_) - 1 and inner_pragma:
                self.out(indent, inner_pragma)
            name = as_var(v).name
            self.out(indent, f"for (int64_t {name} = 0; {name} < {self.c(size)}; ++{name}) {{")
            indent += "  "
        return indent

    def close_loops(self, count: int, indent: str) -> None:
        for n in range(count):
            self.out(indent[: len(indent) - 2 * (n + 1)], "}")

    def _parallel_if(self, work: Index) -> str:
        """An ``if`` clause keeping kernels of ``work`` elements, when small, on one thread: waking
        a team costs more than the work, and far more when another process holds a core (the team
        waits at barriers)."""
        if work.as_int() is not None:
            return " if(0)" if self.serial else ""
        return f" if(({self.c(work)}) >= {PARALLEL_MIN_WORK})"

    def parallel_for(self, count: int, indent: str = "  ", nowait: bool = False) -> None:
        """The pragma of ``count`` collapsed parallel loops; with ``nowait``, their worksharing
        inside a parallel region already open (``open_region``)."""
        collapse = f" collapse({count})" if count > 1 else ""
        if nowait:
            return self.out(indent, f"#pragma omp for {self.cfg.omp_schedule}{collapse} nowait")
        self.out(indent, f"#pragma omp parallel for {self.cfg.omp_schedule}{collapse}{self.threads}")

    # -- pointwise --------------------------------------------------------------------------------
    def pointwise(self) -> None:
        pv = self.k.pvars()
        tiled = transposed_dim(self.k)
        if tiled is not None:
            return self.pointwise_blocks(tiled)
        values = [s.value for s in self.k.elem_stores]
        calls = vector_blocks.math_calls(values) if pv else []
        staging = half_blocks.plan(self.k, values, self.k.elem_stores, as_var(pv[-1]), self.names) if pv \
            else half_blocks.Staging()
        if calls or staging:
            return self.pointwise_math_blocks(calls, staging)
        if pv and pointwise_streams(self.k, self.cfg.stores) and self.streamed_pointwise():
            return
        outer, pre = self.outer_loops()
        if len(pv) > 1:
            self.innermost_loops(outer, pre)
            return self.close_loops(len(pv) - 1, outer)
        pragma_at = len(self.lines)
        if pv:
            # GCC 12 does not vectorize a `parallel for simd` whose clause is a literal if(0)
            self.out("  ", "#pragma omp simd" if self.serial else
                     f"#pragma omp parallel for simd {self.cfg.omp_schedule}{self.threads}")
            body = self.open_loops(pv, self.k.pdomain, "  ")
        else:
            body = "  "
        deferred = [] if pv else None
        self.body(body, {}, [], self.k.elem_stores, "", pre=pre, deferred=deferred)
        if pv:
            self.close_loops(1, body)
            self.finish_deferred(deferred, pragma_at, "  ")

    def streamed_pointwise(self) -> bool:
        """The kernel's innermost loop in lines of streamed stores (``streaming.py``), in one
        parallel region whose threads fence once at its end, then the elements after the last
        line of a one-dim kernel. Rows that are not whole lines (``HEAD_ROW_LINES`` lines long at
        least) stream from their first aligned line (``line_heads``). False, with nothing
        written, where the loop does not qualify (an output that does not stream, a store along
        a stride, a piecewise op, checks)."""
        pv, start = self.k.pvars(), len(self.lines)
        inner, n = as_var(pv[-1]).name, self.k.pdomain[-1].as_int()
        lanes = line_lanes(self.k)
        if n is None or piecewise.pieces([s.value for s in self.k.elem_stores], as_var(pv[-1]), self.k.pdomain[-1]):
            return False
        heads = len(pv) > 1 and n % lanes != 0  # rows not of whole lines: each streams from its first aligned one
        if heads and n < HEAD_ROW_LINES * lanes:  # a short row's own loops would cost more than its lines save
            return False
        streamed_to = n // lanes * lanes if len(pv) == 1 else n
        region = self.open_region()
        if len(pv) == 1:
            self.out("  ", f"#pragma omp for {self.block_schedule(lanes)} nowait")
            outer, pre = "  ", None
        else:
            outer, pre = self.outer_loops(nowait=True)
        if heads:
            self.line_heads(outer, pre, n, lanes)
        at = len(self.lines)
        self.simd_loop(outer, [f"for (int64_t {inner} = 0; {inner} < {streamed_to}; ++{inner}) {{"],
                       {}, [], self.k.elem_stores, "", pre)
        streamed = streamed_pass(self.lines[at:], outer, stream_types(self.k), var=inner, fence=False,
                                 flat=len(pv) == 1, start="lh_" if heads else None) if streamed_to else None
        if streamed is None:
            del self.lines[start:]
            return False
        self.lines[at:] = streamed
        if heads:
            self.out(outer, f"const int64_t lt_ = lh_ + ({n} - lh_) / {lanes} * {lanes};")
            self.simd_loop(outer, [f"for (int64_t {inner} = lt_; {inner} < {n}; ++{inner}) {{"],
                           {}, [], self.k.elem_stores, "", pre)
        self.close_loops(len(pv) - 1, outer)
        self.close_region(region)
        if streamed_to < n:  # the elements after the last line: this thread alone
            self.simd_loop("  ", [f"for (int64_t {inner} = {streamed_to}; {inner} < {n}; ++{inner}) {{"],
                           {}, [], self.k.elem_stores, "", None)
        return True

    def line_heads(self, outer: str, pre, n: int, lanes: int) -> None:
        """Find where the row of the kernel's first output reaches a 64-byte line (``lh_``) and
        store the elements before it plainly."""
        inner, first = as_var(self.k.pvars()[-1]).name, self.k.elem_stores[0]
        em = self.emitter(outer + "  ", {})
        self.out(outer, "int64_t lh_;", "{", f"  const int64_t {inner} = 0;",
                 f"  lh_ = ln_line_head(&{mangle(BUFFER, first.buffer)}[{em.offset(first.buffer, first.index)}], {n});",
                 "}")
        self.simd_loop(outer, [f"for (int64_t {inner} = 0; {inner} < lh_; ++{inner}) {{"],
                       {}, [], self.k.elem_stores, "", pre)

    def innermost_loops(self, outer: str, pre) -> None:
        """The innermost loop of a pointwise kernel inside its outer loops: one ``omp simd`` loop,
        or one per range where a piecewise op changes piece (``piecewise.py``), each in its own
        scope."""
        var, size = as_var(self.k.pvars()[-1]), self.k.pdomain[-1]
        ranges = piecewise.pieces([s.value for s in self.k.elem_stores], var, size)
        for lo, hi in ranges or [("0", self.c(size))]:
            at = outer + "  " if ranges else outer
            if ranges:
                self.out(outer, "{")
            self.simd_loop(at, [f"for (int64_t {var.name} = {lo}; {var.name} < {hi}; ++{var.name}) {{"],
                           {}, [], self.k.elem_stores, "", pre)
            if ranges:
                self.out(outer, "}")

    def simd_loop(self, indent: str, header: list[str], accs, mine, stores, position: str, pre,
                  per_row: bool = False, pragma: str = "#pragma omp simd") -> None:
        """An ``omp simd`` loop at ``indent`` (``header``: its ``for`` line and what it declares
        first; ``pragma``: its pragma, with any reduction clauses) whose body updates ``mine``
        and does ``stores``, with its deferred checks."""
        pragma_at, deferred = len(self.lines), []
        self.out(indent, pragma, *header)
        self.body(indent + "  ", accs, mine, stores, position, per_row=per_row, pre=pre, deferred=deferred)
        self.out(indent, "}")
        self.finish_deferred(deferred, pragma_at, indent)

    def outer_loops(self, nowait: bool = False) -> tuple[str, CppEmitter | None]:
        """Open a pointwise kernel's loops over all but its innermost dim (parallel), with the
        indirect positions that do not change along the innermost computed before it; returns
        the indent inside them and that emitter (None for a kernel of one dim or none)."""
        pv = self.k.pvars()
        if len(pv) <= 1:
            return "  ", None
        tables = self.inner_tables()
        self.parallel_for(len(pv) - 1, nowait=nowait)
        outer = self.open_loops(pv[:-1], self.k.pdomain[:-1], "  ")
        if self.k.pdomain[-1].as_int() is None:  # what is hoisted reads only where the loop runs
            self.out(outer, f"if ({self.c(self.k.pdomain[-1])} <= 0) continue;")
        pre = self.hoisted(outer, {}, [s.value for s in self.k.elem_stores], pv[-1:], loads=True)
        pre.cache.update(tables)
        return outer, pre

    def inner_tables(self) -> dict[Expr, str]:
        """Compute, before the parallel loops, each costly value that depends on the innermost
        loop variable alone into a table over that dim (a batch norm's ``rsqrt(var[c] + eps) *
        w[c]`` where channels are innermost, channels-last); returns the table reads that stand
        for those values. Hoisting cannot help there, and computed per element it cost a square
        root and a division per vector (``_table_values``)."""
        inner, size = as_var(self.k.pvars()[-1]), self.k.pdomain[-1].as_int()
        if size is None or size > MAX_TABLE:
            return {}
        found = _table_values([s.value for s in self.k.elem_stores], inner)
        reads = {}
        for node in found:
            table = f"lnt{next(self.names)}"
            self.out("  ", f"{ctype(node.dtype)} {table}[{size}];", "#pragma omp simd",
                     f"for (int64_t {inner.name} = 0; {inner.name} < {size}; ++{inner.name}) {{")
            em = self.emitter("    ", {})
            self.out("    ", f"{table}[{inner.name}] = {em.emit(node)};")
            self.out("  ", "}")
            reads[node] = f"{table}[{inner.name}]"
        return reads

    def pointwise_math_blocks(self, calls, staging: half_blocks.Staging) -> None:
        """The innermost loop in blocks whose math runs inline (``vector_blocks.py``) and whose
        halves convert a vector at a time (``half_blocks.py``), then the elements after the last
        block through the plain loop. A kernel whose output leaves the cache stages every store
        and writes each block's lines with streaming stores (``streaming.py``)."""
        pv, sizes = self.k.pvars(), self.k.pdomain
        inner, n, step = as_var(pv[-1]).name, self.c(sizes[-1]), vector_blocks.block_size(self.k)
        start = f"{inner}_b"
        whole_lines = step % line_lanes(self.k) == 0 and (len(pv) == 1 or (sizes[-1].as_int() or 1) % step == 0)
        stream = whole_lines and pointwise_streams(self.k, self.cfg.stores)
        if stream:
            floats = half_blocks.plan(self.k, [s.value for s in self.k.elem_stores], self.k.elem_stores,
                                      as_var(pv[-1]), self.names, floats=True)
            stream = all((s.buffer, s.index) in floats.stores for s in self.k.elem_stores)
            staging = floats if stream else staging
        region = self.open_region() if stream else None
        outer, pre = self.outer_loops(nowait=stream)
        if len(pv) > 1:
            self.out(outer, f"int64_t {start} = 0;", f"for (; {start} + {step} <= {n}; {start} += {step}) {{")
            tail = start
        else:
            tail = f"({n}) / {step} * {step}"
            schedule = self.block_schedule(step)
            self.out(outer, f"#pragma omp for {schedule} nowait" if stream else
                     f"#pragma omp parallel for {schedule}{self.threads}",
                     f"for (int64_t {start} = 0; {start} < {tail}; {start} += {step}) {{")
        half_blocks.convert_loads(self, outer + "  ", staging, inner, start, step)
        staged = half_blocks.staged_emitter(vector_blocks.emitter_from(self, outer + "  ", pre), staging, "j_")
        results = vector_blocks.write_blocks(self, outer + "  ", calls, inner, start, staged, count=step)
        vector_blocks.open_lanes(self, outer + "  ", inner, start, step)
        self.body(outer + "    ", {}, [], self.k.elem_stores, "", pre=results)
        self.out(outer + "  ", "}")
        half_blocks.convert_stores(self, outer + "  ", staging, inner, start, step, stream=stream)
        self.out(outer, "}")
        if region is not None and len(pv) == 1:  # the elements after the blocks: this thread alone
            self.close_region(region)
        if sizes[-1].as_int() is None or sizes[-1].as_int() % step:  # else no element is left
            self.out(outer, "#pragma omp simd", f"for (int64_t {inner} = {tail}; {inner} < {n}; ++{inner}) {{")
            self.body(outer + "  ", {}, [], self.k.elem_stores, "", pre=pre)
            self.out(outer, "}")
        self.close_loops(len(pv) - 1, outer)
        if region is not None and len(pv) > 1:
            self.close_region(region)

    def block_schedule(self, step: int) -> str:
        """The ``schedule(...)`` clause of a parallel loop over blocks of ``step`` elements (the
        config's grain counts elements)."""
        grain = f", {max(1, self.cfg.grain // step)}" if self.cfg.grain else ""
        return f"schedule({self.cfg.schedule}{grain})"

    def open_region(self) -> int:
        """Open a parallel region whose loops are ``omp for ... nowait``, so that
        each thread fences its streaming stores once at its end (``close_region``); returns
        where its body starts. A kernel known to be small runs it on this thread alone."""
        self.out("  ", *([] if self.serial else [f"#pragma omp parallel{self.threads}"]), "{")
        return len(self.lines)

    def close_region(self, body_at: int) -> None:
        """Fence this thread's streaming stores and close the region opened at ``body_at``,
        indenting its body."""
        self.lines[body_at:] = ["  " + line for line in self.lines[body_at:]]
        self.out("    ", "ln_stream_fence();")
        self.out("  ", "}")

    def pointwise_blocks(self, t: int) -> None:
        """Loops over TILE x TILE blocks of (dim ``t``, the innermost dim), parallel over the
        other dims and the blocks (``tiling.py``). Whole blocks read the inputs it transposes in
        registers through block arrays, if the config has any, and stream their float32 rows
        of one line each where the config says "stream" (not "auto": over 74-84 MB on a Zen 4,
        streamed blocks took 0.67-1.08x the plain ones' time, so it is the tuner's choice), in
        one parallel region whose threads fence once at its end."""
        pv, sizes = self.k.pvars(), self.k.pdomain
        outer = [k for k in range(len(pv) - 1) if k != t]
        tv, iv = as_var(pv[t]).name, as_var(pv[-1]).name
        tn, inn = self.c(sizes[t]), self.c(sizes[-1])
        reads = reads_in_registers(self.k, t, self.cfg)
        stream = (self.cfg.stores == "stream"
                  and all(self.k.buffers[st.buffer].dtype == dt.float32 for st in self.k.elem_stores))
        region = self.open_region() if stream else None
        self.parallel_for(len(outer) + 2, nowait=stream)
        indent = self.open_loops([pv[k] for k in outer], [sizes[k] for k in outer], "  ")
        self.out(indent, f"for (int64_t {tv}_0 = 0; {tv}_0 < {tn}; {tv}_0 += {TILE}) {{")
        self.out(indent + "  ", f"for (int64_t {iv}_0 = 0; {iv}_0 < {inn}; {iv}_0 += {TILE}) {{")
        indent += "    "
        partial = (f"std::min<int64_t>({tv}_0 + {TILE}, {tn})", f"std::min<int64_t>({iv}_0 + {TILE}, {inn})")
        if reads or stream:
            self.out(indent, f"if ({tv}_0 + {TILE} <= {tn} && {iv}_0 + {TILE} <= {inn}) {{")
            arrays = {}
            for load, stride in reads.items():
                arrays[load] = array = f"lnt{next(self.names)}"
                corner = self.emitter(indent + "  ", {}).offset(load.buffer, self.at_zero(load.index, pv[t], pv[-1]))
                self.out(indent + "  ", f"alignas(64) float {array}[{TILE * TILE}];",
                         f"{TRANSPOSES[load.dtype]}(&{mangle(BUFFER, load.buffer)}[({corner}) + {tv}_0 + {iv}_0 * {stride}], "
                         f"{stride}, {array});")
            self.block_loops(indent + "  ", tv, iv, f"{tv}_0 + {TILE}", f"{iv}_0 + {TILE}",
                             {load: f"{a}[({tv} - {tv}_0) * {TILE} + ({iv} - {iv}_0)]" for load, a in arrays.items()},
                             stream)
            self.out(indent, "} else {")
            self.block_loops(indent + "  ", tv, iv, *partial)
            self.out(indent, "}")
        else:
            self.block_loops(indent, tv, iv, *partial)
        self.close_loops(2 + len(outer), indent)
        if region is not None:
            self.close_region(region)

    @staticmethod
    def at_zero(index: tuple[Index, ...], *dims) -> tuple[Index, ...]:
        """``index`` with the domain variables ``dims`` at 0 (a block's corner, a row's start)."""
        return tuple(i.subs({as_var(v): Index.of(0) for v in dims}) for i in index)

    def block_loops(self, indent: str, tv: str, iv: str, t_end: str, i_end: str,
                    given: dict | None = None, stream: bool = False) -> None:
        """The loops over one block's elements, up to ``t_end`` and ``i_end``; ``given``: loads
        read from block arrays instead (their C++ expressions); ``stream``: each row of the
        block (one line per output) is staged and stored with ``ln_stream_line``."""
        pv = self.k.pvars()
        self.out(indent, f"for (int64_t {tv} = {tv}_0; {tv} < {t_end}; ++{tv}) {{")
        inner = indent + "  "
        pre = self.hoisted(inner, {}, [s.value for s in self.k.elem_stores], pv[-1:])
        pre.cache.update(given or {})
        staged = {}
        if stream:
            for st in self.k.elem_stores:
                staged[st] = array = f"lns{next(self.names)}"
                self.out(inner, f"alignas(64) float {array}[{TILE}];")
                pre.staged_stores[(st.buffer, st.index)] = f"{array}[{iv} - {iv}_0]"
        pragma_at = len(self.lines)
        self.out(inner, "#pragma omp simd")
        self.out(inner, f"for (int64_t {iv} = {iv}_0; {iv} < {i_end}; ++{iv}) {{")
        deferred: list[Deferred] = []
        self.body(inner + "  ", {}, [], self.k.elem_stores, "", pre=pre, deferred=deferred)
        self.out(inner, "}")
        self.finish_deferred(deferred, pragma_at, inner)
        for st, array in staged.items():
            at = self.emitter(inner, {}).offset(st.buffer, self.at_zero(st.index, pv[-1]))
            self.out(inner, f"ln_stream_line(&{mangle(BUFFER, st.buffer)}[({at}) + {iv}_0], {array});")
        self.out(indent, "}")

    # -- reductions: shared pieces -------------------------------------------------------------------
    def accumulators(self, index: str = "", prefix: str = "acc") -> dict[str, Accumulator]:
        return {r.name: Accumulator(r, f"{prefix}{n}", index) for n, r in enumerate(self.k.reductions)}

    def phase_parts(self, phase: int, accs: dict[str, Accumulator]):
        """This phase's accumulators (those across rows last: updated in the loop, declared and
        finished by ``rows``) and element stores."""
        mine = [accs[r.name] for r in self.k.reductions if r.level == phase and not r.across]
        mine += [self.across[r.name] for r in self.k.across if r.level == phase]
        stores = [s for s in self.k.elem_stores if s.phase == phase]
        return mine, stores

    @staticmethod
    def own(accs: list[Accumulator]) -> list[Accumulator]:
        """The accumulators a phase loop declares and finishes itself (not those across rows)."""
        return [a for a in accs if not a.r.across]

    def body(self, indent: str, accs, mine, stores, position: str, per_row: bool = False,
             pre: CppEmitter | None = None, deferred: list[Deferred] | None = None,
             count: str | None = None) -> None:
        """Update this phase's accumulators and do its element stores at the current point.

        ``per_row``: the loop runs over the reduced dims of one row, so values that read no
        reduced variable are loop-invariant. ``pre``: the emitter that computed the loop-invariant
        indirect positions before the loop. ``deferred``: the loop is vectorized, so index checks
        are collected here and finished after it (``finish_deferred``). ``count``: the elements
        each lane state holds after this point, the same for all lanes (``Accumulator.update``).
        """
        em = self.emitter(indent, accs)
        if pre is not None:
            em.inherit(pre)
        if per_row:
            em.varying = frozenset(as_var(v) for v in self.k.rvars())
        em.deferred = deferred
        for a in mine:
            self.out(indent, *a.update(em.emit(a.r.body), position, count))
        for s in stores:
            em.store(s.buffer, s.index, s.value)

    def finish_deferred(self, deferred: list[Deferred] | None, pragma_at: int, indent: str) -> None:
        """Complete the checks deferred inside the vectorized loop whose pragma is line
        ``pragma_at``: their accumulators declared before it, reduced by it, tested after it."""
        if not deferred:
            return
        self.out(indent, *(d.test() for d in deferred))
        self.lines[pragma_at] += "".join(d.clauses() for d in deferred)
        self.lines[pragma_at:pragma_at] = [indent + d.declare() for d in deferred]

    @staticmethod
    def phase_exprs(mine, stores) -> list[Expr]:
        return [a.r.body for a in mine] + [s.value for s in stores]

    def flat_r(self) -> str:
        flat = Index.of(0)
        for v, n in zip(self.k.rvars(), self.k.rdomain):
            flat = flat * n + v
        return self.c(flat)

    def row_stores(self, indent: str, accs) -> None:
        em = self.emitter(indent, accs)
        for s in self.k.row_stores:
            em.store(s.buffer, s.index, s.value)

    # -- rows: each thread owns whole rows -------------------------------------------------------------
    def rows(self) -> None:
        pv = self.k.pvars()
        across = AcrossRows(self) if self.k.across else None
        if across is not None:
            across.open()
            self.out("    ", f"#pragma omp for {self.cfg.omp_schedule}{f' collapse({len(pv)})' if len(pv) > 1 else ''}"
                     " nowait")
            indent = self.open_loops(pv, self.k.pdomain, "    ")
        else:
            self.parallel_for(len(pv))
            indent = self.open_loops(pv, self.k.pdomain, "  ")
        self.streaming = len(pv) == 1 and wants_streaming(self.k, self.cfg.stores)
        self.prefetching = not self.streaming and wants_next_row_prefetch(self.k)
        self.row_start = len(self.lines)
        results = self.reduce_rows(indent, "0", self.c(self.k.rdomain[0]))
        self.streaming = self.prefetching = False
        self.row_stores(indent, results)
        if across is not None:
            across.row_done(indent)
        self.close_loops(len(pv), indent)
        if across is not None:
            across.close()

    def reduce_rows(self, indent: str, lo: str, hi: str, prefix: str = "acc") -> dict[str, Accumulator]:
        """All phases over the reduced dims (the outermost in [lo, hi)); returns result accumulators."""
        results: dict[str, Accumulator] = {}
        for phase in range(self.k.num_phases):
            results.update(self.reduce_phase(phase, indent, results, lo, hi, prefix))
        return results

    def reduce_phase(self, phase, indent, results, lo, hi, prefix) -> dict[str, Accumulator]:
        """One pass over the reduced dims, vectorized with lane arrays when no clause fits."""
        mine = [r for r in self.k.reductions if r.level == phase]
        if not mine and not any(s.phase == phase for s in self.k.elem_stores):
            return {}
        needs_lanes = any(Accumulator(r, "_").simd_clauses() is None for r in mine)
        if needs_lanes and len(self.k.rdomain) == 1:
            return self.lane_phase(phase, indent, results, lo, hi, prefix)
        return self.scalar_phase(phase, indent, results, lo, hi, prefix)

    def scalar_phase(self, phase, indent, results, lo, hi, prefix) -> dict[str, Accumulator]:
        accs = {**self.accumulators(prefix=prefix), **results}
        mine, stores = self.phase_parts(phase, accs)
        for a in self.own(mine):
            self.out(indent, *a.declare())
        pre = self.hoisted(indent, accs, self.phase_exprs(mine, stores), self.k.rvars())
        clauses = [c for a in self.own(mine) for c in (a.simd_clauses() or ["-"])]
        pragma = None if "-" in clauses else "#pragma omp simd " + " ".join(clauses)
        n = position_lanes.positions(self.k, self.own(mine), stores) if pragma is not None else None
        if n is not None:  # short runs: one partial per position (position_lanes.py)
            position_lanes.write(self, indent, accs, self.own(mine), pre, lo, hi, n)
        else:
            self.blocked_row_loops(indent, accs, mine, stores, pre, pragma, lo, hi)
        for a in self.own(mine):
            self.out(indent, *a.finish())
        return {a.r.name: a for a in self.own(mine)}

    def blocked_row_loops(self, indent, accs, mine, stores, pre, pragma, lo, hi) -> None:
        """The phase's loop over the reduced dims (lane arrays or ``row_loop``), in blocks whose
        float sums fold into doubles where the row outgrows one (``blocked_sums.py``)."""
        rv, sizes = self.k.rvars(), list(self.k.rdomain)
        sums = BlockedSums(self.own(mine))
        step = row_step(self.c, sizes) if sums else None
        outer = indent
        if step is not None:
            self.out(indent, *sums.declare())
            indent, lo, hi = open_blocks(self, indent, lo, hi, step)
        exprs = self.phase_exprs(mine, stores)
        calls = vector_blocks.math_calls(exprs, pre)
        staging = half_blocks.plan(self.k, exprs, stores, as_var(rv[-1]), self.names)
        lanes = pragma is not None and bool(self.own(mine)) and (
            row_lanes.takes_lanes(self.k, self.cfg, calls, bool(staging)) if len(rv) == 1
            else row_lanes.inner_lanes(self.k, self.cfg, calls))
        if lanes:  # vectors of partial states in lane arrays (row_lanes.py)
            self.out(indent, "{")
            inner = indent + "  "
            if len(rv) > 1:  # the outer reduced dims as loops, lanes along the innermost
                self.out(inner, block_loop(as_var(rv[0]).name, lo, hi))
                inner = self.open_loops(rv[1:-1], sizes[1:-1], inner + "  ")
                lo, hi = "0", self.c(sizes[-1])
            row_lanes.write_lanes(self, inner, accs, mine, stores, pre, as_var(rv[-1]).name, lo, hi,
                                  row_lanes.lane_count(self.k, self.cfg), calls, staging)
            if len(rv) > 1:
                self.close_loops(len(rv) - 1, inner)
            self.out(indent, "}")
        else:
            self.row_loop(indent, accs, mine, stores, pre, pragma, lo, hi, staging, calls)
        if step is not None:
            self.out(indent, *sums.fold())
            self.out(outer, "}", *sums.finish())

    def row_loop(self, indent, accs, mine, stores, pre, pragma, lo, hi, staging, calls) -> None:
        """One loop over the reduced dims from ``lo`` to ``hi``: ``omp simd`` with ``pragma``'s
        reduction clauses where the row is one dim, streamed stores where the phase only stores;
        in blocks where it stages halves or calls math (``staging``, ``calls``: the phase's)."""
        rv, sizes = self.k.rvars(), list(self.k.rdomain)
        r0 = as_var(rv[0]).name
        if len(rv) == 1 and pragma and row_blocks.wanted(self, mine, stores, staging, calls):  # (row_blocks.py)
            return row_blocks.write(self, indent, accs, mine, stores, pre, pragma, lo, hi, staging, calls)
        pragma_at, deferred = len(self.lines), ([] if len(rv) == 1 and pragma else None)
        if len(rv) == 1 and pragma:
            self.out(indent, pragma)
        self.out(indent, block_loop(r0, lo, hi))
        inner = self.open_loops(rv[1:], sizes[1:], indent + "  ", pragma)
        self.body(inner, accs, mine, stores, self.flat_r(), per_row=True, pre=pre, deferred=deferred)
        self.close_loops(len(rv), inner)
        self.finish_deferred(deferred, pragma_at, indent)
        if (self.streaming or self.prefetching) and not mine and not deferred and len(rv) == 1:
            streamed = streamed_pass(self.lines[pragma_at:], indent, stream_types(self.k), stream=self.streaming,
                                     row_loads=self.lines[self.row_start:pragma_at])
            self.lines[pragma_at:] = streamed or self.lines[pragma_at:]

    def lane_phase(self, phase, indent, results, lo, hi, prefix) -> dict[str, Accumulator]:
        """A 1-D reduction in vectors of ``lanes`` partial states, combined at the end."""
        lanes = str(self.cfg.lanes)
        accs = {**self.accumulators("[j]", prefix), **results}
        mine, stores = self.phase_parts(phase, accs)
        for a in self.own(mine):
            self.out(indent, *a.declare(lanes))
        pre = self.hoisted(indent, accs, self.phase_exprs(mine, stores), self.k.rvars())
        r0 = as_var(self.k.rvars()[0]).name
        self.out(indent, f"for (int64_t rc_ = {lo}; rc_ < {hi}; rc_ += {lanes}) {{",
                 f"  const int64_t w_ = std::min<int64_t>({lanes}, {hi} - rc_);",
                 "  #pragma omp simd",
                 "  for (int64_t j = 0; j < w_; ++j) {",
                 f"    const int64_t {r0} = rc_ + j;")
        self.body(indent + "    ", accs, mine, stores, r0, per_row=True, pre=pre,
                  count=f"(rc_ - ({lo})) / {lanes} + 1")  # every lane of a chunk has seen as many
        self.out(indent, "  }", "}")
        first = {a.r.name: Accumulator(a.r, a.var, "[0]") for a in self.own(mine)}
        for a in self.own(mine):
            self.out(indent, f"for (int64_t j = 1; j < {lanes}; ++j) {{")
            self.out(indent + "  ", *first[a.r.name].combine(a))
            self.out(indent, "}")
            self.out(indent, *first[a.r.name].finish())
        return first

    # -- columns: each thread owns chunks of adjacent columns ------------------------------------------
    def columns(self) -> None:
        pv, sizes = self.k.pvars(), list(self.k.pdomain)
        accs = self.accumulators("[j]")
        last, width = as_var(pv[-1]).name, column_chunk(self.k, self.cfg, column_state_bytes(self.k))
        if splits_rows(self.k, self.cfg, width, omp_threads(self.cfg)):
            write_split_rows(self)
            return
        columns = sizes[-1].as_int()
        self.parallel_for(len(pv))
        indent = self.open_loops(pv[:-1], sizes[:-1], "  ")
        self.out(indent, f"for (int64_t c_ = 0; c_ < ({self.c(sizes[-1])} + {width - 1}) / {width}; ++c_) {{")
        indent += "  "
        self.out(indent, f"const int64_t pc_ = c_ * {width};")
        if columns is not None and columns % width == 0:  # a constant trip count: whole vectors, no tail
            self.out(indent, f"constexpr int64_t w_ = {width};")
        else:
            self.out(indent, f"const int64_t w_ = std::min<int64_t>({width}, {self.c(sizes[-1])} - pc_);")
        slab = column_rows.next_slab(self, width)
        for phase in range(self.k.num_phases):
            mine, stores = self.phase_parts(phase, accs)
            for a in mine:
                self.out(indent, *a.declare(str(width)))
            rv = self.k.rvars()
            sums = BlockedSums(mine, str(width), "w_")
            step = column_step(self.c, self.k.rdomain) if sums else None
            head = ("#pragma omp simd", "for (int64_t j = 0; j < w_; ++j) {", f"  const int64_t {last} = pc_ + j;")
            pre = self.column_values(indent, accs, self.phase_exprs(mine, stores), width)

            def body(at: str) -> None:
                self.body(at, accs, mine, stores, self.flat_r(), pre=pre, count=f"{self.flat_r()} + 1")

            lo, hi, blocks = "0", self.c(self.k.rdomain[0]), indent
            if step is not None:
                self.out(indent, *sums.declare())
                blocks, lo, hi = open_blocks(self, indent, lo, hi, step)
            if len(rv) == 1:
                column_rows.write_rows(self, blocks, as_var(rv[0]).name, lo, hi, head, body, column_rows.ROWS_PER_PASS,
                                       slab if phase == 1 else None)
            else:
                r0 = as_var(rv[0]).name
                self.out(blocks, block_loop(r0, lo, hi))
                inner = self.open_loops(rv[1:], self.k.rdomain[1:], blocks + "  ")
                self.out(inner, *head)
                body(inner + "  ")
                self.out(inner, "}")
                self.close_loops(len(rv), inner)
            if step is not None:
                self.out(blocks, *sums.fold())
                self.out(indent, "}", *sums.finish())
            finish = [x for a in mine for x in a.finish()]
            if finish:
                self.out(indent, "for (int64_t j = 0; j < w_; ++j) {", *["  " + x for x in finish], "}")
        if self.k.row_stores:
            self.out(indent, "#pragma omp simd", "for (int64_t j = 0; j < w_; ++j) {",
                     f"  const int64_t {last} = pc_ + j;")
            self.row_stores(indent + "  ", accs)
            self.out(indent, "}")
        self.out(indent[:-2], "}")
        self.close_loops(len(pv) - 1, indent[:-2])

    def column_values(self, indent: str, accs, exprs, width: int) -> CppEmitter | None:
        """An emitter that reads, from arrays filled once per chunk of columns before the pass,
        the values of ``exprs`` computed from finished accumulators alone (a column's log-sum or
        rsqrt, ``_row_values``); None where there are none. Inside the loop over rows they would
        be computed again for every row: a log_softmax over dim 1 of 64 x 100 x 333 took 100
        logs per column."""
        nodes = self._row_values(exprs, self.emitter(indent, accs))
        if not nodes:
            return None
        arrays = {node: f"cv{next(self.names)}_" for node in nodes}
        self.out(indent, *(f"{ctype(node.dtype)} {name}[{width}];" for node, name in arrays.items()))
        self.out(indent, "#pragma omp simd", "for (int64_t j = 0; j < w_; ++j) {")
        em = self.emitter(indent + "  ", accs)
        for node, name in arrays.items():
            self.out(indent + "  ", f"{name}[j] = {em.emit(node)};")
        self.out(indent, "}")
        pre = self.emitter(indent, accs)
        pre.cache.update({node: f"{name}[j]" for node, name in arrays.items()})
        return pre

    # -- full reductions: the reduced range split across threads -----------------------------------------
    def full_reduction(self) -> None:
        """No rows: every phase splits the outermost reduced dim across threads, then combines."""
        shared = self.accumulators(prefix="acc")
        results: dict[str, Accumulator] = {}
        n0 = self.c(self.k.rdomain[0])
        for phase in range(self.k.num_phases):
            mine = [shared[r.name] for r in self.k.reductions if r.level == phase]
            for a in mine:
                self.out("  ", *a.declare())
            self.out("  ", f"#pragma omp parallel{self.threads}", "{",
                     "  const int64_t nt_ = omp_get_num_threads(), tid_ = omp_get_thread_num();",
                     f"  const int64_t lo_ = ({n0}) * tid_ / nt_, hi_ = ({n0}) * (tid_ + 1) / nt_;")
            local = self.reduce_phase(phase, "    ", results, "lo_", "hi_", "l_acc")
            if mine:
                self.out("  ", "  #pragma omp critical", "  {")
                for a in mine:
                    self.out("      ", *a.combine(local[a.r.name]))
                self.out("  ", "  }")
            self.out("  ", "}")
            for a in mine:
                self.out("  ", *a.finish())
            results.update({a.r.name: a for a in mine})
        self.row_stores("  ", results)
