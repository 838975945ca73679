"""Pruned hybrid search (memcore.recall.index, *Pruning*): common query terms bounded, not
scanned; the result equals the unpruned search's (same rows, same float32 scores, same
similarities) for any weights, filter, threshold, given statistics and k."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.kernels import reference as ref
from memcore.recall.index import HybridIndex
from memcore.recall.prep import PreparedQuery
from memcore.recall.weights import HybridWeights
from memcore.types import DecayWeights

WORDS = ["ann", "bob", "dog", "cat", "red", "sun", "run", "sea", "owl", "fig", "tea", "ink"]


def _index(seed: int, n: int, dim: int = 8) -> tuple[HybridIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = HybridIndex(dim, HybridWeights(dates=False, stem=False))
    V = rng.standard_normal((n, dim)).astype(np.float32)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    # Zipf-like words: "ann"/"bob" (speakers' names) in most rows, the rest rarer
    p = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.2
    texts, meta = [], []
    for i in range(n):
        spk = ["Ann", "Bob", None][int(rng.integers(0, 3))]
        words = rng.choice(WORDS, int(rng.integers(1, 6)), p=p / p.sum()).tolist()
        texts.append(" ".join(words))
        meta.append((f"e{int(rng.integers(0, max(1, n // 6)))}" if rng.random() < 0.9 else None,
                     spk))
    idx.put_many(list(range(n)), texts, V, meta)
    for r in rng.choice(n, n // 10, replace=False).tolist():
        idx.delete(int(r))
    return idx, V


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(5, 120), k=st.integers(1, 12),
       q=st.lists(st.sampled_from(WORDS + ["ann", "ann", "bob"]), min_size=1, max_size=6),
       share=st.sampled_from([0.0, 0.05, 0.2, 0.5]),
       preset=st.sampled_from(["no_model", "hybrid", "raw", "own_only"]),
       filt=st.booleans(), thr=st.sampled_from([-math.inf, -0.2, 0.3]),
       given_stats=st.booleans(), pool=st.sampled_from([1, 4, 256]))
def test_pruned_search_equals_the_unpruned_one(seed, n, k, q, share, preset, filt, thr,
                                               given_stats, pool):
    idx, V = _index(seed, n)
    idx.prune_pool = pool
    w = {"no_model": HybridWeights.no_model(), "hybrid": HybridWeights(),
         "raw": HybridWeights(normalize=False, lexical=0.5, lexical_context=0.2),
         "own_only": HybridWeights(lexical_context=0.0, dense=0.3)}[preset]
    w = HybridWeights(**{**w.__dict__, "stem": False, "dates": False})
    rng = np.random.default_rng(seed + 1)
    qv = rng.standard_normal(V.shape[1]).astype(np.float32)
    qv /= np.linalg.norm(qv)
    prep = PreparedQuery(" ".join(q), " ".join(q), frozenset({"Ann"}) if seed % 2 else frozenset())
    alive = rng.random(idx.n_rows) < 0.8 if filt else None
    t = rng.random(idx.n_rows) * 1e5
    imp = rng.random(idx.n_rows).astype(np.float32)
    kw = dict(top_k=k, weights=w, decay=DecayWeights(1.0, 0.5, 0.3), now=1e5,
              last_accessed_at=t, importance=imp, alive=alive, threshold=thr)
    if given_stats:
        kw["stats"] = idx.moments(prep, qv, weights=w, alive=alive)
    idx.prune_share = math.inf
    want = idx.search(prep, qv, **kw)
    idx.prune_share = share
    got = idx.search(prep, qv, **kw)
    assert got.count == want.count
    np.testing.assert_array_equal(got.ids, want.ids)
    assert got.scores.tobytes() == want.scores.tobytes()
    assert got.sims.tobytes() == want.sims.tobytes()


def test_pruning_skips_the_common_terms_postings():
    """At scale the pruned scan never sees the common term: its own-text signal is not
    computed for the scan, and the result equals the unpruned one and the exact oracle."""
    idx, V = _index(3, 600)
    w = HybridWeights(**{**HybridWeights.no_model().__dict__, "stem": False, "dates": False})
    qv = V[7]
    prep = PreparedQuery("ann ink", "ann ink", frozenset())
    assert idx._prune_plan(prep, w) is None              # off by default
    idx.prune_share = 0.1
    plan = idx._prune_plan(prep, w)
    assert plan is not None and plan[2].tolist() == [True, False]
    idx.prune_share = math.inf
    want = idx.search(prep, qv, top_k=10, weights=w)
    idx.prune_share = 0.1
    got = idx.search(prep, qv, top_k=10, weights=w)
    np.testing.assert_array_equal(got.ids, want.ids)
    assert got.scores.tobytes() == want.scores.tobytes()
    lex = idx.lexical_signals(prep, w)
    stats = idx.moments(prep, qv, weights=w, lexical=lex)
    dense, windows, sparse, _ = idx._scan_args(prep, w, stats, lex)
    n = idx.n_rows
    out = (np.empty(10, np.int64), np.empty(10, np.float32), np.empty(10, np.float32))
    decay = (np.zeros(n), np.zeros(n, np.float32), 0.0, 1.0, 0.0, 0.0)
    ref.hybrid_exact_topk(qv, idx._vectors()[:n], windows, w.alpha, dense, sparse, decay,
                          idx._a("alive")[:n], -np.inf, out)
    np.testing.assert_array_equal(got.ids, out[0])
    np.testing.assert_allclose(got.scores, out[1], rtol=1e-6)
