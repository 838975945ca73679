"""``memcore bench namespaces`` (bench/namespaces.py): a smoke run, each system in its own
subprocess (LangGraph's row needs the langgraph extra and skips without it)."""

from __future__ import annotations

from bench import namespaces
from tests.extras import require as require_extra


def _smoke(system: str) -> dict:
    r = namespaces.run_one(system, 30, 3, 20)
    assert "error" not in r, r
    assert r["listed"] == 30 and r["search_p50_ms"] > 0 and r["peak_rss_mb"] > 0
    return r


def test_smoke_memcore():
    mc = _smoke(namespaces.SYSTEMS[0])
    assert mc["fds_open"] <= 16 and mc["disk_bytes_per_memory"] > 0    # the pack's files, once


def test_smoke_langgraph():
    require_extra("langgraph.store.memory", "langgraph")
    for system in namespaces.SYSTEMS[1:]:
        _smoke(system)
