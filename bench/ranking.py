"""Exact fused top-k from an index (FAISS candidates + a bound), by brute force or doubling.

The search path the stores do *not* take (measured in bench/test_bench_long.py: the fused
scan of :mod:`memcore.core.rank` is as fast as FAISS flat search, and candidates + the bound
took 5-6x as long); kept here as the benchmark's peer.

Both functions rank with the Generative Agents score (Park et al. 2023, half-life form)::

    score = w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance * importance

and share the contract of :mod:`memcore.kernels.topk`: candidates are live rows with
``sim >= threshold``; float32 scores descending, ties by lower row id; padding id -1,
score -inf, sim -inf.

- :func:`flat_topk` scans every row with the fused kernel (one pass, no index).
- :func:`exact_topk` asks an index (FAISS or anything returning candidates in decreasing
  similarity) for the top ``m`` by similarity, re-ranks them, and doubles ``m`` until no unseen
  row can beat the k-th fused score. Unseen rows have ``sim <= sim_last`` (the smallest sim
  fetched), recency <= 1 and importance <= 1, so none can enter the top k once
  ``float32(w_similarity * sim_last + w_recency + w_importance) < kth_score``; the comparison
  is strict and in float32 so that an unseen row cannot even *tie* the k-th (a tie with a lower
  row id would win). The result then equals brute force over the index's own similarities.

Time (``now``) is resolved by the caller; this module never reads a clock.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Tuple, Union

import numpy as np

from memcore import kernels
from memcore.errors import DimensionMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from memcore.types import DecayWeights

__all__ = ["TopK", "SearchCandidates", "exact_topk", "flat_topk"]

#: ``search_candidates(m) -> (ids, sims)``: the top ``m`` rows by similarity for one query,
#: ``ids`` int64 of shape (m,) (``-1`` padding at the end when fewer exist), ``sims`` float32 of
#: shape (m,) in decreasing order, like ``faiss.Index.search(q[None], m)`` row 0.
SearchCandidates = Callable[[int], Tuple[np.ndarray, np.ndarray]]


class TopK(NamedTuple):
    """Result of a fused top-k.

    Attributes
    ----------
    ids : ndarray of shape (k,) or (n_queries, k), int64
        Row ids, best first; -1 pads.
    scores : ndarray of shape (k,) or (n_queries, k), float32
        Fused scores, descending; -inf pads.
    sims : ndarray of shape (k,) or (n_queries, k), float32
        Similarities of those rows; -inf pads.
    count : int or ndarray of shape (n_queries,), int64
        Filled slots (per query).
    n_candidates : int
        Rows examined: all rows for :func:`flat_topk`; the last ``m`` requested from the index
        for :func:`exact_topk`.
    """

    ids: np.ndarray
    scores: np.ndarray
    sims: np.ndarray
    count: Union[int, np.ndarray]
    n_candidates: int


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_time(now):
    try:
        now = float(now)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(f"now must be finite Unix seconds, got {now!r}") from err
    if not math.isfinite(now):
        raise InvalidArgumentError(f"now must be finite Unix seconds, got {now!r}")
    return now


def _check_threshold(threshold):
    try:
        thr = float(threshold)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(f"threshold must be a number or -inf, got {threshold!r}") from err
    if math.isnan(thr) or thr == math.inf:
        raise InvalidArgumentError(f"threshold must be a number or -inf, got {threshold!r}")
    return thr


def _check_weights(weights):
    if not isinstance(weights, DecayWeights):
        raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
    return weights


def _check_column(name, arr, dtype, n_rows):
    """Columns are indexed by row id: never copied (that would cost O(n) per query)."""
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1:
        got = f"{arr.dtype} {arr.ndim}-D" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise InvalidArgumentTypeError(f"{name} must be a 1-D {np.dtype(dtype)} ndarray, got {got}")
    if not arr.flags.c_contiguous:
        raise InvalidArgumentTypeError(f"{name} must be C-contiguous; convert it once with np.ascontiguousarray")
    if arr.shape[0] < n_rows:
        raise InvalidArgumentError(f"{name} has {arr.shape[0]} rows, but n_rows={n_rows}")
    return arr


def _empty(k, shape=()):
    return (np.full(shape + (k,), -1, np.int64), np.full(shape + (k,), -np.inf, np.float32),
            np.full(shape + (k,), -np.inf, np.float32))


def exact_topk(search_candidates: SearchCandidates, n_rows: int, k: int, *,
               last_accessed_at: np.ndarray, importance: np.ndarray, alive: np.ndarray,
               now: float, weights: DecayWeights, threshold: float = -1.0,
               initial_factor: int = 4) -> TopK:
    """Exact fused top-k from an index that returns candidates by decreasing similarity.

    Fetches ``m = min(n_rows, initial_factor * k)`` candidates, re-ranks them with the fused
    score (Park et al. 2023, half-life form) and stops as soon as no unseen row can beat the
    k-th score (``float32(w_similarity*sim_last + w_recency + w_importance) < kth_score``), the
    index ran out of rows, or ``sim_last < threshold``; otherwise doubles ``m`` and repeats. The
    result equals a brute-force ranking of all rows with the index's similarities.

    Parameters
    ----------
    search_candidates : callable ``(m: int) -> (ids, sims)``
        Top ``m`` rows by similarity for the query: ``ids`` int64 of shape (m,) (``-1``
        padding at the end), ``sims`` float32 of shape (m,) in decreasing order (FAISS
        ``index.search(query[None], m)`` row 0). Called with increasing ``m``.
    n_rows : int
        Rows in the index, >= 0; ``m`` never exceeds it.
    k : int
        Results wanted, >= 0.
    last_accessed_at : ndarray of shape (>= n_rows,), float64
        Unix seconds, indexed by row id.
    importance : ndarray of shape (>= n_rows,), float32
        In [0, 1] (the stopping bound relies on importance <= 1).
    alive : ndarray of shape (>= n_rows,), bool
        False for deleted rows still present in the index.
    now : float
        Unix seconds, resolved by the caller.
    weights : DecayWeights
    threshold : float, default -1.0
        Minimum similarity; ``-inf`` keeps every live row.
    initial_factor : int, default 4
        First fetch is ``initial_factor * k`` candidates (dead rows and recency reshuffles
        are absorbed without a second round in the common case).

    Returns
    -------
    TopK
        ``ids`` (k,) int64, ``scores`` (k,) float32, ``sims`` (k,) float32, ``count`` int,
        ``n_candidates`` the last ``m`` requested.

    Raises
    ------
    TypeError
        If ``weights`` is not a DecayWeights or a column has the wrong dtype or layout.
    ValueError
        If ``k``, ``n_rows`` or ``initial_factor`` is not a valid int, ``now`` is not finite,
        ``threshold`` is NaN or +inf, a column is shorter than ``n_rows``, or
        ``search_candidates`` returns mismatched shapes, ids outside ``[-1, n_rows)`` or sims
        that are not in decreasing order.

    Examples
    --------
    >>> index = faiss.IndexFlatIP(dim); index.add(vectors)
    >>> def cands(m):
    ...     sims, ids = index.search(query[None, :], m)
    ...     return ids[0], sims[0]
    >>> top = exact_topk(cands, index.ntotal, 5, last_accessed_at=t, importance=imp,
    ...                  alive=alive, now=1.7e9, weights=DecayWeights())
    """
    n_rows = _check_int("n_rows", n_rows, 0)
    k = _check_int("k", k, 0)
    initial_factor = _check_int("initial_factor", initial_factor, 1)
    now = _check_time(now)
    threshold = _check_threshold(threshold)
    w = _check_weights(weights)
    last_accessed_at = _check_column("last_accessed_at", last_accessed_at, np.float64, n_rows)
    importance = _check_column("importance", importance, np.float32, n_rows)
    alive = _check_column("alive", alive, np.bool_, n_rows)
    out_ids, out_scores, out_sims = _empty(k)
    if k == 0 or n_rows == 0:
        return TopK(out_ids, out_scores, out_sims, 0, 0)

    thr32 = np.float32(threshold)
    m = min(n_rows, initial_factor * k)
    while True:
        ids, sims = search_candidates(m)
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        sims = np.ascontiguousarray(sims, dtype=np.float32).reshape(-1)
        if ids.shape != sims.shape:
            raise InvalidArgumentError(f"search_candidates({m}) returned {ids.shape[0]} ids but "
                             f"{sims.shape[0]} sims; expected equal lengths")
        valid = ids >= 0
        n_valid = int(valid.sum())
        if n_valid and (ids[:n_valid] < 0).any():
            raise InvalidArgumentError(f"search_candidates({m}) returned -1 padding before valid ids; "
                             "expected padding only at the end")
        if n_valid and (ids[:n_valid] >= n_rows).any():
            raise InvalidArgumentError(f"search_candidates({m}) returned ids >= n_rows={n_rows}")
        valid_sims = sims[:n_valid]
        if n_valid > 1 and (valid_sims[1:] > valid_sims[:-1]).any():
            raise InvalidArgumentError(f"search_candidates({m}) returned sims not in decreasing order")
        count = int(kernels.rerank(ids, sims, w.w_similarity,
                                   (last_accessed_at, importance, now, w.half_life,
                                    w.w_recency, w.w_importance),
                                   alive, threshold, (out_ids, out_scores, out_sims)))
        if m >= n_rows or n_valid < m:
            break                                   # every row was seen
        sim_last = valid_sims[-1]
        if sim_last < thr32:
            break                                   # unseen rows are all below the threshold
        if count == k:
            bound = np.float32(w.w_similarity * np.float64(sim_last) + w.w_recency
                               + w.w_importance)
            if bound < out_scores[k - 1]:
                break                               # no unseen row can reach the k-th score
        m = min(n_rows, 2 * m)
    return TopK(out_ids, out_scores, out_sims, count, m)


def flat_topk(queries: np.ndarray, vectors: np.ndarray, last_accessed_at: np.ndarray,
              importance: np.ndarray, alive: np.ndarray, k: int, *, now: float,
              weights: DecayWeights, threshold: float = -1.0) -> TopK:
    """Exact fused top-k by scanning every row once with the fused kernel.

    Runs :func:`memcore.kernels.fused_topk` (once per query), serial or parallel by size,
    with the weights of a :class:`DecayWeights` (Park et al. 2023 score, half-life form).

    Parameters
    ----------
    queries : ndarray of shape (dim,) or (n_queries, dim), float32
        Unit-norm; converted to C-contiguous float32 (queries are small).
    vectors : ndarray of shape (n, dim), float32
        C-contiguous (never copied here); may be read-only / memory-mapped.
    last_accessed_at : ndarray of shape (n,), float64
        Unix seconds.
    importance : ndarray of shape (n,), float32
        In [0, 1].
    alive : ndarray of shape (n,), bool
    k : int
        Results per query, >= 0.
    now : float
        Unix seconds, resolved by the caller.
    weights : DecayWeights
    threshold : float, default -1.0
        Minimum similarity; ``-inf`` keeps every live row.

    Returns
    -------
    TopK
        Arrays of shape (k,) for a 1-D query (``count`` int), (n_queries, k) for 2-D
        (``count`` int64 array of shape (n_queries,)); ``n_candidates`` is n.

    Raises
    ------
    TypeError
        If ``weights`` is not a DecayWeights, or ``vectors`` or a column has the wrong dtype
        or is not C-contiguous.
    DimensionMismatchError
        If the queries' dim differs from ``vectors.shape[1]``.
    ValueError
        If ``k`` is not an int >= 0, ``now`` is not finite, ``threshold`` is NaN or +inf, or a
        column's length differs from n.

    Examples
    --------
    >>> top = flat_topk(query, vectors, t, imp, alive, 5, now=1.7e9, weights=DecayWeights())
    >>> top.ids.shape
    (5,)
    """
    k = _check_int("k", k, 0)
    now = _check_time(now)
    threshold = _check_threshold(threshold)
    w = _check_weights(weights)
    if (not isinstance(vectors, np.ndarray) or vectors.dtype != np.float32
            or vectors.ndim != 2 or not vectors.flags.c_contiguous):
        got = (f"{vectors.dtype} {vectors.ndim}-D, c_contiguous={vectors.flags.c_contiguous}"
               if isinstance(vectors, np.ndarray) else type(vectors).__name__)
        raise InvalidArgumentTypeError(f"vectors must be a 2-D C-contiguous float32 ndarray, got {got}; "
                        "convert it once with np.ascontiguousarray(vectors, np.float32)")
    n, dim = vectors.shape
    for name, arr, dtype in (("last_accessed_at", last_accessed_at, np.float64),
                             ("importance", importance, np.float32), ("alive", alive, np.bool_)):
        _check_column(name, arr, dtype, n)
        if arr.shape[0] != n:
            raise InvalidArgumentError(f"{name} has {arr.shape[0]} rows, but vectors has {n}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if q.ndim not in (1, 2) or q.shape[-1] != dim:
        raise DimensionMismatchError(
            f"queries must have shape (dim,) or (n_queries, dim) with dim={dim}, got {q.shape}")
    args = (vectors, w.w_similarity, (last_accessed_at, importance, now, w.half_life,
                                      w.w_recency, w.w_importance), alive, threshold)
    if q.ndim == 1:
        out = _empty(k)
        count = int(kernels.fused_topk(q, *args, out))
    else:
        out = _empty(k, (q.shape[0],))
        count = np.array([kernels.fused_topk(q[j], *args, (out[0][j], out[1][j], out[2][j]))
                          for j in range(q.shape[0])], np.int64)
    return TopK(out[0], out[1], out[2], count, n)
