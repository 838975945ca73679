"""NumPy oracles for memcore's kernels.

Each function has the same name, signature, dtypes and results as the numba kernel it checks;
property tests compare the two. Clarity beats speed here.

Ranking contract shared by every top-k kernel: a row is a candidate when it is alive and
``sim >= threshold``; its score is computed in float64 and rounded to float32; candidates are
ordered by float32 score descending, ties by lower row id; unused output slots hold
id -1, score -inf, sim -inf.
"""

from __future__ import annotations

import numpy as np


def decay_scores(sims, last_accessed_at, importance, now, half_life, w_sim, w_rec, w_imp, out):
    """Fused score of each row: ``w_sim*sim + w_rec*2**(-max(now - t, 0)/half_life) + w_imp*imp``.

    sims (m,) float32, last_accessed_at (m,) float64 Unix seconds, importance (m,) float32,
    out (m,) float32 (written and returned).
    """
    age = np.maximum(np.float64(now) - last_accessed_at.astype(np.float64), 0.0)
    rec = np.exp2(-age / np.float64(half_life))
    s = w_sim * sims.astype(np.float64) + w_rec * rec + w_imp * importance.astype(np.float64)
    out[:] = s.astype(np.float32)
    return out


def _select(ids, sims, scores32, out_ids, out_scores, out_sims):
    k = out_ids.shape[0]
    order = np.lexsort((ids, -scores32.astype(np.float64)))[:k]
    m = order.shape[0]
    out_ids[:] = -1
    out_scores[:] = -np.inf
    out_sims[:] = -np.inf
    out_ids[:m] = ids[order]
    out_scores[:m] = scores32[order]
    out_sims[:m] = sims[order]
    return m


def fused_topk(query, vectors, last_accessed_at, importance, alive, now, half_life,
               w_sim, w_rec, w_imp, threshold, out_ids, out_scores, out_sims):
    """Exact fused top-k over all rows.

    query (dim,) float32, vectors (n, dim) float32, last_accessed_at (n,) float64,
    importance (n,) float32, alive (n,) bool; out_ids (k,) int64, out_scores (k,) float32,
    out_sims (k,) float32 are written. Returns the number of filled slots.
    """
    sims = (vectors.astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
    keep = np.flatnonzero(alive & (sims >= np.float32(threshold)))
    scores = np.empty(keep.shape[0], np.float32)
    decay_scores(sims[keep], last_accessed_at[keep], importance[keep], now, half_life,
                 w_sim, w_rec, w_imp, scores)
    return _select(keep.astype(np.int64), sims[keep], scores, out_ids, out_scores, out_sims)


def fused_topk_batch(queries, vectors, last_accessed_at, importance, alive, now, half_life,
                     w_sim, w_rec, w_imp, threshold, out_ids, out_scores, out_sims):
    """:func:`fused_topk` per row of queries (n_queries, dim); outputs (n_queries, k).

    Returns counts (n_queries,) int64.
    """
    counts = np.zeros(queries.shape[0], np.int64)
    for q in range(queries.shape[0]):
        counts[q] = fused_topk(queries[q], vectors, last_accessed_at, importance, alive, now,
                               half_life, w_sim, w_rec, w_imp, threshold,
                               out_ids[q], out_scores[q], out_sims[q])
    return counts


def rerank(cand_ids, cand_sims, last_accessed_at, importance, alive, now, half_life,
           w_sim, w_rec, w_imp, threshold, out_ids, out_scores, out_sims):
    """Fused top-k of candidates (e.g. from FAISS) given their row ids and similarities.

    cand_ids (m,) int64 (-1 entries ignored), cand_sims (m,) float32; the column arrays are
    indexed by row id. Returns the number of filled slots.
    """
    valid = cand_ids >= 0
    ids = cand_ids[valid]
    sims = cand_sims[valid].astype(np.float32)
    ok = alive[ids] & (sims >= np.float32(threshold))
    ids, sims = ids[ok], sims[ok]
    scores = np.empty(ids.shape[0], np.float32)
    decay_scores(sims, last_accessed_at[ids], importance[ids], now, half_life,
                 w_sim, w_rec, w_imp, scores)
    return _select(ids.astype(np.int64), sims, scores, out_ids, out_scores, out_sims)
