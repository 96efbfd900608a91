"""Start-up of the ``autotune`` command: wall time of ``--help`` and of ``db list`` on a tuning DB
of 1,000 winners (median and fastest of ``--repeat`` runs of each, interleaved, so a change of
load hits both alike), and the cumulative import times of ``loopnest.cli`` and of the DB's read
path from ``python -X importtime``. Targets on a 2-core host: ``--help`` <= 0.3 s, ``db list``
<= 0.5 s.

    python bench/cli_startup.py [--repeat 11]
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILL = """
import sys
from loopnest.db.api import HardwareInfo, TuningDB, TuningKey
db = TuningDB(sys.argv[1])
hw = HardwareInfo("cpu", "a 2-core host", "avx2", 2, 1 << 30)
config = {"threads": 0, "lanes": 16, "chunk": 64, "schedule": "static", "grain": 0}
for i in range(1000):
    key = TuningKey(f"{i:040x}", "cpp", (i + 1, 64), ("float32",), hw)
    db.register_kernel(key.kernel_hash, "cpp", f"workload/ln_fx_{i}", "kernel text")
    db.store_winner(key, config, 10.0 + i, 20.0, {"torch": "x"})
"""


def walls(commands: dict[str, list[str]], repeat: int) -> dict[str, list[float]]:
    """Wall seconds of ``repeat`` runs of each command, the commands taking turns (each must succeed)."""
    times: dict[str, list[float]] = {what: [] for what in commands}
    for _ in range(repeat):
        for what, argv in commands.items():
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times[what].append(time.perf_counter() - t0)
    return times


def import_ms(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter, in ms."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                         text=True, check=True).stderr
    return max(int(m.group(1)) for m in re.finditer(rf"\|\s*(\d+) \|\s*{re.escape(module)}$", out, re.M)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=11)
    opts = parser.parse_args()
    autotune = shutil.which("autotune") or sys.exit("autotune is not on PATH: pip install -e . first")
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'tuning.db'}"
    subprocess.run([sys.executable, "-c", FILL, url], check=True)
    times = walls({"autotune --help": [autotune, "--help"],
                   "autotune db list (1,000 winners)": [autotune, "db", "list", "--db", url]}, opts.repeat)
    print("| what | median s | fastest s |\n|---|---|---|")
    for what, runs in times.items():
        print(f"| {what} | {statistics.median(runs):.3f} | {min(runs):.3f} |")
    for module in ("loopnest.cli", "loopnest.db.read"):
        print(f"| import {module} (cumulative, -X importtime) | {import_ms(module) / 1e3:.3f} | |")


if __name__ == "__main__":
    main()
