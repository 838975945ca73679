"""z-statistics of hybrid recall's signals without a scan over the rows.

Hybrid recall z-normalises each signal over the namespace's ``n`` live rows per query
(:mod:`memcore.kernels.scan` takes the means and inverse stds from outside). They follow from
running sums kept under put/delete, in float64:

Dense similarity ``x_i = q . v_i``::

    S1 = sum_i v_i        (dim,)         mean  = q . S1 / n
    S2 = sum_i v_i v_i^T  (dim, dim)     E[x^2] = q^T S2 q / n,  var = E[x^2] - mean^2

Context similarity ``ctx_i = alpha * x_i + (1 - alpha) * mean_{j in W(i)} x_j = q . c_i`` with
the context vector ``c_i = alpha * v_i + (1 - alpha) * mean_{j in W(i)} v_j`` (a fixed linear
combination of rows): the same two sums over the ``c_i``. A put or delete changes the windows
of the O(radius) episode neighbours of the row; for each row whose window changes, subtract
its old ``c_i`` (and ``c_i c_i^T``) and add the new one: :func:`context_moments_update` with
``sign = -1`` over the old windows, then ``+1`` over the new ones (a new row adds its own
``c_i``; a deleted row's is subtracted). O(radius * dim^2) per write: ~0.1 ms at dim 384.

Sparse signals (BM25 of the memory's text and of its window, a boost) are 0 outside the rows a
sparse scorer returns, so ``mean = sum(s) / n`` and ``E[x^2] = sum(s^2) / n`` over the
returned scores ``s`` (:func:`sparse_moments`).

The sums are exact up to float64 rounding (~1e-16 relative per update; drift after 1e6 updates
is far below what a z-score can show). Statistics over a subset of rows (a metadata filter)
are not available this way. Kernels are pure, ``cache=True``, no ``fastmath``; NumPy oracles
of the same names live in :mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["dense_moments", "moments_update", "context_moments_update", "sparse_moments",
           "stride_context_vectors"]


@numba.njit(cache=True)
def dense_moments(query, s1, s2, n):
    """Mean and population variance of ``query . v_i`` over the rows summed in s1, s2.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    s1 : ndarray of shape (dim,), float64
        ``sum_i v_i``.
    s2 : ndarray of shape (dim, dim), float64
        ``sum_i v_i v_i^T``.
    n : int
        Rows summed.

    Returns
    -------
    mean, var : float
        ``(0.0, 0.0)`` for ``n == 0``; ``var`` clipped at 0.

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> V = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> dense_moments(np.array([1.0, 0.0], np.float32), V.sum(0), V.T @ V, 2)
    (0.5, 0.25)
    """
    if n == 0:
        return 0.0, 0.0
    dim = query.shape[0]
    m = 0.0
    e2 = 0.0
    for a in range(dim):
        qa = np.float64(query[a])
        m += qa * s1[a]
        row = 0.0
        for b in range(dim):
            row += s2[a, b] * np.float64(query[b])
        e2 += qa * row
    mean = m / n
    return mean, max(e2 / n - mean * mean, 0.0)


@numba.njit(cache=True)
def _rank_one(x, sign, s1, s2):
    dim = x.shape[0]
    for a in range(dim):
        s1[a] += sign * x[a]
        sa = sign * x[a]
        for b in range(dim):
            s2[a, b] += sa * x[b]


@numba.njit(cache=True)
def moments_update(vectors, rows, sign, s1, s2):
    """Add (``sign = 1``) or subtract (``-1``) rows ``v_i`` and ``v_i v_i^T`` to the sums.

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
    rows : ndarray of shape (m,), int64
    sign : float
        1.0 or -1.0.
    s1 : ndarray of shape (dim,), float64
    s2 : ndarray of shape (dim, dim), float64
        Updated in place.

    Returns
    -------
    None

    Examples
    --------
    >>> s1, s2 = np.zeros(2), np.zeros((2, 2))
    >>> moments_update(np.array([[1, 2]], np.float32), np.array([0]), 1.0, s1, s2)
    >>> s1.tolist(), s2.tolist()
    ([1.0, 2.0], [[1.0, 2.0], [2.0, 4.0]])
    """
    x = np.empty(vectors.shape[1], np.float64)
    for r in range(rows.shape[0]):
        v = vectors[rows[r]]
        for a in range(x.shape[0]):
            x[a] = np.float64(v[a])
        _rank_one(x, sign, s1, s2)


@numba.njit(cache=True)
def context_moments_update(vectors, rows, win_start, win_len, win_rows, alpha, sign, s1, s2):
    """Add or subtract the context vectors ``c_i`` (and ``c_i c_i^T``) of ``rows``.

    ``c_i = alpha * v_i + (1 - alpha) * (sum_{j in W(i)} v_j) / |W(i)|`` in float64 (window
    sum in window order; an empty window counts as ``[i]``), with ``W(i) =
    win_rows[win_start[i]:win_start[i] + win_len[i]]``: pass the windows as they were when the
    rows' vectors were added (``sign = -1``), or as they are now (``sign = 1``).

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
    rows : ndarray of shape (m,), int64
    win_start, win_len : ndarray of shape (n,), int64
    win_rows : ndarray, int64 or int32
    alpha : float
    sign : float
        1.0 or -1.0.
    s1 : ndarray of shape (dim,), float64
    s2 : ndarray of shape (dim, dim), float64
        Updated in place.

    Returns
    -------
    None

    Examples
    --------
    >>> V = np.array([[1, 0], [0, 1]], np.float32)
    >>> s1, s2 = np.zeros(2), np.zeros((2, 2))
    >>> context_moments_update(V, np.array([0]), np.array([0, 2]), np.array([2, 2]),
    ...                        np.array([0, 1, 0, 1]), 0.5, 1.0, s1, s2)
    >>> s1.tolist()                                  # 0.5 * v0 + 0.5 * (v0 + v1) / 2
    [0.75, 0.25]
    """
    dim = vectors.shape[1]
    x = np.empty(dim, np.float64)
    acc = np.empty(dim, np.float64)
    for r in range(rows.shape[0]):
        i = rows[r]
        a = win_start[i]
        b = (win_start[i] + win_len[i])
        for d in range(dim):
            acc[d] = 0.0
        if b > a:
            for p in range(a, b):
                v = vectors[win_rows[p]]
                for d in range(dim):
                    acc[d] += np.float64(v[d])
            cnt = np.float64(b - a)
        else:
            for d in range(dim):
                acc[d] = np.float64(vectors[i, d])
            cnt = 1.0
        for d in range(dim):
            x[d] = alpha * np.float64(vectors[i, d]) + (1.0 - alpha) * (acc[d] / cnt)
        _rank_one(x, sign, s1, s2)


@numba.njit(cache=True)
def stride_context_vectors(vectors, rows, win, win_pos, win_cnt, alpha, radius):
    """The context vectors ``c_i = alpha * v_i + (1 - alpha) * mean(v_j, j in W_r(i))`` of
    ``rows``, in float64, from fixed-stride episode windows (the hybrid index's ``win``
    columns): row ``i``'s window is ``win[i, lo:hi]`` with ``lo = pos - min(pos, r)``,
    ``hi = min(cnt, pos + r + 1)`` (``pos``/``cnt``: its place in its stored neighbourhood and
    the neighbourhood's size). The window's members are summed in float64 in stride order,
    so the result is bit for bit the NumPy oracle's
    (:func:`memcore.kernels.reference.stride_context_vectors`).

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
    rows : ndarray of shape (m,), int64
    win : ndarray of shape (n, stride), int32
        Each row's neighbourhood (row ids in episode order, the row itself at ``win_pos``).
    win_pos, win_cnt : ndarray of shape (n,), int8
    alpha : float
        Weight of the row's own vector, in [0, 1].
    radius : int
        Window radius ``r`` (0: the own vectors, ``alpha`` unused).

    Returns
    -------
    ndarray of shape (m, dim), float64

    Examples
    --------
    >>> V = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    >>> win = np.array([[0, 1, -1], [0, 1, -1]], np.int32)
    >>> pos, cnt = np.array([0, 1], np.int8), np.array([2, 2], np.int8)
    >>> stride_context_vectors(V, np.array([0]), win, pos, cnt, 0.5, 1).tolist()
    [[0.75, 0.25]]
    """
    m = rows.shape[0]
    dim = vectors.shape[1]
    out = np.empty((m, dim), np.float64)
    acc = np.empty(dim, np.float64)
    for k in range(m):
        i = rows[k]
        if radius == 0:
            for d in range(dim):
                out[k, d] = np.float64(vectors[i, d])
            continue
        p = np.int64(win_pos[i])
        lo = p - min(p, radius)
        hi = min(np.int64(win_cnt[i]), p + radius + 1)
        acc[:] = 0.0
        for j in range(lo, hi):
            v = vectors[win[i, j]]
            for d in range(dim):
                acc[d] += np.float64(v[d])
        cnt = np.float64(hi - lo)
        for d in range(dim):
            out[k, d] = alpha * np.float64(vectors[i, d]) + (1.0 - alpha) * (acc[d] / cnt)
    return out


@numba.njit(cache=True)
def sparse_moments(vals, n):
    """Mean and population variance over ``n`` rows of a signal that is ``vals`` on
    ``vals.shape[0]`` of them and 0 on the others.

    Parameters
    ----------
    vals : ndarray of shape (m,), float64
        The non-zero (returned) scores, ``m <= n``.
    n : int
        Live rows.

    Returns
    -------
    mean, var : float
        ``(0.0, 0.0)`` for ``n == 0``; ``var`` clipped at 0.

    Examples
    --------
    >>> sparse_moments(np.array([2.0]), 4)
    (0.5, 0.75)
    """
    if n == 0:
        return 0.0, 0.0
    s = 0.0
    ss = 0.0
    for j in range(vals.shape[0]):
        s += vals[j]
        ss += vals[j] * vals[j]
    mean = s / n
    return mean, max(ss / n - mean * mean, 0.0)
