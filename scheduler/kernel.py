"""A fused loop nest: what the scheduler hands to a backend.

Loop variables are ``p0..`` over ``pdomain`` (independent, parallel) and ``r0..`` over
``rdomain`` (reduced). A reduction kernel runs, for every point of ``pdomain``, one loop over
``rdomain`` per phase: phase k updates the reductions of level k and performs the element stores
of phase k; reductions of level k may read the finished results (``AccRef``) of lower levels.
Row stores run after the last phase. A pointwise kernel has an empty ``rdomain`` and only
element stores. Reductions ``across`` the rows (one accumulator per point of the rdomain, folded
in during their phase's loop) are stored by ``col_stores`` once every row is done.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from ..ir.expr import AccRef, Apply, Expr, IndexValue, Load, loads, rewrite, walk
from ..ir.hashing import structural_digest
from ..ir.index import Index, Indirect, as_var, product, symbols_in
from ..ir.nodes import Buffer, KReduction, KStore, domain_vars
from ..ir.printer import Printer


class KernelKind(StrEnum):
    """The shape of a kernel's loop nest."""

    POINTWISE = "pointwise"            # one loop over elements
    REDUCTION = "reduction"            # rows, each reduced over the rdomain
    FULL_REDUCTION = "full_reduction"  # everything reduced to one row


@dataclass(eq=False)
class Kernel:
    """One fused loop nest."""

    name: str
    pdomain: tuple[Index, ...]
    rdomain: tuple[Index, ...]
    reductions: list[KReduction]
    elem_stores: list[KStore]
    row_stores: list[KStore]
    nodes: list[str]
    buffers: dict[str, Buffer] = field(repr=False, default_factory=dict)
    col_stores: list[KStore] = field(default_factory=list)  # results of ``across`` reductions, in rvars

    @property
    def num_phases(self) -> int:
        levels = [r.level + 1 for r in self.reductions] + [s.phase + 1 for s in self.elem_stores]
        return max(levels, default=1)

    @property
    def kind(self) -> KernelKind:
        if not self.reductions:
            return KernelKind.POINTWISE
        return KernelKind.FULL_REDUCTION if not self.pdomain else KernelKind.REDUCTION

    def pvars(self) -> tuple[Index, ...]:
        return domain_vars(self.pdomain, "p")

    def rvars(self) -> tuple[Index, ...]:
        return domain_vars(self.rdomain, "r")

    def expressions(self) -> list[Expr]:
        return ([r.body for r in self.reductions] + [s.value for s in self.elem_stores]
                + [s.value for s in self.row_stores] + [s.value for s in self.col_stores])

    def streaming_loads(self) -> list[frozenset]:
        """For each load whose address moves with the reduced dims (in any phase), the loop
        variables whose unit step moves it by one element. Loads the same for a whole row (a
        per-row statistic, a target index) are left out: they are read once per row whatever
        the loop order, so they say nothing about which order keeps loads contiguous."""
        rvars = {as_var(v) for v in self.rvars()}
        out = []
        for e in self.expressions():
            for ld in loads(e):
                flat = self.buffers[ld.buffer].layout.flat_index(ld.index)
                if flat.free_vars() & rvars:
                    out.append(frozenset(m[0] for m, c in flat.terms if len(m) == 1 and c == 1))
        return out

    @property
    def inputs(self) -> list[str]:
        """Buffers the kernel loads, in order of first use."""
        return list(dict.fromkeys(n.buffer for e in self.expressions() for n in loads(e)))

    @property
    def outputs(self) -> list[str]:
        return [s.buffer for s in self.elem_stores + self.row_stores + self.col_stores]

    @property
    def across(self) -> list[KReduction]:
        """The reductions across rows (``KReduction.across``)."""
        return [r for r in self.reductions if r.across]

    def text(self, canonical: bool = False) -> str:
        """Readable (or canonical: renamed, size-free) text of the kernel."""
        p = Printer(self.buffers, canonical=canonical, order=self.inputs)
        head = f"kernel p{p.shape(self.pdomain)} r{p.shape(self.rdomain)}"
        lines = [head] + [f"  in  {p.decl(b)}" for b in self.inputs]
        stores = self.elem_stores + self.row_stores + self.col_stores
        lines += p.name_shared([r.body for r in self.reductions] + [s.value for s in stores])
        for r in self.reductions:
            across = " across" if r.across else ""
            lines.append(f"  acc {p.buf(r.name)} = {r.op.value}{across} level {r.level}: {p.expr(r.body)}")
        for where, s in ([(f"phase {s.phase}", s) for s in self.elem_stores] + [("row", s) for s in self.row_stores]
                         + [("col", s) for s in self.col_stores]):
            idx = ", ".join(p.index(i) for i in s.index)
            lines.append(f"  {where} {p.decl(s.buffer)} [{idx}] = {p.expr(s.value)}")
        return "\n".join(lines)

    @property
    def structural_hash(self) -> str:
        """Identity of the computation, independent of names and sizes."""
        return structural_digest(self.text(canonical=True))

    def bytes_moved(self) -> Index:
        """Each input read once plus each output written once, in bytes."""
        return sum((self.buffers[n].nbytes for n in set(self.inputs) | set(self.outputs)), Index.of(0))

    def flops(self) -> Index:
        """Scalar ops executed (a rough count: one per Apply per point of its loop)."""
        row = product(self.pdomain)
        elem = row * product(self.rdomain)
        total = Index.of(0)
        for r in self.reductions:
            total = total + elem * (count_ops(r.body) + 1)
        for s in self.elem_stores:
            total = total + elem * count_ops(s.value)
        for s in self.row_stores:
            total = total + row * count_ops(s.value)
        for s in self.col_stores:
            total = total + product(self.rdomain) * count_ops(s.value)
        return total


def count_ops(e: Expr) -> int:
    """How many ops (``Apply`` nodes) ``e`` has."""
    return sum(1 for n in walk(e) if isinstance(n, Apply))


@dataclass(frozen=True)
class KernelSignature:
    """The order of a kernel's runtime arguments."""

    buffers: tuple[str, ...]
    symbols: tuple[str, ...]


def signature(kernel: Kernel) -> KernelSignature:
    """Buffers (inputs then outputs) and symbolic sizes a kernel takes."""
    bufs = list(dict.fromkeys(kernel.inputs + kernel.outputs))
    exprs = list(kernel.pdomain + kernel.rdomain)
    for name in bufs:
        lay = kernel.buffers[name].layout
        exprs += lay.sizes + lay.strides + (lay.offset,)
    stores = kernel.elem_stores + kernel.row_stores + kernel.col_stores
    exprs += [i for st in stores for i in st.index] + [i for e in kernel.expressions() for i in _indices(e)]
    syms = {n for e in exprs for n in symbols_in(e)}
    return KernelSignature(tuple(bufs), tuple(sorted(syms)))


def _indices(root: Expr) -> list[Index]:
    """Every index ``root`` reads through (loads, index values, and the values and bounds of the
    indirect positions inside them): a size read as a number (``float(s0)``) or a slice's
    symbolic start is a symbol the kernel takes even where no domain or layout holds it."""
    out: list[Index] = []
    for node in walk(root):
        if isinstance(node, (Load, IndexValue)):
            for i in node.index if isinstance(node, Load) else (node.index,):
                out.append(i)
                for a in i.atoms():
                    if isinstance(a, Indirect):
                        out.append(a.bound)
                        out += _indices(a.value)
    return out


def rewrite_kernel(kernel: Kernel, fn, keep=None) -> Kernel:
    """``kernel`` with ``fn`` (an ``ir.expr.rewrite`` callback) applied to every reduction body and
    stored value, one memo shared; ``keep``: the reductions to keep (default: all)."""
    memo: dict = {}

    def each(statements, field_name):
        return [replace(st, **{field_name: rewrite(getattr(st, field_name), fn, memo)}) for st in statements]

    kept = [r for r in kernel.reductions if keep is None or keep(r)]
    return replace(kernel, reductions=each(kept, "body"), elem_stores=each(kernel.elem_stores, "value"),
                   row_stores=each(kernel.row_stores, "value"), col_stores=each(kernel.col_stores, "value"))


def relevel(kernel: Kernel) -> Kernel:
    """``kernel`` with each reduction and element store moved down to the first phase where what
    it reads is final (after the accumulators it reads and the phase that stored any value it
    loads back), once a rewrite has removed or merged reductions; never up."""
    levels: dict[str, int] = {}
    stored = {st.buffer: st for st in kernel.elem_stores}
    phases: dict[str, int] = {}

    def first_phase(e: Expr) -> int:
        after = [levels[n.name] + 1 for n in walk(e) if isinstance(n, AccRef)]
        after += [phase_of(stored[n.buffer]) + 1 for n in walk(e) if isinstance(n, Load) and n.buffer in stored]
        return max(after, default=0)

    def phase_of(st: KStore) -> int:
        if st.buffer not in phases:
            phases[st.buffer] = min(st.phase, first_phase(st.value))
        return phases[st.buffer]

    reductions = []
    for r in sorted(kernel.reductions, key=lambda r: r.level):
        levels[r.name] = min(r.level, first_phase(r.body))
        reductions.append(replace(r, level=levels[r.name]))
    order = {r.name: k for k, r in enumerate(kernel.reductions)}
    reductions.sort(key=lambda r: order[r.name])
    stores = [replace(st, phase=phase_of(st)) for st in kernel.elem_stores]
    return replace(kernel, reductions=reductions, elem_stores=stores)
