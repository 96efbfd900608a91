"""The request queue on SQLite and PostgreSQL: coalescing, claims by priority and hardware, leases,
retries, cancellation, and concurrent claimers that never take one request twice."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from autotune_support import db_url  # noqa: F401 - db_url is a fixture
from loopnest.core.hardware import HardwareInfo
from loopnest.db.api import TuningDB
from loopnest.db.models import RequestState
from loopnest.db.queue import LeaseLost, RequestQueue
from loopnest.db.queue_records import HardwareTarget, NewRequest

CPU = HardwareInfo("cpu", "Test CPU", "avx,avx2,fma,avx512f", 8, 1 << 30)
OTHER_CPU = HardwareInfo("cpu", "Old CPU", "avx,avx2", 4, 1 << 30)
GPU = HardwareInfo("cuda", "NVIDIA H200", "sm_90", 132, 140 << 30)


def new(n: int = 0, target: HardwareTarget | None = None, **changes) -> NewRequest:
    base = dict(kernel_hash=f"hash{n}", backend="cpp", name=f"k{n}", ir_text="kernel ...", sizes=(64, 32),
                dtypes=("float32", "float32"), target=target or HardwareTarget.of(CPU), trials=2)
    return NewRequest(**{**base, **changes})


@pytest.fixture
def queue(db_url):
    db = TuningDB(db_url)
    yield RequestQueue(db)
    db.close()


def test_same_key_coalesces_keeping_highest_priority_and_largest_budget(queue):
    first = queue.enqueue(new(priority=1, trials=8))
    assert queue.enqueue(new(priority=5, trials=2)) == first
    assert queue.enqueue(new(priority=0, trials=3, sizes=(64, 64))) != first   # another key
    [row] = [r for r in queue.list() if r.id == first]
    assert (row.priority, row.trials, row.state) == (5, 8, RequestState.PENDING)


def test_claims_go_by_priority_then_age_and_match_the_hardware(queue):
    low = queue.enqueue(new(0, priority=0))
    high = queue.enqueue(new(1, priority=9))
    avx512 = queue.enqueue(new(2, target=HardwareTarget.parse("any avx512 cpu", "cpu"), priority=5))
    gpu = queue.enqueue(new(3, target=HardwareTarget.parse("any sm_90", "cuda"), backend="triton", priority=99))
    assert queue.claim("old", OTHER_CPU, ["cpp"], 30) is None          # no request targets it
    order = [queue.claim("w", CPU, ["cpp"], 30).id for _ in range(3)]
    assert order == [high, avx512, low]
    assert queue.claim("w", CPU, ["cpp"], 30) is None
    assert queue.claim("g", GPU, ["triton"], 30).id == gpu


def test_expired_lease_is_claimed_again_and_the_old_owner_cannot_finish(queue):
    rid = queue.enqueue(new(max_attempts=2))
    assert queue.claim("a", CPU, ["cpp"], 0.2).attempts == 1
    assert queue.claim("b", CPU, ["cpp"], 30) is None                   # leased
    time.sleep(0.4)
    taken = queue.claim("b", CPU, ["cpp"], 30)
    assert (taken.id, taken.owner, taken.attempts) == (rid, "b", 2) and "lease of a expired" in taken.error
    assert not queue.heartbeat(rid, "a", 30)
    with pytest.raises(LeaseLost):
        queue.complete(rid, "a", budget=2)
    assert queue.complete(rid, "b", budget=2) == RequestState.DONE
    assert queue.get(rid).state == RequestState.DONE and queue.get(rid).finished_at is not None


def test_last_attempt_expiring_fails_the_request(queue):
    rid = queue.enqueue(new(max_attempts=1))
    queue.claim("a", CPU, ["cpp"], 0.2)
    time.sleep(0.4)
    assert queue.claim("b", CPU, ["cpp"], 30) is None
    row = queue.get(rid)
    assert row.state == RequestState.FAILED and "expired" in row.error


def test_errors_retry_until_max_attempts_then_fail_with_the_error(queue):
    rid = queue.enqueue(new(max_attempts=2))
    queue.claim("a", CPU, ["cpp"], 30)
    assert queue.fail(rid, "a", "RuntimeError: boom 1") == RequestState.PENDING
    queue.claim("a", CPU, ["cpp"], 30)
    assert queue.fail(rid, "a", "RuntimeError: boom 2") == RequestState.FAILED
    assert queue.get(rid).error == "RuntimeError: boom 2"
    again = queue.enqueue(new(max_attempts=2))       # a finished request no longer coalesces
    assert again != rid and queue.get(again).state == RequestState.PENDING


def test_a_budget_raised_while_running_sends_the_request_back(queue):
    rid = queue.enqueue(new(trials=2))
    queue.claim("a", CPU, ["cpp"], 30)
    queue.enqueue(new(trials=5))
    assert queue.complete(rid, "a", budget=2) == RequestState.PENDING
    assert queue.claim("b", CPU, ["cpp"], 30).trials == 5


def test_cancel(queue):
    rid = queue.enqueue(new())
    queue.claim("a", CPU, ["cpp"], 30)
    assert queue.cancel(rid).state == RequestState.CANCELLED
    assert not queue.heartbeat(rid, "a", 30)
    with pytest.raises(ValueError, match="already cancelled"):
        queue.cancel(rid)
    with pytest.raises(KeyError, match="no request 999"):
        queue.cancel(999)


def test_hardware_target_parsing():
    assert HardwareTarget.parse(CPU.fingerprint, "cpu") == HardwareTarget.of(CPU)
    assert HardwareTarget.parse("any sm_90", "cuda").matches(GPU)
    assert HardwareTarget.parse("any cpu", "cpu").matches(OTHER_CPU)
    assert not HardwareTarget.parse("any avx512 CPU", "cpu").matches(OTHER_CPU)
    with pytest.raises(ValueError, match="names cuda hardware"):
        HardwareTarget.parse("any sm_90 cuda", "cpu")
    with pytest.raises(ValueError, match="fingerprint"):
        HardwareTarget.parse("H200", "cuda")


def test_concurrent_claimers_never_share_a_request(queue, db_url):
    ids = {queue.enqueue(new(n)) for n in range(30)}
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        mine = RequestQueue(TuningDB(db_url))
        while (r := mine.claim(name, CPU, ["cpp"], 30)) is not None:
            with lock:
                claimed.append(r.id)
            mine.complete(r.id, name, budget=2)
        mine.db.close()

    threads = [threading.Thread(target=claimer, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(ids)
    assert all(r.state == RequestState.DONE for r in queue.list())


def test_a_damaged_request_row_fails_with_the_reason_and_is_never_handed_out(queue):
    rid = queue.enqueue(new())
    with queue.db.engine.begin() as conn:
        conn.execute(text("UPDATE ln_requests SET symbols = '[1, 2]' WHERE id = :i"), {"i": rid})
    assert queue.claim("a", CPU, ["cpp"], 30) is None
    with queue.db.engine.connect() as conn:
        state, error = conn.execute(text("SELECT state, error FROM ln_requests WHERE id = :i"), {"i": rid}).one()
    assert state == "failed" and f"ln_requests.id={rid}" in error and "symbols" in error
