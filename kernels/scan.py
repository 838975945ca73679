"""Hybrid top-k from int8 codes: a compressed first pass, a context stencil, bounds, exact rerank.

The score (the *exact path*, :func:`hybrid_exact_topk`; NumPy oracle
:func:`memcore.kernels.reference.hybrid_exact_topk`) of row ``i`` for a query ``q``::

    sim_i = exact_sim(q, vectors[i])                       # float64 dot, fixed summation order
    ctx_i = alpha * sim_i + (1 - alpha) * mean(sim_j for j in W(i))    # the context stencil
    score_i = w_own * ((sim_i - mu_own) * inv_own)
            + w_ctx * ((ctx_i - mu_ctx) * inv_ctx)
            + w_rec * 2 ** (-max(now - last_accessed_at[i], 0) / half_life)
            + w_imp * importance[i]
            + sum over sparse signals l of w_l * ((x_l[i] - mu_l) * inv_l)

in float64, added left to right, a term skipped when its weight is 0, rounded once to float32.
``W(i)`` is row ``i``'s episode window (CSR ``win_ptr``/``win_rows``, the row itself included;
an empty window counts as ``[i]``), so ``ctx_i`` equals ``q . ctx_vector_i`` with
``ctx_vector_i = alpha * v_i + (1 - alpha) * mean(v_j, j in W(i))``: no context matrix is
stored or scanned. ``mu``/``inv`` z-normalise a signal (``inv = 1 / std``, 0 when std is 0;
``mu = 0, inv = 1`` for raw) with statistics given from outside (:mod:`memcore.kernels.moments`
computes them without a scan). Sparse signals (BM25 of the memory's own text and of its
window, a speaker boost) list only their non-zero rows: ``x_l[i] = 0`` elsewhere.
Candidates are rows with ``alive[i]`` and ``sim_i >= threshold`` (the row's *own* similarity,
compared in float64); ranking by float32 score descending, ties by lower row; padding id -1,
score -inf, sim -inf; reported ``sim`` is ``float32(sim_i)``.

:func:`hybrid_scan_topk_serial` / :func:`hybrid_scan_topk_parallel` return *exactly* the
exact path's result (ids, scores and sims, ties and the threshold boundary included) while
reading the rows' int8 codes (:mod:`memcore.kernels.codes`) instead of their float32 vectors:

1. Integer dot products ``cq . c_i`` of every row (int8, exact); ``a_i = scale_i * qscale * I_i``
   is within ``e_i`` (:func:`~memcore.kernels.codes.code_bound`) of ``sim_i``.
2. Per row, bounds through the stencil (``alpha * e_i + (1 - alpha) * mean e_j``) and the
   z-normalisation (weights and ``inv`` are non-negative, so the score is monotone in each
   similarity): ``lower_i <= score_i <= upper_i``, padded by a float slack that covers float64
   rounding and the final rounding to float32. Rows whose similarity surely passes the
   threshold offer ``lower_i`` to a bounded heap of the k best lower bounds: its root
   ``tau`` is at most the k-th exact score. Recency (``exp2``) is evaluated only for rows whose
   bound with full recency reaches their block's running ``tau``.
3. Every row with ``upper_i >= tau`` is a candidate; candidates are reranked exactly, in
   descending ``upper`` order, until the next upper bound is below the k-th exact score.

``stats`` reports the work: ``[rows reranked exactly, exact similarities computed]``.
The parallel kernel splits rows in the same blocks as the serial one (prange), so both return
identical results and statistics; the caller sets the threads (``numba.set_num_threads`` in
``try/finally``). Kernels are pure, ``cache=True``; no ``fastmath`` (integer dot products
vectorise without it).
"""

from __future__ import annotations

import numba
import numpy as np

from .codes import _up32, code_bound, code_dot, quantize_query
from .scoring import recency
from .topk import _n_blocks, heap_push, heap_sort

__all__ = ["exact_sim", "hybrid_exact_topk", "hybrid_scan_topk", "hybrid_scan_topk_serial",
           "hybrid_scan_topk_parallel"]

_U = 2.0 ** -53


@numba.njit(cache=True)
def exact_sim(a, b):
    """Inner product of two float32 vectors in float64, in a fixed summation order.

    Eight partial sums ``p_k = sum_m a[8m+k] * b[8m+k]`` (in m order; the ``dim % 8`` tail is
    added to ``p_0``), combined as ``((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))``. No
    fastmath, so the result is the same wherever it is inlined (and equals the NumPy oracle
    :func:`memcore.kernels.reference.exact_sims` bit for bit), while the eight independent
    chains still run about 8x faster than one.

    Examples
    --------
    >>> exact_sim(np.array([0.5, 0.25], np.float32), np.array([2.0, 4.0], np.float32))
    2.0
    """
    d = a.shape[0]
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0.0
    m = d - d % 8
    for j in range(0, m, 8):
        p0 += np.float64(a[j]) * np.float64(b[j])
        p1 += np.float64(a[j + 1]) * np.float64(b[j + 1])
        p2 += np.float64(a[j + 2]) * np.float64(b[j + 2])
        p3 += np.float64(a[j + 3]) * np.float64(b[j + 3])
        p4 += np.float64(a[j + 4]) * np.float64(b[j + 4])
        p5 += np.float64(a[j + 5]) * np.float64(b[j + 5])
        p6 += np.float64(a[j + 6]) * np.float64(b[j + 6])
        p7 += np.float64(a[j + 7]) * np.float64(b[j + 7])
    for j in range(m, d):
        p0 += np.float64(a[j]) * np.float64(b[j])
    return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))


@numba.njit(cache=True)
def _sparse_value(sp_ptr, sp_rows, sp_vals, l, i):
    """``x_l[i]``: binary search of row i in signal l's sorted rows; 0.0 when absent."""
    lo = sp_ptr[l]
    hi = sp_ptr[l + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if sp_rows[mid] < i:
            lo = mid + 1
        else:
            hi = mid
    if lo < sp_ptr[l + 1] and sp_rows[lo] == i:
        return sp_vals[lo]
    return 0.0


@numba.njit(cache=True)
def _score(i, sim, ctx, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
           last_accessed_at, importance, now, half_life, w_rec, w_imp):
    """The exact float64 score of row i (module notes), before rounding to float32."""
    s = 0.0
    if dense[0] != 0.0:
        s += dense[0] * ((sim - dense[1]) * dense[2])
    if dense[3] != 0.0:
        s += dense[3] * ((ctx - dense[4]) * dense[5])
    if w_rec != 0.0:
        s += w_rec * recency(now - last_accessed_at[i], half_life)
    if w_imp != 0.0:
        s += w_imp * np.float64(importance[i])
    for l in range(sp_w.shape[0]):
        if sp_w[l] != 0.0:
            s += sp_w[l] * ((_sparse_value(sp_ptr, sp_rows, sp_vals, l, i) - sp_mu[l]) * sp_inv[l])
    return s


@numba.njit(cache=True)
def _ctx(i, sims, win_ptr, win_rows, alpha):
    """``alpha * sims[i] + (1 - alpha) * mean(sims[W(i)])`` (sum in window order)."""
    a = win_ptr[i]
    b = win_ptr[i + 1]
    if b <= a:
        return alpha * sims[i] + (1.0 - alpha) * sims[i]
    acc = 0.0
    for p in range(a, b):
        acc += sims[win_rows[p]]
    return alpha * sims[i] + (1.0 - alpha) * (acc / (b - a))


@numba.njit(cache=True)
def hybrid_exact_topk(query, vectors, win_ptr, win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals,
                      sp_w, sp_mu, sp_inv, last_accessed_at, importance, alive, now, half_life,
                      w_rec, w_imp, threshold, out_ids, out_scores, out_sims):
    """The exact path: every row's exact similarity, the stencil, the score, a bounded heap.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    vectors : ndarray of shape (n, dim), float32
    win_ptr : ndarray of shape (n + 1,), int64
    win_rows : ndarray of shape (win_ptr[n],), int64 or int32
        Row ``i``'s episode window is ``win_rows[win_ptr[i]:win_ptr[i + 1]]`` (itself
        included).
    alpha : float
        Share of the row's own similarity in its context similarity, in [0, 1].
    dense : ndarray of shape (6,), float64
        ``w_own, mu_own, inv_own, w_ctx, mu_ctx, inv_ctx``; weights and ``inv`` >= 0.
    sp_ptr : ndarray of shape (n_sparse + 1,), int64
    sp_rows : ndarray of shape (sp_ptr[-1],), int64
        Signal ``l``'s rows, ``sp_rows[sp_ptr[l]:sp_ptr[l + 1]]``, strictly ascending.
    sp_vals : ndarray of shape (sp_ptr[-1],), float64
        Their values.
    sp_w, sp_mu, sp_inv : ndarray of shape (n_sparse,), float64
        Weight (>= 0), mean and inverse std (>= 0) of each sparse signal.
    last_accessed_at : ndarray of shape (n,), float64
        Unix seconds.
    importance : ndarray of shape (n,), float32
    alive : ndarray of shape (n,), bool
        Candidate rows (window rows count whether alive or not).
    now, half_life, w_rec, w_imp : float
        Decay terms (seconds; weights >= 0).
    threshold : float
        Minimum own similarity (float64 comparison); ``-inf`` for none.
    out_ids : ndarray of shape (k,), int64
    out_scores, out_sims : ndarray of shape (k,), float32
        Written: best first, padded with -1 / -inf / -inf.

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
    >>> ptr, rows = np.array([0, 2, 4, 6]), np.array([0, 1, 0, 1, 1, 2])   # W(2) = [1, 2]
    >>> ids = np.empty(2, np.int64); sc = np.empty(2, np.float32); si = np.empty(2, np.float32)
    >>> e, z = np.zeros(0, np.int64), np.zeros(0)
    >>> hybrid_exact_topk(np.array([0, 1], np.float32), V, ptr, rows, 0.5,
    ...                   np.array([0.0, 0, 1, 1.0, 0, 1]), np.zeros(1, np.int64), e, z, z, z,
    ...                   z, np.zeros(3), np.zeros(3, np.float32), np.ones(3, bool), 0.0, 1.0,
    ...                   0.0, 0.0, -np.inf, ids, sc, si), ids.tolist(), sc.tolist()
    (2, [2, 1], [0.949999988079071, 0.6000000238418579])
    """
    n = vectors.shape[0]
    sims = np.empty(n, np.float64)
    for i in range(n):
        sims[i] = exact_sim(query, vectors[i])
    thr = np.float64(threshold)
    size = 0
    for i in range(n):
        if not alive[i] or not sims[i] >= thr:
            continue
        ctx = _ctx(i, sims, win_ptr, win_rows, alpha) if dense[3] != 0.0 else 0.0
        s = _score(i, sims[i], ctx, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                   last_accessed_at, importance, now, half_life, w_rec, w_imp)
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(s),
                         np.float32(sims[i]))
    return heap_sort(out_ids, out_scores, out_sims, size)


# --------------------------------------------------------------------------- bounded pass
@numba.njit(cache=True)
def _fheap_push(h, size, x):
    """Bounded min-heap of the ``h.shape[0]`` largest floats; return the new size."""
    k = h.shape[0]
    if size < k:
        j = size
        while j > 0:
            p = (j - 1) >> 1
            if x < h[p]:
                h[j] = h[p]
                j = p
            else:
                break
        h[j] = x
        return size + 1
    if x <= h[0]:
        return size
    j = 0
    while True:
        c = 2 * j + 1
        if c >= k:
            break
        if c + 1 < k and h[c + 1] < h[c]:
            c += 1
        if h[c] < x:
            h[j] = h[c]
            j = c
        else:
            break
    h[j] = x
    return size


@numba.njit(cache=True)
def _pass_codes(qcode, codes, start, stop, idot):
    for i in range(start, stop):
        idot[i] = code_dot(qcode, codes[i])


@numba.njit(cache=True)
def _approx(i, idot, scale, cnorm, rnorm, qscale, qres, qnorm, dim):
    a = np.float64(scale[i]) * qscale * np.float64(idot[i])
    return a, code_bound(a, scale[i], cnorm[i], rnorm[i], qres, qnorm, dim)


@numba.njit(cache=True)
def _pass_bounds(start, stop, idot, scale, cnorm, rnorm, qscale, qres, qnorm, dim, win_ptr,
                 win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                 last_accessed_at, importance, alive, now, half_life, w_rec, w_imp, thr,
                 upper, heap):
    """Upper bounds of rows [start, stop) into ``upper`` (float32 rounded up; -inf when the
    row cannot be a top-k result) and their sure lower bounds into ``heap``; return its size."""
    n_sp = sp_w.shape[0]
    cur = np.empty(n_sp, np.int64)
    for l in range(n_sp):                       # first entry >= start in each sparse signal
        lo = sp_ptr[l]
        hi = sp_ptr[l + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if sp_rows[mid] < start:
                lo = mid + 1
            else:
                hi = mid
        cur[l] = lo
    size = 0
    k = heap.shape[0]
    t_own = dense[0] * dense[2]
    t_ctx = dense[3] * dense[5]
    for i in range(start, stop):
        if not alive[i]:
            upper[i] = -np.inf
            continue
        a, e = _approx(i, idot, scale, cnorm, rnorm, qscale, qres, qnorm, dim)
        if a + e < thr:
            upper[i] = -np.inf
            continue
        hi_s = 0.0
        lo_s = 0.0
        mag = 0.0
        if dense[0] != 0.0:
            x = t_own * (a + e - dense[1])
            y = t_own * (a - e - dense[1])
            hi_s += x
            lo_s += y
            mag += abs(x) + abs(y) + t_own * (abs(a) + e + abs(dense[1]))
        if dense[3] != 0.0:
            pa = win_ptr[i]
            pb = win_ptr[i + 1]
            if pb > pa:
                sa = 0.0
                se = 0.0
                for p in range(pa, pb):
                    aj, ej = _approx(win_rows[p], idot, scale, cnorm, rnorm, qscale, qres, qnorm,
                                     dim)
                    sa += aj
                    se += ej + abs(aj) * 1e-15
                ca = alpha * a + (1.0 - alpha) * (sa / (pb - pa))
                ce = alpha * e + (1.0 - alpha) * (se / (pb - pa))
            else:
                ca = a
                ce = e
            x = t_ctx * (ca + ce - dense[4])
            y = t_ctx * (ca - ce - dense[4])
            hi_s += x
            lo_s += y
            mag += abs(x) + abs(y) + t_ctx * (abs(ca) + ce + abs(dense[4]))
        if w_imp != 0.0:
            x = w_imp * np.float64(importance[i])
            hi_s += x
            lo_s += x
            mag += abs(x)
        for l in range(n_sp):
            c = cur[l]
            end = sp_ptr[l + 1]
            while c < end and sp_rows[c] < i:
                c += 1
            cur[l] = c
            if sp_w[l] != 0.0:
                xv = sp_vals[c] if c < end and sp_rows[c] == i else 0.0
                x = sp_w[l] * ((xv - sp_mu[l]) * sp_inv[l])
                hi_s += x
                lo_s += x
                mag += abs(x) + sp_w[l] * (abs(xv) + abs(sp_mu[l])) * sp_inv[l]
        if w_rec != 0.0:
            # first with full recency (rec <= 1): rows that cannot reach tau skip exp2
            slack = 1e-9 * (mag + w_rec) + abs(hi_s + w_rec) * 2.0 ** -22 + 1e-300
            if size == k and hi_s + w_rec + slack < heap[0]:
                upper[i] = -np.inf
                continue
            x = w_rec * recency(now - last_accessed_at[i], half_life)
            hi_s += x
            lo_s += x
            mag += abs(x)
        slack = 1e-9 * mag + max(abs(hi_s), abs(lo_s)) * 2.0 ** -22 + 1e-300
        ub = hi_s + slack
        if size == k and ub < heap[0]:
            upper[i] = -np.inf
            continue
        upper[i] = _up32(ub)
        if a - e >= thr:                          # surely a candidate: its lower bound counts
            size = _fheap_push(heap, size, lo_s - slack)
    return size


@numba.njit(cache=True)
def _rerank(query, vectors, win_ptr, win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals, sp_w,
            sp_mu, sp_inv, last_accessed_at, importance, alive, now, half_life, w_rec, w_imp,
            thr, upper, tau, out_ids, out_scores, out_sims, stats):
    n = upper.shape[0]
    m = 0
    for i in range(n):
        if upper[i] >= tau and upper[i] > -np.inf:     # -inf: dead or pruned
            m += 1
    cand = np.empty(m, np.int64)
    key = np.empty(m, np.float32)
    m = 0
    for i in range(n):
        if upper[i] >= tau and upper[i] > -np.inf:
            cand[m] = i
            key[m] = -upper[i]
            m += 1
    order = np.argsort(key, kind="mergesort")      # upper bound descending, ties by row
    sims = np.empty(n, np.float64)
    known = np.zeros(n, np.bool_)
    n_exact = 0
    size = 0
    k = out_ids.shape[0]
    done = 0
    for o in range(m):
        i = cand[order[o]]
        if size == k and np.float64(upper[i]) < np.float64(out_scores[0]):
            break                                  # no later candidate can reach the k-th
        done += 1
        if not known[i]:
            sims[i] = exact_sim(query, vectors[i])
            known[i] = True
            n_exact += 1
        sim = sims[i]
        if not sim >= thr:
            continue
        ctx = 0.0
        if dense[3] != 0.0:
            for p in range(win_ptr[i], win_ptr[i + 1]):
                j = win_rows[p]
                if not known[j]:
                    sims[j] = exact_sim(query, vectors[j])
                    known[j] = True
                    n_exact += 1
            ctx = _ctx(i, sims, win_ptr, win_rows, alpha)
        s = _score(i, sim, ctx, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                   last_accessed_at, importance, now, half_life, w_rec, w_imp)
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(s),
                         np.float32(sim))
    stats[0] = done
    stats[1] = n_exact
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True)
def _tau(heaps, sizes, k):
    """The k-th largest of the blocks' kept lower bounds (-inf when fewer than k)."""
    h = np.empty(k, np.float64)
    size = 0
    for b in range(heaps.shape[0]):
        for j in range(sizes[b]):
            size = _fheap_push(h, size, heaps[b, j])
    return h[0] if size == k else -np.inf


@numba.njit(cache=True)
def hybrid_scan_topk_serial(query, codes, scale, cnorm, rnorm, vectors, win_ptr, win_rows,
                            alpha, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                            last_accessed_at, importance, alive, now, half_life, w_rec, w_imp,
                            threshold, out_ids, out_scores, out_sims, stats):
    """:func:`hybrid_exact_topk`'s result from int8 codes, single-threaded.

    See :func:`hybrid_scan_topk` for the parameters.
    """
    n = codes.shape[0]
    k = out_ids.shape[0]
    stats[0] = 0
    stats[1] = 0
    if k == 0 or n == 0:
        return heap_sort(out_ids, out_scores, out_sims, 0)
    dim = codes.shape[1]
    qcode = np.empty(dim, np.int8)
    qscale, qres, qnorm = quantize_query(query, qcode)
    idot = np.empty(n, np.int32)
    upper = np.empty(n, np.float32)
    nb = _n_blocks(n)
    heaps = np.empty((nb, k), np.float64)
    sizes = np.zeros(nb, np.int64)
    thr = np.float64(threshold)
    for b in range(nb):
        _pass_codes(qcode, codes, b * n // nb, (b + 1) * n // nb, idot)
    for b in range(nb):
        sizes[b] = _pass_bounds(b * n // nb, (b + 1) * n // nb, idot, scale, cnorm, rnorm,
                                qscale, qres, qnorm, dim, win_ptr, win_rows, alpha, dense,
                                sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                                last_accessed_at, importance, alive, now, half_life, w_rec,
                                w_imp, thr, upper, heaps[b])
    tau = _tau(heaps, sizes, k)
    return _rerank(query, vectors, win_ptr, win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals,
                   sp_w, sp_mu, sp_inv, last_accessed_at, importance, alive, now, half_life,
                   w_rec, w_imp, thr, upper, tau, out_ids, out_scores, out_sims, stats)


@numba.njit(cache=True, parallel=True)
def hybrid_scan_topk_parallel(query, codes, scale, cnorm, rnorm, vectors, win_ptr, win_rows,
                              alpha, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                              last_accessed_at, importance, alive, now, half_life, w_rec,
                              w_imp, threshold, out_ids, out_scores, out_sims, stats):
    """:func:`hybrid_scan_topk_serial` with the code scan and the bound pass split in row
    blocks over numba's threads; identical results and ``stats``.

    See :func:`hybrid_scan_topk` for the parameters.
    """
    n = codes.shape[0]
    k = out_ids.shape[0]
    stats[0] = 0
    stats[1] = 0
    if k == 0 or n == 0:
        return heap_sort(out_ids, out_scores, out_sims, 0)
    dim = codes.shape[1]
    qcode = np.empty(dim, np.int8)
    qscale, qres, qnorm = quantize_query(query, qcode)
    idot = np.empty(n, np.int32)
    upper = np.empty(n, np.float32)
    nb = _n_blocks(n)
    heaps = np.empty((nb, k), np.float64)
    sizes = np.zeros(nb, np.int64)
    thr = np.float64(threshold)
    for b in numba.prange(nb):
        _pass_codes(qcode, codes, b * n // nb, (b + 1) * n // nb, idot)
    for b in numba.prange(nb):
        sizes[b] = _pass_bounds(b * n // nb, (b + 1) * n // nb, idot, scale, cnorm, rnorm,
                                qscale, qres, qnorm, dim, win_ptr, win_rows, alpha, dense,
                                sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
                                last_accessed_at, importance, alive, now, half_life, w_rec,
                                w_imp, thr, upper, heaps[b])
    tau = _tau(heaps, sizes, k)
    return _rerank(query, vectors, win_ptr, win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals,
                   sp_w, sp_mu, sp_inv, last_accessed_at, importance, alive, now, half_life,
                   w_rec, w_imp, thr, upper, tau, out_ids, out_scores, out_sims, stats)


def hybrid_scan_topk(query, codes, scale, cnorm, rnorm, vectors, win_ptr, win_rows, alpha,
                     dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv, last_accessed_at,
                     importance, alive, now, half_life, w_rec, w_imp, threshold,
                     out_ids, out_scores, out_sims, stats, parallel=False):
    """Exact hybrid top-k (:func:`hybrid_exact_topk`'s result) from a compressed first pass.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    codes : ndarray of shape (n, dim), int8
    scale, cnorm, rnorm : ndarray of shape (n,), float32
        From :func:`memcore.kernels.codes.encode_rows` of ``vectors``.
    vectors : ndarray of shape (n, dim), float32
        The rows themselves (only candidates and their windows are read).
    win_ptr, win_rows, alpha, dense, sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv,
    last_accessed_at, importance, alive, now, half_life, w_rec, w_imp, threshold
        As in :func:`hybrid_exact_topk`.
    out_ids : ndarray of shape (k,), int64
    out_scores, out_sims : ndarray of shape (k,), float32
        Written, as in :func:`hybrid_exact_topk` (identical values).
    stats : ndarray of shape (2,), int64
        Written: rows reranked exactly, exact similarities computed.
    parallel : bool, default False
        Use :func:`hybrid_scan_topk_parallel` (numba's current thread count).

    Returns
    -------
    int
        Filled slots.

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> from memcore.kernels.codes import encode_rows
    >>> V = np.array([[1, 0], [0.6, 0.8], [0, 1]], np.float32)
    >>> C = np.empty((3, 2), np.int8); s, cn, rn = (np.empty(3, np.float32) for _ in range(3))
    >>> encode_rows(V, C, s, cn, rn)
    >>> ptr, rows = np.array([0, 2, 4, 6]), np.array([0, 1, 0, 1, 1, 2])
    >>> ids = np.empty(2, np.int64); sc = np.empty(2, np.float32); si = np.empty(2, np.float32)
    >>> e, z, st = np.zeros(0, np.int64), np.zeros(0), np.zeros(2, np.int64)
    >>> hybrid_scan_topk(np.array([0, 1], np.float32), C, s, cn, rn, V, ptr, rows, 0.5,
    ...                  np.array([0.0, 0, 1, 1.0, 0, 1]), np.zeros(1, np.int64), e, z, z, z,
    ...                  z, np.zeros(3), np.zeros(3, np.float32), np.ones(3, bool), 0.0, 1.0,
    ...                  0.0, 0.0, -np.inf, ids, sc, si, st), ids.tolist()
    (2, [2, 1])
    """
    kernel = hybrid_scan_topk_parallel if parallel else hybrid_scan_topk_serial
    return kernel(query, codes, scale, cnorm, rnorm, vectors, win_ptr, win_rows, alpha, dense,
                  sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv, last_accessed_at, importance,
                  alive, now, half_life, w_rec, w_imp, threshold, out_ids, out_scores, out_sims,
                  stats)
