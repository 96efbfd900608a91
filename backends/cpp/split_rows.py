"""C++ for column reductions (``x.sum(0)``) with the rows split across threads.

The default way to run a kernel that reduces over an outer dimension gives each thread chunks of
adjacent columns (``codegen.column_chunk``): every row is then read in runs of one chunk, which
lose the prefetchers at each run's end, and a reduction with fewer chunks than threads leaves
threads idle. When the partial states of every column fit in L1 beside the streaming rows, each
thread can instead fold a block of whole rows into partials of every column: its reads are then
one contiguous range, like a full sum's. The partials of the threads are combined afterwards, in
thread order (the same result for the same thread count), and the kernel's stores run per column.

One thread allocates the partials of all threads per call; a failed allocation is an error
(``checks.ScratchAllocation``), as for reductions across rows.
"""
from __future__ import annotations

from ...ir.index import as_var, product
from ...scheduler.kernel import Kernel
from .accumulators import Accumulator
from .across import close_partials, open_partials, thread_total
from .blocked_sums import BlockedSums, block_loop, column_step, open_blocks
from .checks import rows_may_split
from . import column_rows
from .params import CppConfig

PARTIALS_BYTES = 16 << 10  # one thread's partial states of every column, in L1 beside the rows
SHORT_CHUNK = 512  # columns: chunks narrower than this read rows in runs too short to stream
SMALL_PARTIALS_BYTES = 8 << 10  # partials this small leave L1 to the rows: split rows whatever the chunks


def column_state_bytes(kernel: Kernel) -> int:
    """Bytes of the partial states a column reduction keeps per column."""
    sizes = {"double": 8, "int64_t": 8}
    return sum(sizes.get(t, 4) for n, r in enumerate(kernel.reductions)
               for t, _, _ in Accumulator(r, f"acc{n}", "[j]").parts())


def can_split_rows(kernel: Kernel) -> bool:
    """Whether the rows of this column reduction can be split across threads: one kept (column)
    dimension of known size, one phase, and every column's partial states within PARTIALS_BYTES."""
    if not rows_may_split(kernel):
        return False
    columns = kernel.pdomain[0].as_int()
    return columns is not None and 0 < columns * column_state_bytes(kernel) <= PARTIALS_BYTES


def splits_rows(kernel: Kernel, config: CppConfig, chunk: int, threads: int) -> bool:
    """Whether a column reduction runs with its rows split across threads: as the config says, or
    for "auto" (and no chunk set by hand) when it can and chunks of ``chunk`` columns would keep
    fewer than ``threads`` threads busy or read each row in runs shorter than SHORT_CHUNK columns.

    Measured on 2 cores (bench/RESULTS.md, 2026-12-02 11:55): rows split beat chunks of 128
    columns by 1.18x and single chunks of 16-64 columns (one busy thread) by 1.09-1.32x, tied
    chunks of 512, and lost to chunks of 1024-2048 by 1.08-1.15x (16 KB of partials per thread
    then share L1 with the streaming rows). On a 2-core AMD EPYC (Zen 4, 2026-12-04, kernel time,
    interleaved), rows split beat chunks of half the columns by 1.48-1.93x where the partials
    take at most SMALL_PARTIALS_BYTES (x.sum(0) over 128-2048 float32 columns, 67-537 MB) and tied
    at 16 KB (4096 columns: 1.06x), so they are split whenever their partials are that small."""
    if config.column_split == "chunks" or not can_split_rows(kernel):
        return False
    if config.column_split == "rows":
        return True
    if config.chunk or threads < 2:
        return False
    columns = kernel.pdomain[0].as_int()
    return (-(-columns // chunk) < threads or chunk < min(columns, SHORT_CHUNK)
            or columns * column_state_bytes(kernel) <= SMALL_PARTIALS_BYTES)


def write_split_rows(w) -> None:
    """Emit the kernel body into ``w`` (a ``codegen.KernelWriter``)."""
    k = w.k
    columns = w.c(k.pdomain[0])
    column = as_var(k.pvars()[0]).name
    accs = w.accumulators("[j]")
    mine, stores = w.phase_parts(0, accs)
    arrays = [(t, f"{a.var}{suffix}", f"{a.var}all{suffix}", init) for a in mine for t, suffix, init in a.parts()]
    open_partials(w, [(t, every) for t, _, every, _ in arrays], columns)
    indent = "    "
    rv = k.rvars()
    first, n0 = as_var(rv[0]).name, w.c(k.rdomain[0])
    w.out(indent, "const int64_t tid_ = omp_get_thread_num();",
          f"const int64_t lo_ = ({n0}) * tid_ / nt_, hi_ = ({n0}) * (tid_ + 1) / nt_;")
    for t, name, every, init in arrays:
        w.out(indent, f"{t}* __restrict__ {name} = {every} + tid_ * ({columns});", "#pragma omp simd",
              f"for (int64_t j = 0; j < ({columns}); ++j) {name}[j] = {init};")
    sums = BlockedSums(mine, f"({columns})")
    step = column_step(w.c, k.rdomain) if sums else None
    rows, lo, hi = indent, "lo_", "hi_"
    if step is not None:
        w.out(indent, *sums.declare())
        rows, lo, hi = open_blocks(w, indent, lo, hi, step)
    head = ("#pragma omp simd", f"for (int64_t j = 0; j < ({columns}); ++j) {{", f"  const int64_t {column} = j;")
    count = f"{w.flat_r()} - lo_ * ({w.c(product(k.rdomain[1:]))}) + 1"  # elements this thread's states hold

    def body(at: str) -> None:
        w.body(at, accs, mine, stores, w.flat_r(), count=count)

    if len(rv) == 1:
        wide = k.pdomain[0].as_int() * column_state_bytes(k) > SMALL_PARTIALS_BYTES
        column_rows.write_rows(w, rows, first, lo, hi, head, body, column_rows.ROWS_PER_PASS if wide else 1)
    else:
        w.out(rows, block_loop(first, lo, hi))
        inner = w.open_loops(rv[1:], k.rdomain[1:], rows + "  ")
        w.out(inner, *head)
        body(inner + "  ")
        w.out(inner, "}")
        w.close_loops(len(rv) - 1, inner)
        w.out(rows, "}")
    if step is not None:
        w.out(rows, *sums.fold())
        w.out(indent, "}", *sums.finish())
    w.out(indent, "#pragma omp barrier", "#pragma omp for schedule(static)",
          f"for (int64_t j = 0; j < ({columns}); ++j) {{", f"  const int64_t {column} = j;")
    results = {a.r.name: thread_total(w, indent + "  ", a.r, f"tot{n}_", f"{a.var}all", "j", columns)
               for n, a in enumerate(mine)}
    w.row_stores(indent + "  ", results)
    w.out(indent, "}")
    close_partials(w)
    w.out("  ", *(f"std::free({every});" for _, _, every, _ in arrays))
