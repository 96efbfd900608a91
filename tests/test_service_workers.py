"""The tuning service with real worker processes on a real PostgreSQL server: exactly once with four
workers, a SIGKILLed worker's request finished by another after its lease expired (budget counted
once), two workers on one device measuring in turn, and a request whose IR does not parse."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
import torch
from sqlalchemy import create_engine, text

import loopnest as ln
from autotune_support import db_url  # noqa: F401 - db_url is a fixture
from loopnest.autotune import request
from loopnest.autotune import worker as worker_module
from loopnest.backends import registry
from loopnest.db.api import TuningDB
from loopnest.db.models import RequestState
from loopnest.db.queue import RequestQueue
from loopnest.db.queue_records import HardwareTarget, NewRequest

POSTGRES = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def softmax_requests(url: str, rows: range, trials: int, cols: int = 32) -> list[int]:
    """One request per row count: the same softmax kernel (symbolic rows, so one build serves all)."""
    x = ln.placeholder("x", ("N", cols), ln.float32)
    e = ln.exp(x - ln.max(x, axis=-1, keepdim=True))
    fn = ln.compile(e / e.sum(axis=-1, keepdim=True))
    ids = []
    for n in rows:
        X = torch.randn(n, cols)
        ids += request(fn.graph(X), [X], trials=trials, backend="cpp", db_url=url)
    return ids


def start_worker(url: str, *flags: str, log=None) -> subprocess.Popen:
    args = [sys.executable, "-m", "loopnest.cli", "worker", "--db", url, "--backend", "cpp", "--workers", "1",
            "--measure", "0.005", *flags]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL, env=dict(os.environ))


def measured_trials(url: str) -> dict[str, list[tuple[str, str | None]]]:
    """(state, message) of every ln_trials row that is not an invalid point, by study."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT study, state, message FROM ln_trials WHERE state != 'invalid'")).all()
    engine.dispose()
    out: dict[str, list] = {}
    for study, state, message in rows:
        out.setdefault(study, []).append((state, message))
    return out


@pytest.mark.slow  # about 160 s on two shared cores
@POSTGRES
def test_four_workers_drain_forty_requests_exactly_once(db_url, tmp_path):
    ids = softmax_requests(db_url, range(8, 48), trials=2)
    assert len(set(ids)) == 40
    workers = [start_worker(db_url, "--idle-exit", "4", "--lease", "30") for _ in range(4)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0, 0, 0]
    records = RequestQueue(TuningDB(db_url)).list()
    assert [(r.state, r.attempts) for r in records] == [(RequestState.DONE, 1)] * 40, [r.error for r in records]
    assert len({r.owner for r in records}) >= 2                                   # the work was shared
    db = TuningDB(db_url)
    winners = db.winners(backend="cpp")
    assert sorted(w.sizes[0] for w in winners) == list(range(8, 48))            # one winner per key
    studies = {r.study for r in records}
    assert len(studies) == 40
    per_study = measured_trials(db_url)
    assert {s: len(per_study[s]) for s in studies} == {s: 2 for s in studies}    # each budget run once
    storage = optuna.storages.RDBStorage(db_url)
    for name in studies:
        numbers = [t.number for t in optuna.load_study(study_name=name, storage=storage).trials]
        assert len(numbers) == len(set(numbers))
    db.close()


@POSTGRES
def test_a_killed_worker_s_request_is_finished_by_another_after_its_lease(db_url, tmp_path):
    [rid] = softmax_requests(db_url, range(64, 65), trials=4)
    queue = RequestQueue(TuningDB(db_url))
    first = start_worker(db_url, "--lease", "3", "--measure", "0.4")
    deadline = time.monotonic() + 120
    while True:  # kill it once it holds the lease and has measured a trial
        record = queue.get(rid)
        done = measured_trials(db_url).get(record.study, []) if record.study else []
        if record.state == RequestState.RUNNING and any(state == "ok" for state, _ in done):
            break
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert queue.get(rid).state == RequestState.RUNNING                          # the lease is still held
    second = start_worker(db_url, "--lease", "3", "--idle-exit", "6", "--measure", "0.01")
    assert second.wait(timeout=180) == 0
    record = queue.get(rid)
    assert (record.state, record.attempts) == (RequestState.DONE, 2), record.error
    assert record.owner.split(":")[1] == str(second.pid)
    trials = measured_trials(db_url)[record.study]
    counted = [t for t in trials if t[0] != "running" and not (t[1] or "").startswith("interrupted")]
    assert len(counted) == 4, trials                                              # the budget, once
    assert not any(state == "running" for state, _ in trials)
    assert len(TuningDB(db_url).winners(backend="cpp")) == 1


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_two_workers_on_one_device_never_time_at_once(db_url, tmp_path):
    softmax_requests(db_url, range(16, 24), trials=3)
    log = tmp_path / "windows.jsonl"
    workers = [start_worker(db_url, "--idle-exit", "3", "--timing-log", str(log)) for _ in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    windows = sorted((w["start"], w["end"], w["owner"]) for w in map(json.loads, log.read_text().splitlines()))
    owners = Counter(owner for _, _, owner in windows)
    assert len(owners) == 2 and min(owners.values()) >= 3, owners                # both measured
    for (_, end, _), (start, _, _) in zip(windows, windows[1:]):
        assert start >= end                                                       # no overlap
    assert all(r.state == RequestState.DONE for r in RequestQueue(TuningDB(db_url)).list())


@POSTGRES
def test_a_request_whose_ir_does_not_parse_fails_without_running(db_url):
    queue = RequestQueue(TuningDB(db_url))
    hardware = registry.get("cpp").hardware()
    bad = NewRequest("0" * 20, "cpp", "bad", "kernel p[8] r[]\n  __import__('os')", (8,), ("float32",),
                     HardwareTarget.of(hardware), trials=2)
    rid = queue.enqueue(bad)
    worker = start_worker(db_url, "--idle-exit", "2", "--lease", "10")
    assert worker.wait(timeout=120) == 0
    record = queue.get(rid)
    assert record.state == RequestState.FAILED and record.attempts == 1
    assert "does not parse" in record.error
    assert measured_trials(db_url) == {}


@POSTGRES
def test_two_workers_share_one_large_request_s_study_within_its_budget(db_url, tmp_path):
    [rid] = softmax_requests(db_url, range(96, 97), trials=8)
    log = tmp_path / "windows.jsonl"
    workers = [start_worker(db_url, "--idle-exit", "4", "--lease", "30", "--measure", "0.3", "--share-above", "8",
                            "--timing-log", str(log)) for _ in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    record = RequestQueue(TuningDB(db_url)).get(rid)
    assert (record.state, record.attempts) == (RequestState.DONE, 1)
    owners = Counter(json.loads(line)["owner"] for line in log.read_text().splitlines())
    assert len(owners) == 2, owners                                               # both measured its configs
    assert len(measured_trials(db_url)[record.study]) == 8                        # the budget is the study's
    assert len(TuningDB(db_url).winners(backend="cpp")) == 1


def test_one_worker_process_per_device_each_seeing_its_own_with_multicast_off(monkeypatch):
    started = []

    class FakeProcess:
        def __init__(self, argv, env):
            started.append((argv, env))
            self.status = len(started) - 1  # the second process fails

        def wait(self):
            return self.status

    monkeypatch.setattr(worker_module.subprocess, "Popen", FakeProcess)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # a caller's environment cannot turn it back on
    assert worker_module.spawn_per_device(["0", "1"], ["--db", "sqlite:///x.db"]) == 1
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in started] == ["0", "1"]
    for argv, env in started:
        assert argv[-3:] == ["worker", "--db", "sqlite:///x.db"]
        assert {k: env[k] for k in worker_module.NO_MULTICAST} == {
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
