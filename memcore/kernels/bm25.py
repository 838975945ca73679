"""Okapi BM25 over hashed token ids: incremental blocked postings and an exact scoring kernel.

Score of document ``d`` for a query (a multiset of term ids; a term repeated ``m`` times counts
``m`` times)::

    bm25(d) = sum over query terms t of  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * dl(d) / avgdl))
    idf(t)  = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

the Lucene form of Okapi BM25 (Robertson et al. 1994; Kamphuis et al. 2020, "Which BM25 do you
mean?"): the idf never goes negative, and the ``(k1 + 1)`` numerator factor is dropped (a
constant per query, so rankings are unchanged). ``N`` is the number of live documents, ``df``
counts live documents holding ``t``, ``avgdl`` is their mean length in tokens. The caller
(the store layer's lexical index) keeps ``N``, ``df`` and the total length exact under
add/remove and passes ``idf`` per query term, so scores equal a batch-built index's.

Layout (all arrays owned and grown by the caller)
------------------------------------------------
Documents have ids ``0, 1, ...`` that are never reused (a replaced text gets a new id), so
postings never need rewriting: a removed document is only marked dead. Each document maps to
an output *row* (``doc_row``), the store's row of the memory.

Postings are blocked linked lists in one pool: a term's first block holds ``min_block``
entries, each next one twice as many up to ``max_block``, so rare terms waste little and
frequent terms are read in long contiguous runs. Per term: ``term_head``/``term_tail`` (block
ids, -1 when none) and ``term_fill`` (entries used in the tail block). Per block:
``block_start`` (pool offset), ``block_size``, ``block_next`` (-1 at the end). Pool entries:
``pool_doc`` (int64 document id) and ``pool_tf`` (int32 term frequency). Kernels take them as
one tuple, *postings* ``(term_head, term_tail, term_fill, block_start, block_size, block_next,
pool_doc, pool_tf)``; the documents as *docs* ``(doc_row, doc_len, doc_alive)``; episode
windows as *windows* ``(win_start, win_len, win_rows)`` (as in :mod:`memcore.kernels.scan`).

Kernels are pure (arrays and scalars in, preallocated arrays out), ``cache=True``, no
``fastmath``; they never validate (``memcore`` does). NumPy/pure-Python oracles with the same
names live in :mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["bm25_append", "bm25_append_many", "bm25_docs", "bm25_scores", "bm25_scores_sparse", "bm25_scores_dense",
           "bm25_context_scores_sparse", "bm25_context_scores_dense", "window_lengths",
           "window_means", "bm25_scores_parallel", "bm25_context_scores_dense_parallel",
           "context_idf", "bm25_rows", "bm25_context_rows", "window_term_counts"]


@numba.njit(cache=True)
def bm25_append(doc, term_ids, tfs, postings, n_blocks, pool_used, min_block, max_block):
    """Append one document's postings (one entry per distinct term) to the blocked lists.

    Parameters
    ----------
    doc : int
        The new document's id (never used before).
    term_ids : ndarray of shape (m,), int64
        Distinct term ids of the document.
    tfs : ndarray of shape (m,), int32
        Their frequencies in the document, >= 1.
    postings : tuple of 8 ndarrays
        ``(term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc,
        pool_tf)``, updated in place. ``term_head``, ``term_tail``: (n_terms_cap,) int64, first and last
        block of each term's list, -1 for a term without postings; ``term_fill``:
        (n_terms_cap,) int64, entries used in each term's tail block; ``block_start``,
        ``block_size``, ``block_next``: (n_blocks_cap,) int64; ``pool_doc``: (pool_cap,)
        int64; ``pool_tf``: (pool_cap,) int32.
    n_blocks : int
        Blocks in use.
    pool_used : int
        Pool entries in use (allocated to blocks).
    min_block, max_block : int
        Size of a term's first block, and the cap of the doubling sizes.

    Returns
    -------
    n_blocks, pool_used : int
        The new counts. The caller guarantees room beforehand: ``n_blocks + m`` blocks and
        ``pool_used + m * max_block`` pool entries.

    Raises
    ------
    Nothing (not validated; too small arrays are undefined behaviour).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> nb, used = bm25_append(0, np.array([3], np.int64), np.array([2], np.int32), post, 0, 0,
    ...                        4, 256)
    >>> head, pdoc, ptf = post[0], post[6], post[7]
    >>> nb, used, int(head[3]), int(pdoc[0]), int(ptf[0])
    (1, 4, 0, 0, 2)
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    for j in range(term_ids.shape[0]):
        t = term_ids[j]
        tail = term_tail[t]
        if tail < 0 or term_fill[t] == block_size[tail]:
            size = min_block if tail < 0 else min(2 * block_size[tail], max_block)
            blk = n_blocks
            n_blocks += 1
            block_start[blk] = pool_used
            block_size[blk] = size
            block_next[blk] = -1
            pool_used += size
            if tail < 0:
                term_head[t] = blk
            else:
                block_next[tail] = blk
            term_tail[t] = blk
            term_fill[t] = 0
            tail = blk
        p = block_start[tail] + term_fill[t]
        pool_doc[p] = doc
        pool_tf[p] = tfs[j]
        term_fill[t] += 1
    return n_blocks, pool_used


@numba.njit(cache=True)
def bm25_scores(q_terms, q_idf, postings, docs, k1, b, avgdl, out):
    """BM25 score of every live document for one query, scattered to its row.

    ``out`` is zeroed, then for each query term in order and each of its postings of a live
    document ``d``: ``out[doc_row[d]] += idf * tf / (tf + k1 * (1 - b + b * doc_len[d] / avgdl))``
    in float64. Rows without a live matching document stay 0.

    Parameters
    ----------
    q_terms : ndarray of shape (m,), int64
        Term ids of the query's tokens (repeats allowed; unknown terms are left out by the
        caller).
    q_idf : ndarray of shape (m,), float64
        ``idf`` of each query term (see the module notes).
    postings : tuple
        The postings (see :func:`bm25_append`).
    docs : tuple (doc_row, doc_len, doc_alive)
        ``doc_row``: (n_docs_cap,) int64, output row of each document; ``doc_len``:
        (n_docs_cap,) int64, tokens per document; ``doc_alive``: (n_docs_cap,) bool, False for
        removed (or replaced) documents (their postings are skipped).
    k1, b : float
        BM25 parameters, ``k1 >= 0``, ``0 <= b <= 1``.
    avgdl : float
        Mean length of the live documents, > 0.
    out : ndarray of shape (n_rows,), float64
        Written in place.

    Returns
    -------
    out : ndarray of shape (n_rows,), float64

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    One document (id 0, row 2, 3 tokens) holding term 1 once:

    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(0, np.array([1], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([2]), np.array([3]), np.array([True]))
    >>> out = bm25_scores(np.array([1]), np.array([0.5]), post, docs, 1.2, 0.75, 3.0,
    ...                   np.empty(3))
    >>> out.round(4).tolist()                       # 0.5 * 1 / (1 + 1.2)
    [0.0, 0.0, 0.2273]
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, doc_len, doc_alive = docs
    out[:] = 0.0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        idf = q_idf[j]
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    tf = np.float64(pool_tf[p])
                    norm = k1 * (1.0 - b + b * np.float64(doc_len[d]) / avgdl)
                    out[doc_row[d]] += idf * tf / (tf + norm)
            blk = block_next[blk]
    return out


@numba.njit(cache=True)
def _n_postings(q_terms, postings):
    """Postings entries (live or not) of the query terms, repeats counted."""
    term_head, term_tail, term_fill, _, block_size, block_next, _, _ = postings
    m = 0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        blk = term_head[t]
        while blk >= 0:
            m += term_fill[t] if blk == term_tail[t] else block_size[blk]
            blk = block_next[blk]
    return m


@numba.njit(cache=True)
def _reduce_by_row(rows, vals, m):
    """Rows ascending and, per row, the sum of its values in their order (a stable sort)."""
    order = np.argsort(rows[:m], kind="mergesort")
    out_rows = np.empty(m, np.int64)
    out_vals = np.empty(m, np.float64)
    c = -1
    prev = -1
    for o in range(m):
        r = rows[order[o]]
        if r != prev:
            c += 1
            out_rows[c] = r
            out_vals[c] = 0.0
            prev = r
        out_vals[c] += vals[order[o]]
    return out_rows[:c + 1].copy(), out_vals[:c + 1].copy()


@numba.njit(cache=True)
def bm25_scores_sparse(q_terms, q_idf, postings, docs, k1, b, avgdl):
    """:func:`bm25_scores` for the rows that score, without an n-length output.

    The same contributions, summed per row in the same order (query terms in order, postings in
    order), so each returned score equals :func:`bm25_scores`'s at that row bit for bit; every
    other row scores 0. Work is O(postings of the query terms * log).

    Parameters
    ----------
    q_terms, q_idf, postings, docs, k1, b, avgdl
        As in :func:`bm25_scores`.

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Rows holding a live document with a query term, strictly ascending.
    scores : ndarray of shape (m,), float64
        Their BM25 scores (> 0).

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(0, np.array([1], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([2]), np.array([3]), np.array([True]))
    >>> rows, scores = bm25_scores_sparse(np.array([1]), np.array([0.5]), post, docs, 1.2, 0.75,
    ...                                   3.0)
    >>> rows.tolist(), scores.round(4).tolist()
    ([2], [0.2273])
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, doc_len, doc_alive = docs
    m = _n_postings(q_terms, postings)
    rows = np.empty(m, np.int64)
    vals = np.empty(m, np.float64)
    c = 0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        idf = q_idf[j]
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    tf = np.float64(pool_tf[p])
                    norm = k1 * (1.0 - b + b * np.float64(doc_len[d]) / avgdl)
                    rows[c] = doc_row[d]
                    vals[c] = idf * tf / (tf + norm)
                    c += 1
            blk = block_next[blk]
    return _reduce_by_row(rows, vals, c)


@numba.njit(cache=True)
def bm25_context_scores_sparse(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                               avgdl_ctx):
    """BM25 of each row's *context document* (its window's texts concatenated), from the
    own-text postings and the windows, for the rows that score.

    Row ``i``'s context document is the multiset union of the documents of the rows in its
    window ``W(i) = win_rows[win_start[i]:win_start[i] + win_len[i]]``, so, with ``P_t`` the
    live rows holding term ``t``::

        tf_ctx(t, i) = sum_{j in W(i)} tf(t, j)        len_ctx(i) = sum_{j in W(i)} len(j)
        df_ctx(t)    = |{i : W(i) meets P_t}| = |union_{j in P_t} W(j)|   (windows symmetric)
        idf_ctx(t)   = ln(1 + (N - df_ctx + 0.5) / (df_ctx + 0.5)),  N = n_live

    and the score is :func:`bm25_scores`' formula with these (query terms in order, one
    contribution per term and row), i.e. what an index of the concatenated window texts
    returns. Windows must be symmetric (``j in W(i)`` iff ``i in W(j)``, as episode windows
    are) and hold live rows only. Work is O(postings * window * log).

    Parameters
    ----------
    q_terms : ndarray of shape (m,), int64
        Query term ids in the own-text index (repeats allowed).
    postings, docs
        The own-text postings and documents (see :func:`bm25_scores`; ``doc_len`` is not
        read).
    windows : tuple (win_start, win_len, win_rows)
        ``win_start``, ``win_len``: (n_rows,) int64; ``win_rows``: int64 or int32.
    ctx_len : ndarray of shape (n_rows,), integer
        Tokens of each live row's context document, ``len_ctx(i)``
        (:func:`window_lengths`).
    n_live : int
        Live rows (context documents), ``N``.
    k1, b : float
    avgdl_ctx : float
        Mean context-document length, ``sum_i len_ctx(i) / N``, > 0.

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Strictly ascending.
    scores : ndarray of shape (m,), float64
        > 0.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    Rows 0 and 1 share a window; only row 1's text holds the term:

    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(1, np.array([2], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([0, 1, 2]), np.array([2, 2, 2]), np.array([True, True, True]))
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 1]), np.array([0, 1, 0, 1, 2]))
    >>> rows, scores = bm25_context_scores_sparse(np.array([2]), post, docs, win,
    ...                                           np.array([4, 4, 2]), 3, 1.2, 0.75, 10 / 3)
    >>> rows.tolist(), bool(scores[0] == scores[1] > 0)
    ([0, 1], True)
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, _, doc_alive = docs
    win_start, win_len, win_rows = windows
    m = 0
    for j in range(q_terms.shape[0]):                 # room for every (posting, window row)
        t = q_terms[j]
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    r = doc_row[d]
                    m += max((win_start[r] + win_len[r]) - win_start[r], 1)
            blk = block_next[blk]
    rows = np.empty(m, np.int64)
    vals = np.empty(m, np.float64)
    t_rows = np.empty(m, np.int64)
    t_tf = np.empty(m, np.int64)
    c = 0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        u = 0                                      # (context row, tf) pairs of this term
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    r = doc_row[d]
                    if (win_start[r] + win_len[r]) > win_start[r]:
                        for q in range(win_start[r], (win_start[r] + win_len[r])):
                            t_rows[u] = win_rows[q]
                            t_tf[u] = pool_tf[p]
                            u += 1
                    else:
                        t_rows[u] = r
                        t_tf[u] = pool_tf[p]
                        u += 1
            blk = block_next[blk]
        if u == 0:
            continue
        order = np.argsort(t_rows[:u])              # integer tf sums: any order is exact
        df = 0
        prev = -1
        for o in range(u):
            if t_rows[order[o]] != prev:
                df += 1
                prev = t_rows[order[o]]
        idf = np.log1p((n_live - df + 0.5) / (df + 0.5))
        o = 0
        while o < u:
            i = t_rows[order[o]]
            tfi = 0
            while o < u and t_rows[order[o]] == i:
                tfi += t_tf[order[o]]
                o += 1
            tf = np.float64(tfi)
            norm = k1 * (1.0 - b + b * np.float64(ctx_len[i]) / avgdl_ctx)
            rows[c] = i
            vals[c] = idf * tf / (tf + norm)
            c += 1
    return _reduce_by_row(rows, vals, c)


@numba.njit(cache=True)
def _merge_docs(tok, tok_tf, segments, term_of, n_terms, out):
    """:func:`bm25_docs` with ``merge=True``: a k-way merge of each document's segments."""
    seg_start, seg_count, seg_ptr = segments
    out_ptr, out_terms, out_tfs = out
    n_docs = seg_ptr.shape[0] - 1
    widest = 0
    for i in range(n_docs):
        widest = max(widest, seg_ptr[i + 1] - seg_ptr[i])
    cur = np.empty(widest, np.int64)
    end = np.empty(widest, np.int64)
    k = 0
    out_ptr[0] = 0
    for i in range(n_docs):
        s0 = seg_ptr[i]
        ns = seg_ptr[i + 1] - s0
        for q in range(ns):
            cur[q] = seg_start[s0 + q]
            end[q] = cur[q] + seg_count[s0 + q]
        while True:
            best = -1
            g = np.int64(0)
            for q in range(ns):
                if cur[q] < end[q] and (best < 0 or tok[cur[q]] < g):
                    best = q
                    g = tok[cur[q]]
            if best < 0:
                break
            run = 0
            for q in range(ns):
                if cur[q] < end[q] and tok[cur[q]] == g:
                    run += tok_tf[cur[q]]
                    cur[q] += 1
            t = term_of[g]
            if t < 0:
                t = n_terms
                term_of[g] = t
                n_terms += 1
            out_terms[k] = t
            out_tfs[k] = run
            k += 1
        out_ptr[i + 1] = k
    return n_terms


@numba.njit(cache=True)
def bm25_docs(tok, tok_tf, segments, term_of, n_terms, out, merge=False):
    """Distinct terms and frequencies of many documents, with term ids assigned on first use.

    Document ``i`` is the multiset union of the token segments ``s`` in
    ``seg_ptr[i]:seg_ptr[i+1]``: entries ``e`` in ``seg_start[s]:seg_start[s] + seg_count[s]``,
    token id ``tok[e]`` counted ``tok_tf[e]`` times (ones for raw tokens; a document's
    ``(term, tf)`` list to merge documents). ``tok`` holds dense token ids ordered like the
    token hashes (e.g. the inverse of ``np.unique`` over the hashes), so sorting ids sorts
    hashes. Each document's distinct ids are emitted ascending with their summed counts; an id
    without a term (``term_of[g] < 0``) gets ``n_terms``, then ``n_terms + 1``, ..., in
    emission order: what adding the documents one by one does.

    Parameters
    ----------
    tok : ndarray of shape (n_tok,), int64
        Token ids in [0, 2**32).
    tok_tf : ndarray of shape (n_tok,), int32
        Counts, >= 1; a document's summed count of one id must stay below 2**31.
    segments : tuple (seg_start, seg_count, seg_ptr)
        ``seg_start``, ``seg_count``: (n_seg,) int64; ``seg_ptr``: (n_docs + 1,) int64.
    term_of : ndarray of shape (n_ids,), int64
        Term id of each token id, -1 when none yet; updated in place.
    n_terms : int
        Terms already assigned.
    out : tuple (out_ptr, out_terms, out_tfs)
        Written. ``out_ptr``: (n_docs + 1,) int64, document ``i``'s entries are
        ``out_ptr[i]:out_ptr[i+1]``; ``out_terms``: (>= distinct entries,) int64; ``out_tfs``:
        int32, same length as ``out_terms``.

    merge : bool
        True when every segment holds distinct ids in ascending order (documents' term
        lists): segments are then merged rather than sorted.

    Returns
    -------
    n_terms : int
        Terms assigned after the call.
    """
    seg_start, seg_count, seg_ptr = segments
    out_ptr, out_terms, out_tfs = out
    n_docs = seg_ptr.shape[0] - 1
    if merge:
        return _merge_docs(tok, tok_tf, segments, term_of, n_terms, out)
    longest = 0
    for i in range(n_docs):
        dl = 0
        for s in range(seg_ptr[i], seg_ptr[i + 1]):
            dl += seg_count[s]
        longest = max(longest, dl)
    buf = np.empty(longest, np.int64)
    shift = np.int64(31)
    mask = (np.int64(1) << shift) - 1
    k = 0
    out_ptr[0] = 0
    for i in range(n_docs):
        dl = 0
        for s in range(seg_ptr[i], seg_ptr[i + 1]):
            a = seg_start[s]
            for j in range(seg_count[s]):
                buf[dl] = (tok[a + j] << shift) | np.int64(tok_tf[a + j])
                dl += 1
        if dl > 0:
            if dl <= 64:                          # small documents: insertion sort in place
                for j in range(1, dl):
                    x = buf[j]
                    q = j - 1
                    while q >= 0 and buf[q] > x:
                        buf[q + 1] = buf[q]
                        q -= 1
                    buf[q + 1] = x
                srt = buf
            else:
                srt = np.sort(buf[:dl])
            prev = srt[0] >> shift
            run = 0
            for j in range(dl + 1):
                if j < dl and (srt[j] >> shift) == prev:
                    run += srt[j] & mask
                    continue
                t = term_of[prev]
                if t < 0:
                    t = n_terms
                    term_of[prev] = t
                    n_terms += 1
                out_terms[k] = t
                out_tfs[k] = run
                k += 1
                if j < dl:
                    prev = srt[j] >> shift
                    run = srt[j] & mask
        out_ptr[i + 1] = k
    return n_terms


@numba.njit(cache=True)
def bm25_append_many(doc0, first, ptr, term_ids, tfs, postings, n_blocks, pool_used, min_block,
                     max_block):
    """:func:`bm25_append` for documents ``first, first + 1, ...`` (ids ``doc0 + i``, terms
    ``term_ids[ptr[i]:ptr[i+1]]``, distinct), in order, while the arrays have room for the
    blocks the next one opens.

    Returns
    -------
    next, n_blocks, pool_used : int
        The first document not appended (``ptr.shape[0] - 1`` when all were), and the new
        counts. The caller grows the arrays and calls again from ``next``.
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    n_docs = ptr.shape[0] - 1
    cap_blocks = min(block_start.shape[0], block_size.shape[0], block_next.shape[0])
    cap_pool = min(pool_doc.shape[0], pool_tf.shape[0])
    i = first
    while i < n_docs:
        a = ptr[i]
        m = ptr[i + 1] - a
        need_blocks = 0
        need_pool = 0
        for j in range(a, a + m):                 # the blocks this document opens
            tail = term_tail[term_ids[j]]
            if tail < 0:
                need_blocks += 1
                need_pool += min_block
            elif term_fill[term_ids[j]] == block_size[tail]:
                need_blocks += 1
                need_pool += min(2 * block_size[tail], max_block)
        if n_blocks + need_blocks > cap_blocks or pool_used + need_pool > cap_pool:
            break
        n_blocks, pool_used = bm25_append(doc0 + i, term_ids[a:a + m], tfs[a:a + m], postings,
                                          n_blocks, pool_used, min_block, max_block)
        i += 1
    return i, n_blocks, pool_used


@numba.njit(cache=True)
def window_means(E, rows_of, lo, k, alpha, out):
    """Combined dense rows of hybrid recall (the context-window companion of the BM25 build).

    For entry ``i``: ``out[rows_of[i]] = float32(alpha * e + (1 - alpha) * (s / k[i]))`` with
    ``e = E[rows_of[i]]`` and ``s`` the float64 sum, in order, of ``E[rows_of[lo[i] + j]]``,
    ``j < k[i]`` (what ``alpha * e + (1 - alpha) * E[window].astype(float64).mean(0)`` gives).

    Parameters
    ----------
    E : ndarray of shape (n, dim), float32
    rows_of : ndarray of shape (m,), int64
    lo, k : ndarray of shape (m,), int64
        Window start (index into rows_of) and length, >= 1.
    alpha : float
    out : ndarray of shape (n, dim), float32
        Written in place (rows ``rows_of``); not ``E``.
    """
    dim = E.shape[1]
    acc = np.empty(dim, np.float64)
    for i in range(lo.shape[0]):
        a = lo[i]
        r0 = rows_of[a]
        for d in range(dim):
            acc[d] = np.float64(E[r0, d])
        for j in range(1, k[i]):
            r = rows_of[a + j]
            for d in range(dim):
                acc[d] += np.float64(E[r, d])
        kk = np.float64(k[i])
        own = rows_of[i]
        for d in range(dim):
            out[own, d] = np.float32(alpha * np.float64(E[own, d]) + (1.0 - alpha) * (acc[d] / kk))


@numba.njit(cache=True)
def window_lengths(row_len, win_start, win_len, win_rows, rows, out):
    """Context-document lengths: ``out[i] = sum(row_len[j] for j in W(i))`` (``row_len[i]``
    for an empty window) for each ``i`` in ``rows``.

    Parameters
    ----------
    row_len : ndarray of shape (n_rows,), integer
        Tokens of each row's own document (0 without a live one).
    win_start, win_len : ndarray of shape (n_rows,), int64
    win_rows : ndarray, int64 or int32
        The windows, as in :func:`bm25_context_scores_sparse`.
    rows : ndarray of shape (m,), int64
    out : ndarray of shape (n_rows,), integer
        Written at ``rows``.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> out = np.zeros(3, np.int64)
    >>> window_lengths(np.array([2, 3, 4]), np.array([0, 2, 4]), np.array([2, 2, 1]),
    ...                np.array([0, 1, 0, 1, 2]), np.arange(3), out)
    >>> out.tolist()
    [5, 5, 4]
    """
    for j in range(rows.shape[0]):
        i = rows[j]
        a = win_start[i]
        e = win_start[i] + win_len[i]
        if e > a:
            dl = 0
            for q in range(a, e):
                dl += row_len[win_rows[q]]
            out[i] = dl
        else:
            out[i] = row_len[i]


@numba.njit(cache=True)
def bm25_context_scores_dense(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                              avgdl_ctx, scratch):
    """:func:`bm25_context_scores_sparse`'s result (same rows, same scores bit for bit) with
    n-length accumulators instead of sorting: O(postings * window + touched rows) instead of
    O(postings * window * log), the faster choice when the query terms' postings times the
    window are a sizeable share of the rows (common terms, e.g. a speaker's name).

    Per term, each (posting, window row) pair adds the posting's tf to the window row's
    integer tf (exact in any order); the rows touched the first time give ``df_ctx``; then each
    touched row adds its contribution (> 0) to a float64 accumulator, terms in query order
    (the sparse kernel's summation order). Rows come out ascending (one pass over the
    accumulator when many scored, else the scored rows sorted).

    The accumulators are the caller's (``scratch``: reused across queries,
    so no n-length allocation per query): zero on entry, and zero again on return.

    Parameters
    ----------
    q_terms, postings, docs, windows, ctx_len, n_live, k1, b, avgdl_ctx
        As in :func:`bm25_context_scores_sparse` (``win_start.shape[0]`` is the row count).
    scratch : tuple (acc, tfw, touched)
        ``acc``: (>= n_rows,) float64; ``tfw``: (>= n_rows,) integer; ``touched``:
        (>= 2 * n_rows,) integer. All zero (``touched``: any values); int32 is enough (row
        ids, and a window's tf sums below 2**31).

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Strictly ascending.
    scores : ndarray of shape (m,), float64
        > 0.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(1, np.array([2], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([0, 1, 2]), np.array([2, 2, 2]), np.array([True, True, True]))
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 1]), np.array([0, 1, 0, 1, 2]))
    >>> rows, scores = bm25_context_scores_dense(
    ...     np.array([2]), post, docs, win, np.array([4, 4, 2]), 3, 1.2, 0.75, 10 / 3,
    ...     (np.zeros(3), np.zeros(3, np.int64), np.zeros(6, np.int64)))
    >>> rows.tolist(), bool(scores[0] == scores[1] > 0)
    ([0, 1], True)
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, _, doc_alive = docs
    win_start, win_len, win_rows = windows
    acc, tfw, touched = scratch
    n = win_start.shape[0]
    nh = 0                                  # scored rows, listed in touched[n:]
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        u = 0
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    r = doc_row[d]
                    tf = np.int64(pool_tf[p])
                    a = win_start[r]
                    e = win_start[r] + win_len[r]
                    if e > a:
                        for q in range(a, e):
                            i = win_rows[q]
                            if tfw[i] == 0:
                                touched[u] = i
                                u += 1
                            tfw[i] += tf
                    else:
                        if tfw[r] == 0:
                            touched[u] = r
                            u += 1
                        tfw[r] += tf
            blk = block_next[blk]
        if u == 0:
            continue
        idf = np.log1p((n_live - u + 0.5) / (u + 0.5))
        for o in range(u):
            i = touched[o]
            tf = np.float64(tfw[i])
            norm = k1 * (1.0 - b + b * np.float64(ctx_len[i]) / avgdl_ctx)
            x = idf * tf / (tf + norm)
            if acc[i] == 0.0 and x != 0.0:    # a row's first contribution (all are > 0)
                touched[n + nh] = i
                nh += 1
            acc[i] += x
            tfw[i] = 0
    rows = np.empty(nh, np.int64)
    vals = np.empty(nh, np.float64)
    if nh * 16 > n:                          # many rows: one pass over the accumulator
        m = 0
        for i in range(n):
            if acc[i] != 0.0:
                rows[m] = i
                vals[m] = acc[i]
                acc[i] = 0.0
                m += 1
    else:
        hits = np.sort(touched[n:n + nh])
        for m in range(nh):
            i = hits[m]
            rows[m] = i
            vals[m] = acc[i]
            acc[i] = 0.0
    return rows, vals


@numba.njit(cache=True)
def bm25_scores_dense(q_terms, q_idf, postings, docs, k1, b, avgdl, scratch):
    """:func:`bm25_scores_sparse`'s result (same rows, same scores bit for bit) with an
    n-length accumulator instead of sorting, and without :func:`bm25_scores`' n-length
    zeroing and scan for non-zero rows: the faster choice for common terms.

    Each posting of a live document adds its contribution to its row's float64 accumulator
    (query terms in order, postings in order: :func:`bm25_scores`' summation); a row's first
    contribution (all are > 0) lists it. Rows come out ascending: one pass over the
    accumulator when many scored (reading, and zeroing, it), else the listed rows sorted.

    Parameters
    ----------
    q_terms, q_idf, postings, docs, k1, b, avgdl
        As in :func:`bm25_scores`.
    scratch : tuple (acc, touched)
        ``acc``: (>= n_rows,) float64, all zero on entry and zero again on return;
        ``touched``: (>= n_rows,) integer, any values.

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Strictly ascending.
    scores : ndarray of shape (m,), float64
        > 0.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(0, np.array([1], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([2]), np.array([3]), np.array([True]))
    >>> rows, scores = bm25_scores_dense(np.array([1]), np.array([0.5]), post, docs, 1.2, 0.75,
    ...                                  3.0, (np.zeros(3), np.zeros(3, np.int64)))
    >>> rows.tolist(), scores.round(4).tolist()
    ([2], [0.2273])
    """
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, doc_len, doc_alive = docs
    acc, touched = scratch
    nh = 0
    for j in range(q_terms.shape[0]):
        t = q_terms[j]
        idf = q_idf[j]
        blk = term_head[t]
        while blk >= 0:
            start = block_start[blk]
            stop = start + (term_fill[t] if blk == term_tail[t] else block_size[blk])
            for p in range(start, stop):
                d = pool_doc[p]
                if doc_alive[d]:
                    tf = np.float64(pool_tf[p])
                    norm = k1 * (1.0 - b + b * np.float64(doc_len[d]) / avgdl)
                    i = doc_row[d]
                    if acc[i] == 0.0:
                        touched[nh] = i
                        nh += 1
                    acc[i] += idf * tf / (tf + norm)
            blk = block_next[blk]
    rows = np.empty(nh, np.int64)
    vals = np.empty(nh, np.float64)
    if nh * 16 > acc.shape[0]:               # many rows: one pass over the accumulator
        m = 0
        for i in range(acc.shape[0]):
            if acc[i] != 0.0:
                rows[m] = i
                vals[m] = acc[i]
                acc[i] = 0.0
                m += 1
    else:
        hits = np.sort(touched[:nh])
        for m in range(nh):
            i = hits[m]
            rows[m] = i
            vals[m] = acc[i]
            acc[i] = 0.0
    return rows, vals


# --------------------------------------------------------------------------- threads
# The ``*_parallel`` kernels are the ``prange`` twins of the serial kernels of the same stem,
# with identical results (same rows, same float64 bits): every row still gets its
# contributions one query term at a time, in query order, each from one thread. numba's
# thread count is the caller's (``numba.set_num_threads``; memcore.recall.threads).


@numba.njit(cache=True)
def _term_blocks(t, postings):
    """Pool ranges of term ``t``'s blocks in list order: ``(starts, stops)``, (nb,) int64."""
    term_head, term_tail, term_fill, block_start, block_size, block_next, _, _ = postings
    nb = 0
    blk = term_head[t]
    while blk >= 0:
        nb += 1
        blk = block_next[blk]
    starts = np.empty(nb, np.int64)
    stops = np.empty(nb, np.int64)
    blk = term_head[t]
    for i in range(nb):
        starts[i] = block_start[blk]
        stops[i] = starts[i] + (term_fill[t] if blk == term_tail[t] else block_size[blk])
        blk = block_next[blk]
    return starts, stops


@numba.njit(cache=True, parallel=True)
def bm25_scores_parallel(q_terms, q_idf, postings, docs, k1, b, avgdl, out):
    """:func:`bm25_scores` with each query term's postings blocks spread over numba's
    threads; ``out`` equals the serial kernel's bit for bit.

    Live documents have distinct rows (the lexical index keeps one live document per row) and
    a term lists a document once, so within a term no two postings write one row; terms run
    one after the other, so each row sums its contributions in query order, as the serial
    kernel does.

    Parameters, Returns
        As :func:`bm25_scores`.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(0, np.array([1], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([2]), np.array([3]), np.array([True]))
    >>> bm25_scores_parallel(np.array([1]), np.array([0.5]), post, docs, 1.2, 0.75, 3.0,
    ...                      np.empty(3)).round(4).tolist()
    [0.0, 0.0, 0.2273]
    """
    pool_doc, pool_tf = postings[6], postings[7]
    doc_row, doc_len, doc_alive = docs
    n = out.shape[0]
    for i in numba.prange(n):
        out[i] = 0.0
    for j in range(q_terms.shape[0]):
        idf = q_idf[j]
        starts, stops = _term_blocks(q_terms[j], postings)
        for bi in numba.prange(starts.shape[0]):
            for p in range(starts[bi], stops[bi]):
                d = pool_doc[p]
                if doc_alive[d]:
                    tf = np.float64(pool_tf[p])
                    norm = k1 * (1.0 - b + b * np.float64(doc_len[d]) / avgdl)
                    out[doc_row[d]] += idf * tf / (tf + norm)
    return out


@numba.njit(cache=True)
def _push_part(k, parts, starts, stops, cum, postings, docs, windows, tfw, touched):
    """Part ``k`` of ``parts`` of a term's postings (split evenly by count): each live
    posting's tf added to the integer tf of every row of its window, in ``tfw[k]``; the rows
    touched the first time listed in ``touched[k]``. Returns their count."""
    pool_doc, pool_tf = postings[6], postings[7]
    doc_row, _, doc_alive = docs
    win_start, win_len, win_rows = windows
    total = cum[-1]
    lo = total * k // parts
    hi = total * (k + 1) // parts
    u = 0
    for bi in range(starts.shape[0]):
        a = max(cum[bi], lo)
        e = min(cum[bi + 1], hi)
        for p in range(starts[bi] + a - cum[bi], starts[bi] + e - cum[bi]):
            d = pool_doc[p]
            if doc_alive[d]:
                r = doc_row[d]
                tf = pool_tf[p]
                w0 = win_start[r]
                w1 = win_start[r] + win_len[r]
                if w1 > w0:
                    for q in range(w0, w1):
                        i = win_rows[q]
                        if tfw[k, i] == 0:
                            touched[k, u] = i
                            u += 1
                        tfw[k, i] += tf
                else:
                    if tfw[k, r] == 0:
                        touched[k, u] = r
                        u += 1
                    tfw[k, r] += tf
    return u


@numba.njit(cache=True, parallel=True)
def bm25_context_scores_dense_parallel(q_terms, postings, docs, windows, ctx_len, n_live, k1,
                                       b, avgdl_ctx, scratch, parts_scratch):
    """:func:`bm25_context_scores_dense` over numba's threads: the same rows and scores, bit
    for bit.

    Per query term (in order), its postings are split in ``P`` parts of equal count
    (``P = parts_scratch[0].shape[0]``, at least the thread count for full use, any ``P >= 1``
    gives the same result). Each part adds its (posting, window row) tfs into its own integer
    accumulator (no two threads write one cell); each touched row is then *owned* by the
    first part that touched it, which sums the parts' integer tfs (exact in any order) and,
    after ``df_ctx`` is known (the owned rows' count), adds the row's one contribution for
    this term to the float64 accumulator -- one thread per row, terms in query order, the
    serial kernel's summation order.

    Parameters
    ----------
    q_terms, postings, docs, windows, ctx_len, n_live, k1, b, avgdl_ctx, scratch
        As :func:`bm25_context_scores_dense` (only ``scratch[0]``, the float64 accumulator,
        is used: zero on entry and on return).
    parts_scratch : tuple (tfw, touched, owned, tot, hits)
        Five (P, >= n_rows) int32 arrays; ``tfw`` all zero on entry (zero again on return),
        the others any values.

    Returns
    -------
    rows : ndarray of shape (m,), int64
        Strictly ascending.
    scores : ndarray of shape (m,), float64

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> post = (np.full(4, -1), np.full(4, -1), np.zeros(4, np.int64), np.zeros(4, np.int64),
    ...         np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(64, np.int64),
    ...         np.zeros(64, np.int32))
    >>> _ = bm25_append(1, np.array([2], np.int64), np.array([1], np.int32), post, 0, 0, 4, 256)
    >>> docs = (np.array([0, 1, 2]), np.array([2, 2, 2]), np.array([True, True, True]))
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 1]), np.array([0, 1, 0, 1, 2]))
    >>> parts = tuple(np.zeros((2, 3), np.int32) for _ in range(5))
    >>> rows, scores = bm25_context_scores_dense_parallel(
    ...     np.array([2]), post, docs, win, np.array([4, 4, 2]), 3, 1.2, 0.75, 10 / 3,
    ...     (np.zeros(3), np.zeros(3, np.int32), np.zeros(6, np.int32)), parts)
    >>> rows.tolist(), bool(scores[0] == scores[1] > 0)
    ([0, 1], True)
    """
    acc = scratch[0]
    tfw, touched, owned, tot, hits = parts_scratch
    P = tfw.shape[0]
    n = windows[0].shape[0]
    nu = np.zeros(P, np.int64)           # rows each part touched (this term)
    no = np.zeros(P, np.int64)           # rows each part owns (this term)
    nh = np.zeros(P, np.int64)           # rows each part gave a first contribution (all terms)
    for j in range(q_terms.shape[0]):
        starts, stops = _term_blocks(q_terms[j], postings)
        cum = np.zeros(starts.shape[0] + 1, np.int64)
        for bi in range(starts.shape[0]):
            cum[bi + 1] = cum[bi] + stops[bi] - starts[bi]
        for k in numba.prange(P):
            nu[k] = _push_part(k, P, starts, stops, cum, postings, docs, windows, tfw, touched)
        for k in numba.prange(P):       # ownership: the first part holding the row
            c = 0
            for o in range(nu[k]):
                i = touched[k, o]
                mine = True
                for k2 in range(k):
                    if tfw[k2, i] != 0:
                        mine = False
                        break
                if mine:
                    s = 0
                    for k2 in range(k, P):
                        s += tfw[k2, i]
                    owned[k, c] = i
                    tot[k, c] = s
                    c += 1
            no[k] = c
        df = 0
        for k in range(P):
            df += no[k]
        if df == 0:
            continue
        idf = np.log1p((n_live - df + 0.5) / (df + 0.5))
        for k in numba.prange(P):
            for o in range(nu[k]):
                tfw[k, touched[k, o]] = 0
            h = nh[k]
            for o in range(no[k]):
                i = owned[k, o]
                tf = np.float64(tot[k, o])
                norm = k1 * (1.0 - b + b * np.float64(ctx_len[i]) / avgdl_ctx)
                x = idf * tf / (tf + norm)
                if acc[i] == 0.0 and x != 0.0:
                    hits[k, h] = i
                    h += 1
                acc[i] += x
            nh[k] = h
    m = 0
    for k in range(P):
        m += nh[k]
    rows = np.empty(m, np.int64)
    if m * 16 > n:                       # many rows: one pass over the accumulator, in chunks
        nc = 8 * P
        cnt = np.zeros(nc + 1, np.int64)
        for c in numba.prange(nc):
            for i in range(n * c // nc, n * (c + 1) // nc):
                if acc[i] != 0.0:
                    cnt[c + 1] += 1
        for c in range(nc):
            cnt[c + 1] += cnt[c]
        for c in numba.prange(nc):
            o = cnt[c]
            for i in range(n * c // nc, n * (c + 1) // nc):
                if acc[i] != 0.0:
                    rows[o] = i
                    o += 1
    else:
        c = 0
        for k in range(P):
            for o in range(nh[k]):
                rows[c] = hits[k, o]
                c += 1
        rows.sort()
    vals = np.empty(m, np.float64)
    for o in numba.prange(m):
        i = rows[o]
        vals[o] = acc[i]
        acc[i] = 0.0
    return rows, vals


# --------------------------------------------------------------------------- forward lookups
# The rows' own documents as term lists (the *forward* index: ``forward = (row_doc, doc_tptr,
# doc_nterm, dt_term, dt_tf, doc_len)``; ``row_doc[i] - 1`` is live row i's document, -1 for
# none; document ``d``'s distinct terms and tfs are ``dt_term``/``dt_tf[doc_tptr[d]:doc_tptr[d]
# + doc_nterm[d]]``): BM25 of a few given rows without walking any postings list, and the
# window-document frequencies kept under writes.


@numba.njit(cache=True)
def _row_tf(forward, i, t):
    """tf of term ``t`` in live row ``i``'s document (0 when absent or no document)."""
    row_doc, doc_tptr, doc_nterm, dt_term, dt_tf, _ = forward
    d = row_doc[i] - 1
    if d < 0:
        return 0
    a = doc_tptr[d]
    for p in range(a, a + doc_nterm[d]):
        if dt_term[p] == t:
            return np.int64(dt_tf[p])
    return 0


@numba.njit(cache=True)
def context_idf(df, n_live):
    """``ln(1 + (N - df + 0.5) / (df + 0.5))`` per term, the window BM25's idf as
    :func:`bm25_context_scores_sparse` computes it (same float64 operations).

    Parameters
    ----------
    df : ndarray of shape (m,), int64
        Window documents holding each term (``df_ctx``).
    n_live : int
        Live rows, ``N``.

    Returns
    -------
    ndarray of shape (m,), float64

    Examples
    --------
    >>> context_idf(np.array([1]), 3).round(4).tolist()
    [0.9808]
    """
    out = np.empty(df.shape[0], np.float64)
    for j in range(df.shape[0]):
        u = df[j]
        out[j] = np.log1p((n_live - u + 0.5) / (u + 0.5))
    return out


@numba.njit(cache=True)
def bm25_rows(rows, q_terms, q_idf, forward, k1, b, avgdl, out):
    """Own-text BM25 of the given rows from their term lists: ``out[j]`` equals
    :func:`bm25_scores_sparse`'s score of ``rows[j]`` bit for bit (the same contributions,
    summed in query-term order from 0.0), 0.0 for a row that scores nothing. O(len(rows) *
    len(q_terms) * terms per document); no postings are read.

    Parameters
    ----------
    rows : ndarray of shape (m,), int64
        Rows (any order; a row without a live document scores 0).
    q_terms, q_idf, k1, b, avgdl
        As in :func:`bm25_scores`.
    forward : tuple (row_doc, doc_tptr, doc_nterm, dt_term, dt_tf, doc_len)
        The forward index (section notes).
    out : ndarray of shape (m,), float64
        Written.

    Returns
    -------
    out : ndarray of shape (m,), float64

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    Row 0's document (id 0, 3 tokens) holds term 1 once:

    >>> fwd = (np.array([1]), np.array([0]), np.array([1]), np.array([1]), np.array([1]),
    ...        np.array([3]))
    >>> bm25_rows(np.array([0]), np.array([1]), np.array([0.5]), fwd, 1.2, 0.75, 3.0,
    ...           np.empty(1)).round(4).tolist()             # 0.5 * 1 / (1 + 1.2)
    [0.2273]
    """
    row_doc, doc_len = forward[0], forward[5]
    for j in range(rows.shape[0]):
        i = rows[j]
        acc = 0.0
        d = row_doc[i] - 1
        if d >= 0:
            for m in range(q_terms.shape[0]):
                tfi = _row_tf(forward, i, q_terms[m])
                if tfi > 0:
                    tf = np.float64(tfi)
                    norm = k1 * (1.0 - b + b * np.float64(doc_len[d]) / avgdl)
                    acc += q_idf[m] * tf / (tf + norm)
        out[j] = acc
    return out


@numba.njit(cache=True)
def bm25_context_rows(rows, q_terms, q_idf_ctx, forward, windows, ctx_len, k1, b, avgdl_ctx,
                      out):
    """Window-document BM25 of the given rows from their windows' term lists: ``out[j]``
    equals :func:`bm25_context_scores_sparse`'s score of ``rows[j]`` bit for bit when
    ``q_idf_ctx`` is :func:`context_idf` of the terms' window-document frequencies (integer tf
    sums over the window, contributions in query-term order from 0.0); 0.0 for a row that
    scores nothing. O(len(rows) * len(q_terms) * window * terms per document).

    Parameters
    ----------
    rows : ndarray of shape (m,), int64
        Live rows (any order).
    q_terms : ndarray of shape (q,), int64
    q_idf_ctx : ndarray of shape (q,), float64
        Each term's window idf (:func:`context_idf`).
    forward : tuple
        As in :func:`bm25_rows`.
    windows, ctx_len, k1, b, avgdl_ctx
        As in :func:`bm25_context_scores_sparse`.
    out : ndarray of shape (m,), float64
        Written.

    Returns
    -------
    out : ndarray of shape (m,), float64

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    Rows 0 and 1 share a window; only row 1's document (id 0) holds term 2:

    >>> fwd = (np.array([0, 1, 0]), np.array([0]), np.array([1]), np.array([2]), np.array([1]),
    ...        np.array([2]))
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 1]), np.array([0, 1, 0, 1, 2]))
    >>> x = bm25_context_rows(np.array([0, 1, 2]), np.array([2]), np.array([0.5]), fwd, win,
    ...                       np.array([4, 4, 2]), 1.2, 0.75, 10 / 3, np.empty(3))
    >>> bool(x[0] == x[1] > 0), float(x[2])
    (True, 0.0)
    """
    win_start, win_len, win_rows = windows
    for j in range(rows.shape[0]):
        i = rows[j]
        acc = 0.0
        a = win_start[i]
        e = win_start[i] + win_len[i]
        for m in range(q_terms.shape[0]):
            t = q_terms[m]
            tfi = 0
            if e > a:
                for p in range(a, e):
                    tfi += _row_tf(forward, win_rows[p], t)
            else:
                tfi = _row_tf(forward, i, t)
            if tfi > 0:
                tf = np.float64(tfi)
                norm = k1 * (1.0 - b + b * np.float64(ctx_len[i]) / avgdl_ctx)
                acc += q_idf_ctx[m] * tf / (tf + norm)
        out[j] = acc
    return out


@numba.njit(cache=True)
def window_term_counts(rows, sign, win, win_pos, win_cnt, forward, seen, tick, counts):
    """Add ``sign`` to ``counts[t, r - 1]`` for each row ``i`` of ``rows`` and each distinct
    term ``t`` of its radius-``r`` window document, ``r = 1 .. counts.shape[1]``: over the
    live rows, ``counts[t, r - 1]`` is ``df_ctx(t)`` of :func:`bm25_context_scores_sparse`
    for radius-``r`` windows (windows hold live rows; the row's own document is radius 0's).
    A write that changes some rows' windows subtracts their shares (``sign = -1``) before
    and adds them (``+1``) after.

    Parameters
    ----------
    rows : ndarray of shape (m,), int64
        Live rows.
    sign : int
        +1 or -1.
    win : ndarray of shape (n, 2 R_max + 1), int32
        Each row's episode neighbourhood in episode order (:mod:`memcore.recall.index`'s
        ``win``); ``win_pos``, ``win_cnt``: (n,) integer, the row's place in it and its length.
    forward : tuple
        As in :func:`bm25_rows`.
    seen : ndarray of shape (n_terms,), int64
        Scratch: entries below ``tick`` (any values < tick).
    tick : int
        Larger than every entry of ``seen``.
    counts : ndarray of shape (n_terms, R), integer
        Updated in place.

    Returns
    -------
    int
        The next ``tick`` (``seen`` holds values below it).

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    Rows 0 and 1 in one episode, row 1's document (id 0) holding term 0:

    >>> fwd = (np.array([0, 1]), np.array([0]), np.array([1]), np.array([0]), np.array([1]),
    ...        np.array([1]))
    >>> win = np.array([[0, 1, -1], [0, 1, -1]], np.int32)
    >>> counts = np.zeros((1, 1), np.int64)
    >>> window_term_counts(np.array([0, 1]), 1, win, np.array([0, 1]), np.array([2, 2]), fwd,
    ...                    np.zeros(1, np.int64), 1, counts), counts.tolist()
    (3, [[2]])
    """
    row_doc, doc_tptr, doc_nterm, dt_term = forward[0], forward[1], forward[2], forward[3]
    R = counts.shape[1]
    for j in range(rows.shape[0]):
        i = rows[j]
        pos = np.int64(win_pos[i])
        cnt = np.int64(win_cnt[i])
        for r0 in range(R + 1):
            for side in range(2):
                if r0 == 0 and side == 1:
                    continue
                p = pos - r0 if side == 0 else pos + r0
                if p < 0 or p >= cnt:
                    continue
                x = win[i, p] if r0 > 0 else i
                d = row_doc[x] - 1
                if d < 0:
                    continue
                a = doc_tptr[d]
                for q in range(a, a + doc_nterm[d]):
                    t = dt_term[q]
                    if seen[t] != tick:
                        seen[t] = tick
                        for r in range(max(r0, 1), R + 1):
                            counts[t, r - 1] += sign
        tick += 1
    return tick
