"""One score contract on every store and preset (issue 18).

- ``similarity`` is the cosine of the query's vector and the memory's own vector;
- ``threshold`` bounds that similarity (the same 0.3 means the same thing on every preset);
- ``score`` is the fused decay score on the similarity preset, and on the hybrid presets a
  monotone transform of the fused z-score into (0, 1) (:mod:`memcore.recall.score`): the
  ranking is the fused score's, the hits come best first with non-increasing scores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from memcore import (
    DecayWeights,
    HashingEmbedder,
    HybridWeights,
    LongTermMemory,
    SemanticMemory,
    ShortTermMemory,
    TwoTierMemory,
)
from memcore.recall.score import calibrate, weight_scale
from store_helpers import FakeClock
from test_hybrid_stores import QUESTIONS as BASE_QUESTIONS, TURNS

DIM = 64
QUESTIONS = BASE_QUESTIONS + ["I adopted a dog last week"]   # one identical to a memory
PRESETS = {"hybrid": HybridWeights.hybrid(), "no_model": HybridWeights.no_model(),
           "similarity": HybridWeights.similarity()}


def _store(kind: str, hw: HybridWeights, emb, clock):
    if kind == "long":
        return LongTermMemory(embedder=emb, clock=clock, hybrid=hw)
    if kind == "short":
        return ShortTermMemory(capacity=64, embedder=emb, clock=clock, hybrid=hw)
    return TwoTierMemory(ShortTermMemory(capacity=4, embedder=emb, clock=clock),
                         LongTermMemory(embedder=emb, clock=clock), hybrid=hw)


def _filled(kind, hw):
    emb, clock = HashingEmbedder(dim=DIM), FakeClock()
    store = _store(kind, hw, emb, clock)
    for i, (sp, text) in enumerate(TURNS):
        store.put("c", f"d{i}", text, importance=0.1 * i,
                  metadata={"speaker": sp, "episode": f"s{i // 4}"})
        clock.advance(60.0)
    vec_of = {f"d{i}": emb.encode([t])[0] for i, (_, t) in enumerate(TURNS)}
    return store, emb, vec_of


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("kind", ["long", "short", "two_tier"])
def test_similarity_is_the_cosine_and_threshold_bounds_it(kind, preset):
    hw = PRESETS[preset]
    store, emb, vec_of = _filled(kind, hw)
    for q in QUESTIONS:
        qv = emb.encode([store.prepare("c", q).dense])[0]
        hits = store.search("c", q, top_k=len(TURNS), touch=False, query_vector=qv)
        assert hits
        for h in hits:
            assert h.similarity == pytest.approx(float(vec_of[h.key] @ qv), abs=1e-5)
        for t in (0.0, 0.3, 0.5):
            kept = store.search("c", q, top_k=len(TURNS), threshold=t, touch=False,
                                query_vector=qv)
            assert all(h.similarity >= t - 1e-6 for h in kept)
            # exactly the hits at or above the bound, in the same order
            assert [h.key for h in kept] == [h.key for h in hits if h.similarity >= t]


@pytest.mark.parametrize("preset", ["hybrid", "no_model"])
@pytest.mark.parametrize("kind", ["long", "short", "two_tier"])
def test_hybrid_score_is_in_unit_interval_and_keeps_the_fused_ranking(kind, preset):
    hw = PRESETS[preset]
    store, emb, _ = _filled(kind, hw)
    for q in QUESTIONS:
        hits = store.search("c", q, top_k=len(TURNS), touch=False)
        scores = np.array([h.score for h in hits])
        assert np.all((scores > 0.0) & (scores < 1.0))
        assert np.all(np.diff(scores) <= 0.0)
    if kind != "two_tier":   # the raw fused ranking (tier protocol: scan) is the same order
        rq = store.resolve("c", QUESTIONS[0], top_k=len(TURNS), touch=False)
        raw = store.scan(rq)
        got = store.search("c", QUESTIONS[0], top_k=len(TURNS), touch=False)
        assert [h.key for h in got] == [h.key for h in raw]
        np.testing.assert_array_equal([h.score for h in got],
                                      calibrate([h.score for h in raw], rq.hybrid))


def test_similarity_preset_score_is_the_decay_formula():
    store, emb, vec_of = _filled("long", PRESETS["similarity"])
    w = DecayWeights()
    for h in store.search("c", "where is the kettle", top_k=5, touch=False):
        want = w.w_similarity * h.similarity + w.w_recency * h.recency \
            + w.w_importance * h.importance
        assert h.score == pytest.approx(want, abs=1e-5)


def test_semantic_memory_identical_memory_has_top_similarity_and_score():
    # the example: a memory equal to the query came back with score 0.07
    mem = SemanticMemory(embedder=HashingEmbedder(dim=DIM), warmup=False, threshold=0.3,
                         top_k=3)
    for sp, text in TURNS:
        mem.store(text, "ok", "chat")
    hits = mem.retrieve("The kettle is in the left cupboard", "chat", touch=False)
    assert hits[0].text == "The kettle is in the left cupboard"
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert 0.5 < hits[0].score < 1.0
    assert all(h.similarity >= 0.3 for h in hits)
    mem.close()


def test_calibrate_is_monotone_bounded_and_does_not_overflow():
    hw = HybridWeights.hybrid()
    x = np.array([1e6, 50.0, 3.0, 0.0, -3.0, -1e6])
    s = calibrate(x, hw)
    assert np.all(np.isfinite(s)) and np.all((s >= 0.0) & (s <= 1.0))
    assert np.all(np.diff(s) <= 0.0)
    assert s[3] == 0.5 and s[0] == 1.0 and s[-1] == 0.0
    assert s[2] == pytest.approx(0.5 * (1.0 + math.erf(3.0 / 4.5 / math.sqrt(2.0))))
    assert weight_scale(HybridWeights(dense=0.0, lexical=0.0, lexical_context=0.0,
                                      speaker=0.0)) == 1.0
    np.testing.assert_array_equal(calibrate(x, HybridWeights.similarity()), x)
