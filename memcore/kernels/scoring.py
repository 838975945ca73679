"""The ranking formula as numba kernels: similarity + recency decay + importance.

memcore scores a memory the way Generative Agents does (Park et al. 2023, "Generative Agents:
Interactive Simulacra of Human Behavior", UIST '23: relevance + recency + importance), with
the exponential recency decay written as a half-life::

    score = w_sim * sim + w_rec * 2 ** (-age / half_life) + w_imp * importance
    age   = max(now - last_accessed_at, 0)          # seconds; the future counts as age 0

The score is computed in float64 (left to right, exactly as written above) and rounded once to
float32. :func:`fused_score` is the single place the formula lives; every kernel that ranks
(:mod:`memcore.kernels.topk`) calls it, so all of them agree bit for bit given the same ``sim``.

Kernels are pure: arrays and scalars in, preallocated arrays out, no globals, ``cache=True`` and
no ``fastmath`` (a NaN timestamp must stay NaN rather than be optimised away). Read-only
(memory-mapped) inputs are accepted. The NumPy oracles live in :mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["recency", "fused_score", "decay_scores"]


@numba.njit(cache=True)
def recency(age, half_life):
    """Recency weight ``2 ** (-age / half_life)`` of one memory, in (0, 1].

    Parameters
    ----------
    age : float
        Seconds since the memory was last accessed; negative ages (timestamps in the future)
        count as 0.
    half_life : float
        Seconds after which recency halves; must be > 0 (the caller validates).

    Returns
    -------
    float
        ``1.0`` at ``age <= 0``, exactly ``0.5`` at ``age == half_life``, decreasing to 0
        (Park et al. 2023 decay, half-life form).

    Raises
    ------
    Nothing: a kernel does not validate; :class:`memcore.DecayWeights` does.

    Examples
    --------
    >>> recency(3600.0, 3600.0)
    0.5
    """
    if age < 0.0:
        age = 0.0
    return np.exp2(-age / half_life)


@numba.njit(cache=True)
def fused_score(sim, last_accessed_at, importance, now, half_life, w_sim, w_rec, w_imp):
    """Fused score of one memory in float64 (round it to float32 to rank).

    ``w_sim * sim + w_rec * 2 ** (-max(now - last_accessed_at, 0) / half_life)
    + w_imp * importance`` (Park et al. 2023, half-life form), evaluated left to right.

    Parameters
    ----------
    sim : float32
        Cosine similarity (inner product of unit vectors), in [-1, 1].
    last_accessed_at, now : float64
        Unix seconds.
    importance : float32
        In [0, 1].
    half_life : float64
        Seconds, > 0.
    w_sim, w_rec, w_imp : float64
        Non-negative weights.

    Returns
    -------
    float64

    Raises
    ------
    Nothing: inputs are validated by the caller (``memcore``), never here.

    Examples
    --------
    >>> fused_score(np.float32(1.0), 0.0, np.float32(0.5), 10.0, 10.0, 1.0, 1.0, 1.0)
    2.0
    """
    rec = recency(now - last_accessed_at, half_life)
    return w_sim * np.float64(sim) + w_rec * rec + w_imp * np.float64(importance)


@numba.njit(cache=True)
def decay_scores(sims, last_accessed_at, importance, now, half_life, w_sim, w_rec, w_imp, out):
    """Fused score of each row given its similarity (Park et al. 2023, half-life form).

    ``out[i] = float32(w_sim * sims[i] + w_rec * 2 ** (-max(now - last_accessed_at[i], 0)
    / half_life) + w_imp * importance[i])``, computed in float64.

    Parameters
    ----------
    sims : ndarray of shape (m,), float32
        Cosine similarities in [-1, 1].
    last_accessed_at : ndarray of shape (m,), float64
        Unix seconds; timestamps after ``now`` count as age 0.
    importance : ndarray of shape (m,), float32
        In [0, 1].
    now : float
        Unix seconds, resolved by the caller.
    half_life : float
        Seconds, > 0.
    w_sim, w_rec, w_imp : float
        Non-negative weights (see :class:`memcore.DecayWeights`).
    out : ndarray of shape (m,), float32
        Written in place (may be a fresh array; never one of the inputs you want to keep).

    Returns
    -------
    out : ndarray of shape (m,), float32

    Raises
    ------
    Nothing: mismatched lengths are the caller's error (numba does not bounds-check).

    Examples
    --------
    >>> out = np.empty(1, np.float32)
    >>> decay_scores(np.ones(1, np.float32), np.zeros(1), np.zeros(1, np.float32),
    ...              3600.0, 3600.0, 1.0, 1.0, 0.0, out)
    array([1.5], dtype=float32)
    """
    for i in range(sims.shape[0]):
        out[i] = np.float32(fused_score(sims[i], last_accessed_at[i], importance[i], now,
                                        half_life, w_sim, w_rec, w_imp))
    return out
