"""Streaming stores for the last pass of a row kernel, or a pointwise kernel, whose output does
not fit in cache.

A plain store reads the line it writes first (write-allocate), so a kernel that writes as much
as it reads moves 3 bytes for every 2. The streamed pass computes one 64-byte line of lanes (16
float32, or 32 when some output is bfloat16/float16) into a staging block per output and writes
each with non-temporal stores (``ln_stream_line``: aligned lines only, plain stores otherwise),
prefetches the same block of the next row of each input read along rows (while a row is in its
later passes, read from L1, no read of the next row would be in flight), and fences its stores
at the end of the row. On 8192 x 2048 float32 layernorm, 2 cores: 1.20-1.29x (bench/RESULTS.md,
2026-12-02 07:52); in cache it loses, hence the size rule in ``wants_streaming``, and so do
short rows, whose fence per row costs more than the reads it saves (``STREAM_ROW_BYTES``).

A multi-pass row kernel that does not stream, over rows of at most ``PREFETCH_ROW_BYTES``, runs
its last pass in the same blocks with plain stores and the same prefetch of the next row
(``streamed_pass(..., stream=False)``): that row's first pass then reads L1 instead of waiting
on L2 or memory. Side by side on the 2-core Xeon (2026-12-04, kernels alone, time with / without
at CPU size and cache size): layernorm 0.83 / 0.99, bfloat16 RMSNorm 0.89 / 0.92, add + layernorm
(both inputs prefetched) 0.87 / 1.01, bfloat16 RMSNorm backward 0.91 / 0.95; over rows of 1 MB
(log_softmax on 8 x 262144) it cost 16%, hence the size.

The pass is rewritten from its emitted lines: only float32, bfloat16 and float16 stores at
``ROW + r0`` with a row of a static multiple of the block qualify, in a pass that does not read
the buffers it writes (softmax rescales its stored exponentials in place: those lines are in
cache, and streaming over them lost 2.3x); anything else keeps the plain loop. On 8192 x 2048
bfloat16 RMSNorm, 2 cores: 4.2 -> 3.3 ms (2026-12-03).

A pointwise kernel streams the same way (``pointwise_streams``): its innermost loop in lines
(``streamed_pass`` over that loop's variable, or its blocks of math and halves staging every
store, ``half_blocks.convert_stores``), in one parallel region whose threads fence once when
their share of the loop is done, so that rows of any length stream.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from ...ir import dtypes as dt
from ...ir.index import product
from ...scheduler.kernel import Kernel
from ..names import BUFFER, mangle
from .ops import STORAGE

LINE = 64  # bytes of one cache line, the unit of a non-temporal store
# a streamed row ends with a fence: 268 MB of float32 layernorm on the 2-core Xeon (2026-12-05),
# streamed / plain time: rows of 1 KB 1.54, 2 KB 1.03, 4 KB 0.75, 8 KB 0.70
STREAM_ROW_BYTES = 4 << 10
PREFETCH_ROW_BYTES = 16 << 10  # rows up to this size prefetch the next one (a third of a 48 KB L1)
_LOAD = re.compile(r"= (?:\w+\()?(?P<buf>b_\w+)\[(?P<row>[^\[\]]*\bp0\b[^\[\]]*?) \+ r0\]\)?;$")


@functools.cache
def _store_pattern(var: str) -> re.Pattern:
    """``b_x[ROW + var] = value;`` or ``b_x[var] = value;``: a store along the loop over ``var``."""
    return re.compile(rf"^(?P<indent>\s*)(?P<buf>b_\w+)\[(?:(?P<row>[^\[\]]*?) \+ )?{var}\] = (?P<value>[^;]+);$")


@functools.cache
def last_level_cache_bytes() -> int:
    """The size of cpu0's last-level cache from sysfs (32 MB when it cannot be read)."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
            best = max(best, int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1], 0))
        except (OSError, ValueError):
            continue
    return best or 32 << 20


def wants_streaming(kernel: Kernel, mode: str) -> bool:
    """Whether the row kernel's last pass streams: ``mode`` "stream", or "auto" when what the
    kernel reads and writes takes more than the last-level cache, so that its stored lines leave
    the cache before anything reads them, and each row stores at least ``STREAM_ROW_BYTES``
    (static sizes only)."""
    if mode != "auto":
        return mode == "stream"
    moved, n = kernel.bytes_moved().as_int(), product(kernel.rdomain).as_int()
    if moved is None or n is None:
        return False
    row = n * sum(kernel.buffers[b].dtype.itemsize for b in {s.buffer for s in kernel.elem_stores})
    return moved > last_level_cache_bytes() and row >= STREAM_ROW_BYTES


def pointwise_streams(kernel: Kernel, mode: str) -> bool:
    """Whether the pointwise ``kernel`` stores in streamed lines: ``mode`` "stream", or "auto"
    when what it reads and writes takes more than the last-level cache (static sizes only).
    Unlike a row's last pass it fences once per thread, so short rows stream too. Over 8192 x
    2048 float32 on a 2-core Zen 4 (2026-12-06, bench/RESULTS.md), eager / loopnest went from
    0.88 to 1.23 for ``x + y``, 0.79 to 1.36 for ``x + b`` and 0.94 to 1.54 for ``relu``."""
    if mode != "auto":
        return mode == "stream"
    moved = kernel.bytes_moved().as_int()
    return moved is not None and moved > last_level_cache_bytes()


def line_lanes(kernel: Kernel) -> int:
    """Elements of one streamed line: 16 for float32 outputs, 32 when one is 16-bit."""
    sizes = [kernel.buffers[b].dtype.itemsize for b in kernel.outputs if kernel.buffers[b].dtype in _STREAMED]
    return LINE // min(sizes, default=4)


def wants_next_row_prefetch(kernel: Kernel) -> bool:
    """Whether a row kernel that does not stream prefetches its next row in its last pass: it
    reads each row in several passes, and one row of all its inputs of two or more dims (static
    length) with its float32 sums across rows (a norm backward's weight gradients, which stay in
    L1 too) takes at most ``PREFETCH_ROW_BYTES``, so the next row is still in L1 when its first
    pass starts (a layernorm backward, 16 KB of rows and 16 KB of sums: 1.18x the time with it)."""
    n = kernel.rdomain[0].as_int() if len(kernel.rdomain) == 1 else None
    if kernel.num_phases < 2 or len(kernel.pdomain) != 1 or n is None:
        return False
    rows = sum(n * kernel.buffers[b].dtype.itemsize for b in kernel.inputs if len(kernel.buffers[b].sizes) > 1)
    return 0 < rows and rows + 4 * n * len(kernel.across) <= PREFETCH_ROW_BYTES


def stream_types(kernel: Kernel) -> dict[str, tuple[str, int]]:
    """The buffers of ``kernel`` a streamed pass may store (its float32, bfloat16 and float16
    outputs) or prefetch (its inputs of those dtypes), by their C name: (storage C type, bytes
    per element)."""
    dtypes = {b: kernel.buffers[b].dtype for b in (*kernel.inputs, *kernel.outputs)}
    return {mangle(BUFFER, b): (STORAGE[d], d.itemsize) for b, d in dtypes.items() if d in _STREAMED}


def streamed_pass(lines: list[str], indent: str, types: dict[str, tuple[str, int]],
                  stream: bool = True, row_loads: list[str] = (), var: str = "r0",
                  fence: bool = True, flat: bool = False, start: str | None = None) -> list[str] | None:
    """The lines of the pass ``lines`` (its ``omp simd`` pragma, its loop over ``var`` from 0 to a
    static multiple of the block, its body, its closing brace) rewritten to stream its stores, or
    None when the pass does not qualify. ``types``: the outputs that may stream
    (``stream_types``). ``stream`` False keeps the stores as they are and only prefetches the
    next row's input, one line per block: the inputs this pass loads, and those that earlier
    passes of the row load (``row_loads``: their lines). ``fence`` False leaves the fence to the
    caller (a pointwise kernel fences once per thread, ``pointwise_streams``); ``flat`` lets a
    store sit at ``[var]`` itself (a one-dim pointwise kernel's loop). ``start``: the lines begin
    there (a run-time position, the row's first aligned line) and end at the last whole one, the
    elements around them left to the caller's loops."""
    if len(lines) < 3 or not lines[0].strip().startswith("#pragma omp simd") or lines[-1] != indent + "}":
        return None
    header = re.fullmatch(rf"\s*for \(int64_t {var} = 0; {var} < (\d+); \+\+{var}\) \{{", lines[1])
    if header is None:
        return None
    body, reads, stored, staged, prefetch = [], [], [], [], {}
    for line in lines[2:-1]:
        store = _store_pattern(var).match(line)
        if store is not None:
            stored.append(store["buf"])
            reads.append(store["value"])
            if not stream:
                body.append("  " + line)
                continue
            if store["buf"] not in types or (store["row"] is None and not flat) \
                    or re.search(rf"\b{var}\b", store["row"] or ""):
                return None
            staged.append((store["buf"], store["row"]))
            body.append(f"  {store['indent']}st{len(staged) - 1}_[l_] = {store['value']};")
            continue
        if re.search(r"\bb_\w+\[[^\]]*\] =", line):  # any other store: not ours to rewrite
            return None
        _add_row_prefetch(prefetch, line)
        body.append("  " + line)
        reads.append(line)
    if stream and any(re.search(rf"\b{buf}\[", line) for buf in stored for line in reads):
        return None  # the pass reads what it writes (softmax's rescaling): keep it cached
    for buf in stored:  # the next row of an output: its first pass writes it
        prefetch.pop(buf, None)
    for line in row_loads if not stream else ():
        _add_row_prefetch(prefetch, line)
    if not (staged if stream else prefetch):
        return None  # nothing to stream, or no row input to prefetch
    lanes = LINE // min(types.get(buf, ("", 4))[1] for buf in ([b for b, _ in staged] if stream else prefetch))
    if start is None and int(header.group(1)) % lanes:
        return None
    inner = indent + "  "
    out = [f"{indent}for (int64_t rb_ = 0; rb_ < {header.group(1)}; rb_ += {lanes}) {{" if start is None else
           f"{indent}for (int64_t rb_ = {start}; rb_ + {lanes} <= {header.group(1)}; rb_ += {lanes}) {{"]
    out += [f"{inner}alignas(64) {types[buf][0]} st{n}_[{lanes}];" for n, (buf, _) in enumerate(staged)]
    out += [inner + line for line in prefetch.values()]
    # counted from 0: with -fwrapv, ``r0 < rb_ + lanes`` would not tell g++ the trip count
    out += [inner + "#pragma omp simd", f"{inner}for (int64_t l_ = 0; l_ < {lanes}; ++l_) {{",
            f"{inner}  const int64_t {var} = rb_ + l_;"]
    out += body
    out.append(inner + "}")
    for n, (buf, row) in enumerate(staged):
        per_line, start = LINE // types[buf][1], f"{row} + rb_" if row else "rb_"
        out += [f"{inner}ln_stream_line(&{buf}[{start}{f' + {k}' if k else ''}], &st{n}_[{k}]);"
                for k in range(0, lanes, per_line)]
    out.append(indent + "}")
    if staged and fence:
        out.append(indent + "ln_stream_fence();")
    return out


def _add_row_prefetch(prefetch: dict[str, str], line: str) -> None:
    """Add to ``prefetch`` (buffer -> its prefetch statement) the next row of the buffer ``line``
    loads along a row (``p0*N + r0``), if any and not there yet."""
    load = _LOAD.search(line)
    if load is not None and load["buf"] not in prefetch and re.fullmatch(r"p0\*\d+", load["row"]):
        prefetch[load["buf"]] = f"__builtin_prefetch(&{load['buf']}[{load['row'].replace('p0', '(p0 + 1)')} + rb_]);"


_STREAMED = (dt.float32, dt.bfloat16, dt.float16)
