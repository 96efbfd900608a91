"""Run only by test_isolation.py (its name keeps it out of the default collection): one test that
compiles, sweeps and stores a winner wherever the test session's settings point."""
import torch

from loopnest.core import settings
from loopnest.db.api import TuningDB


def test_compile_sweep_and_store():
    """A tuned softmax through torch.compile: a built library in the code cache, a winner in the DB."""
    compiled = torch.compile(lambda x: torch.softmax(x, -1), backend="loopnest",
                             options={"backend": "cpp", "tune": "sweep", "tuning": {"trials": 1}})
    x = torch.randn(8, 64)
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    where = settings.current()
    with TuningDB(where.db_url) as db:
        assert db.winners(), f"no winner stored in {where.db_url}"
    assert any(p.is_file() for p in where.cache_dir.rglob("*")), f"nothing cached under {where.cache_dir}"
    print("stored in", where.db_url, "cached under", where.cache_dir)
