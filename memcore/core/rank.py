"""Ranking a table for a resolved query: the only place a ranking kernel is called.

Four paths, one contract (:mod:`memcore.kernels.reference`): the similarity preset from the
hybrid index's int8 codes with exact rerank (from :data:`SCAN_MIN_ROWS` rows) or the fused
top-k kernel over the vectors (below), the rerank kernel over a lexical scorer's similarities
(a store without embedder), and the hybrid index's scan (:mod:`memcore.recall.index`). For hybrid
recall the per-query signals -- the candidate mask and the BM25 of the text and of its episode
window -- are computed once per table (:func:`signals`) and shared by the z statistics
(:attr:`Signals.moments`) and the ranking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from memcore.core.table import Table
from memcore.kernels.topk import fused_topk, rerank
from memcore.core.query import ResolvedQuery
from memcore.recall.diversity import diversify, pool_size
from memcore.recall.index import HybridIndex, LexicalSignals
from memcore.recall.weights import HybridWeights

__all__ = ["Signals", "signals", "rank", "explain", "SCAN_MIN_ROWS"]

#: From this many rows the similarity preset is ranked from the hybrid index's int8 codes
#: (:meth:`HybridIndex.search_similarity`: exact float64 similarities for the candidates);
#: below, by the fused float32 kernel over the vectors (faster at that size). Both compute the
#: same score; they can differ only in the float32 rounding of near-ties.
SCAN_MIN_ROWS = 2048


@dataclass(frozen=True)
class Signals:
    """A hybrid query's per-table signals.

    Attributes
    ----------
    index : HybridIndex
    alive : ndarray of shape (n_rows,), bool, or None
        Live rows matching the filter; None without a filter (all live rows).
    lexical : LexicalSignals or None
        Sparse BM25 of the text and of the episode window (:meth:`HybridIndex.lexical_signals`);
        None: left to the search (which then prunes common terms).
    moments : ndarray of shape (3, 3), float64, or None
        :meth:`HybridIndex.moments` when the weights z-normalise (for pooling tiers).
    n_rows : int
        The index's rows when computed (a write since makes them stale).
    """

    index: HybridIndex
    alive: np.ndarray | None
    lexical: LexicalSignals | None
    moments: np.ndarray | None
    n_rows: int


def signals(table: Table, rq: ResolvedQuery, dim: int, preparer: Any, *,
            moments: bool = True, threads: int = 1, lexical: bool = True) -> Signals:
    """The hybrid signals of ``rq`` over ``table`` (builds its hybrid index on first use);
    with ``moments`` also their z statistics (when the weights z-normalise: for pooling);
    ``threads``: numba threads for the BM25 of common terms; without ``lexical`` (and
    ``moments``) the BM25 signals are left to the search (None: it prunes common terms)."""
    idx = table.recall_index(rq.hybrid, dim, preparer)
    n = idx.n_rows
    alive = table.visible(rq.filter, rq.now)
    alive = None if alive is None else alive[:n]
    if not lexical and not moments:
        return Signals(idx, alive, None, None, n)
    lex = idx.lexical_signals(rq.prepared, rq.hybrid, threads)
    mom = None
    if moments and rq.hybrid.normalize:
        mom = idx.moments(rq.prepared, rq.vector, weights=rq.hybrid, alive=alive, lexical=lex)
    return Signals(idx, alive, lex, mom, n)


def rank(table: Table, rq: ResolvedQuery, *, dim: int | None = None, preparer: Any = None,
         scorer: Callable[[str, list], np.ndarray] | None = None,
         sig: Signals | None = None, threads: int = 1, approximate: Any = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best ``rq.top_k`` live rows of ``table``.

    Parameters
    ----------
    table : Table
    rq : ResolvedQuery
    dim, preparer
        The store's, for a hybrid index built on first use.
    scorer : callable, optional
        ``scorer(text, texts) -> (n,) float32``: lexical similarity when ``rq.vector`` is None.
    sig : Signals, optional
        Precomputed :func:`signals` (hybrid recall).
    threads : int, default 1
        numba threads for the hybrid scan (the store's ``threads``, validated there).
    approximate : tuple of (AnnIndex, ApproximateSearch), optional
        The namespace's opt-in candidate index (:mod:`memcore.recall.approx`): its candidates
        are scored exactly instead of scanning every row.

    Returns
    -------
    rows : ndarray of shape (m,), int64
    scores, similarities : ndarray of shape (m,), float32
        Best first; m <= top_k.
    """
    k = min(rq.top_k, table.live)
    c = table.columns
    ann, config = approximate if rq.vector is not None and approximate else (None, None)
    if ann is not None and rq.prepared is None:
        n = table.rows
        w = rq.weights
        rows, scores, sims, _ = ann.topk(
            config, rq.vector, c.vectors[:n], top_k=k, alive=table.mask(rq.filter)[:n],
            last_accessed_at=c.last_accessed_at[:n], importance=c.importance[:n],
            now=rq.now, half_life=w.half_life, w_sim=w.w_similarity, w_rec=w.w_recency,
            w_imp=w.w_importance, threshold=rq.threshold)
        return rows, scores, sims
    if rq.prepared is not None:
        if sig is None or sig.n_rows != sig.index.n_rows:
            sig = signals(table, rq, dim, preparer, moments=False, threads=threads,
                          lexical=ann is not None)
        n = sig.index.n_rows
        rows = None
        if ann is not None:
            rows = ann.hybrid_rows(config, rq.vector, sig.lexical)
            rows = rows[rows < n]
        w = rq.weights
        div = rq.hybrid.diversity
        res = sig.index.search(rq.prepared, rq.vector,
                               top_k=pool_size(k, table.live) if div > 0.0 else k,
                               weights=rq.hybrid, decay=w,
                               now=rq.now, last_accessed_at=c.last_accessed_at[:n],
                               importance=c.importance[:n], alive=sig.alive,
                               threshold=rq.threshold, lexical=sig.lexical,
                               stats=sig.moments, threads=threads, rows=rows)
        m = res.count
        if div > 0.0:   # episode diversity over the fused top candidates
            ws, wl, wr = sig.index.windows(rq.hybrid.diversity_window)
            return diversify(res.ids[:m], res.scores[:m], res.sims[:m], ws, wl, wr, div, k)
        return res.ids[:m], res.scores[:m], res.sims[:m]
    n = table.rows
    w = rq.weights
    alive = table.visible(rq.filter, rq.now)
    alive = table.columns.alive[:n] if alive is None else alive
    if rq.vector is not None and n >= SCAN_MIN_ROWS:
        # the similarity preset from the codes (4-bit: an eighth of the bytes), exact rerank
        idx = table.recall_index(HybridWeights.hybrid(), dim, preparer)
        ni = idx.n_rows
        res = idx.search_similarity(rq.vector, top_k=k, decay=w, now=rq.now,
                                    last_accessed_at=c.last_accessed_at[:ni],
                                    importance=c.importance[:ni], alive=alive[:ni],
                                    threshold=rq.threshold, threads=threads)
        m = res.count
        return res.ids[:m], res.scores[:m], res.sims[:m]
    ids = np.empty(k, np.int64)
    scores = np.empty(k, np.float32)
    sims = np.empty(k, np.float32)
    decay = (c.last_accessed_at[:n], c.importance[:n], float(rq.now), float(w.half_life),
             float(w.w_recency), float(w.w_importance))
    args = (float(w.w_similarity), decay, alive, float(rq.threshold), (ids, scores, sims))
    if rq.vector is not None:
        m = fused_topk(rq.vector, c.vectors[:n], *args)
    else:
        cand = np.flatnonzero(alive).astype(np.int64)
        m = rerank(cand, scorer(rq.text, [table.texts[r] for r in cand]), *args)
    return ids[:m], scores[:m], sims[:m]


def explain(table: Table, rq: ResolvedQuery, rows: list[int], *, dim: int | None = None,
            preparer: Any = None, stats: np.ndarray | None = None) -> list[dict]:
    """The terms of the hybrid fused score of ranked ``rows`` of ``table`` for ``rq``
    (:meth:`HybridIndex.explain`), recomputed for these rows only; ``stats`` the z statistics
    when pooled over several tables (by default the table's own, as :func:`rank` uses)."""
    idx = table.recall_index(rq.hybrid, dim, preparer)
    n = idx.n_rows
    alive = table.visible(rq.filter, rq.now)
    alive = None if alive is None else alive[:n]
    c = table.columns
    return idx.explain(rows, rq.prepared, rq.vector, weights=rq.hybrid, decay=rq.weights,
                       now=rq.now, last_accessed_at=c.last_accessed_at[:n],
                       importance=c.importance[:n], alive=alive, stats=stats)
