"""The candidate pool of :class:`~memcore.stores.postgres.PostgresMemory`'s stateless hybrid
search (``replica=False``): the rows one query read from SQL (its candidates and their episode
neighbours, in write order) in a per-query :class:`~memcore.recall.index.HybridIndex`
(RAM, no store around it: no table, no key map, no moment sums; no quantised codes unless
a scan asks for them; each BM25 document stemmed once per process, :data:`DOCUMENT_CACHE`),
ranked by the candidates kernel (:meth:`HybridIndex.search` with ``rows=``,
:func:`memcore.kernels.candidates.hybrid_rows_topk`: the exact path's score of the given rows
only).

A pool row is one SQL row: the store's ``_COLS`` (key, text, importance, metadata,
created_at, updated_at, last_accessed_at, access_count, expires_at, ttl), then the embedding,
``seq``, whether the row may be a hit (a candidate or within the window radius of one; a
row read only for such a row's window is not), whether it is visible to the query (not
expired, matching the filter) and its BM25 document's tokens as the writer stored them
(:func:`memcore.stores.pg_terms.to_bytes`; None for a row written before they were kept).
With the index structure of the stored tokens (:data:`~memcore.stores.pg_terms.STRUCTURE`,
the default's) a row's document is read from them, not tokenised or stemmed again (the same
hashes: the writer ran the same code).

The z statistics are those of the visible rows read (:meth:`HybridIndex.moments` over them),
with any row replaced by the namespace's statistics the caller computed in SQL
(:func:`pool`'s ``stats``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from memcore.core.query import ResolvedQuery
from memcore.core.rank import Signals
from memcore.core.table import copy_metadata
from memcore.recall.diversity import diversify, pool_size
from memcore.recall.index import HybridIndex, LexicalSignals
from memcore.recall.namespace import episode_speaker
from memcore.recall.words import bm25_documents, stem_many
from memcore.stores.pg_terms import STRUCTURE, from_bytes
from memcore.types import MemoryHit, MemoryTier

__all__ = ["CandidatePool", "pool", "rank", "explain", "vector", "ROW_FIELDS"]

#: Fields of a pool row before the embedding (the store's ``_COLS``).
ROW_FIELDS = 10


@dataclass(frozen=True)
class CandidatePool:
    """One query's rows read from SQL, indexed for ranking.

    Attributes
    ----------
    index : HybridIndex
        Local row ``i`` is ``rows[i]`` (write order).
    rows : list of tuple
        The SQL rows (module notes).
    cand : ndarray of shape (c,), int64
        Local rows that may be returned (ascending).
    visible : ndarray of shape (m,), bool
        Rows not expired and matching the query's filter.
    last_accessed_at : ndarray of shape (m,), float64
        Unix s.
    importance : ndarray of shape (m,), float32
    signals : Signals
        The pool's hybrid signals: lexical signals and z statistics (``moments``).
    """

    index: HybridIndex
    rows: list
    cand: np.ndarray
    visible: np.ndarray
    last_accessed_at: np.ndarray
    importance: np.ndarray
    signals: Signals


#: Stemmed BM25 documents kept across queries (composed document -> stemmed), at most this
#: many (emptied when full): a row read by many queries is stemmed once.
DOCUMENT_CACHE = 32768
_DOCS: dict = {}


def _documents(texts: Sequence[str], speakers: Sequence, created_at: Any,
               stem: Any) -> list:
    """:func:`~memcore.recall.words.bm25_documents` of the rows, each composed document
    stemmed once per process (:data:`DOCUMENT_CACHE`; the stemmer is a pure function of the
    document)."""
    ts = bm25_documents(texts, speakers, created_at, None)
    if stem is None:
        return ts
    out = [_DOCS.get(t) for t in ts]
    miss = [i for i, d in enumerate(out) if d is None]
    if miss:
        got = stem_many([ts[i] for i in miss], stem)
        if len(_DOCS) + len(miss) > DOCUMENT_CACHE:
            _DOCS.clear()
        for i, d in zip(miss, got):
            out[i] = _DOCS[ts[i]] = d
    return out


class _PoolIndex(HybridIndex):
    """The :class:`HybridIndex` of one pool: the candidates kernel reads the vectors, never
    the int8 and 4-bit codes (read only by the scans over every row), so they are encoded on
    first use; the BM25 documents are the stored tokens (``stored``: per row, bytes or None)
    where given, else stemmed once per process (:func:`_documents`)."""

    _coded = 0
    stored: list | None = None

    def _encode(self, rows: np.ndarray, V: np.ndarray) -> None:
        self._coded = 0                          # put_many: the codes are encoded on use

    def _codes(self, n: int) -> tuple:
        if self._coded < self.n_rows:
            m = self.n_rows
            super()._encode(np.arange(m, dtype=np.int64), self._vectors()[:m])
            self._coded = m
        return super()._codes(n)

    def _lexical_texts(self, texts: Sequence[str], speakers: Sequence,
                       created_at: Sequence[float] | None = None) -> list:
        return _documents(texts, speakers, created_at, self._stem)

    def _tokens(self, texts: Sequence[str], speakers: Sequence,
                created_at: Sequence[float] | None = None) -> tuple:
        got = self.stored
        if got is None:
            return super()._tokens(texts, speakers, created_at)
        arrs = [None if g is None else from_bytes(g) for g in got]
        miss = [i for i, a in enumerate(arrs) if a is None]
        if miss:
            h, off, cnt = super()._tokens([texts[i] for i in miss], [speakers[i] for i in miss],
                                          None if created_at is None else
                                          [created_at[i] for i in miss])
            for j, i in enumerate(miss):
                arrs[i] = h[off[j]:off[j] + cnt[j]]
        counts = np.fromiter((a.shape[0] for a in arrs), np.int64, len(arrs))
        offsets = np.zeros(len(arrs) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return np.concatenate(arrs).astype(np.uint64, copy=False), offsets, counts


def vector(v: Any) -> np.ndarray:
    """A pgvector value as ndarray (dim,), float32."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, np.float32)


def pool(rows: Sequence[tuple], rq: ResolvedQuery, dim: int, preparer: Any,
         stats: dict[int, tuple] | None = None, corpus: tuple | None = None) -> CandidatePool:
    """The pool of ``rows`` (module notes) for the hybrid query ``rq``.

    Parameters
    ----------
    rows : sequence of tuple
        SQL rows in write order, at least one.
    rq : ResolvedQuery
        A hybrid query (``rq.prepared`` set).
    dim : int
    preparer : callable or None
        The store's query preparer (the index's).
    stats : dict of int -> (count, mean, M2), optional
        Rows of the z statistics (0 dense, 1 lexical, 2 lexical context) to take instead of
        the pool's own (the namespace's, from SQL).
    corpus : tuple (df, n_docs, avgdl), optional
        The namespace's BM25 statistics (df: dict of uint64 token hash -> documents), for
        the own-text BM25 of the pool's rows (:meth:`HybridIndex.own_scores`) instead of the
        pool's own.

    Returns
    -------
    CandidatePool
    """
    w = rq.hybrid
    m = len(rows)
    # the index's content is fixed by stem/dates only; no moment sums are kept (the
    # statistics are computed over the visible rows below)
    idx = _PoolIndex(dim, replace(w, normalize=False), preparer)
    F = ROW_FIELDS
    if w.structure() == STRUCTURE:
        idx.stored = [r[F + 4] for r in rows]
    vecs = np.stack([vector(r[F]) for r in rows]).astype(np.float32, copy=False)
    created = np.fromiter((r[4] for r in rows), np.float64, m)
    idx.put_many(np.arange(m, dtype=np.int64), [r[1] for r in rows], vecs,
                 [episode_speaker(r[3]) for r in rows], created if w.dates else None)
    visible = np.fromiter((bool(r[F + 3]) for r in rows), np.bool_, m)
    cand = np.flatnonzero(np.fromiter((bool(r[F + 2]) for r in rows), np.bool_, m))
    lex = idx.lexical_signals(rq.prepared, w)
    if corpus is not None and w.lexical:
        own = idx.own_scores(np.arange(m, dtype=np.int64), rq.prepared, *corpus, weights=w)
        lex = LexicalSignals(own[0], own[1], lex.ctx_rows, lex.ctx_vals)
    mom = None
    if w.normalize:
        mom = idx.moments(rq.prepared, rq.vector, weights=w, alive=visible, lexical=lex,
                          dense=0 not in (stats or {}))
        for i, got in (stats or {}).items():
            mom[i] = got
    sig = Signals(idx, visible, lex, mom, idx.n_rows)
    return CandidatePool(idx, list(rows), cand.astype(np.int64),
                         visible, np.fromiter((r[6] for r in rows), np.float64, m),
                         np.fromiter((r[2] for r in rows), np.float32, m), sig)


def rank(p: CandidatePool, rq: ResolvedQuery, stats: np.ndarray | None,
         tier: MemoryTier) -> list[MemoryHit]:
    """The best ``rq.top_k`` candidates of the pool as hits (scores: the fused score;
    ``stats``: the z statistics to use, e.g. pooled over tiers)."""
    w = rq.hybrid
    live = int(np.count_nonzero(p.visible[p.cand]))
    k = min(rq.top_k, live)
    if k == 0:
        return []
    div = w.diversity
    res = p.index.search(rq.prepared, rq.vector, top_k=pool_size(k, live) if div > 0.0 else k,
                         weights=w, decay=rq.weights, now=rq.now,
                         last_accessed_at=p.last_accessed_at, importance=p.importance,
                         alive=p.visible, threshold=rq.threshold, lexical=p.signals.lexical,
                         stats=stats, rows=p.cand)
    c = res.count
    ids, scores, sims = res.ids[:c], res.scores[:c], res.sims[:c]
    if div > 0.0:
        ws, wl, wr = p.index.windows(w.diversity_window)
        ids, scores, sims = diversify(ids, scores, sims, ws, wl, wr, div, k)
    hl = rq.weights.half_life
    out = []
    for i, s, sim in zip(ids.tolist(), scores.tolist(), sims.tolist()):
        r = p.rows[i]
        t = float(r[6])
        out.append(MemoryHit(key=r[0], text=r[1], score=s, similarity=sim,
                             recency=0.5 ** (max(rq.now - t, 0.0) / hl), importance=r[2],
                             tier=tier, metadata=copy_metadata(r[3]), namespace=rq.namespace,
                             created_at=float(r[4]), last_accessed_at=t))
    return out


def explain(p: CandidatePool, rq: ResolvedQuery, keys: Sequence[str],
            stats: np.ndarray | None) -> list[dict]:
    """:meth:`HybridIndex.explain` of the pool rows holding ``keys`` (each must be there)."""
    at = {r[0]: i for i, r in enumerate(p.rows)}
    return p.index.explain([at[k] for k in keys], rq.prepared, rq.vector, weights=rq.hybrid,
                           decay=rq.weights, now=rq.now,
                           last_accessed_at=p.last_accessed_at, importance=p.importance,
                           alive=p.visible, lexical=p.signals.lexical, stats=stats)
