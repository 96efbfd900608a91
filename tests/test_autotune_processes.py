"""Across processes: a SIGKILLed sweep leaves a consistent DB that a rerun completes, and a second
process compiling a tuned graph with tune="db" runs no benchmark and gets the stored configs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import optuna
from sqlalchemy import create_engine, text

from autotune_support import db_url, fast  # noqa: F401 - db_url is a fixture
from loopnest.autotune.sweep import sweep, target
from loopnest.db.api import TrialState, TuningDB

# At CPU sizes each var_mean run takes milliseconds, so a trial measures for its full 2 s budget
# (tiny sizes hit the run cap within milliseconds) and the kill below lands while one is running.
SWEEP = textwrap.dedent("""
    import sys
    from loopnest.autotune.options import TuneSettings
    from loopnest.autotune.sweep import sweep, target
    settings = TuneSettings(trials=3, db_url=sys.argv[1], measure_s=2.0, heartbeat_s=1, grace_s=2, seed=0,
                            workers=1, sampler="tpe")
    for r in sweep(target("var_mean", "cpp", "cpu"), "cpp", settings):
        print(r.kernel, r.ok, r.failed, r.stop_reason, flush=True)
""")

WARM = textwrap.dedent("""
    import json, sys
    from loopnest.autotune.options import TuneSettings
    from loopnest.autotune.sweep import compile_target, flat_tensors, target
    from loopnest.core.counters import counters
    t = target(sys.argv[2], "cpp", "tiny")
    counters.reset()
    fn = compile_target(t, "cpp", "db", TuneSettings(db_url=sys.argv[1]))
    out = fn(*t.inputs)
    ok = all(bool((a - b).abs().max() < 1e-4) for a, b in zip(flat_tensors(out), flat_tensors(t.fn(*t.inputs))))
    decisions = {k: [d.source, d.lookup, d.config] for k, d in fn.lowered.compiled.tuning.items()}
    print(json.dumps({"benchmarks": counters["benchmarks_run"], "decisions": decisions, "correct": ok}))
""")


def env(tmp_path) -> dict:
    return {**os.environ, "LOOPNEST_CACHE_DIR": os.environ.get("LOOPNEST_CACHE_DIR", str(tmp_path))}


def running_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM ln_trials WHERE state = 'running'")).scalar()
    except Exception:  # noqa: BLE001 - tables not created yet
        return 0
    finally:
        engine.dispose()


def test_a_sigkilled_sweep_leaves_a_consistent_db_and_a_rerun_completes(db_url, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SWEEP, db_url], env=env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while running_rows(db_url) == 0:
        assert proc.poll() is None, f"the sweep ended before it was killed: {proc.communicate()}"
        assert time.monotonic() < deadline, "no trial started running"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    db = TuningDB(db_url)
    (killed,) = db.trials(state=TrialState.RUNNING)
    study_name = killed.study
    study = optuna.load_study(study_name=study_name, storage=db_url)
    assert any(t.state == optuna.trial.TrialState.RUNNING for t in study.trials)

    time.sleep(3.5)  # past the 2 s grace period: the dead sweep's heartbeats have stopped
    rerun = subprocess.run([sys.executable, "-c", SWEEP, db_url], env=env(tmp_path), capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "trial budget" in rerun.stdout or "space exhausted" in rerun.stdout
    assert db.trials(state=TrialState.RUNNING) == []
    (interrupted,) = [t for t in db.trials() if t.id == killed.id]
    assert interrupted.state == TrialState.RUNTIME_ERROR and "interrupted" in interrupted.message
    study = optuna.load_study(study_name=study_name, storage=db_url)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    measured = [t for t in db.trials() if t.id != killed.id and t.state != TrialState.INVALID]
    assert len(measured) == 3
    (winner,) = db.winners()
    assert winner.trial_id in {t.id for t in measured if t.state == TrialState.OK}
    db.close()


def test_a_second_process_compiles_from_the_db_without_benchmarks(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'tuning.db'}"
    reports = sweep(target("logsumexp_ce", "cpp", "tiny"), "cpp", fast(db_url, trials=2))
    rows = [r.to_json() for r in reports]
    assert len(rows) == 2 and all(r["stored"] for r in rows)
    warm = subprocess.run([sys.executable, "-c", WARM, db_url, "logsumexp_ce"], env=env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr[-3000:]
    result = json.loads(warm.stdout.strip().splitlines()[-1])
    assert result["benchmarks"] == 0 and result["correct"]
    stored = sorted(json.dumps(r["config"], sort_keys=True) for r in rows)
    served = sorted(json.dumps(d[2], sort_keys=True) for d in result["decisions"].values())
    assert [d[:2] for d in result["decisions"].values()] == [["db", "exact"]] * 2
    assert served == stored
