"""Hybrid top-k over given candidate rows: the exact path's score, only for those rows.

The approximate path (``memcore.recall.approx``) gathers candidates from a vector index and
the sparse signals; this kernel scores them exactly as :func:`memcore.kernels.scan.hybrid_exact_topk`
would (same float64 similarities, same context stencil over each candidate's episode window,
same z-scores, decay and sparse terms, same float32 rounding and tie order), computing the
similarities of the candidates and of their window rows only. Its oracle is the exact path
with the candidate mask ``alive & isin(rows)``
(:func:`memcore.kernels.reference.hybrid_rows_topk`).
"""

from __future__ import annotations

import numba
import numpy as np

from .scan import _score, exact_sim
from .topk import heap_push, heap_sort

__all__ = ["hybrid_rows_topk"]


@numba.njit(cache=True)
def _sim_of(need, sims, row):
    """The similarity of ``row`` from the sorted ``need`` rows (``row`` must be there)."""
    return sims[np.searchsorted(need, row)]


@numba.njit(cache=True)
def hybrid_rows_topk(rows, query, vectors, windows, alpha, dense, sparse, decay, alive, threshold,
                     out):
    """The exact hybrid top-k of the candidate ``rows`` (module notes).

    Parameters
    ----------
    rows : ndarray of shape (m,), int64
        Distinct candidate rows, each ``< n``.
    query, vectors, windows, alpha, dense, sparse, decay, alive, threshold, out
        As in :func:`memcore.kernels.scan.hybrid_exact_topk`.

    Returns
    -------
    int
        Filled slots.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> V = np.array([[1, 0], [0.6, 0.8], [0, 1]], np.float32)
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 2]), np.array([0, 1, 0, 1, 1, 2]))
    >>> out = (np.empty(2, np.int64), np.empty(2, np.float32), np.empty(2, np.float32))
    >>> e, z = np.zeros(0, np.int64), np.zeros(0)
    >>> sparse = (np.zeros(1, np.int64), e, z, z, z, z)
    >>> decay = (np.zeros(3), np.zeros(3, np.float32), 0.0, 1.0, 0.0, 0.0)
    >>> hybrid_rows_topk(np.array([0, 2]), np.array([0, 1], np.float32), V, win, 0.5,
    ...                  np.array([0.0, 0, 1, 1.0, 0, 1]), sparse, decay, np.ones(3, bool),
    ...                  -np.inf, out), out[0].tolist(), out[1].tolist()
    (2, [2, 0], [0.949999988079071, 0.20000000298023224])
    """
    win_start, win_len, win_rows = windows
    out_ids, out_scores, out_sims = out
    m = rows.shape[0]
    ctx_on = dense[3] != 0.0
    total = m
    if ctx_on:
        for j in range(m):
            total += win_len[rows[j]]
    need = np.empty(total, np.int64)
    p = 0
    for j in range(m):
        r = rows[j]
        need[p] = r
        p += 1
        if ctx_on:
            for q in range(win_start[r], win_start[r] + win_len[r]):
                need[p] = win_rows[q]
                p += 1
    need = np.unique(need)
    sims = np.empty(need.shape[0], np.float64)
    for j in range(need.shape[0]):
        sims[j] = exact_sim(query, vectors[need[j]])
    thr = np.float64(threshold)
    size = 0
    for j in range(m):
        i = rows[j]
        s_i = _sim_of(need, sims, i)
        if not alive[i] or not s_i >= thr:
            continue
        ctx = 0.0
        if ctx_on:
            a = win_start[i]
            b = win_start[i] + win_len[i]
            if b <= a:
                ctx = alpha * s_i + (1.0 - alpha) * s_i
            else:
                acc = 0.0
                for q in range(a, b):
                    acc += _sim_of(need, sims, np.int64(win_rows[q]))
                ctx = alpha * s_i + (1.0 - alpha) * (acc / (b - a))
        s = _score(i, s_i, ctx, dense, sparse, decay)
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(s),
                         np.float32(s_i))
    return heap_sort(out_ids, out_scores, out_sims, size)
