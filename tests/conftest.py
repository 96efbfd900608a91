"""Shared pytest fixtures: an isolated code cache per test session."""
import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Point loopnest's on-disk caches at a temp dir unless the caller set one."""
    if "LOOPNEST_CACHE_DIR" not in os.environ:
        os.environ["LOOPNEST_CACHE_DIR"] = str(tmp_path_factory.mktemp("ln-cache"))
    yield
