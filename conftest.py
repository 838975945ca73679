"""Repository-level pytest configuration: the package's docstring examples run as tests.

Every module of ``memcore/`` and ``kernels/`` is collected as a doctest module, except those
listed in ``DOCTEST_SKIP``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent
DOCTEST_ROOTS = ("memcore", "kernels")
#: examples owned by other work streams (embedders and variants; CLI and demo; kernels): they
#: join by leaving this list once their examples run
DOCTEST_SKIP = ("memcore/embedders/", "memcore/cli.py", "memcore/demo.py", "kernels/")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> DoctestModule | None:
    if file_path.suffix != ".py" or not file_path.resolve().is_relative_to(ROOT):
        return None
    rel = file_path.resolve().relative_to(ROOT).as_posix()
    if rel.startswith(tuple(r + "/" for r in DOCTEST_ROOTS)) and not rel.startswith(DOCTEST_SKIP):
        return DoctestModule.from_parent(parent, path=file_path)
    return None
