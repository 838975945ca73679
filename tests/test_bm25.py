"""LexicalIndex (exact Okapi BM25): equals bm25s, incremental equals batch-built, kernels equal
their oracles."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import _text
from memcore.kernels import bm25 as kb
from memcore.kernels import reference as ref
from memcore.recall.lexical import LexicalIndex

CORPUS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was powerful.",
    "Melanie: I painted a lake sunrise last year, painting is my therapy.",
    "Caroline: the adoption agency called about the adoption interview.",
    "Melanie: we went camping at the beach with the kids, the kids loved it",
    "Straße ＡＢＣ東京タワー ロボット",
    "",
    "support support support group",
]
QUERIES = ["adoption agency interview", "kids beach camping", "support group", "東京 straße",
           "painting therapy lake", "nothing matches here"]


def _hex_tokens(text):
    h, _, c = _text.token_hashes([text], parallel=False)
    return [format(x, "x") for x in h[:c[0]].tolist()]


@pytest.mark.parametrize("k1,b", [(1.2, 0.75), (0.9, 0.1), (2.0, 1.0), (1.5, 0.0)])
def test_bm25_equals_bm25s_lucene(k1, b):
    idx = LexicalIndex(k1=k1, b=b)
    idx.add_many(range(len(CORPUS)), CORPUS)
    oracle = bm25s.BM25(k1=k1, b=b, method="lucene")
    oracle.index([_hex_tokens(t) for t in CORPUS], show_progress=False)
    for q in QUERIES:
        toks = list(dict.fromkeys(_hex_tokens(q)))   # unique query tokens
        got = idx.scores(" ".join(dict.fromkeys(q.split())))
        want = oracle.get_scores(toks) if toks else np.zeros(len(CORPUS))
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_scores_shape_and_unknown_rows():
    idx = LexicalIndex()
    assert idx.scores("anything").shape == (0,)
    idx.add(5, "red apple")
    s = idx.scores("apple")
    assert s.shape == (6,) and s[5] > 0 and not s[:5].any()
    assert idx.remove(5) and not idx.remove(5)
    assert not idx.scores("apple").any() and idx.n_docs == 0


@pytest.mark.parametrize("bad", [{"k1": -1}, {"b": 1.5}, {"b": float("nan")}, {"k1": True}])
def test_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        LexicalIndex(**bad)


def test_rejects_bad_rows_and_out():
    idx = LexicalIndex()
    with pytest.raises(ValueError):
        idx.add(-1, "x")
    idx.add(3, "x")
    with pytest.raises(ValueError):
        idx.scores("x", out=np.empty(2))
    with pytest.raises(ValueError):
        idx.add_many([0, 1], ["a"])


WORDS = ["robot", "dock", "battery", "low", "kitchen", "the", "a", "東京", "noon", "red"]
ops = st.lists(st.tuples(st.sampled_from(["put", "delete"]), st.integers(0, 7),
                         st.lists(st.sampled_from(WORDS), max_size=8)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops, st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_incremental_equals_batch(seq, query):
    idx = LexicalIndex(k1=1.2, b=0.3)
    model: dict = {}
    for op, row, words in seq:
        text = " ".join(words)
        if op == "put":
            idx.add(row, text)
            model[row] = text
        else:
            assert idx.remove(row) == (row in model)
            model.pop(row, None)
    batch = LexicalIndex(k1=1.2, b=0.3)
    batch.add_many(sorted(model), [model[r] for r in sorted(model)])
    q = " ".join(query)
    got = idx.scores(q, out=np.empty(8))
    want = batch.scores(q, out=np.empty(8))
    np.testing.assert_array_equal(got, want)     # exact: same N, df, avgdl, summation order
    assert idx.n_docs == len(model) and idx.avgdl == batch.avgdl


def test_compaction_keeps_scores():
    idx = LexicalIndex(b=0.5)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 5)) for _ in range(3000)]
    for i, t in enumerate(texts):
        idx.add(i % 500, t)                      # 2500 replacements trigger compaction
    batch = LexicalIndex(b=0.5)
    batch.add_many(range(500), texts[-500:])
    assert idx._n_docs_total < 3000              # compacted
    np.testing.assert_array_equal(idx.scores("robot dock 東京"), batch.scores("robot dock 東京"))


def _fresh_state(n_terms=8, n_blocks=64, pool=4096):
    return dict(term_head=np.full(n_terms, -1, np.int64), term_tail=np.full(n_terms, -1, np.int64),
                term_fill=np.zeros(n_terms, np.int64), block_start=np.zeros(n_blocks, np.int64),
                block_size=np.zeros(n_blocks, np.int64), block_next=np.zeros(n_blocks, np.int64),
                pool_doc=np.zeros(pool, np.int64), pool_tf=np.zeros(pool, np.int32))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True), max_size=20),
       st.lists(st.integers(0, 7), max_size=5), st.floats(0.0, 1.0), st.floats(0.0, 3.0))
def test_kernels_equal_oracles(docs, q, b, k1):
    states = [_fresh_state(), _fresh_state()]
    counts = [(0, 0), (0, 0)]
    rng = np.random.default_rng(len(docs))
    for d, terms in enumerate(docs):
        t = np.array(terms, np.int64)
        tf = rng.integers(1, 4, t.shape[0]).astype(np.int32)
        for j, fn in enumerate((kb.bm25_append, ref.bm25_append)):
            s = states[j]
            post = (s["term_head"], s["term_tail"], s["term_fill"], s["block_start"],
                    s["block_size"], s["block_next"], s["pool_doc"], s["pool_tf"])
            counts[j] = fn(d, t, tf, post, counts[j][0], counts[j][1], 2, 8)
    assert counts[0] == counts[1]
    for key in states[0]:
        np.testing.assert_array_equal(states[0][key], states[1][key])
    n = len(docs)
    alive = rng.random(n) < 0.7
    dl = rng.integers(1, 10, n).astype(np.int64)
    row = rng.permutation(n).astype(np.int64)
    qt = np.array(q, np.int64)
    idf = rng.random(qt.shape[0])
    outs = []
    for fn in (kb.bm25_scores, ref.bm25_scores):
        s = states[0]
        args = [x.copy() for x in (qt, idf, s["term_head"], s["term_tail"], s["term_fill"],
                                   s["block_start"], s["block_size"], s["block_next"],
                                   s["pool_doc"], s["pool_tf"], row, dl, alive)]
        before = [a.copy() for a in args]
        outs.append(fn(*args[:2], tuple(args[2:10]), tuple(args[10:]), k1, b, 4.0,
                       np.full(n, 7.0)))
        for a, bb in zip(args, before):
            np.testing.assert_array_equal(a, bb)  # inputs not mutated
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ batch build
def lexical_state(idx: LexicalIndex):
    """Everything a LexicalIndex's behaviour depends on (used entries of its flat arrays)."""
    A = idx._a
    nt, nb, nd = idx._n_terms, idx._n_blocks, idx._n_docs_total
    post = []
    for t in range(nt):
        blk, ent = A("head")[t], []
        while blk >= 0:
            a = A("bstart")[blk]
            n = A("fill")[t] if blk == A("tail")[t] else A("bsize")[blk]
            ent.append((int(a), A("pdoc")[a:a + n].tolist(), A("ptf")[a:a + n].tolist()))
            blk = A("bnext")[blk]
        post.append(ent)
    docs = [(A("dt_term")[p:p + m].tolist(), A("dt_tf")[p:p + m].tolist()) if alive else None
            for p, m, alive in zip(A("doc_tptr")[:nd], A("doc_nterm")[:nd], A("doc_alive")[:nd])]
    return (idx._terms, A("term_hash")[:nt].tolist(), A("df")[:nt].tolist(),
            A("head")[:nt].tolist(), A("tail")[:nt].tolist(), A("fill")[:nt].tolist(),
            A("bstart")[:nb].tolist(), A("bsize")[:nb].tolist(), A("bnext")[:nb].tolist(), post,
            A("doc_row")[:nd].tolist(), A("doc_len")[:nd].tolist(), A("doc_alive")[:nd].tolist(),
            docs, A("row_doc")[:idx.n_rows].tolist(), A("row_len")[:idx.n_rows].tolist(), nb,
            idx._pool_used, nd, idx.n_docs, idx.n_rows, idx._total_len)


@settings(max_examples=60, deadline=None)
@given(ops, st.lists(st.tuples(st.integers(0, 20), st.lists(st.sampled_from(WORDS + ["x"] * 3),
                                                          max_size=300)), max_size=12),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_batch_add_equals_per_row(seq, batch_docs, query):
    """add_tokens_batch (one pass, numba) leaves exactly the state of add_tokens per row, on an
    empty or a used index, with new, repeated or replaced rows; long documents included."""
    per_row, batch = LexicalIndex(k1=1.2, b=0.3), LexicalIndex(k1=1.2, b=0.3)
    for op, row, words in seq:
        for idx in (per_row, batch):
            idx.add(row, " ".join(words)) if op == "put" else idx.remove(row)
    texts = [" ".join(w) for _, w in batch_docs]
    rows = [r for r, _ in batch_docs]
    hashes, offsets, counts = _text.token_hashes(texts) if texts else \
        (np.zeros(0, np.uint64), np.zeros(1, np.int64), np.zeros(0, np.int64))
    for i, r in enumerate(rows):
        per_row.add_tokens(r, hashes[offsets[i]:offsets[i] + counts[i]])
    batch.add_tokens_batch(rows, hashes, offsets[:len(rows)], counts)
    assert lexical_state(batch) == lexical_state(per_row)
    q = " ".join(query)
    np.testing.assert_array_equal(batch.scores(q, out=np.empty(24)),
                                  per_row.scores(q, out=np.empty(24)))


def test_batch_kernels_equal_oracles():
    rng = np.random.default_rng(5)
    for merge in (False, True):
        n_docs = 40
        if merge:       # segments of sorted distinct ids with counts (documents' term lists)
            segs = [np.unique(rng.integers(0, 30, rng.integers(0, 12))) for _ in range(60)]
            tok = np.concatenate(segs).astype(np.int64)
            tf = rng.integers(1, 5, tok.shape[0]).astype(np.int32)
            lens = np.array([s.shape[0] for s in segs], np.int64)
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
            pick = rng.integers(0, 60, 100)
        else:
            tok = rng.integers(0, 30, 500).astype(np.int64)
            tf = np.ones(500, np.int32)
            starts = rng.integers(0, 450, 100).astype(np.int64)
            lens = np.minimum(rng.integers(0, 90, 100), 500 - starts).astype(np.int64)
            pick = np.arange(100)
        seg_ptr = np.concatenate([[0], np.sort(rng.integers(0, 100, n_docs - 1)), [100]]
                                 ).astype(np.int64)
        outs = []
        for fn in (kb.bm25_docs, ref.bm25_docs):
            term_of = np.full(30, -1, np.int64)
            term_of[[3, 7]] = [0, 1]
            ptr = np.empty(n_docs + 1, np.int64)
            terms = np.empty(int(lens[pick].sum()) + 1, np.int64)
            tfs = np.empty(terms.shape[0], np.int32)
            nt = fn(tok, tf, (starts[pick], lens[pick], seg_ptr), term_of, 2, (ptr, terms, tfs),
                    merge)
            outs.append((nt, term_of.tolist(), ptr.tolist(), terms[:ptr[-1]].tolist(),
                         tfs[:ptr[-1]].tolist()))
        assert outs[0] == outs[1]
    # bm25_append_many: stops where the arrays are full, resumes after growing
    ptr = np.array([0, 3, 3, 5, 9], np.int64)
    term_ids = np.array([0, 1, 2, 1, 3, 0, 1, 2, 3], np.int64)
    tfs = np.arange(1, 10, dtype=np.int32)
    res = []
    for fn in (kb.bm25_append_many, ref.bm25_append_many):
        arrs = [np.full(4, -1, np.int64), np.full(4, -1, np.int64), np.zeros(4, np.int64),
                np.zeros(5, np.int64), np.zeros(5, np.int64), np.zeros(5, np.int64),
                np.zeros(64, np.int64), np.zeros(64, np.int32)]
        got = fn(10, 0, ptr, term_ids, tfs, tuple(arrs), 0, 0, 2, 8)
        res.append((got, [a.tolist() for a in arrs]))
    assert res[0] == res[1] and res[0][0][0] == 4
    # window_means
    E = _unit_rows(rng, 12, 6)
    rows_of = rng.permutation(12).astype(np.int64)
    lo = np.array([0, 0, 1, 5, 9, 11, 2], np.int64)
    k = np.array([1, 3, 4, 5, 3, 1, 2], np.int64)
    a, b = np.zeros((12, 6), np.float32), np.zeros((12, 6), np.float32)
    kb.window_means(E, rows_of, lo, k, 0.4, a)
    ref.window_means(E, rows_of, lo, k, 0.4, b)
    assert a.tobytes() == b.tobytes()


def _unit_rows(rng, n, dim):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)
