"""Turning kernels without a measured winner into tuning requests (data only).

A request carries the kernel's serial IR text (``scheduler.serial.kernel_text``, which the strict
reader ``parse_kernel`` reads back), its loop sizes, dtypes and the values of the symbols its
layouts use, the hardware it is for, its trial budget and priority, and who asked: never code.
Requests for the same key coalesce in the queue (``db.queue``).
"""
from __future__ import annotations

import getpass
import logging
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..backends.base import Backend
from ..core.hardware import HardwareInfo
from ..db.api import LookupKind, db_exists, open_db, resolve_url
from ..db.queue import RequestQueue
from ..db.queue_records import HardwareTarget, NewRequest
from ..ir.interpret import bind_symbols
from ..scheduler.serial import kernel_text
from ..pipeline import GraphExample
from ..runtime.compiled import CompiledGraph
from ..scheduler.kernel import Kernel, signature
from .keys import tuning_key

log = logging.getLogger("loopnest.autotune")

DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class RequestOptions:
    """How misses are enqueued: the budget (trials), priority, attempts, target hardware (None:
    this machine, for the backend; or ``HardwareTarget.parse`` text such as ``"any sm_90"``)."""

    trials: int = 24
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    hardware: HardwareInfo | HardwareTarget | str | None = None

    def target(self, backend: Backend) -> HardwareTarget:
        """The target of this request on ``backend``."""
        if self.hardware is None:
            return HardwareTarget.of(backend.hardware())
        if isinstance(self.hardware, HardwareInfo):
            return HardwareTarget.of(self.hardware)
        if isinstance(self.hardware, HardwareTarget):
            return self.hardware
        return HardwareTarget.parse(self.hardware, backend.hardware_kind.value)


def requester() -> str:
    """``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


def new_request(kernel: Kernel, backend: Backend, env: dict[str, int], options: RequestOptions,
                label: str = "") -> NewRequest | None:
    """The request for ``kernel`` at the sizes ``env`` binds (None when a size is unknown)."""
    target = options.target(backend)
    key = tuning_key(kernel, backend.name, backend.hardware(), env)
    if key is None:
        return None
    symbols = {s: int(env[s]) for s in signature(kernel).symbols}
    return NewRequest(kernel_hash=key.kernel_hash, backend=backend.name, name=label or kernel.name,
                      ir_text=kernel_text(kernel), sizes=key.sizes, dtypes=key.dtypes, target=target,
                      trials=options.trials, symbols=symbols, priority=options.priority,
                      max_attempts=options.max_attempts, requested_by=requester())


def unmeasured(kernels: Iterable[Kernel], backend: Backend, env: dict[str, int], db_url: str) -> list[Kernel]:
    """The kernels without an exact winner on this machine (with this software) at ``env``'s sizes."""
    hardware, software = backend.hardware(), backend.software()
    db = open_db(db_url) if db_exists(db_url) else None
    out = []
    for kernel in kernels:
        key = tuning_key(kernel, backend.name, hardware, env)
        if db is None or key is None or db.lookup(key, software).kind is not LookupKind.EXACT:
            out.append(kernel)
    return out


def enqueue_kernels(db_url: str, kernels: Iterable[Kernel], backend: Backend, env: dict[str, int],
                    options: RequestOptions, label: str = "") -> list[int]:
    """Enqueue one request per kernel (sizes known); returns the request ids, coalesced ones too."""
    queue = RequestQueue(open_db(db_url))
    requests = [new_request(k, backend, env, options, f"{label}/{k.name}" if label else k.name) for k in kernels]
    return [queue.enqueue(r) for r in requests if r is not None]


def enqueue_misses(compiled: CompiledGraph, kernels: Sequence[str], db_url: str | None,
                   example: GraphExample | None, options: RequestOptions) -> list[int]:
    """``tune="queue"``: enqueue ``kernels`` of ``compiled`` (its misses); nothing is measured."""
    env = bind_symbols(compiled.graph, example.inputs) if example is not None else {}
    wanted = [k for k in compiled.schedule.kernels if k.name in kernels]
    ids = enqueue_kernels(resolve_url(db_url), wanted, compiled.backend, env, options, compiled.name)
    if len(ids) < len(wanted):
        log.warning("tune='queue': %d kernels of %s have symbolic sizes and no example inputs; not enqueued",
                    len(wanted) - len(ids), compiled.name)
    return ids
