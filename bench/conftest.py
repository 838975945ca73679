"""Benchmarks run as smoke tests by default (``--benchmark-disable`` in addopts).

Real numbers: ``python -m pytest bench --benchmark-enable --benchmark-json=out.json``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bench_enabled(request) -> bool:
    """True under ``--benchmark-enable``: use full sizes; otherwise smoke-test sizes."""
    config = request.config
    return bool(config.getoption("benchmark_enable") or not config.getoption("benchmark_disable"))
