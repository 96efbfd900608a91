"""A pool of compile worker processes (``compile_worker.py``), started on demand and reused.

Each worker answers one request at a time over its pipes. Workers are plain subprocesses started
with ``python -P`` on the script's path, not ``multiprocessing`` children: they import neither the
caller's ``__main__`` nor torch, and a worker past its timeout is killed and replaced. Idle
workers stay for the next batch (their Triton is warm: the first compile in a process costs
about half a second more) and exit when the parent closes their stdin, at exit or when it dies.
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("compile_worker.py")
CANCEL_POLL_S = 0.05  # how often a wait for a reply looks at its cancel event


class Worker:
    """One compile worker process."""

    def __init__(self):
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        self.proc = subprocess.Popen([sys.executable, "-P", str(WORKER_SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def ask(self, request: dict, timeout: float | None, cancel: threading.Event | None = None) -> dict:
        """Send ``request`` and wait for the reply; TimeoutError after ``timeout`` seconds or as
        soon as ``cancel`` is set, RuntimeError when the worker died."""
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"compiling took more than {timeout:g} s")
                wait = left if cancel is None else (CANCEL_POLL_S if left is None else min(CANCEL_POLL_S, left))
                if selector.select(wait):
                    break
                if cancel is not None and cancel.is_set():
                    raise TimeoutError("compiling was cut short")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Triton compile worker exited with status {self.proc.wait()}")
        return json.loads(line)

    def close(self, kill: bool = False) -> None:
        """End the process: close its stdin (it exits), or kill it."""
        if kill:
            self.proc.kill()
        else:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class WorkerPool:
    """Up to ``size`` workers; ``run`` takes an idle one (or starts one) for one request."""

    def __init__(self, size: int):
        self.size = size
        self.idle: queue.LifoQueue[Worker] = queue.LifoQueue()
        self.started = 0
        self.lock = threading.Lock()

    def run(self, request: dict, timeout: float | None, cancel: threading.Event | None = None) -> dict:
        """The reply of a worker to ``request``; a worker that timed out, was cancelled or failed
        is killed."""
        worker = self._take()
        try:
            reply = worker.ask(request, timeout, cancel)
        except BaseException:
            self._drop(worker)
            raise
        self.idle.put(worker)
        return reply

    def _take(self) -> Worker:
        while True:
            try:
                return self.idle.get_nowait()
            except queue.Empty:
                pass
            with self.lock:
                start = self.started < self.size
                self.started += start
            if start:
                try:
                    return Worker()
                except BaseException:
                    with self.lock:
                        self.started -= 1
                    raise
            try:  # all busy: wait for one (or for a killed one's place)
                return self.idle.get(timeout=0.1)
            except queue.Empty:
                continue

    def _drop(self, worker: Worker) -> None:
        worker.close(kill=True)
        with self.lock:
            self.started -= 1

    def close(self) -> None:
        """End every idle worker."""
        while True:
            try:
                worker = self.idle.get_nowait()
            except queue.Empty:
                return
            worker.close()
            with self.lock:
                self.started -= 1


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> WorkerPool:
    """This process's pool (one worker per CPU at most), created on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool(max(1, os.cpu_count() or 1))
            atexit.register(_POOL.close)
        return _POOL
