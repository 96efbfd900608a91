"""Tuning DB tests, run against SQLite and a real PostgreSQL server (see .ci/start_postgres.sh).

PostgreSQL variants use ``$LOOPNEST_TEST_PG_URL`` and a freshly created database per test; they
are skipped when it is unset, except under CI (``$CI`` set), where that is a failure.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from datetime import timedelta

import optuna
import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, make_url, text

from loopnest.backends import registry
from loopnest.core.hardware import CPU_ISA_FLAGS, cpu_hardware, this_cpu
from loopnest.db.api import (
    HardwareInfo, ImportRowError, LookupKind, SchemaError, TrialState, TuningDB, TuningKey,
    UnknownKernelError, default_db_url,
)
from loopnest.db.models import utcnow
from loopnest.db.read import TuningReader
from loopnest.db.records import DTYPE_NAMES
from loopnest.ir.dtypes import BY_NAME
from loopnest.db.schema import HEAD, VERSION_TABLE, alembic_config, head_revision

PG_ENV = "LOOPNEST_TEST_PG_URL"
LN_TABLES = {"ln_hardware", "ln_kernels", "ln_trials", "ln_winners", VERSION_TABLE}
SOFTMAX_IR = "reduce(max) -> pointwise(exp(x - m)) -> reduce(sum) -> div"
SOFTMAX = ("9f1c2a7be04d", "cpp", "softmax", SOFTMAX_IR)


def _fresh_pg_database(base_url: str):
    """Create a uniquely named database, yield its URL, drop it afterwards."""
    name = f"ln_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """URL of an empty database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tuning.db'}"
        return
    base = os.environ.get(PG_ENV)
    if not base:
        if os.environ.get("CI"):
            pytest.fail(f"{PG_ENV} is unset under CI: .ci/run must start PostgreSQL for this")
        pytest.skip(f"{PG_ENV} unset; start a server with: eval \"$(bash .ci/start_postgres.sh)\"")
    yield from _fresh_pg_database(base)


@pytest.fixture
def db(db_url):
    """An open TuningDB on ``db_url`` with the softmax kernel registered."""
    handle = TuningDB(db_url)
    handle.register_kernel(*SOFTMAX)
    yield handle
    handle.close()


@pytest.fixture(scope="module")
def cpu():
    return this_cpu()


@pytest.fixture(scope="module")
def software():
    return registry.get("cpp").software()


def key(hw, sizes=(8192, 2048), dtypes=("float32",), kernel=SOFTMAX):
    return TuningKey(kernel[0], kernel[1], sizes, dtypes, hw)


def validate_cpp_config(backend: str, config: dict, hardware: HardwareInfo) -> None:
    """A backend config check of the kind backends/cpp/space.py provides."""
    if backend != "cpp" or set(config) != {"block", "threads"}:
        raise ValueError(f"{backend} config must have exactly block and threads: {config}")
    if config["block"] <= 0 or config["block"] & (config["block"] - 1):
        raise ValueError(f"block must be a power of two, got {config['block']}")


def run_threads(targets, timeout_s: float = 120.0) -> None:
    """Run the callables in parallel threads; fail (rather than hang) if one never finishes."""
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (lock or deadlock)"


def count(url: str, table: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
    engine.dispose()
    return n


def run_sql(url: str, *statements: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


# -- schema ------------------------------------------------------------------------------------

def test_migrates_empty_database_and_reopens_idempotently(db_url, cpu, software):
    with TuningDB(db_url) as first:
        assert first.revision == head_revision() == HEAD
        first.register_kernel(*SOFTMAX)
        first.store_winner(key(cpu), {"block": 64, "threads": 2}, 10.0, 15.0, software)
    engine = create_engine(db_url)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert LN_TABLES <= tables and "alembic_version" not in tables
    with TuningDB(db_url) as again, TuningDB(db_url) as third:
        assert again.revision == third.revision == head_revision()
        assert len(again.winners()) == 1


def test_downgraded_database_is_upgraded_on_open(db_url):
    TuningDB(db_url).close()
    cfg = alembic_config()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert not {"ln_winners", "ln_trials"} & set(inspect(engine).get_table_names())
    engine.dispose()
    with TuningDB(db_url) as db:
        assert db.revision == head_revision() and db.winners() == []


def test_concurrent_first_opens_migrate_once(db_url):
    revisions: list[str] = []
    errors: list[BaseException] = []

    def open_db() -> None:
        try:
            with TuningDB(db_url) as handle:
                revisions.append(handle.revision)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    run_threads([open_db] * 4)
    assert errors == [] and revisions == [head_revision()] * 4


def test_newer_schema_revision_is_refused(db_url):
    TuningDB(db_url).close()
    run_sql(db_url, f"UPDATE {VERSION_TABLE} SET version_num = 'ln9999'")
    with pytest.raises(SchemaError, match=rf"'ln9999'.*expects '{HEAD}'.*upgrade loopnest"):
        TuningDB(db_url)


def test_tables_without_version_table_are_refused(db_url):
    TuningDB(db_url).close()
    run_sql(db_url, f"DROP TABLE {VERSION_TABLE}")
    with pytest.raises(SchemaError, match=r"no ln_alembic_version table"):
        TuningDB(db_url)


def test_optuna_storage_shares_the_database(db_url, cpu, software):
    with TuningDB(db_url) as db:
        db.register_kernel(*SOFTMAX)
        db.store_winner(key(cpu), {"block": 32, "threads": 2}, 9.0, 12.0, software)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(db_url)
    study = optuna.create_study(storage=storage, study_name="softmax-8192x2048")
    study.optimize(lambda trial: (trial.suggest_int("block_log2", 0, 8) - 5) ** 2, n_trials=4)
    storage.engine.dispose()
    with TuningDB(db_url) as db:
        assert db.winners()[0].config == {"block": 32, "threads": 2}
    storage = optuna.storages.RDBStorage(db_url)
    assert len(optuna.load_study(study_name="softmax-8192x2048", storage=storage).trials) == 4
    storage.engine.dispose()
    engine = create_engine(db_url)
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert {"alembic_version", VERSION_TABLE, "studies", "trials"} <= tables


# -- winners and lookups -----------------------------------------------------------------------

def test_store_winner_upserts_one_row_per_key(db, db_url, cpu, software):
    k = key(cpu)
    best = {"block": 128, "threads": 2}
    trial = db.record_trial(k, best, TrialState.OK, quantiles=(7.9, 8.0, 8.3))
    db.store_winner(k, {"block": 64, "threads": 2}, 10.0, 15.0, software)
    db.store_winner(k, best, 8.0, 15.0, software, trial_id=trial)
    db.store_winner(key(cpu, dtypes=("bfloat16",)), {"block": 64, "threads": 2}, 6.0, 7.0, software)
    assert count(db_url, "ln_winners") == 2
    found = db.winners(
        kernel_hash=SOFTMAX[0], backend="cpp", hardware=cpu, name="softmax", stale=False
    )
    [winner] = [w for w in found if w.dtypes == ("float32",)]
    assert winner.config == best and winner.trial_id == trial
    assert winner.speedup == pytest.approx(15.0 / 8.0)
    assert len(db.winners(hardware=cpu.fingerprint)) == 2


def test_the_stored_winner_is_the_fastest_under_the_same_software(db, cpu, software):
    k = key(cpu)
    assert db.store_winner(k, {"block": 64, "threads": 2}, 9.3, 15.0, software).time_us == 9.3
    kept = db.store_winner(k, {"block": 32, "threads": 2}, 12.9, 15.0, software)  # slower: not stored
    assert (kept.time_us, kept.config["block"]) == (9.3, 64)
    assert db.winners()[0].time_us == 9.3
    newer = {**software, "codegen_version": "next"}
    assert db.store_winner(k, {"block": 32, "threads": 2}, 12.9, 15.0, newer).time_us == 12.9  # other software
    db.lookup(k, software)  # marks the row stale for this software
    assert db.store_winner(k, {"block": 16, "threads": 2}, 14.0, 15.0, newer).time_us == 14.0  # stale: replaced


OFFERS = textwrap.dedent("""
    import json, random, sys
    from loopnest.core.hardware import HardwareInfo
    from loopnest.db.api import TuningDB, TuningKey
    url, seed = sys.argv[1], int(sys.argv[2])
    hw = HardwareInfo("cpu", "a test cpu", "avx2", 2, 1 << 30)
    key = TuningKey("9f1c2a7be04d", "cpp", (8192, 2048), ("float32",), hw)
    db = TuningDB(url)
    db.register_kernel("9f1c2a7be04d", "cpp", "softmax", "ir")
    rng, offered = random.Random(seed), []
    for i in range(25):
        t = round(rng.uniform(5.0, 50.0), 3)
        config = {"block": 2 ** rng.randint(0, 10), "threads": seed}
        trial = db.record_trial(key, config, "ok", quantiles=(t, t, t))
        db.store_winner(key, config, t, 60.0, {"torch": "x"}, trial_id=trial)
        offered.append([t, config])
    print(json.dumps(offered))
""")


def test_concurrent_writers_keep_the_fastest_winner(db_url):
    TuningDB(db_url).close()
    procs = [subprocess.Popen([sys.executable, "-c", OFFERS, db_url, str(seed)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in range(1, 5)]
    offered = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        offered += json.loads(out)
    with TuningDB(db_url) as db:
        (winner,) = db.winners()
        best_time, best_config = min(offered, key=lambda o: o[0])
        assert (winner.time_us, winner.config) == (best_time, best_config)
        (trial,) = [t for t in db.trials() if t.id == winner.trial_id]
        assert trial.p50_us == best_time and trial.config == best_config
        assert len(db.trials()) == len(offered) == 100  # every measurement kept


def test_only_an_ok_trial_of_the_same_key_backs_a_winner(db, cpu, software):
    k = key(cpu)
    failed = db.record_trial(k, {"block": 4096, "threads": 2}, "timeout", message="over 2 s budget")
    with pytest.raises(ValueError, match="only an ok trial"):
        db.store_winner(k, {"block": 4096, "threads": 2}, 1.0, 2.0, software, trial_id=failed)
    small = {"block": 16, "threads": 1}
    other = db.record_trial(key(cpu, (16, 16)), small, "ok", quantiles=(1, 1, 1))
    with pytest.raises(ValueError, match="another tuning key"):
        db.store_winner(k, small, 1.0, 2.0, software, trial_id=other)
    with pytest.raises(ValueError, match="timings"):
        db.record_trial(k, small, "ok")
    unknown = TuningKey("0000dead", "cpp", (4,), ("float32",), cpu)
    with pytest.raises(UnknownKernelError, match="register_kernel"):
        db.record_trial(unknown, {"block": 1, "threads": 1}, "ok", quantiles=(1, 1, 1))


def test_lookup_exact_stale_nearest_miss(db, cpu, software):
    db.store_winner(key(cpu, (1024, 1024)), {"block": 16, "threads": 2}, 3.0, 4.0, software)
    db.store_winner(key(cpu, (8192, 2048)), {"block": 64, "threads": 2}, 20.0, 30.0, software)

    exact = db.lookup(key(cpu, (8192, 2048)), software)
    assert exact.kind == LookupKind.EXACT and exact.is_measured and exact.config["block"] == 64

    nearest = db.lookup(key(cpu, (6000, 2000)), software)
    assert nearest.kind == LookupKind.NEAREST and not nearest.is_measured
    assert nearest.winner.sizes == (8192, 2048) and nearest.distance > 0

    assert db.lookup(key(cpu, (1024,)), software).kind == LookupKind.MISS  # other rank
    assert db.lookup(key(cpu, (1024, 1024), ("float16",)), software).kind == LookupKind.MISS
    gpu = HardwareInfo("cuda", "NVIDIA H200", "sm_90", 132, 150_000_000_000)
    assert db.lookup(key(gpu), software).kind == LookupKind.MISS

    newer_codegen = {**software, "codegen_version": "another"}
    stale = db.lookup(key(cpu, (8192, 2048)), newer_codegen)
    assert stale.kind == LookupKind.STALE and stale.winner.stale and not stale.is_measured
    assert [w.sizes for w in db.stale_winners()] == [(8192, 2048)]
    assert db.lookup(key(cpu, (8192, 2048)), software).kind == LookupKind.EXACT
    db.store_winner(key(cpu, (8192, 2048)), {"block": 32, "threads": 2}, 18.0, 30.0, newer_codegen)
    assert db.stale_winners() == []


# -- the read path ---------------------------------------------------------------------------

def test_a_reader_reads_what_the_orm_reads(db, db_url, cpu, software):
    _populate(db, cpu, software)
    ok = db.record_trial(key(cpu), {"block": 64, "threads": 2}, "ok", quantiles=(1.0, 2.0, 3.0), study="s")
    slow = db.record_trial(key(cpu, (1024, 1024)), {"block": 16, "threads": 2}, "timeout", "slow")
    with TuningReader(db_url) as reader:
        assert (reader.engine is None) == db_url.startswith("sqlite")  # a SQLite file: sqlite3 alone
        winners = {w.sizes: w for w in reader.winners()}
        for sizes in ((1024, 1024), (8192, 2048)):  # the lookup builds its record from the ORM's row
            assert winners[sizes] == db.lookup(key(cpu, sizes), software).winner
        assert [w.sizes for w in reader.winners(stale=True)] == [(8192, 2048)]
        assert [w.sizes for w in reader.winners(stale=False, name="softmax", hardware=cpu)] == [(1024, 1024)]
        assert reader.winners(backend="triton") == reader.winners(hardware="0" * 20) == []
        assert [t.id for t in reader.trials()] == [ok, slow]
        (found,) = reader.trials(key(cpu), study="s", state=TrialState.OK)
        assert (found.id, found.config, found.p50_us, found.hardware_fingerprint) == (ok, {"block": 64, "threads": 2},
                                                                                        2.0, cpu.fingerprint)
        (timed_out,) = reader.trials(state="timeout")
        assert (timed_out.message, timed_out.created_at.year) == ("slow", utcnow().year)
        assert reader.trials() == db.trials()


def test_a_reader_migrates_or_refuses_a_schema_as_the_db_does(db_url):
    with TuningReader(db_url) as reader:  # a new database is created at the head revision
        assert reader.revision == HEAD and reader.winners() == []
    cfg = alembic_config()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    engine.dispose()
    with TuningReader(db_url) as reader:
        assert reader.revision == HEAD and reader.engine is not None and reader.trials() == []
    run_sql(db_url, f"UPDATE {VERSION_TABLE} SET version_num = 'ln9999'")
    with pytest.raises(SchemaError, match="upgrade loopnest"):
        TuningReader(db_url)


# -- exchange ----------------------------------------------------------------------------------

def _populate(db, cpu, software):
    db.store_winner(key(cpu, (1024, 1024)), {"block": 16, "threads": 2}, 3.0, 4.0, software)
    db.store_winner(key(cpu, (8192, 2048)), {"block": 64, "threads": 2}, 20.0, None, software)
    db.lookup(key(cpu, (8192, 2048)), {**software, "torch": "2.99"})  # marks it stale


def test_export_import_round_trip(db, cpu, software, tmp_path):
    _populate(db, cpu, software)
    buf = io.StringIO()
    assert db.export_jsonl(buf) == 2
    with TuningDB(f"sqlite:///{tmp_path / 'second.db'}") as second:
        assert len(second.import_jsonl(io.StringIO(buf.getvalue()), validate_cpp_config).records) == 2
        assert [w.to_json() for w in second.winners()] == [w.to_json() for w in db.winners()]
        assert second.lookup(key(cpu, (1024, 1024)), software).kind == LookupKind.EXACT
        second.register_kernel(*SOFTMAX)  # fills in the IR text the export did not carry
        assert len(second.import_jsonl(io.StringIO(buf.getvalue()), validate_cpp_config).records) == 2
        assert len(second.winners()) == 2


def _corrupt(row: dict, how: str) -> str:
    if how == "unknown field":
        row["trusted"] = True
    elif how == "wrong type":
        row["sizes"] = ["8192", 2048]
    elif how == "config rejected":
        row["config"] = {"block": 48, "threads": 2}
    elif how == "fingerprint":
        row["hardware"]["cores"] += 1
    elif how == "not json":
        return json.dumps(row)[:-1]
    elif how == "unknown dtype":
        row["dtypes"] = ["float33"]
    elif how == "not a hash":
        row["kernel"] = "softmax; DROP TABLE ln_winners"
    elif how == "speedup":
        row["speedup"] = 1000.0
    elif how == "long name":
        row["name"] = "k" * 300
    return json.dumps(row)


BAD_ROWS = ["unknown field", "wrong type", "config rejected", "fingerprint", "not json", "unknown dtype",
            "not a hash", "speedup", "long name"]


@pytest.mark.parametrize("how", BAD_ROWS)
def test_import_rejects_a_bad_row_and_imports_nothing(db, cpu, software, tmp_path, how):
    _populate(db, cpu, software)
    buf = io.StringIO()
    db.export_jsonl(buf)
    good = buf.getvalue().splitlines()
    lines = [good[0], good[1], _corrupt(json.loads(good[1]), how)]
    with TuningDB(f"sqlite:///{tmp_path / 'target.db'}") as target:
        with pytest.raises(ImportRowError, match=r"^line 3: .*nothing was imported"):
            target.import_jsonl(io.StringIO("\n".join(lines) + "\n"), validate_cpp_config)
        assert target.winners() == []
    with pytest.raises(ImportRowError, match="line 3"):  # also nothing added to a populated DB
        db.import_jsonl(io.StringIO("\n".join(lines)), validate_cpp_config)
    assert len(db.winners()) == 2


def test_import_keeps_the_faster_of_two_rows_with_one_key_and_says_so(db, cpu, software, tmp_path):
    _populate(db, cpu, software)
    buf = io.StringIO()
    db.export_jsonl(buf)
    rows = [json.loads(line) for line in buf.getvalue().splitlines()]
    faster = {**rows[0], "time_us": rows[0]["time_us"] / 2, "config": {"block": 128, "threads": 2}}
    faster["speedup"] = None if faster["default_time_us"] is None else faster["default_time_us"] / faster["time_us"]
    lines = [json.dumps(rows[0]), json.dumps(rows[1]), json.dumps(faster)]
    with TuningDB(f"sqlite:///{tmp_path / 'target.db'}") as target:
        parsed = target.import_jsonl(io.StringIO("\n".join(lines)), validate_cpp_config)
        assert len(parsed.records) == 2
        (note,) = parsed.duplicates
        assert "lines 1 and 3" in note and "kept line 3" in note and "dropped line 1" in note
        stored = {w.sizes: w for w in target.winners()}
        assert stored[tuple(rows[0]["sizes"])].config == {"block": 128, "threads": 2}
        assert stored[tuple(rows[1]["sizes"])].time_us == rows[1]["time_us"]  # the other row is intact


def test_dtype_names_are_the_irs():
    assert DTYPE_NAMES == set(BY_NAME)


# -- trial housekeeping ------------------------------------------------------------------------

def test_gc_deletes_old_losing_trials_only(db, db_url, cpu, software):
    k = key(cpu)
    won = db.record_trial(k, {"block": 64, "threads": 2}, "ok", quantiles=(9.8, 10.0, 10.4))
    lost = db.record_trial(k, {"block": 8, "threads": 2}, "ok", quantiles=(30.0, 31.0, 33.0))
    failed = db.record_trial(k, {"block": 8192, "threads": 2}, "compile_error", message="too big")
    running = db.record_trial(k, {"block": 16, "threads": 2}, "running")
    recent = db.record_trial(k, {"block": 32, "threads": 2}, "ok", quantiles=(12.0, 12.5, 13.0))
    db.store_winner(k, {"block": 64, "threads": 2}, 10.0, 31.0, software, trial_id=won)
    old = (utcnow() - timedelta(days=10)).isoformat(sep=" ")
    ids = ",".join(str(i) for i in (won, lost, failed, running))
    run_sql(db_url, f"UPDATE ln_trials SET created_at = '{old}' WHERE id IN ({ids})")
    assert db.gc(older_than_days=7) == 2
    assert {t.id for t in db.trials(k)} == {won, running, recent}
    assert db.winners()[0].trial_id == won
    assert db.gc(older_than_days=0) == 1  # `recent` goes; the winner's trial never does
    assert db.winners()[0].trial_id == won


def test_fail_running_trials_marks_interrupted(db, cpu):
    k = key(cpu)
    a = db.record_trial(k, {"block": 16, "threads": 2}, "running", study="sweep-a")
    b = db.record_trial(k, {"block": 32, "threads": 2}, "running", study="sweep-b")
    assert db.fail_running_trials(study="sweep-a") == 1
    (trial,) = db.trials(study="sweep-a")
    assert (trial.id, trial.state, trial.message) == (a, TrialState.RUNTIME_ERROR, "interrupted")
    with pytest.raises(ValueError, match="not running"):
        db.finish_trial(a, "ok", quantiles=(1.0, 1.1, 1.2))
    db.finish_trial(b, "ok", quantiles=(5.0, 5.1, 5.3), verified_error=1e-7)
    assert db.trials(state="ok")[0].p50_us == 5.1
    assert db.fail_running_trials() == 0


def test_two_handles_write_concurrently(db_url, cpu, software):
    first, second = TuningDB(db_url), TuningDB(db_url)
    first.register_kernel(*SOFTMAX)
    errors: list[BaseException] = []

    def work(handle: TuningDB, offset: int) -> None:
        try:
            for i in range(15):
                k = key(cpu, (offset + i, 64))
                config = {"block": 8, "threads": 1}
                trial = handle.record_trial(k, config, "ok", quantiles=(1.0, 1.0, 1.0))
                handle.store_winner(k, config, 1.0, 2.0, software, trial_id=trial)
                handle.lookup(k, software)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    run_threads([lambda: work(first, 1), lambda: work(second, 101)])
    assert errors == []
    assert len(first.winners()) == len(second.winners()) == 30
    if db_url.startswith("sqlite"):
        with first.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    first.close()
    second.close()


# -- hardware and software descriptions ------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_hardware_descriptions(cpu):
    assert cpu.kind == "cpu" and cpu.cores == os.cpu_count() and cpu.memory_bytes > 0
    assert set(filter(None, cpu.capability.split(","))) <= set(CPU_ISA_FLAGS)
    assert registry.get("cpp").hardware().fingerprint == cpu.fingerprint
    xeon = cpu_hardware(CPUINFO, "MemTotal:       2113451 kB\n", 112)
    assert xeon.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert xeon.capability == "avx,avx2,fma,avx512f,avx512bw,avx512vl,avx512_bf16,amx"
    assert xeon.memory_bytes == 2113451 * 1024 and xeon.fingerprint != cpu.fingerprint
    assert cpu_hardware(CPUINFO, "", 56).fingerprint != xeon.fingerprint
    with pytest.raises(ValueError, match="device"):
        registry.for_device("meta")


def test_software_versions_name_the_compiler_builds_use(monkeypatch):
    cpp = registry.get("cpp").software()
    assert len(cpp["codegen_version"]) == 16 and cpp["compiler"].startswith("g++ ")
    monkeypatch.setenv("CXX", "gcc")  # builds use $CXX, so staleness must check it too
    assert registry.get("cpp").software()["compiler"].startswith("gcc ")
    triton = registry.get("triton").software()
    assert "triton" in triton and "compiler" not in triton and triton["codegen_version"] != cpp["codegen_version"]
    with pytest.raises(ValueError, match="unknown backend"):
        registry.get("metal")


def test_default_db_url(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOPNEST_DB", f"sqlite:///{tmp_path / 'env.db'}")
    assert default_db_url() == f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.delenv("LOOPNEST_DB")
    url = default_db_url()
    assert url.startswith("sqlite:///") and url.endswith("/loopnest/tuning.db")
