"""One typed settings object reads every environment switch, with one rule for booleans."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopnest.core import settings

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("text, expected", [("1", True), ("true", True), ("ON", True), (" yes ", True),
                                            ("", False), ("0", False), ("false", False), ("Off", False),
                                            ("no", False)])
def test_one_boolean_rule_for_every_switch(monkeypatch, text, expected):
    for name in ("LOOPNEST_DEBUG", "LOOPNEST_POISON", "LOOPNEST_AOT_CACHE", "TRITON_INTERPRET"):
        monkeypatch.setenv(name, text)
    s = settings.Settings.from_env()  # current() holds the Triton mode conftest sets per test
    assert (s.debug, s.poison, s.aot_cache, s.triton_interpret) == (expected,) * 4


def test_a_value_that_is_not_a_boolean_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("LOOPNEST_DEBUG", "maybe")
    with pytest.raises(ValueError, match="LOOPNEST_DEBUG='maybe' is not a boolean"):
        settings.Settings.from_env()


def test_scope_overrides_only_what_it_names(monkeypatch):
    with settings.scope(debug=True):
        monkeypatch.setenv("CXX", "clang++")
        assert settings.current().debug and settings.current().cxx == "clang++"
    with pytest.raises(TypeError):
        with settings.scope(no_such_field=1):
            pass


def test_readme_lists_every_variable():
    table = dict(re.findall(r"^\| `([A-Z_]+)` \| (.+?) \|$", README.read_text(), re.M))
    assert table == {name: doc for name, (_, doc) in settings.VARIABLES.items()}
    assert {field for field, _ in settings.VARIABLES.values()} == set(settings.Settings.__dataclass_fields__)


def test_settings_db_and_cli_parser_load_without_torch():
    code = ("import sys, loopnest.core.settings, loopnest.db.api, loopnest.autotune.options, loopnest.cli; "
            "loopnest.cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'triton', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    """A SQLite tuning DB with two winners, Optuna's tables and one orphaned Optuna trial, and an
    export of its winners (what ``db import`` reads)."""
    import sqlite3

    import optuna

    from loopnest.db.api import HardwareInfo, TuningDB, TuningKey

    folder = tmp_path_factory.mktemp("cli_imports")
    url = f"sqlite:///{folder / 'tuning.db'}"
    with TuningDB(url) as db:
        hw = HardwareInfo("cpu", "a test cpu", "avx2", 2, 1 << 30)
        for i in range(2):
            key = TuningKey(f"{i:040x}", "cpp", (64 * (i + 1), 96), ("float32",), hw)
            db.register_kernel(key.kernel_hash, "cpp", f"w/k{i}", "kernel text")
            db.store_winner(key, {"threads": 1, "schedule": "static", "grain": 0}, 10.0 + i, 20.0, {"torch": "x"})
        with open(folder / "winners.jsonl", "w") as fp:
            db.export_jsonl(fp)
    study = optuna.create_study(study_name="ln:orphan", storage=url)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    with sqlite3.connect(folder / "tuning.db") as conn:  # the sqlite3 shell's default: foreign keys off
        conn.execute("DELETE FROM studies")
    return url, folder


CLI_IMPORTS = """
import contextlib, io, json, sys
from loopnest.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(),
                  "imported": sorted(m for m in ("torch", "triton", "optuna", "sqlalchemy") if m in sys.modules)}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["db", "list"], ["db", "show", "w/k1"], ["db", "export", "--out", "{out}"],
                                  ["db", "import", "{winners}"], ["db", "gc"], ["db", "best", "w/k0", "--sizes", "64x96"],
                                  ["db", "stale"]], ids=lambda argv: " ".join(argv[:2]))
def test_the_cli_help_and_db_commands_run_without_torch_triton_or_optuna(small_db, argv):
    url, folder = small_db
    argv = [a.format(out=folder / "out.jsonl", winners=folder / "winners.jsonl") for a in argv]
    db = [] if argv == ["--help"] else ["--db", url, "--format", "json"]
    proc = subprocess.run([sys.executable, "-c", CLI_IMPORTS, *argv, *db], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, proc.stderr[-2000:]
    # db best and db stale may import torch, only to fingerprint a CUDA device; the commands that only
    # read a SQLite file at the head revision need no SQLAlchemy either (bench/cli_startup.py)
    allowed = {"torch", "sqlalchemy"} if argv[:2] in (["db", "best"], ["db", "stale"]) else {"sqlalchemy"}
    if argv[:2] in (["--help"], ["db", "list"], ["db", "show"], ["db", "export"]):
        allowed = set()
    assert set(result["imported"]) <= allowed, result["imported"]
    if argv[:2] == ["db", "gc"]:  # it did reach Optuna's tables: the orphaned trial and its rows are gone
        (row,) = json.loads(result["out"])
        assert row["optuna_orphans"] > 0


def test_the_optuna_table_list_matches_optuna():
    from optuna.storages._rdb import models

    from loopnest.autotune.optuna_tables import OPTUNA_TABLES

    assert OPTUNA_TABLES == {t.name for t in models.BaseModel.metadata.sorted_tables}
