"""One damaged row never breaks the tuning DB: every column read back is checked, a damaged row is
skipped with a warning that names it (lookups answer miss), and nothing else stored is lost."""
from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from loopnest.cli import main
from loopnest.db.api import HardwareInfo, LookupKind, TuningDB, TuningKey

HW = HardwareInfo("cpu", "a test cpu", "avx2", 2, 1 << 30)
CONFIG = {"threads": 1, "lanes": 16, "chunk": 64, "schedule": "static", "grain": 0}
DAMAGE = [  # (column, what a broken writer, a disk or a hand edit left there)
    ("config", "'{not json'"), ("config", "'{\"threads\": NaN}'"), ("sizes", "'\"8x8\"'"), ("dtypes", "'[1, 2]'"),
    ("time_us", "'fast'"), ("default_time_us", "-3"), ("software", "'[1]'"), ("software", "'{\"torch\": Infinity}'"),
]


def two_winners(path):
    db = TuningDB(f"sqlite:///{path}")
    keys = [TuningKey(f"{i:040x}", "cpp", (64 * (i + 1), 96), ("float32",), HW) for i in range(2)]
    for i, key in enumerate(keys):
        db.register_kernel(key.kernel_hash, "cpp", f"w/k{i}", "kernel text")
        db.store_winner(key, CONFIG, 10.0 + i, 20.0, {"torch": "x"})
    db.close()
    return keys


@pytest.mark.parametrize("column, damage", DAMAGE)
def test_a_damaged_winner_is_skipped_with_a_warning_naming_it(tmp_path, column, damage, caplog, capsys):
    path = tmp_path / "t.db"
    good, bad = two_winners(path)
    with sqlite3.connect(path) as conn:
        kernel_id = conn.execute("SELECT id FROM ln_kernels WHERE structural_hash = ?", (bad.kernel_hash,)).fetchone()[0]
        conn.execute(f"UPDATE ln_winners SET {column} = {damage} WHERE kernel_id = ?", (kernel_id,))
    db = TuningDB(f"sqlite:///{path}")
    with caplog.at_level(logging.WARNING, logger="loopnest.db"):
        assert [w.kernel_hash for w in db.winners()] == [good.kernel_hash]
        assert db.lookup(bad, {"torch": "x"}).kind == LookupKind.MISS
        assert db.lookup(good, {"torch": "x"}).kind == LookupKind.EXACT
    assert "ln_winners.id=" in caplog.text and column in caplog.text
    url = f"sqlite:///{path}"
    for argv in (["db", "list"], ["db", "show", "w/k1"], ["db", "stale"], ["db", "export"],
                 ["db", "best", "w/k0", "--sizes", "64x96"]):
        assert main([*argv, "--db", url]) == 0, argv
    out = capsys.readouterr().out
    assert "w/k0" in out
    with sqlite3.connect(path) as conn:  # the damaged row is reported, not deleted
        assert conn.execute("SELECT count(*) FROM ln_winners").fetchone()[0] == 2


def test_a_damaged_trial_is_skipped(tmp_path, caplog):
    path = tmp_path / "t.db"
    (key, _) = two_winners(path)
    db = TuningDB(f"sqlite:///{path}")
    first = db.record_trial(key, CONFIG, "compile_error", "g++ failed")
    second = db.record_trial(key, CONFIG, "compile_error", "g++ failed")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ln_trials SET config = '{oops' WHERE id = ?", (first,))
    with caplog.at_level(logging.WARNING, logger="loopnest.db"):
        assert [t.id for t in db.trials()] == [second]
    assert f"ln_trials.id={first}" in caplog.text
    assert json.loads(json.dumps(db.trials()[0].config)) == CONFIG
