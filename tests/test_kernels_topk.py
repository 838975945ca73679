"""Fused top-k kernels (memcore.kernels.topk) against the NumPy oracles and the ranking properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memcore.kernels import reference as ref
from memcore.kernels import topk
from strategies import (NOW, RankingProblem, assert_topk_matches, band_threshold, importance_for,
                        ranking_problems, score_tolerance, timestamps_for, vectors_for)

SINGLE = {
    "serial": topk.fused_topk_serial,
    "parallel": topk.fused_topk_parallel,
    "dispatch": topk.fused_topk,
}


def _pack(vectors, last_accessed_at, importance, alive, now, half_life, w_sim, w_rec, w_imp,
          threshold):
    """The kernels' arguments after the query from flat columns
    (:meth:`strategies.RankingProblem.columns`): vectors, w_sim, decay, alive, threshold."""
    return (vectors, w_sim, (last_accessed_at, importance, now, half_life, w_rec, w_imp), alive,
            threshold)


def _out(k, shape=()):
    return (np.full(shape + (k,), 7, np.int64), np.full(shape + (k,), 7, np.float32),
            np.full(shape + (k,), 7, np.float32))


def _run(fn, query, p, k):
    out = _out(k)
    count = fn(query, *_pack(*p.columns()), out)
    return (*out, int(count))


def _oracle(p, k, query=None, threshold=None):
    cols = list(p.columns())
    if threshold is not None:
        cols[-1] = threshold
    out = _out(k)
    count = ref.fused_topk(p.query if query is None else query, *_pack(*cols), out)
    return (*out, int(count))


def _full(p, query=None):
    """The oracle's ranking of every candidate, the threshold band included (see
    :func:`strategies.assert_topk_matches`)."""
    return _oracle(p, p.vectors.shape[0] + 1, query,
                   band_threshold(p.threshold, p.kind == "dyadic"))


def _row_query_at_threshold_one():
    """A query equal to a stored unit row, threshold 1.0: the float32 dot lands on 1.0 and
    the float64 oracle's on 0.99999994 (found by hypothesis; issue 12)."""
    rng = np.random.default_rng(26)
    n = 5
    vectors = vectors_for(rng, n, 8, "unit")
    return RankingProblem(
        queries=vectors[[2, 2]].copy(), vectors=vectors,
        last_accessed_at=timestamps_for(rng, n, NOW, 3600.0), importance=importance_for(rng, n),
        alive=np.ones(n, bool), now=NOW, half_life=3600.0, w_sim=1.0, w_rec=0.1, w_imp=0.1,
        threshold=1.0, k=3, kind="unit")


def _n_candidates(p):
    return int((p.alive & ((p.vectors.astype(np.float64) @ p.query.astype(np.float64))
                           .astype(np.float32) >= np.float32(p.threshold))).sum())


# ----------------------------------------------------------------------------- vs the oracle
@pytest.mark.parametrize("name", list(SINGLE))
@given(p=ranking_problems(max_n=1500, max_dim=8))
@example(p=_row_query_at_threshold_one())
def test_fused_topk_equals_oracle_with_ties_tolerated(name, p):
    got = _run(SINGLE[name], p.query, p, p.k)
    want = _oracle(p, p.k)
    assert_topk_matches(got, want, _full(p), score_tolerance(p.w_sim, p.w_rec, p.w_imp),
                        exact_sims=p.kind == "dyadic", threshold=p.threshold)


def test_membership_at_the_threshold_agrees_with_the_oracle():
    # The float64 re-check near the threshold: the kernels keep exactly the oracle's rows.
    p = _row_query_at_threshold_one()
    assert topk._dot(p.query, p.vectors[2]) == np.float32(1.0)       # the float32 sim
    want = _oracle(p, p.k)
    for fn in SINGLE.values():
        got = _run(fn, p.query, p, p.k)
        assert got[3] == want[3]
        np.testing.assert_array_equal(got[0], want[0])


@given(p=ranking_problems(max_n=400), data=st.data())
def test_rerank_equals_oracle(p, data):
    n = p.vectors.shape[0]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    m = data.draw(st.integers(0, n))
    cand = rng.permutation(n)[:m].astype(np.int64)
    sims = (p.vectors[cand] @ p.query).astype(np.float32)
    pad = data.draw(st.integers(0, 3))                       # FAISS pads with -1
    cand = np.concatenate([cand, np.full(pad, -1, np.int64)])
    sims = np.concatenate([sims, np.full(pad, -np.inf, np.float32)])
    args = (cand, sims, *_pack(*p.columns())[1:])
    got, want, full = _out(p.k), _out(p.k), _out(m + 1)
    g = topk.rerank(*args, got)
    w = ref.rerank(*args, want)
    f = ref.rerank(*args, full)
    # Same sims in, so only exp2's last float64 bits can differ from the oracle.
    assert_topk_matches((*got, g), (*want, w), (*full, f), 1e-6 * (1 + p.w_sim + p.w_rec + p.w_imp),
                        exact_sims=True)


@given(p=ranking_problems(max_n=1500, max_dim=8, max_queries=1))
def test_parallel_equals_serial_exactly(p):
    a, b = _out(p.k), _out(p.k)
    assert topk.fused_topk_serial(p.query, *_pack(*p.columns()), a) == \
        topk.fused_topk_parallel(p.query, *_pack(*p.columns()), b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------- properties
@given(p=ranking_problems(max_n=300), seed=st.integers(0, 2**32 - 1))
def test_permutation_invariance(p, seed):
    n = p.vectors.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    cols = (np.ascontiguousarray(p.vectors[perm]), p.last_accessed_at[perm],
            p.importance[perm], p.alive[perm])
    a, b = _out(p.k), _out(p.k)
    ca = topk.fused_topk_serial(p.query, *_pack(*p.columns()), a)
    cb = topk.fused_topk_serial(p.query, *_pack(*cols, *p.columns()[4:]), b)
    assert ca == cb
    np.testing.assert_array_equal(a[1], b[1])       # the same scores, in the same order
    # Ids agree up to ties: each permuted result, mapped back, is a row with that exact score.
    full = _out(n + 1)
    topk.fused_topk_serial(p.query, *_pack(*p.columns()), full)
    score_of = dict(zip(full[0].tolist(), full[1].tolist()))
    mapped = perm[b[0][:cb]]
    assert all(score_of[i] == s for i, s in zip(mapped.tolist(), b[1][:cb].tolist()))
    assert len(set(mapped.tolist())) == cb
    # Rows whose score no other candidate shares are at the same rank in both orders.
    all_scores = full[1][:n + 1]
    unique = np.array([(all_scores == v).sum() == 1 for v in a[1][:ca]], bool)
    np.testing.assert_array_equal(a[0][:ca][unique], mapped[unique])
    np.testing.assert_array_equal(a[2][:ca][unique], b[2][:ca][unique])


@given(p=ranking_problems(max_n=200), data=st.data())
def test_raising_importance_or_refreshing_keeps_a_row_in_the_top_k(p, data):
    out = _out(p.k)
    count = topk.fused_topk_serial(p.query, *_pack(*p.columns()), out)
    if count == 0:
        return
    row = out[0][data.draw(st.integers(0, count - 1))]
    imp, t = p.importance.copy(), p.last_accessed_at.copy()
    imp[row] = 1.0                                          # importance up: score up
    t[row] = max(t[row], p.now)                             # age down to 0: score up
    again = _out(p.k)
    topk.fused_topk_serial(p.query, *_pack(p.vectors, t, imp, p.alive, *p.columns()[4:]), again)
    assert row in again[0]


@given(p=ranking_problems(max_n=200))
def test_k_larger_than_n_returns_every_candidate_and_pads(p):
    n = p.vectors.shape[0]
    k = n + 5
    got = _run(topk.fused_topk_serial, p.query, p, k)
    ids, scores, sims, count = got
    if p.kind == "dyadic":
        assert count == _n_candidates(p)
    assert count == _oracle(p, k)[3]
    assert (ids[count:] == -1).all() and np.isneginf(scores[count:]).all()
    assert np.isneginf(sims[count:]).all() and count <= n
    assert np.isfinite(scores[:count]).all()


@given(p=ranking_problems(max_n=300))
def test_dead_and_below_threshold_rows_never_appear(p):
    ids, _, sims, count = _run(topk.fused_topk, p.query, p, p.k)
    assert p.alive[ids[:count]].all()
    assert (sims[:count] >= np.float32(p.threshold)).all()
    exact = (p.vectors[ids[:count]].astype(np.float64) @ p.query.astype(np.float64))
    assert (np.abs(exact - sims[:count]) <= 1e-5).all()


@given(p=ranking_problems(max_n=300, max_queries=1))
def test_inputs_are_not_mutated(p):
    before = [a.copy() for a in (p.queries, *p.columns()[:4])]
    _run(topk.fused_topk_serial, p.query, p, p.k)
    _run(topk.fused_topk_parallel, p.query, p, p.k)
    for a, b in zip(before, (p.queries, *p.columns()[:4])):
        np.testing.assert_array_equal(a, b)


def test_ties_are_broken_by_lower_row_id():
    vectors = np.tile(np.array([[0.6, 0.8]], np.float32), (10, 1))   # ten identical rows
    t = np.full(10, NOW)
    imp = np.zeros(10, np.float32)
    alive = np.ones(10, bool)
    alive[2] = False
    for fn in SINGLE.values():
        out = _out(4)
        count = fn(vectors[0].copy(), *_pack(vectors, t, imp, alive, NOW, 60.0, 1.0, 1.0, 1.0,
                                             -1.0), out)
        assert count == 4 and out[0].tolist() == [0, 1, 3, 4]
        assert len(set(out[1].tolist())) == 1
    # rerank sees candidates in any id order (FAISS orders ties arbitrarily); a score that
    # float32 rounds up (0.1) must still let a later, lower id displace a tied root.
    for w in ((0.0, 0.1, 0.0), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)):
        out = _out(3)
        cand = np.arange(9, -1, -1, dtype=np.int64)
        count = topk.rerank(cand, np.ones(10, np.float32),
                            *_pack(None, t, imp, alive, NOW, 60.0, *w, -1.0)[1:], out)
        assert count == 3 and out[0].tolist() == [0, 1, 3], w


def test_k_zero_and_empty_store():
    p_vectors = np.zeros((0, 4), np.float32)
    empty = (p_vectors, np.zeros(0), np.zeros(0, np.float32), np.zeros(0, bool), NOW, 1.0,
             1.0, 1.0, 1.0, -np.inf)
    for fn in SINGLE.values():
        out = _out(3)
        assert fn(np.ones(4, np.float32), *_pack(*empty), out) == 0
        assert out[0].tolist() == [-1] * 3 and np.isneginf(out[1]).all()
    rows = (np.ones((5, 4), np.float32), np.zeros(5), np.zeros(5, np.float32), np.ones(5, bool),
            NOW, 1.0, 1.0, 1.0, 1.0, -np.inf)
    for fn in SINGLE.values():
        assert fn(np.ones(4, np.float32), *_pack(*rows), _out(0)) == 0


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("layout", ["read_only", "memmap"])
@pytest.mark.parametrize("name", ["serial", pytest.param("parallel", marks=pytest.mark.slow),
                                  "rerank"])   # parallel: its own read-only compile, slow tier
def test_read_only_and_memmap_inputs(layout, name, tmp_path):
    rng = np.random.default_rng(5)
    n, dim, k = 1200, 16, 7
    vectors = vectors_for(rng, n, dim, "unit")
    cols = [vectors, NOW - rng.uniform(0, 1e5, n), rng.random(n).astype(np.float32),
            rng.random(n) > 0.1]
    queries = vectors_for(rng, 2, dim, "unit")
    scalars = (NOW, 3600.0, 1.0, 0.3, 0.2, 0.0)

    def call(columns, q):
        out = _out(k)
        if name == "serial":
            topk.fused_topk_serial(q[0], *_pack(*columns, *scalars), out)
        elif name == "parallel":
            topk.fused_topk_parallel(q[0], *_pack(*columns, *scalars), out)
        else:
            cand = np.arange(0, n, 3, dtype=np.int64)
            sims = (columns[0][cand] @ q[0]).astype(np.float32)
            topk.rerank(cand, sims, *_pack(*columns, *scalars)[1:], out)
        return out

    want = call(cols, queries)
    if layout == "read_only":
        ro = [c.copy() for c in cols] + [queries.copy()]
        for c in ro:
            c.setflags(write=False)
    else:
        ro = []
        for j, c in enumerate(cols + [queries]):
            mm = np.memmap(tmp_path / f"a{j}", dtype=c.dtype, mode="w+", shape=c.shape)
            mm[:] = c
            mm.flush()
            del mm
            ro.append(np.memmap(tmp_path / f"a{j}", dtype=c.dtype, mode="r", shape=c.shape))
    got = call(ro[:4], ro[4])
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- heap
@given(scores=st.lists(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(-3, 3, width=32),
                       max_size=60),
       k=st.integers(0, 12), seed=st.integers(0, 2**16))
def test_heap_keeps_the_k_best_in_contract_order(scores, k, seed):
    s = np.array(scores, np.float32)
    ids = np.random.default_rng(seed).permutation(len(s)).astype(np.int64)
    h = _out(k)
    size = 0
    for i, sc in zip(ids, s):
        size = topk.heap_push(*h, size, i, sc, sc)
    assert topk.heap_sort(*h, size) == min(k, len(s))
    order = np.lexsort((ids, -s.astype(np.float64)))[:k]
    np.testing.assert_array_equal(h[0][:size], ids[order])
    np.testing.assert_array_equal(h[1][:size], s[order])
    assert (h[0][size:] == -1).all() and np.isneginf(h[1][size:]).all()


def test_use_parallel_threshold():
    assert not topk.use_parallel(10)
    assert topk.use_parallel(topk.PARALLEL_MIN_ROWS) == (topk.numba.get_num_threads() > 1)
