"""Whole models on the CPU: eager vs Inductor (C++) vs loopnest (C++), in inference or training.

Run: python bench/cpu_models.py [--rounds N] [--train] [MODEL ...] (``--train``: training steps)
The script re-executes itself with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised (glibc
keeps freed blocks mapped, so no call pays page faults for a freshly unmapped output), and
compiles into empty code caches so the cold columns are cold.
"""
import os
import tempfile

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402

from model_bench import main  # noqa: E402

if __name__ == "__main__":
    main("cpu", {"loopnest": {"backend": "cpp", "tune": "off"}},
         lambda: f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)")
