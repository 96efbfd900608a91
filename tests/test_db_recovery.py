"""A sweep recovers from rows deleted or altered by hand, and ``db gc`` repairs what they left.

Each case sweeps the two kernels of logsumexp_ce, damages rows of one kernel (loopnest's tables or
Optuna's) the way a person at the sqlite3 shell or psql would, sweeps again and checks that the
rerun stores a winner backed by an ok trial of its key, and that the other kernel's winner and
trials were not lost. On SQLite the damage is done with foreign keys off, as the sqlite3 shell does.
"""
from __future__ import annotations

import json
import sqlite3

import optuna
import pytest
from sqlalchemy import create_engine, text

from autotune_support import db_url, fast  # noqa: F401 - db_url is a fixture
from loopnest.autotune.sweep import sweep, target
from loopnest.cli import main
from loopnest.db.api import TrialState, TuningDB

DAMAGE = {  # name -> statements; {k} is the damaged kernel's ln_kernels.id, {t} its winner's trial id
    "kernel row deleted": ["DELETE FROM ln_kernels WHERE id = {k}"],
    "winner's trial deleted": ["DELETE FROM ln_trials WHERE id = {t}"],
    "every trial deleted": ["DELETE FROM ln_trials"],
    "winner's trial altered": ["UPDATE ln_trials SET state = 'compile_error' WHERE id = {t}"],
    "winner deleted": ["DELETE FROM ln_winners WHERE kernel_id = {k}"],
    "hardware deleted": ["DELETE FROM ln_hardware"],
    "optuna study deleted": ["DELETE FROM studies WHERE study_name LIKE 'ln:' || (SELECT structural_hash "
                             "FROM ln_kernels WHERE id = {k}) || ':%'"],
    "optuna values deleted": ["DELETE FROM trial_values"],
}
BOTH_KERNELS = {"every trial deleted", "hardware deleted"}  # damage that reaches the other kernel's rows too


def execute(url: str, statements: list[str]) -> None:
    """Run SQL as a person would: sqlite3 (foreign keys off) on SQLite, a plain connection elsewhere."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


def tune(url: str):
    reports = sweep(target("logsumexp_ce", "cpp", "tiny"), "cpp", fast(url, trials=2))
    assert len(reports) == 2 and all(r.stored for r in reports)
    return reports


def check_backed(db: TuningDB) -> None:
    """Every winner that names a trial (PostgreSQL sets the link NULL when its trial is deleted) names an
    ok trial of its own key and config."""
    trials = {t.id: t for t in db.trials()}
    for w in (w for w in db.winners() if w.trial_id is not None):
        t = trials[w.trial_id]
        assert (t.state, t.kernel_hash, t.sizes, t.config) == (TrialState.OK, w.kernel_hash, w.sizes, w.config)


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_sweep_recovers_from_deleted_or_altered_rows(db_url, damage):
    first = tune(db_url)
    with TuningDB(db_url) as db:
        damaged, kept = sorted(db.winners(), key=lambda w: w.name)
        kept_trials = [t for t in db.trials() if t.kernel_hash == kept.kernel_hash]
        with db.session(write=False) as s:
            kernel_id = s.execute(text("SELECT id FROM ln_kernels WHERE structural_hash = :h"),
                                  {"h": damaged.kernel_hash}).scalar_one()
    if damage == "optuna study deleted" and not db_url.startswith("sqlite"):
        # PostgreSQL enforces Optuna's foreign keys (no cascade): a person deletes a study with Optuna itself.
        (name,) = [r.study for r in first if r.kernel_hash == damaged.kernel_hash]
        optuna.delete_study(study_name=name, storage=db_url)
    else:
        execute(db_url, [sql.format(k=kernel_id, t=damaged.trial_id) for sql in DAMAGE[damage]])
    again = tune(db_url)
    assert [r.kernel for r in again] == [r.kernel for r in first]
    with TuningDB(db_url) as db:
        check_backed(db)
        winners = {w.name: w for w in db.winners()}
        assert set(winners) == {damaged.name, kept.name}
        if damage not in BOTH_KERNELS:
            assert winners[kept.name].time_us <= kept.time_us  # kept, or a faster one stored
            assert {t.id for t in kept_trials} <= {t.id for t in db.trials()}


def test_db_gc_repairs_orphans_and_dangling_links(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    tune(url)
    with TuningDB(url) as db:
        damaged, kept = sorted(db.winners(), key=lambda w: w.name)
        orphans = len([t for t in db.trials() if t.kernel_hash == damaged.kernel_hash])
    execute(url, [f"UPDATE ln_trials SET state = 'timeout' WHERE id = {kept.trial_id}",
                  f"DELETE FROM ln_kernels WHERE structural_hash = '{damaged.kernel_hash}'",
                  "DELETE FROM studies WHERE study_id = 1"])
    assert main(["db", "gc", "--db", url, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["orphan_winners"] == 1 and row["orphan_trials"] == orphans
    assert row["unlinked_winners"] == 1 and row["optuna_orphans"] > 0
    with sqlite3.connect(tmp_path / "tuning.db") as conn:
        (dangling,) = conn.execute("SELECT count(*) FROM trials WHERE study_id NOT IN (SELECT study_id FROM studies)"
                                   ).fetchone()
    assert dangling == 0
    with TuningDB(url) as db:
        (winner,) = db.winners()
        assert (winner.name, winner.config, winner.trial_id) == (kept.name, kept.config, None)
    assert main(["db", "gc", "--db", url, "--format", "json"]) == 0  # nothing left to repair
    (row,) = json.loads(capsys.readouterr().out)
    assert [row[k] for k in ("orphan_winners", "orphan_trials", "unlinked_winners", "optuna_orphans")] == [0] * 4
    tune(url)  # and the repaired DB sweeps


def test_damaged_optuna_rows_are_named_and_deleting_them_recovers(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    tune(url)
    execute(url, ["UPDATE trial_params SET distribution_json = '{oops' WHERE param_id = 2"])
    with pytest.raises(ValueError, match=r"trial_params\.param_id=2 .* delete those rows"):
        tune(url)
    execute(url, ["DELETE FROM trial_params WHERE param_id = 2"])
    tune(url)
    with TuningDB(url) as db:
        check_backed(db)
        assert len(db.winners()) == 2
