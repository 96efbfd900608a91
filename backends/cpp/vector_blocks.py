"""C++ for loops whose elements call vecmath.h: the math inline, a block of lanes at a time.

In an ``omp simd`` loop g++ calls a math function's vector variant out of line
(``_ZGVeN16v_ln_expf``): every call spills the live vector registers (all are caller-saved)
and reloads the function's constants. Here the innermost loop runs in blocks of 16 elements:
one ``omp simd`` lane loop computes each math call's argument into an array of 16, the
function's template runs on the array inline (``lnv::blocks``: one zmm, or two ymm where the
kernel's ``vector_width`` is 256 or the target has AVX2 only), and a second lane loop does the
rest of the element's work with the results. The elements after the last block run through the
plain loop, whose scalar and vector calls compute the same bits as the template (vecmath.h
instantiates one algorithm per build).

Measured on the 2-core AVX-512 Xeon (2026-12-05, L2-resident loop, one thread): exp 0.294 ->
0.216 ns per element, erf GELU 0.462 -> 0.413, bit-identical results.

Row reductions do the same on each step of their lane arrays (``row_lanes.write_lanes``): the
block is the step, 16 to 128 elements.

A lane loop holds whole vectors of its narrowest elements (``block_size``): g++ vectorizes a
loop with one vector size, so 16 lanes of bf16 loads come out as ymm vectors and the floats
computed from them as two ymm stores, which a zmm load of the block then waits on (store-to-load
forwarding fails), and 16 lanes of bytes stay scalar, a compare and a branch per element. Same
host, 9M elements, two threads, ms: bf16 `exp` 8.8-9.1 -> 1.5-1.6 and erf GELU 9.5-10.3 -> 2.8
with blocks of 32 (float32 GELU 1.86 either way).

Calls that nest (exp of an erf, an erf of a value rounded to float16) run in rounds: a lane loop
and the math for the calls whose arguments hold no other call, then the next. Only kernels whose
indices hold no indirect positions (their checks stay in the plain loop) are written so.

A libm function whose vector variant libmvec has (``expm1f``, ``log1pf``, ``sinf``) is such a
call too: it runs as an ``omp simd`` loop over the block's array, one out-of-line vector call
per vector. The loop over the elements may not vectorize (a pixel shuffle's ``(w / 2) + (w %
2) * HW`` reads: g++ gathers nothing on these cores), and then called per element the function
costs about 5 ns (an ELU after a pixel shuffle, 262144 floats: 1.43 ms).

A float rounded to float16 between two ops of a float16 graph is such a call too
(``block_impl``): ``vcvtps2ph`` and back, two instructions a vector, where the integer spelling
(``ops.ln_f_to_f16``) takes about twenty. float16 GELU of a layernorm, 3000 x 3008, two threads
(2026-12-06): 4.67 -> 2.67 ms (eager 2.98).
"""
from __future__ import annotations

from ...ir import dtypes as dt
from ...ir.expr import Apply, Expr, IndexValue, Load, walk
from ...ir.index import Indirect
from ...ir.ops import Op
from .ops import libmvec_name, vecmath_impl

BLOCK = 16  # elements per block of floats: one AVX-512 vector
MAX_CALLS = 4  # math calls per element written in blocks (an array of 16 floats each)


def block_size(kernel) -> int:
    """Elements per block (or lane step) of ``kernel``'s lane loops: ``BLOCK`` floats, or as many
    as make one vector of the narrowest elements it loads or stores (32 for 16-bit, 64 for bytes)."""
    names = dict.fromkeys(kernel.inputs + kernel.outputs)
    narrowest = min((kernel.buffers[n].dtype.itemsize for n in names), default=4)
    return BLOCK * 4 // min(max(narrowest, 1), 4)


def math_calls(exprs, pre=None) -> list[Apply]:
    """The vecmath calls of ``exprs`` (a kernel's element values) and their roundings to float16
    (``block_impl``), in first-use order, if they can be computed in blocks; [] otherwise. Calls
    that ``pre`` (the emitter of values computed once before the loop) holds are not per element."""
    exprs = list(exprs)
    if indirect(exprs):
        return []
    hoisted = pre.cache if pre is not None else {}
    calls: dict[Apply, None] = {}  # ordered, without repeats
    for root in exprs:
        for node in walk(root):
            impl = block_impl(node)
            stored_rounding = node is root and impl == "round_half_"  # a store rounds itself
            if impl is not None and node not in hoisted and not stored_rounding:
                calls[node] = None
    if len(calls) > MAX_CALLS:
        return []
    return list(calls)


def block_impl(node: Expr) -> str | None:
    """The function computing ``node`` a vector at a time: a vecmath.h template (``exp_``),
    ``round_half_`` for a float32 rounded to float16 (``vcvtps2ph`` and back where the target
    has F16C: two instructions a vector, where the integer spelling takes about twenty), or a
    libm function with a libmvec variant, named with its ``f`` (``expm1f``)."""
    if not isinstance(node, Apply):
        return None
    if node.op is Op.CAST:
        return "round_half_" if node.dtype == dt.float16 and node.args[0].dtype == dt.float32 else None
    return vecmath_impl(node.op, node.dtype) or libmvec_name(node.op, node.dtype)


def indirect(exprs) -> bool:
    """Whether a load or index value in ``exprs`` has an indirect position (whose checks keep
    the element loop whole)."""
    return any(isinstance(node, (Load, IndexValue)) and any(
        isinstance(a, Indirect) for i in (node.index if isinstance(node, Load) else (node.index,)) for a in i.atoms())
        for root in exprs for node in walk(root))


def write_blocks(w, indent: str, calls: list[Apply], var: str, start: str, pre, accs=None,
                 count: int = BLOCK, lane: str = "j_", used: str | None = None):
    """Compute ``calls`` for the ``count`` elements of the innermost loop (variable ``var``) from
    ``start``, at ``indent`` (``w``: the ``KernelWriter``; ``pre``: its emitter of loop-invariant
    values, or None; ``accs``: the accumulators the arguments may read): a lane loop writing
    their arguments, then the math inline. Returns an emitter holding the results
    (``lnv_a<k>[<lane>]``) for the lane loop over the same elements, with index ``lane``, that
    the caller opens next. ``used``: only that many elements exist (the rest of a row); the
    arrays' other entries are zero, and their math is computed and ignored."""
    if not calls:
        return pre
    arrays = {call: f"lnv_a{n}" for n, call in enumerate(calls)}
    width = w.cfg.vector_width // 32  # the kernel's vector width decides, as in its loops
    w.out(indent, f"float {', '.join(f'{a}[{count}]' for a in arrays.values())};")
    done: dict[Apply, str] = {}
    for level in _levels(calls):  # calls whose arguments hold other calls wait for those
        open_lanes(w, indent, var, start, count if used is None else used, lane)
        args = emitter_from(w, indent + "  ", pre, accs)
        args.cache.update(done)
        for call in level:
            w.out(indent + "  ", f"{arrays[call]}[{lane}] = {args.emit(call.args[0])};")
        w.out(indent, "}")
        if used is not None:
            w.out(indent, f"for (int64_t {lane} = {used}; {lane} < {count}; ++{lane}) {{",
                  *(f"  {arrays[call]}[{lane}] = 0;" for call in level), "}")
        for call in level:
            impl, array = block_impl(call), arrays[call]
            if impl.endswith("_"):
                w.out(indent, f"lnv::blocks<{width}, {count}>({array}, [](auto v) {{ return lnv::{impl}(v); }});")
            else:  # libmvec's variant, out of line
                w.out(indent, "#pragma omp simd", f"for (int64_t m_ = 0; m_ < {count}; ++m_) {array}[m_] = {impl}({array}[m_]);")
        done.update({call: f"{arrays[call]}[{lane}]" for call in level})
    results = emitter_from(w, indent + "  ", pre, accs)
    results.cache.update(done)
    return results


def _levels(calls: list[Apply]) -> list[list[Apply]]:
    """``calls`` in rounds: each call after every call its argument holds."""
    inside = {call: set(walk(call.args[0])) for call in calls}
    levels, left = [], list(calls)
    while left:
        ready = [c for c in left if not any(o in inside[c] for o in left if o != c)]
        levels.append(ready)
        left = [c for c in left if c not in ready]
    return levels


def open_lanes(w, indent: str, var: str, start: str, count: int | str = BLOCK, lane: str = "j_") -> None:
    """Open a lane loop over the ``count`` elements from ``start`` (``var`` is each one's index,
    ``lane`` its place in the block)."""
    w.out(indent, "#pragma omp simd", f"for (int64_t {lane} = 0; {lane} < {count}; ++{lane}) {{")
    w.out(indent + "  ", f"const int64_t {var} = {start} + {lane};")


def emitter_from(w, indent: str, pre, accs=None):
    """An emitter at ``indent`` that reuses what ``pre`` (if any) computed."""
    em = w.emitter(indent, accs or {})
    return em.inherit(pre) if pre is not None else em
