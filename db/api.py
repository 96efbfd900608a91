"""The tuning database's public API: the only module the rest of loopnest imports.

``TuningDB`` stores kernels, measured trials and one winner per tuning key, in SQLite (default,
under the user cache dir) or PostgreSQL (shared between machines; Optuna's storage may live in
the same database). The schema is migrated on open. Configs are JSON data, validated by the
backend before use; the database never holds code. The reads are ``TuningReader``'s
(:mod:`loopnest.db.read`, without the ORM); this class adds the writes and lookups.
"""
from __future__ import annotations

import logging
import math
import socket
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import lru_cache
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.orm import Session

from loopnest.db.engine import DatabaseUnavailable, UnsupportedDatabase, dialect_insert, session_factory, session_scope
from loopnest.db.jsonl import ConfigValidator, ImportRowError, ParsedImport, parse_lines
from loopnest.db.models import Hardware, Kernel, Trial, TrialState, Winner, utcnow
from loopnest.db.read import TuningReader, db_exists, default_db_url, resolve_url, winner_record
from loopnest.db.records import (
    HardwareInfo, HardwareKind, LookupKind, LookupResult, TrialRecord, TuningKey, WinnerRecord,
    json_object, positive_float,
)
from loopnest.db.schema import SchemaError

log = logging.getLogger("loopnest.db")

__all__ = [
    "ConfigValidator", "DatabaseUnavailable", "HardwareInfo", "HardwareKind", "ImportRowError", "LookupKind",
    "LookupResult", "ParsedImport", "SchemaError", "TrialRecord", "TrialState", "TuningDB", "TuningKey",
    "TuningReader", "UnknownKernelError", "UnsupportedDatabase", "WinnerRecord", "db_exists", "default_db_url",
    "open_db", "resolve_url",
]

_WINNER_KEY = ("kernel_id", "hardware_id", "sizes_key", "dtypes_key")


class UnknownKernelError(LookupError):
    """A trial or winner names a kernel that was never registered with ``register_kernel``."""


class TuningDB(TuningReader):
    """Handle on one tuning database; opening it migrates the schema to this loopnest's head."""

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url, plain_sqlite=False)
        self._writer, self._reader = session_factory(self.engine)

    def session(self, write: bool = True) -> AbstractContextManager[Session]:
        """A session that commits on success and rolls back on error."""
        return session_scope(self._writer if write else self._reader)

    # -- kernels and trials ------------------------------------------------------------------

    def register_kernel(self, kernel_hash: str, backend: str, name: str, ir_text: str) -> int:
        """Record a kernel (idempotent; fills in the IR of an imported kernel); return its id."""
        with self.session() as s:
            return _ensure_kernel(s, kernel_hash, backend, name, ir_text)

    def record_trial(
        self, key: TuningKey, config: dict[str, Any], state: TrialState | str,
        message: str | None = None, quantiles: Sequence[float] | None = None,
        verified_error: float | None = None, study: str | None = None, host: str | None = None,
    ) -> int:
        """Store one trial and return its id; ``quantiles`` = (p20, p50, p80) µs, needed if ok."""
        state = TrialState(state)
        p20, p50, p80 = _check_quantiles(state, quantiles)
        with self.session() as s:
            kernel_id, hardware_id = _key_ids(s, key)
            trial = Trial(
                kernel_id=kernel_id, hardware_id=hardware_id, sizes=list(key.sizes),
                dtypes=list(key.dtypes), sizes_key=key.sizes_key, dtypes_key=key.dtypes_key,
                config=json_object(config, "config"), state=state, message=message, p20_us=p20,
                p50_us=p50, p80_us=p80, verified_error=verified_error,
                host=host or socket.gethostname(), study=study,
            )
            s.add(trial)
            s.flush()
            return trial.id

    def finish_trial(
        self, trial_id: int, state: TrialState | str, message: str | None = None,
        quantiles: Sequence[float] | None = None, verified_error: float | None = None,
    ) -> None:
        """Give a trial recorded as ``running`` its final state and timings."""
        state = TrialState(state)
        p20, p50, p80 = _check_quantiles(state, quantiles)
        with self.session() as s:
            trial = s.get(Trial, trial_id)
            if trial is None or trial.state != TrialState.RUNNING:
                found = "no such trial" if trial is None else f"it is {trial.state.value}"
                raise ValueError(f"cannot finish trial {trial_id}: {found}, not running")
            trial.state, trial.message, trial.verified_error = state, message, verified_error
            trial.p20_us, trial.p50_us, trial.p80_us = p20, p50, p80

    def fail_running_trials(self, study: str | None = None, host: str | None = None) -> int:
        """Mark trials left ``running`` (by a crashed worker) runtime_error "interrupted"."""
        stmt = update(Trial).where(Trial.state == TrialState.RUNNING)
        stmt = _where_given(stmt, (Trial.study, study), (Trial.host, host))
        with self.session() as s:
            result = s.execute(stmt.values(state=TrialState.RUNTIME_ERROR, message="interrupted"))
            return result.rowcount

    def gc(self, older_than_days: float) -> int:
        """Delete finished trials older than that which no winner references; return how many."""
        cutoff = utcnow() - timedelta(days=older_than_days)
        kept = select(Winner.trial_id).where(Winner.trial_id.is_not(None))
        stmt = delete(Trial).where(
            Trial.created_at < cutoff, Trial.state != TrialState.RUNNING, Trial.id.not_in(kept)
        )
        with self.session() as s:
            return s.execute(stmt, execution_options={"synchronize_session": False}).rowcount

    def repair(self) -> dict[str, int]:
        """Repair what deleted or altered rows left inconsistent; return how many rows each repair
        touched. ``orphan_winners``/``orphan_trials``: rows whose kernel or hardware row was deleted
        (unreachable, deleted too); ``unlinked_winners``: winners whose ``trial_id`` names no ok trial
        of their key and config (the winner stays, its ``trial_id`` becomes NULL)."""
        with self.session() as s:
            done = {"orphan_winners": _delete_orphans(s, Winner), "orphan_trials": _delete_orphans(s, Trial)}
            linked = select(Winner, Trial).outerjoin(Trial, Winner.trial_id == Trial.id)
            unlinked = [w for w, t in s.execute(linked.where(Winner.trial_id.is_not(None))) if not _backs(t, w)]
            for w in unlinked:
                w.trial_id = None
            done["unlinked_winners"] = len(unlinked)
        return done

    # -- winners ---------------------------------------------------------------------------

    def store_winner(
        self, key: TuningKey, config: dict[str, Any], time_us: float,
        default_time_us: float | None, software: dict[str, Any], trial_id: int | None = None,
    ) -> WinnerRecord:
        """Offer a measured winner of ``key``; return the winner stored afterwards.

        The stored winner is the best measured across every writer: the offer replaces the row of
        ``key`` unless that row was measured with the same software, is not stale, is at least as
        fast, and its trial row (if it names one) still backs it. The decision is taken in one transaction holding the row (``SELECT ... FOR UPDATE``
        on PostgreSQL, the ``BEGIN IMMEDIATE`` write lock on SQLite), so concurrent sweeps of one
        key keep the fastest measurement, whichever writes last.
        """
        with self.session() as s:
            kernel_id, hardware_id = _key_ids(s, key)
            if trial_id is not None:
                _check_winning_trial(s, trial_id, kernel_id, hardware_id, key)
            record = WinnerRecord(
                kernel_hash=key.kernel_hash, name=s.get_one(Kernel, kernel_id).name,
                backend=key.backend, sizes=key.sizes, dtypes=key.dtypes, hardware=key.hardware,
                config=json_object(config, "config"), time_us=positive_float(time_us, "time_us"),
                default_time_us=None if default_time_us is None
                else positive_float(default_time_us, "default_time_us"),
                software=json_object(software, "software"), trial_id=trial_id, updated_at=utcnow(),
            )
            return _offer_winner(s, kernel_id, hardware_id, record)

    def winning_trial(self, key: TuningKey, config: dict[str, Any], quantiles: Sequence[float],
                      study: str | None, trial_id: int | None = None) -> int:
        """The ``ln_trials`` id to store with a winner of ``key`` measured as ``config``.

        ``trial_id`` when that row is an ok trial of ``key`` with this config; else such a row of
        ``study``; else a new ok row holding ``quantiles``. A row deleted or altered since it was
        measured is never trusted, and the winner keeps a trial row of its measurement.
        """
        config = json_object(config, "config")
        with self.session() as s:
            kernel_id, hardware_id = _key_ids(s, key)
            same = (Trial.state == TrialState.OK, *_key_filter(Trial, key, kernel_id, hardware_id))
            if trial_id is not None:
                trial = s.scalar(select(Trial).where(Trial.id == trial_id, *same))
                if trial is not None and trial.config == config:
                    return trial.id
            for trial in s.scalars(select(Trial).where(Trial.study == study, *same).order_by(Trial.id)):
                if trial.config == config:
                    return trial.id
        log.warning("tuning DB: the ok trial row of %s at %s with config %s is gone or altered; "
                    "recording it again from the study", key.kernel_hash, key.sizes_key, config)
        return self.record_trial(key, config, TrialState.OK, "restored from the Optuna study", quantiles,
                                 study=study)

    def lookup(self, key: TuningKey, software: dict[str, Any]) -> LookupResult:
        """Exact winner, else the stale one (marked so), else the nearest sizes, else a miss."""
        software = json_object(software, "software")
        with self.session(write=False) as s:  # a hit takes no write lock
            result, outdated = _lookup(s, key, software)
        if outdated is not None and result.winner is not None:
            unchanged = (Winner.id == outdated.id, Winner.updated_at == outdated.updated_at)
            with self.session() as s:  # unless re-measured meanwhile
                s.execute(update(Winner).where(*unchanged).values(stale=True))
            result = replace(result, winner=replace(result.winner, stale=True))
        return result

    def import_jsonl(self, fp: Iterable[str], validate_config: ConfigValidator) -> ParsedImport:
        """Validate every row, then upsert all in one transaction; a bad row imports nothing. Of
        two rows with one key the faster is imported (``duplicates`` says which were dropped)."""
        parsed = parse_lines(fp, validate_config)
        with self.session() as s:
            for record in parsed.records:
                kernel_id = _ensure_kernel(s, record.kernel_hash, record.backend, record.name, None)
                _upsert_winner(s, kernel_id, _ensure_hardware(s, record.hardware), record)
        return parsed


# -- helpers ---------------------------------------------------------------------------------

def _ensure_kernel(
    s: Session, kernel_hash: str, backend: str, name: str, ir_text: str | None
) -> int:
    """Insert the kernel unless present (filling in a missing IR text); return its id."""
    known = s.scalar(select(Kernel.id).where(*_kernel_filter(kernel_hash, backend)))
    stmt = dialect_insert(s, Kernel).values(
        structural_hash=kernel_hash, backend=backend, name=name, ir_text=ir_text
    )
    ir_column = Kernel.__table__.c.ir_text
    stmt = stmt.on_conflict_do_update(
        index_elements=["structural_hash", "backend"],
        set_={"ir_text": func.coalesce(ir_column, stmt.excluded.ir_text)},
    )
    s.execute(stmt)
    kernel_id = s.scalars(select(Kernel.id).where(*_kernel_filter(kernel_hash, backend))).one()
    if known is None:
        _adopt_id(s, "kernel_id", kernel_id)
    return kernel_id


def _ensure_hardware(s: Session, hw: HardwareInfo) -> int:
    """Insert the hardware unless its fingerprint is known; return its id."""
    known = s.scalar(select(Hardware.id).where(Hardware.fingerprint == hw.fingerprint))
    if known is not None:
        return known
    stmt = dialect_insert(s, Hardware).values(**hw.to_dict())
    s.execute(stmt.on_conflict_do_nothing(index_elements=["fingerprint"]))
    hardware_id = s.scalars(select(Hardware.id).where(Hardware.fingerprint == hw.fingerprint)).one()
    _adopt_id(s, "hardware_id", hardware_id)
    return hardware_id


def _adopt_id(s: Session, column: str, new_id: int) -> None:
    """Before a new kernel or hardware row is used, delete trials and winners left naming its id by
    a row deleted with foreign keys off: SQLite reuses the largest rowid, and those rows belong to
    another kernel or machine. Only SQLite: PostgreSQL always enforces the foreign keys, and there
    a concurrent writer may already have added rows of the new id. On SQLite this runs in the
    transaction that inserted the row, under its write lock."""
    if s.get_bind().dialect.name == "sqlite":
        for model in (Winner, Trial):
            if _delete_orphans(s, model, **{column: new_id}) == 0:
                continue
            log.warning("tuning DB: deleted %s rows left by a deleted %s row with id %s",
                        model.__table__.name, column.removesuffix("_id"), new_id)


def _delete_orphans(s: Session, model: type[Trial] | type[Winner], **ids: int) -> int:
    """Delete rows of ``model`` whose kernel or hardware row is gone (only possible where foreign
    keys were off, e.g. a row deleted by hand with the sqlite3 shell); ``ids`` restricts it to
    rows naming those ids. Returns how many were deleted."""
    gone = (model.kernel_id.not_in(select(Kernel.id)), model.hardware_id.not_in(select(Hardware.id)))
    stmt = delete(model).where(or_(*gone), *(getattr(model, k) == v for k, v in ids.items()))
    return s.execute(stmt, execution_options={"synchronize_session": False}).rowcount


def _backs(t: Trial | None, w: Winner) -> bool:
    """Whether trial ``t`` can back winner ``w``: an ok trial of the same key with the same config."""
    if t is None:
        return False
    same_key = (t.kernel_id, t.hardware_id, t.sizes_key, t.dtypes_key) == (
        w.kernel_id, w.hardware_id, w.sizes_key, w.dtypes_key)
    return same_key and t.state == TrialState.OK and t.config == w.config


def _kernel_filter(kernel_hash: str, backend: str) -> tuple[ColumnElement[bool], ...]:
    return Kernel.structural_hash == kernel_hash, Kernel.backend == backend


def _where_given(stmt: Any, *filters: tuple[Any, Any]) -> Any:
    """``stmt`` restricted to ``column == value`` for each (column, value) whose value is not None."""
    return stmt.where(*(column == value for column, value in filters if value is not None))


def _hardware_info(h: Hardware) -> HardwareInfo:
    return HardwareInfo(h.kind, h.name, h.capability, h.cores, h.memory_bytes)


def _key_ids(s: Session, key: TuningKey) -> tuple[int, int]:
    """(kernel id, hardware id) of ``key``; the kernel must be registered, hardware is added."""
    kernel_id = s.scalar(select(Kernel.id).where(*_kernel_filter(key.kernel_hash, key.backend)))
    if kernel_id is None:
        raise UnknownKernelError(
            f"kernel {key.kernel_hash!r} for backend {key.backend!r} is not registered; "
            "call TuningDB.register_kernel first"
        )
    return kernel_id, _ensure_hardware(s, key.hardware)


def _existing(s: Session, key: TuningKey) -> tuple[Kernel, Hardware] | None:
    """The kernel and hardware rows of ``key``, or None if either is unknown (nothing added)."""
    kernel = s.scalar(select(Kernel).where(*_kernel_filter(key.kernel_hash, key.backend)))
    hardware = s.scalar(select(Hardware).where(Hardware.fingerprint == key.hardware.fingerprint))
    return None if kernel is None or hardware is None else (kernel, hardware)


def _key_filter(
    model: type[Trial] | type[Winner], key: TuningKey,
    kernel_id: int | None = None, hardware_id: int | None = None,
) -> list[ColumnElement[bool]]:
    """WHERE clauses for ``key``'s rows of ``model``: by ids, or by the joined hash/fingerprint."""
    clauses = [model.sizes_key == key.sizes_key, model.dtypes_key == key.dtypes_key]
    if kernel_id is None or hardware_id is None:
        clauses += _kernel_filter(key.kernel_hash, key.backend)
        clauses.append(Hardware.fingerprint == key.hardware.fingerprint)
    else:
        clauses += [model.kernel_id == kernel_id, model.hardware_id == hardware_id]
    return clauses


def _check_quantiles(
    state: TrialState, quantiles: Sequence[float] | None
) -> tuple[float | None, ...]:
    """(p20, p50, p80) validated; None timings for a trial without measurements."""
    if quantiles is None:
        if state == TrialState.OK:
            raise ValueError("an ok trial needs its (p20, p50, p80) timings")
        return (None, None, None)
    values = tuple(positive_float(q, "timing quantile") for q in quantiles)
    if len(values) != 3 or not values[0] <= values[1] <= values[2]:
        raise ValueError(f"quantiles must be ascending (p20, p50, p80), got {tuple(quantiles)!r}")
    return values


def _check_winning_trial(
    s: Session, trial_id: int, kernel_id: int, hardware_id: int, key: TuningKey
) -> None:
    """Only an ok trial of the same key may back a winner."""
    trial = s.get(Trial, trial_id)
    if trial is None:
        raise ValueError(f"trial {trial_id} does not exist")
    if trial.state != TrialState.OK:
        raise ValueError(f"trial {trial_id} is {trial.state.value}; only an ok trial can win")
    same = (trial.kernel_id, trial.hardware_id, trial.sizes_key, trial.dtypes_key)
    if same != (kernel_id, hardware_id, key.sizes_key, key.dtypes_key):
        raise ValueError(f"trial {trial_id} was measured for another tuning key")


def _offer_winner(s: Session, kernel_id: int, hardware_id: int, record: WinnerRecord) -> WinnerRecord:
    """Store ``record`` unless the row of its key is as fast under the same software; return the
    record stored. Runs inside the caller's transaction, holding the row (see ``store_winner``)."""
    key = record.key
    where = (Winner.kernel_id == kernel_id, Winner.hardware_id == hardware_id,
             Winner.sizes_key == key.sizes_key, Winner.dtypes_key == key.dtypes_key)
    while True:
        row = s.scalar(select(Winner).where(*where).with_for_update())
        if row is None:
            inserted = s.execute(_winner_insert(s, kernel_id, hardware_id, record).on_conflict_do_nothing(
                index_elements=list(_WINNER_KEY)))
            if inserted.rowcount:
                return record
            continue  # a concurrent writer inserted the row first: decide against it, locked
        current = winner_record(row, s.get_one(Kernel, kernel_id), _hardware_info(s.get_one(Hardware, hardware_id)))
        broken = row.trial_id is not None and not _backs(s.get(Trial, row.trial_id), row)  # its trial is gone
        if current is not None and not broken and not current.stale and current.software == record.software \
                and current.time_us <= record.time_us:
            return current
        _upsert_winner(s, kernel_id, hardware_id, record)
        return record


def _winner_insert(s: Session, kernel_id: int, hardware_id: int, record: WinnerRecord) -> Any:
    """An INSERT of ``record``'s winner row (the caller adds its ON CONFLICT clause)."""
    key = record.key
    return dialect_insert(s, Winner).values(
        kernel_id=kernel_id, hardware_id=hardware_id, sizes_key=key.sizes_key, dtypes_key=key.dtypes_key,
        rank=len(key.sizes), sizes=list(key.sizes), dtypes=list(key.dtypes), config=record.config,
        time_us=record.time_us, default_time_us=record.default_time_us, speedup=record.speedup,
        software=record.software, stale=record.stale, trial_id=record.trial_id,
        updated_at=record.updated_at or utcnow(),
    )


def _upsert_winner(s: Session, kernel_id: int, hardware_id: int, record: WinnerRecord) -> None:
    """Insert or replace the one winner row of ``record``'s key."""
    stmt = _winner_insert(s, kernel_id, hardware_id, record)
    changes = {c.name: stmt.excluded[c.name] for c in Winner.__table__.columns
               if c.name not in (*_WINNER_KEY, "id")}
    s.execute(stmt.on_conflict_do_update(index_elements=list(_WINNER_KEY), set_=changes))


def _lookup(
    s: Session, key: TuningKey, software: dict[str, Any]
) -> tuple[LookupResult, Winner | None]:
    """The lookup answer, and the winner row to mark stale (if it is not marked yet)."""
    found = _existing(s, key)
    if found is None:
        return LookupResult(LookupKind.MISS), None
    kernel, hardware = found
    row = s.scalar(select(Winner).where(*_key_filter(Winner, key, kernel.id, hardware.id)))
    if row is None:
        return _nearest(s, key, kernel, hardware), None
    record = winner_record(row, kernel, _hardware_info(hardware))
    if record is None:  # damaged: served as a miss (a warning names the row)
        return LookupResult(LookupKind.MISS), None
    if row.software == software:
        return LookupResult(LookupKind.EXACT, record), None
    return LookupResult(LookupKind.STALE, record), None if row.stale else row


def _log_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """Euclidean distance between two size tuples in log space (sizes clamped to >= 1)."""
    return math.sqrt(sum((math.log(max(x, 1)) - math.log(max(y, 1))) ** 2 for x, y in zip(a, b)))


def _nearest(s: Session, key: TuningKey, kernel: Kernel, hardware: Hardware) -> LookupResult:
    """The winner of the same kernel/hardware/dtypes/rank at the nearest other sizes."""
    rows = s.scalars(select(Winner).where(
        Winner.kernel_id == kernel.id, Winner.hardware_id == hardware.id,
        Winner.dtypes_key == key.dtypes_key, Winner.rank == len(key.sizes),
        Winner.sizes_key != key.sizes_key,
    )).all()
    machine = _hardware_info(hardware)
    records = [r for r in (winner_record(w, kernel, machine) for w in rows) if r is not None]
    if not records:
        return LookupResult(LookupKind.MISS)
    best = min(records, key=lambda r: (_log_distance(r.sizes, key.sizes), r.key.sizes_key))
    return LookupResult(LookupKind.NEAREST, best, _log_distance(best.sizes, key.sizes))


@lru_cache(maxsize=None)
def open_db(url: str) -> TuningDB:
    """The tuning DB at ``url`` (opened and migrated once per process)."""
    return TuningDB(url)
