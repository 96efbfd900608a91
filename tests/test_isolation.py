"""The test suite never touches the user's tuning DB or code cache, whatever the environment says:
a pytest run whose environment names a user DB and cache writes neither (conftest.py's override)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).with_name("isolation_probe.py")


def test_a_test_run_leaves_the_users_db_and_cache_alone(tmp_path):
    user = tmp_path / "user"
    user_db, user_cache, user_xdg = user / "user.db", user / "usercache", user / "xdg"
    user_cache.mkdir(parents=True)
    user_xdg.mkdir()
    env = {**os.environ, "LOOPNEST_DB": f"sqlite:///{user_db}", "LOOPNEST_CACHE_DIR": str(user_cache),
           "XDG_CACHE_HOME": str(user_xdg)}  # the default DB and cache live under XDG_CACHE_HOME
    inner = tmp_path / "inner"
    run = subprocess.run([sys.executable, "-m", "pytest", str(PROBE), "-q", "-s", "-p", "no:cacheprovider",
                          f"--basetemp={inner}"], cwd=PROBE.parent, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    written = sorted(str(p.relative_to(user)) for p in user.rglob("*") if p not in (user_cache, user_xdg))
    assert not written, f"the test run wrote into the user's DB or cache: {written}"
    stored = next(line for line in run.stdout.splitlines() if "stored in" in line)
    assert stored.count(str(inner)) == 2, stored  # the probe's DB and cache are the session's temp dirs
