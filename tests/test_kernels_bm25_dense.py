"""Context-window BM25 with n-length accumulators equals the sorting kernel bit for bit, and
the oracle; inputs are not mutated."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from memcore.kernels import bm25 as kb
from memcore.kernels import reference as ref
from test_kernels_bm25_sparse import _corpus, params


@given(**params)
def test_context_dense_equals_sparse_and_oracle(seed, n, vocab, dead, radius, q, k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, wins, row_len = _corpus(
        seed, n, vocab, dead, radius)
    n_live = int(live.sum())
    if not n_live:
        return
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    avgdl_ctx = 2.5
    ctx_len = np.zeros(n, np.int32)                 # as the index caches them
    kb.window_lengths(row_len, *wins, np.arange(n), ctx_len)
    want_len = np.full(n, -1, np.int64)
    ref.window_lengths(row_len, *wins, np.arange(n), want_len)
    np.testing.assert_array_equal(ctx_len, want_len)
    args = (q_terms, post, (doc_row, doc_len, doc_alive), wins, ctx_len, n_live, k1, b, avgdl_ctx)
    flat = [q_terms, *post, doc_row, doc_len, doc_alive, ctx_len, *wins]
    before = [a.copy() for a in flat]
    scratch = (np.zeros(n + 3), np.zeros(n + 3, np.int32), np.full(2 * n + 6, 7, np.int32))
    for _ in range(2):                                  # the scratch comes back zeroed
        rows, scores = kb.bm25_context_scores_dense(*args, scratch)
        assert not scratch[0].any() and not scratch[1].any()
    r1, s1 = kb.bm25_context_scores_sparse(*args)
    assert rows.dtype == np.int64 and scores.dtype == np.float64
    np.testing.assert_array_equal(rows, r1)
    assert scores.tobytes() == s1.tobytes()                        # bit for bit
    r2, s2 = ref.bm25_context_scores_dense(*args, scratch)
    np.testing.assert_array_equal(rows, r2)
    np.testing.assert_allclose(scores, s2, rtol=1e-13)
    for a, bb in zip(flat, before):
        np.testing.assert_array_equal(a, bb)


@given(**params)
def test_own_dense_equals_sparse_and_oracle(seed, n, vocab, dead, radius, q, k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, *_ = _corpus(seed, n, vocab, dead, radius)
    if not live.any():
        return
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    q_idf = np.linspace(0.3, 2.0, q_terms.shape[0])
    avgdl = max(float(doc_len[doc_alive].mean()), 1e-9)
    args = (q_terms, q_idf, post, (doc_row, doc_len, doc_alive), k1, b, avgdl)
    scratch = (np.zeros(n + 2), np.full(n + 2, 5, np.int32))
    for _ in range(2):                                  # the accumulator comes back zeroed
        rows, scores = kb.bm25_scores_dense(*args, scratch)
        assert not scratch[0].any()
    r1, s1 = kb.bm25_scores_sparse(*args)
    assert rows.dtype == np.int64 and scores.dtype == np.float64
    np.testing.assert_array_equal(rows, r1)
    assert scores.tobytes() == s1.tobytes()                        # bit for bit
    r2, s2 = ref.bm25_scores_dense(*args, scratch)
    np.testing.assert_array_equal(rows, r2)
    np.testing.assert_allclose(scores, s2, rtol=1e-12)
