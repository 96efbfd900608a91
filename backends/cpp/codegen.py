"""C++/OpenMP source for a kernel: parallel over rows, vectorizable inner loops.

Every kernel is ``extern "C" void NAME(void** args, const int64_t* syms)``: ``args`` holds the
buffer pointers in ``KernelSignature.buffers`` order, ``syms`` the symbolic sizes in
``KernelSignature.symbols`` order.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...ir.expr import AccRef, Apply, Const, Expr, IndexValue, Load
from ...ir.index import Index, Indirect, Sym
from ...ir.ops import Op
from ...scheduler.kernel import Kernel
from ..emitter import ExprEmitter, IndexPrinter
from .accumulators import Accumulator
from .ops import LIBM, RENDER, STORAGE, ctype, load_value, render_cast, render_const, render_libm, store_value
from .params import CppConfig


@dataclass(frozen=True)
class KernelSignature:
    """The order of a kernel's runtime arguments."""

    buffers: tuple[str, ...]
    symbols: tuple[str, ...]


def signature(kernel: Kernel) -> KernelSignature:
    """Buffers (inputs then outputs) and symbolic sizes a kernel takes."""
    bufs = list(dict.fromkeys(kernel.inputs + kernel.outputs))
    syms: set[str] = set()
    for name in bufs:
        lay = kernel.buffers[name].layout
        for e in lay.sizes + lay.strides + (lay.offset,):
            syms |= {a.name for a in e.atoms() if isinstance(a, Sym)}
    for e in kernel.pdomain + kernel.rdomain:
        syms |= {a.name for a in e.atoms() if isinstance(a, Sym)}
    return KernelSignature(tuple(bufs), tuple(sorted(syms)))


class CppEmitter(ExprEmitter):
    """Renders expressions as C++ statements."""

    def __init__(self, kernel: Kernel, lines: list[str], indent: str, accs: dict[str, Accumulator],
                 names):
        super().__init__(lines, indent, names)
        self.kernel = kernel
        self.accs = accs
        self.indirect: dict[Indirect, str] = {}
        self.index = IndexPrinter(self._atom)

    def _atom(self, a) -> str:
        if isinstance(a, Indirect):
            return self.indirect[a]
        return a.name

    def _prepare_indirect(self, index: Index) -> None:
        for a in index.atoms():
            if isinstance(a, Indirect) and a not in self.indirect:
                value = self.emit(a.value)
                name = self.fresh("ix")
                bound = self.index(a.bound)
                self.lines.append(f"{self.indent}int64_t {name} = {value};")
                self.lines.append(f"{self.indent}if ({name} < 0) {name} += {bound};")
                self.indirect[a] = name

    def offset(self, buffer: str, index: tuple[Index, ...]) -> str:
        for i in index:
            self._prepare_indirect(i)
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
        return load_value(e.dtype, f"{e.buffer}[{self.offset(e.buffer, e.index)}]")

    def index_value(self, e: IndexValue) -> str:
        self._prepare_indirect(e.index)
        return f"(({ctype(e.dtype)})({self.index(e.index)}))"

    def cast(self, value: str, src: Expr, e: Apply) -> str:
        return render_cast(value, src.dtype, e.dtype)

    def apply(self, e: Apply, args: list[str]) -> str:
        if e.op in LIBM:
            return render_libm(e.op, e.dtype, args[0])
        if e.op in (Op.ABS, Op.NEG) and e.args[0].dtype.is_bool:
            return args[0]
        return RENDER[e.op](*args)

    def store(self, buffer: str, index: tuple[Index, ...], value: Expr) -> None:
        v = self.emit(value)
        dtype = self.kernel.buffers[buffer].dtype
        if value.dtype != dtype:
            v = render_cast(v, value.dtype, dtype)
        self.lines.append(f"{self.indent}{buffer}[{self.offset(buffer, index)}] = {store_value(dtype, v)};")


def generate(kernel: Kernel, config: CppConfig) -> str:
    """The C++ function for ``kernel`` under ``config``."""
    sig = signature(kernel)
    lines = [f'extern "C" void {kernel.name}(void** args, const int64_t* syms) {{']
    for k, name in enumerate(sig.buffers):
        dtype = kernel.buffers[name].dtype
        const = "" if name in kernel.outputs else "const "
        lines.append(f"  {const}{STORAGE[dtype]}* __restrict__ {name} = ({const}{STORAGE[dtype]}*)args[{k}];")
    for k, s in enumerate(sig.symbols):
        lines.append(f"  const int64_t {s} = syms[{k}];")
    threads = f" num_threads({config.threads})" if config.threads else ""
    names = itertools.count(1)  # one counter per kernel: deterministic, collision-free names
    if not kernel.reductions:
        _pointwise(kernel, lines, threads, names)
    elif kernel.pdomain:
        _rows(kernel, lines, threads, names)
    else:
        _full_reduction(kernel, lines, threads, names)
    lines.append("}")
    return "\n".join(lines)


def _loops(vars_, sizes, indent: str, lines: list[str], pragma_inner: str | None) -> str:
    """Open nested loops; returns the indentation inside the innermost."""
    for k, (v, n) in enumerate(zip(vars_, sizes)):
        if k == len(vars_) - 1 and pragma_inner:
            lines.append(f"{indent}{pragma_inner}")
        name = v.terms[0][0][0].name
        lines.append(f"{indent}for (int64_t {name} = 0; {name} < {n}; ++{name}) {{")
        indent += "  "
    return indent


def _close(count: int, indent: str, lines: list[str]) -> None:
    for k in range(count):
        lines.append(indent[: len(indent) - 2 * (k + 1)] + "}")


def _pointwise(kernel: Kernel, lines: list[str], threads: str, names) -> None:
    pv = kernel.pvars()
    indent = "  "
    if len(pv) == 0:
        body_indent = indent
    elif len(pv) == 1:
        lines.append(f"  #pragma omp parallel for simd schedule(static){threads}")
        body_indent = _loops(pv, kernel.pdomain, indent, lines, None)
    else:
        collapse = f" collapse({len(pv) - 1})" if len(pv) > 2 else ""
        lines.append(f"  #pragma omp parallel for schedule(static){collapse}{threads}")
        body_indent = _loops(pv, kernel.pdomain, indent, lines, "#pragma omp simd")
    em = CppEmitter(kernel, lines, body_indent, {}, names)
    for s in kernel.elem_stores:
        em.store(s.buffer, s.index, s.value)
    _close(len(pv), body_indent, lines)


def _accumulators(kernel: Kernel) -> dict[str, Accumulator]:
    return {r.name: Accumulator(r, f"acc{k}") for k, r in enumerate(kernel.reductions)}


def _flat_r(kernel: Kernel) -> str:
    flat = Index.of(0)
    for v, n in zip(kernel.rvars(), kernel.rdomain):
        flat = flat * n + v
    return IndexPrinter(lambda a: a.name)(flat)


def _phase_loop(kernel: Kernel, phase: int, accs: dict[str, Accumulator], lines: list[str],
                indent: str, names, rvars_range: tuple | None = None) -> None:
    """One pass over the reduced dims: update this phase's accumulators, do its stores."""
    mine = [accs[r.name] for r in kernel.reductions if r.level == phase]
    stores = [s for s in kernel.elem_stores if s.phase == phase]
    if not mine and not stores:
        return
    clauses = [c for a in mine for c in (a.simd_clauses() or ["-"])]
    pragma = None if "-" in clauses else "#pragma omp simd " + " ".join(clauses)
    rv, sizes = kernel.rvars(), list(kernel.rdomain)
    if rvars_range is not None:  # the outermost reduced dim split across threads
        lo, hi = rvars_range
        name = rv[0].terms[0][0][0].name
        if len(rv) == 1 and pragma:
            lines.append(f"{indent}{pragma}")
        lines.append(f"{indent}for (int64_t {name} = {lo}; {name} < {hi}; ++{name}) {{")
        inner_indent = _loops(rv[1:], sizes[1:], indent + "  ", lines, pragma)
        depth = len(rv)
    else:
        inner_indent = _loops(rv, sizes, indent, lines, pragma)
        depth = len(rv)
    em = CppEmitter(kernel, lines, inner_indent, accs, names)
    flat = _flat_r(kernel)
    for a in mine:
        value = em.emit(a.r.body)
        for line in a.update(value, flat):
            lines.append(inner_indent + line)
    for s in stores:
        em.store(s.buffer, s.index, s.value)
    _close(depth, inner_indent, lines)


def _rows(kernel: Kernel, lines: list[str], threads: str, names) -> None:
    pv = kernel.pvars()
    collapse = f" collapse({len(pv)})" if len(pv) > 1 else ""
    lines.append(f"  #pragma omp parallel for schedule(static){collapse}{threads}")
    indent = _loops(pv, kernel.pdomain, "  ", lines, None)
    accs = _accumulators(kernel)
    for phase in range(kernel.num_phases):
        for a in accs.values():
            if a.r.level == phase:
                lines.extend(indent + x for x in a.init())
        _phase_loop(kernel, phase, accs, lines, indent, names)
        for a in accs.values():
            if a.r.level == phase:
                lines.extend(indent + x for x in a.finish())
    em = CppEmitter(kernel, lines, indent, accs, names)
    for s in kernel.row_stores:
        em.store(s.buffer, s.index, s.value)
    _close(len(pv), indent, lines)


def _full_reduction(kernel: Kernel, lines: list[str], threads: str, names) -> None:
    """No rows: each phase splits the outermost reduced dim across threads, then combines."""
    accs = _accumulators(kernel)
    n0 = kernel.rdomain[0]
    for phase in range(kernel.num_phases):
        mine = [a for a in accs.values() if a.r.level == phase]
        for a in mine:
            lines.extend("  " + x for x in a.init())
        lines.append(f"  #pragma omp parallel{threads}")
        lines.append("  {")
        lines.append("    const int64_t nt_ = omp_get_num_threads(), tid_ = omp_get_thread_num();")
        lines.append(f"    const int64_t lo_ = ({n0}) * tid_ / nt_, hi_ = ({n0}) * (tid_ + 1) / nt_;")
        local = {name: Accumulator(a.r, "l_" + a.var) for name, a in accs.items() if a.r.level == phase}
        for a in local.values():
            lines.extend("    " + x for x in a.init())
        view = {**accs, **local}
        _phase_loop(kernel, phase, view, lines, "    ", names, ("lo_", "hi_"))
        lines.append("    #pragma omp critical")
        lines.append("    {")
        for name, a in local.items():
            lines.extend("      " + x for x in accs[name].combine(a.var))
        lines.append("    }")
        lines.append("  }")
        for a in mine:
            lines.extend("  " + x for x in a.finish())
    em = CppEmitter(kernel, lines, "  ", accs, names)
    for s in kernel.row_stores:
        em.store(s.buffer, s.index, s.value)

