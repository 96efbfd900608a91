"""Tuning keys and study names of kernels."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from ..db.api import HardwareInfo, TuningKey
from ..ir.index import evaluate
from ..scheduler.kernel import Kernel


def kernel_sizes(kernel: Kernel, env: Mapping[str, int] | None = None) -> tuple[int, ...] | None:
    """Concrete loop sizes (rows then reduced dims), or None if a size is symbolic and unbound."""
    sizes = []
    for n in kernel.pdomain + kernel.rdomain:
        value = n.as_int()
        if value is None:
            try:
                value = evaluate(n, env or {})
            except (KeyError, ValueError):
                return None
        sizes.append(value)
    return tuple(sizes)


def kernel_dtypes(kernel: Kernel) -> tuple[str, ...]:
    """Dtypes of the kernel's buffers: inputs, then outputs."""
    names = list(dict.fromkeys(kernel.inputs + kernel.outputs))
    return tuple(kernel.buffers[n].dtype.name for n in names)


def tuning_key(kernel: Kernel, backend: str, hardware: HardwareInfo,
               env: Mapping[str, int] | None = None) -> TuningKey | None:
    """The key winners of ``kernel`` are stored under (None if its sizes are not known)."""
    sizes = kernel_sizes(kernel, env)
    if sizes is None:
        return None
    return TuningKey(kernel.structural_hash, backend, sizes, kernel_dtypes(kernel), hardware)


def study_name(prefix: str, key: TuningKey) -> str:
    """``PREFIX:<tuning key>``: one Optuna study per tuning key."""
    return ":".join((prefix, key.kernel_hash, key.backend, key.sizes_key, key.dtypes_key,
                     key.hardware.fingerprint))


def software_tag(software: Mapping[str, Any]) -> str:
    """A short digest of software versions (trials measured under other versions differ)."""
    text = json.dumps(dict(software), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
