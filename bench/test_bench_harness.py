"""Smoke tests of the benchmark harness (``memcore bench ...``) so it cannot rot.

Tiny tick / LoCoMo / SciFact runs through the real code path with the hashing embedder (seconds),
plus the metrics against hand-computed values and the data helpers.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import datasets, harness
from bench.metrics import mean_recall_accuracy, ndcg_at_k, percentiles, recall_accuracy, recall_at_k


# --- metrics -------------------------------------------------------------------------------

def test_recall_accuracy_hand_computed():
    ranked = ["D1:1", "D1:2", "D2:5", "D3:1"]
    assert recall_accuracy(ranked, ["D1:2", "D3:1"], k=2) == 0.5
    assert recall_accuracy(ranked, ["D1:2", "D3:1"], k=4) == 1.0
    assert recall_accuracy(ranked, ["D9:9"], k=4) == 0.0  # evidence absent from the corpus: a miss
    assert recall_accuracy(ranked, ["D1:1", "D1:1"], k=1) == 1.0  # duplicates count once
    assert mean_recall_accuracy([ranked, ranked], [["D1:1"], ["D2:5", "D9:9"]], k=3) == 0.75
    with pytest.raises(ValueError, match="evidence"):
        recall_accuracy(ranked, [], k=5)
    with pytest.raises(ValueError, match="k must be"):
        recall_accuracy(ranked, ["D1:1"], k=0)


def test_ndcg_and_recall_hand_computed():
    qrels = {"a": 1, "b": 1, "c": 0}
    # relevant at ranks 2 and 3: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    expected = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "b"], qrels, k=10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b", "x"], qrels, k=10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "a", "b"], qrels, k=1) == 0.0
    # graded: rel 2 at rank 2, rel 1 at rank 1 -> DCG = 1 + 2/log2(3); IDCG = 2 + 1/log2(3)
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, k=2) == pytest.approx(
        (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert recall_at_k(["x", "a", "b"], qrels, k=2) == 0.5
    assert recall_at_k(["x", "a", "b"], qrels, k=100) == 1.0
    assert ndcg_at_k(["a"], {"a": 0}, k=10) == 0.0


def test_percentiles_in_ms():
    p = percentiles(np.arange(1, 101) * 1_000_000)
    assert p["p50"] == pytest.approx(50.5)
    assert p["p99"] == pytest.approx(99.01)
    assert p["n"] == 100


# --- data ----------------------------------------------------------------------------------

@pytest.mark.data("locomo")
def test_locomo_dates_and_evidence(shared):
    assert datasets.parse_locomo_date("1:56 pm on 8 May, 2023") == 1683554160.0
    convs = datasets.locomo_conversations(str(shared))
    assert [c.sample_id for c in convs] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43",
                                            "conv-44"]
    for c in convs:
        times = [t.created_at for t in c.turns]
        assert times == sorted(times)
        assert c.end_time > times[-1]
    qs = [q for c in convs for q in c.questions]
    assert len(qs) == 1157
    assert all(e.startswith("D") and ":" in e for q in qs for e in q.evidence)
    assert datasets._clean_evidence(["D8:6; D9:17", "D:11:26", "D"]) == ("D8:6", "D9:17", "D11:26")


@pytest.mark.data("locomo")
def test_tick_memories_prefix_stable_and_seeded(shared):
    big = datasets.tick_memories(8000, seed=0, data=str(shared))
    assert big[:100] == datasets.tick_memories(100, seed=0, data=str(shared))
    assert big != datasets.tick_memories(8000, seed=1, data=str(shared))
    assert len(set(big)) > 0.95 * len(big)


def test_embedding_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCORE_BENCH_CACHE", str(tmp_path))
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.array([[len(t), 1.0] for t in texts], np.float32)

    first = datasets.cached_encode("toy", encode, ["a", "bb", "a"], progress=False)
    again = datasets.cached_encode("toy", encode, ["bb", "ccc", "a"], progress=False)
    assert calls == [["a", "bb"], ["ccc"]]  # duplicates and cached texts are not re-encoded
    np.testing.assert_array_equal(first[:, 0], [1, 2, 1])
    np.testing.assert_array_equal(again[:, 0], [2, 3, 1])


def test_variant_vectors_are_unit_and_close():
    base = np.random.default_rng(0).normal(size=(50, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    v = datasets.variant_vectors(base, 50, 150, seed=0)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    cos = np.sum(v * base[np.arange(50, 150) % 50], axis=1)
    assert 0.85 < cos.mean() < 0.95


# --- the suites end to end (hashing embedder, tiny sizes) -----------------------------------

needs_long = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("memcore.stores.long"),
    reason="memcore.stores.long (LongTermMemory) has not landed yet")


@needs_long
@pytest.mark.data("locomo")
def test_tick_smoke(tmp_path, shared):
    rc = harness.main(["tick", "--systems", "memcore-hashing-similarity", "--sizes", "300", "--ticks", "5",
                       "--warmup", "2", "--data", str(shared), "--out", str(tmp_path)])
    assert rc == 0
    (out,) = tmp_path.glob("tick-*.json")
    payload = json.loads(out.read_text())
    (row,) = payload["results"]
    assert row["system"] == "memcore-hashing-similarity" and row["n"] == 300
    assert row["tick"]["n"] == 5 and row["tick"]["p50"] > 0 and row["rss_mb"] > 0
    assert payload["env"]["commit"] and payload["env"]["packages"]["numpy"]
    assert list(tmp_path.glob("tick-*.md"))


@needs_long
@pytest.mark.data("locomo")
def test_tick_rounds_interleave_and_report_median_first_tick_and_tail(tmp_path, shared):
    rc = harness.main(["tick", "--systems", "memcore-hashing-similarity", "--sizes", "300",
                       "--ticks", "5", "--warmup", "2", "--rounds", "2", "--data", str(shared),
                       "--out", str(tmp_path)])
    assert rc == 0
    payload = json.loads(next(tmp_path.glob("tick-*.json")).read_text())
    assert [r["round"] for r in payload["runs"]] == [0, 1]
    (row,) = payload["results"]
    assert row["rounds"] == 2 and len(row["loads"]) == 2 and row["first_tick_ms"] > 0
    assert sum(t["count"] for t in payload["runs"][0]["tail"].values()) == 5
    md = next(tmp_path.glob("tick-*.md")).read_text()
    assert "first tick" in md and "What makes the tail" in md


def test_first_tick_table_lists_each_round():
    from bench.tick import _first_markdown

    rows = [{"encoder": "hashing", "n": 10, "cache": c, "warmup": w, "open_s": 0.1,
             "first_ms": f, "second_ms": 1.0, "load": 2.0, "round": r}
            for r, f in enumerate((3.0, 5.0)) for c in ("empty", "warm") for w in (False, True)]
    md = "\n".join(_first_markdown(rows))
    assert "3.00 / 5.00" in md and md.count("| hashing |") == 4


@needs_long
@pytest.mark.data("locomo")
def test_locomo_smoke(tmp_path, shared):
    rc = harness.main(["locomo", "--quick", "--runs", "bm25,memcore-hashing", "--data", str(shared),
                       "--out", str(tmp_path)])
    assert rc == 0
    payload = json.loads(next(tmp_path.glob("locomo-*.json")).read_text())
    assert payload["conversations"] == ["conv-26"]
    for run in ("bm25", "memcore-hashing"):
        overall = payload["results"][run]["all"]
        assert 0 < overall["R@5"] <= overall["R@10"] <= overall["R@25"] <= 1
        assert overall["questions"] == 197  # conv-26 has two questions without evidence


@needs_long
@pytest.mark.data("scifact")
def test_beir_smoke(tmp_path, shared):
    rc = harness.main(["beir", "--quick", "--runs", "bm25,memcore-hashing", "--data", str(shared),
                       "--out", str(tmp_path)])
    assert rc == 0
    payload = json.loads(next(tmp_path.glob("beir-*.json")).read_text())
    for run in ("bm25", "memcore-hashing"):
        assert 0 < payload["results"][run]["nDCG@10"] <= 1
        assert payload["results"][run]["queries"] == 20


@pytest.mark.data("locomo")
def test_cli_bench_dispatch(tmp_path, shared):
    from memcore.cli import main

    assert main(["bench", "locomo", "--quick", "--runs", "bm25", "--data", str(shared),
                 "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("locomo-*.md"))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nope"])
    assert exc.value.code == 2


@pytest.mark.data("locomo")
def test_tick_semantic_memory_row_runs_the_defaults(shared):
    """The hybrid tick row is SemanticMemory with its default recall for the embedder, prefilled
    with speaker/episode metadata; each tick stores its pair."""
    from bench.datasets import tick_inputs, tick_memories
    from bench.systems import SemanticMemorySystem
    from memcore.recall.weights import default_for

    sysobj = SemanticMemorySystem("hashing", 1, str(shared))
    try:
        assert sysobj.name == "memcore-hashing-hybrid"
        assert sysobj.mem.hybrid == default_for(sysobj.embedder) and not sysobj.mem.hybrid.is_similarity
        texts = tick_memories(120, 0, str(shared))
        for off in (0, 60):
            sysobj.prefill(texts[off:off + 60], sysobj.embedder.encode(texts[off:off + 60]), off)
        sysobj.ready()
        stored = sysobj.mem.long.get(sysobj.ns, "m7")
        assert stored.metadata["speaker"] and "episode" in stored.metadata
        for i, (text, response) in enumerate(tick_inputs(3, 0, str(shared))):
            e, r, s, hits = sysobj.tick(i, text, response)
            assert e > 0 and r > 0 and s > 0 and 0 <= hits <= 3
        assert sysobj.mem.stats()["stored"] == 3
    finally:
        sysobj.close()
