"""A search request resolved once: validated, its weights settled, its text prepared, its
vector embedded and checked, and the time read -- what every ranking path takes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Mapping

import numpy as np

from memcore import _validate
from memcore.core.rows import encoded
from memcore.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidVectorError
from memcore.recall.weights import HybridWeights
from memcore.recall.prep import DefaultQueryPreparer, PreparedQuery, QueryPreparer
from memcore.types import Clock, DecayWeights, MemoryQuery, Namespace

__all__ = ["ResolvedQuery", "resolve", "hybrid_weights", "now"]

DEFAULT_PREPARER = DefaultQueryPreparer()


@dataclass(frozen=True)
class ResolvedQuery:
    """A validated query, as the stores rank it. Build with :func:`resolve` (or a store's
    ``resolve``); pass it to ``search`` to rank without validating or embedding again.

    Attributes
    ----------
    namespace : tuple of str
    text : str
        Never blank (a blank text resolves to None: no signal).
    top_k : int
    threshold : float
        Minimum similarity, in [-1, 1].
    weights : DecayWeights
        Effective decay weights (the similarity preset's dense weight folded in).
    hybrid : HybridWeights
        Effective hybrid weights (``weights.w_similarity`` folded into ``dense``).
    filter : dict or None
    touch : bool
    vector : ndarray of shape (dim,), float32, or None
        The query embedding (of ``prepared.dense`` with hybrid weights); None for a store
        that ranks lexically.
    prepared : PreparedQuery or None
        The preparer's forms of the text; None with the similarity preset.
    now : float
        Unix seconds of this query (recency and the refresh of returned memories).
    threads : int
        numba threads the hybrid scan may use (the store's ``threads``).
    refresh_ttl : bool
        Give the returned memories a new time to live from ``now``.
    """

    namespace: Namespace
    text: str
    top_k: int
    threshold: float
    weights: DecayWeights
    hybrid: HybridWeights
    filter: Mapping[str, Any] | None
    touch: bool
    vector: np.ndarray | None
    prepared: PreparedQuery | None
    now: float
    threads: int = 1
    refresh_ttl: bool = False


def hybrid_weights(hybrid: Any, default: HybridWeights) -> HybridWeights:
    """``hybrid``, or ``default`` when None.

    Raises
    ------
    InvalidArgumentTypeError
        If it is not a HybridWeights.
    """
    if hybrid is None:
        return default
    if not isinstance(hybrid, HybridWeights):
        raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
    return hybrid


def now(clock: Clock) -> float:
    """``clock()`` as finite Unix seconds.

    Raises
    ------
    InvalidArgumentError
    """
    t = float(clock())
    if not math.isfinite(t):
        raise InvalidArgumentError(f"clock returned {t!r}; it must return finite Unix seconds")
    return t


def resolve(query: Any, text: Any = None, *, top_k: Any = 5, threshold: Any = -1.0,
            weights: Any = None, filter: Any = None, touch: Any = True, query_vector: Any = None,
            hybrid: Any = None, dim: int | None, default_weights: DecayWeights,
            default_hybrid: HybridWeights, preparer: QueryPreparer | None,
            entities: Callable[[Namespace, HybridWeights], Collection[str]],
            encode: Callable[[list], Any], clock: Clock, name: str = "embedder",
            threads: int = 1, refresh_ttl: bool = False) -> ResolvedQuery | None:
    """Validate a search request once and settle everything ranking needs.

    ``query`` is a :class:`MemoryQuery`, a namespace (``text`` then required), or a
    :class:`ResolvedQuery` (returned with ``threads`` set to this store's); the query keywords are
    :meth:`memcore.core.store.MemoryStore.search`'s, and raise its errors. The remaining
    keywords describe the store: ``dim`` (None: lexical ranking, no vectors), defaults, query
    preparer, ``entities(namespace, hybrid)``, ``encode(texts) -> (n, dim)``, clock,
    ``threads`` (validated by the store) and ``refresh_ttl`` (resolved by the store).

    Returns
    -------
    ResolvedQuery, or None
        None when the query carries no signal: blank text, or an all-zero embedding.

    Examples
    --------
    >>> from memcore import HashingEmbedder
    >>> emb = HashingEmbedder(dim=8)
    >>> rq = resolve("robot", "red door", dim=8, default_weights=DecayWeights(),
    ...              default_hybrid=HybridWeights.similarity(), preparer=None,
    ...              entities=lambda ns, hw: (), encode=emb.encode,
    ...              clock=lambda: 1.0)
    >>> rq.namespace, rq.vector.shape, rq.prepared is None
    (('robot',), (8,), True)
    """
    if isinstance(query, ResolvedQuery):
        if text is not None:
            raise InvalidArgumentTypeError("search(ResolvedQuery) takes no separate text")
        return query if query.threads == threads else replace(query, threads=threads)
    if isinstance(query, MemoryQuery):
        if text is not None:
            raise InvalidArgumentTypeError(
                "search(MemoryQuery) takes no separate text; put it in the query")
        q = query
    else:
        if text is None:
            raise InvalidArgumentTypeError("search(namespace, text, ...) needs a query text")
        q = MemoryQuery(namespace=query, text=text, top_k=top_k, threshold=threshold,
                        weights=weights, filter=filter, touch=touch)
    if q.weights is not None and not isinstance(q.weights, DecayWeights):
        raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(q.weights).__name__}")
    ns = _validate.namespace(q.namespace)
    qtext = _validate.text(q.text)
    k = _validate.top_k(q.top_k)
    thr = _validate.threshold(q.threshold)
    flt = _validate.metadata_filter(q.filter)
    hw = hybrid_weights(hybrid, default_hybrid)
    vec = None
    if query_vector is not None:
        if dim is None:
            raise InvalidVectorError(
                "query_vector given, but this store has no embedder (it ranks by lexical "
                "similarity); pass only the text")
        vec = _validate.vector(query_vector, dim, name="query_vector")
    if not qtext.strip():
        return None
    w = q.weights if q.weights is not None else default_weights
    prepared = None
    if hw.is_similarity:
        if hw.dense != 1.0:
            w = replace(w, w_similarity=w.w_similarity * hw.dense)
    else:
        prepared = (preparer or DEFAULT_PREPARER)(qtext, entities(ns, hw))
        if w.w_similarity != 1.0:
            hw = replace(hw, dense=hw.dense * w.w_similarity)
    if vec is None and dim is not None:
        vec = encoded(encode([qtext if prepared is None else prepared.dense]), 1, dim, name)[0]
        if not vec.any():
            return None
    return ResolvedQuery(ns, qtext, k, thr, w, hw, flt, bool(q.touch), vec, prepared,
                         now(clock), threads, bool(refresh_ttl))
