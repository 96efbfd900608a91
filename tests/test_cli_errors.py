"""Every error a user can cause gives one ``autotune: ...`` line naming the problem, exit 2 (130 for
Ctrl-C), and no traceback; a sweep in which a workload failed exits 1. Nothing stored is lost."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from loopnest.cli import main
from loopnest.db.api import TuningDB


def one_line_error(capsys, argv, code=2) -> str:
    """The error line of ``autotune argv`` (a sweep prints its progress lines before it)."""
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("autotune: ") and err.count("autotune: ") == 1 and "Traceback" not in err, err
    return lines[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A tuning DB holding one tiny sweep of full_absmax."""
    path = tmp_path_factory.mktemp("errors") / "tuning.db"
    assert main(["sweep", "full_absmax", "--size", "tiny", "--trials", "2", "--backend", "cpp",
                 "--db", f"sqlite:///{path}", "--no-progress"]) == 0
    return path


def winners(path) -> list:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, config, time_us FROM ln_winners ORDER BY id").fetchall()


def test_a_malformed_url_names_the_expected_forms(capsys):
    err = one_line_error(capsys, ["db", "list", "--db", "sqlite:/tuning.db"])
    assert "'sqlite:/tuning.db' is not a database URL" in err and "sqlite:///" in err
    assert "supported: postgresql, sqlite" in one_line_error(capsys, ["db", "list", "--db", "mysql://u@h/x"])


def test_an_unreachable_postgresql_says_so(capsys):
    url = f"postgresql+psycopg://loopnest@127.0.0.1:{free_port()}/tuning"
    err = one_line_error(capsys, ["db", "list", "--db", url])
    assert "cannot connect to the tuning DB" in err and "server runs" in err
    err = one_line_error(capsys, ["sweep", "softmax", "--size", "tiny", "--db", url, "--no-progress"])
    assert "cannot connect" in err  # the command fails (2) before any workload, not a workload (1)


def test_a_text_file_is_not_taken_for_a_database(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    assert "is not a SQLite database" in one_line_error(capsys, ["db", "list", "--db", f"sqlite:///{notes}"])
    err = one_line_error(capsys, ["db", "list", "--db", f"sqlite:///{notes}/tuning.db"])
    assert "cannot create the folder" in err
    assert notes.read_text() == "not a database\n" * 100


def test_a_read_only_db_fails_the_sweep_in_one_line_and_keeps_its_rows(swept, capsys):
    before = winners(swept)
    url = f"sqlite:///file:{swept}?mode=ro&uri=true"
    err = one_line_error(capsys, ["sweep", "softmax", "--size", "tiny", "--trials", "1", "--db", url,
                                  "--no-progress"])
    assert "is read-only here" in err
    assert winners(swept) == before


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes apply (root bypasses them unless it drops these capabilities)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only folder cannot be simulated")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *argv]


def test_a_db_in_a_read_only_folder(swept, tmp_path):
    folder = tmp_path / "readonly"
    folder.mkdir()
    with sqlite3.connect(swept) as src, sqlite3.connect(folder / "tuning.db") as dst:
        src.backup(dst)  # the WAL may hold the latest writes: a file copy would miss them
    TuningDB(f"sqlite:///{folder / 'tuning.db'}").close()  # in WAL mode, as loopnest leaves its DBs
    before = winners(folder / "tuning.db")
    folder.chmod(0o555)
    sweep = ["sweep", "softmax", "--size", "tiny", "--trials", "1", "--no-progress"]
    try:
        listed = cli(["db", "list", "--format", "json"], folder / "tuning.db")
        assert listed.returncode == 0 and json.loads(listed.stdout)[0]["name"] == "full_absmax/ln_fx_0"  # reads work
        for argv, db, expected in ((sweep, folder / "tuning.db", "folder of a SQLite tuning DB must be writable"),
                                   (["db", "list"], folder / "new.db", "its folder is missing or not writable"),
                                   (sweep, folder / "new.db", "its folder is missing or not writable")):
            run = cli(argv, db)
            last = (run.stderr.strip().splitlines() or [""])[-1]
            assert run.returncode == 2 and last.startswith("autotune: ") and expected in last, run.stderr
            assert "Traceback" not in run.stderr
    finally:
        folder.chmod(0o755)
    assert winners(folder / "tuning.db") == before and not (folder / "new.db").exists()


def cli(argv: list[str], db) -> subprocess.CompletedProcess:
    """``autotune argv --db sqlite:///db`` in a process to which file modes apply."""
    return subprocess.run(unprivileged([sys.executable, "-m", "loopnest.cli", *argv, "--db", f"sqlite:///{db}"]),
                          capture_output=True, text=True, timeout=300)


def test_report_to_an_unwritable_path(swept, capsys):
    code = main(["db", "list", "--db", f"sqlite:///{swept}", "--format", "json"])
    kernel = json.loads(capsys.readouterr().out)[0]["kernel"]
    err = one_line_error(capsys, ["report", kernel, "--db", f"sqlite:///{swept}", "--out", "/proc/report.png"])
    assert code == 0 and "cannot write the report to /proc/report.png" in err


def test_a_failed_workload_still_exits_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_workload.py").write_text(
        "import torch\n\ndef make():\n    return (lambda x: torch.linalg.cholesky(x).sum(0).nonzero()), "
        "(torch.randn(4, 4),)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    url = f"sqlite:///{tmp_path / 't.db'}"
    code = main(["sweep", "broken_workload:make", "full_absmax", "--size", "tiny", "--trials", "1", "--db", url,
                 "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1 and "autotune: sweeping broken_workload:make failed" in captured.err
    assert "full_absmax" in captured.out  # the other workload was tuned and stored
    assert len(TuningDB(url).winners()) == 1


def test_ctrl_c_exits_130_with_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "loopnest.cli", "sweep", "var_mean", "--size", "cpu",
                             "--trials", "30", "--db", url, "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (tmp_path / "t.db").exists() or not running(tmp_path / "t.db"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no trial started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "autotune: interrupted" and "Traceback" not in err
    with TuningDB(url) as db:  # the cut-short trial is finished, not left running
        assert db.trials(state="running") == [] and any("interrupted" in (t.message or "") for t in db.trials())


def running(path) -> bool:
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM ln_trials WHERE state = 'running'").fetchone()[0] > 0
    except sqlite3.OperationalError:  # tables not created yet
        return False


WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # importing it raises ModuleNotFoundError, as when it is not installed
from loopnest.cli import main
sys.exit(main(sys.argv[2:]))
"""


def without(modules: list[str], argv: list[str]) -> subprocess.CompletedProcess:
    """``autotune argv`` in a process where ``modules`` cannot be imported."""
    return subprocess.run([sys.executable, "-c", WITHOUT, ",".join(modules), *argv], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("module, argv, line", [
    ("psycopg", ["db", "list", "--db", "postgresql+psycopg://loopnest@127.0.0.1:9/tuning"],
     "autotune: a postgresql+psycopg:// tuning DB needs psycopg, which is not installed: "
     "pip install 'loopnest[postgres]'"),
    ("matplotlib", ["report", "ln:softmax", "--out", "report.png"],
     "autotune: report needs matplotlib, which is not installed: pip install 'loopnest[plots]'"),
], ids=["psycopg", "matplotlib"])
def test_a_missing_optional_dependency_is_one_line_naming_its_extra(tmp_path, module, argv, line):
    argv = argv if "--db" in argv else [*argv, "--db", f"sqlite:///{tmp_path / 't.db'}"]
    run = without([module], argv)
    assert (run.returncode, run.stderr.strip().splitlines()) == (2, [line]), run.stderr


def test_commands_that_need_no_optional_dependency_run_without_them(tmp_path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    for argv in (["--help"], ["db", "list", "--db", url], ["db", "gc", "--db", url]):
        run = without(["psycopg", "matplotlib"], argv)
        assert run.returncode == 0 and run.stderr == "", (argv, run.stderr)


def test_a_db_path_is_taken_as_a_sqlite_file(tmp_path, monkeypatch):
    """--db and $LOOPNEST_DB accept a filesystem path as well as a URL."""
    from loopnest.core.settings import db_url
    assert db_url("postgresql+psycopg://u@h:5432/d") == "postgresql+psycopg://u@h:5432/d"
    assert db_url(str(tmp_path / "a.db")) == f"sqlite:///{tmp_path / 'a.db'}"
    assert db_url("sqlite:/typo.db") == "sqlite:/typo.db"  # a URL's mistake stays the parser's to report
    assert main(["db", "list", "--db", str(tmp_path / "b.db")]) == 0
    monkeypatch.setenv("LOOPNEST_DB", str(tmp_path / "c.db"))
    assert main(["db", "list"]) == 0
    assert (tmp_path / "b.db").exists() and (tmp_path / "c.db").exists()
