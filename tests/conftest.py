"""Hypothesis profiles. The evaluation-data marker and ``shared`` fixture: ../conftest.py."""

from __future__ import annotations

import os

import pytest

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("nightly", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


def pytest_sessionfinish(session, exitstatus):
    """Stop the PostgreSQL server the tests started (tests/pg_server.py), if any."""
    import pg_server

    pg_server.stop()


@pytest.fixture
def format2(monkeypatch):
    """New namespaces of disk stores get their own directories (format 2), whatever
    ``MEMCORE_PACK`` says: for tests of the format-2 directory layout itself (the files of
    one namespace's directory, opened, damaged or compared byte for byte). Child processes
    the test starts inherit ``MEMCORE_PACK=0``."""
    from memcore.stores import long_pack

    monkeypatch.setattr(long_pack, "ENABLED", False)
    monkeypatch.setenv("MEMCORE_PACK", "0")
