"""TwoTierMemory: a bounded short-term tier in front of an unbounded long-term tier."""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.errors import EmbedderMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from memcore.hybrid import HybridWeights, default_for, pooled_weights
from memcore.query_prep import DefaultQueryPreparer
from memcore.stores.base import as_query
from memcore.stores.short import ShortTermMemory
from memcore.types import (
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    Namespace,
    NamespaceLike,
    PromotionPolicy,
    StoredMemory,
)

__all__ = ["TwoTierMemory"]

_DEFAULT_PREPARER = DefaultQueryPreparer()

#: What TwoTierMemory needs from its long tier beyond the MemoryStore protocol.
LONG_TIER_METHODS = ("put_stored", "touch", "keys", "search", "get", "delete", "count", "clear",
                     "namespaces")


class TwoTierMemory:
    """Working memory (short tier) in front of long-term memory (long tier), one store API.

    - Writes land in the short tier. Re-putting a key that lives in the long tier moves it to
      the short tier (keeping its ``created_at`` and ``access_count``) and removes the long copy,
      so the old text and vector never match again.
    - :meth:`consolidate` promotes every short-tier memory that clears ``policy``
      (``importance >= min_importance`` or ``access_count >= min_access_count``) into the long
      tier with its vector (no re-embedding) and all lifecycle fields, and removes it from the
      short tier.
    - When the short tier evicts (its FIFO is full), qualifying memories are promoted the same
      way; **memories evicted without qualifying are forgotten**.
    - ``get``/``search``: a key present in both tiers is served from the short tier.
      ``delete``/``clear`` act on both tiers.
    - ``search`` encodes the query once, ranks both tiers with the same weights (one formula),
      de-duplicates by key and keeps the best ``top_k``.
    - Recall is hybrid by default (:mod:`memcore.hybrid`: BM25 + dense + episodic context from
      the ``episode``/``speaker`` metadata, z-normalised per query): ``HybridWeights.hybrid()``,
      or ``HybridWeights.no_model()`` with the hashing embedder. The z statistics are pooled
      over both tiers' memories of the namespace (:func:`memcore.hybrid.pooled_weights`), so
      scores are those of one index over the union, except that each tier keeps its own
      BM25 idf and average length, and episode windows stay within a tier. With
      ``hybrid=HybridWeights.similarity()`` both tiers rank by pure cosine, scores exactly
      comparable.

    Both tiers must use the same embedder (name and dim) and the same clock object, so that
    similarities and recencies are comparable across tiers. Thread-safe (one ``RLock``).

    Parameters
    ----------
    short : ShortTermMemory
        With an embedder. Its ``on_evict`` is taken over (a previous handler still runs first).
    long : LongTermMemory or a store with ``put_stored(memories, vectors)``,
        ``touch(namespace, keys)`` and ``keys(namespace)`` besides the MemoryStore protocol,
        plus ``embedder`` and ``clock`` attributes.
    policy : PromotionPolicy, default PromotionPolicy()
    weights : DecayWeights, optional
        The ranking formula for both tiers; the long tier's ``weights`` when None (else
        ``DecayWeights()``).
    hybrid : HybridWeights, optional
        Recall of both tiers; :func:`memcore.hybrid.default_for` the embedder when None.

    Attributes
    ----------
    clock : Clock
        The tiers' shared clock.

    Raises
    ------
    TypeError
        If ``short`` is not a ShortTermMemory, ``long`` lacks a needed method, or ``policy`` /
        ``weights`` / ``hybrid`` have the wrong type.
    EmbedderMismatchError
        If the short tier has no embedder or the tiers' embedders differ in name or dim.
    ValueError
        If the tiers have different clocks.

    Examples
    --------
    >>> mem = TwoTierMemory(ShortTermMemory(capacity=100, embedder=emb),
    ...                     LongTermMemory(embedder=emb))            # doctest: +SKIP
    >>> _ = mem.put("robot", "dock", "the dock is in the hallway", importance=0.9)
    >>> mem.consolidate()
    1
    >>> mem.search("robot", "where is the dock?", top_k=1)[0].tier
    <MemoryTier.LONG: 'long'>
    """

    def __init__(self, short: ShortTermMemory, long: Any,
                 policy: PromotionPolicy = PromotionPolicy(), *,
                 weights: DecayWeights | None = None, hybrid: HybridWeights | None = None):
        if not isinstance(short, ShortTermMemory):
            raise InvalidArgumentTypeError(f"short must be a ShortTermMemory, got {type(short).__name__}")
        missing = [m for m in LONG_TIER_METHODS if not callable(getattr(long, m, None))]
        if missing:
            raise InvalidArgumentTypeError(f"long tier {type(long).__name__} lacks {', '.join(missing)}")
        if not isinstance(policy, PromotionPolicy):
            raise InvalidArgumentTypeError(f"policy must be a PromotionPolicy, got {type(policy).__name__}")
        if weights is not None and not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        if hybrid is not None and not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        if short.embedder is None:
            raise EmbedderMismatchError(
                "the short tier ranks lexically (no embedder) but the long tier needs vectors; "
                "build ShortTermMemory(embedder=...) with the long tier's embedder")
        le = getattr(long, "embedder", None)
        s_id = (getattr(short.embedder, "name", None), short.dim)
        l_id = (getattr(le, "name", None), getattr(le, "dim", None))
        if s_id != l_id:
            raise EmbedderMismatchError(
                f"short tier embedder {s_id[0]!r} (dim {s_id[1]}) differs from long tier embedder "
                f"{l_id[0]!r} (dim {l_id[1]}); both tiers must share one embedder")
        if getattr(long, "clock", None) is not short.clock:
            raise InvalidArgumentError(
                f"the tiers have different clocks (short: {short.clock!r}, long: "
                f"{getattr(long, 'clock', None)!r}); pass the same clock to both so recencies "
                "are comparable")
        self.short = short
        self.long = long
        self.policy = policy
        lw = getattr(long, "weights", None)
        self.weights = weights if weights is not None else (
            lw if isinstance(lw, DecayWeights) else DecayWeights())
        self.clock = short.clock
        self.embedder = short.embedder
        self.hybrid = hybrid if hybrid is not None else default_for(short.embedder)
        self.dim = short.dim
        self._lock = threading.RLock()
        self._previous_on_evict = short.on_evict
        self._promoted = 0
        self._forgotten = 0
        self._last_consolidated_at: float | None = None
        self._promoted_now: set[tuple[Namespace, str]] | None = None
        short.on_evict = self._on_evict

    def __repr__(self) -> str:
        return f"TwoTierMemory(short={self.short!r}, long={self.long!r}, policy={self.policy!r})"

    # ------------------------------------------------------------------ tier moves

    def _promote(self, memories: Sequence[StoredMemory], vectors: np.ndarray | None) -> None:
        self.long.put_stored([replace(m, tier=MemoryTier.LONG) for m in memories], vectors)
        self._promoted += len(memories)
        if self._promoted_now is not None:
            self._promoted_now.update((m.namespace, m.key) for m in memories)

    def _on_evict(self, memories: Sequence[StoredMemory], vectors: np.ndarray | None) -> None:
        if self._previous_on_evict is not None:
            self._previous_on_evict(memories, vectors)
        keep = [i for i, m in enumerate(memories)
                if self.policy.qualifies(m.importance, m.access_count)]
        if keep:
            self._promote([memories[i] for i in keep], vectors[keep])
        self._forgotten += len(memories) - len(keep)

    def consolidate(self, now: float | None = None) -> int:
        """Promote every short-tier memory that clears the policy into the long tier.

        Promoted memories keep their vector and lifecycle fields and leave the short tier; the
        others stay where they are.

        Parameters
        ----------
        now : float, optional
            Unix seconds recorded as ``stats()["last_consolidated_at"]``; ``clock()`` when None.

        Returns
        -------
        int
            How many memories were promoted.

        Raises
        ------
        ValueError
            If ``now`` is not finite. Whatever the long tier's ``put_stored`` raises (the
            namespace being promoted then stays in the short tier).

        Examples
        --------
        >>> mem.consolidate(now=1_700_000_000.0)          # doctest: +SKIP
        3
        """
        if now is not None and (isinstance(now, bool) or not isinstance(now, (int, float))
                                or not math.isfinite(now)):
            raise InvalidArgumentError(f"now must be finite Unix seconds, got {now!r}")
        with self._lock:
            moved = 0
            for ns in self.short.namespaces():
                moved += self.short.transfer(
                    ns, lambda m: self.policy.qualifies(m.importance, m.access_count),
                    self._promote)
            self._last_consolidated_at = float(self.clock() if now is None else now)
            return moved

    # ------------------------------------------------------------------ writes

    def put(self, namespace: NamespaceLike, key: str, text: str, *, importance: float = 0.5,
            metadata: Mapping[str, Any] | None = None, vector: Any = None) -> StoredMemory:
        """Store or replace one memory in the short tier (see the class notes).

        Parameters
        ----------
        namespace : str or tuple of str
        key : str
        text : str
        importance : float, default 0.5
            In [0, 1].
        metadata : dict, optional
            JSON-serialisable.
        vector : array_like of shape (dim,), optional
            Precomputed embedding of ``text``; skips the embedder.

        Returns
        -------
        StoredMemory
            Tier SHORT.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ValueError, TypeError
            On malformed input.
        DimensionMismatchError, InvalidVectorError
            On a bad ``vector``. Nothing changes when anything raises.

        Examples
        --------
        >>> mem.put("robot", "dock", "the dock is in the hallway").tier       # doctest: +SKIP
        <MemoryTier.SHORT: 'short'>
        """
        vectors = None
        if vector is not None:
            vectors = _validate.vector(vector, self.dim, name="vector")[None, :]
        item = MemoryItem(key=key, text=text, importance=importance,
                          metadata=metadata if metadata is not None else {})
        return self._put_many(namespace, [item], vectors)[0]

    def put_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem], *,
                 vectors: Any = None) -> list[StoredMemory]:
        """Store or replace a batch in the short tier with one embedder call.

        Semantics as :meth:`ShortTermMemory.put_many` plus the tier moves of :meth:`put`.

        Parameters
        ----------
        namespace : str or tuple of str
        items : sequence of MemoryItem
        vectors : array_like of shape (len(items), dim), optional

        Returns
        -------
        list of StoredMemory

        Raises
        ------
        TypeError, ValueError, DimensionMismatchError, InvalidVectorError
            As :meth:`ShortTermMemory.put_many`; nothing changes.

        Examples
        --------
        >>> len(mem.put_many("robot", [MemoryItem("a", "x"), MemoryItem("b", "y")]))  # doctest: +SKIP
        2
        """
        return self._put_many(namespace, list(items), vectors)

    def _put_many(self, namespace: NamespaceLike, items: list, vectors: Any) -> list[StoredMemory]:
        ns = _validate.namespace(namespace)
        clean = []
        for i, it in enumerate(items):
            if not isinstance(it, MemoryItem):
                raise InvalidArgumentTypeError(f"items[{i}] must be a MemoryItem, got {type(it).__name__}")
            clean.append((_validate.key(it.key), _validate.memory_text(it.text),
                          _validate.importance(it.importance), _validate.metadata(it.metadata)))
        # encode once, outside the lock; validates vectors before anything changes
        vecs = self.short._vectors_for([c[1] for c in clean], vectors, "vectors")
        with self._lock:
            now = float(self.clock())
            in_long: dict[str, StoredMemory] = {}
            records = []
            # keys the long tier may hold: one listing for big batches, else a get per key
            maybe_long = set(self.long.keys(ns)) if len(clean) > 64 else None
            for k, t, imp, meta in clean:
                life = self.short._lifecycle(ns, k)
                if life is None and k not in in_long and (maybe_long is None or k in maybe_long):
                    old = self.long.get(ns, k)
                    if old is not None:
                        in_long[k] = old
                if life is None and k in in_long:
                    life = (in_long[k].created_at, in_long[k].access_count)
                created, count = life if life is not None else (now, 0)
                records.append(StoredMemory(
                    namespace=ns, key=k, text=t, importance=imp, metadata=meta,
                    created_at=created, updated_at=now, last_accessed_at=now,
                    access_count=count, tier=MemoryTier.SHORT))
            self._promoted_now = set()
            try:
                self.short._put_validated(ns, records, vecs)
                promoted = self._promoted_now
            finally:
                self._promoted_now = None
            for k in in_long:
                if (ns, k) in self.short or (ns, k) not in promoted:
                    self.long.delete(ns, k)  # replaced: the long copy is stale
            return [replace(r, metadata=copy.deepcopy(r.metadata)) for r in records]

    # ------------------------------------------------------------------ reads

    def get(self, namespace: NamespaceLike, key: str) -> StoredMemory | None:
        """The memory under ``key``: the short tier's if present, else the long tier's, else None.

        Does not refresh access fields.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> mem.get("robot", "missing") is None          # doctest: +SKIP
        True
        """
        with self._lock:
            m = self.short.get(namespace, key)
            if m is not None:
                return m if m.tier is MemoryTier.SHORT else replace(m, tier=MemoryTier.SHORT)
            m = self.long.get(namespace, key)
            return m if m is None or m.tier is MemoryTier.LONG else replace(m, tier=MemoryTier.LONG)

    def _hybrid(self, hybrid: Any) -> HybridWeights:
        if hybrid is None:
            return self.hybrid
        if not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        return hybrid

    def dense_query(self, namespace: NamespaceLike, text: str, *,
                    hybrid: HybridWeights | None = None) -> str:
        """The text whose embedding :meth:`search` expects as ``query_vector``.

        With hybrid weights, the query preparer's dense form with the names of both tiers'
        speakers known (:class:`~memcore.query_prep.DefaultQueryPreparer`: names to first
        person); with the similarity preset, ``text`` itself.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, TypeError

        Examples
        --------
        >>> mem.dense_query("chat", "What did Ann adopt?")        # doctest: +SKIP
        'What did I adopt?'
        """
        ns = _validate.namespace(namespace)
        text = _validate.text(text)
        hw = self._hybrid(hybrid)
        if hw.is_similarity:
            return text
        with self._lock:
            names = list(self.short.entities(ns, hybrid=hw))
            if hasattr(self.long, "entities"):
                names += list(self.long.entities(ns, hybrid=hw))
        prep = self.short.query_preparer or _DEFAULT_PREPARER
        return prep(text, names).dense

    def search(self, query: MemoryQuery | NamespaceLike, text: str | None = None, *,
               top_k: int = 5, threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: Any = None, hybrid: HybridWeights | None = None
               ) -> list[MemoryHit]:
        """Rank both tiers with one formula, de-duplicate by key (short wins), keep ``top_k``.

        The query is encoded once (or ``query_vector`` is used) and handed to both tiers; both
        rank with the same weights and clock, so their scores are comparable. Only the returned
        memories are refreshed (``touch``), each in its own tier.

        Parameters
        ----------
        query, text, top_k, threshold, weights, filter, touch
            As :meth:`ShortTermMemory.search`; ``weights`` defaults to ``self.weights``.
        query_vector : array_like of shape (dim,), optional
            Precomputed embedding of ``self.dense_query(namespace, text)`` (the query text
            itself with the similarity preset).
        hybrid : HybridWeights, optional
            ``self.hybrid`` when None.

        Returns
        -------
        list of MemoryHit
            Best first; ``tier`` says where each hit lives. Ties: short tier first.

        Raises
        ------
        ValueError, TypeError, InvalidVectorError, DimensionMismatchError
            As :meth:`ShortTermMemory.search`.

        Examples
        --------
        >>> [h.key for h in mem.search("robot", "dock", top_k=2)]     # doctest: +SKIP
        ['dock', 'charger']
        """
        q = as_query(query, text, top_k=top_k, threshold=threshold, weights=weights,
                     filter=filter, touch=touch)
        qvec = None
        if query_vector is not None:
            qvec = _validate.vector(query_vector, self.dim, name="query_vector")
        if not q.text.strip():
            return []
        hw = self._hybrid(hybrid)
        if qvec is None:
            dense = q.text if hw.is_similarity else self.dense_query(q.namespace, q.text,
                                                                     hybrid=hw)
            qvec = self.short._vectors_for([dense], None, "query")[0]
            if not qvec.any():
                return []
        sub = replace(q, weights=q.weights if q.weights is not None else self.weights,
                      touch=False)
        kw = {"hybrid": hw} if hasattr(self.long, "hybrid") else {}
        if not kw and not hw.is_similarity:
            raise InvalidArgumentTypeError(f"the long tier {type(self.long).__name__} has no hybrid recall; "
                            "use hybrid=HybridWeights.similarity() with it")
        with self._lock:
            offset = 0.0
            if not hw.is_similarity and hw.normalize:
                # z statistics over both tiers' memories (one population, comparable scores)
                if not hasattr(self.long, "_hybrid_moments"):
                    raise InvalidArgumentTypeError(f"the long tier {type(self.long).__name__} cannot pool "
                                    "hybrid statistics; use hybrid=HybridWeights.similarity()")
                hw, offset = pooled_weights(
                    hw, [self.short._hybrid_moments(sub, qvec, hw),
                         self.long._hybrid_moments(sub, qvec, hw)], sub.weights.w_similarity)
                kw = {"hybrid": hw}
            short_hits = self.short.search(sub, query_vector=qvec, hybrid=hw)
            shadow = set(self.short.keys(q.namespace))
            k_long = q.top_k
            while True:
                long_hits = self.long.search(replace(sub, top_k=k_long), query_vector=qvec,
                                             **kw)
                kept = [h if h.tier is MemoryTier.LONG else replace(h, tier=MemoryTier.LONG)
                        for h in long_hits if h.key not in shadow]
                if len(kept) >= q.top_k or len(long_hits) < k_long:
                    break
                k_long = q.top_k + len(shadow)  # enough to see past every shadowed key
            short_hits = [h if h.tier is MemoryTier.SHORT else replace(h, tier=MemoryTier.SHORT)
                          for h in short_hits]
            merged = sorted(short_hits + kept, key=lambda h: -h.score)[: q.top_k]
            if offset:
                merged = [replace(h, score=h.score + offset) for h in merged]
            if q.touch:
                self.short.touch(q.namespace, [h.key for h in merged if h.tier is MemoryTier.SHORT])
                long_keys = [h.key for h in merged if h.tier is MemoryTier.LONG]
                if long_keys:
                    self.long.touch(q.namespace, long_keys)
            return merged

    # ------------------------------------------------------------------ removal / listing

    def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Remove ``key`` from both tiers; True when either held it.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> mem.delete("robot", "missing")           # doctest: +SKIP
        False
        """
        with self._lock:
            a = self.short.delete(namespace, key)
            b = self.long.delete(namespace, key)
            return a or b

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        """Sorted namespaces holding a memory in either tier, under ``prefix`` (whole segments).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> mem.namespaces(("robot",))          # doctest: +SKIP
        [('robot', 'patrol')]
        """
        with self._lock:
            return sorted(set(self.short.namespaces(prefix)) | set(self.long.namespaces(prefix)))

    def count(self, namespace: NamespaceLike) -> int:
        """Distinct keys of ``namespace`` across both tiers.

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> mem.count("robot")          # doctest: +SKIP
        12
        """
        ns = _validate.namespace(namespace)
        with self._lock:
            both = sum(1 for k in self.short.keys(ns) if self.long.get(ns, k) is not None)
            return self.short.count(ns) + self.long.count(ns) - both

    def clear(self, namespace: NamespaceLike) -> int:
        """Remove every memory of ``namespace`` from both tiers; returns how many distinct keys.

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> mem.clear("robot")          # doctest: +SKIP
        12
        """
        with self._lock:
            n = self.count(namespace)
            self.short.clear(namespace)
            self.long.clear(namespace)
            return n

    def stats(self) -> dict[str, Any]:
        """Counts per tier and namespace, and tier-move totals.

        Returns
        -------
        dict
            ``{"short": {ns: n}, "long": {ns: n}, "promoted": int, "forgotten": int,
            "last_consolidated_at": float | None}``; ``promoted``/``forgotten`` count since
            construction (forgotten = evicted without qualifying).

        Examples
        --------
        >>> TwoTierMemory(short, long).stats()["promoted"]      # doctest: +SKIP
        0
        """
        with self._lock:
            return {
                "short": self.short.stats(),
                "long": {ns: self.long.count(ns) for ns in self.long.namespaces()},
                "promoted": self._promoted,
                "forgotten": self._forgotten,
                "last_consolidated_at": self._last_consolidated_at,
            }
