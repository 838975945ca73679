"""The hit score of hybrid recall, mapped into (0, 1).

Hybrid recall ranks by a fused z-score (:mod:`memcore.recall.index`): a weighted sum of
signals z-normalised over the namespace's memories, plus the speaker boost and the decay
terms; unbounded, and scaled by the weights. What a search *returns* as
:attr:`memcore.MemoryHit.score` is a monotone transform of it, applied to the ranked hits,
so the ranking is the fused score's:

    score = Phi(u),    u = fused / weight_scale(weights)

``weight_scale`` is the sum of the hybrid weights (dense, lexical, lexical context, speaker;
at least 1), so ``u`` is the weighted *mean* of the signals' z-scores (the speaker boost
counts 1 for a named speaker), and ``Phi`` is the standard normal CDF. Reading: 0.5 is a
memory as relevant as the namespace's average for this query; 0.84 one standard deviation
above it on every signal; towards 1 far above. In (0, 1) whatever the weights.

Rejected: Platt scaling on LoCoMo dev (a logistic fitted to "the hit is an evidence turn",
``a = 1.62, b = -6.39`` on ``u``): calibrated there, but a memory identical to the query in
a ten-memory store then reads 0.015 -- the very complaint of issue 18 -- because LoCoMo's
evidence labels are strict and its base rate low.

The similarity preset (``HybridWeights.similarity()``, and any weights with
``normalize=False``) keeps the fused decay score of :class:`memcore.DecayWeights`
unchanged: ``w_similarity * sim + w_recency * recency + w_importance * importance``, in
``[-w_similarity, w_similarity + w_recency + w_importance]``.

``similarity`` is always the cosine of the query's vector and the memory's own vector, and
a search's ``threshold`` always bounds it, on every preset (OM1's 0.3 means the same
everywhere).

``search(..., explain=True)`` sets :attr:`memcore.MemoryHit.explanation` (:func:`explained`):
the terms of ``fused`` one by one, their z statistics, and ``score`` from ``fused`` as above.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from memcore.recall.weights import HybridWeights

__all__ = ["weight_scale", "calibrate", "calibrated", "explained"]


def weight_scale(weights: HybridWeights) -> float:
    """``max(1, dense + lexical + lexical_context + speaker)`` of the effective weights.

    Examples
    --------
    >>> weight_scale(HybridWeights.hybrid())
    4.5
    """
    return max(1.0, float(weights.dense + weights.lexical + weights.lexical_context
                          + weights.speaker))


def calibrate(fused, weights: HybridWeights) -> np.ndarray:
    """The returned score of hits ranked by ``fused`` under ``weights`` (module notes).

    Parameters
    ----------
    fused : array_like of shape (n,), float
        Fused ranking scores, best first.
    weights : HybridWeights
        The effective weights of the search.

    Returns
    -------
    ndarray of shape (n,), float64
        ``Phi(fused / weight_scale(weights))`` in [0, 1] (open for finite input) and
        non-increasing when ``weights.normalize``; ``fused`` unchanged (float64) otherwise.

    Examples
    --------
    >>> s = calibrate([9.0, 3.0, 0.0, -1.0], HybridWeights.hybrid())
    >>> bool(np.all((0 < s) & (s < 1)) and np.all(np.diff(s) <= 0)), float(s[2])
    (True, 0.5)
    >>> calibrate([0.5], HybridWeights.similarity()).tolist()
    [0.5]
    """
    x = np.asarray(fused, np.float64)
    if not weights.normalize:
        return x
    scale = weight_scale(weights) * math.sqrt(2.0)
    return np.array([0.5 * math.erfc(-v / scale) for v in x.ravel()],
                    np.float64).reshape(x.shape)


def calibrated(hits: Sequence[Any], rq: Any) -> list:
    """``hits`` (MemoryHit, ranked by the fused score of the resolved query ``rq``) with the
    returned score: :func:`calibrate` when ``rq`` ranked by hybrid recall (a prepared query
    and z-normalised weights), unchanged otherwise (the similarity preset, a lexical scorer).

    Examples
    --------
    >>> calibrated([], None)
    []
    """
    hits = list(hits)
    if not hits or rq.prepared is None or not rq.hybrid.normalize:
        return hits
    scores = calibrate([h.score for h in hits], rq.hybrid)
    return [replace(h, score=float(s)) for h, s in zip(hits, scores)]


def explained(hits: Sequence[Any], fused: Sequence[float], terms: Sequence[dict | None],
              rq: Any) -> list:
    """``hits`` (calibrated, as returned) with :attr:`~memcore.MemoryHit.explanation` set.

    Parameters
    ----------
    hits : sequence of MemoryHit
        The returned hits.
    fused : sequence of float
        Their fused ranking scores (before :func:`calibrated`).
    terms : sequence of dict or None
        Hybrid recall: :meth:`memcore.recall.index.HybridIndex.explain` of each hit (the
        z statistics the ranking used); None: the decay score of the similarity preset,
        read from the hit.
    rq : ResolvedQuery

    Returns
    -------
    list of MemoryHit
        Each with ``explanation`` a dict: ``preset`` (``"hybrid"`` or ``"similarity"``),
        ``contributions`` (name -> term, fused-score units; they sum to ``fused``),
        ``signals`` (name -> raw value), ``weights`` (name -> weight), ``normalisation``
        (hybrid: ``dense``/``lexical``/``lexical_context`` -> ``{"mean", "std"}``, the z
        statistics), ``fused``, ``weight_scale`` (hybrid with ``normalize``: the
        :func:`weight_scale`; else None) and ``score`` (the hit's: ``Phi(fused /
        weight_scale)``, or ``fused`` itself without normalisation). Hybrid names: ``dense``,
        ``lexical``, ``lexical_context``, ``speaker``, ``recency``, ``importance`` (and
        ``diversity``, the episode-diversity penalty, when ``diversity > 0``); similarity
        preset: ``similarity``, ``recency``, ``importance`` (Park et al. 2023).

    Examples
    --------
    >>> explained([], [], [], None)
    []
    """
    out = []
    for h, f, t in zip(hits, fused, terms):
        if t is None:
            w = rq.weights
            sig = {"similarity": float(h.similarity), "recency": float(h.recency),
                   "importance": float(h.importance)}
            wt = {"similarity": float(w.w_similarity), "recency": float(w.w_recency),
                  "importance": float(w.w_importance)}
            con = {k: wt[k] * sig[k] for k in sig}
            e = {"preset": "similarity", "contributions": con, "signals": sig, "weights": wt,
                 "normalisation": {}, "fused": sum(con.values()), "weight_scale": None}
        else:
            e = dict(t, preset="hybrid", contributions=dict(t["contributions"]))
            if rq.hybrid.diversity > 0.0:     # the penalty the diversity pass subtracted
                e["contributions"]["diversity"] = float(f) - t["fused"]
                e["fused"] = sum(e["contributions"].values())
            e["weight_scale"] = weight_scale(rq.hybrid) if rq.hybrid.normalize else None
        e["score"] = float(h.score)
        out.append(replace(h, explanation=e))
    return out
