"""Start-up of the ``autotune`` command: wall time of ``--help`` and of ``db list`` on a tuning DB
of 1,000 winners (best of ``--repeat`` runs), and the cumulative import time of ``loopnest.cli``
from ``python -X importtime``. Targets on a 2-core host: ``--help`` <= 0.3 s, ``db list`` <= 0.5 s.

    python bench/cli_startup.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import re
import shutil
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


def best_wall(argv: list[str], repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``argv``, in seconds (each must succeed)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def import_ms(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter, in ms."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                         text=True, check=True).stderr
    return max(int(m.group(1)) for m in re.finditer(rf"\|\s*(\d+) \|\s*{re.escape(module)}$", out, re.M)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    autotune = shutil.which("autotune") or sys.exit("autotune is not on PATH: pip install -e . first")
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'tuning.db'}"
    subprocess.run([sys.executable, "-c", FILL, url], check=True)
    print("| what | seconds |\n|---|---|")
    print(f"| autotune --help | {best_wall([autotune, '--help'], opts.repeat):.3f} |")
    print(f"| autotune db list (1,000 winners) | {best_wall([autotune, 'db', 'list', '--db', url], opts.repeat):.3f} |")
    print(f"| import loopnest.cli (cumulative, -X importtime) | {import_ms('loopnest.cli') / 1e3:.3f} |")


if __name__ == "__main__":
    main()
