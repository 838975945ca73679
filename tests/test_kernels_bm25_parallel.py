"""The threaded sparse-pipeline kernels (memcore.kernels.bm25 ``*_parallel``): own-text BM25 and
context-window BM25 equal the single-thread kernels bit for bit, whatever the thread count and
the number of parts, and the oracle; scratch comes back zeroed; inputs are not mutated."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import bm25 as kb
from memcore.kernels import reference as ref
from memcore.recall.lexical import bm25_idf
from memcore.recall.threads import numba_threads
from test_kernels_bm25_sparse import _corpus, params

THREADS = sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)})


def _parts(P, n):
    return tuple(np.zeros((P, n + 2), np.int32) for _ in range(5))


def _context_args(seed, n, vocab, dead, radius, q, k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, wins, row_len = _corpus(
        seed, n, vocab, dead, radius)
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    ctx_len = np.zeros(n, np.int32)
    kb.window_lengths(row_len, *wins, np.arange(n), ctx_len)
    n_live = int(live.sum())
    return (q_terms, post, (doc_row, doc_len, doc_alive), wins, ctx_len, n_live, k1, b, 2.5)


def _check_context(args, n, parts):
    flat = [args[0], *args[1], *args[2], *args[3], args[4]]
    before = [a.copy() for a in flat]
    want_r, want_s = kb.bm25_context_scores_dense(
        *args, (np.zeros(n), np.zeros(n, np.int32), np.zeros(2 * n, np.int32)))
    for threads in THREADS:
        for P in parts:
            scratch = (np.zeros(n + 1), np.zeros(n + 1, np.int32), np.zeros(2 * n + 2, np.int32))
            ps = _parts(P, n)
            with numba_threads(threads):
                rows, scores = kb.bm25_context_scores_dense_parallel(*args, scratch, ps)
            assert rows.dtype == np.int64 and scores.dtype == np.float64
            np.testing.assert_array_equal(rows, want_r)
            assert scores.tobytes() == want_s.tobytes()                  # bit for bit
            assert not scratch[0].any() and not ps[0].any()              # zero again
    r2, s2 = ref.bm25_context_scores_dense_parallel(*args, None, None)
    np.testing.assert_array_equal(want_r, r2)
    np.testing.assert_allclose(want_s, s2, rtol=1e-13)
    for a, bb in zip(flat, before):
        np.testing.assert_array_equal(a, bb)


@given(**params, parts=st.integers(1, 5))
def test_context_parallel_equals_one_thread_and_oracle(seed, n, vocab, dead, radius, q, k1, b,
                                                       parts):
    args = _context_args(seed, n, vocab, dead, radius, q, k1, b)
    if not args[5]:
        return
    _check_context(args, n, (1, parts))


@given(**params)
def test_own_parallel_equals_one_thread_and_oracle(seed, n, vocab, dead, radius, q, k1, b):
    docs, post, doc_row, doc_len, doc_alive, live, *_ = _corpus(seed, n, vocab, dead, radius)
    if not live.any():
        return
    q_terms = np.array([t for t in q if t < vocab], np.int64)
    df = np.array([sum(1 for i in range(n) if live[i] and t in docs[i]) for t in q_terms])
    q_terms = q_terms[df > 0]
    q_idf = bm25_idf(df[df > 0], int(live.sum()))
    avgdl = max(float(doc_len[doc_alive].mean()), 1e-9)
    args = (q_terms, q_idf, post, (doc_row, doc_len, doc_alive), k1, b, avgdl)
    want = kb.bm25_scores(*args, np.full(n, 3.0))
    for threads in THREADS:
        with numba_threads(threads):
            got = kb.bm25_scores_parallel(*args, np.full(n, 3.0))      # zeroed first
        assert got.tobytes() == want.tobytes()
    np.testing.assert_allclose(want, ref.bm25_scores_parallel(*args, np.zeros(n)), rtol=1e-13)


@pytest.mark.parametrize("vocab", [3, 400])
def test_context_parallel_common_and_rare_terms_at_size(vocab):
    """Thousands of rows: long postings over many blocks (the parts split blocks), common terms
    (the accumulator pass) and rare ones (the sorted hits)."""
    n = 3000
    args = _context_args(11, n, vocab, 0.3, 2, [0, 1, 2, 1, 7], 1.2, 0.75)
    _check_context(args, n, (1, 2, 3, 8))


def test_store_threads_take_the_parallel_kernels_with_the_same_hits(monkeypatch):
    """A store with threads=2 scores common terms (a speaker's name in every other row) with
    the threaded kernels and returns exactly the 1-thread store's hits."""
    from memcore import HashingEmbedder, LongTermMemory, MemoryItem
    from memcore.recall import lexical
    from memcore.recall.weights import HybridWeights

    monkeypatch.setattr(lexical, "PARALLEL_MIN_WORK", 0)     # 2,400 rows: parallel anyway
    calls = []
    for name in ("bm25_scores_parallel", "bm25_context_scores_dense_parallel"):
        kernel = getattr(kb, name)
        monkeypatch.setattr(lexical._k, name,
                            lambda *a, _k=kernel, _n=name: calls.append(_n) or _k(*a))
    turns = ["Ann: the red kettle is on the stove", "Bob: the dock battery is low",
             "Ann: I left the lamp on in the hallway", "Bob: the garden door is open"]
    items = [MemoryItem(key=f"m{i}", text=f"{turns[i % 4]} #{i // 4}",
                        metadata={"speaker": turns[i % 4].split(":")[0], "episode": i // 8})
             for i in range(2400)]
    emb = HashingEmbedder(dim=64)
    stores = [LongTermMemory(embedder=emb, hybrid=HybridWeights.no_model(), threads=t)
              for t in (1, 2)]
    for s in stores:
        s.put_many("ns", items)
    for q in ("where did Ann leave the red kettle", "Bob battery", "the door #7"):
        a, b = (s.search("ns", q, top_k=8, touch=False) for s in stores)
        assert [(h.key, h.score, h.similarity) for h in a] == \
            [(h.key, h.score, h.similarity) for h in b]
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert set(calls) == {"bm25_scores_parallel", "bm25_context_scores_dense_parallel"}
