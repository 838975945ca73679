"""Benchmarks run as smoke tests by default (``--benchmark-disable`` in addopts).

Real numbers: ``python -m pytest bench --benchmark-enable --benchmark-json=out.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``$MEMCORE_SHARED`` or ``<repo>/../shared``; fails loudly when absent (never skips)."""
    path = Path(os.environ.get("MEMCORE_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        raise FileNotFoundError(
            f"shared data directory {path} not found; set MEMCORE_SHARED to the shared/ folder")
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    return shared_dir()


@pytest.fixture(scope="session")
def bench_enabled(request) -> bool:
    """True under ``--benchmark-enable``: use full sizes; otherwise smoke-test sizes."""
    config = request.config
    return bool(config.getoption("benchmark_enable") or not config.getoption("benchmark_disable"))
