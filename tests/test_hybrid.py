"""Hybrid recall: kernel vs oracle, episode windows vs recomputation, presets, query prep."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_state import assert_same_signals, index_state
from memcore.recall.index import HybridIndex
from memcore.recall.weights import HybridWeights
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
    n = fn(q, V, w_dense, (lex, w_lex, boost, w_boost), (t, imp, 100.0, 50.0, 0.3, 0.2), alive,
           normalize, thr, np.empty(V.shape[0], np.float32), (ids, sc, si))
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
    cnt = topk.fused_topk_serial(q, V, 1.0, (t, imp, 100.0, 50.0, 0.3, 0.2), alive, -1.0,
                                 (ids, sc, si))
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
            idx._moment_sums(0.4, r)        # kept current by every write from here on
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


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.sampled_from([None, "a", "b"]),
                          st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
                max_size=30),
       st.lists(st.integers(0, 13), max_size=12), st.booleans())
def test_delete_many_equals_deletes_in_turn(puts, gone, sums_first):
    """One delete_many (repeats and absent rows included) leaves the index as deleting the
    rows one by one does: windows, codes, BM25, window-document lengths, and the moment
    sums (updated once for the batch) to 1e-9."""
    rng = np.random.default_rng(len(puts) + 7 * len(gone))
    w = HybridWeights(stem=False)
    a, b = HybridIndex(DIM, w), HybridIndex(DIM, w)
    if sums_first:
        for r in (0, 1, 2, 3, 4):
            a._moment_sums(0.4, r)
            b._moment_sums(0.4, r)
    for row, ep, words in puts:
        vec = _unit(rng, 1)[0]
        a.put(row, " ".join(words), vec, episode=ep)
        b.put(row, " ".join(words), vec, episode=ep)
    expect = sum(b.delete(r) for r in dict.fromkeys(gone))
    assert a.delete_many(gone) == expect
    assert index_state(a) == index_state(b)
    for ws in ({}, {"dense_window": 0, "lexical_window": 4, "alpha": 0.3},
               {"dense_window": 4, "lexical_window": 1}):
        wq = HybridWeights(stem=False, **ws)
        assert_same_signals(a, b, wq, ("robot dock", "apple red noon", "kitchen"),
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
    from memcore.recall.words import stem_many as _stem_many, stemmer as _stemmer

    stem = _stemmer()
    texts = (TEXTS + ["  ", "a_b c__d", "İstanbul ǅ ﬁne", "x\u0301y Σ\u0301 ΟΔΟΣ.", "tab\there\nnl",
                      "\x1cfs\u2028ls", "Running runners ran"]) * 12
    assert _stem_many(texts, stem) == [stem(t) for t in texts]
    assert _stem_many(texts + ["nul\x00inside"], stem) == [stem(t) for t in texts + ["nul\x00inside"]]


# ------------------------------------------------------------------ exactness vs the oracle
def _oracle_search(model, order, w, decay, q, qtext, t, imp, now, thr, k, n_rows):
    """From scratch in NumPy: the score of memcore.kernels.reference.hybrid_exact_topk with z
    statistics by two passes over the live rows, BM25 of each text and of each window's
    concatenated texts from fresh lexical indexes, windows from the episode order."""
    V = np.zeros((n_rows, DIM), np.float32)
    live = np.zeros(n_rows, bool)
    wins = {}
    for row, (text, vec, ep) in model.items():
        V[row], live[row] = vec, True
        members = order[ep] if ep is not None else [row]
        wins[row] = members
    r = 0 if w.alpha == 1.0 or w.dense_window == 0 else w.dense_window

    def windows(radius):
        start, size, flat = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64), []
        for i in range(n_rows):
            if i in wins:
                m = wins[i]
                p = m.index(i)
                wi = m[max(0, p - radius):p + radius + 1]
            else:
                wi = [i]
            start[i], size[i] = len(flat), len(wi)
            flat += wi
        return start, size, np.array(flat, np.int64)

    ws, wl, wr = windows(r)
    sims = ref.exact_sims(q, V)
    ctx = sims if r == 0 else ref._window_ctx(sims, ws, wl, wr, w.alpha)
    rows = np.flatnonzero(live)

    def z(x):
        if not w.normalize:
            return 0.0, 1.0
        m = x[rows].mean()
        sd = np.sqrt(((x[rows] - m) ** 2).mean())
        return m, (1.0 / sd if sd > 1e-6 * max(np.sqrt((x[rows] ** 2).mean()), 1e-300) else 0.0)

    mu, inv = z(ctx)
    dense = np.array([w.dense, mu, inv, 0, 0, 0]) if r == 0 else np.array([0, 0, 0, w.dense, mu, inv])
    own, cx = LexicalIndex(w.k1, w.b), LexicalIndex(w.k1, w.b)
    lw = windows(w.lexical_window)
    for i in rows.tolist():
        own.add(i, model[i][0])
        cx.add(i, " ".join(model[j][0] for j in lw[2][lw[0][i]:lw[0][i] + lw[1][i]]))
    sp = []
    for lex, weight in ((own, w.lexical), (cx, w.lexical_context)):
        x = lex.scores(qtext, out=np.zeros(n_rows))
        if weight:
            m, i_ = z(x)
            sp.append((np.flatnonzero(x).astype(np.int64), x[x != 0], weight, m, i_))
    ptr = np.zeros(len(sp) + 1, np.int64)
    ptr[1:] = np.cumsum([s[0].shape[0] for s in sp])
    cat = (lambda j, dt: np.concatenate([s[j] for s in sp]).astype(dt) if sp else np.zeros(0, dt))
    ids, sc, si = np.empty(k, np.int64), np.empty(k, np.float32), np.empty(k, np.float32)
    sparse = (ptr, cat(0, np.int64), cat(1, np.float64), np.array([s[2] for s in sp]),
              np.array([s[3] for s in sp]), np.array([s[4] for s in sp]))
    cnt = ref.hybrid_exact_topk(q, V, (ws, wl, wr), w.alpha, dense, sparse,
                                (t, imp, now, decay.half_life, decay.w_recency,
                                 decay.w_importance), live, thr, (ids, sc, si))
    return cnt, ids, sc, si, sims


def _assert_same_topk(got, want, atol=2e-6):
    """Same count and scores; the same rows except where two scores are within float
    rounding of each other (the z statistics come from sums here, two passes there)."""
    cnt, ids, sc, si = want
    assert got.count == cnt
    np.testing.assert_allclose(got.scores[:cnt], sc[:cnt], rtol=0, atol=atol)
    np.testing.assert_array_equal(got.ids[cnt:], -1)
    for j in range(cnt):
        if got.ids[j] != ids[j]:
            near = np.abs(sc[:cnt] - got.scores[j]) <= 2 * atol
            assert got.ids[j] in ids[:cnt][near] or abs(float(got.scores[j]) - float(sc[-1])) \
                <= 2 * atol          # or it ties with the k-th (a row beyond k may win it)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "put", "put", "delete"]), st.integers(0, 11),
                          st.sampled_from([None, "a", "b"]),
                          st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=3),
                          st.integers(0, 3)),
                min_size=1, max_size=40),
       st.sampled_from(["hybrid", "no_model", "similarity", "wide"]),
       st.sampled_from(["none", "boundary", "fixed"]), st.integers(1, 8), st.integers(0, 99))
def test_search_equals_numpy_oracle_after_random_writes(seq, preset, thr_kind, k, seed):
    """The index's search (codes first pass, stencil, bounds, exact rerank; statistics from
    incrementally kept sums) equals a from-scratch NumPy computation of the same formula,
    after any put/replace/delete sequence; duplicate vectors make exact ties, and the
    threshold may sit exactly on a row's similarity."""
    rng = np.random.default_rng(seed)
    pool = _unit(rng, 4)                    # few distinct vectors: exact ties
    w = {"hybrid": HybridWeights(stem=False), "no_model": replace(HybridWeights.no_model(),
                                                                     stem=False),
         "similarity": HybridWeights.similarity(),
         "wide": HybridWeights(stem=False, dense_window=4, lexical_window=3, alpha=0.25)}[preset]
    idx = HybridIndex(DIM, w, query_preparer=identity_preparer)
    model: dict = {}
    order: dict = {"a": [], "b": []}
    for step, (op, row, ep, words, v) in enumerate(seq):
        if row in model and model[row][2] is not None:
            order[model[row][2]].remove(row)
        if op == "put":
            text = " ".join(words)
            idx.put(row, text, pool[v], episode=ep)
            if ep is not None:
                order[ep].append(row)
            model[row] = (text, pool[v], ep)
        else:
            idx.delete(row)
            model.pop(row, None)
        if step == len(seq) // 2:
            idx.moments("x", pool[0])          # sums built mid-way, then kept incrementally
    if not model:
        return
    n = idx.n_rows
    t = rng.uniform(0, 100, n)
    imp = rng.random(n).astype(np.float32)
    decay = DecayWeights(half_life=50.0, w_recency=0.3, w_importance=0.2)
    q = pool[int(rng.integers(0, 4))] if rng.random() < 0.5 else _unit(rng, 1)[0]
    qtext = " ".join(rng.choice(WORDS[:6], 2))
    sims_all = ref.exact_sims(q, np.stack([model[r][1] for r in sorted(model)]))
    thr = {"none": -np.inf, "fixed": 0.1,
           "boundary": float(sims_all[int(rng.integers(0, len(model)))])}[thr_kind]
    want = _oracle_search(model, order, w, decay, q, qtext, t, imp, 100.0, thr, k, n)
    prepared = PreparedQuery(qtext, qtext, frozenset())
    got = idx.search(prepared, q, top_k=k, weights=w, decay=decay, now=100.0,
                     last_accessed_at=t, importance=imp, threshold=thr)
    _assert_same_topk(got, want[:4])
    if thr_kind == "boundary":                 # the row on the threshold is a candidate
        assert got.count == min(k, int((want[4][sorted(model)] >= thr).sum())) >= 1
    for threads in (2,):
        again = idx.search(prepared, q, top_k=k, weights=w, decay=decay, now=100.0,
                           last_accessed_at=t, importance=imp, threshold=thr, threads=threads)
        assert again.ids.tolist() == got.ids.tolist()
        assert again.scores.tobytes() == got.scores.tobytes()


def test_restore_derives_the_4bit_codes_of_an_index_checkpointed_without_them():
    """An index saved before the 4-bit codes existed (its arrays lack codes4/scale4/cnorm4/
    rnorm4) restores with them derived from the vectors: the same state and searches as an
    index that kept them from the start, and writes after keep them current."""
    from memcore.arrays import RamArrays

    rng = np.random.default_rng(11)
    w = HybridWeights()
    a = HybridIndex(DIM, w, arrays=RamArrays())
    V = _unit(rng, 40)
    a.put_many(list(range(30)), [" ".join(rng.choice(TEXTS, 2)) for _ in range(30)], V[:30],
               [(f"s{i // 7}", None) for i in range(30)])
    a.delete(5)
    old = RamArrays()
    for name in a.arrays.names():
        if name not in ("codes4", "scale4", "cnorm4", "rnorm4"):
            old.alloc(name, a.arrays.get(name).shape, a.arrays.get(name).dtype)[:] = \
                a.arrays.get(name)
    b = HybridIndex.restore(DIM, old, {k: np.array(v) for k, v in a.small_state().items()}, w)
    assert index_state(a) == index_state(b)
    for ix in (a, b):
        ix.put_many([31, 32], ["painting daily", "battery low"], V[31:33], [("s1", None)] * 2)
    assert index_state(a) == index_state(b)
    r1, r2 = (ix.search("battery", V[32], top_k=5) for ix in (a, b))
    assert r1.ids.tolist() == r2.ids.tolist() and r1.scores.tobytes() == r2.scores.tobytes()


@pytest.mark.parametrize("sums", [False, True])
def test_small_state_restore_round_trip(sums):
    """restore(arrays, small_state()) resumes the index exactly: same state and searches,
    and later writes keep it equal to the original (what a store's checkpoint relies on)."""
    from memcore.arrays import RamArrays

    rng = np.random.default_rng(7)
    w = HybridWeights()
    a = HybridIndex(DIM, w, arrays=RamArrays())
    V = _unit(rng, 40)
    a.put_many(list(range(30)), [" ".join(rng.choice(TEXTS, 2)) for _ in range(30)], V[:30],
               [(f"s{i // 7}", ["Ann", "Bob", None][i % 3]) for i in range(30)])
    a.delete(4)
    a.put(3, "the robot docked again", V[30], episode="s0", speaker="Cy")
    if sums:
        a.moments("robot", V[0])
    copy = RamArrays()
    for name in a.arrays.names():
        copy.alloc(name, a.arrays.get(name).shape, a.arrays.get(name).dtype)[:] = \
            a.arrays.get(name)
    state = {k: np.array(v) for k, v in a.small_state().items()}
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b = HybridIndex.restore(DIM, copy, state, w)
    assert index_state(a) == index_state(b) and b.entities() == a.entities()
    qs, qv = ("Ann adopted a dog", "robot docked"), _unit(rng, 2)
    assert_same_signals(a, b, w, qs, qv)
    for ix in (a, b):
        ix.put_many([31, 32], ["painting daily", "battery low"], V[31:33],
                    [("s1", "Ann"), (None, None)])
        ix.delete(10)
    assert index_state(a) == index_state(b)
    assert_same_signals(a, b, w, qs, qv)
    r1, r2 = (ix.search("Ann dog", qv[0], top_k=5) for ix in (a, b))
    assert r1.ids.tolist() == r2.ids.tolist() and r1.scores.tobytes() == r2.scores.tobytes()
    with pytest.raises(ValueError, match="missing"):
        HybridIndex.restore(DIM, RamArrays(), state, w)
