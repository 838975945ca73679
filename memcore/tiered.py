"""TwoTierMemory: a bounded short-term tier in front of an unbounded long-term tier."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.core import query as _query
from memcore.core.rows import Rows
from memcore.core.store import MemoryStore, Tier
from memcore.errors import EmbedderMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from memcore.core.query import ResolvedQuery
from memcore.recall.weights import HybridWeights, default_for, pooled_moments, pooled_weights
from memcore.recall.score import calibrated, explained
from memcore.stores.short import ShortTermMemory
from memcore.types import (
    DecayWeights,
    MemoryHit,
    MemoryTier,
    Namespace,
    NamespaceLike,
    PromotionPolicy,
    StoredMemory,
)

__all__ = ["TwoTierMemory"]


class TwoTierMemory(MemoryStore):
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
    - ``search`` resolves the query once (one validation, one preparation with both tiers'
      speakers known, one embedding), ranks both tiers with the same weights and time,
      de-duplicates by key and keeps the best ``top_k``.
    - Recall is hybrid by default (:mod:`memcore.recall`): ``HybridWeights.hybrid()``,
      or ``HybridWeights.no_model()`` with the hashing embedder. The z statistics are pooled
      over both tiers' memories of the namespace (:func:`memcore.recall.weights.pooled_weights`),
      so scores are those of one index over the union, except that each tier keeps its own
      BM25 idf and average length, and episode windows stay within a tier. With
      ``hybrid=HybridWeights.similarity()`` both tiers rank by pure cosine.

    Both tiers must use the same embedder (name and dim) and the same clock object.

    Parameters
    ----------
    short : ShortTermMemory
        With an embedder. Its ``on_evict`` is taken over (a previous handler still runs first).
    long : Tier
        A :class:`~memcore.LongTermMemory`, or any store implementing the tier protocol
        (:class:`memcore.core.store.Tier`).
    policy : PromotionPolicy, default PromotionPolicy()
    weights : DecayWeights, optional
        The ranking formula for both tiers; the long tier's ``weights`` when None.
    hybrid : HybridWeights, optional
        Recall of both tiers; :func:`memcore.recall.weights.default_for` the embedder when None.
    threads : int, default 1
        CPU threads a search's scan may use in each tier (numba's, set only while a scan
        runs; the tiers' own ``threads`` apply to searches made on them directly).
    ttl : float, optional
        Default time to live in seconds of a put without ``ttl=`` (None: never expires); a
        memory keeps its expiry when it is promoted.
    refresh_ttl : bool, default False
        Whether ``get``/``search`` restart the time to live of what they return by default.

    Raises
    ------
    InvalidArgumentTypeError
        If ``short`` is not a ShortTermMemory, ``long`` does not implement the tier protocol,
        or ``policy`` / ``weights`` / ``hybrid`` have the wrong type.
    EmbedderMismatchError
        If the short tier has no embedder or the tiers' embedders differ in name or dim.
    InvalidArgumentError
        If the tiers have different clocks, or ``threads`` is not an int >= 1.

    Examples
    --------
    >>> from memcore import HashingEmbedder, LongTermMemory
    >>> emb = HashingEmbedder(dim=64)
    >>> mem = TwoTierMemory(ShortTermMemory(capacity=100, embedder=emb),
    ...                     LongTermMemory(embedder=emb))
    >>> _ = mem.put("robot", "dock", "the dock is in the hallway", importance=0.9)
    >>> mem.consolidate()
    1
    >>> mem.search("robot", "where is the dock?", top_k=1)[0].tier
    <MemoryTier.LONG: 'long'>
    """

    tier = MemoryTier.SHORT

    def __init__(self, short: ShortTermMemory, long: Any,
                 policy: PromotionPolicy = PromotionPolicy(), *,
                 weights: DecayWeights | None = None, hybrid: HybridWeights | None = None,
                 threads: int = 1, ttl: float | None = None, refresh_ttl: bool = False):
        if not isinstance(short, ShortTermMemory):
            raise InvalidArgumentTypeError(f"short must be a ShortTermMemory, got {type(short).__name__}")
        if not isinstance(long, Tier):
            raise InvalidArgumentTypeError(f"long tier {type(long).__name__} does not implement the "
                                           "tier protocol (memcore.core.store.Tier)")
        if not isinstance(policy, PromotionPolicy):
            raise InvalidArgumentTypeError(f"policy must be a PromotionPolicy, got {type(policy).__name__}")
        if short.embedder is None:
            raise EmbedderMismatchError(
                "the short tier ranks lexically (no embedder) but the long tier needs vectors; "
                "build ShortTermMemory(embedder=...) with the long tier's embedder")
        s_id = (getattr(short.embedder, "name", None), short.dim)
        l_id = (getattr(long.embedder, "name", None), getattr(long.embedder, "dim", None))
        if s_id != l_id:
            raise EmbedderMismatchError(
                f"short tier embedder {s_id[0]!r} (dim {s_id[1]}) differs from long tier embedder "
                f"{l_id[0]!r} (dim {l_id[1]}); both tiers must share one embedder")
        if long.clock is not short.clock:
            raise InvalidArgumentError(
                f"the tiers have different clocks (short: {short.clock!r}, long: {long.clock!r}); "
                "pass the same clock to both so recencies are comparable")
        lw = long.weights
        self._setup(dim=short.dim, embedder=short.embedder, clock=short.clock, weights=weights,
                    hybrid=hybrid if hybrid is not None else default_for(short.embedder),
                    query_preparer=short.query_preparer,
                    default_weights=lw, threads=threads, ttl=ttl, refresh_ttl=refresh_ttl)
        self.short = short
        self.long = long
        self.policy = policy
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
        self.long.write(Rows.of_memories(memories, vectors))
        self._promoted += len(memories)
        if self._promoted_now is not None:
            self._promoted_now.update((m.namespace, m.key) for m in memories)

    def _on_evict(self, memories: Sequence[StoredMemory], vectors: np.ndarray | None) -> None:
        if self._previous_on_evict is not None:
            self._previous_on_evict(memories, vectors)
        now = _query.now(self.clock) if any(m.expires_at for m in memories) else 0.0
        keep = [i for i, m in enumerate(memories)        # an expired memory is forgotten
                if self.policy.qualifies(m.importance, m.access_count)
                and not (m.expires_at and m.expires_at <= now)]
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
            Unix seconds recorded as ``stats()["last_consolidated_at"]`` (and against which
            expiry is checked: an expired memory is not promoted); ``clock()`` when None.

        Returns
        -------
        int
            How many memories were promoted.

        Raises
        ------
        InvalidArgumentError
            If ``now`` is not finite. Whatever the long tier's write raises (the namespace being
            promoted then stays in the short tier).
        """
        if now is not None and (isinstance(now, bool) or not isinstance(now, (int, float))
                                or not math.isfinite(now)):
            raise InvalidArgumentError(f"now must be finite Unix seconds, got {now!r}")
        with self._lock:
            moved = 0
            t = float(self.clock() if now is None else now)
            for ns in self.short.namespaces():
                moved += self.short.transfer(
                    ns, lambda m: self.policy.qualifies(m.importance, m.access_count)
                    and not (m.expires_at and m.expires_at <= t), self._promote)
            self._last_consolidated_at = t
            return moved

    # ------------------------------------------------------------------ writes
    def embed(self, texts: list) -> np.ndarray:
        return self.short.embed(texts)

    def write(self, rows: Rows) -> list[StoredMemory]:
        if rows.vectors is None:
            rows.vectors = self.embed(rows.texts) if len(rows) else \
                np.zeros((0, self.dim), np.float32)
        ns = rows.namespace
        with self._lock:
            in_long: dict = {}
            if rows.created_at is None:
                now = _query.now(self.clock)
                life = self.short.lifecycle(ns, rows.keys)
                in_long = self.long.lifecycle(ns, [k for k in rows.keys if k not in life])
                life = {**in_long, **life}
                m = len(rows)
                ca, ac = zip(*[life.get(k, (now, 0)) for k in rows.keys]) if m else ((), ())
                rows.created_at = np.asarray(ca, np.float64)
                rows.access_count = np.asarray(ac, np.int64)
                rows.updated_at = rows.last_accessed_at = np.full(m, now)
            self._promoted_now = set()
            try:
                out = self.short.write(rows)
                promoted = self._promoted_now
            finally:
                self._promoted_now = None
            still_short = self.short.lifecycle(ns, list(in_long))
            for k in in_long:
                if k in still_short or (ns, k) not in promoted:
                    self.long.delete(ns, k)  # replaced: the long copy is stale
            return out

    def put_stored(self, memories: Sequence[StoredMemory], vectors: Any = None) -> None:
        self.short.put_stored(memories, vectors)

    # ------------------------------------------------------------------ reads
    def get(self, namespace: NamespaceLike, key: str, *, refresh_ttl: bool | None = None,
            missing_ok: bool = True) -> StoredMemory | None:
        if not missing_ok:
            self.require_namespace(namespace)
        refresh = self.refresh_ttl if refresh_ttl is None else bool(refresh_ttl)
        with self._lock:
            m = self.short.get(namespace, key, refresh_ttl=refresh)
            return m if m is not None else self.long.get(namespace, key, refresh_ttl=refresh)

    def sweep(self, namespace: NamespaceLike | None = None) -> int:
        """Delete expired memories of both tiers; returns how many."""
        with self._lock:
            return self.short.sweep(namespace) + self.long.sweep(namespace)

    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None:
        with self._lock:
            v = self.short.vector(namespace, key)
            return v if v is not None else self.long.vector(namespace, key)

    def key_list(self, namespace: Namespace) -> list[str]:
        """Keys of both tiers: the long tier's not shadowed, then the short tier's."""
        with self._lock:
            short = self.short.key_list(namespace)
            seen = set(short)
            return [k for k in self.long.key_list(namespace) if k not in seen] + short

    def lifecycle(self, namespace: Namespace, keys: Sequence[str]) -> dict:
        with self._lock:
            return {**self.long.lifecycle(namespace, keys), **self.short.lifecycle(namespace, keys)}

    def count(self, namespace: NamespaceLike) -> int:
        """Distinct keys of ``namespace`` across both tiers.

        Raises
        ------
        InvalidNamespaceError
        """
        with self._lock:
            return len(self.key_list(_validate.namespace(namespace)))

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        with self._lock:
            return sorted(set(self.short.namespaces(prefix)) | set(self.long.namespaces(prefix)))

    def speakers(self, namespace: Namespace, hybrid: HybridWeights) -> list[str]:
        with self._lock:
            return list(self.short.speakers(namespace, hybrid)) + \
                list(self.long.speakers(namespace, hybrid))

    def dense_query(self, namespace: NamespaceLike, text: str, *,
                    hybrid: HybridWeights | None = None) -> str:
        """The text whose embedding :meth:`search` expects as ``query_vector``:
        ``self.prepare(namespace, text, hybrid=hybrid).dense`` (both tiers' speakers known).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, InvalidArgumentTypeError
        """
        return self.prepare(namespace, text, hybrid=hybrid).dense

    # ------------------------------------------------------------------ search
    def search(self, query: Any, text: str | None = None, *, top_k: int = 5,
               threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: Any = None, hybrid: HybridWeights | None = None,
               refresh_ttl: bool | None = None, explain: bool = False,
               missing_ok: bool = True) -> list[MemoryHit]:
        """Rank both tiers with one formula, de-duplicate by key (short wins), keep ``top_k``.

        Arguments as :meth:`MemoryStore.search` (``weights`` defaults to ``self.weights``,
        ``hybrid`` to ``self.hybrid``). Only the returned memories are refreshed, each in its
        own tier. Ties: short tier first.
        """
        rq = self.resolve(query, text, top_k=top_k, threshold=threshold, weights=weights,
                          filter=filter, touch=touch, query_vector=query_vector, hybrid=hybrid,
                          refresh_ttl=refresh_ttl)
        if rq is None:
            return []
        if not missing_ok:
            self.require_namespace(rq.namespace)
        with self._lock:
            rank_q, offset = rq, 0.0
            sig_short = sig_long = None
            if rq.prepared is not None and rq.hybrid.normalize:
                # z statistics over both tiers' memories (one population, comparable scores)
                sig_short, sig_long = self.short.signals(rq), self.long.signals(rq)
                pooled, offset = pooled_weights(
                    rq.hybrid, [np.zeros((3, 3)) if s is None else s.moments
                                for s in (sig_short, sig_long)])
                rank_q = replace(rq, hybrid=pooled)
            short_hits = self.short.scan(rank_q, sig_short)
            k_long = rq.top_k
            while True:
                long_hits = self.long.scan(replace(rank_q, top_k=k_long), sig_long)
                shadow = self.short.lifecycle(rq.namespace, [h.key for h in long_hits])
                kept = [h if h.tier is MemoryTier.LONG else replace(h, tier=MemoryTier.LONG)
                        for h in long_hits if h.key not in shadow]
                if len(kept) >= rq.top_k or len(long_hits) < k_long:
                    break
                k_long = rq.top_k + len(self.short.key_list(rq.namespace))
            merged = sorted(short_hits + kept, key=lambda h: -h.score)[: rq.top_k]
            if offset:
                merged = [replace(h, score=h.score + offset) for h in merged]
            fused = [h.score for h in merged]
            merged = calibrated(merged, rq)
            if explain:
                merged = explained(merged, fused, self._explanations(rq, merged, sig_short,
                                                                     sig_long), rq)
            if rq.touch or rq.refresh_ttl:
                self.refresh(rq, [h.key for h in merged], merged)
            return merged

    def _explanations(self, rq: ResolvedQuery, hits: Sequence[MemoryHit], sig_short: Any,
                      sig_long: Any) -> list:
        """Each hit's terms from its tier, z statistics pooled over both tiers."""
        stats = None
        if rq.prepared is not None and rq.hybrid.normalize:
            stats = pooled_moments([np.zeros((3, 3)) if s is None else s.moments
                                    for s in (sig_short, sig_long)])
        out: dict = {}
        for tier, store in ((MemoryTier.SHORT, self.short), (MemoryTier.LONG, self.long)):
            mine = [h for h in hits if h.tier is tier]
            out.update(zip((h.key for h in mine), store.explanations(rq, mine, stats)))
        return [out[h.key] for h in hits]

    def refresh(self, rq: ResolvedQuery, keys: Sequence[str],
                hits: Sequence[MemoryHit] | None = None) -> int:
        with self._lock:
            if hits is None:
                return self.short.refresh(rq, keys) + self.long.refresh(rq, keys)
            n = self.short.refresh(rq, [h.key for h in hits if h.tier is MemoryTier.SHORT])
            long_keys = [h.key for h in hits if h.tier is MemoryTier.LONG]
            return n + (self.long.refresh(rq, long_keys) if long_keys else 0)

    def touch(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        with self._lock:
            keys = list(keys)
            in_short = set(self.short.keys(namespace))
            return self.short.touch(namespace, [k for k in keys if k in in_short]) + \
                self.long.touch(namespace, [k for k in keys if k not in in_short])

    # ------------------------------------------------------------------ removal
    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]:
        """Remove ``keys`` from both tiers (so ``delete``/``delete_many`` act on both); the
        keys either tier held live (tier protocol)."""
        with self._lock:
            a = self.short.delete_keys(namespace, keys)
            b = self.long.delete_keys(namespace, keys)
            return list(dict.fromkeys(a + b))

    def clear(self, namespace: NamespaceLike) -> int:
        """Remove every memory of ``namespace`` from both tiers; returns how many distinct keys."""
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
        """
        with self._lock:
            return {
                "short": self.short.stats(),
                "long": {ns: self.long.count(ns) for ns in self.long.namespaces()},
                "promoted": self._promoted,
                "forgotten": self._forgotten,
                "last_consolidated_at": self._last_consolidated_at,
            }
