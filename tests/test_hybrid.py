"""Hybrid recall: kernel vs oracle, episode windows vs recomputation, presets, query prep."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_state import assert_same_signals, index_state
from memcore.recall.hybrid import HybridIndex, HybridWeights
from memcore.kernels import hybrid as kh
from memcore.kernels import reference as ref
from memcore.kernels import topk
from memcore.recall.lexical import LexicalIndex
from memcore.recall.prep import DefaultQueryPreparer, PreparedQuery, identity_preparer
from memcore.types import DecayWeights

DIM = 8


def _unit(rng, n, dim=DIM):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _run(fn, q, V, lex, w_dense, w_lex, boost, w_boost, t, imp, alive, normalize, thr, k):
    ids, sc, si = np.empty(k, np.int64), np.empty(k, np.float32), np.empty(k, np.float32)
    n = fn(q, V, lex, w_dense, w_lex, boost, w_boost, t, imp, alive, 100.0, 50.0, 0.3, 0.2,
           normalize, thr, np.empty(V.shape[0], np.float32), ids, sc, si)
    return n, ids, sc, si


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**31 - 1), st.booleans(),
       st.sampled_from([-np.inf, -0.2, 0.3]))
def test_hybrid_kernel_equals_oracle(n, k, seed, normalize, thr):
    rng = np.random.default_rng(seed)
    V = _unit(rng, n)
    q = _unit(rng, 1)[0]
    lex = np.where(rng.random((2, n)) < 0.5, 0.0, rng.random((2, n)) * 5)
    w_lex = np.array([0.25, 0.5])
    boost = (rng.random(n) < 0.3).astype(np.float32)
    t = rng.uniform(0, 200, n)
    imp = rng.random(n).astype(np.float32)
    alive = rng.random(n) < 0.8
    args = (q, V, lex, 1.5, w_lex, boost, 2.0, t, imp, alive, normalize, thr, k)
    before = [a.copy() for a in args if isinstance(a, np.ndarray)]
    got = _run(kh.hybrid_topk, *args)
    want = _run(ref.hybrid_topk, *args)
    assert got[0] == want[0] == min(k, int((alive & (V @ q >= np.float32(thr) - 1e-6)).sum())) \
        or abs(got[0] - want[0]) <= 1   # a sim within float32 rounding of the threshold
    m = min(got[0], want[0])
    np.testing.assert_allclose(got[2][:m], want[2][:m], rtol=1e-5, atol=1e-5)
    # same rows unless two scores are within rounding of each other
    for i in range(m):
        if got[1][i] != want[1][i]:
            assert abs(got[2][i] - want[2][i]) < 1e-4
    assert set(got[1][:got[0]].tolist()) <= set(np.flatnonzero(alive).tolist())
    assert (got[1][got[0]:] == -1).all() and np.isneginf(got[2][got[0]:]).all()
    assert np.isfinite(got[2][:got[0]]).all()
    for a, b in zip([a for a in args if isinstance(a, np.ndarray)], before):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 10), st.integers(0, 2**31 - 1))
def test_unnormalised_dense_only_equals_fused_topk_bit_for_bit(n, k, seed):
    rng = np.random.default_rng(seed)
    V, q = _unit(rng, n), _unit(rng, 1)[0]
    t, imp, alive = rng.uniform(0, 200, n), rng.random(n).astype(np.float32), rng.random(n) < .9
    a = _run(kh.hybrid_topk, q, V, np.zeros((2, n)), 1.0, np.zeros(2), np.zeros(n, np.float32),
             0.0, t, imp, alive, False, -1.0, k)
    ids, sc, si = np.empty(k, np.int64), np.empty(k, np.float32), np.empty(k, np.float32)
    cnt = topk.fused_topk_serial(q, V, t, imp, alive, 100.0, 50.0, 1.0, 0.3, 0.2, -1.0,
                                 ids, sc, si)
    assert a[0] == cnt
    np.testing.assert_array_equal(a[1], ids)
    np.testing.assert_array_equal(a[2], sc)


def test_similarity_preset_reproduces_pure_cosine_ranking():
    rng = np.random.default_rng(0)
    n = 200
    E = _unit(rng, n)
    idx = HybridIndex(DIM)
    words = ["robot", "dock", "battery", "kitchen", "Ann", "Bob"]
    for i in range(n):
        idx.put(i, " ".join(rng.choice(words, 4)), E[i], episode=i // 10,
                speaker=str(rng.choice(["Ann", "Bob"])))
    for _ in range(10):
        q = _unit(rng, 1)[0]
        res = idx.search("what did Ann do at the dock", q, top_k=15,
                         weights=HybridWeights.similarity())
        sims = (E.astype(np.float64) @ q).astype(np.float32)
        order = np.lexsort((np.arange(n), -sims))[:15]
        np.testing.assert_allclose(res.sims, sims[order], atol=1e-6)
        # identical ranking up to float32 near-ties of the dot product
        for a, b in zip(res.ids, order):
            assert a == b or abs(sims[a] - sims[b]) < 1e-6


WORDS = ["robot", "dock", "battery", "low", "kitchen", "noon", "red", "apple"]


def _rebuilt(model, order, weights, dim=DIM):
    """A from-scratch index of the final state: rows without episode, then each episode's
    members in order (the order the incremental index holds them in)."""
    fresh = HybridIndex(dim, weights)
    rows = [r for r, (_, _, ep) in model.items() if ep is None]
    rows += [r for ep in order for r in order[ep]]
    fresh.put_many(rows, [model[r][0] for r in rows], np.stack([model[r][1] for r in rows])
                   if rows else np.zeros((0, dim), np.float32), [(model[r][2], None) for r in rows])
    return fresh


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "put", "delete"]), st.integers(0, 9),
                          st.sampled_from([None, "a", "b"]),
                          st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
                max_size=40),
       st.booleans())
def test_context_windows_equal_recomputation(seq, sums_first):
    """Windows, BM25 of the text and of its window document (from the own postings), codes
    and the moment sums after any put/replace/delete sequence equal a rebuild; a replaced
    memory joins the end of its episode."""
    rng = np.random.default_rng(len(seq))
    w = HybridWeights(stem=False)
    idx = HybridIndex(DIM, w)
    if sums_first:
        for r in (0, 1, 2, 3, 4):
            idx._moment_sums(r)             # kept current by every write from here on
    model: dict = {}
    order: dict = {"a": [], "b": []}
    for op, row, ep, words in seq:
        if row in model and model[row][2] is not None:
            order[model[row][2]].remove(row)
        if op == "put":
            vec = _unit(rng, 1)[0]
            text = " ".join(words)
            idx.put(row, text, vec, episode=ep)
            if ep is not None:
                order[ep].append(row)
            model[row] = (text, vec, ep)
        else:
            assert idx.delete(row) == (row in model)
            model.pop(row, None)
    fresh = _rebuilt(model, order, w)
    assert index_state(idx) == index_state(fresh)
    for ws in ({}, {"dense_window": 0, "lexical_window": 4, "alpha": 0.3},
               {"dense_window": 4, "lexical_window": 1}):
        wq = HybridWeights(stem=False, **ws)
        assert_same_signals(idx, fresh, wq, ("robot dock", "apple red noon", "kitchen"),
                            _unit(rng, 3))


def test_hybrid_search_uses_every_signal():
    idx = HybridIndex(4, query_preparer=DefaultQueryPreparer())
    e = np.eye(4, dtype=np.float32)
    idx.put(0, "I adopted a dog named Max", e[0], episode=1, speaker="Ann")
    idx.put(1, "That is lovely!", e[1], episode=1, speaker="Bob")
    idx.put(2, "We went camping at the beach", e[2], episode=2, speaker="Bob")
    idx.put(3, "The weather was nice", e[3], episode=2, speaker="Ann")
    res = idx.search("What did Ann adopt?", e[0], top_k=4)
    assert res.ids[0] == 0 and res.count == 4
    # lexical alone finds camping; the speaker boost lifts Bob's rows
    res = idx.search(PreparedQuery("camping beach", "", frozenset({"bob"})), e[3], top_k=2,
                     weights=HybridWeights(dense=0.0, lexical_context=0.0, speaker=1.0))
    assert res.ids.tolist() == [2, 1]
    res = idx.search("anything", e[0], top_k=2, alive=np.array([False, False, True, False]))
    assert res.ids.tolist() == [2, -1] and res.count == 1


@pytest.mark.parametrize("bad", [{"dense": -1.0}, {"alpha": 1.5}, {"b": 2.0},
                                 {"dense_window": -1}, {"normalize": 1}, {"speaker": np.nan},
                                 {"dense_window": 5}, {"lexical_window": 65}])
def test_hybrid_weights_validation(bad):
    with pytest.raises(ValueError):
        HybridWeights(**bad)


def test_index_validation():
    idx = HybridIndex(4)
    with pytest.raises(ValueError):
        HybridIndex(0)
    with pytest.raises(Exception) as err:
        idx.put(0, "x", np.ones(3, np.float32))
    assert "dim" in str(err.value)
    with pytest.raises(ValueError):
        idx.put(0, "x", np.array([np.nan, 0, 0, 0], np.float32))
    with pytest.raises(ValueError):
        idx.search("x", np.ones(4, np.float32), top_k=0)


def test_default_query_preparer():
    p = DefaultQueryPreparer()("What did Caroline's dog eat when Mel came?", ["Caroline", "Mel"])
    assert p.lexical == "caroline dog eat mel came"
    assert p.dense == "What did my dog eat when I came?"
    assert p.entities == {"caroline", "mel"}
    assert DefaultQueryPreparer(names="remove")("Did Mel go?", ["Mel"]).dense == "Did go?"
    assert DefaultQueryPreparer()("what is it", []).lexical == "what is it"  # all stop words
    assert identity_preparer("Hi Ann", ["Ann"]).entities == frozenset()
    with pytest.raises(ValueError):
        DefaultQueryPreparer(names="x")


# ------------------------------------------------------------------ batch build
TEXTS = ["I adopted a dog named Rex", "the robot docked at noon", "Straße ＡＢＣ東京タワー ロボット",
         "", "battery low again!", "we went camping with the kids", "adoption agency called",
         "ΣΑΣ ΟΔΟΣ and o'neill's café", "painting is my therapy, painting daily"]


@pytest.mark.parametrize("weights", [HybridWeights.hybrid(), HybridWeights.no_model(),
                                     HybridWeights(alpha=0.3, dense_window=0, lexical_window=3,
                                                   stem=False),
                                     HybridWeights(dense_window=4, lexical_window=1)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_build_equals_per_row(weights, seed):
    """put_many (one tokeniser call, batch postings) leaves the state of put per row:
    windows, codes, speakers, BM25 and moment sums; later writes keep both equal, and the
    searches agree bit for bit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 160))
    rows = [int(r) for r in rng.permutation(3 * n)[:n]]
    texts = [" ".join(rng.choice(TEXTS, rng.integers(0, 4))) for _ in range(n)]
    eps = [None if rng.random() < 0.2 else f"s{rng.integers(0, max(1, n // 6))}"
           for _ in range(n)]
    sps = [None if rng.random() < 0.2 else str(rng.choice(["Ann", "Bob", "ann", "Cy"]))
           for _ in range(n)]
    V = _unit(rng, n)
    batch, per_row = HybridIndex(DIM, weights), HybridIndex(DIM, weights)
    batch.put_many(rows, texts, V, list(zip(eps, sps)))
    for i, r in enumerate(rows):
        per_row.put(r, texts[i], V[i], episode=eps[i], speaker=sps[i])
    qs, qv = ("Ann adopted dog robot", "painting café", "東京"), _unit(rng, 3)
    assert index_state(batch) == index_state(per_row)
    assert_same_signals(batch, per_row, weights, qs, qv)
    for ix in (batch, per_row):          # later writes: incremental on both
        ix.delete(rows[0])
        ix.put(rows[-1], "replaced memory about the dog", V[0], episode="s0", speaker="Bob")
        ix.put_many([3 * n + 1], ["a new one"], V[:1], [("s0", "Ann")])
    assert index_state(batch) == index_state(per_row)
    for ix in (batch, per_row):          # emptied, then filled again over dead postings
        for r in np.flatnonzero(ix._a("alive")[:ix.n_rows]).tolist():
            ix.delete(r)
    batch.put_many(rows[::2], texts[::2], V[::2], list(zip(eps, sps))[::2])
    for i in range(0, n, 2):
        per_row.put(rows[i], texts[i], V[i], episode=eps[i], speaker=sps[i])
    assert index_state(batch) == index_state(per_row)
    assert_same_signals(batch, per_row, weights, qs, qv)
    q = _unit(rng, 1)[0]
    a, b = (ix.search("Ann adopted dog robot", q, top_k=5) for ix in (batch, per_row))
    assert a.ids.tolist() == b.ids.tolist() and a.scores.tobytes() == b.scores.tobytes()


def test_stem_many_equals_per_text():
    from memcore.recall.hybrid import _stem_many, _stemmer

    stem = _stemmer()
    texts = (TEXTS + ["  ", "a_b c__d", "İstanbul ǅ ﬁne", "x\u0301y Σ\u0301 ΟΔΟΣ.", "tab\there\nnl",
                      "\x1cfs\u2028ls", "Running runners ran"]) * 12
    assert _stem_many(texts, stem) == [stem(t) for t in texts]
    assert _stem_many(texts + ["nul\x00inside"], stem) == [stem(t) for t in texts + ["nul\x00inside"]]
