"""``tune="queue"`` end to end on PostgreSQL: the first compile runs no benchmark and enqueues its
misses, a worker process drains the queue, and a compile in a new process serves the winners; and
the ``autotune enqueue`` / ``queue`` / ``queue cancel`` commands."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from autotune_support import db_url  # noqa: F401 - db_url is a fixture
from loopnest import cli
from loopnest.autotune import request
from loopnest.db.api import TuningDB
from loopnest.db.models import RequestState
from loopnest.db.queue import RequestQueue

COMPILE = textwrap.dedent("""
    import json, sys
    import torch
    from loopnest.autotune.options import TuneSettings
    from loopnest.autotune.sweep import compile_target, flat_tensors, target
    from loopnest.core.counters import counters
    t = target("softmax", "cpp", "tiny")
    counters.reset()
    fn = compile_target(t, "cpp", "queue", TuneSettings(db_url=sys.argv[1], trials=2))
    correct = all(torch.allclose(a, b, atol=1e-5, rtol=1e-5) for a, b in zip(flat_tensors(fn(*t.inputs)),
                                                                              flat_tensors(t.fn(*t.inputs))))
    sources = sorted(d.source.value for d in fn.lowered.compiled.tuning.values())
    print(json.dumps({"benchmarks": counters["benchmarks_run"], "sources": sources, "correct": correct}))
""")

POSTGRES = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def compile_in_new_process(url: str) -> dict:
    out = subprocess.run([sys.executable, "-c", COMPILE, url], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@POSTGRES
def test_queue_mode_enqueues_then_a_later_compile_serves_the_winners(db_url):
    first = compile_in_new_process(db_url)
    assert first["benchmarks"] == 0 and first["correct"] and set(first["sources"]) == {"default"}
    pending = RequestQueue(TuningDB(db_url)).list([RequestState.PENDING])
    assert len(pending) == len(first["sources"]) >= 1
    worker = subprocess.run([sys.executable, "-m", "loopnest.cli", "worker", "--db", db_url, "--backend", "cpp",
                             "--idle-exit", "2", "--measure", "0.005", "--workers", "1"],
                            capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert {r.state for r in RequestQueue(TuningDB(db_url)).list()} == {RequestState.DONE}
    second = compile_in_new_process(db_url)
    assert second["benchmarks"] == 0 and second["correct"] and set(second["sources"]) == {"db"}
    assert len(RequestQueue(TuningDB(db_url)).list()) == len(pending)             # nothing enqueued again


def test_request_coalesces_and_the_queue_commands(db_url, capsys):
    def f(x):
        return torch.softmax(x, -1) * 2

    x = torch.randn(16, 40)
    ids = request(f, [x], trials=3, backend="cpp", db_url=db_url)
    assert ids and request(f, [x], trials=5, priority=7, backend="cpp", db_url=db_url) == ids
    assert cli.main(["queue", "--db", db_url, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["state"], r["trials"], r["priority"], r["attempts"]) for r in rows] == \
        [(i, "pending", 5, 7, 0) for i in ids]
    assert {"kernel", "backend", "sizes", "dtypes", "hardware", "owner", "created_at", "finished_at", "error"} <= \
        set(rows[0])
    assert cli.main(["queue", "cancel", str(ids[0]), "--db", db_url]) == 0
    assert RequestQueue(TuningDB(db_url)).get(ids[0]).state == RequestState.CANCELLED
    capsys.readouterr()
    assert cli.main(["queue", "cancel", str(ids[0]), "--db", db_url]) == 2
    assert "already cancelled" in capsys.readouterr().err
    assert cli.main(["enqueue", "layernorm", "--backend", "cpp", "--size", "tiny", "--priority", "2",
                     "--trials", "2", "--db", db_url, "--format", "json"]) == 0
    new = [r["request"] for r in json.loads(capsys.readouterr().out)]
    assert new and all(RequestQueue(TuningDB(db_url)).get(i).priority == 2 for i in new)
    assert cli.main(["enqueue", "layernorm", "--hardware", "H200", "--backend", "cpp", "--db", db_url]) == 2
    assert "fingerprint" in capsys.readouterr().err
