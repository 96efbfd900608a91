"""The ``autotune`` command line, run in-process on a DB filled by one small sweep."""
from __future__ import annotations

import json
import sqlite3

import pytest

from loopnest.core.hardware import this_cpu
from loopnest.cli import duration, main
from loopnest.db.api import HardwareInfo, TuningDB

WINNER_FIELDS = {"kernel", "name", "backend", "sizes", "dtypes", "hardware", "config", "time_us",
                 "default_time_us", "speedup", "stale"}


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(URL, path) of a tuning DB holding one sweep of the tiny softmax and var_mean workloads."""
    path = tmp_path_factory.mktemp("cli") / "tuning.db"
    url = f"sqlite:///{path}"
    code = main(["sweep", "softmax", "var_mean", "--size", "tiny", "--trials", "3", "--backend", "cpp",
                 "--db", url, "--no-progress", "--format", "json", "--seed", "1"])
    assert code == 0
    return url, path


def copy_db(swept, tmp_path) -> str:
    """A copy of the swept DB (through SQLite's backup API: the WAL may hold recent writes)."""
    target = tmp_path / "copy.db"
    src, dst = sqlite3.connect(swept[1]), sqlite3.connect(target)
    src.backup(dst)
    src.close()
    dst.close()
    return f"sqlite:///{target}"


def test_sweep_prints_the_table(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 't.db'}"
    code, out = run(capsys, "sweep", "full_absmax", "--size", "tiny", "--trials", "2", "--db", url, "--no-progress")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["workload", "kernel", "sizes", "default", "best", "speedup", "in-call", "winner", "trials",
                      "wall", "stored"]
    assert "full_absmax/ln_fx_0" in out and "5000" in out and url in out
    assert " µs" in out and "x " in out  # times carry units, speedups read 1.23x


def test_db_list_json_has_every_winner_field(swept, capsys):
    code, out = run(capsys, "db", "list", "--db", swept[0], "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 2
    for row in rows:
        assert WINNER_FIELDS <= set(row)
        assert row["hardware"]["fingerprint"] == this_cpu().fingerprint
        assert row["speedup"] == pytest.approx(row["default_time_us"] / row["time_us"])


def test_db_fallback_to_the_environment(swept, capsys, monkeypatch):
    monkeypatch.setenv("LOOPNEST_DB", swept[0])
    code, out = run(capsys, "db", "list")
    assert code == 0 and "softmax/ln_fx_0" in out and "var_mean/ln_fx_0" in out


def test_db_show_and_best(swept, capsys):
    code, out = run(capsys, "db", "list", "--db", swept[0], "--format", "json")
    row = next(r for r in json.loads(out) if r["name"] == "var_mean/ln_fx_0")
    code, out = run(capsys, "db", "show", row["kernel"][:8], "--db", swept[0])
    assert code == 0 and "trials (" in out and "ok" in out
    code, out = run(capsys, "db", "best", "var_mean/ln_fx_0", "--sizes", "x".join(map(str, row["sizes"])),
                    "--db", swept[0], "--format", "json")
    (best,) = json.loads(out)
    assert best["kind"] == "exact" and best["measured"] and best["config"] == row["config"]
    code, out = run(capsys, "db", "best", "var_mean/ln_fx_0", "--sizes", "32x96", "--db", swept[0], "--format", "json")
    assert json.loads(out)[0]["kind"] == "nearest"


def test_db_stale_lists_winners_of_other_software(swept, tmp_path, capsys):
    url = copy_db(swept, tmp_path)
    db = TuningDB(url)
    winner = db.winners()[0]
    db.store_winner(winner.key, winner.config, winner.time_us, winner.default_time_us,
                    {**winner.software, "codegen_version": -1})
    db.close()
    code, out = run(capsys, "db", "stale", "--db", url, "--format", "json")
    (row,) = json.loads(out)
    assert code == 0 and row["name"] == winner.name and "codegen_version" in row["changed"]


def test_export_then_import_round_trips_and_a_bad_row_imports_nothing(swept, tmp_path, capsys):
    dump = tmp_path / "winners.jsonl"
    assert main(["db", "export", "--db", swept[0], "--out", str(dump)]) == 0
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, out = run(capsys, "db", "import", str(dump), "--db", fresh)
    assert code == 0 and "imported 2" in out
    assert {w.config["threads"] for w in TuningDB(fresh).winners()} == {w.config["threads"] for w in TuningDB(swept[0]).winners()}
    lines = dump.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["config"]["lanes"] = 3
    bad["name"] = "tampered"
    (tmp_path / "bad.jsonl").write_text("\n".join([json.dumps(bad)] + lines[1:]) + "\n")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["db", "import", str(tmp_path / "bad.jsonl"), "--db", other]) == 1
    assert TuningDB(other).winners() == []


def test_a_winner_tuned_on_a_16_core_machine_imports_here_and_stays_keyed_to_it(swept, tmp_path, capsys):
    dump = tmp_path / "winners.jsonl"
    assert main(["db", "export", "--db", swept[0], "--out", str(dump)]) == 0
    row = json.loads(dump.read_text().splitlines()[0])
    big = HardwareInfo("cpu", "Xeon with 16 cores", row["hardware"]["capability"], 16, 64 << 30)
    row["hardware"], row["config"]["threads"] = big.to_dict(), 16
    too_many = {**row, "config": {**row["config"], "threads": 32}}  # more threads than its own cores
    (tmp_path / "big.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "over.jsonl").write_text(json.dumps(too_many) + "\n")
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, out = run(capsys, "db", "import", str(tmp_path / "big.jsonl"), "--db", fresh)
    assert code == 0 and "imported 1" in out
    (winner,) = TuningDB(fresh).winners()
    assert winner.hardware == big and winner.config["threads"] == 16
    assert main(["db", "import", str(tmp_path / "over.jsonl"), "--db", fresh]) == 1
    assert "exceeds the 16 cores" in capsys.readouterr().err
    code, out = run(capsys, "db", "best", row["kernel"], "--sizes", "x".join(map(str, row["sizes"])),
                    "--db", fresh, "--format", "json")
    (answer,) = json.loads(out)
    assert answer["kind"] == "miss"  # keyed to the 16-core machine: never served on this one


def test_gc_never_deletes_winners(swept, tmp_path, capsys):
    url = copy_db(swept, tmp_path)
    before = TuningDB(url)
    winners = {w.trial_id for w in before.winners()}
    total = len(before.trials())
    code, out = run(capsys, "db", "gc", "--older-than", "0", "--db", url, "--format", "json")
    (row,) = json.loads(out)
    after = TuningDB(url)
    assert row["deleted_trials"] == total - len(winners) > 0
    assert {t.id for t in after.trials()} == winners and len(after.winners()) == 2


def test_hardware_prints_the_fingerprint(capsys):
    code, out = run(capsys, "hardware", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["fingerprint"] == this_cpu().fingerprint
    assert "codegen_version" in rows[0]["software"]


def test_report_writes_png_and_html(swept, tmp_path, capsys):
    code, out = run(capsys, "db", "list", "--db", swept[0], "--format", "json")
    kernel = json.loads(out)[0]["kernel"]
    png, page = tmp_path / "r.png", tmp_path / "r.html"
    assert main(["report", kernel, "--db", swept[0], "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["report", kernel, "--db", swept[0], "--out", str(page)]) == 0
    assert "<img src='data:image/png;base64," in page.read_text()
    assert main(["report", "no-such-study", "--db", swept[0], "--out", str(png)]) == 1


def test_times_carry_units():
    assert [duration(t) for t in (41.23, 27_300.0, 1_240_000.0, None)] == ["41.2 µs", "27.3 ms", "1.24 s", "-"]


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    for argv in (["db", "list", "--db", "nonsense://x"], ["db", "list", "--db", f"sqlite:///{text}"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("autotune: ") and err.count("\n") == 1, err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["db"])
    assert exc.value.code == 2
    assert main(["sweep", "no_such_workload", "--db", "sqlite://"]) == 2


def test_best_of_an_unknown_name_or_hash_is_a_miss_with_exit_0(swept, capsys):
    for ident in ("no-such-kernel/ln_fx_0", "0123456789abcdef0123"):
        code, out = run(capsys, "db", "best", ident, "--sizes", "8x8", "--db", swept[0], "--format", "json")
        assert code == 0 and [r["kind"] for r in json.loads(out)] == ["miss"]
