"""Episode diversity for hybrid recall: spread the hits over the conversation.

The episode-context signals of hybrid recall (:mod:`memcore.recall.index`) give a memory's
neighbours in its episode nearly its own score, so the top hits of a question whose answer is
spread over several sessions ("what activities does Melanie do?") are often one session's
adjacent turns. :func:`diversify` re-ranks the fused top candidates greedily: each pick is
the candidate with the highest

    fused - diversity * (number of hits picked so far within its episode window)

(the window of radius ``diversity_window``, the layout of :meth:`HybridIndex.windows`). The
penalised score of each pick is what the hit carries, and it is non-increasing along the
picks (penalties only grow), so hits stay best first by their own score. A greedy
window-count penalty in the spirit of maximal marginal relevance (Carbonell and Goldstein
1998) with a structural, not a vector, redundancy; measured on LoCoMo dev by leave-one-
conversation-out (``python -m bench.loo --grid diverse``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["diversify", "pool_size"]


def pool_size(top_k: int, live: int) -> int:
    """Candidates the fused scan returns before :func:`diversify`: ``max(3 * top_k,
    top_k + 20)``, at most ``live``.

    Examples
    --------
    >>> pool_size(10, 1000), pool_size(10, 15)
    (30, 15)
    """
    return int(min(live, max(3 * top_k, top_k + 20)))


def diversify(rows: np.ndarray, scores: np.ndarray, sims: np.ndarray, win_start: np.ndarray,
              win_len: np.ndarray, win_rows: np.ndarray, weight: float, top_k: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy episode-window diversity over ranked candidates (module notes).

    Parameters
    ----------
    rows : ndarray of shape (m,), int64
        Candidate rows, best first by ``scores``.
    scores, sims : ndarray of shape (m,), float32
        Their fused scores and own similarities.
    win_start, win_len : ndarray of shape (n_rows,), int64
    win_rows : ndarray, int32
        The episode windows (:meth:`memcore.recall.index.HybridIndex.windows`).
    weight : float
        Penalty per picked hit in a candidate's window, in score units (>= 0).
    top_k : int
        Picks to make.

    Returns
    -------
    rows, scores, sims : ndarrays of shape (min(m, top_k),)
        The picks in order; ``scores`` the penalised fused scores (float32, non-increasing).

    Examples
    --------
    >>> ws, wl = np.array([0, 0, 0]), np.array([2, 3, 2])
    >>> wr = np.array([0, 1, 2])   # one episode 0-1-2; windows of radius 1
    >>> r, s, _ = diversify(np.array([0, 1, 2]), np.array([3.0, 2.9, 1.0], np.float32),
    ...                     np.zeros(3, np.float32), ws, wl, wr, 2.5, 2)
    >>> r.tolist()
    [0, 2]
    """
    m = rows.shape[0]
    k = min(int(top_k), m)
    if weight <= 0.0 or m <= 1:
        return rows[:k], scores[:k], sims[:k]
    where = {int(r): i for i, r in enumerate(rows)}
    pen = np.zeros(m, np.float64)
    free = np.ones(m, np.bool_)
    base = scores.astype(np.float64)
    out = np.empty(k, np.int64)
    val = np.empty(k, np.float64)
    for j in range(k):
        s = np.where(free, base - weight * pen, -np.inf)
        b = int(np.argmax(s))          # first of equals: the better-ranked candidate
        out[j], val[j] = b, s[b]
        free[b] = False
        p = int(rows[b])
        a = int(win_start[p])
        for r in win_rows[a:a + int(win_len[p])].tolist():
            i = where.get(int(r))
            if i is not None and i != b:
                pen[i] += 1.0
    return rows[out], val.astype(np.float32), sims[out]
