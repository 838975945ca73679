"""Shared test fixtures: hypothesis profiles and the path to ../shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]

settings.register_profile("default", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("nightly", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


def shared_dir() -> Path:
    """``$MEMCORE_SHARED`` or ``<repo>/../shared``; fails loudly when absent (never skips)."""
    path = Path(os.environ.get("MEMCORE_SHARED", REPO.parent / "shared"))
    if not path.is_dir():
        raise FileNotFoundError(
            f"shared data directory {path} not found; set MEMCORE_SHARED to the shared/ folder")
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    """The read-only shared data folder (see ../shared/README.md)."""
    return shared_dir()
