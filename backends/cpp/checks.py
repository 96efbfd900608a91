"""Run-time errors of C++ kernels: out-of-range indirect indices and integer division by zero.

A kernel cannot raise. It records an error in an error slot its launcher passes in (``int64_t
ln_err[4]``: site code, offending value, bound, and a lock word so that threads of an OpenMP loop
never race), then carries on with a safe value. After the call the launcher raises the Python
exception eager PyTorch raises for the same input, naming the op, the value and the bound. Site
codes number a kernel's distinct error sites (``error_sites``) in the order eager runs their ops
(an op's operands before it, left to right), which the code generator and the launcher both
derive from the kernel alone. The site with the lowest code wins, whichever thread or element
meets its error first: eager raises at the first failing op, and a fused kernel may meet a later
op's error first (a division by the value an out-of-range gather would have read).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...ir.expr import Apply, Expr, IndexValue, Load
from ...ir.index import IndexCheck, Indirect
from ...ir.ops import Op
from ...scheduler.kernel import Kernel

INT_DIVISIONS = {Op.FLOORDIV: "floor_divide (//)", Op.MOD: "remainder (%)", Op.FMOD: "fmod"}

ErrorSlot = ctypes.c_int64 * 4


class KernelIndexError(IndexError, RuntimeError):
    """An index read from a tensor is out of range (eager raises IndexError or RuntimeError)."""


class KernelZeroDivisionError(RuntimeError):
    """Integer division or remainder by zero (eager: ``RuntimeError: ZeroDivisionError``)."""


@dataclass(frozen=True)
class ZeroDivision:
    """An integer ``//``, ``%`` or fmod whose divisor may be zero."""

    op: Op

    def message(self, value: int, bound: int) -> str:
        return (f"ZeroDivisionError: integer {INT_DIVISIONS[self.op]} by zero; eager PyTorch raises "
                f"too on the CPU (check the divisor, or divide in floating point)")


@dataclass(frozen=True)
class ScratchAllocation:
    """The per-thread partial results of a kernel's reductions across rows (or of a column
    reduction whose rows are split across threads), allocated per call."""

    def message(self, value: int, bound: int) -> str:
        return (f"could not allocate {value} bytes for the per-thread partial results of a reduction "
                f"over rows split across threads")


ACROSS_SCRATCH = ScratchAllocation()
ErrorSite = IndexCheck | ZeroDivision | ScratchAllocation


@dataclass(frozen=True)
class Deferred:
    """An index check inside a vectorized loop: the loop tracks the least (``lo``) and greatest
    (``hi``) raw index as simd reductions; one test after the loop reports the first of them that
    is out of range (a real index of the input), with site ``code``."""

    lo: str
    hi: str
    code: int
    wrap: bool
    bound: str

    def declare(self) -> str:
        return f"int64_t {self.lo} = INT64_MAX, {self.hi} = INT64_MIN;"

    def clauses(self) -> str:
        return f" reduction(min:{self.lo}) reduction(max:{self.hi})"

    def test(self) -> str:
        least = f"-({self.bound})" if self.wrap else "0"
        return (f"if ({self.lo} < {least} || {self.hi} >= ({self.bound})) "
                f"ln_fail(ln_err, {self.code}, {self.lo} < {least} ? {self.lo} : {self.hi}, {self.bound});")


def is_int_division(e) -> bool:
    """Whether ``e`` divides integers (a zero divisor is an error, as in eager on the CPU)."""
    return isinstance(e, Apply) and e.op in INT_DIVISIONS and e.dtype.is_int and not e.dtype.is_bool


def rows_may_split(kernel: Kernel) -> bool:
    """Whether the kernel has the shape of a column reduction that can split its rows across
    threads: one kept dimension, one phase, no reductions across rows (``split_rows`` adds the
    bound on the partials' size). Such kernels allocate per-thread partials."""
    return (bool(kernel.reductions) and kernel.num_phases == 1 and len(kernel.pdomain) == 1
            and not kernel.across and bool(kernel.rdomain))


def error_sites(kernel: Kernel, index_checks: bool) -> tuple[ErrorSite, ...]:
    """The kernel's distinct error sites in eager's order (site code = position + 1); index
    checks only when ``index_checks`` is on."""
    sites: dict[ErrorSite, None] = {ACROSS_SCRATCH: None} if kernel.across or rows_may_split(kernel) else {}
    for root in kernel.expressions():
        for node in _operands_first(root):
            if is_int_division(node):
                sites[ZeroDivision(node.op)] = None
            elif index_checks and isinstance(node, (Load, IndexValue)):
                for i in node.index if isinstance(node, Load) else (node.index,):
                    for a in i.atoms():
                        if isinstance(a, Indirect) and a.check is not None:
                            sites[a.check] = None
    return tuple(sites)


def _operands_first(root: Expr) -> list[Expr]:
    """Every node of ``root`` once, after its operands, the operands left to right (eager's order
    of evaluating an expression written as nested calls)."""
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node.children()))
    return order


def raise_recorded(slot, sites: tuple[ErrorSite, ...], kernel: str) -> None:
    """Raise the error a kernel recorded in ``slot`` (nothing when it recorded none)."""
    code = slot[0]
    if not code:
        return
    if not 0 < code <= len(sites):
        raise RuntimeError(f"kernel {kernel} reported an unknown error code {code}")
    site = sites[code - 1]
    text = f"{site.message(slot[1], slot[2])} (in loopnest kernel {kernel})"
    kinds = {ZeroDivision: KernelZeroDivisionError, ScratchAllocation: MemoryError}
    raise kinds.get(type(site), KernelIndexError)(text)


# ``ln_fail`` is cold and out of line, so the hot path of a checked loop is one compare. Comes after
# ``ops.PRELUDE`` (the ``_chk`` divisions call its ``ln_floordiv``, ``ln_mod``, ``ln_fmod``).
PRELUDE = r"""
__attribute__((noinline, cold)) static void ln_fail(int64_t* err, int64_t code, int64_t value, int64_t bound) {
  while (__atomic_exchange_n(&err[3], 1, __ATOMIC_ACQUIRE)) {}  // err[3]: the slot's lock
  if (err[0] == 0 || code < err[0]) { err[0] = code; err[1] = value; err[2] = bound; }  // eager's first op wins
  __atomic_store_n(&err[3], 0, __ATOMIC_RELEASE);
}
template <class T> static inline T ln_floordiv_chk(T a, T b, int64_t* err, int64_t code) {
  if (b == 0) { ln_fail(err, code, 0, 0); return 0; } return ln_floordiv(a, b);
}
template <class T> static inline T ln_mod_chk(T a, T b, int64_t* err, int64_t code) {
  if (b == 0) { ln_fail(err, code, 0, 0); return 0; } return ln_mod(a, b);
}
template <class T> static inline T ln_fmod_chk(T a, T b, int64_t* err, int64_t code) {
  if (b == 0) { ln_fail(err, code, 0, 0); return 0; } return ln_fmod(a, b);
}
"""
