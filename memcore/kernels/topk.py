"""Fused exact top-k: dot product, recency decay, importance, threshold and a bounded heap in one pass.

Ranking contract (shared with the oracles in :mod:`memcore.kernels.reference`): a row is a
candidate when ``alive[row]`` and ``sim >= float32(threshold)``; its score is
:func:`~memcore.kernels.scoring.fused_score` (Park et al. 2023, half-life form) in float64,
rounded to float32; candidates are ordered by float32 score descending, ties by lower row id,
so results are deterministic; unused output slots hold id -1, score -inf, sim -inf. Every
kernel returns the number of filled slots.

Design
------
- Similarity is a float32 dot product accumulated in float32 by a ``fastmath`` leaf
  (``reassoc``/``contract`` only, so LLVM can vectorise the reduction). Measured at dim 384 on
  AVX-512: 2x faster than float64 accumulation while the rows fit in cache, equal once the scan
  is memory-bound. The sims therefore differ from a float64 matmul in the last bits (within
  1e-5 for unit vectors); everything downstream of ``sim`` is exact and shared. A row whose
  float32 ``sim`` lies within 1e-5 of the threshold gets its ``sim`` recomputed in float64
  (rounded to float32, :func:`at_threshold`), so threshold membership agrees with the oracles
  and does not depend on SIMD width or summation order.
- The heap is a bounded binary min-heap of ``k`` (score, id) pairs whose root is the *worst*
  kept entry; a row enters only if it beats the root. Before paying for ``exp2`` a row is
  skipped when even full recency (``w_sim*sim + w_rec + w_imp*importance``) cannot beat the
  root; rows are scanned in increasing id, so a tie with the root loses anyway.
- The serial kernels use the output arrays as heap storage (no allocation). The parallel
  kernels split rows into contiguous blocks (one per thread), keep one heap per block, and merge
  them; the merge uses the same total order, so parallel results equal serial ones exactly.
- :func:`fused_topk` is a plain-Python dispatcher with the oracle's signature that picks
  serial or parallel by size (:func:`use_parallel`).

Kernels never validate (no bounds checks in numba): ``memcore`` validates and converts once.
Inputs must be C-contiguous: ``vectors`` float32, ``last_accessed_at`` float64, ``importance``
float32, ``alive`` bool. Read-only and memory-mapped arrays are accepted. State travels as
tuples of arrays, as in :mod:`memcore.kernels.scan`: *decay* ``(last_accessed_at, importance,
now, half_life, w_rec, w_imp)`` and *out* ``(out_ids, out_scores, out_sims)``.
"""

from __future__ import annotations

import numba
import numpy as np

from .scoring import fused_score

__all__ = [
    "PARALLEL_MIN_ROWS",
    "THRESHOLD_BAND",
    "at_threshold",
    "heap_push",
    "heap_sort",
    "fused_topk",
    "fused_topk_serial",
    "fused_topk_parallel",
    "rerank",
    "use_parallel",
]

#: Rows (times queries) from which :func:`fused_topk` uses the parallel kernels. On the shared
#: 2-core bench machine (load ~6) parallel only won at 1e6 rows (dim 384) and lost below, as the
#: second thread often waits for a core; a conservative cut until measured on an idle machine.
PARALLEL_MIN_ROWS = 250_000


# --------------------------------------------------------------------------- dot-product leaf
@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def _dot(a, b):
    """Inner product of two float32 vectors of shape (dim,), accumulated in float32.

    The only fastmath code in memcore: reassociation lets LLVM vectorise the reduction.
    """
    acc = np.float32(0.0)
    for j in range(a.shape[0]):
        acc += a[j] * b[j]
    return acc


#: Half-width of the band around the threshold in which :func:`at_threshold` recomputes a
#: similarity in float64: the float32 accumulation of :func:`_dot` stays within 1e-5 of the
#: float64 dot product for unit vectors.
THRESHOLD_BAND = 1e-5


@numba.njit(cache=True)
def _dot64(a, b):
    """Inner product accumulated in float64, in index order (no fastmath: deterministic)."""
    acc = 0.0
    for j in range(a.shape[0]):
        acc += np.float64(a[j]) * np.float64(b[j])
    return acc


@numba.njit(cache=True)
def at_threshold(query, row, sim, thr):
    """``sim``, or ``float32(query . row)`` accumulated in float64 when ``sim`` lies within
    :data:`THRESHOLD_BAND` of ``thr``.

    Threshold membership (``sim >= thr``) then does not depend on how the float32 reduction
    was vectorised: near the threshold it is decided by the float64 dot product rounded to
    float32, which is what the oracles compute (a float64 matmul rounded to float32; the two
    differ only in the last float64 bits). Far from the threshold the float32 ``sim`` is kept.

    Examples
    --------
    >>> v = np.array([0.6, 0.8], np.float32)
    >>> float(at_threshold(v, v, np.float32(1.0), np.float32(1.0))) == float(np.float32(v @ v))
    True
    """
    if abs(np.float64(sim) - np.float64(thr)) < THRESHOLD_BAND:
        return np.float32(_dot64(query, row))
    return sim


# --------------------------------------------------------------------------- bounded heap
@numba.njit(cache=True)
def _worse(score_a, id_a, score_b, id_b):
    """True when (score_a, id_a) ranks after (score_b, id_b): lower score, or tie and higher id."""
    return score_a < score_b or (score_a == score_b and id_a > id_b)


@numba.njit(cache=True)
def _sift_down(h_ids, h_scores, h_sims, size, idx, score, sim):
    """Place (idx, score, sim) at the root of the heap of ``size`` entries and sift it down."""
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        r = c + 1
        if r < size and _worse(h_scores[r], h_ids[r], h_scores[c], h_ids[c]):
            c = r
        if _worse(h_scores[c], h_ids[c], score, idx):
            h_ids[j] = h_ids[c]
            h_scores[j] = h_scores[c]
            h_sims[j] = h_sims[c]
            j = c
        else:
            break
    h_ids[j] = idx
    h_scores[j] = score
    h_sims[j] = sim


@numba.njit(cache=True)
def heap_push(h_ids, h_scores, h_sims, size, idx, score, sim):
    """Offer one candidate to a bounded top-k min-heap; return the new size.

    The heap keeps the ``k = h_ids.shape[0]`` best entries seen (higher score first, ties by
    lower id); its root ``[0]`` is the worst kept entry. A full heap replaces its root only
    when the candidate ranks strictly before it.

    Parameters
    ----------
    h_ids : ndarray of shape (k,), int64
    h_scores : ndarray of shape (k,), float32
    h_sims : ndarray of shape (k,), float32
        Heap storage, modified in place; entries ``[size:]`` are unused.
    size : int
        Entries in use, ``0 <= size <= k``.
    idx : int64
        Row id of the candidate.
    score, sim : float32
        Its fused score (the ranking key) and similarity (carried along).

    Returns
    -------
    int
        The new size, ``min(size + 1, k)``.

    Raises
    ------
    Nothing (not validated; ``size > k`` is undefined behaviour).

    Examples
    --------
    >>> ids = np.empty(2, np.int64); sc = np.empty(2, np.float32); si = np.empty(2, np.float32)
    >>> n = heap_push(ids, sc, si, 0, 7, np.float32(0.5), np.float32(0.5))
    >>> n = heap_push(ids, sc, si, n, 3, np.float32(0.9), np.float32(0.9))
    >>> n, int(ids[0])                      # the root is the worst kept entry
    (2, 7)
    """
    k = h_ids.shape[0]
    if size < k:
        j = size
        while j > 0:
            p = (j - 1) >> 1
            if _worse(score, idx, h_scores[p], h_ids[p]):
                h_ids[j] = h_ids[p]
                h_scores[j] = h_scores[p]
                h_sims[j] = h_sims[p]
                j = p
            else:
                break
        h_ids[j] = idx
        h_scores[j] = score
        h_sims[j] = sim
        return size + 1
    if k > 0 and _worse(h_scores[0], h_ids[0], score, idx):
        _sift_down(h_ids, h_scores, h_sims, k, idx, score, sim)
    return size


@numba.njit(cache=True)
def heap_sort(h_ids, h_scores, h_sims, size):
    """Sort a heap of ``size`` entries in place, best first, and pad ``[size:]``.

    Parameters
    ----------
    h_ids : ndarray of shape (k,), int64
    h_scores : ndarray of shape (k,), float32
    h_sims : ndarray of shape (k,), float32
        A heap built by :func:`heap_push`; on return ordered by score descending, ties by lower
        id, with unused slots set to id -1, score -inf, sim -inf.
    size : int
        Entries in use.

    Returns
    -------
    int
        ``size`` (the number of filled slots).

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> ids = np.empty(3, np.int64); sc = np.empty(3, np.float32); si = np.empty(3, np.float32)
    >>> n = heap_push(ids, sc, si, 0, 7, np.float32(0.5), np.float32(0.5))
    >>> n = heap_push(ids, sc, si, n, 3, np.float32(0.9), np.float32(0.9))
    >>> heap_sort(ids, sc, si, n), ids.tolist(), sc.tolist()
    (2, [3, 7, -1], [0.8999999761581421, 0.5, -inf])
    """
    end = size - 1
    while end > 0:
        # The root is the worst entry: move it to the end, re-heapify the rest.
        w_id, w_score, w_sim = h_ids[0], h_scores[0], h_sims[0]
        _sift_down(h_ids, h_scores, h_sims, end, h_ids[end], h_scores[end], h_sims[end])
        h_ids[end] = w_id
        h_scores[end] = w_score
        h_sims[end] = w_sim
        end -= 1
    for j in range(size, h_ids.shape[0]):
        h_ids[j] = -1
        h_scores[j] = -np.inf
        h_sims[j] = -np.inf
    return size


# --------------------------------------------------------------------------- scanning
@numba.njit(cache=True)
def _scan_rows(query, vectors, w_sim, decay, alive, thr, start, stop, heap, size):
    """Offer rows ``[start, stop)`` to one query's heap ``(h_ids, h_scores, h_sims)``; return
    the new heap size."""
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    h_ids, h_scores, h_sims = heap
    k = h_ids.shape[0]
    if k == 0:
        return 0
    for i in range(start, stop):
        if not alive[i]:
            continue
        sim = at_threshold(query, vectors[i], _dot(query, vectors[i]), thr)
        if not sim >= thr:
            continue
        if size == k:
            # Upper bound with full recency (rec <= 1); IEEE rounding is monotone, so the real
            # score cannot exceed it. Rows come in increasing id: a tie with the root loses.
            bound = w_sim * np.float64(sim) + w_rec + w_imp * np.float64(importance[i])
            if bound <= h_scores[0]:
                continue
        score = np.float32(fused_score(sim, last_accessed_at[i], importance[i], now, half_life,
                                       w_sim, w_rec, w_imp))
        size = heap_push(h_ids, h_scores, h_sims, size, np.int64(i), score, sim)
    return size


@numba.njit(cache=True)
def _n_blocks(n):
    """Contiguous row blocks for the parallel kernels.

    A fixed count (not ``numba.get_num_threads()``, which would make the kernel uncachable):
    up to 32 blocks of at least 256 rows, so up to 32 threads get work and the merge of
    ``n_blocks * k`` heap entries stays negligible.
    """
    return max(1, min(32, n // 256))


# --------------------------------------------------------------------------- public kernels
@numba.njit(cache=True)
def fused_topk_serial(query, vectors, w_sim, decay, alive, threshold, out):
    """Exact fused top-k of one query over all rows, single-threaded. See :func:`fused_topk`."""
    out_ids, out_scores, out_sims = out
    thr = np.float32(threshold)
    size = _scan_rows(query, vectors, w_sim, decay, alive, thr, 0, vectors.shape[0], out, 0)
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True, parallel=True)
def fused_topk_parallel(query, vectors, w_sim, decay, alive, threshold, out):
    """Exact fused top-k of one query, rows split in blocks over numba's threads.

    One heap per block, merged in the same total order, so the result equals
    :func:`fused_topk_serial` exactly. Blocks are shared among ``numba.get_num_threads()``
    threads (change it with ``numba.set_num_threads`` inside ``try/finally``).
    See :func:`fused_topk`.
    """
    out_ids, out_scores, out_sims = out
    n = vectors.shape[0]
    k = out_ids.shape[0]
    thr = np.float32(threshold)
    n_blocks = _n_blocks(n)
    # Each block's heap starts on its own cache lines (rows padded to 64 bytes): the root is
    # read for every row, so heaps sharing a line with another thread's writes would ping-pong.
    kp = (k + 15) // 16 * 16 + 16
    b_ids = np.empty((n_blocks, kp), np.int64)
    b_scores = np.empty((n_blocks, kp), np.float32)
    b_sims = np.empty((n_blocks, kp), np.float32)
    b_sizes = np.zeros((n_blocks, 8), np.int64)
    for b in numba.prange(n_blocks):
        start = b * n // n_blocks
        stop = (b + 1) * n // n_blocks
        b_sizes[b, 0] = _scan_rows(query, vectors, w_sim, decay, alive, thr, start, stop,
                                   (b_ids[b, :k], b_scores[b, :k], b_sims[b, :k]), 0)
    # the block heaps are read back through the arrays themselves, never through a tuple
    # (see the note in scan.hybrid_scan_topk_parallel)
    size = 0
    for b in range(n_blocks):
        for j in range(b_sizes[b, 0]):
            size = heap_push(out_ids, out_scores, out_sims, size,
                             b_ids[b, j], b_scores[b, j], b_sims[b, j])
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True)
def rerank(cand_ids, cand_sims, w_sim, decay, alive, threshold, out):
    """Fused top-k of given candidates (e.g. FAISS results) from their ids and similarities.

    Same contract as :func:`fused_topk`, over the candidates instead of all rows; the
    similarities are taken as given (not recomputed).

    Parameters
    ----------
    cand_ids : ndarray of shape (m,), int64
        Row ids; entries ``< 0`` (FAISS padding) are ignored. Must be ``< n`` and distinct.
    cand_sims : ndarray of shape (m,), float32
        Their similarities, any order.
    w_sim, decay, alive, threshold, out
        As in :func:`fused_topk` (the columns indexed by row id).

    Returns
    -------
    int
        Number of filled slots: ``min(k, candidates alive with sim >= threshold)``.

    Raises
    ------
    Nothing (ids out of range are undefined behaviour; the caller checks them).

    Examples
    --------
    >>> t, imp, alive = np.zeros(5), np.zeros(5, np.float32), np.ones(5, bool)
    >>> ids, scores, sims = np.empty(1, np.int64), np.empty(1, np.float32), np.empty(1, np.float32)
    >>> rerank(np.array([4, 1]), np.array([0.9, 0.8], np.float32), 1.0,
    ...        (t, imp, 0.0, 3600.0, 0.1, 0.1), alive, -1.0, (ids, scores, sims)), ids.tolist()
    (1, [4])
    """
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    out_ids, out_scores, out_sims = out
    k = out_ids.shape[0]
    thr = np.float32(threshold)
    size = 0
    for j in range(cand_ids.shape[0]):
        i = cand_ids[j]
        if i < 0 or not alive[i]:
            continue
        sim = cand_sims[j]
        if not sim >= thr:
            continue
        if size == k:
            # Candidates come in any id order, so even a tie with the root could win: skip
            # only when the bound, rounded like the score, is strictly below the root.
            bound = np.float32(w_sim * np.float64(sim) + w_rec + w_imp * np.float64(importance[i]))
            if bound < h_root_score(out_scores):
                continue
        score = np.float32(fused_score(sim, last_accessed_at[i], importance[i], now, half_life,
                                       w_sim, w_rec, w_imp))
        size = heap_push(out_ids, out_scores, out_sims, size, np.int64(i), score, sim)
    return heap_sort(out_ids, out_scores, out_sims, size)


@numba.njit(cache=True)
def h_root_score(h_scores):
    """Score of the heap's worst kept entry (its root); -inf for an empty (k = 0) heap."""
    if h_scores.shape[0] == 0:
        return -np.inf
    return h_scores[0]


# --------------------------------------------------------------------------- dispatch
def use_parallel(n_rows, n_queries=1):
    """Whether the parallel kernels pay off for this many rows and queries.

    Parameters
    ----------
    n_rows, n_queries : int

    Returns
    -------
    bool
        True when numba has more than one thread and ``n_rows * n_queries >=``
        :data:`PARALLEL_MIN_ROWS`.

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> use_parallel(10)
    False
    """
    return numba.get_num_threads() > 1 and n_rows * max(n_queries, 1) >= PARALLEL_MIN_ROWS


def fused_topk(query, vectors, w_sim, decay, alive, threshold, out):
    """Exact fused top-k of one query over all rows, in one pass (Park et al. 2023 score).

    Computes ``sim = query . vectors[i]`` (float32), keeps rows with ``alive[i]`` and
    ``sim >= float32(threshold)``, scores them with
    ``w_sim*sim + w_rec*2**(-max(now - last_accessed_at[i], 0)/half_life) + w_imp*importance[i]``
    (float64, rounded to float32) and keeps the best ``k`` in a bounded heap. Dispatches to
    :func:`fused_topk_parallel` from :data:`PARALLEL_MIN_ROWS` rows, else
    :func:`fused_topk_serial`; both give identical results.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
        Unit-norm, C-contiguous.
    vectors : ndarray of shape (n, dim), float32
        Unit-norm rows, C-contiguous; may be read-only / memory-mapped.
    w_sim : float
        Weight of the similarity, >= 0 (see :class:`memcore.DecayWeights`).
    decay : tuple (last_accessed_at, importance, now, half_life, w_rec, w_imp)
        ``last_accessed_at``: (n,) float64 Unix seconds, timestamps after ``now`` count as
        age 0; ``importance``: (n,) float32 in [0, 1]; ``now``: Unix seconds, resolved by the
        caller; ``half_life``: seconds, > 0; ``w_rec``, ``w_imp``: weights, >= 0.
    alive : ndarray of shape (n,), bool
        False for deleted rows; they never appear.
    threshold : float
        Minimum similarity (on ``sim``, not on the score); ``-inf`` keeps every live row.
    out : tuple (out_ids, out_scores, out_sims)
        ``out_ids``: (k,) int64; ``out_scores``, ``out_sims``: (k,) float32. Written in place:
        best first (score desc, ties by lower id), padded with id -1, score -inf, sim -inf.

    Returns
    -------
    int
        Number of filled slots, ``min(k, number of candidates)``.

    Raises
    ------
    Nothing: the kernels do not validate; wrong dtypes fail numba dispatch (TypingError) or
    compile another specialisation. The store layer validates before calling.

    Examples
    --------
    >>> vectors = np.array([[1, 0], [0.6, 0.8], [0, 1]], np.float32)
    >>> q = np.array([0.6, 0.8], np.float32)
    >>> t, imp, alive = np.full(3, 1.7e9), np.zeros(3, np.float32), np.ones(3, bool)
    >>> ids = np.empty(5, np.int64); sc = np.empty(5, np.float32); si = np.empty(5, np.float32)
    >>> fused_topk(q, vectors, 1.0, (t, imp, 1.7e9, 3600.0, 0.1, 0.1), alive, 0.7,
    ...            (ids, sc, si)), ids.tolist()
    (2, [1, 2, -1, -1, -1])
    """
    kernel = fused_topk_parallel if use_parallel(vectors.shape[0]) else fused_topk_serial
    return kernel(query, vectors, w_sim, decay, alive, threshold, out)
