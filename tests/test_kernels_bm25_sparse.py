"""Sparse BM25 (memcore.kernels.bm25): own-text scores without an n-length output, and the
context-window BM25 from own postings + windows, equal to indexing the concatenated windows."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import bm25 as kb
from memcore.kernels import reference as ref
from strategies import episode_windows

try:                                   # the store layer's lexical index (moving to recall/)
    from memcore.recall.lexical import LexicalIndex, bm25_idf
except ImportError:                    # pragma: no cover - before the move
    from memcore.recall.lexical import LexicalIndex, bm25_idf


def _corpus(seed, n, vocab, dead_frac, radius):
    """Rows with random documents (term ids < vocab), postings built by bm25_append, some
    rows dead (no live document), episode windows over the live rows."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        m = int(rng.integers(0, 8))
        docs.append(rng.integers(0, vocab, m))
    head, tail, fill = np.full(vocab, -1), np.full(vocab, -1), np.zeros(vocab, np.int64)
    cap = 8 * n + 8
    bstart, bsize, bnext = (np.zeros(cap, np.int64) for _ in range(3))
    pdoc, ptf = np.zeros(cap * 64, np.int64), np.zeros(cap * 64, np.int32)
    nb = used = 0
    # two documents per row: a replaced (dead) one, then the current one
    n_docs = 2 * n
    doc_row = np.repeat(np.arange(n), 2).astype(np.int64)
    doc_len = np.zeros(n_docs, np.int64)
    doc_alive = np.zeros(n_docs, bool)
    live = rng.random(n) >= dead_frac
    for i in range(n):
        for k, toks in enumerate((rng.integers(0, vocab, 3), docs[i])):
            u, c = np.unique(toks, return_counts=True)
            nb, used = kb.bm25_append(2 * i + k, u.astype(np.int64), c.astype(np.int32),
                                      (head, tail, fill, bstart, bsize, bnext, pdoc, ptf), nb,
                                      used, 4, 256)
            doc_len[2 * i + k] = toks.shape[0]
        doc_alive[2 * i + 1] = live[i]
    episode = np.where(live, rng.integers(-1, max(1, n // 4), n), -1)
    start, size, win = episode_windows(np.where(live, episode, -1), radius)
    # windows hold live rows only: a live row's window drops dead rows (they are own windows)
    keep = [[j for j in win[start[i]:start[i] + size[i]].tolist() if live[j]] if live[i] else [i]
            for i in range(n)]
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum([len(k) for k in keep])
    win = np.array([j for k in keep for j in k], np.int64)
    row_len = np.array([docs[i].shape[0] for i in range(n)], np.int64)
    postings = (head, tail, fill, bstart, bsize, bnext, pdoc, ptf)
    return docs, postings, doc_row, doc_len, doc_alive, live, (ptr[:-1], np.diff(ptr), win), row_len


params = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), vocab=st.integers(1, 12),
              dead=st.sampled_from([0.0, 0.3]), radius=st.integers(0, 3),
              q=st.lists(st.integers(0, 11), min_size=0, max_size=6),
              k1=st.sampled_from([0.6, 1.2, 2.0]), b=st.sampled_from([0.0, 0.5, 0.75, 1.0]))


@given(**params)
def test_sparse_scores_equal_the_dense_kernel(seed, n, vocab, dead, radius, q, k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, *_ = _corpus(seed, n, vocab, dead, radius)
    if not live.any():
        return
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    df = np.array([sum(1 for i in range(n) if live[i] and t in docs[i]) for t in q_terms])
    keep = df > 0
    q_terms, df = q_terms[keep], df[keep]
    q_idf = bm25_idf(df, int(live.sum()))
    avgdl = max(float(doc_len[doc_alive].mean()), 1e-9)
    docs_t = (doc_row, doc_len, doc_alive)
    rows, scores = kb.bm25_scores_sparse(q_terms, q_idf, post, docs_t, k1, b, avgdl)
    dense = kb.bm25_scores(q_terms, q_idf, post, docs_t, k1, b, avgdl, np.zeros(n))
    assert rows.dtype == np.int64 and scores.dtype == np.float64
    assert (np.diff(rows) > 0).all()
    np.testing.assert_array_equal(rows, np.flatnonzero(dense))
    np.testing.assert_array_equal(scores, dense[rows])             # bit for bit
    r2, s2 = ref.bm25_scores_sparse(q_terms, q_idf, post, docs_t, k1, b, avgdl)
    np.testing.assert_array_equal(rows, r2)
    np.testing.assert_allclose(scores, s2, rtol=1e-12)


@given(**params)
def test_context_scores_equal_indexing_the_concatenated_windows(seed, n, vocab, dead, radius, q,
                                                                k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, wins, row_len = _corpus(
        seed, n, vocab, dead, radius)
    n_live = int(live.sum())
    if not n_live:
        return
    # the store layer's context path: one document per live row, its window's tokens
    ctx = LexicalIndex(k1, b)
    for i in np.flatnonzero(live).tolist():
        w = wins[2][wins[0][i]:wins[0][i] + wins[1][i]].tolist()
        ctx.add_tokens(i, np.concatenate([docs[j] for j in w]).astype(np.uint64) + 1000)
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    want = ctx.scores_tokens(q_terms.astype(np.uint64) + 1000, np.zeros(n))
    avgdl_ctx = ctx.avgdl if ctx.avgdl > 0 else 1.0
    ctx_len = np.zeros(n, np.int32)                 # as the index caches them
    kb.window_lengths(row_len, *wins, np.arange(n), ctx_len)
    docs_t = (doc_row, doc_len, doc_alive)
    rows, scores = kb.bm25_context_scores_sparse(q_terms, post, docs_t, wins, ctx_len, n_live, k1,
                                                 b, avgdl_ctx)
    assert (np.diff(rows) > 0).all() and (scores > 0).all()
    np.testing.assert_array_equal(rows, np.flatnonzero(want))
    np.testing.assert_allclose(scores, want[rows], rtol=1e-13, atol=0)
    r2, s2 = ref.bm25_context_scores_sparse(q_terms, post, docs_t, wins, ctx_len, n_live, k1, b,
                                            avgdl_ctx)
    np.testing.assert_array_equal(rows, r2)
    np.testing.assert_allclose(scores, s2, rtol=1e-13)
