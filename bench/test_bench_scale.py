"""``memcore bench scale`` (bench/scale.py): a smoke run at n=1e3 and the pieces it is made of.

The smoke run is the real tool end to end (corpus, ingest, cold open, searches, FAISS flat and
HNSW, each phase in its own subprocess) at a size that takes seconds; it checks that every
reported field is there and plausible, and that memcore's similarity preset returns exactly
what FAISS flat + the NumPy decay formula return on the same data.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import harness, scale


def test_parse_sizes():
    assert scale.parse_sizes("1e5, 1e6") == [100_000, 1_000_000]
    assert scale.parse_sizes("1000") == [1000]
    for bad in ("0", "1.5", "-3", "", "x", "inf"):
        with pytest.raises(ValueError):
            scale.parse_sizes(bad)


def test_plan_refuses_what_does_not_fit():
    gb = 1e9
    small = scale.plan(100_000, 200, True, mem_available=20 * gb, disk_free=70 * gb)
    assert small["fits"] and not small["reasons"]
    assert small["vectors_bytes"] == 100_000 * 384 * 4
    huge = scale.plan(10_000_000, 200, True, mem_available=20 * gb, disk_free=70 * gb)
    assert huge["vectors_bytes"] == 15_360_000_000      # 1e7 x 384 float32: 15.4 GB
    assert not huge["fits"] and any("RSS" in r for r in huge["reasons"])
    no_disk = scale.plan(1_000_000, 200, False, mem_available=200 * gb, disk_free=1 * gb)
    assert not no_disk["fits"] and any("disk" in r for r in no_disk["reasons"])
    assert not scale.plan(1_000_000, 200, True, mem_available=20 * gb, disk_free=70 * gb,
                          corpus_cached=True)["time_s"] > \
        scale.plan(1_000_000, 200, True, mem_available=20 * gb, disk_free=70 * gb)["time_s"]


def test_agreement_and_recall_tolerate_ties_only():
    vectors = np.array([[1, 0], [1, 0], [0.6, 0.8], [0, 1]], np.float32)
    q = np.array([[1, 0]], np.float32)
    bonus = np.zeros(4)
    flat_ids, flat_scores = np.array([[0]]), np.array([[1.0]])
    # rows 0 and 1 are equal vectors: either is the exact top-1, row 2 is not
    assert scale.agreement(np.array([[1]]), flat_ids, flat_scores, vectors, q, bonus) == 1.0
    assert scale.agreement(np.array([[2]]), flat_ids, flat_scores, vectors, q, bonus) == 0.0
    top2 = (np.array([[0, 1]]), np.array([[1.0, 1.0]]))
    assert scale.agreement(np.array([[1, 0]]), *top2, vectors, q, bonus) == 1.0
    assert scale.agreement(np.array([[0, 2]]), *top2, vectors, q, bonus) == 0.0
    # the decay bonus counts: with it row 2 beats row 1
    assert scale.agreement(np.array([[0, 2]]), np.array([[0, 2]]), np.array([[1.0, 1.0]]),
                           vectors, q, np.array([0.0, 0.0, 0.4, 0.0])) == 1.0
    exact, sims = np.array([[0, 1]]), np.array([[1.0, 1.0]], np.float32)
    assert scale.recall_at(np.array([[1, 0]]), exact, sims, vectors, q) == 1.0
    assert scale.recall_at(np.array([[0, 2]]), exact, sims, vectors, q) == 0.5


@pytest.mark.data("locomo")
def test_scale_turns_are_prefix_stable_real_then_recombined(shared):
    from bench.datasets import locomo_conversations, scale_turns

    real = sum(len(c.turns) for c in locomo_conversations(str(shared)))
    turns = scale_turns(real + 2000, seed=0, data=str(shared))
    assert len(turns.texts) == len(turns.speakers) == turns.episodes.shape[0] == real + 2000
    assert turns.texts[:50] == scale_turns(50, seed=0, data=str(shared)).texts
    assert turns.episodes[:real].max() < 10_000 <= turns.episodes[real:].min()
    synthetic = turns.texts[real:]
    assert len(set(synthetic)) > 0.9 * len(synthetic)          # recombined, not copies
    assert len(set(synthetic) & set(turns.texts[:real])) < 0.2 * len(synthetic)
    mean = np.mean([len(t) for t in synthetic]) / np.mean([len(t) for t in turns.texts[:real]])
    assert 0.7 < mean < 1.4                                     # real token statistics


def _plausible_ms(stats):
    return stats["n"] > 0 and 0 < stats["p50"] <= stats["p99"] < 60_000


@pytest.mark.slow
@pytest.mark.data("locomo")
def test_scale_smoke_run(shared, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCORE_BENCH_CACHE", str(tmp_path / "cache"))
    n, queries = 1000, 12
    rc = harness.main(["scale", "--n", str(n), "--queries", str(queries), "--chunk", "300",
                       "--workloads", "recombined", "--fresh-first", "none",
                       "--data", str(shared), "--out", str(tmp_path / "out")])
    assert rc == 0
    (js,) = (tmp_path / "out").glob("scale-*.json")
    assert js.with_suffix(".md").exists() and js.with_suffix(".png").exists()
    payload = json.loads(js.read_text())
    assert payload["suite"] == "scale" and payload["queries"] == queries
    assert payload["hybrid_preset"] == "no_model" and not payload["notes"]
    (r,) = payload["results"]
    assert r["n"] == n
    ing, mem, flat, hnsw = r["ingest"], r["memcore"], r["faiss_flat"], r["hnsw"]
    assert ing["count"] == mem["count"] == r["open_warm"]["count"] == n
    assert ing["put_many_calls"] == math.ceil(n / 300)
    assert ing["rate_per_s"] > 0 and ing["put_many_s"] > 0 and ing["index_s"] > 0
    assert 384 * 4 < ing["disk_bytes_per_memory"] < 100_000    # at least the float32 vector
    assert mem["open_s"] > 0 and r["open_warm"]["open_s"] > 0 and mem["first_hybrid_s"] > 0
    assert mem["searches"] == 1 + 2 * queries
    for stats in (mem["hybrid"], mem["similarity"], flat["search"]):
        assert _plausible_ms(stats) and stats["n"] == queries
    for rss in (mem["peak_rss_mb"], ing["peak_rss_mb"], flat["peak_rss_mb"], hnsw["peak_rss_mb"]):
        assert 50 < rss < 20_000
    assert flat["recall_at_10"] == 1.0                          # exact search, ties tolerated
    assert r["similarity_vs_flat_agreement"] == 1.0             # memcore exact = flat + decay
    assert set(hnsw["ef"]) == {"64", "128"} and hnsw["build_s"] > 0 and not hnsw["build_cached"]
    for ef in hnsw["ef"].values():
        assert _plausible_ms(ef["search"]) and 0.5 < ef["recall_at_10"] <= 1.0
    for key, value in r["ratios"].items():
        assert math.isfinite(value) and value > 0, key
    assert r["corpus"]["n"] == n and r["corpus"]["distinct_texts"] > 0.9 * n
    # a rerun reuses the cached corpus and HNSW index
    rc = harness.main(["scale", "--n", str(n), "--queries", "3", "--chunk", "300",
                       "--workloads", "recombined", "--fresh-first", "none",
                       "--data", str(shared), "--out", str(tmp_path / "out2")])
    assert rc == 0
    (js2,) = (tmp_path / "out2").glob("scale-*.json")
    again = json.loads(js2.read_text())["results"][0]
    assert again["hnsw"]["build_cached"] and again["similarity_vs_flat_agreement"] == 1.0


def test_plan_flag_prints_and_exits(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMCORE_BENCH_CACHE", str(tmp_path / "cache"))
    assert harness.main(["scale", "--plan", "--n", "1e5,1e7", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "100,000" in err and "10,000,000" in err and "NO:" in err
    assert not list(tmp_path.glob("scale-*"))


def test_parse_choices():
    assert scale.parse_choices("repetitive, recombined", scale.WORKLOADS, "w") == \
        ["repetitive", "recombined"]
    assert scale.parse_choices("none", scale.EXITS, "e") == []
    for bad in ("clean,clean", "dirty"):
        with pytest.raises(ValueError):
            scale.parse_choices(bad, scale.EXITS, "e")
    assert scale.corpus_dir(10, "hashing", 0, 1).name == "hashing-384-s0-n10"   # unchanged
    assert scale.corpus_dir(10, "hashing", 0, 1, "repetitive").name == \
        "repetitive-hashing-384-s0-n10"


@pytest.mark.data("locomo")
def test_repetitive_turns_repeat_the_dev_turns_with_a_suffix(shared):
    from bench.datasets import locomo_conversations, repetitive_turns

    turns = [t for c in locomo_conversations(str(shared)) for t in c.turns]
    size = len(turns)
    rep = repetitive_turns(2 * size + 7, data=str(shared))
    assert len(rep.texts) == len(rep.speakers) == rep.episodes.shape[0] == 2 * size + 7
    assert rep.texts[0] == f"{turns[0].text} #0" and rep.texts[size + 3] == f"{turns[3].text} #1"
    assert rep.texts[2 * size] == f"{turns[0].text} #2"
    assert rep.speakers[size + 3] == turns[3].speaker
    assert not set(rep.texts[:size]) & set(rep.texts[size:2 * size])   # copies told apart
    # each repeat of a session is an episode of its own; within a repeat, LoCoMo's sessions
    assert rep.episodes[size + 3] == 100_000 + rep.episodes[3]
    assert np.unique(rep.episodes[:size]).size == np.unique(rep.episodes[size:2 * size]).size
    assert rep.texts[:50] == repetitive_turns(50, data=str(shared)).texts


def _fake_result(n, workload, round_, p50, fresh):
    ms = {"p50": p50, "p99": 2 * p50, "n": 3}
    return {"n": n, "workload": workload, "round": round_, "load_at_start": [1.0, 1.0, 1.0],
            "memcore": {"hybrid": ms, "similarity": ms, "open_s": 0.1, "peak_rss_mb": 100.0},
            "faiss_flat": {"search": ms}, "ratios": {"similarity_p50_over_flat": 1.0},
            "open_warm": {"open_s": 0.05},
            "ingest": {"put_many_s": 1.0, "index_s": 0.5, "close_s": 0.5, "peak_rss_mb": 1.0},
            "fresh_first": {"clean": {"first_hybrid_s": fresh, "ingest": {"put_many_s": 1.0}}}}


def test_summary_takes_medians_per_workload_and_n():
    rows = scale.summary_rows([_fake_result(10, "repetitive", r, p, f)
                               for r, (p, f) in enumerate([(1.0, 9.0), (5.0, 1.0), (3.0, 2.0)])]
                              + [_fake_result(10, "recombined", 0, 7.0, 0.5)])
    assert [(r["workload"], r["rounds"]) for r in rows] == [("recombined", 1), ("repetitive", 3)]
    rep = rows[1]
    assert rep["hybrid_p50"] == 3.0 and rep["hybrid_p99"] == 6.0 and rep["ingest_s"] == 2.0
    assert rep["first_fresh_clean_s"] == 2.0 and rep["first_fresh_unclean_s"] is None
    assert rep["loads"] == ["1.0/1.0/1.0"] * 3


@pytest.mark.slow
@pytest.mark.data("locomo")
def test_scale_repetitive_workload_smoke_run(shared, tmp_path, monkeypatch):
    """The repetitive workload end to end with both writer exits and two interleaved rounds:
    every phase runs, the fresh process's first hybrid search follows a bulk put_many."""
    monkeypatch.setenv("MEMCORE_BENCH_CACHE", str(tmp_path / "cache"))
    n, queries = 700, 4
    rc = harness.main(["scale", "--n", str(n), "--queries", str(queries), "--chunk", "300",
                       "--workloads", "repetitive", "--repeat", "2", "--skip-hnsw",
                       "--data", str(shared), "--out", str(tmp_path / "out")])
    assert rc == 0
    (js,) = (tmp_path / "out").glob("scale-*.json")
    payload = json.loads(js.read_text())
    assert payload["workloads"] == ["repetitive"] and payload["fresh_first_exits"] == \
        ["clean", "unclean"] and not payload["notes"]
    assert [(r["workload"], r["round"]) for r in payload["results"]] == \
        [("repetitive", 0), ("repetitive", 1)]
    for r in payload["results"]:
        assert r["corpus"]["workload"] == "repetitive" and r["memcore"]["count"] == n
        assert r["similarity_vs_flat_agreement"] == 1.0
        assert len(r["load_at_start"]) == 3
        for exit_, x in r["fresh_first"].items():
            assert x["count"] == n and x["exit"] == exit_ and x["first_hybrid_s"] > 0
            assert x["open_s"] > 0 and x["second_hybrid_s"] > 0
            assert x["ingest"]["put_many_calls"] == math.ceil(n / 300)
            assert (x["ingest"]["close_s"] is None) == (exit_ == "unclean")
            warm = x.get("warm")        # a second fresh process, files in the page cache
            assert (warm is not None) == (exit_ == "clean")
            assert warm is None or (warm["count"] == n and warm["first_hybrid_s"] > 0)
    md = js.with_suffix(".md").read_text()
    assert "side by side" in md and "fresh process after a bulk put_many" in md
    assert "warm page cache" in md
