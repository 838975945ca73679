"""Window-document frequencies kept under writes, and BM25 of given rows from the forward index
(memcore.kernels.bm25: window_term_counts, bm25_rows, bm25_context_rows): equal to the
postings kernels bit for bit and to the oracles, after any sequence of puts and deletes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.kernels import bm25 as kb
from memcore.kernels import reference as ref
from memcore.recall.index import CTX_DF, HybridIndex
from memcore.recall.weights import MAX_WINDOW, HybridWeights

WORDS = ["ann", "bob", "dog", "cat", "red", "sun", "run", "sea"]

ops = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "del"]), st.integers(0, 14),
                         st.lists(st.sampled_from(WORDS), min_size=0, max_size=5),
                         st.sampled_from([None, "a", "b", "c"])), min_size=1, max_size=30)


def _build(seq, batch: bool) -> HybridIndex:
    idx = HybridIndex(4, HybridWeights(dates=False, stem=False))
    rng = np.random.default_rng(0)
    pending: list = []

    def flush():
        if pending:
            idx.put_many([p[0] for p in pending], [p[1] for p in pending],
                         np.stack([p[2] for p in pending]), [(p[3], None) for p in pending])
            pending.clear()

    for op, row, words, ep in seq:
        v = rng.standard_normal(4).astype(np.float32)
        v /= np.linalg.norm(v)
        if op == "del" or any(p[0] == row for p in pending):
            flush()
            idx.delete(row)
            if op == "del":
                continue
        if batch and not (row < idx.n_rows and idx._a("alive")[row]):
            pending.append((row, " ".join(words), v, ep))
        else:
            flush()
            idx.put(row, " ".join(words), v, episode=ep)
    flush()
    return idx


def _df_ctx_by_definition(idx: HybridIndex, radius: int) -> np.ndarray:
    """Per term: live rows whose radius-r window document holds it (from the windows)."""
    nt = idx.lexical._n_terms
    out = np.zeros(nt, np.int64)
    fwd = idx.lexical.forward()
    ws, wl, wr = idx.windows(radius)
    for i in np.flatnonzero(idx._a("alive")[:idx.n_rows]).tolist():
        terms = set()
        for x in (wr[ws[i]:ws[i] + wl[i]].tolist() or [i]):
            terms.update(ref._forward_terms(fwd, x))
        for t in terms:
            out[t] += 1
    return out


@settings(max_examples=60, deadline=None)
@given(seq=ops, batch=st.booleans())
def test_ctx_df_kept_by_writes_equals_the_definition_and_a_recount(seq, batch):
    idx = _build(seq, batch)
    nt = idx.lexical._n_terms
    terms = np.arange(nt, dtype=np.int64)
    for r in range(MAX_WINDOW + 1):
        want = _df_ctx_by_definition(idx, r)
        np.testing.assert_array_equal(idx.context_df(terms, r), want)
    kept = idx._a(CTX_DF)[:nt].copy()
    idx._recount_window_terms()
    np.testing.assert_array_equal(idx._a(CTX_DF)[:nt], kept)


@settings(max_examples=60, deadline=None)
@given(seq=ops, q=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
       k1=st.sampled_from([0.6, 1.2, 2.0]), b=st.sampled_from([0.0, 0.5, 1.0]),
       radius=st.integers(0, MAX_WINDOW))
def test_rows_lookup_equals_the_postings_kernels_bit_for_bit(seq, q, k1, b, radius):
    idx = _build(seq, True)
    lex = idx.lexical
    if not lex.n_docs:
        return
    h, _, c = __import__("memcore")._text.token_hashes([" ".join(q)], parallel=False)
    q_terms, q_idf = lex.query_terms(h[:c[0]])
    fwd = lex.forward()
    rows = np.arange(idx.n_rows, dtype=np.int64)
    live = idx._a("alive")[:idx.n_rows]
    # own text
    r_own, v_own = lex.sparse_scores(q_terms, q_idf, k1, b)
    got = kb.bm25_rows(rows, q_terms, q_idf, fwd, k1, b, lex.avgdl, np.empty(rows.shape[0]))
    want = np.zeros(rows.shape[0])
    want[r_own] = v_own
    assert got.tobytes() == want.tobytes()
    oracle = ref.bm25_rows(rows, q_terms, q_idf, fwd, k1, b, lex.avgdl, np.empty(rows.shape[0]))
    np.testing.assert_allclose(got, oracle, rtol=1e-13)
    # window documents
    ws, wl, wr = idx.windows(radius)
    clen = idx.context_lengths(radius)
    total = int(idx._ctx_len[radius])
    if total <= 0:
        return
    r_ctx, v_ctx = lex.context_scores(q_terms, ws, wl, wr, clen, total, k1, b, radius)
    idf = kb.context_idf(idx.context_df(q_terms, radius), idx.n_live)
    args = (q_terms, idf, fwd, (ws, wl, wr), clen, k1, b, total / lex.n_docs)
    rows_l = rows[live]
    got = kb.bm25_context_rows(rows_l, *args, np.empty(rows_l.shape[0]))
    want = np.zeros(idx.n_rows)
    want[r_ctx] = v_ctx
    assert got.tobytes() == want[rows_l].tobytes()
    oracle = ref.bm25_context_rows(rows_l, *args, np.empty(rows_l.shape[0]))
    np.testing.assert_allclose(got, oracle, rtol=1e-13)


def test_window_term_counts_kernel_equals_the_oracle():
    idx = _build([("put", i, WORDS[i % 8:i % 8 + 3], "e" if i % 3 else None) for i in range(12)],
                 True)
    nt = idx.lexical._n_terms
    rows = np.flatnonzero(idx._a("alive")[:idx.n_rows])
    a = np.zeros((nt, MAX_WINDOW), np.int64)
    b = np.zeros((nt, MAX_WINDOW), np.int64)
    args = (idx._a("win"), idx._a("win_pos"), idx._a("win_cnt"), idx.lexical.forward())
    tick = kb.window_term_counts(rows, 1, *args, np.zeros(nt, np.int64), 1, a)
    assert tick == 1 + rows.shape[0]
    ref.window_term_counts(rows, 1, *args, np.zeros(nt, np.int64), 1, b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, idx._a(CTX_DF)[:nt])


def test_an_index_restored_without_ctx_df_recounts_it():
    idx = _build([("put", i, WORDS[i % 8:i % 8 + 3], "e" if i % 3 else None) for i in range(12)]
                 + [("del", 4, [], None)], True)
    nt = idx.lexical._n_terms
    want = idx._a(CTX_DF)[:nt].copy()
    state = idx.small_state()
    del idx.arrays._arrays[CTX_DF]                  # as written before ctx_df was kept
    back = HybridIndex.restore(4, idx.arrays, state, HybridWeights(dates=False, stem=False))
    np.testing.assert_array_equal(back._a(CTX_DF)[:nt], want)
    back.put(20, "ann dog", np.eye(4, dtype=np.float32)[0], episode="e")
    assert back.context_df(np.arange(back.lexical._n_terms), 2).tolist() == \
        _df_ctx_by_definition(back, 2).tolist()
