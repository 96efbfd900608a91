"""Values a later phase of a kernel would compute again, stored by the phase that computes them.

A softmax row kernel computes ``exp(x - max)`` for its sum in phase 1 and again for its output in
phase 2. When an output store of a later phase holds a transcendental subexpression that an
earlier phase's reduction computes, and the output has that value's dtype, the earlier phase
also stores the value into the output and the later phase reads it back: one transcendental per
element instead of two. The row is still in L1/L2 when the later phase reads it (a 2048-float row
is 8 KB), so the reload costs far less than the exp, log or erf it replaces.

A kernel that reduces over an outer dim (a softmax over the channels of NCHW, ``columns`` in
codegen.py) does the same: a task's chunk of columns, 21 rows of 128 floats, is 11 KB. Same
2-core host (2026-12-06, eager / loopnest over three runs): softmax over dim 1 of 16x21x128x128
1.43-1.47 -> 1.67-1.91, over dim 1 of 8x64x64x64 1.37-1.51 -> 1.94-2.11, over dim 0 of
4096 x 1024 2.13-2.23 -> 2.24-2.38.

Only exact rewrites are made: the value is stored at the same point it is read back (the store's
index is every loop variable once, so each point of the row has its own element), in its own
dtype (a bf16 output would round it), into a buffer the kernel never reads otherwise.
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.expr import Apply, Expr, Load, rewrite, walk
from ...ir.index import lone_atom
from ...ir.nodes import KStore
from ...ir.ops import Op
from ...scheduler.kernel import Kernel
from .ops import LIBM


def reuse_stored_values(kernel: Kernel) -> Kernel:
    """``kernel`` with each later-phase recomputation replaced by a reload (see the module docstring);
    ``kernel`` itself when nothing is worth it."""
    if not kernel.pdomain or not kernel.reductions:
        return kernel
    exact = _exact_exps(kernel)
    reused = _reuse(exact)
    return reused if reused is not exact else kernel


def _exact_exps(kernel: Kernel) -> Kernel:
    """``kernel`` with a softmax sum's ``exp_ftz(a)`` (``scheduler/online_softmax.flush_exp_terms``)
    back to ``exp(a)`` where a store computes ``exp(a)``: one exact exp per element, stored and
    summed, costs less than a flushed one for the sum and an exact one for the store."""
    stored = {n for s in kernel.elem_stores for n in walk(s.value)}

    def exact(n: Expr, _) -> Expr | None:
        if isinstance(n, Apply) and n.op is Op.EXP_FTZ and (e := Apply(Op.EXP, n.args, n.dtype)) in stored:
            return e
        return None

    bodies = [rewrite(r.body, exact) for r in kernel.reductions]
    if all(b is r.body for b, r in zip(bodies, kernel.reductions)):
        return kernel
    return replace(kernel, reductions=[replace(r, body=b) for r, b in zip(kernel.reductions, bodies)])


def _reuse(kernel: Kernel) -> Kernel:
    loop_vars = {lone_atom(v) for v in kernel.pvars() + kernel.rvars()}
    read = set(kernel.inputs)
    computed = _computed_by_phase(kernel)
    stores, changed = [], False
    for s in kernel.elem_stores:
        value = _reusable(s, kernel, computed, loop_vars, read)
        if value is None:
            stores.append(s)
            continue
        early, phase = value
        reload = Load(s.buffer, s.index, early.dtype)
        stores.append(KStore(s.buffer, s.index, early, phase))
        stores.append(replace(s, value=rewrite(s.value, lambda n, _: reload if n is early else None)))
        read.add(s.buffer)
        changed = True
    return replace(kernel, elem_stores=stores) if changed else kernel


def _computed_by_phase(kernel: Kernel) -> list[set[Expr]]:
    """The subexpressions holding a transcendental op that each phase's reductions compute."""
    phases: list[set[Expr]] = [set() for _ in range(kernel.num_phases)]
    for r in kernel.reductions:
        costly = phases[r.level]
        for n in walk(r.body):  # children first
            if (isinstance(n, Apply) and n.op in LIBM) or any(c in costly for c in n.children()):
                costly.add(n)
    return phases


def _reusable(s: KStore, kernel: Kernel, computed: list[set[Expr]], loop_vars: set, read: set[str]):
    """(the largest subexpression of ``s``'s value an earlier phase computes, that phase), or None."""
    if s.phase == 0 or s.buffer in read or sum(t.buffer == s.buffer for t in kernel.elem_stores) != 1:
        return None
    atoms = [lone_atom(i) for i in s.index]
    if set(atoms) != loop_vars or len(atoms) != len(loop_vars):
        return None  # some point of the row shares an element with another, or a loop var is missing
    dtype = kernel.buffers[s.buffer].dtype
    best: tuple[int, Expr, int] | None = None
    for node in walk(s.value):
        if node.dtype != dtype:
            continue
        phase = next((p for p in range(s.phase) if node in computed[p]), None)
        if phase is not None:
            size = sum(1 for _ in walk(node))
            if best is None or size > best[0]:
                best = (size, node, phase)
    return None if best is None else (best[1], best[2])
