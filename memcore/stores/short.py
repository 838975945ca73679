"""ShortTermMemory: a bounded, in-memory working tier with one FIFO per namespace.

Layout per namespace (a ``_Shelf``): an ``OrderedDict`` key -> row (the FIFO order, oldest
first) and column arrays indexed by row -- ``vectors`` (rows, dim) float32, ``last_accessed_at``
float64 Unix seconds, ``importance`` float32, ``access_count`` int64, ``alive`` bool -- grown by
doubling up to ``capacity``. Deleted and evicted rows are marked dead and reused by later puts.
Search hands the columns to the fused top-k kernel (with an embedder) or ranks the lexical
scorer's similarities with the rerank kernel (without one), so both modes share the ranking
contract of :mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import replace
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.errors import (
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidVectorError,
)
from memcore.hybrid import HybridWeights, NamespaceRecall
from memcore.query_prep import PreparedQuery, QueryPreparer, identity_preparer
from memcore.stores.base import as_query, sorted_namespaces
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
    system_clock,
)

# The one place the stores pick their ranking kernels.
from memcore.kernels.topk import fused_topk, rerank  # noqa: E402

__all__ = ["ShortTermMemory", "EvictionHandler"]

#: Called with the memories a put evicts (oldest first) and their vectors
#: ((n, dim) float32, or None for a store without embedder), before they are removed.
EvictionHandler = Callable[[Sequence[StoredMemory], "np.ndarray | None"], None]

_INITIAL_ROWS = 16


def _default_preparer():
    from memcore.query_prep import DefaultQueryPreparer

    return DefaultQueryPreparer()


_SCALARS = (str, int, float, bool, type(None))


def _copy_meta(meta: Mapping[str, Any]) -> dict:
    """An independent copy of JSON metadata (shallow when every value is a scalar)."""
    if all(type(v) in _SCALARS for v in meta.values()):
        return dict(meta)
    return copy.deepcopy(dict(meta))


class _Shelf:
    """One namespace's rows. Not thread-safe by itself: the store's lock guards it."""

    __slots__ = ("order", "keys", "texts", "metadata", "created_at", "updated_at", "importance_py",
                 "vectors", "last_accessed_at", "importance", "access_count", "alive", "high",
                 "free", "recall")

    def __init__(self, dim: int | None, capacity: int):
        rows = min(_INITIAL_ROWS, capacity)
        self.order: OrderedDict[str, int] = OrderedDict()
        self.keys: list[str | None] = [None] * rows
        self.texts: list[str | None] = [None] * rows
        self.metadata: list[dict | None] = [None] * rows
        self.importance_py: list[float] = [0.0] * rows
        self.created_at = np.zeros(rows, np.float64)
        self.updated_at = np.zeros(rows, np.float64)
        self.last_accessed_at = np.zeros(rows, np.float64)
        self.importance = np.zeros(rows, np.float32)
        self.access_count = np.zeros(rows, np.int64)
        self.alive = np.zeros(rows, np.bool_)
        self.vectors = None if dim is None else np.zeros((rows, dim), np.float32)
        self.high = 0  # rows [0, high) have been used at least once
        self.free: list[int] = []
        self.recall: NamespaceRecall | None = None   # hybrid indexes, built on first use

    def _grow(self, capacity: int, new: int | None = None) -> None:
        old = self.alive.shape[0]
        new = min(max(2 * old, 1), capacity) if new is None else new
        pad = new - old
        for name in ("keys", "texts", "metadata"):
            getattr(self, name).extend([None] * pad)
        self.importance_py.extend([0.0] * pad)
        for name in ("created_at", "updated_at", "last_accessed_at", "importance",
                     "access_count", "alive"):
            arr = getattr(self, name)
            grown = np.zeros(new, arr.dtype)
            grown[:old] = arr
            setattr(self, name, grown)
        if self.vectors is not None:
            grown = np.zeros((new, self.vectors.shape[1]), np.float32)
            grown[:old] = self.vectors
            self.vectors = grown

    def reserve(self, rows: int, capacity: int) -> None:
        """Grow once so that ``rows`` rows fit (at most ``capacity``)."""
        while self.alive.shape[0] < min(rows, capacity):
            self._grow(capacity, min(max(rows, 2 * self.alive.shape[0]), capacity))

    def take_row(self, capacity: int) -> int:
        if self.free:
            return self.free.pop()
        if self.high == self.alive.shape[0]:
            self._grow(capacity)
        self.high += 1
        return self.high - 1

    def release(self, row: int) -> None:
        if self.recall is not None:
            self.recall.delete(row)
        self.alive[row] = False
        self.keys[row] = self.texts[row] = self.metadata[row] = None
        if self.vectors is not None:
            self.vectors[row] = 0.0
        self.free.append(row)

    def stored(self, ns: Namespace, row: int) -> StoredMemory:
        return StoredMemory(
            namespace=ns, key=self.keys[row], text=self.texts[row],
            importance=self.importance_py[row], metadata=_copy_meta(self.metadata[row]),
            created_at=float(self.created_at[row]), updated_at=float(self.updated_at[row]),
            last_accessed_at=float(self.last_accessed_at[row]),
            access_count=int(self.access_count[row]), tier=MemoryTier.SHORT)

    def recall_source(self) -> tuple:
        """Live rows in FIFO order (oldest first) with texts, vectors and metadata."""
        rows = list(self.order.values())
        return (rows, [self.texts[r] for r in rows], self.vectors[rows],
                [self.metadata[r] for r in rows])


class ShortTermMemory:
    """A bounded working memory: one FIFO of at most ``capacity`` keys per namespace.

    Putting a key appends it to its namespace's FIFO (re-putting an existing key replaces it and
    moves it to the young end); when a namespace exceeds ``capacity`` its oldest keys are
    evicted, after ``on_evict`` (if set) has seen them. Lookups by key are exact. With an
    ``embedder`` each memory keeps its unit vector and search ranks by cosine similarity; with
    none, similarity comes from a lexical ``scorer`` (``memcore.embedders.LexicalScorer`` by
    default) and no vectors are kept. Either way the score is the fused formula of
    :class:`~memcore.DecayWeights`, which defaults here to pure similarity.

    Lifecycle: ``put`` of a new key sets ``created_at = updated_at = last_accessed_at = now`` and
    ``access_count = 0``; replacing a key keeps ``created_at`` and ``access_count`` and sets
    ``updated_at = last_accessed_at = now``. ``search`` refreshes what it returns
    (``last_accessed_at = now``, ``access_count += 1``) unless ``touch=False``; ``get`` never
    does. Namespaces with no keys are not listed. Instances are thread-safe (one ``RLock``).

    Parameters
    ----------
    capacity : int, default 1000
        Maximum keys per namespace, >= 1.
    embedder : Embedder, optional
        Encodes texts to (n, dim) float32 unit vectors. Mutually exclusive with ``scorer``.
    scorer : object with ``score_many(query, texts) -> ndarray (n,) float32``, optional
        Lexical similarity used when there is no embedder; defaults to
        ``memcore.embedders.LexicalScorer()``.
    clock : Clock, default system_clock
        Returns Unix seconds; every timestamp and every recency comes from it.
    weights : DecayWeights, optional
        Default ranking weights; ``DecayWeights.similarity()`` when None.
    on_evict : EvictionHandler, optional
        ``on_evict(memories, vectors)`` is called with the memories about to be evicted (oldest
        first; ``vectors`` (n, dim) float32 or None without embedder) while the store's lock is
        held. If it raises, the put that caused the eviction is aborted with nothing changed.
    hybrid : HybridWeights, optional
        Default recall of :meth:`search`; ``HybridWeights.similarity()`` (pure cosine, the
        fused formula alone) when None. Other weights rank by hybrid recall
        (:mod:`memcore.hybrid`: BM25 + dense + episodic context from the ``episode`` and
        ``speaker`` metadata); its per-namespace index is built on the first such search and
        kept current by every write after it. Needs an embedder.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery`` for hybrid recall;
        :class:`~memcore.query_prep.DefaultQueryPreparer` when None.

    Raises
    ------
    ValueError
        If ``capacity`` is not an int >= 1, both ``embedder`` and ``scorer`` are given, or
        hybrid weights / a query preparer are given without an embedder.
    TypeError
        If ``weights`` is not a DecayWeights, ``hybrid`` not a HybridWeights, ``clock``,
        ``on_evict`` or ``query_preparer`` is not callable, or the scorer lacks ``score_many``.

    Examples
    --------
    >>> stm = ShortTermMemory(capacity=2)
    >>> _ = stm.put("robot", "a", "the red door is locked")
    >>> [h.key for h in stm.search("robot", "red door", top_k=1)]
    ['a']
    """

    def __init__(self, capacity: int = 1000, embedder: Any = None, scorer: Any = None, *,
                 clock: Clock = system_clock, weights: DecayWeights | None = None,
                 on_evict: EvictionHandler | None = None, hybrid: HybridWeights | None = None,
                 query_preparer: QueryPreparer | None = None):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise InvalidArgumentError(f"capacity must be an int >= 1, got {capacity!r}")
        if embedder is not None and scorer is not None:
            raise InvalidArgumentError("give either an embedder (vector similarity) or a scorer (lexical "
                             "similarity), not both")
        if embedder is not None:
            dim = getattr(embedder, "dim", None)
            if (not callable(getattr(embedder, "encode", None)) or not isinstance(dim, int)
                    or isinstance(dim, bool) or dim < 1):
                raise InvalidArgumentTypeError(f"embedder must have encode() and an int dim >= 1, got "
                                f"{type(embedder).__name__}")
        if embedder is None and scorer is None:
            from memcore.embedders.lexical import LexicalScorer

            scorer = LexicalScorer()
        if scorer is not None and not callable(getattr(scorer, "score_many", None)):
            raise InvalidArgumentTypeError(f"scorer must have score_many(query, texts), got {type(scorer).__name__}")
        if not callable(clock):
            raise InvalidArgumentTypeError(f"clock must be a callable returning Unix seconds, got {clock!r}")
        if weights is not None and not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        if on_evict is not None and not callable(on_evict):
            raise InvalidArgumentTypeError(f"on_evict must be callable, got {on_evict!r}")
        if hybrid is not None and not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        if query_preparer is not None and not callable(query_preparer):
            raise InvalidArgumentTypeError(f"query_preparer must be callable, got {query_preparer!r}")
        if embedder is None and (query_preparer is not None
                                 or (hybrid is not None and not hybrid.is_similarity)):
            raise InvalidArgumentError("hybrid recall needs an embedder (its dense signal); a "
                             "ShortTermMemory without one ranks by lexical similarity only")
        self.capacity = int(capacity)
        self.embedder = embedder
        self.scorer = scorer
        self.clock = clock
        self.weights = weights if weights is not None else DecayWeights.similarity()
        self.on_evict = on_evict
        self.hybrid = hybrid if hybrid is not None else HybridWeights.similarity()
        self.query_preparer = query_preparer
        self.dim: int | None = None if embedder is None else int(embedder.dim)
        self._shelves: dict[Namespace, _Shelf] = {}
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        mode = f"embedder={getattr(self.embedder, 'name', '?')!r}" if self.embedder else "lexical"
        return f"ShortTermMemory(capacity={self.capacity}, {mode}, namespaces={len(self._shelves)})"

    # ------------------------------------------------------------------ validation helpers

    def _now(self) -> float:
        now = float(self.clock())
        if not math.isfinite(now):
            raise InvalidArgumentError(f"clock returned {now!r}; it must return finite Unix seconds")
        return now

    def _vectors_for(self, texts: Sequence[str], vectors: Any, name: str) -> np.ndarray | None:
        """Validated (n, dim) float32 unit rows: the given ones, else the embedder's."""
        if self.embedder is None:
            if vectors is not None:
                raise InvalidVectorError(
                    f"{name} given, but this ShortTermMemory has no embedder (it ranks by lexical "
                    "similarity and keeps no vectors); construct it with embedder=...")
            return None
        if vectors is not None:
            out = _validate.vectors(vectors, self.dim, name=name)
            if out.shape[0] != len(texts):
                raise InvalidArgumentError(f"{name} has {out.shape[0]} rows for {len(texts)} items")
            return out
        enc = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        if enc.shape != (len(texts), self.dim):
            raise EmbedderMismatchError(
                f"embedder {getattr(self.embedder, 'name', '?')!r} returned shape {enc.shape}, "
                f"expected ({len(texts)}, {self.dim})")
        return np.ascontiguousarray(enc)

    # ------------------------------------------------------------------ writes

    def put(self, namespace: NamespaceLike, key: str, text: str, *, importance: float = 0.5,
            metadata: Mapping[str, Any] | None = None, vector: Any = None) -> StoredMemory:
        """Store or replace one memory at the young end of its namespace's FIFO.

        Parameters
        ----------
        namespace : str or tuple of str
        key : str
            Non-empty, no NUL.
        text : str
        importance : float, default 0.5
            In [0, 1].
        metadata : dict, optional
            JSON-serialisable; stored as a deep copy.
        vector : array_like of shape (dim,), optional
            Precomputed embedding of ``text`` (validated, L2-normalised); skips the embedder.
            Only for a store with an embedder.

        Returns
        -------
        StoredMemory
            The memory as stored (tier SHORT).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ValueError, TypeError
            On a malformed namespace, key, text, importance or metadata.
        DimensionMismatchError, InvalidVectorError
            If ``vector`` has the wrong dim, holds NaN/inf, is all zeros, or the store has no
            embedder. Nothing changes when anything raises.

        Examples
        --------
        >>> stm = ShortTermMemory(capacity=10)
        >>> stm.put(("robot", "patrol"), "door", "the red door is locked").created_at > 0
        True
        """
        vecs = None
        if vector is not None:
            if self.embedder is None:
                self._vectors_for([text], vector, "vector")  # raises: no embedder
            vecs = _validate.vector(vector, self.dim, name="vector")
        item = MemoryItem(key=key, text=text, importance=importance,
                          metadata=metadata if metadata is not None else {})
        return self._put_items(namespace, [item], None if vecs is None else vecs[None, :],
                               "vector")[0]

    def put_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem], *,
                 vectors: Any = None) -> list[StoredMemory]:
        """Store or replace a batch of memories with one embedder call.

        The batch is applied in order (a key repeated in the batch ends with its last version),
        then the namespace is trimmed to ``capacity`` from its oldest end, so a batch larger than
        ``capacity`` keeps only its last ``capacity`` distinct keys.

        Parameters
        ----------
        namespace : str or tuple of str
        items : sequence of MemoryItem
        vectors : array_like of shape (len(items), dim), optional
            Precomputed embeddings (validated, L2-normalised); skips the embedder.

        Returns
        -------
        list of StoredMemory
            One per item, in order.

        Raises
        ------
        TypeError
            If an item is not a MemoryItem.
        DimensionMismatchError, InvalidVectorError, ValueError
            As for :meth:`put`, or if ``vectors`` has a different row count. Nothing changes
            when anything raises.

        Examples
        --------
        >>> stm = ShortTermMemory(capacity=10)
        >>> len(stm.put_many("robot", [MemoryItem("a", "hello"), MemoryItem("b", "world")]))
        2
        """
        return self._put_items(namespace, list(items), vectors, "vectors")

    def _put_items(self, namespace: NamespaceLike, items: list, vectors: Any,
                   vname: str) -> list[StoredMemory]:
        ns = _validate.namespace(namespace)
        clean = []
        for i, it in enumerate(items):
            if not isinstance(it, MemoryItem):
                raise InvalidArgumentTypeError(f"items[{i}] must be a MemoryItem, got {type(it).__name__}")
            clean.append((_validate.key(it.key), _validate.memory_text(it.text),
                          _validate.importance(it.importance), _validate.metadata(it.metadata)))
        vecs = self._vectors_for([c[1] for c in clean], vectors, vname)
        with self._lock:
            now = self._now()
            shelf = self._shelves.get(ns)
            records = []
            for i, (k, t, imp, meta) in enumerate(clean):
                row = shelf.order.get(k) if shelf is not None else None
                if row is not None:
                    created, count = float(shelf.created_at[row]), int(shelf.access_count[row])
                else:
                    created, count = now, 0
                records.append(StoredMemory(
                    namespace=ns, key=k, text=t, importance=imp, metadata=meta, created_at=created,
                    updated_at=now, last_accessed_at=now, access_count=count,
                    tier=MemoryTier.SHORT))
            self._insert(ns, records, vecs)
        return records  # the shelf keeps its own copies of the metadata

    def put_stored(self, memories: Sequence[StoredMemory], vectors: Any = None) -> None:
        """Insert or replace memories keeping their lifecycle fields exactly as given.

        The import path of tier moves (:class:`~memcore.TwoTierMemory`): ``created_at``,
        ``updated_at``, ``last_accessed_at`` and ``access_count`` are kept, no embedder runs.
        Memories may span namespaces; each namespace is then trimmed to ``capacity``.

        Parameters
        ----------
        memories : sequence of StoredMemory
        vectors : array_like of shape (len(memories), dim), float32
            Their embeddings; required with an embedder, must be None without one. Unit rows
            are kept bit for bit, others normalised; all-zero rows (an embedder's vector for a
            text without content) are kept as they are.

        Raises
        ------
        TypeError
            If a memory is not a StoredMemory.
        ValueError, InvalidVectorError, DimensionMismatchError
            On invalid fields or vectors; nothing changes.

        Examples
        --------
        >>> src = ShortTermMemory(capacity=10); dst = ShortTermMemory(capacity=10)
        >>> m = src.put("ns", "k", "some text")
        >>> dst.put_stored([m]); dst.get("ns", "k").created_at == m.created_at
        True
        """
        memories = list(memories)
        clean = []
        for i, m in enumerate(memories):
            if not isinstance(m, StoredMemory):
                raise InvalidArgumentTypeError(f"memories[{i}] must be a StoredMemory, got {type(m).__name__}")
            times = (m.created_at, m.updated_at, m.last_accessed_at)
            if not all(isinstance(t, (int, float)) and math.isfinite(t) for t in times):
                raise InvalidArgumentError(f"memories[{i}] ({m.key!r}) has non-finite timestamps {times}")
            if isinstance(m.access_count, bool) or not isinstance(m.access_count, (int, np.integer)) \
                    or m.access_count < 0:
                raise InvalidArgumentError(f"memories[{i}] ({m.key!r}) access_count must be an int >= 0, "
                                 f"got {m.access_count!r}")
            clean.append(StoredMemory(
                namespace=_validate.namespace(m.namespace), key=_validate.key(m.key),
                text=_validate.text(m.text), importance=_validate.importance(m.importance),
                metadata=_validate.metadata(m.metadata), created_at=float(m.created_at),
                updated_at=float(m.updated_at), last_accessed_at=float(m.last_accessed_at),
                access_count=int(m.access_count), tier=MemoryTier.SHORT))
        if self.embedder is None:
            if vectors is not None:
                raise InvalidVectorError("vectors given, but this ShortTermMemory has no embedder")
            vecs = None
        else:
            if vectors is None:
                raise InvalidVectorError(
                    f"put_stored needs vectors of shape ({len(clean)}, {self.dim}) for a store "
                    "with an embedder")
            vecs = _validate.vectors(vectors, self.dim, name="vectors", allow_zero=True) \
                if len(clean) else np.zeros((0, self.dim), np.float32)
            if len(clean):  # keep rows that are already unit-norm bit for bit (tier moves)
                raw = np.asarray(vectors, dtype=np.float32).reshape(vecs.shape)
                unit = np.abs(np.linalg.norm(raw.astype(np.float64), axis=1) - 1.0) < 1e-6
                vecs[unit] = raw[unit]
            if vecs.shape[0] != len(clean):
                raise InvalidArgumentError(f"vectors has {vecs.shape[0]} rows for {len(clean)} memories")
        groups: dict[Namespace, list[int]] = {}
        for i, m in enumerate(clean):
            groups.setdefault(m.namespace, []).append(i)
        with self._lock:
            # applied namespace by namespace (all-or-nothing within each one)
            for ns, idx in groups.items():
                self._insert(ns, [clean[i] for i in idx], None if vecs is None else vecs[idx])

    def _put_validated(self, ns: Namespace, records: list[StoredMemory],
                       vecs: np.ndarray | None) -> None:
        """:meth:`put_stored` for records and vectors the caller has validated. Internal."""
        with self._lock:
            self._insert(ns, records, vecs)

    def _insert(self, ns: Namespace, records: list[StoredMemory], vecs: np.ndarray | None) -> None:
        """Apply validated records (in order) to namespace ``ns`` and trim it. Lock held."""
        if not records:
            return
        shelf = self._shelves.get(ns)
        batch_keys: dict[str, int] = {}
        for j, r in enumerate(records):
            batch_keys.pop(r.key, None)  # last occurrence wins, at its position
            batch_keys[r.key] = j
        old_keys = shelf.order if shelf is not None else {}
        n_new = sum(1 for k in batch_keys if k not in old_keys)
        n_final = len(old_keys) + n_new
        overflow = n_final - self.capacity
        victims_old: list[str] = []
        victims_new: list[str] = []
        if overflow > 0:
            for k in old_keys:  # oldest first; keys re-put in this batch move to the young end
                if len(victims_old) == overflow:
                    break
                if k not in batch_keys:
                    victims_old.append(k)
            if len(victims_old) < overflow:
                victims_new = list(batch_keys)[: overflow - len(victims_old)]
        if (victims_old or victims_new) and self.on_evict is not None:
            mems = [shelf.stored(ns, shelf.order[k]) for k in victims_old]
            mems += [records[batch_keys[k]] for k in victims_new]
            ev_vecs = None
            if self.dim is not None:
                rows = [shelf.vectors[shelf.order[k]] for k in victims_old]
                rows += [vecs[batch_keys[k]] for k in victims_new]
                ev_vecs = np.ascontiguousarray(np.stack(rows), dtype=np.float32)
            self.on_evict(mems, ev_vecs)
        # from here on nothing raises: mutate
        if shelf is None:
            shelf = self._shelves[ns] = _Shelf(self.dim, self.capacity)
        for k in victims_old:
            shelf.release(shelf.order.pop(k))
        skip = set(victims_new)
        rows, js = [], []
        shelf.reserve(shelf.high + max(0, n_new - len(victims_new) - len(shelf.free)),
                      self.capacity)
        order, take = shelf.order, shelf.take_row
        keys, texts, metas, imps = shelf.keys, shelf.texts, shelf.metadata, shelf.importance_py
        for k, j in batch_keys.items():
            if k in skip:
                continue
            r = records[j]
            row = order.pop(k, None)
            if row is None:
                row = take(self.capacity)
            order[k] = row
            keys[row] = k
            texts[row] = r.text
            metas[row] = _copy_meta(r.metadata)
            imps[row] = r.importance
            rows.append(row)
            js.append(j)
        if rows:
            sel = [records[j] for j in js]
            shelf.importance[rows] = [r.importance for r in sel]
            shelf.created_at[rows] = [r.created_at for r in sel]
            shelf.updated_at[rows] = [r.updated_at for r in sel]
            shelf.last_accessed_at[rows] = [r.last_accessed_at for r in sel]
            shelf.access_count[rows] = [r.access_count for r in sel]
            shelf.alive[rows] = True
            if vecs is not None:
                shelf.vectors[rows] = vecs[js]
            if shelf.recall is not None and shelf.recall.indexes:
                for row in rows:
                    shelf.recall.put(row, texts[row], shelf.vectors[row], metas[row])
        if not shelf.order:
            del self._shelves[ns]

    # ------------------------------------------------------------------ reads

    def get(self, namespace: NamespaceLike, key: str) -> StoredMemory | None:
        """The memory stored under ``key``, or None. Does not refresh its access fields.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError
            On a malformed namespace or key.

        Examples
        --------
        >>> ShortTermMemory(capacity=1).get("robot", "missing") is None
        True
        """
        ns = _validate.namespace(namespace)
        key = _validate.key(key)
        with self._lock:
            shelf = self._shelves.get(ns)
            row = shelf.order.get(key) if shelf is not None else None
            return None if row is None else shelf.stored(ns, row)

    def keys(self, namespace: NamespaceLike) -> list[str]:
        """The namespace's keys, oldest first (the eviction order).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> ShortTermMemory(capacity=1).keys("robot")
        []
        """
        ns = _validate.namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            return [] if shelf is None else list(shelf.order)

    def __contains__(self, item: tuple) -> bool:
        """``(namespace, key) in store``."""
        ns, key = _validate.namespace(item[0]), _validate.key(item[1])
        with self._lock:
            shelf = self._shelves.get(ns)
            return shelf is not None and key in shelf.order

    def _hybrid(self, hybrid: Any) -> HybridWeights:
        if hybrid is None:
            return self.hybrid
        if not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        if self.embedder is None and not hybrid.is_similarity:
            raise InvalidArgumentError("hybrid recall needs an embedder; this ShortTermMemory ranks by "
                             "lexical similarity only (pass hybrid=None)")
        return hybrid

    def _recall_index(self, shelf: _Shelf, hw: HybridWeights):
        if shelf.recall is None:
            shelf.recall = NamespaceRecall(self.dim, self.query_preparer)
        return shelf.recall.index(hw, shelf.recall_source)

    def prepare(self, namespace: NamespaceLike, text: str, *,
                hybrid: HybridWeights | None = None) -> PreparedQuery:
        """The query preparer's forms of ``text`` for this namespace (its speakers known).

        With hybrid weights, ``prepared.dense`` is the text whose embedding ``search``
        expects as ``query_vector``; with the similarity preset it is ``text`` itself.

        Parameters
        ----------
        namespace : str or tuple of str
        text : str
        hybrid : HybridWeights, optional
            The store's ``hybrid`` when None.

        Returns
        -------
        PreparedQuery

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, TypeError

        Examples
        --------
        >>> ShortTermMemory(capacity=5).prepare("robot", "where is Ann?").dense
        'where is Ann?'
        """
        ns = _validate.namespace(namespace)
        text = _validate.text(text)
        hw = self._hybrid(hybrid)
        if hw.is_similarity:
            return identity_preparer(text)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None:
                return (self.query_preparer or _default_preparer())(text, ())
            return self._recall_index(shelf, hw).prepare(text)

    def entities(self, namespace: NamespaceLike, *,
                 hybrid: HybridWeights | None = None) -> list[str]:
        """Speaker names of the namespace's memories (hybrid recall's known entities).

        Raises
        ------
        InvalidNamespaceError, TypeError

        Examples
        --------
        >>> ShortTermMemory(capacity=5).entities("robot")
        []
        """
        ns = _validate.namespace(namespace)
        hw = self._hybrid(hybrid)
        if hw.is_similarity:
            hw = HybridWeights.hybrid()
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or self.embedder is None:
                return []
            return self._recall_index(shelf, hw).entities()

    def search(self, query: MemoryQuery | NamespaceLike, text: str | None = None, *,
               top_k: int = 5, threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: Any = None, hybrid: HybridWeights | None = None
               ) -> list[MemoryHit]:
        """Rank a namespace's memories for a query by the fused score.

        ``score = w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance * imp``
        with ``sim`` the cosine similarity (embedder) or the scorer's lexical similarity, and
        ``age = now - last_accessed_at`` in seconds. Candidates need ``sim >= threshold`` and
        must match ``filter`` (applied before top-k). Ties rank by insertion row.

        Parameters
        ----------
        query : MemoryQuery or str or tuple of str
            A query, or the namespace of the keyword form ``search(namespace, text, ...)``.
        text : str, optional
            The query text (keyword form only). Empty or whitespace-only text returns [].
        top_k : int, default 5
            At most this many hits; all qualifying hits when fewer exist (no padding).
        threshold : float, default -1.0
            Minimum similarity.
        weights : DecayWeights, optional
            The store's ``weights`` when None.
        filter : dict, optional
            Metadata filter (equality, ``$in``, ``$ne``, ``$eq`` on top-level keys).
        touch : bool, default True
            Refresh ``last_accessed_at = now`` and ``access_count += 1`` of the returned memories.
        query_vector : array_like of shape (dim,), optional
            Precomputed embedding of the query text; the embedder is not called. Only for a
            store with an embedder. With hybrid weights it should embed
            ``self.prepare(namespace, text).dense`` (what the store encodes itself).
        hybrid : HybridWeights, optional
            The store's ``hybrid`` when None. Anything but the similarity preset ranks by
            hybrid recall (:mod:`memcore.hybrid`): ``score`` is then the fused z-score,
            ``similarity`` the query's cosine with the memory's combined (memory + episode
            context) embedding, which ``threshold`` bounds; ``weights.w_similarity`` scales
            the dense weight.

        Returns
        -------
        list of MemoryHit
            Best first. ``recency``, ``score`` and ``last_accessed_at`` are the values ranking
            used, i.e. before this search's refresh. A query with no semantic signal -- its
            embedding is all zeros, or (lexical mode) it scores 0 against itself -- returns [].

        Raises
        ------
        ValueError
            If ``top_k < 1``, the threshold is not finite, or the filter has an unknown operator.
        TypeError
            On a malformed call form or weights.
        InvalidVectorError, DimensionMismatchError
            On a bad ``query_vector`` or one given to a store without embedder.

        Examples
        --------
        >>> stm = ShortTermMemory(capacity=10)
        >>> _ = stm.put("robot", "door", "the red door is locked")
        >>> stm.search("robot", "   ")
        []
        """
        q = as_query(query, text, top_k=top_k, threshold=threshold, weights=weights,
                     filter=filter, touch=touch)
        qvec = None
        if query_vector is not None:
            if self.embedder is None:
                raise InvalidVectorError(
                    "query_vector given, but this ShortTermMemory has no embedder (lexical "
                    "similarity); pass only the text")
            qvec = _validate.vector(query_vector, self.dim, name="query_vector")
        if not q.text.strip():
            return []
        w = q.weights if q.weights is not None else self.weights
        hw = self._hybrid(hybrid)
        prepared = None
        if not hw.is_similarity:
            prepared = self.prepare(q.namespace, q.text, hybrid=hw)
        elif hw.dense != 1.0:
            w = replace(w, w_similarity=w.w_similarity * hw.dense)
        if self.embedder is not None and qvec is None:
            qvec = self._vectors_for([q.text if prepared is None else prepared.dense], None,
                                     "query")[0]
            if not qvec.any():
                return []
        if self.embedder is None and not self._scores(q.text, [q.text])[0] > 0:
            return []  # a query that does not even match itself has no lexical signal
        with self._lock:
            shelf = self._shelves.get(q.namespace)
            if shelf is None:
                return []
            now = self._now()
            if prepared is None:
                rows, scores, sims = self._rank(shelf, q, qvec, w, now)
            else:
                rows, scores, sims = self._rank_hybrid(shelf, q, prepared, qvec, w, hw, now)
            hits = []
            for row, score, sim in zip(rows.tolist(), scores.tolist(), sims.tolist()):
                t = float(shelf.last_accessed_at[row])
                hits.append(MemoryHit(
                    key=shelf.keys[row], text=shelf.texts[row], score=score, similarity=sim,
                    recency=0.5 ** (max(now - t, 0.0) / w.half_life),
                    importance=shelf.importance_py[row], tier=MemoryTier.SHORT,
                    metadata=_copy_meta(shelf.metadata[row]), namespace=q.namespace,
                    created_at=float(shelf.created_at[row]), last_accessed_at=t))
            if q.touch and rows.shape[0]:
                shelf.last_accessed_at[rows] = now
                shelf.access_count[rows] += 1
            return hits

    def _rank(self, shelf: _Shelf, q: MemoryQuery, qvec: np.ndarray | None, w: DecayWeights,
              now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hi = shelf.high
        alive = shelf.alive[:hi]
        if q.filter:
            alive = alive.copy()
            for k, row in shelf.order.items():
                if not _validate.matches_filter(shelf.metadata[row], q.filter):
                    alive[row] = False
        k = min(q.top_k, len(shelf.order))
        out_ids = np.empty(k, np.int64)
        out_scores = np.empty(k, np.float32)
        out_sims = np.empty(k, np.float32)
        args = (shelf.last_accessed_at[:hi], shelf.importance[:hi], alive, float(now),
                float(w.half_life), float(w.w_similarity), float(w.w_recency),
                float(w.w_importance), float(q.threshold),
                out_ids, out_scores, out_sims)
        if qvec is not None:
            m = fused_topk(qvec, shelf.vectors[:hi], *args)
        else:
            cand = np.flatnonzero(alive).astype(np.int64)
            sims = self._scores(q.text, [shelf.texts[r] for r in cand])
            m = rerank(cand, sims, *args)
        return out_ids[:m], out_scores[:m], out_sims[:m]

    def _rank_hybrid(self, shelf: _Shelf, q: MemoryQuery, prepared: PreparedQuery,
                     qvec: np.ndarray, w: DecayWeights, hw: HybridWeights, now: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = self._recall_index(shelf, hw)
        n = idx.n_rows
        alive = self._alive_mask(shelf, q, n)
        if w.w_similarity != 1.0:
            hw = replace(hw, dense=hw.dense * w.w_similarity)
        res = idx.search(prepared, qvec, top_k=min(q.top_k, len(shelf.order)), weights=hw,
                         decay=w, now=now, last_accessed_at=shelf.last_accessed_at[:n],
                         importance=shelf.importance[:n], alive=alive, threshold=q.threshold)
        m = res.count
        return res.ids[:m], res.scores[:m], res.sims[:m]

    @staticmethod
    def _alive_mask(shelf: _Shelf, q: MemoryQuery, n: int) -> np.ndarray:
        alive = shelf.alive[:n]
        if q.filter:
            alive = alive.copy()
            for k, row in shelf.order.items():
                if row < n and not _validate.matches_filter(shelf.metadata[row], q.filter):
                    alive[row] = False
        return alive

    def _hybrid_moments(self, q: MemoryQuery, qvec: np.ndarray, hw: HybridWeights
                        ) -> np.ndarray:
        """:meth:`HybridIndex.moments` of the namespace for a validated query (zeros when
        empty): for :class:`~memcore.TwoTierMemory`'s pooled statistics. Internal."""
        with self._lock:
            shelf = self._shelves.get(q.namespace)
            if shelf is None:
                return np.zeros((3, 3))
            idx = self._recall_index(shelf, hw)
            return idx.moments(idx.prepare(q.text), qvec, weights=hw,
                               alive=self._alive_mask(shelf, q, idx.n_rows))

    def _scores(self, query: str, texts: list) -> np.ndarray:
        sims = np.ascontiguousarray(self.scorer.score_many(query, texts), dtype=np.float32)
        if sims.shape != (len(texts),):
            raise InvalidArgumentError(f"scorer.score_many returned shape {sims.shape} for {len(texts)} texts")
        return sims

    def touch(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        """Refresh ``last_accessed_at = now`` and ``access_count += 1`` of the given keys.

        What ``search`` does to the memories it returns; for callers that merge results
        themselves (:class:`~memcore.TwoTierMemory`). Missing keys are ignored.

        Returns
        -------
        int
            How many keys were refreshed.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> ShortTermMemory(capacity=1).touch("robot", ["nothing"])
        0
        """
        ns = _validate.namespace(namespace)
        keys = [_validate.key(k) for k in keys]
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None:
                return 0
            rows = np.array([shelf.order[k] for k in dict.fromkeys(keys) if k in shelf.order],
                            np.int64)
            if rows.shape[0]:
                shelf.last_accessed_at[rows] = self._now()
                shelf.access_count[rows] += 1
            return int(rows.shape[0])

    def _lifecycle(self, namespace: Namespace, key: str) -> tuple[float, int] | None:
        """``(created_at, access_count)`` of a stored key, else None. Internal (tier moves)."""
        with self._lock:
            shelf = self._shelves.get(namespace)
            row = shelf.order.get(key) if shelf is not None else None
            return None if row is None else (float(shelf.created_at[row]),
                                             int(shelf.access_count[row]))

    # ------------------------------------------------------------------ removal / listing

    def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Remove ``key``; True when it existed. Its vector never matches again.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> ShortTermMemory(capacity=1).delete("robot", "missing")
        False
        """
        ns = _validate.namespace(namespace)
        key = _validate.key(key)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or key not in shelf.order:
                return False
            shelf.release(shelf.order.pop(key))
            if not shelf.order:
                del self._shelves[ns]
            return True

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
            shelf = self._shelves.get(ns)
            if shelf is None:
                return 0
            moving = [(k, row) for k, row in shelf.order.items()
                      if predicate(shelf.stored(ns, row))]
            if not moving:
                return 0
            mems = [shelf.stored(ns, row) for _, row in moving]
            vecs = None
            if self.dim is not None:
                vecs = np.ascontiguousarray(shelf.vectors[[row for _, row in moving]])
            sink(mems, vecs)
            for k, _ in moving:
                shelf.release(shelf.order.pop(k))
            if not shelf.order:
                del self._shelves[ns]
            return len(moving)

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        """Sorted namespaces holding at least one memory, under ``prefix`` (whole segments).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> stm = ShortTermMemory(capacity=5); _ = stm.put(("acme-corp",), "k", "x")
        >>> stm.namespaces(("acme",))
        []
        """
        with self._lock:
            return sorted_namespaces(list(self._shelves), prefix)

    def count(self, namespace: NamespaceLike) -> int:
        """Number of memories in ``namespace`` (0 when unknown).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> ShortTermMemory(capacity=5).count("robot")
        0
        """
        ns = _validate.namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            return 0 if shelf is None else len(shelf.order)

    def clear(self, namespace: NamespaceLike) -> int:
        """Remove every memory of ``namespace`` (not of namespaces below it); returns how many.

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> ShortTermMemory(capacity=5).clear("robot")
        0
        """
        ns = _validate.namespace(namespace)
        with self._lock:
            shelf = self._shelves.pop(ns, None)
            return 0 if shelf is None else len(shelf.order)

    def stats(self) -> dict[Namespace, int]:
        """Memories per namespace.

        Examples
        --------
        >>> ShortTermMemory(capacity=5).stats()
        {}
        """
        with self._lock:
            return {ns: len(s.order) for ns, s in sorted(self._shelves.items())}
