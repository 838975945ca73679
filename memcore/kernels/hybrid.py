"""Hybrid recall in one exact pass: dense + BM25 signals, z-normalised per query, fused with decay.

For every live row ``i`` (``alive[i]``) with ``sim_i = query . vectors[i]`` (float32 dot
product, the fastmath leaf of :mod:`memcore.kernels.topk`, recomputed in float64 within 1e-5 of
the threshold by :func:`~memcore.kernels.topk.at_threshold`)::

    z(x)_i  = (x_i - mean(x)) / std(x)     over live rows (population std); 0 when std == 0
    dense_i = z(sim)_i            if normalize else sim_i
    score_i = w_dense * dense_i + w_rec * 2 ** (-age_i / half_life) + w_imp * importance_i
              + sum_l w_lex[l] * z(lex[l])_i + w_boost * boost_i

in float64 (the first three terms by :func:`memcore.kernels.scoring.fused_score`, the others
added in that order, each only when its weight is non-zero), rounded once to float32. Without
normalisation the lexical signals are used raw too. Candidates are live rows with
``sim >= float32(threshold)``; exact top-k by score descending, ties by lower row, padding id
-1 / score -inf / sim -inf (the contract of :mod:`memcore.kernels.topk`). With ``normalize``
False and every lexical and boost weight 0 the result is bit-identical to
:func:`memcore.kernels.topk.fused_topk_serial`.

Statistics are two-pass (mean, then squared deviations) in float64. ``sims`` is a scratch
array the caller preallocates. State travels as tuples of arrays, as in
:mod:`memcore.kernels.scan`: *lexical* ``(lex, w_lex, boost, w_boost)``, *decay*
``(last_accessed_at, importance, now, half_life, w_rec, w_imp)`` and *out*
``(out_ids, out_scores, out_sims)``. No fastmath outside the dot product (NaN/-inf padding). The
NumPy oracle is :func:`memcore.kernels.reference.hybrid_topk`.
"""

from __future__ import annotations

import numba
import numpy as np

from .scoring import fused_score
from .topk import _dot, at_threshold, heap_push, heap_sort

__all__ = ["hybrid_topk", "masked_stats"]


@numba.njit(cache=True)
def masked_stats(x, alive):
    """Mean and population std of ``x`` over rows with ``alive``, two-pass in float64.

    Parameters
    ----------
    x : ndarray of shape (n,), float32 or float64
    alive : ndarray of shape (n,), bool

    Returns
    -------
    mean, std : float
        (0.0, 0.0) when no row is alive.

    Examples
    --------
    >>> masked_stats(np.array([1.0, 3.0, 9.0]), np.array([True, True, False]))
    (2.0, 1.0)
    """
    n = 0
    s = 0.0
    for i in range(x.shape[0]):
        if alive[i]:
            s += np.float64(x[i])
            n += 1
    if n == 0:
        return 0.0, 0.0
    mean = s / n
    ss = 0.0
    for i in range(x.shape[0]):
        if alive[i]:
            d = np.float64(x[i]) - mean
            ss += d * d
    return mean, np.sqrt(ss / n)


@numba.njit(cache=True)
def hybrid_topk(query, vectors, w_dense, lexical, decay, alive, normalize, threshold, sims, out):
    """Exact hybrid top-k of one query over all rows (see the module notes for the score).

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    vectors : ndarray of shape (n, dim), float32
        The dense matrix scanned (e.g. memcore's combined turn + context embeddings).
    w_dense : float
    lexical : tuple (lex, w_lex, boost, w_boost)
        ``lex``: (n_lex, n) float64, lexical signals (e.g. BM25 of the memory and of its
        context window); ``w_lex``: (n_lex,) float64; ``boost``: (n,) float32, per-row boost
        (e.g. 1.0 when the query names the memory's speaker); ``w_boost``: float.
    decay : tuple (last_accessed_at, importance, now, half_life, w_rec, w_imp)
        ``last_accessed_at``: (n,) float64 Unix seconds; ``importance``: (n,) float32;
        ``now``, ``half_life``, ``w_rec``, ``w_imp``: floats, the decay terms as in
        :func:`memcore.kernels.scoring.fused_score`.
    alive : ndarray of shape (n,), bool
    normalize : bool
        z-normalise the signals (True) or use them raw.
    threshold : float
        Minimum ``sim`` of a candidate.
    sims : ndarray of shape (n,), float32
        Scratch; on return holds ``sim`` of the live rows.
    out : tuple (out_ids, out_scores, out_sims)
        ``out_ids``: (k,) int64; ``out_scores``, ``out_sims``: (k,) float32. Written in place,
        best first, padded.

    Returns
    -------
    int
        Filled slots.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> V = np.eye(3, dtype=np.float32); q = V[1].copy()
    >>> lex = np.array([[0.0, 0.0, 2.0]])               # one lexical signal
    >>> ids, scores, sims = np.empty(2, np.int64), np.empty(2, np.float32), np.empty(2, np.float32)
    >>> lexical = (lex, np.array([0.5]), np.zeros(3, np.float32), 0.0)
    >>> decay = (np.zeros(3), np.zeros(3, np.float32), 0.0, 3600.0, 0.0, 0.0)
    >>> hybrid_topk(q, V, 1.0, lexical, decay, np.ones(3, bool), True, -1.0,
    ...             np.empty(3, np.float32), (ids, scores, sims))
    2
    >>> ids.tolist(), scores.astype(float).round(3).tolist()   # z(sim) + 0.5 * z(lex)
    ([1, 2], [1.061, 0.0])
    """
    lex, w_lex, boost, w_boost = lexical
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    out_ids, out_scores, out_sims = out
    n = vectors.shape[0]
    thr = np.float32(threshold)
    for i in range(n):
        if alive[i]:
            sims[i] = at_threshold(query, vectors[i], _dot(query, vectors[i]), thr)
    d_mean, d_std = 0.0, 1.0
    if normalize:
        d_mean, d_std = masked_stats(sims, alive)
    n_lex = lex.shape[0]
    l_mean = np.zeros(n_lex)
    l_inv = np.zeros(n_lex)
    for l in range(n_lex):
        if w_lex[l] != 0.0:
            if normalize:
                m, s = masked_stats(lex[l], alive)
                l_mean[l] = m
                l_inv[l] = 1.0 / s if s > 0.0 else 0.0
            else:
                l_inv[l] = 1.0
    size = 0
    for i in range(n):
        if not alive[i]:
            continue
        sim = sims[i]
        if not sim >= thr:
            continue
        if normalize:
            dense = (np.float64(sim) - d_mean) / d_std if d_std > 0.0 else 0.0
            score = fused_score(dense, last_accessed_at[i], importance[i], now, half_life,
                                w_dense, w_rec, w_imp)
        else:
            score = fused_score(sim, last_accessed_at[i], importance[i], now, half_life,
                                w_dense, w_rec, w_imp)
        for l in range(n_lex):
            if w_lex[l] != 0.0:
                score += w_lex[l] * ((lex[l, i] - l_mean[l]) * l_inv[l])
        if w_boost != 0.0:
            score += w_boost * np.float64(boost[i])
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(score),
                         sim)
    return heap_sort(out_ids, out_scores, out_sims, size)
