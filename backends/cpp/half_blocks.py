"""float16 loads and stores, and bfloat16 stores, converted a block at a time by the conversion
instructions.

g++ 12 vectorizes no ``_Float16`` conversion (each stays a scalar ``vcvtsh2ss``), so a half is
read and written through the integer spelling of ``ops.ln_f16_to_f`` / ``ln_f_to_f16``: about
ten vector operations per conversion, where F16C and AVX-512 convert a vector in one
(``vcvtph2ps``, ``vcvtps2ph``). In an element loop the compiler cannot be told to use them, so
the loop runs in blocks instead: the block's halves read at unit stride are converted into float
arrays before its lane loop (``ln_halves_to_f``), the loop reads them from there, writes the
floats it stores at unit stride into arrays, and the block converts those after it
(``ln_f_to_halves``, rounding to nearest even as the integer spelling does; a NaN keeps its sign
and the top of its payload, as ``vcvtps2ph`` does, where the integer spelling writes 0x7e00).

Measured on the 2-core AVX-512 Xeon (2026-12-06, one thread, 9M elements, an element's work
``1 / (1 + x * x)``): 1.27 ns per element with the integer conversions (the half -> float one
kept scalar), 0.39 with both vectorized, 0.16 with the instructions.

bfloat16 stores take the same blocks: with AVX512-BF16 they round by ``vcvtneps2bf16``, one
instruction for the rounding g++ writes as eight (a vector holding a float32 denormal, which
that instruction would flush, rounds in the integer spelling), elsewhere in the integer
spelling over the block. Their loads stay per element: g++ vectorizes them (a widening shift),
and staging them measured slower.

Loads of a buffer the same loop stores stay per element (the block reads before its stores).

Loads whose position is not affine along the loop (a pixel shuffle's ``(w / 2) + (w % 2) * HW``,
a transposed view reshaped) take a block array too, in a loop of their own, where the loop
around them computes more than it moves: g++ gathers nothing on these cores, so one such load
leaves the whole element loop scalar, every select a branch that random data mispredicts half
the time (ELU plus leaky ReLU after a pixel shuffle, 262144 floats: 1.14 ms, eager 0.54).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir import dtypes as dt
from ...ir.expr import Apply, Load, walk
from ...ir.index import Var, stride_along
from ...ir.ops import Op
from ..names import BUFFER, mangle
from . import vector_blocks
from .ops import ctype
from .streaming import LINE

BLOCK = 32  # halves per block: a 512-bit vector of them, two of floats


@dataclass
class Staging:
    """The half loads and stores of one loop that go through block arrays (by array name)."""
    loads: dict[Load, str] = field(default_factory=dict)
    stores: dict[tuple, str] = field(default_factory=dict)  # (buffer, index) -> array
    gathers: dict[Load, str] = field(default_factory=dict)  # loads not affine along the loop

    def __bool__(self) -> bool:
        return bool(self.loads or self.stores or self.gathers)


def plan(kernel, exprs, stores, var: Var, names, floats: bool = False) -> Staging:
    """Which loads in ``exprs`` and which element ``stores`` of ``kernel`` move 16-bit floats at
    unit stride along ``var`` (affine), and which loads are not affine along it (``gathers``,
    where ``exprs`` compute), named from ``names`` (the kernel's counter); none where an index
    holds an indirect position (its checks keep the element loop whole). float16 is staged both
    ways; bfloat16 only where it is stored, since g++ vectorizes its load (a shift) but not the
    rounding into one instruction. ``floats``: float32 stores at unit stride too (a block that
    streams its stores writes each line from its array)."""
    staging = Staging()
    staged_dtypes = STAGED_STORES + ((dt.float32,) if floats else ())
    if vector_blocks.indirect(exprs):
        return staging
    stored = {s.buffer for s in stores}
    for s in stores:
        dtype = kernel.buffers[s.buffer].dtype
        rounded = isinstance(s.value, Apply) and s.value.op is Op.CAST and s.value.dtype == dtype
        value = s.value.args[0] if rounded else s.value  # as CppEmitter.store: the store rounds once
        if _unit_stride(kernel, s.buffer, s.index, var, staged_dtypes) and value.dtype in (dtype, dt.float32):
            staging.stores[(s.buffer, s.index)] = f"lnhs{next(names)}"
    computes = any(isinstance(node, Apply) and node.op is not Op.CAST for root in exprs for node in walk(root))
    for root in exprs:
        for node in walk(root):
            if not isinstance(node, Load) or node in staging.loads or node in staging.gathers or node.buffer in stored:
                continue
            buf = kernel.buffers[node.buffer]
            stride = stride_along(buf.layout.flat_index(node.index), var)
            if stride == 1 and buf.dtype in STAGED_LOADS:
                staging.loads[node] = f"lnh{next(names)}"
            elif computes and stride is None:
                staging.gathers[node] = f"lng{next(names)}"
    return staging


STAGED_LOADS = (dt.float16,)  # bfloat16 loads: one widening shift that g++ vectorizes already
STAGED_STORES = (dt.float16, dt.bfloat16)


def _unit_stride(kernel, buffer: str, index, var: Var, dtypes) -> bool:
    buf = kernel.buffers[buffer]
    return buf.dtype in dtypes and stride_along(buf.layout.flat_index(index), var) == 1


def convert_loads(w, indent: str, staging: Staging, var: str, start: str, count: int) -> None:
    """Declare the block's arrays (``w``: the KernelWriter) and fill those of the loads with the
    ``count`` elements from ``var`` = ``start``."""
    arrays = [*staging.loads.values(), *staging.stores.values()]
    if arrays:
        w.out(indent, f"alignas(64) float {', '.join(f'{a}[{count}]' for a in arrays)};")
    if staging.gathers:
        for load, a in staging.gathers.items():
            w.out(indent, f"{ctype(load.dtype)} {a}[{count}];")
        w.out(indent, f"for (int64_t g_ = 0; g_ < {count}; ++g_) {{", f"  const int64_t {var} = {start} + g_;")
        em = w.emitter(indent + "  ", {})
        for load, a in staging.gathers.items():
            w.out(indent + "  ", f"{a}[g_] = {em.emit(load)};")
        w.out(indent, "}")
    if staging.loads:
        em = w.emitter(indent + "  ", {})
        w.out(indent, "{", f"  const int64_t {var} = {start};")
        for load, a in staging.loads.items():
            at = f"&{_name(load.buffer)}[{em.offset(load.buffer, load.index)}]"
            w.out(indent + "  ", f"ln_halves_to_f<{_width(w)}, {count}>({at}, {a});")
        w.out(indent, "}")


def convert_stores(w, indent: str, staging: Staging, var: str, start: str, count: int,
                   stream: bool = False) -> None:
    """Round the block's stored arrays into their buffers, after its lane loop; ``stream``: a
    block of whole cache lines, each written with a non-temporal store where it is aligned
    (float32 arrays are staged only then)."""
    if not staging.stores:
        return
    em = w.emitter(indent + "  ", {})
    w.out(indent, "{", f"  const int64_t {var} = {start};")
    for (buffer, index), a in staging.stores.items():
        at, dtype = f"&{_name(buffer)}[{em.offset(buffer, index)}]", w.k.buffers[buffer].dtype
        per_line = LINE // dtype.itemsize
        if dtype == dt.float32:
            w.out(indent + "  ", *(f"ln_stream_line({_plus(at, k)}, &{a}[{k}]);" if stream
                                   else f"std::memcpy({_plus(at, k)}, &{a}[{k}], {LINE});"
                                   for k in range(0, count, per_line)))
            continue
        convert = f"{_ROUND[dtype]}<{_width(w)}, {count}>"
        if stream:
            w.out(indent + "  ", f"alignas(64) uint16_t {a}h[{count}];", f"{convert}({a}, {a}h);",
                  *(f"ln_stream_line({_plus(at, k)}, &{a}h[{k}]);" for k in range(0, count, per_line)))
        else:
            w.out(indent + "  ", f"{convert}({a}, {at});")
    w.out(indent, "}")


def staged_emitter(em, staging: Staging, lane: str):
    """``em`` reading the staged loads from their arrays and writing the staged stores to theirs,
    element ``lane`` of the block."""
    em.cache.update({load: f"{a}[{lane}]" for load, a in (*staging.loads.items(), *staging.gathers.items())})
    em.staged_stores = {key: f"{a}[{lane}]" for key, a in staging.stores.items()}
    return em


_ROUND = {dt.float16: "ln_f_to_halves", dt.bfloat16: "ln_f_to_bf16s"}  # ops.py's prelude


def _plus(pointer: str, k: int) -> str:
    return f"{pointer} + {k}" if k else pointer


def _width(w) -> int:
    return w.cfg.vector_width // 32


def _name(buffer: str) -> str:
    return mangle(BUFFER, buffer)
