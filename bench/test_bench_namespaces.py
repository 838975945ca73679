"""``memcore bench namespaces`` (bench/namespaces.py): a smoke run, each system in its own
subprocess."""

from __future__ import annotations

from bench import namespaces


def test_smoke_memcore_and_langgraph():
    rows = [namespaces.run_one(s, 30, 3, 20) for s in namespaces.SYSTEMS]
    for r in rows:
        assert "error" not in r, r
        assert r["listed"] == 30 and r["search_p50_ms"] > 0 and r["peak_rss_mb"] > 0
    mc = rows[0]
    assert mc["fds_open"] <= 4 and mc["disk_bytes_per_memory"] > 0
