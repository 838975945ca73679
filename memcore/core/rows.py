"""A batch of memories validated once, as every store writes it."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidVectorError,
)
from memcore.types import MemoryItem, MemoryTier, Namespace, StoredMemory

__all__ = ["Rows", "encoded", "timestamp"]

_new = object.__new__
_setattr = object.__setattr__


#: An embedder's output checked once (the check lives with the other input checks).
encoded = _validate.embedded


#: Timestamps (Unix seconds) must be finite and within +-1e11 s (about 3,000 years); a
#: store validates its columns against the same bounds on open (damage, not use).
MAX_ABS_TIME = 1e11
#: Access counts above this are damage, not use (a memory read every 20 ms tick for 2.7
#: years).
MAX_ACCESS_COUNT = 2 ** 32
#: Rows a namespace's columns hold at first; they grow by doubling (:func:`capacity_for`).
INITIAL_CAPACITY = 64


def capacity_for(rows: int, current: int = 0) -> int:
    """The capacity (rows) of columns grown by doubling from ``current`` (at least
    :data:`INITIAL_CAPACITY`) until ``rows`` fit.

    Examples
    --------
    >>> capacity_for(100), capacity_for(100, 256)
    (128, 256)
    """
    cap = max(INITIAL_CAPACITY, current)
    while cap < rows:
        cap *= 2
    return cap


def timestamp(value: Any, what: str) -> float:
    """Finite Unix seconds within :data:`MAX_ABS_TIME`: an int or float (NumPy's included),
    never a bool.

    Raises
    ------
    InvalidArgumentError
    """
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
            or not math.isfinite(value) or abs(value) > MAX_ABS_TIME):
        raise InvalidArgumentError(f"{what} must be finite Unix seconds within "
                                   f"+-{MAX_ABS_TIME:g}, got {value!r}")
    return float(value)


class Rows:
    """One namespace's batch of memories, validated: what a store's ``write`` applies.

    Attributes
    ----------
    namespace : tuple of str
    keys, texts : list of str
    importance : list of float
        In [0, 1].
    metadata : list of dict
        Validated copies (JSON-serialisable), owned by the batch.
    vectors : ndarray of shape (n, dim), float32, or None
        None until encoded (and for a store without embedder).
    created_at, updated_at, last_accessed_at : ndarray of shape (n,), float64, or None
        Unix seconds kept as given (``put_stored``); None for new writes, which the store
        stamps with its clock (keeping a replaced key's ``created_at`` and ``access_count``).
    access_count : ndarray of shape (n,), int64, or None
    ttl : ndarray of shape (n,), float64, or None
        Time to live in seconds, 0 for a memory that never expires; None: none expires.
    expires_at : ndarray of shape (n,), float64, or None
        Unix seconds, 0 for never, kept as given (``put_stored``); None for new writes, whose
        expiry is ``updated_at + ttl`` (:meth:`expiry`).
    """

    __slots__ = ("namespace", "keys", "texts", "importance", "metadata", "vectors",
                 "created_at", "updated_at", "last_accessed_at", "access_count", "ttl",
                 "expires_at")

    def __init__(self, namespace: Namespace, keys: list, texts: list, importance: list,
                 metadata: list, vectors: np.ndarray | None = None, created_at=None,
                 updated_at=None, last_accessed_at=None, access_count=None, ttl=None,
                 expires_at=None):
        self.namespace = namespace
        self.keys, self.texts, self.importance, self.metadata = keys, texts, importance, metadata
        self.vectors = vectors
        self.created_at, self.updated_at = created_at, updated_at
        self.last_accessed_at, self.access_count = last_accessed_at, access_count
        self.ttl, self.expires_at = ttl, expires_at

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_items(cls, namespace: Any, items: Sequence[Any], vectors: Any = None, *,
                   dim: int | None = None, name: str = "vectors") -> "Rows":
        """Validate a ``put_many`` batch (and its optional vectors) once.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, InvalidArgumentError, InvalidArgumentTypeError
            On a bad namespace, item or field.
        InvalidVectorError, DimensionMismatchError
            On bad vectors, or vectors for a store without embedder (``dim=None``).
        """
        ns = _validate.namespace(namespace)
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidArgumentTypeError(f"items must be a sequence of MemoryItem, got "
                                           f"{type(items).__name__}")
        items = list(items)
        rows = _fast(ns, items)
        if rows is None:
            keys, texts, imps, metadata = [], [], [], []
            for i, it in enumerate(items):
                if not isinstance(it, MemoryItem):
                    raise InvalidArgumentTypeError(
                        f"items[{i}] must be a MemoryItem, got {type(it).__name__}")
                keys.append(_validate.key(it.key))
                texts.append(_validate.memory_text(it.text))
                imps.append(_validate.importance(it.importance))
                metadata.append(_validate.metadata(it.metadata))
            rows = cls(ns, keys, texts, imps, metadata)
        if vectors is not None:
            if dim is None:
                raise InvalidVectorError(
                    f"{name} given, but this store has no embedder (it ranks by lexical "
                    "similarity and keeps no vectors); construct it with embedder=...")
            vecs = _validate.vectors(vectors, dim, name=name) if len(items) else \
                np.zeros((0, dim), np.float32)
            if vecs.shape[0] != len(items):
                raise InvalidArgumentError(f"{name} has {vecs.shape[0]} rows for {len(items)} items")
            rows.vectors = vecs
        return rows

    @classmethod
    def from_stored(cls, memories: Sequence[Any], vectors: Any, dim: int | None
                    ) -> list["Rows"]:
        """Validate a ``put_stored`` batch once (rules and errors:
        :meth:`memcore.core.store.MemoryStore.put_stored`); one Rows per namespace, in
        first-seen order."""
        memories = list(memories)
        for i, m in enumerate(memories):
            if not isinstance(m, StoredMemory):
                raise InvalidArgumentTypeError(
                    f"memories[{i}] must be a StoredMemory, got {type(m).__name__}")
        vecs = None
        if dim is None:
            if vectors is not None:
                raise InvalidVectorError("vectors given, but this store has no embedder")
        elif vectors is None:
            raise InvalidVectorError(
                f"put_stored needs vectors of shape ({len(memories)}, {dim})")
        elif not memories:
            vecs = np.zeros((0, dim), np.float32)
        else:
            vecs = _validate.vectors(vectors, dim, allow_zero=True)
            with np.errstate(over="ignore"):          # 1e200s: inf here, never unit
                raw = np.asarray(vectors, dtype=np.float32).reshape(vecs.shape)
            unit = np.abs(np.linalg.norm(raw.astype(np.float64), axis=1) - 1.0) < 1e-6
            vecs[unit] = raw[unit]         # unit rows bit for bit (tier moves, imports)
        if vecs is not None and vecs.shape[0] != len(memories):
            raise InvalidArgumentError(f"vectors has {vecs.shape[0]} rows for {len(memories)} "
                                       "memories")
        groups: dict[Namespace, list] = {}
        for i, m in enumerate(memories):
            what = f"memories[{i}] ({m.key!r})"
            times = [timestamp(t, f"{what} {name}") for name, t in (
                ("created_at", m.created_at), ("updated_at", m.updated_at),
                ("last_accessed_at", m.last_accessed_at))]
            count = m.access_count
            if isinstance(count, bool) or not isinstance(count, (int, np.integer)) \
                    or not 0 <= count <= MAX_ACCESS_COUNT:
                raise InvalidArgumentError(f"{what} access_count must be an int in [0, "
                                           f"{MAX_ACCESS_COUNT}], got {count!r}")
            expiry = (0.0 if m.expires_at is None else timestamp(m.expires_at,
                                                                 f"{what} expires_at"),
                      _validate.ttl(m.ttl, f"{what} ttl") or 0.0)
            groups.setdefault(_validate.namespace(m.namespace), []).append((
                i, _validate.key(m.key), _validate.text(m.text),
                _validate.importance(m.importance), _validate.metadata(m.metadata),
                *times, int(count), *expiry))
        out = []
        for ns, entries in groups.items():
            idx, keys, texts, imps, metadata, ca, ua, la, ac, ea, tl = (list(c)
                                                                        for c in zip(*entries))
            expiring = any(ea)
            out.append(cls(ns, keys, texts, imps, metadata,
                           None if vecs is None else vecs[idx],
                           np.asarray(ca, np.float64), np.asarray(ua, np.float64),
                           np.asarray(la, np.float64), np.asarray(ac, np.int64),
                           np.asarray(tl, np.float64) if expiring else None,
                           np.asarray(ea, np.float64) if expiring else None))
        return out

    @classmethod
    def of_memories(cls, memories: Sequence[StoredMemory], vectors: np.ndarray | None) -> "Rows":
        """The rows of memories a store returned (one namespace, already valid): a tier move
        without validating again."""
        ns = memories[0].namespace if memories else ()
        col = lambda name, dtype: np.asarray([getattr(m, name) for m in memories], dtype)  # noqa: E731
        expiring = any(m.expires_at is not None for m in memories)
        return cls(ns, [m.key for m in memories], [m.text for m in memories],
                   [m.importance for m in memories], [m.metadata for m in memories], vectors,
                   col("created_at", np.float64), col("updated_at", np.float64),
                   col("last_accessed_at", np.float64), col("access_count", np.int64),
                   _or_zero([m.ttl for m in memories]) if expiring else None,
                   _or_zero([m.expires_at for m in memories]) if expiring else None)

    def select(self, idx: Sequence[int]) -> "Rows":
        """The rows at positions ``idx``, in that order."""
        pick = lambda col: None if col is None else col[idx]      # noqa: E731
        return Rows(self.namespace, [self.keys[i] for i in idx], [self.texts[i] for i in idx],
                    [self.importance[i] for i in idx], [self.metadata[i] for i in idx],
                    pick(self.vectors), pick(self.created_at), pick(self.updated_at),
                    pick(self.last_accessed_at), pick(self.access_count), pick(self.ttl),
                    pick(self.expires_at))

    def expiry(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(expires_at, ttl)``, each (n,) float64 (0: never), or None when no row expires.
        New writes expire at ``updated_at + ttl`` (the lifecycle must be set)."""
        if self.ttl is None and self.expires_at is None:
            return None
        ttl = np.zeros(len(self), np.float64) if self.ttl is None else \
            np.asarray(self.ttl, np.float64)
        if self.expires_at is not None:
            return np.asarray(self.expires_at, np.float64), ttl
        return np.where(ttl > 0, np.asarray(self.updated_at, np.float64) + ttl, 0.0), ttl

    def memories(self, tier: MemoryTier, copy=None) -> list[StoredMemory]:
        """StoredMemory per row (the lifecycle must be set); ``copy`` maps each metadata
        dict to the caller's own copy (identity when None)."""
        ns, ca, ua, la, ac = (self.namespace, self.created_at.tolist(),
                              self.updated_at.tolist(), self.last_accessed_at.tolist(),
                              self.access_count.tolist())
        metadata = self.metadata if copy is None else list(map(copy, self.metadata))
        exp = self.expiry()
        ea, tl = ([None] * len(self), [None] * len(self)) if exp is None else \
            ([e or None for e in exp[0].tolist()], [t or None for t in exp[1].tolist()])
        out = []
        for i, key in enumerate(self.keys):
            m = _new(StoredMemory)   # without the frozen dataclass' per-field __setattr__
            _setattr(m, "__dict__", {
                "namespace": ns, "key": key, "text": self.texts[i],
                "importance": self.importance[i], "metadata": metadata[i], "created_at": ca[i],
                "updated_at": ua[i], "last_accessed_at": la[i], "access_count": ac[i],
                "tier": tier, "expires_at": ea[i], "ttl": tl[i]})
            out.append(m)
        return out


def _or_zero(values: Sequence[Any]) -> np.ndarray:
    """(n,) float64 with None as 0 (never)."""
    return np.asarray([0.0 if v is None else v for v in values], np.float64)


def _fast(ns: Namespace, items: list) -> Rows | None:
    """The batch validated in bulk when every item is a plain, valid MemoryItem; None sends
    the caller item by item (exact errors, subclasses)."""
    if not all(type(it) is MemoryItem for it in items):
        return None
    keys = [it.key for it in items]
    texts = [it.text for it in items]
    imps = [it.importance for it in items]
    if not (all(type(k) is str and k for k in keys)
            and all(type(t) is str and t.strip() for t in texts)
            and all(type(x) is float and 0.0 <= x <= 1.0 for x in imps)):
        return None
    joined = "\x00".join(keys)
    if joined.count("\x00") != len(keys) - 1 and keys:
        return None
    try:
        joined.encode("utf-8")
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        return None
    metadata = [_validate.metadata(it.metadata) for it in items]
    return Rows(ns, keys, texts, imps, metadata)
