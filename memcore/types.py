"""memcore's public value types.

These are plain frozen dataclasses: the stores return them and never keep references to them,
so a caller may hold on to a result as long as it likes.
"""

from __future__ import annotations

import enum
import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Tuple, Union

from memcore.errors import InvalidArgumentError

__all__ = [
    "Clock",
    "Namespace",
    "NamespaceLike",
    "DecayWeights",
    "MemoryTier",
    "MemoryItem",
    "StoredMemory",
    "MemoryQuery",
    "MemoryHit",
    "PromotionPolicy",
    "system_clock",
]

#: A callable returning the current time as Unix seconds (float). Inject one for tests.
Clock = Callable[[], float]

#: A namespace: a tuple of non-empty str segments, e.g. ``("robot", "patrol")``.
Namespace = Tuple[str, ...]
#: What the public API accepts as a namespace: a str (one segment) or a tuple of segments.
NamespaceLike = Union[str, Tuple[str, ...]]


def system_clock() -> float:
    """The default clock: ``time.time()``, Unix seconds."""
    return time.time()


#: 0.995 per hour (Park et al. 2023) as a half-life: ln(0.5) / ln(0.995) hours, in seconds.
GENERATIVE_AGENTS_HALF_LIFE = math.log(0.5) / math.log(0.995) * 3600.0


@dataclass(frozen=True)
class DecayWeights:
    """Weights of memcore's ranking formula.

    ``score = w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance * importance``

    This is the recency + importance + relevance retrieval score of Park et al. 2023,
    "Generative Agents: Interactive Simulacra of Human Behavior" (UIST '23), with the
    exponential decay written as a half-life. ``sim`` is the cosine similarity of unit vectors
    in [-1, 1]; ``age = now - last_accessed_at`` in seconds (future timestamps count as 0);
    ``importance`` is in [0, 1].

    Defaults: similarity dominates (``w_similarity = 1``); importance adds up to 0.1 so an
    explicitly important memory wins near-ties; recency adds at most 0.02 with the Generative
    Agents half-life (0.995 per hour, about 138 hours), a tie-breaker between equally relevant
    memories. Measured on LoCoMo (6 dev conversations, 2026-11-30, MiniLM int8): recency 0.1
    cost 0.023 R@10 (0.428 vs 0.451 without recency), 0.05 cost 0.008, 0.02 cost 0.003 (noise
    level) — a conversation's questions ask about old sessions, so recency must not outweigh
    relevance by default. ``DecayWeights.similarity()`` is OM1-style pure similarity.

    Parameters
    ----------
    w_similarity, w_recency, w_importance : float
        Non-negative finite weights.
    half_life : float
        Seconds after which recency halves; finite and > 0.

    Raises
    ------
    ValueError
        Naming the field, if a weight is negative or not finite or ``half_life <= 0``.

    Examples
    --------
    >>> DecayWeights(w_recency=0.0, w_importance=0.0) == DecayWeights.similarity()
    True
    """

    w_similarity: float = 1.0
    w_recency: float = 0.02
    w_importance: float = 0.1
    half_life: float = GENERATIVE_AGENTS_HALF_LIFE

    def __post_init__(self) -> None:
        for name in ("w_similarity", "w_recency", "w_importance"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise InvalidArgumentError(f"DecayWeights.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise InvalidArgumentError(f"DecayWeights.{name} must be finite and >= 0, got {value!r}")
        hl = self.half_life
        if (not isinstance(hl, numbers.Real) or isinstance(hl, bool)
                or not math.isfinite(hl) or hl <= 0):
            raise InvalidArgumentError(f"DecayWeights.half_life must be finite and > 0 seconds, got {hl!r}")

    @classmethod
    def similarity(cls) -> "DecayWeights":
        """Pure similarity ranking (the OM1 contract): recency and importance weights are 0."""
        return cls(w_similarity=1.0, w_recency=0.0, w_importance=0.0)

    @property
    def max_bonus(self) -> float:
        """Upper bound of the non-similarity terms: ``w_recency + w_importance``."""
        return self.w_recency + self.w_importance


class MemoryTier(str, enum.Enum):
    """Which tier of a :class:`~memcore.TwoTierMemory` holds a memory."""

    SHORT = "short"
    LONG = "long"


@dataclass(frozen=True)
class MemoryItem:
    """What a caller stores: a keyed text with an importance and JSON-serialisable metadata.

    Parameters
    ----------
    key : str
        Unique within its namespace.
    text : str
    importance : float, default 0.5
        In [0, 1].
    metadata : dict
        JSON-serialisable; top-level keys are filterable in searches.
    """

    key: str
    text: str
    importance: float = 0.5
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredMemory:
    """A memory as a store holds it: the item plus its namespace and lifecycle fields.

    Times are Unix seconds (float) from the store's clock. ``ttl`` is the memory's time to
    live in seconds and ``expires_at`` when it stops being visible (``updated_at + ttl``, moved
    by a read with ``refresh_ttl``); both None for a memory that never expires.
    """

    namespace: Namespace
    key: str
    text: str
    importance: float
    metadata: Mapping[str, Any]
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    tier: MemoryTier
    expires_at: float | None = None
    ttl: float | None = None


@dataclass(frozen=True)
class MemoryQuery:
    """A search request.

    Parameters
    ----------
    namespace : str or tuple of str
    text : str
        Empty or whitespace-only text has no semantic signal: the search returns [].
    top_k : int, default 5
        At most this many hits; fewer when fewer live items pass the threshold and filter.
    threshold : float, default -1.0
        Minimum cosine similarity (``sim >= threshold``); applied to similarity, not the score.
    weights : DecayWeights, optional
        Ranking weights; the store's own when None.
    filter : dict, optional
        Conditions on top-level metadata keys and on ``$created_at``/``$updated_at``/
        ``$last_accessed_at``/``$importance``: ``{"k": v}`` equality, ``{"k": {"$gte": 3}}``
        with ``$eq $ne $gt $gte $lt $lte $in $nin``; all must hold; applied inside the ranking
        pass, before top-k (:func:`memcore._validate.metadata_filter`).
    touch : bool, default True
        Refresh ``last_accessed_at``/``access_count`` of returned memories; False peeks.
    """

    namespace: NamespaceLike
    text: str
    top_k: int = 5
    threshold: float = -1.0
    weights: DecayWeights | None = None
    filter: Mapping[str, Any] | None = None
    touch: bool = True


@dataclass(frozen=True)
class MemoryHit:
    """One search result. ``score`` is the ranking score (higher is better): the fused decay
    score on the similarity preset, in (0, 1) with hybrid recall (:mod:`memcore.recall.score`);
    ``similarity`` is the cosine of the query and the memory on every preset.

    ``explanation`` is None unless the search asked for it (``explain=True``): then a dict
    of the score's terms that sum to the fused ranking score, the z statistics (mean and
    std of each normalised signal over the namespace) and how ``score`` follows from the
    fused score (:func:`memcore.recall.score.explained` lists the keys; contributions are
    in fused-score units, signals in their own: cosine, BM25 score, recency in (0, 1],
    importance in [0, 1])."""

    key: str
    text: str
    score: float
    similarity: float
    recency: float
    importance: float
    tier: MemoryTier
    metadata: Mapping[str, Any]
    namespace: Namespace = ()
    created_at: float = 0.0
    last_accessed_at: float = 0.0
    explanation: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PromotionPolicy:
    """When :meth:`TwoTierMemory.consolidate` promotes a short-term memory to the long tier.

    A memory is promoted when ``importance >= min_importance`` **or**
    ``access_count >= min_access_count``.

    Raises
    ------
    ValueError
        If ``min_importance`` is outside [0, 1] or ``min_access_count < 0``.
    """

    min_importance: float = 0.5
    min_access_count: int = 2

    def __post_init__(self) -> None:
        if not (isinstance(self.min_importance, (int, float)) and 0.0 <= self.min_importance <= 1.0):
            raise InvalidArgumentError(f"PromotionPolicy.min_importance must be in [0, 1], got {self.min_importance!r}")
        if not isinstance(self.min_access_count, int) or self.min_access_count < 0:
            raise InvalidArgumentError(f"PromotionPolicy.min_access_count must be an int >= 0, got {self.min_access_count!r}")

    def qualifies(self, importance: float, access_count: int) -> bool:
        """True when a memory with these fields should be promoted."""
        return importance >= self.min_importance or access_count >= self.min_access_count
