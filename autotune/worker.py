"""The tuning service's worker: claim a request, rebuild its kernel from the IR text, tune it.

One worker process serves one device. It claims the highest-priority request its hardware may
tune (``db.queue``: a lease that a heartbeat thread extends), rebuilds the kernel from the
request's IR text alone with the strict parser (a request whose IR does not parse, or parses into
another kernel than its hash names, fails at once and nothing from it runs), and tunes it with
``GraphTuner`` on random inputs (``KernelHarness``): candidates compile in parallel on the host's
cores, and verification and timing hold the device lock (``DeviceLock``). The Optuna study lives
in the shared database, so a request resumed after a crash continues its study within the budget.
An error is retried until the request's attempts run out; then it stays ``failed`` with it.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import torch

from ..backends import registry
from ..backends.base import Backend
from ..core.hardware import HardwareInfo
from ..core.timing import BenchOptions
from ..db.api import TuningDB
from ..db.models import RequestState
from ..db.queue import LeaseLost, RequestQueue
from ..db.queue_records import RequestRecord
from ..scheduler.serial import parse_kernel
from ..scheduler.kernel import Kernel
from .devicelock import DeviceLock
from .keys import study_name, tuning_key
from .kernel_harness import KernelHarness
from .options import TuneSettings
from .storage import optuna_storage
from .tuner import GraphTuner, KernelReport

log = logging.getLogger("loopnest.worker")


class BadRequest(ValueError):
    """A request whose IR does not rebuild the kernel it names: failed without retries."""


@dataclass(frozen=True)
class WorkerOptions:
    """``lease_s``: a claim's lease (heartbeats every third of it); ``idle_exit_s``: stop after
    that long without work (None: never); ``max_requests``: stop after that many (None: never);
    ``timing_log``: append every device-lock window there (JSON lines); ``share_above``: when idle,
    help with running requests of at least that many trials (None: never)."""

    db_url: str
    backend: str | None = None
    lease_s: float = 60.0
    idle_exit_s: float | None = None
    max_requests: int | None = None
    poll_s: float = 1.0
    measure_s: float = 0.25
    compile_workers: int = max(1, os.cpu_count() or 1)
    timing_log: str | None = None
    study_prefix: str = "ln"
    share_above: int | None = None


def rebuild(request: RequestRecord, hardware: HardwareInfo) -> Kernel:
    """The request's kernel from its IR text, checked against the key (hash, sizes, dtypes) it names."""
    try:
        kernel = parse_kernel(request.ir_text)
    except Exception as exc:  # noqa: BLE001 - whatever the parser refuses, the request is bad
        raise BadRequest(f"the request's IR does not parse: {type(exc).__name__}: {exc}") from exc
    key = tuning_key(kernel, request.backend, hardware, request.symbols)
    if key is None:
        raise BadRequest(f"the request's symbol values {request.symbols} do not give the kernel's sizes")
    named = (request.kernel_hash, request.sizes, request.dtypes)
    if (key.kernel_hash, key.sizes, key.dtypes) != named:
        raise BadRequest(f"the request's IR is kernel {key.kernel_hash} at {key.sizes} {key.dtypes}, but the "
                         f"request names {named[0]} at {named[1]} {named[2]}")
    return kernel


def device_id(backend: Backend) -> str:
    """What the device lock is keyed by: this host's CPU, or the visible GPU's UUID."""
    host = socket.gethostname()
    if backend.device == "cuda":
        return f"{host}:cuda:{torch.cuda.get_device_properties(0).uuid}"
    return f"{host}:cpu"


class Lease:
    """Extends a claim from a background thread (until the lease is gone: the worker then finds
    out when it reports the result)."""

    def __init__(self, queue: RequestQueue, request_id: int, owner: str, lease_s: float):
        self.queue, self.request_id, self.owner, self.lease_s = queue, request_id, owner, lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                if not self.queue.heartbeat(self.request_id, self.owner, self.lease_s):
                    return
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the lease has slack
                log.warning("heartbeat of request %s failed: %s", self.request_id, exc)


class Worker:
    """Serves requests for one device until idle, or after ``max_requests`` (see module docs)."""

    def __init__(self, options: WorkerOptions):
        self.options = options
        self.db = TuningDB(options.db_url)
        self.queue = RequestQueue(self.db)
        self.backend = registry.get(options.backend) if options.backend else registry.for_this_machine()
        self.hardware = self.backend.hardware()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{self.backend.device}"
        self.lock = DeviceLock(options.db_url, device_id(self.backend), self.owner, options.timing_log)
        self.helped: set[int] = set()
        self.heartbeat_s = max(1, int(options.lease_s / 3))
        self.grace_s = max(self.heartbeat_s + 1, int(options.lease_s))
        setup = DeviceLock(options.db_url, "optuna-storage-setup", self.owner)
        try:  # Optuna creates its tables on first use; workers starting together must not race
            with setup.hold():
                optuna_storage(options.db_url, self.heartbeat_s, self.grace_s)
        finally:
            setup.close()

    def run(self) -> int:
        """Claim and tune requests; returns how many this worker finished (done or failed)."""
        served, idle_since = 0, time.monotonic()
        o = self.options
        try:
            while o.max_requests is None or served < o.max_requests:
                request = self.queue.claim(self.owner, self.hardware, [self.backend.name], o.lease_s)
                if request is None and self.help_one():
                    idle_since = time.monotonic()
                    continue
                if request is None:
                    if o.idle_exit_s is not None and time.monotonic() - idle_since >= o.idle_exit_s:
                        break
                    time.sleep(o.poll_s)
                    continue
                served += self.serve(request)
                idle_since = time.monotonic()
        finally:
            self.lock.close()
            self.db.close()
        return served

    def serve(self, request: RequestRecord) -> int:
        """Tune one claimed request; returns 1 if it finished here (done or failed), else 0."""
        log.info("%s: request %s (%s, %s trials, attempt %s)", self.owner, request.id, request.name,
                 request.trials, request.attempts)
        with Lease(self.queue, request.id, self.owner, self.options.lease_s):
            try:
                kernel = rebuild(request, self.hardware)
                state = self.tune(request, kernel)
            except LeaseLost as exc:
                log.warning("%s", exc)
                return 0
            except BadRequest as exc:
                state = self.queue.fail(request.id, self.owner, str(exc), retry=False)
            except Exception as exc:  # noqa: BLE001 - the request's error, kept in the queue
                log.exception("request %s failed", request.id)
                try:
                    state = self.queue.fail(request.id, self.owner, f"{type(exc).__name__}: {exc}")
                except LeaseLost:
                    return 0
        return int(state in (RequestState.DONE, RequestState.FAILED))

    def help_one(self) -> bool:
        """With nothing to claim: join the study of a running request whose budget is at least
        ``share_above`` trials (Optuna's shared storage; the budget is the study's total, so the
        helpers' trials are not extra). Returns whether it helped."""
        o = self.options
        if o.share_above is None:
            return False
        request = self.queue.joinable(self.owner, self.hardware, [self.backend.name], o.share_above, self.helped)
        if request is None:
            return False
        self.helped.add(request.id)
        log.info("%s: helping with request %s (%s, owner %s)", self.owner, request.id, request.name, request.owner)
        try:
            self.run_study(request, rebuild(request, self.hardware))
        except Exception as exc:  # noqa: BLE001 - the owner reports the request's outcome
            log.warning("helping with request %s failed: %s", request.id, exc)
        return True

    def tune(self, request: RequestRecord, kernel: Kernel) -> RequestState:
        """Run the request's study on this device, store the winner, mark the request done."""
        report = self.run_study(request, kernel)
        if report.config is None:
            raise RuntimeError(f"no candidate of {request.name} verified ({report.failed} failed trials)")
        return self.queue.complete(request.id, self.owner, request.trials)

    def run_study(self, request: RequestRecord, kernel: Kernel) -> KernelReport:
        """Tune ``kernel`` in the request's study (resumed or shared) and store the winner."""
        o = self.options
        settings = TuneSettings(trials=request.trials, db_url=o.db_url, measure_s=o.measure_s,
                                workers=o.compile_workers, heartbeat_s=self.heartbeat_s, grace_s=self.grace_s,
                                study_prefix=o.study_prefix, time_budget_s=max(120.0, 60.0 * request.trials))
        harness = KernelHarness(kernel, request.symbols, self.backend, BenchOptions(budget_s=o.measure_s), self.lock)
        tuner = GraphTuner(harness, settings, self.db, label=request.name.removesuffix(f"/{kernel.name}"),
                           backend=self.backend)
        if request.owner == self.owner:
            self.queue.set_study(request.id, self.owner, study_name(o.study_prefix, tuner.key(kernel)))
        return tuner.tune_kernel(kernel)


# NVLink multicast stays off in every worker process: tuning needs no collectives, and a program
# that uses multicast can put a shared host's GPUs out of service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def visible_devices(spec: str, backend: Backend) -> list[str]:
    """The device indices ``--devices`` names (``all`` or ``0,1``); one entry, ``cpu``, on the CPU."""
    if backend.device != "cuda":
        if spec not in ("all", "cpu"):
            raise ValueError(f"--devices {spec}: the {backend.name} backend runs on the CPU; leave --devices out "
                             "(start more worker processes to share the CPU)")
        return ["cpu"]
    count = torch.cuda.device_count()
    wanted = [str(i) for i in range(count)] if spec == "all" else [d.strip() for d in spec.split(",") if d.strip()]
    bad = [d for d in wanted if not d.isdigit() or int(d) >= count]
    if bad or not wanted:
        raise ValueError(f"--devices {spec}: this machine has CUDA devices 0..{count - 1}")
    return wanted


def spawn_per_device(devices: list[str], argv: list[str]) -> int:
    """Run ``autotune worker ARGV`` once per device, each process seeing only its device
    (``CUDA_VISIBLE_DEVICES``) with multicast off (``NO_MULTICAST``: workers never talk to each
    other); returns the worst exit status."""
    procs = [subprocess.Popen([sys.executable, "-m", "loopnest.cli", "worker", *argv],
                              env={**os.environ, **NO_MULTICAST, "CUDA_VISIBLE_DEVICES": d}) for d in devices]
    return max(p.wait() for p in procs)
