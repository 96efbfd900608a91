"""The tuning service's request queue, in the tuning DB (``ln_requests``).

Exactly-once comes from the database, not from workers trusting each other:

* enqueue is one ``INSERT ... ON CONFLICT (active_key) DO UPDATE``: requests for the same key
  coalesce into the live one, which keeps the highest priority and the largest budget;
* a claim is one transaction that picks the highest-priority matching request with
  ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (concurrent claimers skip each other's row)
  and under ``BEGIN IMMEDIATE`` on SQLite (one writer at a time), and leases it to its owner;
* every later change (heartbeat, done, failed, retry) is conditional on the owner still holding
  the lease, so a worker whose lease expired and was taken over cannot finish the request twice.

Lease times come from the database server's clock on PostgreSQL (one clock for every host) and
from this machine's on SQLite (one machine).
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from loopnest.core.hardware import HardwareInfo
from loopnest.db.api import TuningDB
from loopnest.db.engine import dialect_insert
from loopnest.db.models import CORRUPT, RequestState, TuneRequest, utcnow
from loopnest.db.queue_records import HardwareTarget, NewRequest, RequestRecord

FINISHED = (RequestState.DONE, RequestState.FAILED, RequestState.CANCELLED)


class LeaseLost(RuntimeError):
    """The request is no longer leased to this worker (expired and taken over, or cancelled)."""


class RequestQueue:
    """Enqueue, claim, heartbeat, finish and list tuning requests in ``db``."""

    def __init__(self, db: TuningDB):
        self.db = db

    def enqueue(self, request: NewRequest) -> int:
        """Store ``request``, or merge it into the live request of its key; returns the id."""
        t = TuneRequest.__table__.c
        with self.db.session() as s:
            now = db_now(s)
            stmt = dialect_insert(s, TuneRequest).values(
                active_key=request.active_key, kernel_hash=request.kernel_hash, backend=request.backend,
                name=request.name, ir_text=request.ir_text, sizes=list(request.sizes),
                dtypes=list(request.dtypes), symbols=dict(request.symbols), hardware_kind=request.target.kind,
                hardware_fingerprint=request.target.fingerprint, hardware_capability=request.target.capability,
                priority=request.priority, trials=request.trials, max_attempts=request.max_attempts, attempts=0,
                state=RequestState.PENDING.value, requested_by=request.requested_by, created_at=now,
            )
            new = stmt.excluded
            stmt = stmt.on_conflict_do_update(index_elements=["active_key"], set_={
                "priority": case((new.priority > t.priority, new.priority), else_=t.priority),
                "trials": case((new.trials > t.trials, new.trials), else_=t.trials),
            })
            return s.execute(stmt.returning(t.id)).scalar_one()

    def claim(self, owner: str, hardware: HardwareInfo, backends: Sequence[str], lease_s: float) -> RequestRecord | None:
        """Lease the highest-priority request this worker can tune (oldest first among equals), or
        None. Requests whose lease expired are claimable again, until their attempts run out."""
        with self.db.session() as s:
            now = db_now(s)
            expired = and_(TuneRequest.state == RequestState.RUNNING, TuneRequest.lease_until < now)
            s.execute(update(TuneRequest).where(expired, TuneRequest.attempts >= TuneRequest.max_attempts).values(
                state=RequestState.FAILED, active_key=None, finished_at=now, lease_until=None,
                error=func.coalesce(TuneRequest.error, "") + "lease of " + func.coalesce(TuneRequest.owner, "?")
                + " expired (the worker stopped sending heartbeats) on the last attempt"))
            query = (select(TuneRequest)
                     .where(or_(TuneRequest.state == RequestState.PENDING, expired),
                            TuneRequest.backend.in_(list(backends)), _matches(hardware))
                     .order_by(TuneRequest.priority.desc(), TuneRequest.created_at, TuneRequest.id)
                     .limit(1).with_for_update(skip_locked=True))
            while (row := s.scalar(query)) is not None:
                try:
                    _record(row)
                    break
                except ValueError as exc:  # a damaged row: failed with the reason, never run
                    _finish(row, RequestState.FAILED, now, str(exc))
                    s.flush()
            if row is None:
                return None
            if row.state == RequestState.RUNNING:
                row.error = f"lease of {row.owner} expired on attempt {row.attempts}; "
            row.state, row.owner, row.started_at = RequestState.RUNNING, owner, now
            row.lease_until = now + timedelta(seconds=lease_s)
            row.attempts += 1
            s.flush()
            return _record(row)

    def joinable(self, owner: str, hardware: HardwareInfo, backends: Sequence[str], min_trials: int,
                 skip: Collection[int] = ()) -> RequestRecord | None:
        """A request leased to another worker, with a live lease, its study started on this hardware
        model, and a budget of at least ``min_trials`` (highest priority first): one whose study
        more workers can share. Nothing is changed; the owner still reports the outcome."""
        with self.db.session(write=False) as s:
            query = (select(TuneRequest)
                     .where(TuneRequest.state == RequestState.RUNNING, TuneRequest.lease_until > db_now(s),
                            TuneRequest.owner != owner, TuneRequest.study.like(f"%:{hardware.fingerprint}"),
                            TuneRequest.trials >= min_trials, TuneRequest.id.not_in(list(skip)),
                            TuneRequest.backend.in_(list(backends)), _matches(hardware))
                     .order_by(TuneRequest.priority.desc(), TuneRequest.created_at).limit(1))
            row = s.scalar(query)
            return None if row is None else _record(row)

    def heartbeat(self, request_id: int, owner: str, lease_s: float) -> bool:
        """Extend the lease; False when ``owner`` no longer holds it."""
        with self.db.session() as s:
            until = db_now(s) + timedelta(seconds=lease_s)
            return s.execute(_owned(request_id, owner).values(lease_until=until)).rowcount == 1

    def set_study(self, request_id: int, owner: str, study: str) -> None:
        """Record the Optuna study the request is tuned in."""
        with self.db.session() as s:
            if s.execute(_owned(request_id, owner).values(study=study)).rowcount != 1:
                raise LeaseLost(f"request {request_id} is no longer leased to {owner}")

    def complete(self, request_id: int, owner: str, budget: int) -> RequestState:
        """Mark the request done, or pending again when its budget was raised past ``budget`` (the
        one the worker ran) meanwhile, so the study resumes; LeaseLost when ``owner`` lost it."""
        with self.db.session() as s:
            row = _held(s, request_id, owner)
            if row.trials > budget:
                row.state, row.owner, row.lease_until = RequestState.PENDING, None, None
            else:
                _finish(row, RequestState.DONE, db_now(s), row.error)  # earlier attempts' errors stay
            return row.state

    def fail(self, request_id: int, owner: str, error: str, retry: bool = True) -> RequestState:
        """Record ``error``: pending again while attempts remain (and ``retry``), else failed."""
        with self.db.session() as s:
            row = _held(s, request_id, owner)
            if retry and row.attempts < row.max_attempts:
                row.state, row.owner, row.lease_until, row.error = RequestState.PENDING, None, None, error[-4000:]
            else:
                _finish(row, RequestState.FAILED, db_now(s), error[-4000:])
            return row.state

    def cancel(self, request_id: int) -> RequestRecord:
        """Cancel a pending or running request (its worker stops at its next heartbeat)."""
        with self.db.session() as s:
            row = s.get(TuneRequest, request_id, with_for_update=True)
            if row is None:
                raise KeyError(f"no request {request_id}; `autotune queue` lists them")
            if row.state in FINISHED:
                raise ValueError(f"request {request_id} is already {row.state.value}")
            _finish(row, RequestState.CANCELLED, db_now(s), "cancelled")
            s.flush()
            return _record(row)

    def get(self, request_id: int) -> RequestRecord | None:
        """One request, or None."""
        with self.db.session(write=False) as s:
            row = s.get(TuneRequest, request_id)
            return None if row is None else _record(row)

    def list(self, states: Sequence[RequestState | str] = ()) -> list[RequestRecord]:
        """Requests, oldest first, optionally only in ``states``."""
        query = select(TuneRequest).order_by(TuneRequest.id)
        if states:
            query = query.where(TuneRequest.state.in_([RequestState(x) for x in states]))
        with self.db.session(write=False) as s:
            return [_record(row) for row in s.scalars(query)]

    def now(self) -> datetime:
        """The queue's clock (the server's on PostgreSQL), as naive UTC."""
        with self.db.session(write=False) as s:
            return db_now(s)


def db_now(s: Session) -> datetime:
    """The current time as naive UTC: the server's clock on PostgreSQL, this machine's on SQLite."""
    if s.get_bind().dialect.name == "postgresql":
        return s.scalar(select(func.timezone("UTC", func.statement_timestamp())))
    return utcnow()


def _matches(hardware: HardwareInfo) -> Any:
    """SQL: the request's target admits ``hardware``."""
    tokens = [t for t in hardware.capability.split(",") if t]
    return or_(TuneRequest.hardware_fingerprint == hardware.fingerprint,
               and_(TuneRequest.hardware_fingerprint.is_(None), TuneRequest.hardware_kind == hardware.kind,
                    or_(TuneRequest.hardware_capability.is_(None), TuneRequest.hardware_capability.in_(tokens))))


def _owned(request_id: int, owner: str) -> Any:
    """An UPDATE of the request, effective only while ``owner`` holds its lease."""
    return update(TuneRequest).where(TuneRequest.id == request_id, TuneRequest.owner == owner,
                                     TuneRequest.state == RequestState.RUNNING)


def _held(s: Session, request_id: int, owner: str) -> TuneRequest:
    """The request row, locked, if ``owner`` holds its lease; LeaseLost otherwise."""
    row = s.get(TuneRequest, request_id, with_for_update=True)
    if row is None or row.owner != owner or row.state != RequestState.RUNNING:
        now = "gone" if row is None else f"{row.state.value}, owner {row.owner}"
        raise LeaseLost(f"request {request_id} is no longer leased to {owner} (it is {now})")
    return row


def _finish(row: TuneRequest, state: RequestState, now: datetime, error: str | None) -> None:
    row.state, row.active_key, row.finished_at, row.lease_until, row.error = state, None, now, None, error


def _checked(row: TuneRequest, name: str, kind: type) -> Any:
    """A JSON column's value, or ValueError naming the damaged row and column."""
    value = getattr(row, name)
    if value is CORRUPT or not isinstance(value, kind):
        raise ValueError(f"ln_requests.id={row.id}: column {name} is damaged: {str(value)[:60]}")
    return value


def _record(row: TuneRequest) -> RequestRecord:
    v = {name: _checked(row, name, kind) for name, kind in (("sizes", list), ("dtypes", list), ("symbols", dict))}
    target = HardwareTarget(row.hardware_kind, row.hardware_fingerprint, row.hardware_capability)
    return RequestRecord(
        id=row.id, state=RequestState(row.state), kernel_hash=row.kernel_hash, name=row.name, backend=row.backend,
        ir_text=row.ir_text, sizes=tuple(v["sizes"]), dtypes=tuple(v["dtypes"]), symbols=dict(v["symbols"]),
        target=target, priority=row.priority, trials=row.trials, attempts=row.attempts,
        max_attempts=row.max_attempts, owner=row.owner, requested_by=row.requested_by, study=row.study,
        error=row.error, created_at=row.created_at, started_at=row.started_at, finished_at=row.finished_at,
        lease_until=row.lease_until,
    )
