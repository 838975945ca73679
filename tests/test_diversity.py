"""Episode diversity of hybrid recall (memcore.recall.diversity, HybridWeights.diversity)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import HashingEmbedder, HybridWeights, LongTermMemory
from memcore.errors import MemcoreError
from memcore.recall.diversity import diversify
from memcore.recall.index import HybridIndex
from store_helpers import FakeClock


def _naive(episode, position, ranked, scores, weight, radius, top_k):
    """The definition: greedy picks of ``score - weight * #picked within radius in the same
    episode``, first of equals."""
    picked, vals = [], []
    left = list(range(len(ranked)))
    while left and len(picked) < top_k:
        best, best_s = None, -np.inf
        for i in left:
            r = ranked[i]
            pen = sum(1 for j in picked if episode[ranked[j]] == episode[r]
                      and abs(position[ranked[j]] - position[r]) <= radius)
            s = float(scores[i]) - weight * pen
            if s > best_s:
                best, best_s = i, s
        picked.append(best)
        vals.append(best_s)
        left.remove(best)
    return [ranked[i] for i in picked], vals


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=2, max_size=14), st.integers(0, 3),
       st.floats(0.0, 3.0), st.integers(1, 8), st.randoms(use_true_random=False))
def test_diversify_equals_the_greedy_definition(episodes, radius, weight, top_k, rnd):
    n = len(episodes)
    idx = HybridIndex(4)
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    for r, ep in enumerate(episodes):
        idx.put(r, f"t{r}", np.eye(4, dtype=np.float32)[r % 4], episode=ep)
    position, seen = {}, {}
    for r, ep in enumerate(episodes):
        position[r] = seen.get(ep, 0)
        seen[ep] = position[r] + 1
    ranked = rng.permutation(n).astype(np.int64)
    scores = np.sort(rng.normal(size=n).astype(np.float32))[::-1]
    ws, wl, wr = idx.windows(radius)
    rows, got, _ = diversify(ranked, scores, np.zeros(n, np.float32), ws, wl, wr, weight, top_k)
    want_rows, want = _naive(episodes, position, ranked.tolist(), scores, weight, radius, top_k)
    assert rows.tolist() == want_rows
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=0, atol=1e-6)
    assert np.all(np.diff(got) <= 0)


def _store(diversity):
    clock = FakeClock()
    hw = replace(HybridWeights.hybrid(), diversity=diversity, diversity_window=2)
    s = LongTermMemory(embedder=HashingEmbedder(dim=64), clock=clock, hybrid=hw)
    same = ["we went camping by the lake", "camping by the lake was fun",
            "the lake camping trip again", "more lake camping stories", "lake camping photos"]
    for i, t in enumerate(same):
        s.put("c", f"a{i}", t, metadata={"speaker": "Mel", "episode": 1})
    for i, t in enumerate(["I paint landscapes", "we also went camping in the mountains",
                           "nice weather today"]):
        s.put("c", f"b{i}", t, metadata={"speaker": "Mel", "episode": 2})
    return s


def test_diversity_brings_in_another_episode_and_keeps_scores_ordered():
    q = "Where has Mel gone camping?"
    plain = [h.key for h in _store(0.0).search("c", q, top_k=3, touch=False)]
    hits = _store(3.0).search("c", q, top_k=3, touch=False)
    assert all(k.startswith("a") for k in plain)
    assert any(h.key.startswith("b") for h in hits)   # the other episode gets a slot
    assert np.all(np.diff([h.score for h in hits]) <= 0)
    assert all(0.0 < h.score < 1.0 for h in hits)


def test_diversity_fields_are_validated():
    with pytest.raises(MemcoreError):
        HybridWeights(diversity=-1.0)
    with pytest.raises(ValueError):
        HybridWeights(diversity_window=99)
    assert not HybridWeights.similarity().diversity
    assert not replace(HybridWeights.similarity(), diversity=1.0).is_similarity
