"""Run-time errors of C++ kernels: out-of-range indirect indices and integer division by zero.

A kernel cannot raise. It records the first error in an error slot its launcher passes in
(``int64_t ln_err[3]``: site code, offending value, bound), claimed with one compare-and-swap so
that threads of an OpenMP loop never race, then carries on with a safe value. After the call the
launcher raises the Python exception eager PyTorch raises for the same input, naming the op, the
value and the bound. Site codes number a kernel's distinct error sites (``error_sites``), which
the code generator and the launcher both derive from the kernel alone.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...ir.expr import Apply, IndexValue, Load, walk
from ...ir.index import IndexCheck, Indirect
from ...ir.ops import Op
from ...scheduler.kernel import Kernel

INT_DIVISIONS = {Op.FLOORDIV: "floor_divide (//)", Op.MOD: "remainder (%)", Op.FMOD: "fmod"}

ErrorSlot = ctypes.c_int64 * 3


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


ErrorSite = IndexCheck | ZeroDivision


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


def error_sites(kernel: Kernel, index_checks: bool) -> tuple[ErrorSite, ...]:
    """The kernel's distinct error sites in a fixed order (site code = position + 1); index
    checks only when ``index_checks`` is on."""
    sites: dict[ErrorSite, None] = {}
    for root in kernel.expressions():
        for node in walk(root):
            if is_int_division(node):
                sites[ZeroDivision(node.op)] = None
            elif index_checks and isinstance(node, (Load, IndexValue)):
                for i in node.index if isinstance(node, Load) else (node.index,):
                    for a in i.atoms():
                        if isinstance(a, Indirect) and a.check is not None:
                            sites[a.check] = None
    return tuple(sites)


def raise_recorded(slot, sites: tuple[ErrorSite, ...], kernel: str) -> None:
    """Raise the error a kernel recorded in ``slot`` (nothing when it recorded none)."""
    code = slot[0]
    if not code:
        return
    if not 0 < code <= len(sites):
        raise RuntimeError(f"kernel {kernel} reported an unknown error code {code}")
    site = sites[code - 1]
    text = f"{site.message(slot[1], slot[2])} (in loopnest kernel {kernel})"
    raise (KernelZeroDivisionError if isinstance(site, ZeroDivision) else KernelIndexError)(text)


# ``ln_fail`` is cold and out of line, so the hot path of a checked loop is one compare. Comes after
# ``ops.PRELUDE`` (the ``_chk`` divisions call its ``ln_floordiv``, ``ln_mod``, ``ln_fmod``).
PRELUDE = r"""
__attribute__((noinline, cold)) static void ln_fail(int64_t* err, int64_t code, int64_t value, int64_t bound) {
  int64_t none = 0;  // the first error wins; later ones (any thread) are dropped
  if (__atomic_compare_exchange_n(&err[0], &none, -1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    err[1] = value; err[2] = bound;
    __atomic_store_n(&err[0], code, __ATOMIC_RELEASE);
  }
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
