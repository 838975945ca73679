"""Repository-level pytest configuration: the package's docstring examples run as tests.

Every module of ``memcore/`` is collected as a doctest module, except those another work
stream owns the examples of (listed below; they join when their examples run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
DOCTEST_ROOTS = ("memcore",)
DOCTEST_SKIP = ("memcore/embedders/", "memcore/cli.py", "memcore/demo.py")


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    rel = file_path.resolve().relative_to(ROOT).as_posix() if file_path.is_relative_to(ROOT) else ""
    if (file_path.suffix == ".py" and rel.startswith(tuple(r + "/" for r in DOCTEST_ROOTS))
            and not rel.startswith(DOCTEST_SKIP)):
        return DoctestModule.from_parent(parent, path=file_path)
    return None
