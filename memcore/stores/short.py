"""ShortTermMemory: a bounded, in-memory working tier with one FIFO per namespace.

Each namespace is a :class:`~memcore.core.table.Table` in RAM whose rows are reused once
their key is deleted or evicted; its ``keys`` order (oldest write first) is the FIFO.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from memcore.core.rows import Rows
from memcore.core.store import MemoryStore, check_embedder
from memcore.core.table import RamColumns, Table, copy_metadata
from memcore.embedders.lexical import LexicalScorer
from memcore.errors import InvalidArgumentError, InvalidArgumentTypeError
from memcore.core.query import ResolvedQuery
from memcore.recall.weights import HybridWeights
from memcore.recall.prep import QueryPreparer
from memcore.types import Clock, DecayWeights, MemoryTier, Namespace, NamespaceLike, StoredMemory, system_clock
from memcore import _validate

__all__ = ["ShortTermMemory", "EvictionHandler"]

#: Called with the memories a put evicts (oldest first) and their vectors
#: ((n, dim) float32, or None for a store without embedder), before they are removed.
EvictionHandler = Callable[[Sequence[StoredMemory], "np.ndarray | None"], None]


class ShortTermMemory(MemoryStore):
    """A bounded working memory: one FIFO of at most ``capacity`` keys per namespace.

    Putting a key appends it to its namespace's FIFO (re-putting an existing key replaces it and
    moves it to the young end); when a namespace exceeds ``capacity`` its oldest keys are
    evicted, after ``on_evict`` (if set) has seen them; a batch larger than ``capacity`` keeps
    its last ``capacity`` distinct keys. With an ``embedder`` each memory keeps its vector and
    search ranks by cosine similarity; with none, similarity comes from a lexical ``scorer``
    (``memcore.embedders.LexicalScorer`` by default) and no vectors are kept. The API and its
    semantics are :class:`~memcore.core.store.MemoryStore`'s.

    Parameters
    ----------
    capacity : int, default 1000
        Maximum keys per namespace, >= 1.
    embedder : Embedder, optional
        Encodes texts to (n, dim) float32 unit vectors. Mutually exclusive with ``scorer``.
    scorer : object with ``score_many(query, texts) -> ndarray (n,) float32``, optional
        Lexical similarity used when there is no embedder.
    clock : Clock, default system_clock
        Returns Unix seconds; every timestamp and every recency comes from it.
    weights : DecayWeights, optional
        Default ranking weights; ``DecayWeights.similarity()`` when None.
    on_evict : EvictionHandler, optional
        ``on_evict(memories, vectors)`` sees the memories about to be evicted (oldest first)
        while the store's lock is held. If it raises, the put is aborted with nothing changed.
    hybrid : HybridWeights, optional
        Default recall of :meth:`search`; ``HybridWeights.similarity()`` when None. Other
        weights rank by hybrid recall and need an embedder.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery`` for hybrid recall.
    threads : int, default 1
        CPU threads a search's scan and its BM25 of common terms may use (numba's, set only
        while they run); >= 2 runs the parallel kernels, whose results equal the 1-thread
        ones bit for bit (robots have 4-12 cores).
    ttl : float, optional
        Default time to live in seconds of a put without ``ttl=`` (None: never expires).
    refresh_ttl : bool, default False
        Whether ``get``/``search`` restart the time to live of what they return by default.

    Raises
    ------
    InvalidArgumentError
        If ``capacity`` or ``threads`` is not an int >= 1, both ``embedder`` and ``scorer`` are given, or
        hybrid weights / a query preparer are given without an embedder.
    InvalidArgumentTypeError
        If an argument has the wrong type.

    Examples
    --------
    >>> stm = ShortTermMemory(capacity=2)
    >>> _ = stm.put("robot", "a", "the red door is locked")
    >>> [h.key for h in stm.search("robot", "red door", top_k=1)]
    ['a']
    """

    tier = MemoryTier.SHORT

    def __init__(self, capacity: int = 1000, embedder: Any = None, scorer: Any = None, *,
                 clock: Clock = system_clock, weights: DecayWeights | None = None,
                 on_evict: EvictionHandler | None = None, hybrid: HybridWeights | None = None,
                 query_preparer: QueryPreparer | None = None, threads: int = 1,
                 ttl: float | None = None, refresh_ttl: bool = False):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise InvalidArgumentError(f"capacity must be an int >= 1, got {capacity!r}")
        if embedder is not None and scorer is not None:
            raise InvalidArgumentError("give either an embedder (vector similarity) or a scorer "
                                       "(lexical similarity), not both")
        if embedder is not None:
            check_embedder(embedder)
        elif scorer is None:
            scorer = LexicalScorer()
        if scorer is not None and not callable(getattr(scorer, "score_many", None)):
            raise InvalidArgumentTypeError(f"scorer must have score_many(query, texts), got {type(scorer).__name__}")
        if on_evict is not None and not callable(on_evict):
            raise InvalidArgumentTypeError(f"on_evict must be callable, got {on_evict!r}")
        self._setup(dim=None if embedder is None else int(embedder.dim), embedder=embedder,
                    clock=clock, weights=weights, hybrid=hybrid, query_preparer=query_preparer,
                    default_weights=DecayWeights.similarity(), threads=threads, ttl=ttl,
                    refresh_ttl=refresh_ttl)
        if embedder is None and (query_preparer is not None or not self.hybrid.is_similarity):
            raise InvalidArgumentError("hybrid recall needs an embedder (its dense signal); a "
                                       "ShortTermMemory without one ranks by lexical similarity only")
        self.capacity = int(capacity)
        self.scorer = scorer
        self.on_evict = on_evict

    def __repr__(self) -> str:
        mode = f"embedder={getattr(self.embedder, 'name', '?')!r}" if self.embedder else "lexical"
        return f"ShortTermMemory(capacity={self.capacity}, {mode}, namespaces={len(self._tables)})"

    def resolve(self, query: Any, text: Any = None, **kw: Any) -> ResolvedQuery | None:
        if self.embedder is None and kw.get("hybrid") is not None:
            hw = kw["hybrid"]
            if isinstance(hw, HybridWeights) and not hw.is_similarity:
                raise InvalidArgumentError("hybrid recall needs an embedder; this ShortTermMemory "
                                           "ranks by lexical similarity only (pass hybrid=None)")
        rq = super().resolve(query, text, **kw)
        if rq is not None and self.embedder is None and not self._scorer(rq.text, [rq.text])[0] > 0:
            return None   # a query that does not even match itself has no lexical signal
        return rq

    def _scorer(self, text: str, texts: list) -> np.ndarray:
        sims = np.ascontiguousarray(self.scorer.score_many(text, texts), dtype=np.float32)
        if sims.shape != (len(texts),):
            raise InvalidArgumentError(f"scorer.score_many returned shape {sims.shape} for {len(texts)} texts")
        return sims

    def _apply(self, rows: Rows) -> None:
        """FIFO insert: apply the batch in order, then trim the namespace to ``capacity``."""
        ns = rows.namespace
        table = self._tables.get(ns)
        last: dict[str, int] = {}
        for j, k in enumerate(rows.keys):
            last.pop(k, None)                    # last occurrence wins, at its position
            last[k] = j
        live = table.keys if table is not None else {}
        overflow = len(live) + sum(1 for k in last if k not in live) - self.capacity
        old_out: list[str] = []
        new_out: list[str] = []
        if overflow > 0:
            for k in live:                       # oldest first; re-put keys move to the young end
                if len(old_out) == overflow:
                    break
                if k not in last:
                    old_out.append(k)
            new_out = list(last)[: overflow - len(old_out)]
        if (old_out or new_out) and self.on_evict is not None:
            gone = rows.select([last[k] for k in new_out])
            mems = [table.memory(live[k], self.tier) for k in old_out]
            mems += gone.memories(self.tier, copy_metadata)
            vecs = None
            if self.dim is not None:
                vecs = gone.vectors if not old_out else np.concatenate(
                    [table.columns.vectors[[live[k] for k in old_out]], gone.vectors])
                vecs = np.ascontiguousarray(vecs, np.float32)
            self.on_evict(mems, vecs)
        # from here on nothing raises: mutate
        if table is None:
            table = self._tables[ns] = Table(ns, RamColumns(self.dim or 0, min(self.capacity, 64)),
                                             reuse=True)
        table.remove(old_out + new_out)          # a batch-evicted key loses its old row too
        out = set(new_out)
        keep = [k for k in last if k not in out]
        fresh = iter(table.take(sum(1 for k in keep if k not in table.keys)))
        targets = [table.keys[k] if k in table.keys else next(fresh) for k in keep]
        table.write(targets, rows, [last[k] for k in keep])
        if not table.keys:
            del self._tables[ns]

    def transfer(self, namespace: NamespaceLike, predicate: Callable[[StoredMemory], bool],
                 sink: Callable[[list[StoredMemory], "np.ndarray | None"], None]) -> int:
        """Move the memories for which ``predicate`` is true out of the store, through ``sink``.

        ``sink(memories, vectors)`` receives them oldest first with their vectors
        ((n, dim) float32, or None without embedder) under the store's lock; they are removed
        only after it returns, so a raising sink leaves the store unchanged.

        Returns
        -------
        int
            How many memories moved.

        Raises
        ------
        InvalidNamespaceError
            On a malformed namespace; whatever ``sink`` raises.

        Examples
        --------
        >>> stm = ShortTermMemory(capacity=5); _ = stm.put("ns", "k", "text", importance=0.9)
        >>> stm.transfer("ns", lambda m: m.importance > 0.5, lambda ms, vs: None)
        1
        """
        ns = _validate.namespace(namespace)
        with self._lock:
            table = self._tables.get(ns)
            if table is None:
                return 0
            moving = [(k, m) for k, m in ((k, table.memory(r, self.tier))
                                          for k, r in table.keys.items()) if predicate(m)]
            if not moving:
                return 0
            vecs = None
            if self.dim is not None:
                vecs = np.ascontiguousarray(table.columns.vectors[[table.keys[k] for k, _ in moving]])
            sink([m for _, m in moving], vecs)
            table.remove([k for k, _ in moving])
            if not table.keys:
                del self._tables[ns]
            return len(moving)

    def stats(self) -> dict[Namespace, int]:
        """Memories per namespace.

        Examples
        --------
        >>> ShortTermMemory(capacity=5).stats()
        {}
        """
        with self._lock:
            return {ns: t.live for ns, t in sorted(self._tables.items())}
