"""The dense moment sums :class:`~memcore.stores.postgres.PostgresMemory` keeps in SQL for its
stateless hybrid search (``memcore_moments``): per namespace and (alpha, radius) the float64
sums ``sum c`` and ``sum c c^T`` of its rows' context vectors ``c_i = alpha * v_i + (1 - alpha)
* mean(v_j, j in W_r(i))`` (``W_r(i)``: the row's radius-r window in episode order, the row
alone without an episode; the own vectors ``v_i`` for radius 0), as
:class:`~memcore.recall.index.HybridIndex` keeps them (:mod:`memcore.kernels.moments`), so the
dense z statistics of a query are O(dim^2) (no pass over the rows).

A write changes the windows of the rows within ``r`` places of a removed row (a delete, or a
replaced row leaving its place) and of the last ``r`` rows of an episode that gains rows
(appended at its end): :func:`update` subtracts those rows' context vectors computed over the
episode as it was and adds them (and the new rows') over the episode as it is after, from
the rows within ``2 r`` places of each change (the store reads them before the write),
O(window) per changed row, the same bookkeeping as the embedded index's.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from memcore.recall.index import HybridIndex
from memcore.recall.namespace import episode_speaker
from memcore.recall.weights import HybridWeights

#: Rows up to which a sums update is an einsum rather than a BLAS product.
_SMALL_UPDATE = 16

__all__ = ["key_of", "episode_of", "update", "from_rows", "stats"]


def key_of(w: HybridWeights) -> tuple[float, int]:
    """The (alpha, radius) of the sums a hybrid query's dense z statistics need ((1.0, 0):
    the own similarity)."""
    r = HybridIndex._dense_radius(w)
    return (1.0, 0) if r == 0 else (float(w.alpha), r)


def episode_of(metadata: dict | None) -> Any:
    """A row's episode as the hybrid index keys it (None: the row is its own window)."""
    ep = episode_speaker(metadata)[0]
    if isinstance(ep, float) and ep.is_integer():
        ep = int(ep)                        # 3 and 3.0 are one episode, as in the index
    return None if ep is None else (type(ep).__name__, ep)


def _context(V: np.ndarray, at: Sequence[int], alpha: float, r: int) -> np.ndarray:
    """(len(at), dim) float64: the context vectors of positions ``at`` of an episode whose
    rows' vectors are ``V`` (in episode order)."""
    X = V[list(at)].astype(np.float64)
    if r == 0 or not len(at):
        return X
    n = V.shape[0]
    M = np.stack([V[max(0, p - r):min(n, p + r + 1)].astype(np.float64).mean(axis=0)
                  for p in at])
    return alpha * X + (1.0 - alpha) * M


def _add(sums: tuple, C: np.ndarray, sign: float | np.ndarray) -> None:
    """``sums += sign * (sum c, sum c c^T)`` over the rows ``c`` of ``C`` (``sign``: one, or
    one per row)."""
    if C.shape[0]:
        c1, c2 = sums                       # in place
        S = sign * C if np.ndim(sign) == 0 else np.asarray(sign)[:, None] * C
        c1 += S.sum(axis=0)
        # a write's few rows: einsum, not BLAS (as the embedded index: OpenBLAS wakes its
        # threads even for a (k, 384) product, and on a busy machine they spin)
        c2 += S.T @ C if C.shape[0] > _SMALL_UPDATE else np.einsum("ki,kj->ij", S, C)


def update(sums: tuple, alpha: float, r: int, before: dict, removed: dict,
           added: Sequence[tuple]) -> None:
    """Apply a write to ``sums`` (``(c1 (dim,), c2 (dim, dim))`` float64, in place).

    Parameters
    ----------
    sums : tuple of ndarray
    alpha, r : float, int
        The sums' key.
    before : dict
        Episode (:func:`episode_of`, not None) -> list of ``(key, vector)`` in episode order:
        the rows within ``2 r`` places of each removed row of the episode and, for an
        episode that gains rows, its last ``2 r`` rows, before the write.
    removed : dict
        key -> (episode, vector) of the rows that leave their place (deleted or replaced).
    added : sequence of (key, episode, vector)
        Rows appended, in write order (a replaced row is removed, then added).
    """
    blocks: list = []                       # (context vectors, sign): one product at the end
    for ep, v in removed.values():          # a row without an episode is its own window
        if ep is None:
            blocks.append((_context(np.asarray(v)[None, :], [0], alpha, r), -1.0))
    for k, ep, v in added:
        if ep is None:
            blocks.append((_context(np.asarray(v)[None, :], [0], alpha, r), 1.0))
    by_ep: dict = {}
    for _, e, v in added:
        by_ep.setdefault(e, []).append(v)
    for ep, rows in before.items():
        keys = [k for k, _ in rows]
        new = by_ep.get(ep, [])
        hit = set()
        for p, k in enumerate(keys):
            if k in removed:
                hit.update(range(max(0, p - r), min(len(keys), p + r + 1)))
        if new:
            hit.update(range(max(0, len(keys) - r), len(keys)))
        hit = sorted(hit)
        if rows:
            blocks.append((_context(np.stack([v for _, v in rows]), hit, alpha, r), -1.0))
        kept = [p for p in range(len(keys)) if keys[p] not in removed]
        pos = {p: i for i, p in enumerate(kept)}
        after = [rows[p][1] for p in kept] + new
        if after:
            at = [pos[p] for p in hit if p in pos] + list(range(len(kept), len(after)))
            blocks.append((_context(np.stack(after), at, alpha, r), 1.0))
    if blocks:
        _add(sums, np.concatenate([C for C, _ in blocks]),
             np.concatenate([np.full(C.shape[0], sg) for C, sg in blocks]))


def from_rows(rows: Sequence[tuple], alpha: float, r: int, dim: int) -> tuple:
    """The sums over every row: ``rows`` are ``(episode, vector)`` in write order."""
    sums = (np.zeros(dim), np.zeros((dim, dim)))
    eps: dict = {}
    for ep, v in rows:
        eps.setdefault(ep if ep is not None else object(), []).append(v)
    for vs in eps.values():
        V = np.stack(vs)
        for a in range(0, V.shape[0], 16384):
            _add(sums, _context(V, range(a, min(a + 16384, V.shape[0])), alpha, r), 1.0)
    return sums


def stats(sums: tuple, q: np.ndarray, n: int) -> tuple[float, float, float]:
    """Count, mean and M2 of ``q . c`` over the ``n`` rows summed
    (:meth:`HybridIndex.sum_moments`)."""
    return HybridIndex.sum_moments(sums[0], sums[1], np.asarray(q, np.float32), n)
