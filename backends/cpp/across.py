"""C++ for reductions across the rows of a row kernel (``KReduction.across``).

The kernel's parallel loop over rows runs inside one parallel region. One thread allocates, for
every thread, a block array (the reduction's own C type, one element per point of the rdomain)
and a total array (float32 sums and products widened to double); the phase loops fold each
element into the block array, and every ``BLOCK_ROWS`` rows a thread folds its block into its
totals. After the region the totals of the threads are combined in thread order (the same result
for the same thread count) and the kernel's ``col_stores`` run. Blocks keep the inner loops on
float vectors that stay in L1 (double arrays there cost 1.7x at layernorm_train's cache size),
while no float sum runs over more than ``BLOCK_ROWS`` rows (one float sum per column over 512
rows erred by 1e-5 on sums of 0.1). An allocation that fails is an error (``ScratchAllocation``).
The allocation of per-thread partials and their combination in thread order are shared with
column reductions whose rows are split across threads (``split_rows.py``).
"""
from __future__ import annotations

from ...ir.index import product
from .accumulators import Accumulator
from .checks import ACROSS_SCRATCH

BLOCK_ROWS = 32  # rows a thread folds into its block arrays before adding them to its totals


def open_partials(w, arrays: list[tuple[str, str]], width: str) -> None:
    """Open a parallel region in which one thread allocates, for every thread, the state arrays
    ``arrays`` ((C type, name of all threads' array) pairs) of ``width`` elements each, a failed
    allocation being an error; the caller's code follows inside ``if`` every allocation succeeded,
    and ``close_partials`` ends both."""
    code = w.sites.index(ACROSS_SCRATCH) + 1
    w.out("  ", "int64_t nt_ = 1;", *(f"{t}* {every} = nullptr;" for t, every in arrays))
    w.out("  ", f"#pragma omp parallel{w.threads}", "{", "  #pragma omp single", "  {",
          "    nt_ = omp_get_num_threads();")
    for t, every in arrays:
        size = f"sizeof({t}) * nt_ * ({width})"
        w.out("    ", f"{every} = ({t}*)std::malloc({size});", f"if (!{every}) ln_fail(ln_err, {code}, {size}, 0);")
    w.out("  ", "  }", f"  if ({partials_ready(arrays)}) {{")


def partials_ready(arrays: list[tuple[str, str]]) -> str:
    """The C condition that every array of ``open_partials`` was allocated."""
    return " && ".join(every for _, every in arrays) or "true"


def close_partials(w) -> None:
    """End the ``if`` and the parallel region ``open_partials`` opened."""
    w.out("  ", "  }", "}")


def thread_total(w, indent: str, r, name: str, all_var: str, position: str, width: str,
                 wide: bool = False) -> Accumulator:
    """Scalar state ``name`` holding the partial states of reduction ``r`` in the all-threads
    arrays ``all_var`` (each thread's ``width`` long) at ``position``, combined in thread order
    (the same result for the same thread count), and finished."""
    total = Accumulator(r, name, wide=wide)
    every = Accumulator(r, all_var, f"[{position}]", wide=wide)
    w.out(indent, *(f"{t} {total.var}{suffix} = {every.ref(suffix)};" for t, suffix, _ in total.parts()),
          "for (int64_t t_ = 1; t_ < nt_; ++t_) {")
    w.out(indent + "  ", *total.combine(every, f"[t_ * ({width}) + {position}]"))
    w.out(indent, "}", *total.finish())
    return total


class AcrossRows:
    """Emits the parts of a row kernel that belong to its reductions across rows, into ``writer``
    (a ``codegen.KernelWriter``, whose ``across`` holds the block accumulators the phase loops update)."""

    def __init__(self, writer):
        self.w = writer
        self.width = writer.c(product(writer.k.rdomain))
        self.block = dict(writer.across)
        self.total = {name: Accumulator(a.r, f"col{n}_", a.index, wide=True)
                      for n, (name, a) in enumerate(self.block.items())}

    def arrays(self):
        """(C type, per-thread name, all-threads name, initial value) of every state array."""
        for accs in (self.block, self.total):
            for a in accs.values():
                for t, suffix, init in a.parts():
                    yield t, f"{a.var}{suffix}", f"{a.var}all{suffix}", init

    def allocated(self) -> list[tuple[str, str]]:
        return [(t, every) for t, _, every, _ in self.arrays()]

    def open(self) -> None:
        """The parallel region up to the row loop: allocation, and each thread's arrays set to the
        initial values."""
        w, width = self.w, self.width
        open_partials(w, self.allocated(), width)
        for t, mine, every, init in self.arrays():
            w.out("    ", f"{t}* __restrict__ {mine} = {every} + omp_get_thread_num() * ({width});",
                  f"for (int64_t c_ = 0; c_ < ({width}); ++c_) {mine}[c_] = {init};")
        w.out("    ", "int64_t rows_ = 0;")

    def fold(self, indent: str) -> None:
        """Add each block array into its totals and reset it."""
        w = self.w
        w.out(indent, "#pragma omp simd", f"for (int64_t c_ = 0; c_ < ({self.width}); ++c_) {{")
        for name, block in self.block.items():
            total = Accumulator(block.r, self.total[name].var, "[c_]", wide=True)
            w.out(indent + "  ", *total.combine(Accumulator(block.r, block.var, "[c_]")),
                  *(f"{block.var}{suffix}[c_] = {init};" for _, suffix, init in block.parts()))
        w.out(indent, "}")

    def row_done(self, indent: str) -> None:
        """At the end of a row's body: fold the blocks every ``BLOCK_ROWS`` rows."""
        self.w.out(indent, f"if (++rows_ == {BLOCK_ROWS}) {{")
        self.fold(indent + "  ")
        self.w.out(indent, "  rows_ = 0;", "}")

    def close(self) -> None:
        """Fold the last blocks, close the region, combine the threads' totals in thread order,
        run the stores of the results and free the arrays."""
        w, width = self.w, self.width
        self.fold("    ")
        close_partials(w)
        w.out("  ", f"if ({partials_ready(self.allocated())}) {{")
        rv = w.k.rvars()
        indent = w.open_loops(rv[:-1], w.k.rdomain[:-1], "    ", None)
        indent = w.open_loops(rv[-1:], w.k.rdomain[-1:], indent, "#pragma omp simd")
        results = {}
        for n, (name, total) in enumerate(self.total.items()):
            results[name] = thread_total(w, indent, total.r, f"tot{n}_", f"{total.var}all", w.flat_r(), width,
                                         wide=True)
        em = w.emitter(indent, results)
        for st in w.k.col_stores:
            em.store(st.buffer, st.index, st.value)
        w.close_loops(len(rv), indent)
        w.out("  ", "}", *(f"std::free({every});" for _, _, every, _ in self.arrays()))
