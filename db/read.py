"""Reading the tuning DB: winners and trials as records, by two SELECT statements written once in
SQL. ``TuningReader`` runs them on a SQLite file at the head revision with Python's ``sqlite3``
alone (``autotune db list/show/export`` start without importing SQLAlchemy, a third of a second
on a 2-core host); any other database, one that must be migrated first, or a ``sqlite3`` error
takes SQLAlchemy's engine, whose errors the CLI explains. ``TuningDB`` (:mod:`loopnest.db.api`)
adds the writes and lookups, and always reads through its engine.
"""
from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

import platformdirs

from loopnest.core import settings
from loopnest.db.jsonl import STRICT_JSON, checked_row
from loopnest.db.records import CORRUPT, HardwareInfo, TrialRecord, TrialState, TuningKey, WinnerRecord
from loopnest.db.schema import HEAD, VERSION_TABLE

log = logging.getLogger("loopnest.db")

_SQLITE_FILE = re.compile(r"sqlite:///(?!:memory:|file:)([^?%]+)")  # a plain path, no options
_BUSY_TIMEOUT_S = 30.0

_WINNERS = """
SELECT w.id, w.hardware_id, w.sizes, w.dtypes, w.config, w.time_us, w.default_time_us, w.software, w.stale,
       w.trial_id, w.updated_at, k.structural_hash, k.name, k.backend,
       h.kind, h.name AS hardware_name, h.capability, h.cores, h.memory_bytes
FROM ln_winners w JOIN ln_kernels k ON w.kernel_id = k.id JOIN ln_hardware h ON w.hardware_id = h.id"""
_TRIALS = """
SELECT t.id, t.sizes, t.dtypes, t.config, t.state, t.message, t.p20_us, t.p50_us, t.p80_us, t.verified_error,
       t.host, t.study, t.created_at, k.structural_hash, k.backend, k.name, h.fingerprint
FROM ln_trials t JOIN ln_kernels k ON t.kernel_id = k.id JOIN ln_hardware h ON t.hardware_id = h.id"""
_JSON_COLUMNS = ("sizes", "dtypes", "config", "software")
_TIME_COLUMNS = ("updated_at", "created_at")
_WINNER_COLUMNS = ("sizes", "dtypes", "config", "time_us", "default_time_us", "software")
_TRIAL_COLUMNS = ("sizes", "dtypes", "config", "p20_us", "p50_us", "p80_us")


def default_db_url() -> str:
    """``$LOOPNEST_DB`` if set, else a SQLite file ``tuning.db`` in the user cache dir."""
    return settings.current().db_url or f"sqlite:///{Path(platformdirs.user_cache_dir('loopnest')) / 'tuning.db'}"


def resolve_url(url: str | None) -> str:
    """``url`` (a URL, or the path of a SQLite file), or ``$LOOPNEST_DB``, or the SQLite file in
    the user cache dir."""
    return settings.db_url(url) or default_db_url()


def db_exists(url: str) -> bool:
    """False only for a SQLite file that does not exist yet (a lookup need not create it)."""
    from sqlalchemy import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True
    database = parsed.database or ""
    return database in ("", ":memory:") or database.startswith("file:") or Path(database).expanduser().exists()


class TuningReader:
    """Handle on one tuning database for reading; opening it migrates the schema to this
    loopnest's head (nothing but one query when it is there already)."""

    def __init__(self, url: str | None = None, *, plain_sqlite: bool = True) -> None:
        self.url = url or default_db_url()
        self.engine = None
        self._file = _open_at_head(self.url) if plain_sqlite else None  # sqlite3 connection, or None
        self._lock = threading.Lock()
        self.revision = HEAD
        if self._file is None:
            self._use_engine()

    def _use_engine(self) -> None:
        """Read through SQLAlchemy from now on (opening and migrating the database)."""
        from loopnest.db.engine import make_engine, unavailable
        from loopnest.db.schema import migrate

        if self._file is not None:
            self._file.close()
            self._file = None
        if self.engine is not None:
            return
        engine = make_engine(self.url)
        try:
            self.revision = migrate(engine)
        except BaseException as exc:
            engine.dispose()
            if (error := unavailable(self.url, exc)) is not None:
                raise error from exc
            raise
        self.engine = engine

    def close(self) -> None:
        """Close every connection."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.engine is not None:
            self.engine.dispose()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def winners(self, kernel_hash: str | None = None, backend: str | None = None,
                hardware: HardwareInfo | str | None = None, name: str | None = None,
                stale: bool | None = None) -> list[WinnerRecord]:
        """Winners matching every given filter (``hardware``: info or fingerprint), by kernel name."""
        fingerprint = hardware.fingerprint if isinstance(hardware, HardwareInfo) else hardware
        rows = self._select(_WINNERS, {"k.structural_hash": kernel_hash, "k.backend": backend,
                                       "h.fingerprint": fingerprint, "k.name": name, "w.stale": stale},
                            "k.name, w.id")
        machines: dict[int, HardwareInfo] = {}
        out = []
        for row in rows:
            if (machine := machines.get(row.hardware_id)) is None:
                machine = machines[row.hardware_id] = HardwareInfo(
                    row.kind, row.hardware_name, row.capability, row.cores, row.memory_bytes)
            if (record := winner_record(row, row, machine)) is not None:
                out.append(record)
        return out

    def stale_winners(self) -> list[WinnerRecord]:
        """Winners measured with other software than a later lookup had: re-tune candidates."""
        return self.winners(stale=True)

    def trials(self, key: TuningKey | None = None, study: str | None = None,
               state: TrialState | str | None = None) -> list[TrialRecord]:
        """Trials, oldest first, optionally of one key, one study, one state."""
        given = {"t.study": study, "t.state": None if state is None else TrialState(state).value}
        if key is not None:
            given |= {"t.sizes_key": key.sizes_key, "t.dtypes_key": key.dtypes_key,
                      "k.structural_hash": key.kernel_hash, "k.backend": key.backend,
                      "h.fingerprint": key.hardware.fingerprint}
        rows = self._select(_TRIALS, given, "t.id")
        return [r for r in (_trial_record(row, row, row.fingerprint) for row in rows) if r is not None]

    def export_jsonl(self, fp: IO[str], **filters: Any) -> int:
        """Write winners (``winners()`` filters apply) as JSON lines; return how many."""
        records = self.winners(**filters)
        fp.writelines(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")) + "\n" for r in records)
        return len(records)

    def _select(self, query: str, given: dict[str, Any], order: str) -> list[SimpleNamespace]:
        """``query`` restricted to ``column = value`` for each given value that is not None, in
        ``order``; rows with their JSON and time columns decoded (``CORRUPT``: JSON that is not)."""
        where = {column: value for column, value in given.items() if value is not None}
        params = {f"p{i}": value for i, value in enumerate(where.values())}
        sql = query + "".join(f"\n{'WHERE' if i == 0 else 'AND'} {column} = :p{i}" for i, column in enumerate(where))
        sql += f"\nORDER BY {order}"
        if self._file is not None:
            try:
                with self._lock:
                    cursor = self._file.execute(sql, params)
                    names = [d[0] for d in cursor.description]
                    rows = cursor.fetchall()
                return [_decoded(dict(zip(names, row)), True) for row in rows]
            except sqlite3.Error:
                self._use_engine()  # the engine's error, which the CLI explains, if it fails there too
        from sqlalchemy import text

        from loopnest.db.engine import read_only

        with read_only(self.engine).connect() as conn:
            text_columns = conn.dialect.name == "sqlite"  # PostgreSQL's driver decodes JSON and times
            return [_decoded(dict(row._mapping), text_columns) for row in conn.execute(text(sql), params)]


def _open_at_head(url: str) -> sqlite3.Connection | None:
    """A ``sqlite3`` connection to the file of a ``sqlite:///PATH`` URL whose schema is at ``HEAD``;
    None for any other URL, a missing file, another revision or any ``sqlite3`` error."""
    if (match := _SQLITE_FILE.fullmatch(url)) is None:
        return None
    try:
        conn = sqlite3.connect(f"{Path(match.group(1)).resolve().as_uri()}?mode=rw", uri=True,
                               timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
    except (sqlite3.Error, ValueError):
        return None
    try:
        if conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [(HEAD,)]:
            return conn
    except sqlite3.Error:
        pass
    conn.close()
    return None


def _decoded(row: dict[str, Any], text_columns: bool) -> SimpleNamespace:
    """A row as attributes; from SQLite, its JSON and time columns decoded from their text."""
    if text_columns:
        for name in _JSON_COLUMNS:
            if isinstance(value := row.get(name), str):
                try:
                    row[name] = STRICT_JSON.decode(value)
                except ValueError:
                    row[name] = CORRUPT
        for name in _TIME_COLUMNS:
            if isinstance(value := row.get(name), str):
                try:
                    row[name] = datetime.fromisoformat(value)
                except ValueError:
                    row[name] = None  # not shown, never compared: the row stays readable
    return SimpleNamespace(**row)


def winner_record(w: Any, k: Any, machine: HardwareInfo) -> WinnerRecord | None:
    """Winner row ``w`` of kernel row ``k`` (structural_hash, name, backend) as a record; None, with a
    warning naming the row, when a stored column is damaged."""
    try:
        v = checked_row(w, _WINNER_COLUMNS)
        return WinnerRecord(
            kernel_hash=k.structural_hash, name=k.name, backend=k.backend, sizes=v["sizes"], dtypes=v["dtypes"],
            hardware=machine, config=v["config"], time_us=v["time_us"], default_time_us=v["default_time_us"],
            software=v["software"], stale=bool(w.stale), trial_id=w.trial_id, updated_at=w.updated_at,
        )
    except (TypeError, ValueError) as exc:
        log.warning("tuning DB: skipping damaged row ln_winners.id=%s (%s): %s; re-tune it or delete the row",
                    w.id, k.name, exc)
        return None


def _trial_record(t: Any, k: Any, fingerprint: str) -> TrialRecord | None:
    """Trial row ``t`` of kernel row ``k`` on the hardware ``fingerprint`` as a record; None, with a
    warning naming the row, when a stored column is damaged."""
    try:
        v = checked_row(t, _TRIAL_COLUMNS)
        return TrialRecord(
            id=t.id, kernel_hash=k.structural_hash, backend=k.backend, sizes=v["sizes"], dtypes=v["dtypes"],
            hardware_fingerprint=fingerprint, config=v["config"], state=TrialState(t.state), message=t.message,
            p20_us=v["p20_us"], p50_us=v["p50_us"], p80_us=v["p80_us"], verified_error=t.verified_error,
            host=t.host, study=t.study, created_at=t.created_at,
        )
    except (TypeError, ValueError) as exc:
        log.warning("tuning DB: skipping damaged row ln_trials.id=%s (%s): %s; delete the row", t.id, k.name, exc)
        return None
