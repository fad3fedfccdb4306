"""Multi-rank tests share one job per world size (dist_harness.world); the cached results
live in pytest's temporary directory, shared by the xdist workers of one run."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _world_cache(tmp_path_factory):
    try:
        import dist_harness
    except pytest.skip.Exception:
        yield
        return
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker has its own basetemp (.../popen-gwN); their parent is shared
    dist_harness.CACHE_DIR[0] = str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    yield
