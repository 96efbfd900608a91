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
"""
from __future__ import annotations

from ...ir.index import product
from .accumulators import Accumulator
from .checks import ACROSS_SCRATCH

BLOCK_ROWS = 32  # rows a thread folds into its block arrays before adding them to its totals


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

    def ready(self) -> str:
        return " && ".join(every for _, _, every, _ in self.arrays())

    def open(self) -> None:
        """The parallel region up to the row loop: allocation, and each thread's arrays set to the
        initial values."""
        w, width = self.w, self.width
        code = w.sites.index(ACROSS_SCRATCH) + 1
        w.out("  ", "int64_t nt_ = 1;", *(f"{t}* {every} = nullptr;" for t, _, every, _ in self.arrays()))
        w.out("  ", f"#pragma omp parallel{w.threads}", "{", "  #pragma omp single", "  {",
              "    nt_ = omp_get_num_threads();")
        for t, _, every, _ in self.arrays():
            size = f"sizeof({t}) * nt_ * ({width})"
            w.out("    ", f"{every} = ({t}*)std::malloc({size});", f"if (!{every}) ln_fail(ln_err, {code}, {size}, 0);")
        w.out("  ", "  }", f"  if ({self.ready()}) {{")
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
        w.out("  ", "  }", "}", f"if ({self.ready()}) {{")
        rv = w.k.rvars()
        indent = w.open_loops(rv[:-1], w.k.rdomain[:-1], "    ", None)
        indent = w.open_loops(rv[-1:], w.k.rdomain[-1:], indent, "#pragma omp simd")
        results = {}
        for n, (name, total) in enumerate(self.total.items()):
            mine = Accumulator(total.r, f"tot{n}_", wide=True)
            first = Accumulator(total.r, f"{total.var}all", total.index, wide=True)
            w.out(indent, *(f"{t} {mine.var}{suffix} = {first.ref(suffix)};" for t, suffix, _ in total.parts()),
                  "for (int64_t t_ = 1; t_ < nt_; ++t_) {")
            w.out(indent + "  ", *mine.combine(first, f"[t_ * ({width}) + {w.flat_r()}]"))
            w.out(indent, "}", *mine.finish())
            results[name] = mine
        em = w.emitter(indent, results)
        for st in w.k.col_stores:
            em.store(st.buffer, st.index, st.value)
        w.close_loops(len(rv), indent)
        w.out("  ", "}", *(f"std::free({every});" for _, _, every, _ in self.arrays()))
