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
``W(i)`` is row ``i``'s episode window, ``win_rows[win_start[i]:win_start[i] + win_len[i]]``
(the row itself included; an empty window counts as ``[i]``; CSR is ``win_start = ptr[:-1]``,
``win_len = diff(ptr)``, and a padded layout with a fixed stride lets a store update windows
in place), so ``ctx_i`` equals ``q . ctx_vector_i`` with
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
reading the rows' codes (:mod:`memcore.kernels.codes`) instead of their float32 vectors:

1. Integer dot products ``cq . c_i`` of every row (exact) give ``hi_i >= sim_i``
   (:func:`~memcore.kernels.codes.code_bound`, rounded up to float32), and the ``2k + 16``
   live rows with the highest ``hi`` (*seeds*). The codes are the rows' 4-bit codes when the
   caller has them (half the bytes of the int8 codes; a looser bound), else their int8 codes.
   With 4-bit codes, the bound of every row that steps 3 go on to use -- the hot rows, the
   flagged rows and sparse rows whose cheap bound reaches ``tau`` -- is first tightened
   through its int8 code (the smaller of the two bounds is kept; a random read of the
   row's int8 code, for the few rows the 4-bit bound cannot exclude).
2. The rows holding sparse signals are merged once (a k-way merge of the sorted lists) into
   their *gain* ``g_i = sum_l w_l * x_l[i] * inv_l``. The seeds are scored exactly: the
   ``2k + 16`` live rows with the highest ``hi``, and the ``2k + 16`` sparse rows with the
   highest ``t * hi_i + g_i + w_imp * importance_i`` (``t`` the dense weights times their
   ``inv``): when the sparse signals decide the ranking, these hold the top rows. The k-th
   best, ``tau``, is a lower bound on the final k-th score. Weights and ``inv`` are
   non-negative and sparse values >= 0, so the score is monotone in every similarity and
   sparse value; from ``tau`` follows a level ``hstar`` such that a row holding no sparse
   signal, with ``hi < hstar`` and no window row at ``hi >= hstar`` (then its context bound
   ``alpha * hi_i + (1 - alpha) * mean hi_j`` is below ``hstar`` too), scores below ``tau``.
3. Flagged as possible: the windows of the *hot* rows (``hi >= hstar``, one pass over
   ``hi``; windows are symmetric, ``j in W(i)`` iff ``i in W(j)``, as episode windows are),
   and the sparse rows whose cheap bound (own ``hi``, window mean at most
   ``min(hstar, max hi)``, gain, importance, recency at most 1) reaches ``tau``; no other
   O(n) work. Each flagged row gets a tight bound (its window's ``hi`` through the stencil,
   its gain and recency), padded by a slack covering float64 rounding and the rounding to
   float32; rows reaching ``tau`` are reranked exactly in descending bound order until the
   next bound is below the k-th exact score.

``stats`` reports the work: ``[rows reranked exactly, exact similarities computed]``.
The parallel kernel splits the code pass in the same row blocks as the serial one (prange;
the rest is serial and proportional to the flagged rows), so both return identical results
and statistics; the caller sets the threads (``numba.set_num_threads`` in
``try/finally``). Kernels are pure, ``cache=True``; no ``fastmath`` (integer dot products
vectorise without it).
"""

from __future__ import annotations

import numba
import numpy as np

from .codes import (NIBBLE_CHUNK, bound_slope, code_dot, nibble_dot_at, nibble_query,
                    quantize_query, row_bound)
from .scoring import recency
from .topk import _n_blocks, heap_push, heap_sort

__all__ = ["exact_sim", "hybrid_exact_topk", "hybrid_scan_topk", "hybrid_scan_topk_serial",
           "hybrid_scan_topk_parallel", "rows_in", "NO_NIBBLES"]

_U = 2.0 ** -53

#: The 4-bit half of a scan's ``codes`` tuple when a caller keeps none (0 rows): the first
#: pass reads the int8 codes.
#: Rows per sub-block of the 4-bit first pass (its dot products stay in L1).
_SUB = 2048

NO_NIBBLES = (np.zeros((0, 64), np.uint8), np.zeros(0, np.float32), np.zeros(0, np.float32),
              np.zeros(0, np.float32))


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
def _position(rows, lo, hi, i):
    """Where row i sits in the ascending ``rows[lo:hi]`` (binary search); -1 when absent."""
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if rows[mid] < i:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and rows[lo] == i else -1


@numba.njit(cache=True)
def _sparse_value(sp_ptr, sp_rows, sp_vals, l, i):
    """``x_l[i]``: row i's value in signal l's sorted rows; 0.0 when absent."""
    p = _position(sp_rows, sp_ptr[l], sp_ptr[l + 1], i)
    return sp_vals[p] if p >= 0 else 0.0


@numba.njit(cache=True)
def _score(i, sim, ctx, dense, sparse, decay):
    """The exact float64 score of row i (module notes), before rounding to float32."""
    sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv = sparse
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
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
def _ctx(i, sims, windows, alpha):
    """``alpha * sims[i] + (1 - alpha) * mean(sims[W(i)])`` (sum in window order)."""
    win_start, win_len, win_rows = windows
    a = win_start[i]
    b = (win_start[i] + win_len[i])
    if b <= a:
        return alpha * sims[i] + (1.0 - alpha) * sims[i]
    acc = 0.0
    for p in range(a, b):
        acc += sims[win_rows[p]]
    return alpha * sims[i] + (1.0 - alpha) * (acc / (b - a))


@numba.njit(cache=True)
def hybrid_exact_topk(query, vectors, windows, alpha, dense, sparse, decay, alive, threshold, out):
    """The exact path: every row's exact similarity, the stencil, the score, a bounded heap.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    vectors : ndarray of shape (n, dim), float32
    windows : tuple (win_start, win_len, win_rows)
        ``win_start``, ``win_len``: ndarray of shape (n,), int64; ``win_rows``: ndarray, int32
        or int64. Row ``i``'s episode window is
        ``win_rows[win_start[i]:win_start[i] + win_len[i]]`` (itself included).
    alpha : float
        Share of the row's own similarity in its context similarity, in [0, 1].
    dense : ndarray of shape (6,), float64
        ``w_own, mu_own, inv_own, w_ctx, mu_ctx, inv_ctx``; weights and ``inv`` >= 0.
    sparse : tuple (sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv)
        ``sp_ptr``: (n_sparse + 1,) int64; ``sp_rows``: (sp_ptr[-1],) int64, signal ``l``'s
        rows ``sp_rows[sp_ptr[l]:sp_ptr[l + 1]]``, strictly ascending; ``sp_vals``:
        (sp_ptr[-1],) float64, their values, >= 0 (the codes scan relies on it; BM25 scores
        and boosts are); ``sp_w``, ``sp_mu``, ``sp_inv``: (n_sparse,) float64, weight (>= 0),
        mean and inverse std (>= 0) of each signal.
    decay : tuple (last_accessed_at, importance, now, half_life, w_rec, w_imp)
        ``last_accessed_at``: (n,) float64 Unix seconds; ``importance``: (n,) float32 in
        [0, 1] (the codes scan relies on it); ``now``, ``half_life`` (seconds), ``w_rec``,
        ``w_imp`` (>= 0): floats.
    alive : ndarray of shape (n,), bool
        Candidate rows (window rows count whether alive or not).
    threshold : float
        Minimum own similarity (float64 comparison); ``-inf`` for none.
    out : tuple (out_ids, out_scores, out_sims)
        ``out_ids``: (k,) int64; ``out_scores``, ``out_sims``: (k,) float32. Written: best
        first, padded with -1 / -inf / -inf.

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
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 2]), np.array([0, 1, 0, 1, 1, 2]))  # W(2) = [1, 2]
    >>> out = (np.empty(2, np.int64), np.empty(2, np.float32), np.empty(2, np.float32))
    >>> e, z = np.zeros(0, np.int64), np.zeros(0)
    >>> sparse = (np.zeros(1, np.int64), e, z, z, z, z)
    >>> decay = (np.zeros(3), np.zeros(3, np.float32), 0.0, 1.0, 0.0, 0.0)
    >>> hybrid_exact_topk(np.array([0, 1], np.float32), V, win, 0.5,
    ...                   np.array([0.0, 0, 1, 1.0, 0, 1]), sparse, decay, np.ones(3, bool),
    ...                   -np.inf, out), out[0].tolist(), out[1].tolist()
    (2, [2, 1], [0.949999988079071, 0.6000000238418579])
    """
    out_ids, out_scores, out_sims = out
    n = vectors.shape[0]
    sims = np.empty(n, np.float64)
    for i in range(n):
        sims[i] = exact_sim(query, vectors[i])
    thr = np.float64(threshold)
    size = 0
    for i in range(n):
        if not alive[i] or not sims[i] >= thr:
            continue
        ctx = _ctx(i, sims, windows, alpha) if dense[3] != 0.0 else 0.0
        s = _score(i, sims[i], ctx, dense, sparse, decay)
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(s),
                         np.float32(sims[i]))
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True)
def rows_in(values, wanted):
    """The rows whose value is one of ``wanted``, ascending (a sparse signal's rows, e.g. the
    memories of the speakers a query names): two passes over ``values``, no n-length
    temporaries.

    Parameters
    ----------
    values : ndarray of shape (n,), integer
    wanted : ndarray of shape (m,), integer
        A few values (each is compared with every row).

    Returns
    -------
    ndarray of shape (count,), int64

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> rows_in(np.array([0, 2, 1, 2], np.int32), np.array([2], np.int32)).tolist()
    [1, 3]
    """
    m = 0
    for i in range(values.shape[0]):
        v = values[i]
        for j in range(wanted.shape[0]):
            if v == wanted[j]:
                m += 1
                break
    out = np.empty(m, np.int64)
    m = 0
    for i in range(values.shape[0]):
        v = values[i]
        for j in range(wanted.shape[0]):
            if v == wanted[j]:
                out[m] = i
                m += 1
                break
    return out


# --------------------------------------------------------------------------- bounded pass
@numba.njit(cache=True)
def _up32(x):
    """A float32 >= x for finite float64 x (at most 2 float32 ulps above), branch-free."""
    return np.float32(x + abs(x) * 2.0 ** -23 + 1e-30)


@numba.njit(cache=True)
def _pass_codes(qc, codes, alive, start, stop, hi, s_ids, s_keys, s_tmp):
    """Upper bounds ``hi`` on the similarities of rows [start, stop) from their codes
    (``qc``: the query's int8 code, scale, residual, norm and its split for the 4-bit codes,
    :func:`_setup`; ``codes``: the rows' int8 codes, scale, cnorm, rnorm, then their 4-bit
    codes, scale, cnorm, rnorm, the 4-bit ones empty when absent), and their seeds: the
    ``s_ids.shape[0]`` live rows with the highest ``hi`` (a heap); returns the heap's size.

    The first pass reads the 4-bit codes when there are some (half the bytes of the int8
    codes: 6-7 ms instead of ~11 ms per 1e6 rows of dim 384 on one core; a ~15x looser
    bound, tightened through the int8 codes for the rows that matter, :func:`_tighten`),
    else the int8 codes, in one loop per row: the integer dot product (memory-bound), its
    bound with the query's factor hoisted and the seed heap's test, which runs while the next
    row loads (measured at 1e6 rows: ~2.5 ms less than a bound recomputing the factor per
    row in a second loop).
    """
    qcode, qscale, qres, qnorm, qlo, qhi, qsum = qc
    slope = bound_slope(qnorm, qcode.shape[0])
    m = s_ids.shape[0]
    size = 0
    c4 = codes[4]
    if c4.shape[0] > 0:
        # compute-light dot products: the bounds and the heap in loops of their own
        # (vectorised), or their scalar work per row would cost more than the dots
        scale, cnorm, rnorm = codes[5], codes[6], codes[7]
        width = c4.shape[1]
        base, ql, qh = c4.ctypes.data, qlo.ctypes.data, qhi.ctypes.data  # c4 C-contiguous
        dots = np.empty(_SUB, np.int64)          # a sub-block's, cache-resident
        for c0 in range(start, stop, _SUB):
            c1 = min(c0 + _SUB, stop)
            for i in range(c0, c1):
                dots[i - c0] = nibble_dot_at(base + i * width, ql, qh, width // NIBBLE_CHUNK,
                                             qsum)
            for i in range(c0, c1):
                a = np.float64(scale[i]) * qscale * np.float64(dots[i - c0])
                hi[i] = _up32(a + row_bound(a, scale[i], cnorm[i], rnorm[i], qres, qnorm,
                                            slope))
            for i in range(c0, c1):
                h = hi[i]
                if alive[i] and (size < m or h > s_keys[0]):
                    size = heap_push(s_ids, s_keys, s_tmp, size, np.int64(i), h, h)
        return size
    c8, scale, cnorm, rnorm = codes[0], codes[1], codes[2], codes[3]
    for i in range(start, stop):
        a = np.float64(scale[i]) * qscale * np.float64(code_dot(qcode, c8[i]))
        h = _up32(a + row_bound(a, scale[i], cnorm[i], rnorm[i], qres, qnorm, slope))
        hi[i] = h
        if alive[i] and (size < m or h > s_keys[0]):
            size = heap_push(s_ids, s_keys, s_tmp, size, np.int64(i), h, h)
    return size


@numba.njit(cache=True)
def _tighten(i, hi, tight, qc, codes):
    """Row i's ``hi`` from its int8 code when the first pass read its 4-bit code (once per
    row: ``tight`` marks the rows done; the smaller of the two bounds is kept)."""
    if tight.shape[0] == 0 or tight[i]:
        return
    tight[i] = True
    qcode, qscale, qres, qnorm = qc[0], qc[1], qc[2], qc[3]
    c8, scale, cnorm, rnorm = codes[0], codes[1], codes[2], codes[3]
    a = np.float64(scale[i]) * qscale * np.float64(code_dot(qcode, c8[i]))
    h = _up32(a + row_bound(a, scale[i], cnorm[i], rnorm[i], qres, qnorm,
                            bound_slope(qnorm, qcode.shape[0])))
    if h < hi[i]:
        hi[i] = h


@numba.njit(cache=True)
def _tight_hot(hot, hstar, hi, tight, qc, codes):
    """The hot rows still at ``hi >= hstar`` (rounded down to float32, as in
    :func:`_hot_rows`) once their bounds come from the int8 codes."""
    if tight.shape[0] == 0:
        return hot
    h = np.float32(hstar)
    if np.float64(h) > hstar:
        h = np.nextafter(h, np.float32(-np.inf))
    keep = np.empty(hot.shape[0], np.int64)
    m = 0
    for j in range(hot.shape[0]):
        i = hot[j]
        _tighten(i, hi, tight, qc, codes)
        if hi[i] >= h:
            keep[m] = i
            m += 1
    return keep[:m]


@numba.njit(cache=True)
def _hot_rows(hi, hstar):
    """Rows with ``hi >= hstar``, ascending, and the largest ``hi``: two passes of float32
    compares against ``hstar`` rounded down (a superset when the rounding moves it; both
    passes vectorise)."""
    h = np.float32(hstar)
    if np.float64(h) > hstar:
        h = np.nextafter(h, np.float32(-np.inf))
    m = 0
    top = np.float32(-np.inf)
    for i in range(hi.shape[0]):
        m += hi[i] >= h
        top = max(top, hi[i])
    out = np.empty(m, np.int64)
    m = 0
    for i in range(hi.shape[0]):
        if hi[i] >= h:
            out[m] = i
            m += 1
    return out, np.float64(top)


@numba.njit(cache=True)
def _exact_into(i, exact, windows, alpha, dense, sparse, decay, thr, out, size):
    """Score row i exactly and offer it to the heap. ``exact``: ``(query, vectors, sims,
    known)``, the similarities computed so far cached in ``sims``/``known``; ``out``:
    ``(out_ids, out_scores, out_sims, stats)``."""
    query, vectors, sims, known = exact
    out_ids, out_scores, out_sims, stats = out
    win_start, win_len, win_rows = windows
    stats[0] += 1
    if not known[i]:
        sims[i] = exact_sim(query, vectors[i])
        known[i] = True
        stats[1] += 1
    sim = sims[i]
    if not sim >= thr:
        return size
    ctx = 0.0
    if dense[3] != 0.0:
        for p in range(win_start[i], (win_start[i] + win_len[i])):
            j = win_rows[p]
            if not known[j]:
                sims[j] = exact_sim(query, vectors[j])
                known[j] = True
                stats[1] += 1
        ctx = _ctx(i, sims, windows, alpha)
    s = _score(i, sim, ctx, dense, sparse, decay)
    return heap_push(out_ids, out_scores, out_sims, size, np.int64(i), np.float32(s),
                     np.float32(sim))


@numba.njit(cache=True)
def _upper(i, g, hi, windows, alpha, dense, sp_cm, decay):
    """A rigorous upper bound on row i's float32 score from the similarity intervals and the
    row's sparse gain ``g = sum_l w_l * x_l[i] * inv_l`` (``sp_cm = (sp_c, sp_m)``,
    ``sp_c = -sum_l w_l * mu_l * inv_l``, ``sp_m = sum_l w_l * |mu_l| * inv_l``;
    :func:`_sparse_constants`)."""
    win_start, win_len, win_rows = windows
    sp_c, sp_m = sp_cm
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    a_hi = np.float64(hi[i])
    u = 0.0
    mag = 0.0
    if dense[0] != 0.0:
        x = dense[0] * ((a_hi - dense[1]) * dense[2])
        u += x
        mag += abs(x) + dense[0] * (abs(a_hi) + abs(dense[1])) * dense[2]
    if dense[3] != 0.0:
        pa = win_start[i]
        pb = (win_start[i] + win_len[i])
        c = a_hi
        if pb > pa:
            acc = 0.0
            for p in range(pa, pb):
                acc += np.float64(hi[win_rows[p]])
            c = alpha * a_hi + (1.0 - alpha) * (acc / (pb - pa))
        x = dense[3] * ((c - dense[4]) * dense[5])
        u += x
        mag += abs(x) + dense[3] * (abs(c) + abs(dense[4])) * dense[5]
    if w_rec != 0.0:
        x = w_rec * recency(now - last_accessed_at[i], half_life)
        u += x
        mag += x
    if w_imp != 0.0:
        x = w_imp * np.float64(importance[i])
        u += x
        mag += abs(x)
    # the sparse terms: sum_l w_l * ((x_l - mu_l) * inv_l) = g + sp_c up to rounding; each
    # term's magnitude is at most w_l * (x_l + |mu_l|) * inv_l (x_l >= 0), twice counted as
    # the exact path's term and its parts
    u += g + sp_c
    mag += 2.0 * (g + sp_m)
    # float64 rounding of both this bound and the exact score (1e-12 of the magnitudes), and
    # the exact score's rounding to float32 (2**-24 relative)
    return u + 1e-12 * mag + abs(u) * 2.0 ** -23 + 1e-30


@numba.njit(cache=True)
def _sparse_constants(sp_w, sp_mu, sp_inv):
    """``(-sum_l w_l * mu_l * inv_l, sum_l w_l * |mu_l| * inv_l)`` over the weighted signals."""
    c = 0.0
    m = 0.0
    for l in range(sp_w.shape[0]):
        if sp_w[l] != 0.0:
            c += sp_w[l] * ((0.0 - sp_mu[l]) * sp_inv[l])
            m += sp_w[l] * abs(sp_mu[l]) * sp_inv[l]
    return c, m


@numba.njit(cache=True)
def _sparse_union(sparse):
    """The rows holding any sparse signal, ascending (a k-way merge of the signals' sorted
    rows), and each one's gain ``g = sum_l w_l * x_l * inv_l`` (signals in order)."""
    sp_ptr, sp_rows, sp_vals, sp_w, _, sp_inv = sparse
    n_sp = sp_w.shape[0]
    rows = np.empty(sp_ptr[n_sp], np.int64)
    gain = np.empty(sp_ptr[n_sp], np.float64)
    cur = sp_ptr[:n_sp].copy()
    m = 0
    while True:
        i = -1
        for l in range(n_sp):
            if cur[l] < sp_ptr[l + 1] and (i < 0 or sp_rows[cur[l]] < i):
                i = sp_rows[cur[l]]
        if i < 0:
            break
        g = 0.0
        for l in range(n_sp):
            if cur[l] < sp_ptr[l + 1] and sp_rows[cur[l]] == i:
                if sp_w[l] != 0.0:
                    g += sp_w[l] * sp_vals[cur[l]] * sp_inv[l]
                cur[l] += 1
        rows[m] = i
        gain[m] = g
        m += 1
    return rows[:m], gain[:m]


@numba.njit(cache=True)
def _gain_of(i, u_rows, u_gain):
    """Row i's sparse gain (binary search in the union rows); 0.0 when it holds none."""
    p = _position(u_rows, 0, u_rows.shape[0], i)
    return u_gain[p] if p >= 0 else 0.0


@numba.njit(cache=True)
def _cheap(h, g, imp, c1, c2, slack):
    """The cheap bound of a sparse row with no hot row in its window: own ``hi = h``, window
    mean below ``min(hstar, max hi)`` (in ``c2``), gain ``g``, importance term ``imp``,
    recency at most 1 (in ``c2``)."""
    return c1 * h + c2 + imp + g + slack + 1e-12 * (g + c1 * abs(h))


@numba.njit(cache=True)
def _finish(exact, bounds, consts, windows, alpha, dense, sparse, decay, alive, thr, out, size,
            tt):
    """Flag the hot rows' windows (windows are symmetric: ``W^-1(j) = W(j)``) and the sparse
    rows whose cheap bound reaches ``tau``; refine their bounds and rerank exactly. Work is
    proportional to the flagged rows and the sparse rows, not to n. ``bounds``: ``(hi, hot,
    u_rows, u_gain, mark)``, ``mark`` 0 for a row not seen yet, 2 for a seed (scored
    already), flagged rows get 1; ``consts``: ``(c1, c2, slack)`` (:func:`_after_codes`);
    ``tt``: ``(tight, qc, codes)`` for :func:`_tighten` (``tight`` empty: the first pass
    read the int8 codes)."""
    hi, hot, u_rows, u_gain, mark = bounds
    c1, c2, slack = consts
    tight, qc, rcodes = tt
    win_start, win_len, win_rows = windows
    importance, w_imp = decay[1], decay[5]
    out_ids, out_scores, out_sims, stats = out
    k = out_ids.shape[0]
    tau = out_scores[0] if size == k else -np.inf
    windows_on = dense[3] != 0.0
    sp_cm = _sparse_constants(sparse[3], sparse[4], sparse[5])
    cap = hot.shape[0] + u_rows.shape[0]
    if windows_on:
        for j in range(hot.shape[0]):
            cap += win_len[hot[j]]
    f_rows = np.empty(cap, np.int64)
    f_gain = np.empty(cap, np.float64)
    m = 0
    for j in range(hot.shape[0]):
        r = hot[j]
        if mark[r] == 0:
            mark[r] = 1
            f_rows[m] = r
            f_gain[m] = _gain_of(r, u_rows, u_gain)
            m += 1
        if windows_on:
            for p in range(win_start[r], win_start[r] + win_len[r]):
                x = win_rows[p]
                if mark[x] == 0:
                    mark[x] = 1
                    f_rows[m] = x
                    f_gain[m] = _gain_of(x, u_rows, u_gain)
                    m += 1
    for j in range(u_rows.shape[0]):
        i = u_rows[j]
        if mark[i] != 0 or not alive[i] or not np.float64(hi[i]) >= thr:
            continue
        # a row with no hot row in its window has a window mean hi < hstar (in c2); a row
        # with one is flagged above anyway
        g = u_gain[j]
        imp = w_imp * np.float64(importance[i])
        u = _cheap(np.float64(hi[i]), g, imp, c1, c2, slack)
        if u >= tau and tight.shape[0] > 0 and not tight[i]:
            _tighten(i, hi, tight, qc, rcodes)          # the int8 code's bound, then again
            if not np.float64(hi[i]) >= thr:
                continue
            u = _cheap(np.float64(hi[i]), g, imp, c1, c2, slack)
        if u >= tau:
            mark[i] = 1
            f_rows[m] = i
            f_gain[m] = g
            m += 1
    if tight.shape[0] > 0:      # the flagged rows' (windows') bounds from their int8 codes
        for j in range(m):
            _tighten(f_rows[j], hi, tight, qc, rcodes)
    cand = np.empty(m, np.int64)
    key = np.empty(m, np.float64)
    n_flag = 0
    nc = 0
    for j in range(m):
        i = f_rows[j]
        if not alive[i] or not np.float64(hi[i]) >= thr:
            continue                         # dead, or below the threshold
        n_flag += 1
        u = _upper(i, f_gain[j], hi, windows, alpha, dense, sp_cm, decay)
        if u >= tau:
            cand[nc] = i
            key[nc] = -u
            nc += 1
    if stats.shape[0] > 3:
        stats[2] = n_flag
        stats[3] = nc
    order = np.argsort(key[:nc], kind="mergesort")     # upper bound descending
    for o in range(nc):
        i = cand[order[o]]
        if size == k and -key[order[o]] < np.float64(out_scores[0]):
            break                                  # no later candidate can reach the k-th
        size = _exact_into(i, exact, windows, alpha, dense, sparse, decay, thr, out, size)
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True)
def _sparse_seeds(hi, alive, thr, importance, w_imp, t, u_rows, u_gain, m):
    """The ``m`` live rows holding sparse signals (and ``hi`` at the threshold) with the
    highest ``t * hi + gain + w_imp * importance``: seeds whose exact scores lift ``tau``
    when the sparse signals decide the ranking."""
    ids = np.empty(m, np.int64)
    keys = np.empty(m, np.float32)
    tmp = np.empty(m, np.float32)
    size = 0
    for j in range(u_rows.shape[0]):
        i = u_rows[j]
        h = np.float64(hi[i])
        if not alive[i] or not h >= thr:
            continue
        key = np.float32(t * h + u_gain[j] + w_imp * np.float64(importance[i]))
        if size < m or key > keys[0]:
            size = heap_push(ids, keys, tmp, size, i, key, key)
    return ids[:size]


@numba.njit(cache=True)
def _seeds_and_constants(exact, seeds, extra, mark, windows, alpha, dense, sparse, decay, thr, out):
    """Score the seeds (the blocks' highest ``hi``, ``seeds = (s_ids, s_keys, s_sizes)``, and
    the ``extra`` rows) exactly, marking them 2 in ``mark`` (the heap's root ``tau`` becomes a
    lower bound on the k-th score), then the hot-row level ``hstar``: a row holding no sparse
    signal, with ``hi < hstar`` and no row of its window at ``hi >= hstar``, scores below
    ``tau``. Also the constants of the bound of such a row holding sparse signals,
    ``c1 * hi_i + c0 + t_ctx * (1 - alpha) * min(hstar, max hi) + w_imp * importance_i
    + slack`` (:func:`_after_codes`)."""
    s_ids, s_keys, s_sizes = seeds
    _, _, _, sp_w, sp_mu, sp_inv = sparse
    _, _, _, _, w_rec, w_imp = decay
    out_ids, out_scores = out[0], out[1]
    m = s_ids.shape[1]
    t_ids = np.empty(m, np.int64)
    t_keys = np.empty(m, np.float32)
    t_tmp = np.empty(m, np.float32)
    size = 0
    for b in range(s_ids.shape[0]):
        for j in range(s_sizes[b]):
            size = heap_push(t_ids, t_keys, t_tmp, size, s_ids[b, j], s_keys[b, j], s_keys[b, j])
    seeds = np.sort(np.concatenate((t_ids[:size], extra)))
    out_size = 0
    for j in range(seeds.shape[0]):
        i = seeds[j]
        if mark[i] != 0:
            continue                             # a repeat
        mark[i] = 2
        out_size = _exact_into(i, exact, windows, alpha, dense, sparse, decay, thr, out, out_size)
    tau = np.float64(out_scores[0]) if out_size == out_ids.shape[0] else -np.inf
    t_own = dense[0] * dense[2] if dense[0] != 0.0 else 0.0
    t_ctx = dense[3] * dense[5] if dense[3] != 0.0 else 0.0
    c0 = -t_own * dense[1] - t_ctx * dense[4] + w_rec
    mag = 1.0 + (t_own + t_ctx) * (1.0 + abs(dense[1]) + abs(dense[4])) + w_rec + w_imp
    for l in range(sp_w.shape[0]):
        if sp_w[l] != 0.0:
            x = sp_w[l] * ((0.0 - sp_mu[l]) * sp_inv[l])
            c0 += x
            mag += abs(x)
    # rounding is relative to the terms compared: |tau|, |c0| and t * |hstar| (<= both); a row
    # with |hi| far above |hstar| is far below tau, beyond any rounding
    slack = 1e-7 * (mag + abs(c0) + (abs(tau) if tau > -np.inf else 0.0))
    t = t_own + t_ctx
    rest = c0 + w_imp + 2.0 * slack               # importance <= 1
    if tau == -np.inf:
        hstar = -np.inf
    elif t > 0.0:
        hstar = (tau - rest) / t                 # +-inf when t is tiny: kept as is
        if np.isfinite(hstar):
            hstar -= abs(hstar) * 1e-9 + 1e-12
    else:
        hstar = np.inf if rest < tau else -np.inf
    return out_size, t_own + t_ctx * alpha, c0, t_ctx, slack, hstar


@numba.njit(cache=True)
def _setup(query, n, width, k):
    """The quantised query ``(qcode, qscale, qres, qnorm, qlo, qhi, qsum)`` (its split for
    4-bit rows of ``width`` bytes, :func:`~memcore.kernels.codes.nibble_query`; empty when
    ``width`` is 0) and the first pass's arrays: ``hi``, the row blocks, the seed heaps
    ``(s_ids, s_keys, s_tmp, s_sizes)``."""
    qcode = np.empty(query.shape[0], np.int8)
    qscale, qres, qnorm = quantize_query(query, qcode)
    if width > 0:
        qlo, qhi, qsum = nibble_query(qcode, width)
    else:
        qlo, qhi, qsum = np.zeros(0, np.int16), np.zeros(0, np.int16), 0
    nb = _n_blocks(n)
    m = 2 * k + 16
    return ((qcode, qscale, qres, qnorm, qlo, qhi, qsum), np.empty(n, np.float32), nb,
            (np.empty((nb, m), np.int64), np.empty((nb, m), np.float32),
             np.empty((nb, m), np.float32), np.zeros(nb, np.int64)))


@numba.njit(cache=True)
def _after_codes(query, vectors, hi, seeds, codes, windows, alpha, dense, sparse, decay,
                 alive, threshold, out):
    """Everything after the code pass, shared by the serial and parallel kernels: the sparse
    rows and their gains, seeds (the highest ``hi``, and the sparse rows most likely to score
    high) and constants, hot rows (their bounds from the int8 codes when the pass read 4-bit
    ones), bounds and the exact rerank. ``codes``: ``(qc, codes)``, the query's and the rows'
    codes (:func:`_pass_codes`)."""
    importance, w_imp = decay[1], decay[5]
    n = hi.shape[0]
    qc, rcodes = codes
    tt = (np.zeros(n if rcodes[4].shape[0] > 0 else 0, np.bool_), qc, rcodes)
    thr = np.float64(threshold)
    exact = (query, vectors, np.empty(n, np.float64), np.zeros(n, np.bool_))
    mark = np.zeros(n, np.int8)
    u_rows, u_gain = _sparse_union(sparse)
    t = (dense[0] * dense[2] if dense[0] != 0.0 else 0.0) + \
        (dense[3] * dense[5] if dense[3] != 0.0 else 0.0)
    extra = _sparse_seeds(hi, alive, thr, importance, w_imp, t, u_rows, u_gain, seeds[0].shape[1])
    size, c1, c0, t_ctx, slack, hstar = _seeds_and_constants(
        exact, (seeds[0], seeds[1], seeds[3]), extra, mark, windows, alpha, dense, sparse, decay,
        thr, out)
    hot, top = _hot_rows(hi, hstar)
    hot = _tight_hot(hot, hstar, hi, tt[0], qc, rcodes)
    # a row whose window holds no hot row has a window mean hi below hstar, and never above
    # the largest hi (dead rows' included): the context term of its cheap bound
    c2 = c0
    if t_ctx != 0.0 and alpha < 1.0 and hstar != -np.inf:
        c2 += t_ctx * ((1.0 - alpha) * min(hstar, top))
    if hstar == -np.inf:
        c2 = np.inf                              # every row is flagged anyway
    return _finish(exact, (hi, hot, u_rows, u_gain, mark), (c1, c2, slack), windows, alpha,
                   dense, sparse, decay, alive, thr, out, size, tt)


@numba.njit(cache=True)
def hybrid_scan_topk_serial(query, codes, vectors, windows, alpha, dense, sparse, decay, alive,
                            threshold, out):
    """:func:`hybrid_exact_topk`'s result from int8 codes, single-threaded.

    See :func:`hybrid_scan_topk` for the parameters.
    """
    out_ids, out_scores, out_sims, stats = out
    n = codes[0].shape[0]
    stats[0] = 0
    stats[1] = 0
    if out_ids.shape[0] == 0 or n == 0:
        return heap_sort(out_ids, out_scores, out_sims, 0)
    qc, hi, nb, seeds = _setup(query, n, codes[4].shape[1] if codes[4].shape[0] else 0,
                              out_ids.shape[0])
    s_ids, s_keys, s_tmp, s_sizes = seeds
    for b in range(nb):
        s_sizes[b] = _pass_codes(qc, codes, alive, b * n // nb, (b + 1) * n // nb, hi,
                                 s_ids[b], s_keys[b], s_tmp[b])
    return _after_codes(query, vectors, hi, (s_ids, s_keys, s_tmp, s_sizes), (qc, codes),
                        windows, alpha, dense, sparse, decay, alive, threshold, out)


@numba.njit(cache=True, parallel=True)
def hybrid_scan_topk_parallel(query, codes, vectors, windows, alpha, dense, sparse, decay, alive,
                              threshold, out):
    """:func:`hybrid_scan_topk_serial` with the code scan split in row blocks over numba's
    threads; identical results and ``stats``.

    See :func:`hybrid_scan_topk` for the parameters.
    """
    out_ids, out_scores, out_sims, stats = out
    n = codes[0].shape[0]
    stats[0] = 0
    stats[1] = 0
    if out_ids.shape[0] == 0 or n == 0:
        return heap_sort(out_ids, out_scores, out_sims, 0)
    qc, hi, nb, seeds = _setup(query, n, codes[4].shape[1] if codes[4].shape[0] else 0,
                              out_ids.shape[0])
    s_ids, s_keys, s_tmp, s_sizes = seeds
    for b in numba.prange(nb):
        s_sizes[b] = _pass_codes(qc, codes, alive, b * n // nb, (b + 1) * n // nb, hi,
                                 s_ids[b], s_keys[b], s_tmp[b])
    # the seed arrays as the loop wrote them, in a new tuple: read through the tuple _setup
    # returned, the loop's writes to s_sizes are not seen after numba's parfor pass
    return _after_codes(query, vectors, hi, (s_ids, s_keys, s_tmp, s_sizes), (qc, codes),
                        windows, alpha, dense, sparse, decay, alive, threshold, out)


def hybrid_scan_topk(query, codes, vectors, windows, alpha, dense, sparse, decay, alive, threshold,
                     out, parallel=False):
    """Exact hybrid top-k (:func:`hybrid_exact_topk`'s result) from a compressed first pass.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    codes : tuple (codes, scale, cnorm, rnorm[, codes4, scale4, cnorm4, rnorm4])
        ``codes``: (n, dim) int8; ``scale``, ``cnorm``, ``rnorm``: (n,) float32; from
        :func:`memcore.kernels.codes.encode_rows` of ``vectors``. Optionally the rows' 4-bit
        codes, (n, nibble_width(dim)) uint8, and their (n,) float32 scale and norms
        (:func:`memcore.kernels.codes.encode_nibbles`): the first pass then reads those
        (half the bytes) and tightens the bounds of the rows that matter through the int8
        codes. The serial and parallel kernels take the 8-tuple (4-bit arrays with 0 rows:
        none).
    vectors : ndarray of shape (n, dim), float32
        The rows themselves (only candidates and their windows are read).
    windows, alpha, dense, sparse, decay, alive, threshold
        As in :func:`hybrid_exact_topk`.
    out : tuple (out_ids, out_scores, out_sims, stats)
        As in :func:`hybrid_exact_topk` (identical values), and ``stats``: (2,) or (4,)
        int64, written: rows reranked exactly, exact similarities computed (and, with 4
        slots, rows flagged and candidates).
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
    >>> codes = (np.empty((3, 2), np.int8), *(np.empty(3, np.float32) for _ in range(3)))
    >>> encode_rows(V, *codes)
    >>> win = (np.array([0, 2, 4]), np.array([2, 2, 2]), np.array([0, 1, 0, 1, 1, 2]))
    >>> out = (np.empty(2, np.int64), np.empty(2, np.float32), np.empty(2, np.float32),
    ...        np.zeros(2, np.int64))
    >>> e, z = np.zeros(0, np.int64), np.zeros(0)
    >>> sparse = (np.zeros(1, np.int64), e, z, z, z, z)
    >>> decay = (np.zeros(3), np.zeros(3, np.float32), 0.0, 1.0, 0.0, 0.0)
    >>> hybrid_scan_topk(np.array([0, 1], np.float32), codes, V, win, 0.5,
    ...                  np.array([0.0, 0, 1, 1.0, 0, 1]), sparse, decay, np.ones(3, bool),
    ...                  -np.inf, out), out[0].tolist()
    (2, [2, 1])
    """
    kernel = hybrid_scan_topk_parallel if parallel else hybrid_scan_topk_serial
    if len(codes) == 4:
        codes = (*codes, *NO_NIBBLES)
    return kernel(query, codes, vectors, windows, alpha, dense, sparse, decay, alive, threshold,
                  out)
