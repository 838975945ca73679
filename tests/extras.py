"""Tests of optional extras: skip with a reason naming the extra, fail under ``CI=true``.

``require("mcp", "mcp")`` imports and returns the module, or skips the test with ``pip install
'memcore-agent[mcp]'`` as the reason; under ``CI=true`` (``in_ci`` of the repository's conftest.py) the
missing extra is a failure instead, so CI never passes by skipping (``.ci/run`` installs every
extra it tests).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from memcore.errors import install_hint

_spec = importlib.util.spec_from_file_location(
    "memcore_repo_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
_repo_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_repo_conftest)
in_ci = _repo_conftest.in_ci


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` (provided by ``memcore-agent[extra]``); skip (the test, or the module when
    called at import), or fail under CI, without it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        reason = f"needs the {extra!r} extra: {install_hint(extra)} ({err})"
        if in_ci():
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
