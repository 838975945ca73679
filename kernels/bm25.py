"""Okapi BM25 over hashed token ids: incremental blocked postings and an exact scoring kernel.

Score of document ``d`` for a query (a multiset of term ids; a term repeated ``m`` times counts
``m`` times)::

    bm25(d) = sum over query terms t of  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * dl(d) / avgdl))
    idf(t)  = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

the Lucene form of Okapi BM25 (Robertson et al. 1994; Kamphuis et al. 2020, "Which BM25 do you
mean?"): the idf never goes negative, and the ``(k1 + 1)`` numerator factor is dropped (a
constant per query, so rankings are unchanged). ``N`` is the number of live documents, ``df``
counts live documents holding ``t``, ``avgdl`` is their mean length in tokens. The caller
(:class:`memcore.lexical.LexicalIndex`) keeps ``N``, ``df`` and the total length exact under
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
``pool_doc`` (int64 document id) and ``pool_tf`` (int32 term frequency).

Kernels are pure (arrays and scalars in, preallocated arrays out), ``cache=True``, no
``fastmath``; they never validate (``memcore`` does). NumPy/pure-Python oracles with the same
names live in :mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["bm25_append", "bm25_scores"]


@numba.njit(cache=True)
def bm25_append(doc, term_ids, tfs, term_head, term_tail, term_fill, block_start, block_size,
                block_next, n_blocks, pool_doc, pool_tf, pool_used, min_block, max_block):
    """Append one document's postings (one entry per distinct term) to the blocked lists.

    Parameters
    ----------
    doc : int
        The new document's id (never used before).
    term_ids : ndarray of shape (m,), int64
        Distinct term ids of the document.
    tfs : ndarray of shape (m,), int32
        Their frequencies in the document, >= 1.
    term_head, term_tail : ndarray of shape (n_terms_cap,), int64
        First and last block of each term's list, -1 for a term without postings.
    term_fill : ndarray of shape (n_terms_cap,), int64
        Entries used in each term's tail block.
    block_start : ndarray of shape (n_blocks_cap,), int64
    block_size : ndarray of shape (n_blocks_cap,), int64
    block_next : ndarray of shape (n_blocks_cap,), int64
    n_blocks : int
        Blocks in use.
    pool_doc : ndarray of shape (pool_cap,), int64
    pool_tf : ndarray of shape (pool_cap,), int32
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
    >>> nb, used = bm25_append(0, np.array([3], np.int64), np.array([2], np.int32), head, tail,
    ...                        fill, bstart, bsize, bnext, 0, pdoc, ptf, 0, 4, 256)
    """
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
def bm25_scores(q_terms, q_idf, term_head, term_tail, term_fill, block_start, block_size,
                block_next, pool_doc, pool_tf, doc_row, doc_len, doc_alive, k1, b, avgdl, out):
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
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf
        The postings (see :func:`bm25_append`).
    doc_row : ndarray of shape (n_docs_cap,), int64
        Output row of each document.
    doc_len : ndarray of shape (n_docs_cap,), int64
        Tokens per document.
    doc_alive : ndarray of shape (n_docs_cap,), bool
        False for removed (or replaced) documents; their postings are skipped.
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
    >>> bm25_scores(q, idf, head, tail, fill, bstart, bsize, bnext, pdoc, ptf, row, dl,
    ...             alive, 1.2, 0.75, 10.0, np.empty(n, np.float64))
    """
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
