"""A study's trial budget across processes, and reruns after Ctrl-C (real processes, SQLite and PostgreSQL).

Two sweeps of one study started together spend its budget once between them, and the stored winner
is the fastest either measured. A sweep interrupted by SIGINT while a trial runs leaves that
config to be measured by the rerun, counted once.
"""
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

from autotune_support import db_url  # noqa: F401 - db_url is a fixture
from loopnest.autotune.budget import BUDGET_ATTR, interrupted
from loopnest.db.api import TrialState, TuningDB

# Waits for the file argv[2] (a start line shared by both processes), then sweeps var_mean.
SWEEP = textwrap.dedent("""
    import json, os, sys, time
    from loopnest.autotune.options import TuneSettings
    from loopnest.autotune.sweep import sweep, target
    url, go, size, trials, measure = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    settings = TuneSettings(trials=trials, db_url=url, measure_s=measure, heartbeat_s=1, grace_s=2, workers=2,
                            sampler="random", seed=int(sys.argv[6]))
    t = target("var_mean", "cpp", size)
    if len(sys.argv) > 7:  # die as a SIGKILL would: after a trial's row is final, before Optuna hears of it
        import loopnest.autotune.study as study_module
        tell = study_module._tell
        def dying_tell(study, trial, config, outcome, *args, **kwargs):
            if outcome.ok and outcome.trial_id is not None:
                os._exit(9)
            return tell(study, trial, config, outcome, *args, **kwargs)
        study_module._tell = dying_tell
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    for r in sweep(t, "cpp", settings):
        print(json.dumps(r.to_json()), flush=True)
""")


def start(url: str, go, size: str, trials: int, measure: float, seed: int, die: bool = False) -> subprocess.Popen:
    args = [url, str(go), size, str(trials), str(measure), str(seed)] + (["die"] if die else [])
    return subprocess.Popen([sys.executable, "-c", SWEEP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.communicate()


def report(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    (row,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return row


def study_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    finally:
        storage.engine.dispose()


def running_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM ln_trials WHERE state = 'running'")).scalar()
    except Exception:  # noqa: BLE001 - tables not created yet
        return 0
    finally:
        engine.dispose()


def test_two_concurrent_sweeps_spend_one_budget_and_keep_the_fastest_winner(db_url, tmp_path):
    TuningDB(db_url).close()
    go = tmp_path / "go"
    procs = [start(db_url, go, "tiny", 6, 0.02, seed) for seed in (1, 2)]
    for proc in procs:
        wait_ready(proc)
    go.touch()  # both start sweeping at once
    rows = [report(proc) for proc in procs]
    study = rows[0]["study"]
    trials = study_trials(db_url, study)
    tag = next(t.user_attrs[BUDGET_ATTR] for t in trials if BUDGET_ATTR in t.user_attrs)
    counted = [t for t in trials if t.user_attrs.get(BUDGET_ATTR) == tag]
    assert len(counted) == 6, [(t.number, t.state, t.user_attrs) for t in trials]
    with TuningDB(db_url) as db:
        measured = [t for t in db.trials() if t.state != TrialState.INVALID]
        assert len(measured) == 6  # every counted trial measured once, nothing more, nothing lost
        assert db.trials(state=TrialState.RUNNING) == []
        (winner,) = db.winners()
        assert winner.time_us == min(r["best_us"] for r in rows)
        assert winner.config == min(rows, key=lambda r: r["best_us"])["config"]
        (backing,) = [t for t in measured if t.id == winner.trial_id]
        assert backing.state == TrialState.OK and backing.config == winner.config


def test_a_rerun_after_ctrl_c_measures_the_interrupted_config_once(db_url, tmp_path):
    TuningDB(db_url).close()
    go = tmp_path / "go"
    go.touch()
    # CPU sizes and a 2 s timing budget: SIGINT lands while a trial is being timed.
    proc = start(db_url, go, "cpu", 3, 2.0, 0)
    wait_ready(proc)
    deadline = time.monotonic() + 240
    while running_rows(db_url) == 0:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trial started running"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, (proc.returncode, err[-3000:])
    with TuningDB(db_url) as db:
        (cut,) = [t for t in db.trials() if t.message and t.message.startswith("interrupted")]
        before = {t.id for t in db.trials()}
    rerun = start(db_url, go, "cpu", 3, 0.05, 0)
    wait_ready(rerun)
    row = report(rerun)
    assert row["stop_reason"] == "trial budget"
    trials = study_trials(db_url, row["study"])
    tag = next(t.user_attrs[BUDGET_ATTR] for t in trials if BUDGET_ATTR in t.user_attrs)
    counted = [t for t in trials if t.user_attrs.get(BUDGET_ATTR) == tag and not interrupted(t)]
    assert len(counted) == 3
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in counted]
    assert configs.count(json.dumps(cut.config, sort_keys=True)) == 1  # measured, and counted once
    with TuningDB(db_url) as db:
        after = db.trials()
        assert before <= {t.id for t in after}  # nothing stored was lost
        again = [t for t in after if t.id not in before and t.config == cut.config]
        assert [t.state for t in again] == [TrialState.OK]
        assert db.winners() and db.trials(state=TrialState.RUNNING) == []


def test_a_trial_measured_before_its_process_died_is_restored_not_measured_again(db_url, tmp_path):
    """The process died after the trial's ln_trials row was final but before Optuna was told: the
    rerun takes the recorded outcome into the study (counted once) instead of timing it again."""
    TuningDB(db_url).close()
    go = tmp_path / "go"
    go.touch()
    proc = start(db_url, go, "tiny", 3, 0.02, 0, die=True)
    wait_ready(proc)
    assert proc.wait(timeout=300) == 9, proc.communicate()
    with TuningDB(db_url) as db:
        done = {t.id: t for t in db.trials() if t.state == TrialState.OK}  # the batch the process timed
    assert done
    time.sleep(3.5)  # past the 2 s grace: the dead process's trials are found stale
    rerun = start(db_url, go, "tiny", 3, 0.02, 0)
    wait_ready(rerun)
    row = report(rerun)
    assert row["stop_reason"] == "trial budget"
    trials = study_trials(db_url, row["study"])
    tag = next(t.user_attrs[BUDGET_ATTR] for t in trials if BUDGET_ATTR in t.user_attrs)
    counted = [t for t in trials if t.user_attrs.get(BUDGET_ATTR) == tag and not interrupted(t)]
    assert len(counted) == 3
    restored = {t.user_attrs["ln_trial_id"]: t for t in counted if t.user_attrs.get("restored")}
    assert restored.keys() == done.keys()
    assert all(restored[i].value == done[i].p50_us for i in done)
    with TuningDB(db_url) as db:
        configs = [json.dumps(t.config, sort_keys=True) for t in db.trials() if t.state != TrialState.INVALID]
        for t in done.values():  # timed once, by the process that died
            assert configs.count(json.dumps(t.config, sort_keys=True)) == 1
        assert db.trials(state=TrialState.RUNNING) == [] and len(db.winners()) == 1
