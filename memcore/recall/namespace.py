"""A store namespace's hybrid recall: :class:`NamespaceRecall` keeps one
:class:`~memcore.recall.index.HybridIndex` per index structure, built from the namespace's
rows when first needed (a store with hybrid weights: its first write; else the first hybrid
search), or restored from a store's files
(:meth:`~memcore.recall.index.HybridIndex.restore`), then kept current by every
put/replace/delete; :func:`episode_speaker` reads what the index needs from a memory's
metadata.

Stores (``hybrid=`` on :class:`~memcore.ShortTermMemory`, :class:`~memcore.LongTermMemory`,
:class:`~memcore.TwoTierMemory`, :class:`~memcore.SemanticMemory`; the last two default to
hybrid recall) keep one :class:`NamespaceRecall` per namespace.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from memcore.recall.index import HybridIndex
from memcore.recall.prep import QueryPreparer
from memcore.recall.weights import HybridWeights

__all__ = ["NamespaceRecall", "episode_speaker"]

def episode_speaker(metadata: dict | None) -> tuple[Hashable, str | None]:
    """The ``episode`` and ``speaker`` a store's hybrid index reads from a memory's metadata.

    ``metadata["episode"]`` may be any JSON value (a str or int session id is typical; lists
    and dicts are keyed by their canonical JSON); ``metadata["speaker"]`` counts when it is a
    non-empty str.

    Parameters
    ----------
    metadata : dict or None

    Returns
    -------
    episode : hashable or None
    speaker : str or None

    Examples
    --------
    >>> episode_speaker({"episode": 3, "speaker": "Ann"})
    (3, 'Ann')
    """
    if not metadata:
        return None, None
    ep = metadata.get("episode")
    if ep is not None and not isinstance(ep, (str, int, float)):
        ep = json.dumps(ep, sort_keys=True, ensure_ascii=False)
    sp = metadata.get("speaker")
    return ep, (sp if isinstance(sp, str) and sp.strip() else None)


class NamespaceRecall:
    """A store namespace's hybrid indexes: one per index structure (``stem``), built on
    first use.

    Stores keep one of these per namespace. :meth:`index` builds the index a search's
    :class:`HybridWeights` need from the namespace's live rows the first time, in row order
    (the insertion order of the rows that source yields); afterwards :meth:`put`/:meth:`delete`
    keep every built index current (O(window) each). A namespace that is only ever searched
    with the similarity preset builds nothing.

    Parameters
    ----------
    dim : int
    query_preparer : callable, optional
        Passed to each :class:`HybridIndex`.
    vectors : callable, optional
        ``vectors() -> (>= rows, dim) float32``: the store's vector column (the indexes then
        keep no copy; see :class:`HybridIndex`).
    arrays : callable, optional
        ``arrays(structure) -> Arrays`` for a new index (RAM when None).
    created_at : callable, optional
        ``created_at() -> (>= rows,) float64``: the store's ``created_at`` column (the date
        words of ``HybridWeights(dates=True)``; none when None).

    Examples
    --------
    >>> rec = NamespaceRecall(4)
    >>> idx = rec.index(HybridWeights(), lambda: ([0], ["hi"], np.eye(4, dtype=np.float32)[:1],
    ...                                           [{}]))
    >>> len(idx)
    1
    """

    __slots__ = ("dim", "query_preparer", "indexes", "vectors", "arrays", "created_at")

    def __init__(self, dim: int, query_preparer: QueryPreparer | None = None, *,
                 vectors: Callable[[], np.ndarray] | None = None,
                 arrays: Callable[[tuple], Any] | None = None,
                 created_at: Callable[[], np.ndarray] | None = None):
        self.dim = int(dim)
        self.query_preparer = query_preparer
        self.indexes: dict[tuple, HybridIndex] = {}
        self.vectors = vectors
        self.arrays = arrays
        self.created_at = created_at

    def index(self, weights: HybridWeights,
              source: Callable[[], tuple]) -> HybridIndex:
        """The index for ``weights``' structure, built from ``source()`` when missing.

        ``source() -> (rows, texts, vectors, metadata)``: the live rows in insertion order,
        their texts, (n, dim) float32 vectors and metadata dicts.
        """
        key = weights.structure()
        idx = self.indexes.get(key)
        if idx is None:
            idx = HybridIndex(self.dim, weights, self.query_preparer,
                              arrays=None if self.arrays is None else self.arrays(key),
                              vectors=self.vectors, created_at=self.created_at)
            rows, texts, vectors, metadata = source()
            idx.put_many(np.asarray(rows, np.int64), texts, vectors,
                         [episode_speaker(m) for m in metadata])
            self.indexes[key] = idx
        return idx

    def put(self, row: int, text: str, vector: np.ndarray, metadata: dict | None) -> None:
        """Add or replace a row in every built index (a replaced row moves to the end of its
        episode, as a rebuild in insertion order would place it)."""
        if not self.indexes:
            return
        ep, sp = episode_speaker(metadata)
        for idx in self.indexes.values():
            idx.put(row, text, vector, episode=ep, speaker=sp)

    def put_many(self, rows: Sequence[int], texts: Sequence[str], vectors: np.ndarray,
                 metadata: Sequence[dict | None]) -> None:
        """:meth:`put` for a batch of rows (one tokeniser call per index; rows past an
        index's end, a store's appended rows, need no removal first)."""
        if not self.indexes or not len(rows):
            return
        es = [episode_speaker(m) for m in metadata]
        rows = np.asarray(rows, np.int64)
        for idx in self.indexes.values():
            known = rows[rows < idx.n_rows]
            if known.shape[0]:
                idx.delete_many(known.tolist())
            idx.put_many(rows, texts, vectors, es)

    def delete(self, row: int) -> None:
        """Remove a row from every built index."""
        self.delete_many([row])

    def delete_many(self, rows: Sequence[int]) -> None:
        """Remove rows from every built index (:meth:`HybridIndex.delete_many`)."""
        for idx in self.indexes.values():
            idx.delete_many(rows)

    def clear(self) -> None:
        """Forget every index (they are rebuilt on the next hybrid search)."""
        self.indexes.clear()
