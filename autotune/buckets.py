"""Size buckets: which stored winner a kernel with symbolic sizes runs at the call's sizes.

The rule: every loop dimension whose size is symbolic is rounded up to the next power of two;
static dimensions stay exact. A call at rows 3000 x 2048 columns (both symbolic) is in bucket
4096x2048, and so is a winner tuned at 4096x2048 or 2500x2048.

Why powers of two, rounded up: the tiles a config describes (Triton's ``RBLOCK`` and ``XBLOCK``,
the C++ backend's lanes and chunks) are powers of two, and the natural tile of a row of n
elements is ``next_pow2(n)``: within one bucket every size gets the same tile and the same
masking pattern, so a winner measured anywhere in it meets the same code. Each bucket spans a
factor of two, so at most ~log2(n) buckets per dimension need a winner. A winner must still be
valid at the call's sizes (checked against the search space of the kernel specialized there: a
persistent ``RBLOCK`` must cover a row made of two symbolic dims, for instance), else it is not
used.

The winner of a bucket: the exact winner at the call's sizes, else the winner nearest to them
(log distance) among the winners in the bucket of the same kernel, backend, hardware and
dtypes, measured with this software. Winners are keyed by the kernel specialized at their own
sizes (``keys.kernel_hash_at``), so a candidate counts as the same kernel when its key's hash is
the call's, or the hash of the kernel specialized at the candidate's sizes.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..db.api import TuningDB, TuningKey, WinnerRecord
from ..ir.index import bare_symbol, evaluate, symbols_in
from ..scheduler.kernel import Kernel
from .keys import kernel_hash_at, kernel_symbols
from .tuner import log_distance


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def bucket(kernel: Kernel, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The size bucket of ``kernel`` at loop ``sizes``: symbolic dims rounded up to a power of two."""
    dims = kernel.pdomain + kernel.rdomain
    return tuple(next_pow2(n) if symbols_in(d) else n for d, n in zip(dims, sizes))


def symbols_at(kernel: Kernel, sizes: tuple[int, ...]) -> dict[str, int] | None:
    """The symbol values at which ``kernel`` has loop ``sizes``, when its loop dims name every
    symbol it takes (None otherwise, or when ``sizes`` are not reachable)."""
    dims = kernel.pdomain + kernel.rdomain
    env: dict[str, int] = {}
    for d, n in zip(dims, sizes):
        name = bare_symbol(d)
        if name is not None and env.setdefault(name, n) != n:
            return None
    if any(s not in env for s in kernel_symbols(kernel)):
        return None
    return env if all(evaluate(d, env) == n for d, n in zip(dims, sizes)) else None


def bucket_winner(db: TuningDB, kernel: Kernel, key: TuningKey, software: Mapping[str, Any]) -> WinnerRecord | None:
    """The winner serving ``key``'s bucket (not at ``key``'s own sizes), nearest first; None if none."""
    home = bucket(kernel, key.sizes)
    found = [w for w in db.winners(backend=key.backend, hardware=key.hardware)
             if w.dtypes == key.dtypes and len(w.sizes) == len(key.sizes) and w.sizes != key.sizes
             and not w.stale and w.software == software and bucket(kernel, w.sizes) == home
             and _same_kernel(kernel, key, w)]
    return min(found, key=lambda w: (log_distance(w.sizes, key.sizes), w.key.sizes_key), default=None)


def _same_kernel(kernel: Kernel, key: TuningKey, w: WinnerRecord) -> bool:
    if w.kernel_hash == key.kernel_hash:
        return True
    env = symbols_at(kernel, w.sizes)
    return env is not None and kernel_hash_at(kernel, env) == w.kernel_hash


def bucket_key(sizes: tuple[int, ...]) -> str:
    """``4096x2048``: how sizes and buckets are written in keys and messages."""
    return "x".join(map(str, sizes))
