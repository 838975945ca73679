"""``search(..., explain=True)``: each hit's score terms, on every store kind and preset.

The terms are recomputed after ranking by the scan's NumPy oracle
(:func:`memcore.kernels.reference.hybrid_terms`); they must sum to the fused score, the fused
score must be the one the kernel ranked by, and ``score`` must follow from it as
:mod:`memcore.recall.score` documents. ``explain=False`` changes nothing.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memcore import (DecayWeights, HashingEmbedder, HybridWeights, LongTermMemory,
                     ShortTermMemory, TwoTierMemory)
from memcore.cli import main
from memcore.recall.index import HybridIndex
from store_helpers import FakeClock

WORDS = ["red", "door", "dog", "june", "kettle", "cupboard", "blue", "car", "adopted",
         "garden", "key", "pot"]
SPEAKERS = [None, "Alice", "Bob"]
PRESETS = {
    "similarity": HybridWeights.similarity(),
    "hybrid": HybridWeights.hybrid(),
    "no_model": HybridWeights.no_model(),
    "diversity": HybridWeights(diversity=0.5),
    "raw": HybridWeights(normalize=False),
}
KINDS = ["short", "long_ram", "long_disk", "two_tier"]


def _phi(u: float) -> float:
    return 0.5 * math.erfc(-u / math.sqrt(2.0))


def check_explanation(hit, weights: HybridWeights) -> None:
    """The documented contract of one hit's explanation."""
    e = hit.explanation
    assert e is not None and e["score"] == hit.score
    total = sum(e["contributions"].values())
    assert abs(total - e["fused"]) <= 1e-6 * max(1.0, abs(e["fused"]))
    if e["preset"] == "similarity":
        assert set(e["contributions"]) == {"similarity", "recency", "importance"}
        for k, c in e["contributions"].items():
            assert c == e["weights"][k] * e["signals"][k]
        assert e["signals"]["similarity"] == hit.similarity
        # the fused decay score is the returned score (float32 ranking)
        assert abs(e["fused"] - hit.score) <= 1e-6 * max(1.0, abs(hit.score))
        return
    assert {"dense", "lexical", "lexical_context", "speaker", "recency",
            "importance"} <= set(e["contributions"])
    assert ("diversity" in e["contributions"]) == (weights.diversity > 0)
    if weights.normalize:
        assert e["weight_scale"] == pytest.approx(
            max(1.0, weights.dense + weights.lexical + weights.lexical_context
                + weights.speaker))
        assert set(e["normalisation"]) == {"dense", "lexical", "lexical_context"}
        for name, z in e["normalisation"].items():
            c, x, w = e["contributions"][name], e["signals"][name], e["weights"][name]
            want = w * (x - z["mean"]) / z["std"] if z["std"] > 0 else 0.0
            assert c == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert abs(_phi(e["fused"] / e["weight_scale"]) - hit.score) <= 1e-6
    else:
        assert e["weight_scale"] is None and e["normalisation"] == {}
        assert abs(e["fused"] - hit.score) <= 1e-5 * max(1.0, abs(hit.score))
    sp = e["contributions"]["speaker"]
    assert sp in (0.0, e["weights"]["speaker"])


def _store(kind: str, root: Path, clock: FakeClock, emb, hybrid):
    if kind == "short":
        return ShortTermMemory(capacity=100, embedder=emb, clock=clock, hybrid=hybrid)
    if kind == "long_ram":
        return LongTermMemory(embedder=emb, clock=clock, hybrid=hybrid)
    if kind == "long_disk":
        return LongTermMemory(root / "m", emb, clock=clock, hybrid=hybrid)
    return TwoTierMemory(ShortTermMemory(capacity=100, embedder=emb, clock=clock),
                         LongTermMemory(embedder=emb, clock=clock), hybrid=hybrid)


memories = st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
                              st.sampled_from(SPEAKERS), st.integers(0, 3),
                              st.sampled_from([0.0, 0.25, 0.5, 1.0]),
                              st.sampled_from([0.0, 60.0, 3600.0, 86400.0 * 9])),
                    min_size=1, max_size=14)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mems=memories, query=st.lists(st.sampled_from(WORDS + ["alice", "bob"]), min_size=1,
                                     max_size=4),
       kind=st.sampled_from(KINDS), preset=st.sampled_from(sorted(PRESETS)),
       top_k=st.integers(1, 8), filtered=st.booleans(), decay=st.booleans())
@example(
    mems=[(['cupboard', 'blue'], None, 0, 0.0, 0.0)],
    query=['red'],
    kind='long_disk',
    preset='diversity',
    top_k=1,
    filtered=False,
    decay=False,
)  # an all-zero index array was written through a zero-length memoryview cast
def test_terms_sum_to_the_fused_score_that_maps_to_score(mems, query, kind, preset, top_k,
                                                         filtered, decay):
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    hw = PRESETS[preset]
    weights = DecayWeights(1.0, 0.3, 0.2, half_life=3600.0) if decay else None
    with tempfile.TemporaryDirectory() as tmp:
        store = _store(kind, Path(tmp), clock, emb, hw)
        for i, (words, speaker, episode, imp, age) in enumerate(mems):
            meta = {"episode": episode, "room": "a" if i % 2 else "b"}
            if speaker:
                meta["speaker"] = speaker
            store.put("ns", f"k{i}", " ".join(words), importance=imp, metadata=meta)
            clock.advance(age)
            if kind == "two_tier" and i == len(mems) // 2:
                store.consolidate()
        q = " ".join(query)
        args = dict(top_k=top_k, touch=False, weights=weights,
                    filter={"room": "a"} if filtered else None)
        plain = store.search("ns", q, **args)
        hits = store.search("ns", q, explain=True, **args)
        if hasattr(store, "close"):
            store.close()
    assert all(h.explanation is None for h in plain)
    assert hits == plain                  # explanation does not take part in equality
    assert [(h.key, h.score, h.similarity, h.recency) for h in hits] == \
        [(h.key, h.score, h.similarity, h.recency) for h in plain]
    for h in hits:
        check_explanation(h, hw)


@settings(max_examples=30, deadline=None)
@given(mems=memories, query=st.lists(st.sampled_from(WORDS + ["alice"]), min_size=1, max_size=4),
       preset=st.sampled_from(["hybrid", "no_model", "raw"]))
def test_index_terms_equal_the_kernels_fused_scores(mems, query, preset):
    """HybridIndex.explain's fused value is the scan kernel's score of the same row (float32
    rounding), for every ranked row: the oracle terms and the kernel agree."""
    emb = HashingEmbedder(dim=32)
    hw = PRESETS[preset]
    idx = HybridIndex(32, hw)
    texts = [" ".join(w) for w, *_ in mems]
    idx.put_many(list(range(len(texts))), texts, emb.encode(texts),
                 [(ep, sp) for _, sp, ep, _, _ in mems])
    t = np.array([1e9 - age for *_, age in mems])
    imp = np.array([m[3] for m in mems], np.float32)
    decay = DecayWeights(1.0, 0.4, 0.3, half_life=3600.0)
    q = " ".join(query)
    kw = dict(weights=hw, decay=decay, now=1e9, last_accessed_at=t, importance=imp)
    res = idx.search(q, emb.encode([idx.prepare(q).dense])[0], top_k=len(texts), **kw)
    rows = res.ids[:res.count]
    got = idx.explain(rows, q, emb.encode([idx.prepare(q).dense])[0], **kw)
    fused = np.array([g["fused"] for g in got])
    np.testing.assert_allclose(fused.astype(np.float32), res.scores[:res.count],
                               rtol=1e-5, atol=1e-5)
    for g in got:
        assert abs(sum(g["contributions"].values()) - g["fused"]) <= 1e-9 * max(1, abs(g["fused"]))


def test_cli_search_explain_prints_one_line_per_signal(tmp_path, capsys):
    store = str(tmp_path / "s")
    base = ["--store", store, "--embedder", "hashing"]
    for text in ["the red door is locked", "a red car in the garden", "the kettle is blue"]:
        assert main(base + ["put", "notes", text]) == 0
    capsys.readouterr()
    assert main(base + ["search", "notes", "red door", "--explain"]) == 0
    out = capsys.readouterr().out.splitlines()
    first = out.index(next(line for line in out if "sim" in line))
    block = [line.strip() for line in out[first + 1:first + 9]]
    names = [line.split()[0] for line in block]
    assert "fused" in names and "recency" in names and "importance" in names
    assert main(base + ["search", "notes", "red door"]) == 0
    assert "fused" not in capsys.readouterr().out             # only when asked
    assert main(["--json"] + base + ["search", "notes", "red door", "--explain"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and all("explanation" in h for h in hits)
    for h in hits:
        e = h["explanation"]
        assert abs(sum(e["contributions"].values()) - e["fused"]) <= 1e-6
        assert e["score"] == h["score"]
    assert main(["--json"] + base + ["search", "notes", "red door"]) == 0
    assert all("explanation" not in h for h in json.loads(capsys.readouterr().out))


def test_mcp_recall_includes_the_explanation_when_asked(tmp_path):
    from memcore.integrations.mcp_server import MemoryTools

    with MemoryTools(tmp_path / "store", embedder="hashing") as tools:
        tools.remember("The kettle is in the left cupboard.", ["home"])
        tools.remember("The spare key is under the blue pot.", ["home"])
        plain = tools.recall("where is the kettle", ["home"])
        hits = tools.recall("where is the kettle", ["home"], explain=True)
    assert all("explanation" not in h for h in plain)
    assert [h["key"] for h in hits] == [h["key"] for h in plain]
    for h in hits:
        e = h["explanation"]
        json.dumps(e)                                      # JSON-ready structured content
        assert abs(sum(e["contributions"].values()) - e["fused"]) <= 1e-6


@pytest.mark.parametrize("preset", ["similarity", "hybrid", "no_model"])
def test_postgres_explains_as_the_embedded_store(preset):
    """PostgresMemory: SQL for the similarity preset, its hybrid replica otherwise; the same
    terms as a LongTermMemory holding the same memories."""
    import pg_server

    pg_server.url()                                  # skips without a server
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    hw = PRESETS[preset]
    pg = pg_server.store(clock=clock, emb=emb, hybrid=hw)
    ltm = LongTermMemory(embedder=emb, clock=clock, hybrid=hw)
    try:
        for i, text in enumerate(["Alice: the red door is locked", "Bob: a red car",
                                  "the kettle is blue", "Alice adopted a dog in June"]):
            meta = {"speaker": "Alice" if i % 2 == 0 else "Bob", "episode": 0}
            for s in (pg, ltm):
                s.put("ns", f"k{i}", text, importance=0.25 * i, metadata=meta)
            clock.advance(600.0)
        got = pg.search("ns", "alice red door", top_k=4, touch=False, explain=True)
        want = ltm.search("ns", "alice red door", top_k=4, touch=False, explain=True)
        assert [h.key for h in got] == [h.key for h in want]
        for g, w in zip(got, want):
            check_explanation(g, hw)
            for k, c in w.explanation["contributions"].items():
                assert g.explanation["contributions"][k] == pytest.approx(c, abs=1e-5)
    finally:
        pg.drop()
        ltm.close()
