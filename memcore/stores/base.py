"""The :class:`MemoryStore` protocol and the pieces every store shares.

All three stores (:class:`~memcore.ShortTermMemory`, :class:`~memcore.LongTermMemory`,
:class:`~memcore.TwoTierMemory`) implement :class:`MemoryStore`; a caller can swap one for
another. Semantics every store keeps (and the state-machine tests check):

- A namespace is a str or a tuple of non-empty str segments without NUL; prefix listing
  matches whole segments only (``("acme",)`` never lists ``("acme-corp",)``).
- ``put`` on an existing key replaces text, vector, importance and metadata, keeps
  ``created_at`` and bumps ``updated_at``; the old vector never matches again.
- A deleted key is never returned; ``search`` still returns up to ``top_k`` live items.
- ``top_k`` larger than the namespace returns every live item above the threshold.
- Empty or whitespace-only query text returns ``[]``: it carries no semantic signal.
- The metadata filter is applied before top-k.
- ``search`` refreshes what it returns (``last_accessed_at = now``, ``access_count += 1``)
  unless ``touch=False``; nothing is deleted on the read path.
"""

from __future__ import annotations

from memcore.errors import InvalidArgumentTypeError

from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from memcore import _validate
from memcore.types import (
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    Namespace,
    NamespaceLike,
    StoredMemory,
)

__all__ = ["MemoryStore", "as_query", "has_prefix"]


@runtime_checkable
class MemoryStore(Protocol):
    """A namespaced key-value store with semantic recall."""

    def put(self, namespace: NamespaceLike, key: str, text: str, *, importance: float = 0.5,
            metadata: Mapping[str, Any] | None = None,
            vector: np.ndarray | None = None) -> StoredMemory: ...

    def put_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem], *,
                 vectors: np.ndarray | None = None) -> list[StoredMemory]: ...

    def get(self, namespace: NamespaceLike, key: str) -> StoredMemory | None: ...

    def delete(self, namespace: NamespaceLike, key: str) -> bool: ...

    def search(self, query: MemoryQuery | NamespaceLike, text: str | None = None, *,
               top_k: int = 5, threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: np.ndarray | None = None) -> list[MemoryHit]:
        """Rank the namespace's live items for a query.

        ``query_vector`` is an optional precomputed embedding of the query text (validated for
        dim and finiteness, normalised); with it the store does not encode the text again, so
        a tick that already embedded its input (or a two-tier search) encodes once.
        """
        ...

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]: ...

    def count(self, namespace: NamespaceLike) -> int: ...

    def clear(self, namespace: NamespaceLike) -> int: ...


def as_query(query: MemoryQuery | NamespaceLike, text: str | None = None, *, top_k: int = 5,
             threshold: float = -1.0, weights: DecayWeights | None = None,
             filter: Mapping[str, Any] | None = None, touch: bool = True) -> MemoryQuery:
    """Normalise both ``search`` call forms to a validated :class:`MemoryQuery`.

    ``search(MemoryQuery(...))`` or ``search(namespace, text, top_k=..., ...)``. The returned
    query has a canonical tuple namespace, a validated top_k, threshold and filter.

    Raises
    ------
    TypeError
        If a MemoryQuery is given together with text, or text is missing.
    ValueError
        If top_k < 1, the threshold is not finite, or the filter uses an unknown operator.
    InvalidNamespaceError
        If the namespace is malformed.
    """
    if isinstance(query, MemoryQuery):
        if text is not None:
            raise InvalidArgumentTypeError("search(MemoryQuery) takes no separate text; put it in the query")
        q = query
    else:
        if text is None:
            raise InvalidArgumentTypeError("search(namespace, text, ...) needs a query text")
        q = MemoryQuery(namespace=query, text=text, top_k=top_k, threshold=threshold,
                        weights=weights, filter=filter, touch=touch)
    if q.weights is not None and not isinstance(q.weights, DecayWeights):
        raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(q.weights).__name__}")
    return MemoryQuery(
        namespace=_validate.namespace(q.namespace),
        text=_validate.text(q.text),
        top_k=_validate.top_k(q.top_k),
        threshold=_validate.threshold(q.threshold),
        weights=q.weights,
        filter=_validate.metadata_filter(q.filter),
        touch=bool(q.touch),
    )


def has_prefix(ns: Namespace, prefix: Namespace) -> bool:
    """True when ``prefix`` is a whole-segment prefix of ``ns`` (``()`` matches everything)."""
    return ns[: len(prefix)] == prefix


def sorted_namespaces(all_ns: Iterable[Namespace], prefix: NamespaceLike | None) -> list[Namespace]:
    """The namespaces under ``prefix`` (whole segments), sorted."""
    p = _validate.namespace_prefix(prefix)
    return sorted(ns for ns in all_ns if has_prefix(ns, p))
