"""bench.ranking: candidate-doubling exact top-k equals brute force; flat_topk; DecayWeights."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore import DecayWeights, kernels
from memcore.errors import DimensionMismatchError
from memcore.kernels import reference as ref
from bench.ranking import TopK, exact_topk, flat_topk
from tests.strategies import NOW, assert_topk_matches, ranking_problems, score_tolerance


def _weights(p):
    return DecayWeights(w_similarity=p.w_sim, w_recency=p.w_rec, w_importance=p.w_imp,
                        half_life=p.half_life)


def _numpy_callback(sims_all, calls):
    """Top-m by decreasing sim (stable: ties by lower id), -1 padded like FAISS."""
    order = np.argsort(-sims_all.astype(np.float64), kind="stable")

    def search(m):
        calls.append(m)
        ids = np.full(m, -1, np.int64)
        sims = np.full(m, -np.inf, np.float32)
        take = order[:m]
        ids[:take.size] = take
        sims[:take.size] = sims_all[take]
        return ids, sims
    return search


def _faiss_callback(index, query, calls):
    def search(m):
        calls.append(m)
        sims, ids = index.search(query[None, :], m)
        return ids[0], sims[0]
    return search


def _brute_force(p, sims_all, k):
    """Kernel rerank of *every* row with the index's own sims: the reference exact_topk equals."""
    n = sims_all.shape[0]
    out = (np.empty(k, np.int64), np.empty(k, np.float32), np.empty(k, np.float32))
    count = kernels.rerank(np.arange(n, dtype=np.int64), sims_all, p.w_sim,
                           (p.last_accessed_at, p.importance, p.now, p.half_life, p.w_rec,
                            p.w_imp), p.alive, p.threshold, out)
    return (*out, count)


def _check_exact(p, top, sims_all, calls):
    want = _brute_force(p, sims_all, p.k)
    for got, exp in zip(top[:3], want[:3]):
        np.testing.assert_array_equal(got, exp)
    assert top.count == want[3]
    n = sims_all.shape[0]
    assert all(m <= max(n, 0) for m in calls)
    assert calls == sorted(calls)


# ----------------------------------------------------------------------------- exactness
@given(p=ranking_problems(max_n=300, max_dim=8), factor=st.integers(1, 4))
def test_exact_topk_equals_brute_force_numpy_callback(p, factor):
    n = p.vectors.shape[0]
    sims_all = (p.vectors @ p.query).astype(np.float32)
    calls = []
    top = exact_topk(_numpy_callback(sims_all, calls), n, p.k, last_accessed_at=p.last_accessed_at,
                     importance=p.importance, alive=p.alive, now=p.now, weights=_weights(p),
                     threshold=p.threshold, initial_factor=factor)
    _check_exact(p, top, sims_all, calls)
    # ... and the oracle agrees with it (ties tolerated).
    oracle = tuple(np.empty(p.k, dt) for dt in (np.int64, np.float32, np.float32))
    full = tuple(np.empty(n + 1, dt) for dt in (np.int64, np.float32, np.float32))
    args = (np.arange(n, dtype=np.int64), sims_all, p.w_sim,
            (p.last_accessed_at, p.importance, p.now, p.half_life, p.w_rec, p.w_imp), p.alive,
            p.threshold)
    c = ref.rerank(*args, oracle)
    cf = ref.rerank(*args, full)
    assert_topk_matches(tuple(top[:4]), (*oracle, c), (*full, cf),
                        score_tolerance(p.w_sim, p.w_rec, p.w_imp), exact_sims=True)


@given(p=ranking_problems(max_n=300, max_dim=8, kinds=("unit",)))
def test_exact_topk_equals_brute_force_faiss_callback(p):
    n, dim = p.vectors.shape
    index = faiss.IndexFlatIP(dim)
    index.add(p.vectors)
    # Brute force over FAISS's own sims for every row (same code path as for any m).
    sims_n, ids_n = index.search(p.query[None, :], max(n, 1))
    sims_all = np.empty(n, np.float32)
    sims_all[ids_n[0][:n]] = sims_n[0][:n]
    calls = []
    top = exact_topk(_faiss_callback(index, p.query, calls), index.ntotal, p.k,
                     last_accessed_at=p.last_accessed_at, importance=p.importance, alive=p.alive,
                     now=p.now, weights=_weights(p), threshold=p.threshold)
    _check_exact(p, top, sims_all, calls)


def test_doubling_happens_when_old_high_sim_rows_lose_to_fresh_low_sim_rows():
    rng = np.random.default_rng(0)
    n, dim, k = 2000, 16, 5
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[0].copy()
    sims_all = (vectors @ query).astype(np.float32)
    order = np.argsort(-sims_all)
    t = np.full(n, NOW - 100 * 3600.0)                      # everything is old...
    t[order[500:520]] = NOW                                 # ...but twenty mid-sim rows are fresh
    imp = np.zeros(n, np.float32)
    alive = np.ones(n, bool)
    w = DecayWeights(w_similarity=1.0, w_recency=2.0, w_importance=0.0, half_life=3600.0)
    calls = []
    top = exact_topk(_numpy_callback(sims_all, calls), n, k, last_accessed_at=t,
                     importance=imp, alive=alive, now=NOW, weights=w)
    assert calls[0] == 4 * k and len(calls) > 3 and top.n_candidates == calls[-1]
    assert set(top.ids.tolist()) <= set(order[500:520].tolist())
    brute = flat_topk(query, vectors, t, imp, alive, k, now=NOW, weights=w)
    np.testing.assert_array_equal(top.ids, brute.ids)


def test_single_fetch_when_similarity_dominates_and_stops_below_threshold():
    rng = np.random.default_rng(1)
    n, k = 1000, 3
    sims_all = np.sort(rng.uniform(-1, 1, n).astype(np.float32))[::-1].copy()
    cols = dict(last_accessed_at=np.full(n, NOW), importance=np.zeros(n, np.float32),
                alive=np.ones(n, bool), now=NOW)
    calls = []
    top = exact_topk(_numpy_callback(sims_all, calls), n, k, weights=DecayWeights.similarity(),
                     **cols)
    assert calls == [4 * k] and top.ids.tolist() == [0, 1, 2]
    # Every row is dead: fetch doubles until sims fall below the threshold, then stops.
    calls = []
    cols["alive"] = np.zeros(n, bool)
    top = exact_topk(_numpy_callback(sims_all, calls), n, k, weights=DecayWeights(),
                     threshold=0.9, **cols)
    assert top.count == 0 and top.ids.tolist() == [-1] * 3
    assert sims_all[calls[-1] - 1] < np.float32(0.9) <= sims_all[calls[-2] - 1]


def test_exact_topk_k_zero_and_empty_index_do_not_search():
    calls = []
    cols = dict(last_accessed_at=np.zeros(4), importance=np.zeros(4, np.float32),
                alive=np.ones(4, bool), now=NOW, weights=DecayWeights())
    top = exact_topk(_numpy_callback(np.zeros(4, np.float32), calls), 4, 0, **cols)
    assert isinstance(top, TopK) and top.ids.shape == (0,) and top.count == 0
    top = exact_topk(_numpy_callback(np.zeros(0, np.float32), calls), 0, 3, **cols)
    assert top.ids.tolist() == [-1, -1, -1] and np.isneginf(top.scores).all() and calls == []


# ----------------------------------------------------------------------------- validation
def _cols(n=4):
    return dict(last_accessed_at=np.zeros(n), importance=np.zeros(n, np.float32),
                alive=np.ones(n, bool), now=NOW, weights=DecayWeights())


@pytest.mark.parametrize("bad, match", [
    (lambda m: (np.arange(m)[::-1].copy(), np.linspace(0, 1, m).astype(np.float32)),
     "decreasing"),
    (lambda m: (np.full(m, 9), np.zeros(m, np.float32)), "n_rows"),
    (lambda m: (np.arange(m), np.zeros(m + 1, np.float32)), "equal lengths"),
    (lambda m: (np.r_[-1, np.arange(m - 1)], np.zeros(m, np.float32)), "padding"),
])
def test_exact_topk_rejects_a_bad_callback(bad, match):
    with pytest.raises(ValueError, match=match):
        exact_topk(bad, 4, 2, **_cols())


@pytest.mark.parametrize("change, err, match", [
    (dict(k=-1), ValueError, "k must be an int"),
    (dict(k=True), ValueError, "k must be an int"),
    (dict(n_rows=2.0), ValueError, "n_rows"),
    (dict(initial_factor=0), ValueError, "initial_factor"),
    (dict(now=float("nan")), ValueError, "now"),
    (dict(threshold=float("nan")), ValueError, "threshold"),
    (dict(weights=(1.0, 0.1, 0.1, 3600.0)), TypeError, "DecayWeights"),
    (dict(importance=np.zeros(4)), TypeError, "importance must be a 1-D float32"),
    (dict(last_accessed_at=np.zeros(4, np.float32)), TypeError, "last_accessed_at"),
    (dict(alive=np.ones(4, np.uint8)), TypeError, "alive"),
    (dict(alive=np.ones(3, bool)), ValueError, "alive has 3 rows"),
    (dict(importance=np.zeros(8, np.float32)[::2]), TypeError, "C-contiguous"),
])
def test_exact_topk_validates_arguments(change, err, match):
    kw = dict(search_candidates=_numpy_callback(np.zeros(4, np.float32), []), n_rows=4, k=2,
              **_cols())
    kw.update(change)
    with pytest.raises(err, match=match):
        exact_topk(**kw)


# ----------------------------------------------------------------------------- flat_topk
@given(p=ranking_problems(max_n=500, max_dim=8, max_queries=3))
def test_flat_topk_equals_the_kernels(p):
    w = _weights(p)
    cols = (p.vectors, p.last_accessed_at, p.importance, p.alive)
    one = flat_topk(p.query, *cols, p.k, now=p.now, weights=w, threshold=p.threshold)
    out = tuple(np.empty(p.k, dt) for dt in (np.int64, np.float32, np.float32))
    count = kernels.fused_topk_serial(p.query, p.vectors, p.w_sim,
                                      (p.last_accessed_at, p.importance, p.now, p.half_life,
                                       p.w_rec, p.w_imp), p.alive, p.threshold, out)
    assert one.count == count and one.n_candidates == p.vectors.shape[0]
    for a, b in zip(one[:3], out):
        np.testing.assert_array_equal(a, b)
    many = flat_topk(p.queries, *cols, p.k, now=p.now, weights=w, threshold=p.threshold)
    assert many.ids.shape == (p.queries.shape[0], p.k) and many.count.dtype == np.int64
    np.testing.assert_array_equal(many.ids[0], one.ids)
    np.testing.assert_array_equal(many.scores[0], one.scores)


def test_flat_topk_validates():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((6, 4)).astype(np.float32)
    cols = (np.zeros(6), np.zeros(6, np.float32), np.ones(6, bool))
    with pytest.raises(DimensionMismatchError, match="dim=4"):
        flat_topk(np.ones(5, np.float32), v, *cols, 2, now=NOW, weights=DecayWeights())
    with pytest.raises(TypeError, match="float32"):
        flat_topk(v[0], v.astype(np.float64), *cols, 2, now=NOW, weights=DecayWeights())
    with pytest.raises(TypeError, match="C-contiguous"):
        flat_topk(v[0, :2], np.asfortranarray(v[:, :2]), *cols, 2, now=NOW,
                  weights=DecayWeights())
    with pytest.raises(ValueError, match="importance has 7 rows"):
        flat_topk(v[0], v, cols[0], np.zeros(7, np.float32), cols[2], 2, now=NOW,
                  weights=DecayWeights())
    # A float64 / list query is converted (queries are small); the result is unchanged.
    a = flat_topk(v[0].astype(np.float64).tolist(), v, *cols, 2, now=NOW, weights=DecayWeights())
    b = flat_topk(v[0], v, *cols, 2, now=NOW, weights=DecayWeights())
    np.testing.assert_array_equal(a.ids, b.ids)


# ----------------------------------------------------------------------------- DecayWeights
@pytest.mark.parametrize("field, value", [
    ("w_similarity", -0.1), ("w_recency", float("inf")), ("w_importance", float("nan")),
    ("w_recency", "0.1"), ("w_importance", True), ("half_life", 0.0), ("half_life", -5.0),
    ("half_life", float("inf")), ("half_life", None),
])
def test_decay_weights_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"DecayWeights.{field}"):
        DecayWeights(**{field: value})


def test_decay_weights_defaults_and_similarity_preset():
    w = DecayWeights()
    assert (w.w_similarity, w.w_recency, w.w_importance) == (1.0, 0.02, 0.1)
    # 0.995 per hour (Park et al. 2023): the half-life is where 0.995 ** hours == 0.5.
    assert abs(0.995 ** (w.half_life / 3600.0) - 0.5) < 1e-12
    assert DecayWeights.similarity() == DecayWeights(w_recency=0.0, w_importance=0.0)
    assert DecayWeights(w_similarity=np.float32(0.5)).w_similarity == 0.5
    assert w.max_bonus == pytest.approx(0.12)
