"""One timing at a time per device, across worker processes and hosts.

Several workers may share a device: they compile candidates in parallel and measure in turn.
The lock is the database's own where it has one:

* PostgreSQL: a session-level advisory lock (``pg_advisory_lock``) keyed by the device, held on a
  connection of its own. Every worker on every host that shares the database sees it, and the
  server releases it when a worker's connection dies (a SIGKILLed worker never leaves it held).
* SQLite (one machine): an OS file lock (``filelock``, ``flock`` on Linux) on a file beside the
  database, which the kernel releases when the holding process dies.

Each hold can be appended to a JSON-lines log (worker, device, start, end in Unix seconds), which
shows how long each worker had the device (and, in the tests, that no two windows overlap).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import filelock
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool


def lock_key(device_id: str) -> int:
    """A signed 64-bit advisory-lock key for ``device_id``."""
    return int.from_bytes(hashlib.sha256(f"loopnest-device:{device_id}".encode()).digest()[:8], "big", signed=True)


class DeviceLock:
    """The lock of ``device_id`` (e.g. ``host:cpu``, ``host:cuda:<uuid>``) for workers of ``db_url``."""

    def __init__(self, db_url: str, device_id: str, owner: str, log_path: str | Path | None = None):
        self.device_id, self.owner = device_id, owner
        self.log_path = Path(log_path) if log_path else None
        url = make_url(db_url)
        self._engine = None
        self._file_lock = None
        if url.get_backend_name() == "postgresql":
            self._engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
            self._conn = self._engine.connect()
        else:
            database = url.database or ""
            if database in ("", ":memory:") or database.startswith("file:"):
                raise ValueError(f"workers need a database file or server shared between processes, got {db_url}")
            digest = hashlib.sha256(device_id.encode()).hexdigest()[:16]
            path = Path(database).expanduser().resolve().parent / f".ln-device-{digest}.lock"
            self._file_lock = filelock.FileLock(str(path))

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the device for the duration of the block (waits while another worker times)."""
        if self._engine is not None:
            self._conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock_key(self.device_id)})
        else:
            self._file_lock.acquire()
        start = time.time()
        try:
            yield
        finally:
            end = time.time()
            if self._engine is not None:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock_key(self.device_id)})
            else:
                self._file_lock.release()
            self._log(start, end)

    def _log(self, start: float, end: float) -> None:
        if self.log_path is None:
            return
        line = json.dumps({"owner": self.owner, "device": self.device_id, "start": start, "end": end}) + "\n"
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one O_APPEND write per window: lines never interleave
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the lock's connection."""
        if self._engine is not None:
            self._conn.close()
            self._engine.dispose()
