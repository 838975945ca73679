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
from typing import Any, Iterable, Sequence

import numpy as np

from memcore import _text
from memcore.arrays import RamArrays
from memcore.kernels import bm25 as _k
from memcore.recall.threads import numba_threads, thread_count

#: Postings (times the window, for the window BM25) of a query from which ``threads`` >= 2
#: score them on numba's threads: below, a parallel region costs more than it saves.
PARALLEL_MIN_WORK = 65_536

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


def _check_param(name: str, value, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidArgumentError(f"LexicalIndex {name} must be a finite number in [{lo}, {hi}], "
                         f"got {value!r}")
    return float(value)


#: The flat arrays of a lexical index (name -> (dtype, trailing shape)), allocated through an
#: :class:`~memcore.arrays.Arrays` under the index's prefix. Per term: its 64-bit token
#: hash, document frequency and postings chain (head/tail block, fill of the tail); per block:
#: start, size, next; the postings pool (document, tf); per document (one per add: a replaced
#: row gets a new one): row, length, liveness and its (term, tf) list in the document-term
#: pool; per row: its document + 1 (0 = none) and length.
ARRAYS = {
    "term_hash": np.uint64, "df": np.int64, "head": np.int64, "tail": np.int64,
    "fill": np.int64,
    "bstart": np.int64, "bsize": np.int64, "bnext": np.int64,
    "pdoc": np.int32, "ptf": np.int32,
    "doc_row": np.int32, "doc_len": np.int32, "doc_alive": np.bool_, "doc_tptr": np.int64,
    "doc_nterm": np.int32,
    "dt_term": np.int32, "dt_tf": np.int32,
    "row_doc": np.int32, "row_len": np.int32,
}
#: Per-posting, per-document and per-row ids and counts are int32 (half the bytes on disk and
#: in RAM): rows, term ids and document ids stay below 2**31 (document ids are compacted once
#: the dead outnumber the live), while pool offsets (``doc_tptr``, blocks) stay int64. Indexes
#: written with int64 arrays (format 2 before this change) keep theirs: every reader takes
#: either width, and an array keeps its dtype when it grows.

#: Counters of :meth:`LexicalIndex.small_state`.
COUNTERS = ("n_terms", "n_blocks", "pool_used", "n_docs_total", "dt_used", "n_docs", "n_rows",
            "total_len")


class LexicalIndex:
    """Exact Okapi BM25 (Lucene form) over one namespace's memories, keyed by store row.

    All state is flat arrays (:data:`ARRAYS`) allocated through ``arrays`` plus the
    term-hash -> term-id dict (rebuilt from ``term_hash`` by :meth:`restore`) and the
    counters of :meth:`small_state`. ``k1`` and ``b`` are the defaults of the scoring methods,
    which also take them per call (they fix no state).

    Parameters
    ----------
    k1 : float, default 1.2
        Term-frequency saturation, in [0, 100].
    b : float, default 0.75
        Length normalisation, in [0, 1]. Hybrid recall uses a low ``b`` (see
        :class:`memcore.recall.weights.HybridWeights`).
    arrays : Arrays, optional
        Where the arrays live (:class:`~memcore.arrays.RamArrays` when None).
    prefix : str, default ""
        Prepended to every array name (several indexes can share one ``arrays``).

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

    def __init__(self, k1: float = 1.2, b: float = 0.75, *, arrays=None, prefix: str = ""):
        self.k1 = _check_param("k1", k1, 0.0, 100.0)
        self.b = _check_param("b", b, 0.0, 1.0)
        self.arrays = arrays if arrays is not None else RamArrays()
        self.prefix = prefix
        self._terms: dict[int, int] = {}
        self._scratch: list = []                 # context_scores' accumulators (RAM)
        self._parts: list = []                   # and the threaded kernel's, per part
        self._set_counters({})
        for name, dtype in ARRAYS.items():
            if self.arrays.get(prefix + name) is None:
                self.arrays.alloc(prefix + name, (0,), dtype)

    def _set_counters(self, state: dict) -> None:
        for c in COUNTERS:
            setattr(self, c if c in ("n_docs", "n_rows") else "_" + c, int(state.get(c, 0)))

    def small_state(self) -> dict:
        """The counters (the arrays and ``term_hash`` hold the rest): dict of int64 scalars."""
        return {c: np.int64(getattr(self, c if c in ("n_docs", "n_rows") else "_" + c))
                for c in COUNTERS}

    @classmethod
    def restore(cls, arrays, state: dict, k1: float = 1.2, b: float = 0.75,
                prefix: str = "") -> "LexicalIndex":
        """The index over ``arrays`` as they were when ``state`` (:meth:`small_state`) was
        taken; O(terms) Python to rebuild the hash -> id dict."""
        idx = cls(k1, b, arrays=arrays, prefix=prefix)
        idx._set_counters(state)
        h = idx._a("term_hash")[:idx._n_terms]
        idx._terms = dict(zip(h.tolist(), range(idx._n_terms)))
        return idx

    def _a(self, name: str) -> np.ndarray:
        return self.arrays.get(self.prefix + name)

    def _grow(self, name: str, need: int) -> np.ndarray:
        arr = self.arrays.get(self.prefix + name)
        if need <= arr.shape[0]:
            return arr
        return self.arrays.grow(self.prefix + name, need)

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
        rows = [self.check_row(r) for r in rows]
        texts = _text.check_texts(texts, encodable=False)
        if len(rows) != len(texts):
            raise InvalidArgumentError(f"add_many got {len(rows)} rows but {len(texts)} texts")
        hashes, offsets, counts = _text.token_hashes(texts)
        self.add_tokens_batch(rows, hashes, offsets[:len(rows)], counts)

    def add_tokens(self, row: int, token_hashes: np.ndarray) -> None:
        """Index a row given its token hashes (from :func:`memcore._text.token_hashes`).

        Parameters
        ----------
        row : int
        token_hashes : ndarray of shape (n_tokens,), uint64

        Examples
        --------
        >>> LexicalIndex().add_tokens(0, np.array([7, 7, 9], np.uint64))
        """
        h = np.asarray(token_hashes, np.uint64).reshape(-1)
        self.add_tokens_batch([row], h, np.zeros(1, np.int64), np.array([h.shape[0]], np.int64))

    def add_tokens_batch(self, rows: Sequence[int], hashes: np.ndarray, starts: np.ndarray,
                         counts: np.ndarray) -> None:
        """Index many rows given their token hashes, in one pass (no per-row Python).

        Row ``rows[i]``'s tokens are ``hashes[starts[i]:starts[i] + counts[i]]`` (the layout
        of :func:`memcore._text.token_hashes`). Rows already holding a document are replaced;
        a row repeated in ``rows`` keeps its last text. The result equals calling
        :meth:`add_tokens` for each row in order.

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
        if isinstance(rows, np.ndarray) and rows.dtype.kind in "iu" and rows.ndim == 1:
            if rows.shape[0] and rows.min() < 0:
                raise InvalidArgumentError(f"row must be an int >= 0, got {int(rows.min())}")
            rows_a = rows.astype(np.int64)
        else:
            rows_a = np.asarray([self.check_row(r) for r in rows], np.int64)
        n = rows_a.shape[0]
        if n == 0:
            return
        starts = np.asarray(starts, np.int64)
        counts = np.asarray(counts, np.int64)
        if np.unique(rows_a).shape[0] != n:          # a repeated row: one at a time
            for i in range(n):
                self.add_tokens_batch(rows_a[i:i + 1], hashes, starts[i:i + 1], counts[i:i + 1])
            return
        held = rows_a[rows_a < self.n_rows]
        for r in held[self._a("row_doc")[held] > 0].tolist():
            self.remove(r)
        hashes = np.asarray(hashes, np.uint64)
        total = int(counts.sum())
        packed = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=packed[1:])
        flat = hashes[np.repeat(starts - packed[:n], counts) + np.arange(total, dtype=np.int64)]
        uniq, tok = np.unique(flat, return_inverse=True)
        tok = tok.astype(np.int64).reshape(-1)
        self._add_docs(rows_a, uniq, tok, packed[:n], counts)

    def _add_docs(self, rows: np.ndarray, uniq: np.ndarray, tok: np.ndarray,
                  seg_start: np.ndarray, doc_len: np.ndarray) -> None:
        """Append documents for new (unindexed) rows: document ``i`` is the tokens
        ``tok[seg_start[i]:seg_start[i] + doc_len[i]]`` (ids into the sorted unique hashes)."""
        n = rows.shape[0]
        get = self._terms.get
        term_of = np.array([get(h, -1) for h in uniq.tolist()], np.int64)
        old_terms = self._n_terms
        ptr = np.empty(n + 1, np.int64)
        cap = int(doc_len.sum())
        term_ids = np.empty(cap, np.int64)
        tfs = np.empty(cap, np.int32)
        n_terms = _k.bm25_docs(tok, np.ones(tok.shape[0], np.int32),
                               (seg_start, doc_len, np.arange(n + 1, dtype=np.int64)), term_of,
                               old_terms, (ptr, term_ids, tfs), False)
        if n_terms > old_terms:
            new = np.flatnonzero(term_of >= old_terms)
            new = new[np.argsort(term_of[new])]
            self._terms.update(zip(uniq[new].tolist(), range(old_terms, n_terms)))
            for name in ("term_hash", "df", "head", "tail", "fill"):
                self._grow(name, n_terms)
            self._a("term_hash")[old_terms:n_terms] = uniq[new]
            self._a("df")[old_terms:n_terms] = 0
            self._a("head")[old_terms:n_terms] = -1
            self._a("tail")[old_terms:n_terms] = -1
            self._a("fill")[old_terms:n_terms] = 0
            self._n_terms = n_terms
        used = int(ptr[n])
        term_ids, tfs = term_ids[:used], tfs[:used]
        self._append_postings(self._n_docs_total, ptr, term_ids, tfs)
        doc0 = self._n_docs_total
        d = slice(doc0, doc0 + n)
        for name in ("doc_row", "doc_len", "doc_alive", "doc_tptr", "doc_nterm"):
            self._grow(name, doc0 + n)
        self._a("doc_row")[d] = rows
        self._a("doc_len")[d] = doc_len
        self._a("doc_alive")[d] = True
        self._a("doc_tptr")[d] = self._dt_used + ptr[:n]
        self._a("doc_nterm")[d] = np.diff(ptr)
        for name in ("dt_term", "dt_tf"):
            self._grow(name, self._dt_used + used)
        self._a("dt_term")[self._dt_used:self._dt_used + used] = term_ids
        self._a("dt_tf")[self._dt_used:self._dt_used + used] = tfs
        self._dt_used += used
        self._n_docs_total = doc0 + n
        df = self._a("df")
        df[:n_terms] += np.bincount(term_ids, minlength=n_terms)[:n_terms]
        self.n_rows = max(self.n_rows, int(rows.max()) + 1)
        self._grow("row_doc", self.n_rows)
        self._grow("row_len", self.n_rows)
        self._a("row_doc")[rows] = np.arange(doc0 + 1, doc0 + n + 1, dtype=np.int64)
        self._a("row_len")[rows] = doc_len
        self.n_docs += n
        self._total_len += int(doc_len.sum())

    def _append_postings(self, doc0: int, ptr: np.ndarray, term_ids: np.ndarray,
                         tfs: np.ndarray) -> None:
        n = ptr.shape[0] - 1
        n_terms = self._n_terms
        # room for every block the batch opens, bounded per term (c new postings: at most c
        # blocks and c + max_block - 1 entries; a fresh term's doubling blocks, 2c + min_block)
        c = np.bincount(term_ids, minlength=n_terms)
        fresh = self._a("tail")[:n_terms] < 0
        pool_need = np.where(fresh, np.minimum(2 * c + MIN_BLOCK, c + MAX_BLOCK - 1),
                             c + MAX_BLOCK - 1)
        pool_need = int(pool_need[c > 0].sum())
        block_need = int(np.minimum(c, 8 + c // MAX_BLOCK).sum())
        i = 0
        while i < n:
            for name in ("bstart", "bsize", "bnext"):
                self._grow(name, self._n_blocks + block_need)
            for name in ("pdoc", "ptf"):
                self._grow(name, self._pool_used + pool_need)
            i, self._n_blocks, self._pool_used = _k.bm25_append_many(
                doc0, i, ptr, term_ids, tfs, self._postings(), self._n_blocks, self._pool_used,
                MIN_BLOCK, MAX_BLOCK)
            block_need, pool_need = 2 * block_need + 16, 2 * pool_need + MAX_BLOCK

    def remove(self, row: int) -> bool:
        """Drop a row's document; True if it had one.

        Examples
        --------
        >>> LexicalIndex().remove(3)
        False
        """
        row = self.check_row(row)
        row_doc = self._a("row_doc")
        if row >= self.n_rows or row_doc[row] <= 0:
            return False
        doc = int(row_doc[row]) - 1
        row_doc[row] = 0
        self._a("row_len")[row] = 0
        self._a("doc_alive")[doc] = False
        a = int(self._a("doc_tptr")[doc])
        m = int(self._a("doc_nterm")[doc])
        self._a("df")[self._a("dt_term")[a:a + m]] -= 1
        self.n_docs -= 1
        self._total_len -= int(self._a("doc_len")[doc])
        dead = self._n_docs_total - self.n_docs
        if dead > 1024 and dead > self.n_docs:
            self._compact()
        return True

    def _compact(self) -> None:
        """Rebuild the postings and document tables from the live documents (same rows, same
        term ids, same scores); documents keep their order."""
        nd = self._n_docs_total
        live = np.flatnonzero(self._a("doc_alive")[:nd])
        tptr, nterm = self._a("doc_tptr")[live], self._a("doc_nterm")[live]
        ptr = np.zeros(live.shape[0] + 1, np.int64)
        np.cumsum(nterm, out=ptr[1:])
        idx = np.repeat(tptr - ptr[:-1], nterm) + np.arange(int(ptr[-1]), dtype=np.int64)
        term_ids = self._a("dt_term")[idx].copy()
        tfs = self._a("dt_tf")[idx].copy()
        rows = self._a("doc_row")[live].copy()
        lens = self._a("doc_len")[live].copy()
        nt = self._n_terms
        self._a("head")[:nt] = -1
        self._a("tail")[:nt] = -1
        self._a("fill")[:nt] = 0
        self._n_blocks = self._pool_used = 0
        m = live.shape[0]
        self._append_postings(0, ptr, term_ids, tfs)
        self._a("doc_row")[:m] = rows
        self._a("doc_len")[:m] = lens
        self._a("doc_alive")[:nd] = False
        self._a("doc_alive")[:m] = True
        self._a("doc_tptr")[:m] = ptr[:-1]
        self._a("doc_nterm")[:m] = nterm
        self._a("dt_term")[:ptr[-1]] = term_ids
        self._a("dt_tf")[:ptr[-1]] = tfs
        self._dt_used = int(ptr[-1])
        self._n_docs_total = m
        row_doc = self._a("row_doc")
        row_doc[:self.n_rows] = 0
        row_doc[rows] = np.arange(1, m + 1, dtype=np.int64)

    def clear(self) -> None:
        """Remove every document."""
        self._terms = {}
        self._set_counters({})

    @staticmethod
    def check_row(row: Any) -> int:
        """``row`` as an int, else :class:`InvalidArgumentError` (rows are ints >= 0)."""
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)) or row < 0:
            raise InvalidArgumentError(f"row must be an int >= 0, got {row!r}")
        return int(row)

    # ------------------------------------------------------------------ reads
    @property
    def row_lengths(self) -> np.ndarray:
        """Each row's document length in tokens, ndarray of shape (capacity,), int32 (0 for a
        row never written); a view, not a copy."""
        return self._a("row_len")

    def row_terms(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """A live row's distinct term ids (int64) and their tfs (int32), in first-seen order."""
        doc = int(self._a("row_doc")[row]) - 1
        a, m = int(self._a("doc_tptr")[doc]), int(self._a("doc_nterm")[doc])
        return self._a("dt_term")[a:a + m], self._a("dt_tf")[a:a + m]

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
        df = self._a("df")
        ids = self.term_ids(token_hashes)
        q_terms = ids[ids >= 0]
        q_terms = q_terms[df[q_terms] > 0]
        return q_terms, bm25_idf(df[q_terms], self.n_docs)

    def term_ids(self, token_hashes: np.ndarray) -> np.ndarray:
        """The term id of each token hash (uint64), -1 for a term never indexed; (m,) int64."""
        get = self._terms.get
        return np.array([get(h, -1) for h in np.asarray(token_hashes, np.uint64).tolist()],
                        np.int64)

    def _postings(self) -> tuple:
        """The kernels' postings tuple (:mod:`memcore.kernels.bm25`)."""
        return (self._a("head"), self._a("tail"), self._a("fill"), self._a("bstart"),
                self._a("bsize"), self._a("bnext"), self._a("pdoc"), self._a("ptf"))

    def forward(self) -> tuple:
        """The kernels' forward index (each row's document as term lists;
        :func:`memcore.kernels.bm25.bm25_rows`): ``(row_doc, doc_tptr, doc_nterm, dt_term,
        dt_tf, doc_len)``, views of the arrays."""
        return (self._a("row_doc"), self._a("doc_tptr"), self._a("doc_nterm"),
                self._a("dt_term"), self._a("dt_tf"), self._a("doc_len"))

    def _docs(self) -> tuple:
        """The kernels' docs tuple: (doc_row, doc_len, doc_alive)."""
        return self._a("doc_row"), self._a("doc_len"), self._a("doc_alive")

    def scores_tokens(self, token_hashes: np.ndarray, out: np.ndarray | None = None, *,
                      k1: float | None = None, b: float | None = None) -> np.ndarray:
        """BM25 score of every row for a query given as token hashes.

        Parameters
        ----------
        token_hashes : ndarray of shape (n_tokens,), uint64
        out : ndarray of shape (n_rows,), float64, optional
            Written in place when given (its length must be at least :attr:`n_rows`; rows
            past ``n_rows`` are zeroed).
        k1, b : float, optional
            The index's defaults when None.

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
        return _k.bm25_scores(q_terms, q_idf, self._postings(), self._docs(),
                              self.k1 if k1 is None else k1, self.b if b is None else b,
                              self.avgdl, out)

    def sparse_scores(self, q_terms: np.ndarray, q_idf: np.ndarray, k1: float, b: float,
                      threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The rows that score and their BM25 (:func:`memcore.kernels.bm25.bm25_scores_sparse`)
        for query terms from :meth:`query_terms`: (m,) int64 ascending, (m,) float64.
        ``threads`` >= 2: common terms' postings are scored on that many numba threads
        (:func:`memcore.kernels.bm25.bm25_scores_parallel`; the same rows and scores bit for
        bit)."""
        if self.n_docs == 0 or q_terms.shape[0] == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        args = (q_terms, q_idf, self._postings(), self._docs(), k1, b, self.avgdl)
        work = int(self._a("df")[q_terms].sum())
        if 8 * work < self.n_rows:
            return _k.bm25_scores_sparse(*args)
        # common terms: an n-length accumulator (the same values bit for bit) beats sorting
        # the postings; it is the zeroed accumulator of context_scores, zeroed again after
        scratch = self._take_scratch(self.n_rows)
        if thread_count(threads) > 1 and work >= PARALLEL_MIN_WORK:
            with numba_threads(threads):
                out = _k.bm25_scores_parallel(*args, scratch[0][:self.n_rows])
            rows = np.flatnonzero(out).astype(np.int64)
            vals = out[rows]
            out[rows] = 0.0
        else:
            rows, vals = _k.bm25_scores_dense(*args, (scratch[0][:self.n_rows], scratch[2]))
        self._scratch.append(scratch)
        return rows, vals

    def _take_scratch(self, n: int) -> tuple:
        """Zeroed accumulators for ``n`` rows (float64, int32, 2n int32), reused across
        queries (no n-length allocation per query); each concurrent caller gets its own, and
        gives it back zeroed (``self._scratch.append``)."""
        try:
            scratch = self._scratch.pop()
        except IndexError:
            scratch = None
        if scratch is None or scratch[0].shape[0] < n:
            cap = n + n // 4 + 64
            scratch = (np.zeros(cap), np.zeros(cap, np.int32), np.zeros(2 * cap, np.int32))
        return scratch

    def _take_parts(self, parts: int, n: int) -> tuple:
        """The threaded context kernel's per-part accumulators: five (parts, >= n) int32
        arrays, the first zero (given back zeroed, as :meth:`_take_scratch`'s)."""
        try:
            got = self._parts.pop()
        except IndexError:
            got = None
        if got is None or got[0].shape[0] != parts or got[0].shape[1] < n:
            cap = n + n // 4 + 64
            got = tuple(np.zeros((parts, cap), np.int32) for _ in range(5))
        return got

    def context_scores(self, q_terms: np.ndarray, win_start: np.ndarray, win_len: np.ndarray,
                       win_rows: np.ndarray, ctx_len: np.ndarray, ctx_total_len: int, k1: float,
                       b: float, radius: int = 1, threads: int = 1
                       ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of each row's window document (its window's texts concatenated) from the own
        postings (:func:`memcore.kernels.bm25.bm25_context_scores_sparse`): rows (m,) int64
        ascending and scores (m,) float64. ``ctx_len``: each row's window-document length
        (:func:`memcore.kernels.bm25.window_lengths`); ``ctx_total_len``: their sum over the
        live rows; ``radius``: the windows' radius (picks the kernel); ``threads`` >= 2:
        common terms on that many numba threads
        (:func:`memcore.kernels.bm25.bm25_context_scores_dense_parallel`, the same result bit
        for bit). Thread-safe: each concurrent call gets its own accumulators."""
        if self.n_docs == 0 or q_terms.shape[0] == 0 or ctx_total_len <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        args = (q_terms, self._postings(), self._docs(), (win_start, win_len, win_rows), ctx_len,
                self.n_docs, k1, b, ctx_total_len / self.n_docs)
        # sorting (postings * window) pairs, or n-length accumulators for common terms: the
        # same rows and scores bit for bit
        work = int(self._a("df")[q_terms].sum()) * (2 * radius + 1)
        n = win_start.shape[0]
        if 4 * work < n:
            return _k.bm25_context_scores_sparse(*args)
        scratch = self._take_scratch(n)
        parts = thread_count(threads)
        if parts > 1 and work >= PARALLEL_MIN_WORK:
            ps = self._take_parts(parts, n)
            with numba_threads(parts):
                out = _k.bm25_context_scores_dense_parallel(*args, scratch, ps)
            self._parts.append(ps)
        else:
            out = _k.bm25_context_scores_dense(*args, scratch)
        self._scratch.append(scratch)            # zero again (the kernel's contract)
        return out

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
        return np.flatnonzero(self._a("row_doc")[:self.n_rows] > 0).astype(np.int64)

    def document_frequency(self, token_hashes: Iterable[int]) -> np.ndarray:
        """Live documents holding each token hash: ndarray (m,), int64 (0 for unknown)."""
        get = self._terms.get
        df = self._a("df")
        return np.array([df[t] if (t := get(int(h))) is not None else 0
                         for h in token_hashes], np.int64)
