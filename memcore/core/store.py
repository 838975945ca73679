"""The store API, written once: :class:`MemoryStore`, its tier protocol and ``batch``.

Every store (:class:`~memcore.ShortTermMemory`, :class:`~memcore.LongTermMemory`,
:class:`~memcore.TwoTierMemory`) is a :class:`MemoryStore`; a caller can swap one for
another. Semantics every store keeps (and the state-machine tests check):

- A namespace is a str or a tuple of non-empty str segments without NUL; prefix listing
  matches whole segments only (``("acme",)`` never lists ``("acme-corp",)``).
- ``put`` on an existing key replaces text, vector, importance and metadata, keeps
  ``created_at`` and ``access_count`` and sets ``updated_at = last_accessed_at = now``; the old
  vector never matches again. A new key gets ``created_at = updated_at = last_accessed_at =
  now`` and ``access_count = 0``.
- A deleted key is never returned; ``search`` still returns up to ``top_k`` live items.
- ``top_k`` larger than the namespace returns every live item above the threshold.
- Empty or whitespace-only query text returns ``[]``: it carries no semantic signal.
- The filter (metadata and lifecycle columns) is a mask inside the ranking pass, before
  top-k; a malformed filter raises.
- ``search`` refreshes what it returns (``last_accessed_at = now``, ``access_count += 1``)
  unless ``touch=False``; ``get`` never does; nothing is deleted on the read path.
- A memory put with a ``ttl`` (seconds; or the store's default ``ttl``) expires at
  ``updated_at + ttl``: from then on it is invisible to ``get``, ``search``, ``count``,
  ``keys`` and ``namespaces`` (a put of its key makes a new memory); ``refresh_ttl`` on a read
  restarts the time to live; ``sweep()`` (and ``LongTermMemory.compact``) deletes expired
  memories.
- Instances are thread-safe (one ``RLock``).

The **tier protocol** (:class:`Tier`) is what :class:`~memcore.TwoTierMemory` needs of a tier
beyond the public API, for a query it resolved once: ``signals``/``scan`` it, ``refresh``
what was returned; ``write`` validated :class:`~memcore.core.rows.Rows`; read ``lifecycle``,
``key_list`` and ``speakers`` of a canonical namespace, ``delete_keys`` of it (validated
distinct keys). These trust their input: it was validated when the query, rows or keys were
built.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from memcore import _numba, _validate
from memcore.core import query as _query
from memcore.core.rank import Signals, explain, rank, signals
from memcore.core.rows import Rows, encoded
from memcore.core.table import Table, copy_metadata
from memcore.errors import InvalidArgumentTypeError, InvalidVectorError
from memcore.names import unknown_namespace
from memcore.core.query import ResolvedQuery
from memcore.recall.threads import check_threads
from memcore.recall.weights import HybridWeights
from memcore.recall.prep import PreparedQuery, identity_preparer
from memcore.recall.score import calibrated, explained
from memcore.types import (
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
)

__all__ = ["MemoryStore", "Tier", "GetOp", "PutOp", "SearchOp", "ListNamespacesOp",
           "check_embedder", "sorted_namespaces"]


def check_embedder(embedder: Any, *, named: bool = False) -> None:
    """Raise InvalidArgumentTypeError unless ``embedder`` has ``encode``, an int ``dim >= 1``
    and (``named``) a str ``name``."""
    dim = getattr(embedder, "dim", None)
    if (not callable(getattr(embedder, "encode", None)) or isinstance(dim, bool)
            or not isinstance(dim, (int, np.integer)) or dim < 1
            or (named and not isinstance(getattr(embedder, "name", None), str))):
        raise InvalidArgumentTypeError(
            f"embedder must have encode(){', a str name' if named else ''} and an int dim >= 1, "
            f"got {type(embedder).__name__}")


def sorted_namespaces(all_ns: Iterable[Namespace], prefix: NamespaceLike | None) -> list[Namespace]:
    """The namespaces under ``prefix`` (whole segments; None or () for all), sorted.

    Examples
    --------
    >>> sorted_namespaces([("acme-corp",), ("acme", "x")], ("acme",))
    [('acme', 'x')]
    """
    p = _validate.namespace_prefix(prefix)
    return sorted(ns for ns in all_ns if ns[: len(p)] == p)


@dataclass(frozen=True)
class GetOp:
    """``batch`` operation: :meth:`MemoryStore.get`."""

    namespace: NamespaceLike
    key: str


@dataclass(frozen=True)
class PutOp:
    """``batch`` operation: :meth:`MemoryStore.put`, or :meth:`MemoryStore.delete` when
    ``text`` is None (LangGraph's ``PutOp(value=None)``)."""

    namespace: NamespaceLike
    key: str
    text: str | None
    importance: float = 0.5
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchOp:
    """``batch`` operation: :meth:`MemoryStore.search` (``query`` is the text)."""

    namespace: NamespaceLike
    query: str
    top_k: int = 5
    filter: Mapping[str, Any] | None = None
    threshold: float = -1.0
    touch: bool = True


@dataclass(frozen=True)
class ListNamespacesOp:
    """``batch`` operation: :meth:`MemoryStore.namespaces` under ``prefix``, cut to
    ``max_depth`` segments (distinct), then ``offset``/``limit`` applied."""

    prefix: NamespaceLike | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


@runtime_checkable
class Tier(Protocol):
    """What :class:`~memcore.TwoTierMemory` needs of a tier (see the module notes)."""

    embedder: Any
    clock: Any
    dim: int | None
    weights: DecayWeights

    def signals(self, rq: ResolvedQuery) -> Signals | None: ...
    def scan(self, rq: ResolvedQuery, sig: Signals | None = None) -> list[MemoryHit]: ...
    def explanations(self, rq: ResolvedQuery, hits: Sequence[MemoryHit],
                     stats: np.ndarray | None = None) -> list[dict | None]: ...
    def refresh(self, rq: ResolvedQuery, keys: Sequence[str]) -> int: ...
    def write(self, rows: Rows) -> list[StoredMemory]: ...
    def lifecycle(self, namespace: Namespace, keys: Sequence[str]) -> dict: ...
    def speakers(self, namespace: Namespace, hybrid: HybridWeights) -> list[str]: ...
    def key_list(self, namespace: Namespace) -> list[str]: ...
    def get(self, namespace: NamespaceLike, key: str) -> StoredMemory | None: ...
    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None: ...
    def touch(self, namespace: NamespaceLike, keys: Iterable[str]) -> int: ...
    def delete(self, namespace: NamespaceLike, key: str) -> bool: ...
    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]: ...
    def clear(self, namespace: NamespaceLike) -> int: ...
    def count(self, namespace: NamespaceLike) -> int: ...
    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]: ...


class MemoryStore:
    """A namespaced key-value store with semantic recall (see the module notes).

    Subclasses provide the tables (``_tables``: namespace -> :class:`Table`) and how a
    validated batch lands in them (``_apply``); everything else is here.
    """

    tier: MemoryTier = MemoryTier.LONG
    #: remove a namespace's table when its last key goes (a disk namespace keeps its files)
    drop_empty: bool = True

    def _setup(self, *, dim: int | None, embedder: Any, clock: Any,
               weights: DecayWeights | None, hybrid: HybridWeights | None,
               query_preparer: Any, default_weights: DecayWeights, threads: Any = 1,
               ttl: Any = None, refresh_ttl: Any = False) -> None:
        if not isinstance(refresh_ttl, bool):
            raise InvalidArgumentTypeError(f"refresh_ttl must be a bool, got {refresh_ttl!r}")
        #: default time to live of a put without ``ttl=`` (seconds; None: never expires)
        self.ttl = _validate.ttl(ttl) or None
        #: whether reads (get, search) restart the time to live by default
        self.refresh_ttl = refresh_ttl
        if not callable(clock):
            raise InvalidArgumentTypeError(
                f"clock must be a callable returning Unix seconds, got {clock!r}")
        if weights is not None and not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        if query_preparer is not None and not callable(query_preparer):
            raise InvalidArgumentTypeError(f"query_preparer must be callable, got {query_preparer!r}")
        self.dim = dim
        self.embedder = embedder
        self.clock = clock
        self.weights = weights if weights is not None else default_weights
        self.hybrid = _query.hybrid_weights(hybrid, HybridWeights.similarity())
        self.query_preparer = query_preparer
        self.threads = check_threads(threads)
        self._tables: dict[Namespace, Table] = {}
        self._lock = threading.RLock()
        _numba.load()             # numba's first load, before any kernel: interrupt-safe

    # ------------------------------------------------------------------ subclass hooks
    def _check_read(self) -> None:
        """Raise when the store cannot be read (closed)."""

    def _check_write(self) -> None:
        """Raise when the store cannot be written (closed, read-only)."""

    def embed(self, texts: list) -> np.ndarray:
        """The embedder's output for ``texts``, checked once: (n, dim) float32, finite
        (tier protocol).

        Raises
        ------
        EmbedderMismatchError, InvalidVectorError
        """
        return encoded(self.embedder.encode(list(texts)), len(texts), self.dim,
                       getattr(self.embedder, "name", "?"))

    def _apply(self, rows: Rows) -> None:
        """Apply a batch with vectors and lifecycle set. Lock held."""
        raise NotImplementedError

    def _discard(self, table: Table) -> None:
        """Called when ``clear`` drops a namespace's table. Lock held."""

    def _approximate(self, table: Table) -> Any:
        """The namespace's opt-in candidate index and its settings
        (:mod:`memcore.recall.approx`), or None to rank exactly."""
        return None

    def _scorer(self, text: str, texts: list) -> np.ndarray:
        raise NotImplementedError   # only a store without vectors ranks lexically

    # ------------------------------------------------------------------ writes
    def put(self, namespace: NamespaceLike, key: str, text: str, *, importance: float = 0.5,
            metadata: Mapping[str, Any] | None = None, vector: Any = None,
            ttl: float | None = None) -> StoredMemory:
        """Store or replace one memory.

        Parameters
        ----------
        namespace : str or tuple of str
        key : str
            Non-empty, no NUL.
        text : str
            With at least one non-space character.
        importance : float, default 0.5
            In [0, 1].
        metadata : dict, optional
            JSON-serialisable; stored as a copy.
        vector : array_like of shape (dim,), optional
            Precomputed embedding of ``text`` (validated, L2-normalised); skips the embedder.
        ttl : float, optional
            Time to live in seconds (``math.inf``: never expires); the store's ``ttl`` when
            None. The memory expires at ``updated_at + ttl``.

        Returns
        -------
        StoredMemory
            As stored.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, InvalidArgumentError, InvalidArgumentTypeError
            On a malformed namespace, key, text, importance, metadata or ttl.
        DimensionMismatchError, InvalidVectorError
            If ``vector`` has the wrong dim, holds NaN/inf, is all zeros, or the store keeps
            no vectors; if the embedder returns NaN/inf.
        EmbedderMismatchError
            If there is no vector and the store has no (working) embedder.
        ReadOnlyStoreError, StoreClosedError
            On a read-only or closed store. Nothing changes when anything raises.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> ShortTermMemory(capacity=10).put(("robot", "patrol"), "door", "red door").key
        'door'
        """
        self._check_write()
        vec = None
        if vector is not None:
            if self.dim is None:
                raise InvalidVectorError(
                    "vector given, but this store has no embedder (it ranks by lexical "
                    "similarity and keeps no vectors); construct it with embedder=...")
            vec = _validate.vector(vector, self.dim, name="vector")[None, :]
        rows = Rows.from_items(namespace, [MemoryItem(
            key=key, text=text, importance=importance,
            metadata=metadata if metadata is not None else {})])
        rows.vectors = vec
        rows.ttl = self._ttl(ttl, 1)
        return self.write(rows)[0]

    def _ttl(self, ttl: Any, n: int) -> np.ndarray | None:
        """The ``ttl`` column of a batch of ``n`` new writes (None: none expires)."""
        seconds = _validate.ttl(ttl)
        if seconds is None:
            seconds = self.ttl
        return None if not seconds else np.full(n, seconds)

    def put_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem], *,
                 vectors: Any = None, ttl: float | None = None) -> list[StoredMemory]:
        """Store or replace a batch of memories with one embedder call (and one commit).

        A key repeated in the batch ends with its last version.

        Parameters
        ----------
        namespace : str or tuple of str
        items : sequence of MemoryItem
        vectors : array_like of shape (len(items), dim), optional
            Precomputed embeddings (validated, L2-normalised); skips the embedder.
        ttl : float, optional
            Time to live of every item, as for :meth:`put`.

        Returns
        -------
        list of StoredMemory
            One per item, in order.

        Raises
        ------
        InvalidArgumentTypeError
            If an item is not a MemoryItem.
        InvalidArgumentError, DimensionMismatchError, InvalidVectorError, ...
            As for :meth:`put`, or if ``vectors`` has another row count. Nothing changes.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> len(ShortTermMemory(capacity=10).put_many(
        ...     "robot", [MemoryItem("a", "hello"), MemoryItem("b", "world")]))
        2
        """
        self._check_write()
        rows = Rows.from_items(namespace, items, vectors, dim=self.dim)
        rows.ttl = self._ttl(ttl, len(rows))
        return self.write(rows)

    def put_stored(self, memories: Sequence[StoredMemory], vectors: Any = None) -> None:
        """Insert or replace memories keeping their lifecycle fields exactly as given.

        The import path of tier moves and exports: ``created_at``, ``updated_at``,
        ``last_accessed_at`` and ``access_count`` are kept, no embedder runs. Memories may span
        namespaces; each namespace is applied (and committed) once.

        Parameters
        ----------
        memories : sequence of StoredMemory
        vectors : array_like of shape (len(memories), dim), float32
            Required when the store keeps vectors, refused otherwise. Unit rows are kept bit
            for bit, others normalised; all-zero rows (an embedder's vector for a text
            without content) are kept as they are.

        Raises
        ------
        InvalidArgumentTypeError
            If a memory is not a StoredMemory.
        InvalidArgumentError, InvalidVectorError, DimensionMismatchError
            On invalid fields (timestamps must be finite numbers, not bools) or vectors;
            nothing changes.
        ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> src, dst = ShortTermMemory(capacity=10), ShortTermMemory(capacity=10)
        >>> m = src.put("ns", "k", "some text")
        >>> dst.put_stored([m]); dst.get("ns", "k").created_at == m.created_at
        True
        """
        self._check_write()
        batches = Rows.from_stored(memories, vectors, self.dim)
        with self._lock:
            self._check_write()
            for rows in batches:
                self._apply(rows)

    def write(self, rows: Rows) -> list[StoredMemory]:
        """Apply a validated batch (tier protocol); encodes it when it has no vectors and
        stamps it with the clock when it has no lifecycle. Returns the memories as stored."""
        self._check_write()
        if rows.vectors is None and self.dim is not None:
            rows.vectors = self.embed(rows.texts) if len(rows) else \
                np.zeros((0, self.dim), np.float32)
        with self._lock:
            self._check_write()
            if rows.created_at is None:
                now = _query.now(self.clock)
                life = self.lifecycle(rows.namespace, rows.keys)
                m = len(rows)
                rows.updated_at = rows.last_accessed_at = np.full(m, now)
                if life:
                    ca, ac = zip(*[life.get(k, (now, 0)) for k in rows.keys])
                    rows.created_at = np.asarray(ca, np.float64)
                    rows.access_count = np.asarray(ac, np.int64)
                else:
                    rows.created_at = np.full(m, now)
                    rows.access_count = np.zeros(m, np.int64)
            if len(rows):
                self._apply(rows)
        return rows.memories(self.tier, copy_metadata)

    # ------------------------------------------------------------------ reads
    def get(self, namespace: NamespaceLike, key: str, *, refresh_ttl: bool | None = None,
            missing_ok: bool = True) -> StoredMemory | None:
        """The memory stored under ``key``, or None (also once it expired). Does not refresh
        its access fields; ``refresh_ttl`` (the store's ``refresh_ttl`` when None) restarts
        its time to live. ``missing_ok=False`` raises :class:`UnknownNamespaceError` (naming
        the nearest namespaces that hold memories) when ``namespace`` holds none, instead of
        returning None.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> ShortTermMemory(capacity=1).get("robot", "missing") is None
        True

        Raises
        ------
        InvalidNamespaceError, InvalidTextError
            On a malformed namespace or key.
        UnknownNamespaceError
            With ``missing_ok=False``, when the namespace holds no memories.
        """
        if not missing_ok:
            self.require_namespace(namespace)
        refresh = self.refresh_ttl if refresh_ttl is None else bool(refresh_ttl)
        table, row = self._find(namespace, key, refresh)
        return None if row is None else table.memory(row, self.tier)

    def require_namespace(self, namespace: NamespaceLike) -> Namespace:
        """``namespace`` validated, when it holds live memories; else
        :class:`UnknownNamespaceError` whose message names the nearest namespaces that do
        (the strict lookups: ``missing_ok=False``). Lists the namespaces only on that error.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=4)
        >>> _ = stm.put("notes", "k", "buy milk")
        >>> stm.require_namespace("notes")
        ('notes',)
        >>> stm.search("note", "milk", missing_ok=False)
        Traceback (most recent call last):
        ...
        memcore.errors.UnknownNamespaceError: namespace 'note' holds no memories; did you mean 'notes'?
        """
        ns = _validate.namespace(namespace)
        if self.count(ns) == 0:
            raise unknown_namespace(ns, self.namespaces())
        return ns

    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None:
        """A copy of the stored vector of ``key``: shape (dim,), float32; None when absent
        (or the store keeps no vectors).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> from memcore import HashingEmbedder, LongTermMemory
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=64))
        >>> _ = ltm.put("robot", "dock", "the dock is in the hallway")
        >>> ltm.vector("robot", "dock").shape
        (64,)
        """
        table, row = self._find(namespace, key)
        if row is None or self.dim is None:
            return None
        with self._lock:
            return table.vector(row)

    def _find(self, namespace: NamespaceLike, key: str, refresh_ttl: bool = False
              ) -> tuple[Table | None, int | None]:
        """The table and live, unexpired row of ``key`` (restarting its time to live)."""
        self._check_read()
        ns, key = _validate.namespace(namespace), _validate.key(key)
        with self._lock:
            table = self._tables.get(ns)
            row = None if table is None else table.keys.get(key)
            if row is not None and table.expiry is not None:
                now = _query.now(self.clock)
                if table.row_expired(row, now):
                    return table, None
                if refresh_ttl:
                    table.refresh_expiry([row], now)
            return table, row

    def __contains__(self, item: tuple) -> bool:
        """``(namespace, key) in store``."""
        return self.get(item[0], item[1]) is not None

    def keys(self, namespace: NamespaceLike) -> list[str]:
        """The namespace's keys, oldest write first (a bounded tier's eviction order).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=2)
        >>> for key in "abc": _ = stm.put("robot", key, f"memory {key}")
        >>> stm.keys("robot")       # "a" was evicted
        ['b', 'c']
        """
        self._check_read()
        return self.key_list(_validate.namespace(namespace))

    def key_list(self, namespace: Namespace) -> list[str]:
        """:meth:`keys` of a canonical namespace (tier protocol)."""
        with self._lock:
            table = self._tables.get(namespace)
            if table is None:
                return []
            if table.expiry is None:
                return list(table.keys)
            now = _query.now(self.clock)
            return [k for k, r in table.keys.items() if not table.row_expired(r, now)]

    def count(self, namespace: NamespaceLike) -> int:
        """Number of live memories in ``namespace`` (0 when unknown).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> from memcore import MemoryItem, ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5)
        >>> stm.count("robot"), len(stm.put_many("robot", [MemoryItem("a", "x y")])), stm.count("robot")
        (0, 1, 1)
        """
        self._check_read()
        ns = _validate.namespace(namespace)
        with self._lock:
            table = self._tables.get(ns)
            if table is None or table.expiry is None:    # the clock is read only for TTL
                return 0 if table is None else table.live
            return table.visible_live(_query.now(self.clock))

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        """Sorted namespaces holding at least one memory, under ``prefix`` (whole segments;
        None or () lists all).

        Raises
        ------
        InvalidNamespaceError
            If ``prefix`` is malformed.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5); _ = stm.put(("acme-corp",), "k", "x")
        >>> stm.namespaces(("acme",))
        []
        """
        self._check_read()
        with self._lock:
            sums = [(ns, exp) for ns, live, exp in self._summaries() if live]
            expiring = {ns for ns, exp in sums if exp}
            now = _query.now(self.clock) if expiring else 0.0
            return [ns for ns in sorted_namespaces([ns for ns, _ in sums], prefix)
                    if ns not in expiring or self._tables[ns].visible_live(now)]

    def _summaries(self) -> list[tuple[Namespace, int, bool]]:
        """``(namespace, live, has_ttl)`` of every namespace, sorted: what
        :meth:`namespaces` and :meth:`sweep` need, answered by the tables' own
        ``summaries()`` where they keep one (a disk store's catalog: no namespace opened)."""
        own = getattr(self._tables, "summaries", None)
        if own is not None:
            return own()
        return [(ns, len(t.keys), t.expiry is not None) for ns, t in sorted(self._tables.items())]

    def _expiring(self) -> list[Namespace]:
        """The namespaces that hold live memories with a time-to-live column (the sweep's
        candidates), from :meth:`_summaries`."""
        return [ns for ns, live, exp in self._summaries() if live and exp]

    # ------------------------------------------------------------------ removal
    def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Remove ``key``; True when it existed (an expired memory is removed, and False
        returned). Its vector never matches again.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=1); _ = stm.put("robot", "k", "red door")
        >>> stm.delete("robot", "k"), stm.delete("robot", "k")
        (True, False)
        """
        self._check_write()
        ns, key = _validate.namespace(namespace), _validate.key(key)
        return bool(self.delete_keys(ns, [key]))

    def delete_many(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        """Remove ``keys`` of ``namespace`` at once; returns how many existed (as a loop of
        :meth:`delete`: an expired memory is removed and not counted, a repeated key counts
        once, an unknown namespace gives 0).

        Every key is validated before anything is removed: bad input deletes nothing. On
        disk (:class:`~memcore.LongTermMemory`) the batch is one log commit, all or nothing
        after a crash, as a ``put_many``.

        Parameters
        ----------
        namespace : str or tuple of str
        keys : iterable of str
            Not a str itself.

        Returns
        -------
        int
            How many of ``keys`` were live memories (0..number of distinct keys).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError
            A malformed namespace or key (nothing deleted).
        InvalidArgumentTypeError
            If ``keys`` is a str, bytes or not iterable.
        ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5)
        >>> _ = stm.put("robot", "a", "red door"); _ = stm.put("robot", "b", "blue door")
        >>> stm.delete_many("robot", ["a", "b", "a", "missing"]), stm.keys("robot")
        (2, [])
        """
        self._check_write()
        ns = _validate.namespace(namespace)
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise InvalidArgumentTypeError(
                f"keys must be an iterable of str (a list, not one str), got {keys!r}")
        return len(self.delete_keys(ns, list(dict.fromkeys(_validate.key(k) for k in keys))))

    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]:
        """Remove distinct validated ``keys`` of a canonical namespace; returns those that
        were live (tier protocol, :meth:`delete_many`)."""
        with self._lock:
            self._check_write()
            table = self._tables.get(namespace)
            if table is None:
                return []
            get = table.keys.get
            found = [(k, r) for k, r in zip(keys, map(get, keys)) if r is not None]
            if not found:
                return []
            now = _query.now(self.clock) if table.expiry is not None else 0.0
            live = [k for k, r in found if not table.row_expired(r, now)]
            self._remove(namespace, table, found)
            return live

    def _remove(self, ns: Namespace, table: Table, found: Sequence[tuple[str, int]]) -> None:
        """Delete live ``(key, row)`` pairs of ``table``. Lock held."""
        table.remove([key for key, _ in found])
        if self.drop_empty and not table.keys:
            del self._tables[ns]

    def sweep(self, namespace: NamespaceLike | None = None) -> int:
        """Delete the memories whose time to live ran out; returns how many.

        Expired memories are already invisible; this reclaims them (on disk: DEL records,
        and :meth:`LongTermMemory.compact` then drops their rows, which it sweeps first).

        Parameters
        ----------
        namespace : str or tuple of str, optional
            Only this namespace; every namespace when None.

        Raises
        ------
        InvalidNamespaceError, ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> t = [0.0]; stm = ShortTermMemory(capacity=5, clock=lambda: t[0])
        >>> _ = stm.put("r", "k", "red door", ttl=60); t[0] = 60.0
        >>> stm.get("r", "k"), stm.sweep()
        (None, 1)
        """
        self._check_write()
        only = None if namespace is None else _validate.namespace(namespace)
        swept = 0
        with self._lock:
            self._check_write()
            todo = [ns for ns in self._expiring() if only is None or ns == only]
            if not todo:
                return 0                                  # (the clock is read only for TTL)
            now = _query.now(self.clock)
            for ns in todo:
                table = self._tables.get(ns)
                if table is None or table.expiry is None:
                    continue
                found = [(k, r) for k, r in table.keys.items() if table.row_expired(r, now)]
                self._remove(ns, table, found)
                swept += len(found)
        return swept

    def clear(self, namespace: NamespaceLike) -> int:
        """Remove every memory of ``namespace`` (not of namespaces below it); returns how many.

        Raises
        ------
        InvalidNamespaceError, ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import HashingEmbedder, LongTermMemory, MemoryItem
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=8))
        >>> _ = ltm.put_many(("robot", "map"), [MemoryItem("a", "door"), MemoryItem("b", "dock")])
        >>> ltm.clear(("robot", "map")), ltm.namespaces()
        (2, [])
        """
        self._check_write()
        ns = _validate.namespace(namespace)
        with self._lock:
            self._check_write()
            table = self._tables.pop(ns, None)
            if table is None:
                return 0
            self._discard(table)
            return table.live

    # ------------------------------------------------------------------ search
    def search(self, query: MemoryQuery | ResolvedQuery | NamespaceLike, text: str | None = None,
               *, top_k: int = 5, threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: Any = None, hybrid: HybridWeights | None = None,
               refresh_ttl: bool | None = None, explain: bool = False,
               missing_ok: bool = True) -> list[MemoryHit]:
        """Rank a namespace's live memories for a query.

        With the similarity preset (``hybrid=HybridWeights.similarity()``), the exact fused
        score of :class:`~memcore.DecayWeights`:
        ``score = w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance *
        importance``, with ``sim`` the cosine similarity (or, for a store without embedder,
        its scorer's lexical similarity) and ``age = now - last_accessed_at`` in seconds.
        Any other hybrid weights rank by hybrid recall (:mod:`memcore.recall`) by the
        fused z-score, and ``weights.w_similarity`` scales the dense weight; the returned
        ``score`` is then that fused score mapped into (0, 1) by a monotone transform
        (:mod:`memcore.recall.score`: 0.5 is the namespace's average memory for the query).
        On every preset ``similarity`` is the cosine of the query's vector and the memory's
        own vector, and candidates need ``similarity >= threshold`` and must match ``filter``.
        Ties rank by lower row.

        Parameters
        ----------
        query : MemoryQuery, ResolvedQuery, or str or tuple of str
            A query, a query already resolved by :meth:`resolve`, or the namespace of the
            form ``search(namespace, text, ...)``.
        text : str, optional
            The query text (keyword form only); blank text returns [].
        top_k : int, default 5
            At most this many hits; every qualifying hit when fewer exist (no padding).
        threshold : float, default -1.0
            Minimum similarity, in [-1, 1].
        weights : DecayWeights, optional
            The store's ``weights`` when None.
        filter : dict, optional
            Conditions that must all hold, applied as a mask inside the ranking pass (never a
            post-filter: up to ``top_k`` matching memories come back). On top-level metadata
            keys: ``{"room": "kitchen"}`` equality, ``{"n": {"$gte": 3, "$lt": 9}}`` with
            ``$eq $ne $gt $gte $lt $lte $in $nin``. Time ranges on the lifecycle columns:
            ``{"$created_at": {"$gte": t0, "$lt": t1}}`` (Unix seconds; also
            ``$updated_at``, ``$last_accessed_at``, ``$importance``). Full rules:
            :func:`memcore._validate.metadata_filter`; a malformed filter raises.
        touch : bool, default True
            Refresh ``last_accessed_at = now`` and ``access_count += 1`` of returned memories.
        query_vector : array_like of shape (dim,), optional
            Precomputed embedding of the query; the embedder is not called. With hybrid
            weights it should embed ``self.prepare(namespace, text).dense``.
        hybrid : HybridWeights, optional
            The store's ``hybrid`` when None.
        refresh_ttl : bool, optional
            Restart the time to live of returned memories; the store's ``refresh_ttl`` when
            None.
        explain : bool, default False
            Set each hit's ``explanation``: the terms of its fused score, one per signal,
            their z statistics and how ``score`` follows
            (:func:`memcore.recall.score.explained`); recomputed for the returned hits only,
            after ranking (False costs nothing).
        missing_ok : bool, default True
            False: a namespace that holds no memories raises :class:`UnknownNamespaceError`
            naming the nearest namespaces that do (a typo, or a SemanticMemory mode under its
            prefix), instead of returning [].

        Returns
        -------
        list of MemoryHit
            Best first. ``recency``/``last_accessed_at`` are the values ranking used (before
            this search's refresh). A query without signal (an all-zero embedding, or a text
            the lexical scorer does not match with itself) returns [].

        Raises
        ------
        InvalidArgumentError, InvalidArgumentTypeError
            On a bad top_k, threshold, filter, weights or call form.
        InvalidVectorError, DimensionMismatchError
            On a bad ``query_vector``.
        EmbedderMismatchError
            If the store has no embedder and no ``query_vector`` is given.
        UnknownNamespaceError
            With ``missing_ok=False``, when the namespace holds no memories.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=10)
        >>> _ = stm.put("robot", "door", "the red door is locked")
        >>> [h.key for h in stm.search("robot", "red door")], stm.search("robot", "   ")
        (['door'], [])
        """
        rq = self.resolve(query, text, top_k=top_k, threshold=threshold, weights=weights,
                          filter=filter, touch=touch, query_vector=query_vector, hybrid=hybrid,
                          refresh_ttl=refresh_ttl)
        if rq is None:
            return []
        if not missing_ok:
            self.require_namespace(rq.namespace)
        with self._lock:
            raw = self.scan(rq)
            hits = calibrated(raw, rq)
            if explain:
                hits = explained(hits, [h.score for h in raw], self.explanations(rq, raw), rq)
            if rq.touch or rq.refresh_ttl:
                self.refresh(rq, [h.key for h in hits])
            return hits

    def resolve(self, query: Any, text: Any = None, *, top_k: Any = 5, threshold: Any = -1.0,
                weights: Any = None, filter: Any = None, touch: Any = True,
                query_vector: Any = None, hybrid: Any = None, encode: Any = None,
                refresh_ttl: Any = None) -> ResolvedQuery | None:
        """Validate a query once (arguments as :meth:`search`); None when it has no signal.

        ``encode(texts) -> (n, dim)`` replaces the embedder (e.g. a caching one).

        Examples
        --------
        >>> from memcore import HashingEmbedder, LongTermMemory
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=64))
        >>> ltm.resolve("robot", "red door", top_k=3).top_k, ltm.resolve("robot", " ")
        (3, None)
        """
        self._check_read()
        return _query.resolve(
            query, text, top_k=top_k, threshold=threshold, weights=weights, filter=filter,
            touch=touch, query_vector=query_vector, hybrid=hybrid, dim=self.dim,
            default_weights=self.weights, default_hybrid=self.hybrid,
            preparer=self.query_preparer, entities=self.speakers,
            encode=encode if encode is not None else self.embed, clock=self.clock,
            name=getattr(self.embedder, "name", "?"), threads=self.threads,
            refresh_ttl=self.refresh_ttl if refresh_ttl is None else bool(refresh_ttl))

    def signals(self, rq: ResolvedQuery) -> Signals | None:
        """The hybrid signals of a resolved query over its namespace (tier protocol); None
        for the similarity preset or an empty namespace."""
        self._check_read()
        if rq.prepared is None:
            return None
        with self._lock:
            table = self._tables.get(rq.namespace)
            if table is None or not table.keys:
                return None
            return signals(table, rq, self.dim, self.query_preparer, threads=rq.threads)

    def scan(self, rq: ResolvedQuery, sig: Signals | None = None) -> list[MemoryHit]:
        """The ranked hits of a resolved query, nothing refreshed (tier protocol)."""
        self._check_read()
        with self._lock:
            table = self._tables.get(rq.namespace)
            if table is None or not table.keys:
                return []
            rows, scores, sims = rank(table, rq, dim=self.dim, preparer=self.query_preparer,
                                      threads=rq.threads, scorer=self._scorer, sig=sig,
                                      approximate=self._approximate(table))
            return table.hits(rows.tolist(), scores.tolist(), sims.tolist(), rq.now,
                              rq.weights.half_life, self.tier)

    def explanations(self, rq: ResolvedQuery, hits: Sequence[MemoryHit],
                     stats: np.ndarray | None = None) -> list[dict | None]:
        """For hits of :meth:`scan` (tier protocol): the terms of each one's hybrid fused
        score (:func:`memcore.core.rank.explain`; ``stats`` pooled z statistics, else the
        namespace's), or None each on the similarity preset (read from the hit)."""
        if rq.prepared is None or not hits:
            return [None] * len(hits)
        with self._lock:
            table = self._tables[rq.namespace]
            return explain(table, rq, [table.keys[h.key] for h in hits], dim=self.dim,
                           preparer=self.query_preparer, stats=stats)

    def refresh(self, rq: ResolvedQuery, keys: Sequence[str]) -> int:
        """For ``keys`` of the query's namespace (tier protocol): with ``rq.touch``
        ``last_accessed_at = rq.now``, ``access_count += 1``; with ``rq.refresh_ttl`` a new
        time to live from ``rq.now``. Returns how many were present."""
        with self._lock:
            return self._refresh(rq.namespace, keys, rq.now, rq.touch, rq.refresh_ttl)

    def _refresh(self, ns: Namespace, keys: Iterable[str], now: float, touch: bool = True,
                 ttl: bool = False) -> int:
        table = self._tables.get(ns)
        if table is None:
            return 0
        get = table.keys.get
        rows = [r for r in map(get, dict.fromkeys(keys)) if r is not None
                and not table.row_expired(r, now)]
        if touch:
            table.refresh(rows, now)
        if ttl:
            table.refresh_expiry(rows, now)
        return len(rows)

    def touch(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        """Refresh ``last_accessed_at = now`` and ``access_count += 1`` of the given keys.

        What ``search`` does to the memories it returns. Missing keys are ignored.

        Returns
        -------
        int
            How many keys were refreshed.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError
            On a malformed namespace or key (nothing is refreshed then).

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=3); _ = stm.put("r", "k", "red door")
        >>> stm.touch("r", ["k", "missing"]), stm.get("r", "k").access_count
        (1, 1)
        """
        self._check_read()
        ns = _validate.namespace(namespace)
        keys = [_validate.key(k) for k in keys]
        with self._lock:
            return self._refresh(ns, keys, _query.now(self.clock))

    def lifecycle(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, tuple[float, int]]:
        """``{key: (created_at, access_count)}`` of the keys present (tier protocol;
        ``namespace`` canonical)."""
        with self._lock:
            table = self._tables.get(namespace)
            if table is None:
                return {}
            keys, c = list(keys), table.columns
            now = _query.now(self.clock) if table.expiry is not None else 0.0
            return {k: (float(c.created_at[r]), int(c.access_count[r]))
                    for k, r in zip(keys, table.lookup_many(keys))
                    if r is not None and not table.row_expired(r, now)}

    # ------------------------------------------------------------------ hybrid recall
    def speakers(self, namespace: Namespace, hybrid: HybridWeights) -> list[str]:
        """Speaker names of the namespace's memories (tier protocol; canonical namespace)."""
        if self.dim is None:
            return []
        hw = HybridWeights.hybrid() if hybrid.is_similarity else hybrid
        with self._lock:
            table = self._tables.get(namespace)
            if table is None or not table.keys:
                return []
            return table.recall_index(hw, self.dim, self.query_preparer).entities()

    def entities(self, namespace: NamespaceLike, *, hybrid: HybridWeights | None = None
                 ) -> list[str]:
        """Speaker names of the namespace's memories (hybrid recall's known entities).

        Raises
        ------
        InvalidNamespaceError, InvalidArgumentTypeError
            On a malformed namespace, or ``hybrid`` that is not a HybridWeights.

        Examples
        --------
        >>> from memcore import HashingEmbedder, ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5, embedder=HashingEmbedder(dim=8))
        >>> _ = stm.put("chat", "m1", "I adopted a dog", metadata={"speaker": "Ann"})
        >>> stm.entities("chat")
        ['Ann']
        """
        self._check_read()
        return self.speakers(_validate.namespace(namespace),
                             _query.hybrid_weights(hybrid, self.hybrid))

    def prepare(self, namespace: NamespaceLike, text: str, *,
                hybrid: HybridWeights | None = None) -> PreparedQuery:
        """The query preparer's forms of ``text`` for this namespace (its speakers known).

        With hybrid weights, ``prepared.dense`` is the text whose embedding :meth:`search`
        expects as ``query_vector``; with the similarity preset it is ``text`` itself.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, InvalidArgumentTypeError

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> ShortTermMemory(capacity=5).prepare("robot", "where is Ann?").dense
        'where is Ann?'
        """
        self._check_read()
        ns, text = _validate.namespace(namespace), _validate.text(text)
        hw = _query.hybrid_weights(hybrid, self.hybrid)
        if hw.is_similarity:
            return identity_preparer(text)
        return (self.query_preparer or _query.DEFAULT_PREPARER)(text, self.speakers(ns, hw))

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Sequence[GetOp | PutOp | SearchOp | ListNamespacesOp]) -> list:
        """Run operations in order (LangGraph's ``BaseStore.batch``); one result per op.

        Consecutive :class:`PutOp` writes to one namespace go through one ``put_many`` (one
        embedder call); a PutOp with ``text=None`` deletes (result None, as for every put).

        Raises
        ------
        InvalidArgumentTypeError
            On an unknown operation; whatever the operations raise.

        Examples
        --------
        >>> from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5)
        >>> stm.batch([PutOp("r", "a", "red door"), GetOp("r", "a"), ListNamespacesOp()])[1:]
        [StoredMemory(namespace=('r',), key='a', text='red door', importance=0.5, \
metadata={}, created_at=..., updated_at=..., last_accessed_at=..., access_count=0, \
tier=<MemoryTier.SHORT: 'short'>, expires_at=None, ttl=None), [('r',)]]
        """
        ops = list(ops)
        out: list = []
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, PutOp) and op.text is not None:
                j = i
                while (j < len(ops) and isinstance(ops[j], PutOp) and ops[j].text is not None
                       and ops[j].namespace == op.namespace):
                    j += 1
                self.put_many(op.namespace, [MemoryItem(o.key, o.text, o.importance, o.metadata)
                                             for o in ops[i:j]])
                out += [None] * (j - i)
                i = j
                continue
            if isinstance(op, PutOp):
                self.delete(op.namespace, op.key)
                out.append(None)
            elif isinstance(op, GetOp):
                out.append(self.get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                out.append(self.search(op.namespace, op.query, top_k=op.top_k, filter=op.filter,
                                       threshold=op.threshold, touch=op.touch))
            elif isinstance(op, ListNamespacesOp):
                found = self.namespaces(op.prefix)
                if op.max_depth is not None:
                    found = list(dict.fromkeys(ns[:op.max_depth] for ns in found))
                out.append(found[op.offset:op.offset + op.limit])
            else:
                raise InvalidArgumentTypeError(f"unknown batch operation {type(op).__name__}")
            i += 1
        return out

    # ------------------------------------------------------------------ async
    # Each coroutine runs its method on a worker thread (asyncio.to_thread): embedding, ranking
    # and disk commits never block the event loop; the store's lock still orders them.

    async def aput(self, namespace: NamespaceLike, key: str, text: str, **kwargs: Any
                   ) -> StoredMemory:
        """:meth:`put` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> asyncio.run(ShortTermMemory(capacity=5).aput("robot", "door", "red door")).key
        'door'
        """
        return await asyncio.to_thread(self.put, namespace, key, text, **kwargs)

    async def aput_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem],
                        **kwargs: Any) -> list[StoredMemory]:
        """:meth:`put_many` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> len(asyncio.run(ShortTermMemory(capacity=5).aput_many("r", [MemoryItem("a", "x")])))
        1
        """
        return await asyncio.to_thread(self.put_many, namespace, items, **kwargs)

    async def aget(self, namespace: NamespaceLike, key: str, **kwargs: Any
                   ) -> StoredMemory | None:
        """:meth:`get` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> asyncio.run(ShortTermMemory(capacity=5).aget("robot", "missing")) is None
        True
        """
        return await asyncio.to_thread(self.get, namespace, key, **kwargs)

    async def adelete(self, namespace: NamespaceLike, key: str) -> bool:
        """:meth:`delete` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> asyncio.run(ShortTermMemory(capacity=5).adelete("robot", "missing"))
        False
        """
        return await asyncio.to_thread(self.delete, namespace, key)

    async def adelete_many(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        """:meth:`delete_many` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> asyncio.run(ShortTermMemory(capacity=5).adelete_many("robot", ["a", "b"]))
        0
        """
        return await asyncio.to_thread(self.delete_many, namespace, keys)

    async def asearch(self, query: Any, text: str | None = None, **kwargs: Any
                      ) -> list[MemoryHit]:
        """:meth:`search` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> stm = ShortTermMemory(capacity=5); _ = stm.put("robot", "door", "red door")
        >>> [h.key for h in asyncio.run(stm.asearch("robot", "red door"))]
        ['door']
        """
        return await asyncio.to_thread(self.search, query, text, **kwargs)

    async def abatch(self, ops: Sequence[GetOp | PutOp | SearchOp | ListNamespacesOp]) -> list:
        """:meth:`batch` on a worker thread (same arguments, result and errors).

        Examples
        --------
        >>> import asyncio; from memcore import ShortTermMemory
        >>> asyncio.run(ShortTermMemory(capacity=5).abatch([ListNamespacesOp()]))
        [[]]
        """
        return await asyncio.to_thread(self.batch, list(ops))
