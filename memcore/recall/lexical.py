"""The per-namespace lexical index: exact Okapi BM25, incremental under add, replace and remove.

Texts are tokenised exactly like the Unicode hashing embedder and the lexical scorer
(:func:`memcore._text.token_hashes`: NFKC + casefold, runs of letters/digits of any script,
character bigrams in scripts written without spaces), and each token is identified by its
64-bit hash. No stemming and no stop words: query preparation (:mod:`memcore.recall.prep`)
decides what a query keeps.

Why own postings rather than SQLite FTS5 (measured in issue 9 with the since-retired
``bench.hybrid_tuning backend``): FTS5's ``bm25()`` hard-codes
``k1 = 1.2, b = 0.75`` (hybrid recall wants ``b`` near 0.2), tokenises with its own rules
(not memcore's), returns only matching rows (the fusion needs every live row), and its
per-insert cost is a B-tree write; this index appends to blocked postings in a few
microseconds and scores a query at 1e5 memories in well under a millisecond.

Scores equal a batch-built index's after any sequence of operations: ``N``, ``df`` and the
total length are kept exactly, removed documents are only marked dead (their postings are
skipped), and per-row sums run in query-term order. Dead postings are compacted away once they
outnumber the live ones.
"""

from __future__ import annotations

from memcore.errors import InvalidArgumentError

import math
import numbers
from typing import Iterable, Sequence

import numpy as np

from memcore import _text
from memcore.kernels import bm25 as _k

__all__ = ["LexicalIndex", "bm25_idf"]

#: First postings block of a term, and the cap of the doubling block sizes (entries).
MIN_BLOCK = 4
MAX_BLOCK = 256


def bm25_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's BM25 idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))``, never negative.

    Parameters
    ----------
    df : ndarray of shape (m,), int64
        Live documents holding each term.
    n_docs : int
        Live documents ``N``.

    Returns
    -------
    ndarray of shape (m,), float64

    Examples
    --------
    >>> bm25_idf(np.array([1]), 1).round(4).tolist()
    [0.2877]
    """
    df = np.asarray(df, np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def _grow(arr: np.ndarray, need: int, fill=None) -> np.ndarray:
    if need <= arr.shape[0]:
        return arr
    cap = max(need, 2 * arr.shape[0], 16)
    out = np.empty(cap, arr.dtype) if fill is None else np.full(cap, fill, arr.dtype)
    out[:arr.shape[0]] = arr
    return out


def _check_param(name: str, value, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidArgumentError(f"LexicalIndex {name} must be a finite number in [{lo}, {hi}], "
                         f"got {value!r}")
    return float(value)


class LexicalIndex:
    """Exact Okapi BM25 (Lucene form) over one namespace's memories, keyed by store row.

    Parameters
    ----------
    k1 : float, default 1.2
        Term-frequency saturation, in [0, 100].
    b : float, default 0.75
        Length normalisation, in [0, 1]. Hybrid recall uses a low ``b`` (see
        :class:`memcore.recall.hybrid.HybridWeights`).

    Attributes
    ----------
    n_docs : int
        Live documents.
    n_rows : int
        One past the highest row ever added: the length of :meth:`scores`' output.
    avgdl : float
        Mean length of the live documents in tokens (0.0 when empty).

    Raises
    ------
    ValueError
        If k1 or b is out of range or not a number.

    Examples
    --------
    >>> idx = LexicalIndex(b=0.2)
    >>> idx.add(0, "the robot docked at noon"); idx.add(1, "battery low")
    >>> idx.scores("robot battery").round(3).tolist()   # ln 2 * tf / (tf + k1 * (1 - b + b dl/avgdl))
    [0.301, 0.331]
    """

    def __init__(self, k1: float = 1.2, b: float = 0.75):
        self.k1 = _check_param("k1", k1, 0.0, 100.0)
        self.b = _check_param("b", b, 0.0, 1.0)
        self._terms: dict[int, int] = {}
        self._df = np.zeros(0, np.int64)
        self._head = np.zeros(0, np.int64)
        self._tail = np.zeros(0, np.int64)
        self._fill = np.zeros(0, np.int64)
        self._bstart = np.zeros(0, np.int64)
        self._bsize = np.zeros(0, np.int64)
        self._bnext = np.zeros(0, np.int64)
        self._n_blocks = 0
        self._pdoc = np.zeros(0, np.int64)
        self._ptf = np.zeros(0, np.int32)
        self._pool_used = 0
        self._doc_row = np.zeros(0, np.int64)
        self._doc_len = np.zeros(0, np.int64)
        self._doc_alive = np.zeros(0, np.bool_)
        self._doc_terms: list = []          # doc id -> (term ids int64, tfs int32)
        self._row_doc = np.zeros(0, np.int64)
        self._n_docs_total = 0
        self.n_docs = 0
        self.n_rows = 0
        self._total_len = 0

    def __repr__(self) -> str:
        return f"LexicalIndex(k1={self.k1}, b={self.b}, n_docs={self.n_docs})"

    def __len__(self) -> int:
        return self.n_docs

    @property
    def avgdl(self) -> float:
        return self._total_len / self.n_docs if self.n_docs else 0.0

    # ------------------------------------------------------------------ writes
    def add(self, row: int, text: str) -> None:
        """Index (or re-index) the text of one row.

        Parameters
        ----------
        row : int
            The store's row, >= 0. A row that already holds a document is replaced.
        text : str

        Raises
        ------
        InvalidTextError
            If text is not a str or holds a lone surrogate.
        ValueError
            If row is not an int >= 0.

        Examples
        --------
        >>> LexicalIndex().add(0, "hello")
        """
        self.add_many([row], [text])

    def add_many(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        """Index several rows at once (one tokeniser call); later rows win on duplicates.

        Parameters
        ----------
        rows : sequence of int
        texts : sequence of str, same length

        Raises
        ------
        InvalidTextError, ValueError
            As in :meth:`add`, or when the lengths differ; nothing changes then.

        Examples
        --------
        >>> LexicalIndex().add_many([0, 1], ["a b", "c"])
        """
        rows = [self._check_row(r) for r in rows]
        texts = _text.check_texts(texts, encodable=False)
        if len(rows) != len(texts):
            raise InvalidArgumentError(f"add_many got {len(rows)} rows but {len(texts)} texts")
        hashes, offsets, counts = _text.token_hashes(texts)
        self.add_tokens_batch(rows, hashes, offsets[:len(rows)], counts)

    def add_tokens(self, row: int, token_hashes: np.ndarray) -> None:
        """Index a row given its token hashes (from :func:`memcore._text.token_hashes`).

        Used for documents that are not one text, e.g. an episode's context window.

        Parameters
        ----------
        row : int
        token_hashes : ndarray of shape (n_tokens,), uint64

        Examples
        --------
        >>> LexicalIndex().add_tokens(0, np.array([7, 7, 9], np.uint64))
        """
        row = self._check_row(row)
        token_hashes = np.asarray(token_hashes, np.uint64)
        self.remove(row)
        uniq, tfs = np.unique(token_hashes, return_counts=True)
        m = uniq.shape[0]
        term_ids = np.empty(m, np.int64)
        terms = self._terms
        for j, h in enumerate(uniq.tolist()):
            t = terms.get(h)
            if t is None:
                t = terms[h] = len(terms)
            term_ids[j] = t
        n_terms = len(terms)
        if n_terms > self._df.shape[0]:
            self._df = _grow(self._df, n_terms, 0)
            self._head = _grow(self._head, n_terms, -1)
            self._tail = _grow(self._tail, n_terms, -1)
            self._fill = _grow(self._fill, n_terms, 0)
        self._append_doc(row, term_ids, tfs.astype(np.int32), int(token_hashes.shape[0]))
        self.n_rows = max(self.n_rows, row + 1)

    def add_tokens_batch(self, rows: Sequence[int], hashes: np.ndarray, starts: np.ndarray,
                         counts: np.ndarray) -> None:
        """Index many new rows given their token hashes, in one pass (no per-row Python).

        Row ``rows[i]``'s tokens are ``hashes[starts[i]:starts[i] + counts[i]]`` (the layout
        of :func:`memcore._text.token_hashes`). The result equals calling :meth:`add_tokens`
        for each row in order (same term ids, postings and scores); rows that already hold a
        document, or repeated rows, take that path.

        Parameters
        ----------
        rows : sequence of int
        hashes : ndarray, uint64
        starts, counts : ndarray of shape (len(rows),), int64

        Examples
        --------
        >>> LexicalIndex().add_tokens_batch([0, 1], np.array([7, 9, 7], np.uint64),
        ...                                 np.array([0, 2]), np.array([2, 1]))
        """
        rows_a = np.asarray([self._check_row(r) for r in rows], np.int64)
        starts = np.asarray(starts, np.int64)
        counts = np.asarray(counts, np.int64)
        uniq, tok = np.unique(np.asarray(hashes, np.uint64), return_inverse=True)
        tok = tok.astype(np.int64).reshape(-1)
        self.add_docs(rows_a, uniq, tok, np.ones(tok.shape[0], np.int32), starts, counts,
                       np.arange(rows_a.shape[0] + 1, dtype=np.int64), counts)

    def add_docs(self, rows: np.ndarray, uniq: np.ndarray, tok: np.ndarray, tok_tf: np.ndarray,
                 seg_start: np.ndarray, seg_count: np.ndarray, seg_ptr: np.ndarray,
                 doc_len: np.ndarray, merge: bool = False):
        """Batch add: document ``i`` (row ``rows[i]``, ``doc_len[i]`` tokens) is the union of
        the segments ``seg_ptr[i]:seg_ptr[i+1]`` of ``tok`` (ids into the sorted unique hashes
        ``uniq``), each entry counted ``tok_tf`` times (see :func:`bm25_docs`; ``merge``: the
        segments are sorted distinct ids). Equal to
        :meth:`add_tokens` per row in order.

        Returns
        -------
        ptr, term_ids, tfs, term_of : ndarray
            The documents' distinct terms (``ptr`` as in :func:`bm25_docs`), and the term id
            of each entry of ``uniq`` (-1 if none); None when rows needed the per-row path.
        """
        n = rows.shape[0]
        if n == 0:
            return None
        r_doc = self._row_doc
        held = rows[rows < r_doc.shape[0]]
        if np.unique(rows).shape[0] != n or (held.shape[0] and (r_doc[held] >= 0).any()):
            for i in range(n):                       # replacing rows: the per-row path
                parts = [np.repeat(uniq[tok[seg_start[s]:seg_start[s] + seg_count[s]]],
                                   tok_tf[seg_start[s]:seg_start[s] + seg_count[s]])
                         for s in range(seg_ptr[i], seg_ptr[i + 1])]
                self.add_tokens(int(rows[i]), np.concatenate(parts) if parts
                                else np.zeros(0, np.uint64))
            return None
        get = self._terms.get
        term_of = np.array([get(h, -1) for h in uniq.tolist()], np.int64)
        old_terms = len(self._terms)
        doc_len = np.asarray(doc_len, np.int64)
        ptr = np.empty(n + 1, np.int64)
        cap = int(seg_count.sum())
        term_ids = np.empty(cap, np.int64)
        tfs = np.empty(cap, np.int32)
        n_terms = _k.bm25_docs(tok, tok_tf, seg_start, seg_count, seg_ptr, term_of, old_terms,
                               ptr, term_ids, tfs, merge)
        if n_terms > old_terms:
            new = np.flatnonzero(term_of >= old_terms)
            new = new[np.argsort(term_of[new])]
            self._terms.update(zip(uniq[new].tolist(), range(old_terms, n_terms)))
            self._df = _grow(self._df, n_terms, 0)
            self._head = _grow(self._head, n_terms, -1)
            self._tail = _grow(self._tail, n_terms, -1)
            self._fill = _grow(self._fill, n_terms, 0)
        used = int(ptr[n])
        term_ids = term_ids[:used]
        tfs = tfs[:used]
        doc0 = self._n_docs_total
        self._doc_row = _grow(self._doc_row, doc0 + n)
        self._doc_len = _grow(self._doc_len, doc0 + n)
        self._doc_alive = _grow(self._doc_alive, doc0 + n, False)
        # room for every block the batch opens, bounded per term (c new postings: at most c
        # blocks and c + max_block - 1 entries; a fresh term's doubling blocks, 2c + min_block)
        c = np.bincount(term_ids, minlength=n_terms)
        fresh = self._tail[:n_terms] < 0
        pool_need = np.where(fresh, np.minimum(2 * c + MIN_BLOCK, c + MAX_BLOCK - 1),
                             c + MAX_BLOCK - 1)
        pool_need = int(pool_need[c > 0].sum())
        block_need = int(np.minimum(c, 8 + c // MAX_BLOCK).sum())
        i = 0
        while i < n:
            self._bstart = _grow(self._bstart, self._n_blocks + block_need)
            self._bsize = _grow(self._bsize, self._n_blocks + block_need)
            self._bnext = _grow(self._bnext, self._n_blocks + block_need)
            self._pdoc = _grow(self._pdoc, self._pool_used + pool_need)
            self._ptf = _grow(self._ptf, self._pool_used + pool_need)
            i, self._n_blocks, self._pool_used = _k.bm25_append_many(
                doc0, i, ptr, term_ids, tfs, self._head, self._tail, self._fill, self._bstart,
                self._bsize, self._bnext, self._n_blocks, self._pdoc, self._ptf,
                self._pool_used, MIN_BLOCK, MAX_BLOCK)
            block_need, pool_need = 2 * block_need + 16, 2 * pool_need + MAX_BLOCK  # not reached
        self._n_docs_total = doc0 + n
        self._doc_row[doc0:doc0 + n] = rows
        self._doc_len[doc0:doc0 + n] = doc_len
        self._doc_alive[doc0:doc0 + n] = True
        bounds = ptr.tolist()
        self._doc_terms.extend([(term_ids[a:b], tfs[a:b])
                                for a, b in zip(bounds[:-1], bounds[1:])])
        self._df += np.bincount(term_ids, minlength=self._df.shape[0])[:self._df.shape[0]]
        self.n_rows = max(self.n_rows, int(rows.max()) + 1)
        self._row_doc = _grow(self._row_doc, self.n_rows, -1)
        self._row_doc[rows] = np.arange(doc0, doc0 + n, dtype=np.int64)
        self.n_docs += n
        self._total_len += int(doc_len.sum())
        return ptr, term_ids, tfs, term_of

    def remove(self, row: int) -> bool:
        """Drop a row's document; True if it had one.

        Examples
        --------
        >>> LexicalIndex().remove(3)
        False
        """
        row = self._check_row(row)
        if row >= self._row_doc.shape[0] or self._row_doc[row] < 0:
            return False
        doc = int(self._row_doc[row])
        self._row_doc[row] = -1
        self._doc_alive[doc] = False
        term_ids, _ = self._doc_terms[doc]
        self._df[term_ids] -= 1
        self._doc_terms[doc] = None
        self.n_docs -= 1
        self._total_len -= int(self._doc_len[doc])
        dead = self._n_docs_total - self.n_docs
        if dead > 1024 and dead > self.n_docs:
            self._compact()
        return True

    def _compact(self) -> None:
        """Rebuild the postings from the live documents (same rows, same scores)."""
        live = [(int(self._doc_row[d]), self._doc_terms[d], int(self._doc_len[d]))
                for d in range(self._n_docs_total) if self._doc_alive[d]]
        fresh = LexicalIndex(self.k1, self.b)
        fresh._terms = self._terms
        fresh._df = np.zeros_like(self._df)
        fresh._head = np.full_like(self._head, -1)
        fresh._tail = np.full_like(self._tail, -1)
        fresh._fill = np.zeros_like(self._fill)
        for row, (term_ids, tfs), dl in live:
            fresh._append_doc(row, term_ids, tfs, dl)
        fresh.n_rows = self.n_rows
        fresh._row_doc = _grow(fresh._row_doc, self.n_rows, -1)
        self.__dict__.update(fresh.__dict__)

    def _append_doc(self, row, term_ids, tfs, dl) -> None:
        m = term_ids.shape[0]
        self._bstart = _grow(self._bstart, self._n_blocks + m)
        self._bsize = _grow(self._bsize, self._n_blocks + m)
        self._bnext = _grow(self._bnext, self._n_blocks + m)
        self._pdoc = _grow(self._pdoc, self._pool_used + m * MAX_BLOCK)
        self._ptf = _grow(self._ptf, self._pool_used + m * MAX_BLOCK)
        doc = self._n_docs_total
        self._n_docs_total += 1
        self._doc_row = _grow(self._doc_row, doc + 1)
        self._doc_len = _grow(self._doc_len, doc + 1)
        self._doc_alive = _grow(self._doc_alive, doc + 1, False)
        self._n_blocks, self._pool_used = _k.bm25_append(
            doc, term_ids, tfs, self._head, self._tail, self._fill, self._bstart, self._bsize,
            self._bnext, self._n_blocks, self._pdoc, self._ptf, self._pool_used,
            MIN_BLOCK, MAX_BLOCK)
        self._doc_row[doc] = row
        self._doc_len[doc] = dl
        self._doc_alive[doc] = True
        self._doc_terms.append((term_ids, tfs))
        self._df[term_ids] += 1
        self._row_doc = _grow(self._row_doc, row + 1, -1)
        self._row_doc[row] = doc
        self.n_docs += 1
        self._total_len += dl

    def clear(self) -> None:
        """Remove every document."""
        self.__init__(self.k1, self.b)

    @staticmethod
    def _check_row(row) -> int:
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or row < 0:
            raise InvalidArgumentError(f"row must be an int >= 0, got {row!r}")
        return int(row)

    # ------------------------------------------------------------------ reads
    def query_terms(self, token_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Term ids and idf of a query's tokens that occur in a live document, in order.

        Parameters
        ----------
        token_hashes : ndarray of shape (n_tokens,), uint64

        Returns
        -------
        q_terms : ndarray of shape (m,), int64
        q_idf : ndarray of shape (m,), float64
        """
        get = self._terms.get
        ids = [get(h, -1) for h in np.asarray(token_hashes, np.uint64).tolist()]
        q_terms = np.array([t for t in ids if t >= 0 and self._df[t] > 0], np.int64)
        return q_terms, bm25_idf(self._df[q_terms], self.n_docs)

    def scores_tokens(self, token_hashes: np.ndarray, out: np.ndarray | None = None
                      ) -> np.ndarray:
        """BM25 score of every row for a query given as token hashes.

        Parameters
        ----------
        token_hashes : ndarray of shape (n_tokens,), uint64
        out : ndarray of shape (n_rows,), float64, optional
            Written in place when given (its length must be at least :attr:`n_rows`; rows
            past ``n_rows`` are zeroed).

        Returns
        -------
        ndarray of shape (n_rows,) or out's shape, float64
            0.0 for rows without a live document or without a matching term.

        Raises
        ------
        ValueError
            If out is too short or not a float64 array.
        """
        if out is None:
            out = np.empty(self.n_rows, np.float64)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.ndim != 1
              or out.shape[0] < self.n_rows):
            raise InvalidArgumentError(f"out must be a float64 array of length >= {self.n_rows}")
        if self.n_docs == 0:
            out[:] = 0.0
            return out
        q_terms, q_idf = self.query_terms(token_hashes)
        return _k.bm25_scores(q_terms, q_idf, self._head, self._tail, self._fill, self._bstart,
                              self._bsize, self._bnext, self._pdoc, self._ptf, self._doc_row,
                              self._doc_len, self._doc_alive, self.k1, self.b, self.avgdl, out)

    def scores(self, query: str, out: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every row for a query text (tokenised like the stored texts).

        Parameters
        ----------
        query : str
        out : ndarray, optional
            See :meth:`scores_tokens`.

        Returns
        -------
        ndarray of shape (n_rows,), float64

        Raises
        ------
        InvalidTextError
            If query is not a str or holds a lone surrogate.

        Examples
        --------
        >>> idx = LexicalIndex(); idx.add(2, "red apple")
        >>> idx.scores("apple").shape
        (3,)
        """
        hashes, _, counts = _text.token_hashes([query], parallel=False)
        return self.scores_tokens(hashes[:counts[0]], out)

    def rows(self) -> np.ndarray:
        """Rows holding a live document, ascending: ndarray (n_docs,), int64."""
        return np.flatnonzero(self._row_doc[:self.n_rows] >= 0).astype(np.int64)

    def document_frequency(self, token_hashes: Iterable[int]) -> np.ndarray:
        """Live documents holding each token hash: ndarray (m,), int64 (0 for unknown)."""
        get = self._terms.get
        return np.array([self._df[t] if (t := get(int(h))) is not None else 0
                         for h in token_hashes], np.int64)
