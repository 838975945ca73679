"""Repository-level pytest configuration: evaluation-data gating and doctests.

Doctests: every module of ``memcore/`` is collected as a doctest module (the examples in the
docstrings run as tests), except those listed in :data:`DOCTEST_SKIP`.

Evaluation data, shared by tests/ and bench/:

A test that reads the evaluation data folder (``$MEMCORE_SHARED``, default ``../shared``) is
marked ``@pytest.mark.data("locomo", ...)`` with the datasets it needs
(:data:`memcore.evaldata.DATASETS`). When one is absent the test is skipped with a reason naming
the data, its source and ``memcore data prepare``; under ``CI=true`` it is an error instead, so
CI never passes by skipping. The check runs before any fixture is set up (so a skipped benchmark
never requests pytest-benchmark's fixture). The ``shared`` fixture gives the folder's path and
is only for marked tests.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem, DoctestModule

from memcore import evaldata

REPO = Path(__file__).resolve().parent
DOCTEST_ROOTS = ("memcore",)
DOCTEST_SKIP = ("memcore/cli.py", "memcore/demo.py")
#: Doctests whose examples compile kernel signatures (int64 index arrays, float64 columns)
#: that nothing else in the default run uses: each costs 2-18 s of numba compilation with a cold
#: cache, so they run in the ``slow`` tier (CI runs both; the kernels' property tests and their
#: other doctests stay in the default run).
DOCTEST_SLOW = tuple(
    f"memcore.kernels.{name}" for name in (
        "scan.hybrid_scan_topk", "scan.hybrid_exact_topk", "candidates.hybrid_rows_topk",
        "topk.rerank", "bm25.bm25_context_scores_sparse", "hybrid.hybrid_topk",
        "hashing.unicode_token_hashes", "codes.quantize_query"))
#: Modules that import an optional extra: their doctests are collected only when it is
#: installed (always under CI=true, where a missing extra is then an error, never a skip).
DOCTEST_EXTRAS = {"memcore/integrations/langgraph.py": "langgraph"}


def in_ci() -> bool:
    """True when ``$CI`` is set to anything but empty, 0 or false (as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def shared_root() -> Path:
    """``$MEMCORE_SHARED``, else ``shared/`` beside the checkout."""
    return evaldata.data_root(REPO.parent / "shared")


def tree_status() -> frozenset[str] | None:
    """``git status --porcelain`` lines of the checkout (untracked files listed one by one).

    None when the tests do not run from a git checkout (an sdist, a copied tree) or git is
    absent: then the check below has nothing to compare.
    """
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO,
                         capture_output=True, text=True, check=False)
    return frozenset(out.stdout.splitlines()) if out.returncode == 0 else None


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):          # the controller only (xdist)
        session.config.stash[TREE_BEFORE] = tree_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when it created, changed or deleted a file of the checkout.

    Tests write only under ``tmp_path`` (and gitignored caches): a store opened in the working
    directory once left ``LOCK`` and ``memcore.json`` tracked at the repository root.
    """
    before = session.config.stash.get(TREE_BEFORE, None)
    after = tree_status() if before is not None else None
    if after is None or after == before:
        return
    changed = sorted(after ^ before)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_sep("=", "the test run changed the repository tree", red=True)
        for line in changed:
            reporter.write_line(f"  {line}")
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


TREE_BEFORE = pytest.StashKey[frozenset]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "data(*names): needs evaluation data (memcore.evaldata.DATASETS); skips without "
                   "it, fails under CI=true")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marks = list(item.iter_markers("data"))
    if any(not mark.args for mark in marks):
        pytest.fail(f"{item.nodeid}: @pytest.mark.data needs the dataset names, e.g. "
                    f"@pytest.mark.data('locomo') (see memcore.evaldata.DATASETS)", pytrace=False)
    names = [n for mark in marks for n in mark.args]
    if not names and "shared" in getattr(item, "fixturenames", ()):
        pytest.fail(f"{item.nodeid} uses the `shared` fixture without @pytest.mark.data(...)",
                    pytrace=False)
    if not names:
        return
    root = shared_root()
    absent = evaldata.missing(root, dict.fromkeys(names))
    if absent:
        reason = evaldata.describe(root, absent)
        if in_ci():
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def shared() -> Path:
    """The evaluation data folder (only for tests marked ``@pytest.mark.data``)."""
    return shared_root()


@pytest.hookimpl(tryfirst=True)          # before -m selects on the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for item in items:
        if isinstance(item, DoctestItem) and item.name in DOCTEST_SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    rel = file_path.resolve().relative_to(REPO).as_posix() if file_path.is_relative_to(REPO) else ""
    extra = DOCTEST_EXTRAS.get(rel)
    if extra is not None and not in_ci() and importlib.util.find_spec(extra) is None:
        return None
    if (file_path.suffix == ".py" and rel.startswith(tuple(r + "/" for r in DOCTEST_ROOTS))
            and not rel.startswith(DOCTEST_SKIP)):
        return DoctestModule.from_parent(parent, path=file_path)
    return None
