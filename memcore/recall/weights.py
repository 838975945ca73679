"""Weights of hybrid recall: :class:`HybridWeights` and its presets, the default for an
embedder (:func:`default_for`), and the weights that rank several indexes as one
(:func:`pooled_weights`).

The score they weigh is described in :mod:`memcore.recall.index`; decay terms (recency,
importance) come from :class:`~memcore.DecayWeights`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import numpy as np

from memcore.embedders.hashing import HashingEmbedder
from memcore.errors import InvalidArgumentError

__all__ = ["HybridWeights", "MAX_WINDOW", "default_for", "pooled_moments", "pooled_weights"]

#: Largest episode window radius (neighbours on each side) a query may ask for; the window
#: column holds every row's radius-MAX_WINDOW neighbourhood in episode order.
MAX_WINDOW = 4


#: Fields of :meth:`HybridWeights.no_model`.
NO_MODEL_FIELDS = dict(dense=0.5, lexical=0.25, lexical_context=1.0, speaker=2.0, alpha=0.4,
                       dense_window=2, lexical_window=2, k1=2.0, b=0.75, stem=True)



@dataclass(frozen=True)
class HybridWeights:
    """Weights of hybrid recall. Decay terms (recency, importance) come from
    :class:`~memcore.DecayWeights`.

    ``HybridWeights.hybrid()`` (the defaults, for MiniLM): dense weighs most, the BM25 of the
    +-2 context window three times the memory's own BM25, a strong speaker boost (added in z
    units), stemmed BM25 with ``k1 = 0.6`` and ``b = 0.5``, and a context similarity with
    ``alpha = 0.4`` of the memory's own similarity and 0.6 of the mean over its +-2
    neighbours'. ``HybridWeights.no_model()`` is the same search for the hashing embedder (BM25
    weighs more). ``HybridWeights.similarity()`` is pure cosine (the OM1 contract): ranking
    identical to :class:`~memcore.DecayWeights` alone. How the presets were chosen (LoCoMo
    dev) and what each option measured: ``bench/results``.

    Parameters
    ----------
    dense, lexical, lexical_context, speaker : float
        Non-negative finite weights.
    alpha : float
        Share of the memory's own similarity in its context similarity, in [0, 1] (the
        context vector ``alpha * v + (1 - alpha) * window mean``, never stored).
    dense_window, lexical_window : int
        Episode neighbours on each side in the dense window mean and the lexical window
        document, in [0, :data:`MAX_WINDOW`]. Like alpha, k1 and b, a query-time choice.
    k1, b : float
        BM25 parameters (k1 in [0, 100], b in [0, 1]).
    normalize : bool
        z-normalise each signal per query (True) or use raw values (the similarity preset).
    stem : bool
        BM25 over Snowball-stemmed English words (documents and queries; PyStemmer), so
        "adopted" matches "adopt" (:mod:`memcore.recall.words`).
    diversity : float
        Episode diversity (:mod:`memcore.recall.diversity`): each hit's fused score less
        this much per better hit already within its episode window; 0 (the default: no gain
        out of sample, ``bench/results/loo-20261202.md``) turns it off.
    diversity_window : int
        That window's radius, in [0, :data:`MAX_WINDOW`].
    dates : bool
        Index each memory's ``created_at`` day as words in its BM25 document (``"8 may
        2023"``, UTC; :func:`~memcore.recall.words.date_words`), so a query naming a day,
        month or year ("in June", "on 13 October, 2023", "in 2022") matches what was stored
        then, in its own text and in its episode window's. On by default
        (``bench/results/loo-ideas-20261202.md``). Part of the index's content
        (:meth:`structure`): stores read ``created_at`` from their column; a
        :class:`~memcore.recall.index.HybridIndex` of its own takes ``created_at=`` in
        :meth:`~memcore.recall.index.HybridIndex.put`.

    Raises
    ------
    ValueError
        Naming the field, for a negative/non-finite weight or an out-of-range parameter (a
        window above :data:`MAX_WINDOW` included).

    Examples
    --------
    >>> HybridWeights.similarity().lexical
    0.0
    """

    dense: float = 1.5
    lexical: float = 0.25
    lexical_context: float = 0.75
    speaker: float = 2.0
    alpha: float = 0.4
    dense_window: int = 2
    lexical_window: int = 2
    k1: float = 0.6
    b: float = 0.5
    normalize: bool = True
    stem: bool = True
    diversity: float = 0.0
    diversity_window: int = 1
    dates: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("normalize", "stem", "dates"):
                if not isinstance(v, bool):
                    raise InvalidArgumentError(f"HybridWeights.{f.name} must be a bool, got {v!r}")
                continue
            if f.name in ("dense_window", "lexical_window", "diversity_window"):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) \
                        or not 0 <= v <= MAX_WINDOW:
                    raise InvalidArgumentError(
                        f"HybridWeights.{f.name} must be an int in [0, {MAX_WINDOW}] (the "
                        f"episode window radius the index stores), got {v!r}")
                continue
            hi = {"alpha": 1.0, "b": 1.0, "k1": 100.0}.get(f.name, math.inf)
            if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
                    or not 0.0 <= v <= hi):
                raise InvalidArgumentError(f"HybridWeights.{f.name} must be finite and in [0, {hi}], "
                                 f"got {v!r}")

    @classmethod
    def hybrid(cls) -> "HybridWeights":
        """The default: BM25 + dense + episodic context + speaker boost, z-normalised."""
        return cls()

    @classmethod
    def similarity(cls) -> "HybridWeights":
        """Pure cosine of the memory's own embedding (plus the DecayWeights terms)."""
        return cls(dense=1.0, lexical=0.0, lexical_context=0.0, speaker=0.0, alpha=1.0,
                   dense_window=0, lexical_window=0, normalize=False, stem=False, dates=False)

    @classmethod
    def no_model(cls) -> "HybridWeights":
        """For the hashing embedder (no neural model): BM25 and its context weigh more."""
        return cls(**NO_MODEL_FIELDS)

    @property
    def is_similarity(self) -> bool:
        """True when only the memory's own cosine counts (no lexical, context, boost or z):
        stores then rank exactly as with :class:`~memcore.DecayWeights` alone."""
        return (self.lexical == 0.0 and self.lexical_context == 0.0 and self.speaker == 0.0
                and self.alpha == 1.0 and not self.normalize and self.diversity == 0.0)

    def structure(self) -> tuple:
        """The fields fixing a :class:`~memcore.recall.index.HybridIndex`'s content:
        ``(stem, dates)`` (alpha, windows up to :data:`MAX_WINDOW`, k1 and b are query-time)."""
        return (bool(self.stem), bool(self.dates))

    @classmethod
    def for_structure(cls, structure: tuple) -> "HybridWeights":
        """The default weights with a :meth:`structure` (a restored or rebuilt index's).

        Examples
        --------
        >>> HybridWeights.for_structure((True, False)).structure()
        (True, False)
        """
        return cls(stem=bool(structure[0]), dates=bool(structure[1]))



def default_for(embedder: Any) -> HybridWeights:
    """The default hybrid weights for an embedder: :meth:`HybridWeights.no_model` for the
    hashing embedder (no neural model), :meth:`HybridWeights.hybrid` otherwise.

    Examples
    --------
    >>> from memcore.embedders import HashingEmbedder
    >>> default_for(HashingEmbedder()) == HybridWeights.no_model()
    True
    """
    return HybridWeights.no_model() if isinstance(embedder, HashingEmbedder) \
        else HybridWeights.hybrid()



def pooled_moments(moments: Sequence[np.ndarray]) -> np.ndarray:
    """The moments of several indexes' signals as one population (Chan et al.'s parallel
    update).

    Parameters
    ----------
    moments : sequence of ndarray of shape (3, 3), float64
        :meth:`~memcore.recall.index.HybridIndex.moments` of each index (rows dense, lexical,
        lexical context; columns count, mean, M2).

    Returns
    -------
    ndarray of shape (3, 3), float64
        The same layout over the union.

    Examples
    --------
    >>> a = np.array([[2, 0.0, 2.0]] * 3)
    >>> pooled_moments([a, a]).tolist()[0]
    [4.0, 0.0, 4.0]
    """
    n = np.zeros(3)
    mean = np.zeros(3)
    m2 = np.zeros(3)
    for mo in moments:
        nb, mb, m2b = mo[:, 0], mo[:, 1], mo[:, 2]
        tot = n + nb
        delta = mb - mean
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(tot > 0, nb / np.where(tot > 0, tot, 1.0), 0.0)
        mean = mean + delta * frac
        m2 = m2 + m2b + delta * delta * n * frac
        n = tot
    return np.stack([n, mean, m2], axis=1)


def pooled_weights(weights: HybridWeights, moments: Sequence[np.ndarray],
                   w_similarity: float = 1.0) -> tuple[HybridWeights, float]:
    """Weights that rank several indexes (e.g. two tiers) as one, z over their union.

    ``z(x) = (x - mean) / std`` with the pooled mean and population std is affine, so
    ``weights`` with ``normalize=True`` over the union equals un-normalised weights
    ``w_s / std_s`` on the raw signals plus one constant, ``-sum_s w_s mean_s / std_s``, the
    same for every memory: each index ranks with the returned weights, and adding the
    constant to their scores gives the union's z-scores.

    Parameters
    ----------
    weights : HybridWeights
        With ``normalize=True`` (else returned unchanged with offset 0.0).
    moments : sequence of ndarray of shape (3, 3), float64
        :meth:`~memcore.recall.index.HybridIndex.moments` of each index.
    w_similarity : float, default 1.0
        The DecayWeights factor the stores apply to the dense weight (enters the offset).

    Returns
    -------
    weights : HybridWeights
        ``normalize=False``, signal weights divided by the pooled std (0 where std is 0).
    offset : float
        Add to each returned score.

    Examples
    --------
    >>> m = np.array([[2, 0.5, 0.02], [2, 1.0, 2.0], [2, 1.0, 2.0]], np.float64)
    >>> w, off = pooled_weights(HybridWeights(), [m])
    >>> round(w.dense, 3), round(off, 3)        # -(1.5 * 0.5 / 0.1 + 0.25 + 0.75)
    (15.0, -8.5)
    """
    if not weights.normalize:
        return weights, 0.0
    n, mean, m2 = pooled_moments(moments).T
    std = np.sqrt(np.where(n > 0, m2 / np.where(n > 0, n, 1.0), 0.0))
    base = np.array([weights.dense * w_similarity, weights.lexical, weights.lexical_context])
    scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 0.0)
    offset = -float((base * mean * scale).sum())
    raw = np.array([weights.dense, weights.lexical, weights.lexical_context]) * scale
    return replace(weights, dense=float(raw[0]), lexical=float(raw[1]),
                   lexical_context=float(raw[2]), normalize=False), offset
