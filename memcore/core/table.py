"""One namespace's rows: the columns the kernels scan plus keys, texts and metadata.

Rows are indexed by an int row id. The columns (:class:`RamColumns` in RAM; a disk table's
are memory-mapped, :class:`memcore.storage.Columns`) hold ``vectors`` (rows, dim) float32,
``created_at``/``updated_at``/``last_accessed_at`` float64 Unix seconds, ``access_count``
int64, ``importance`` float32 and ``alive`` bool; the Python lists of a :class:`Table` hold
key, text, metadata and the exact importance of each row. ``keys`` maps every live key to its
row, ordered by last write (oldest first): the FIFO order of the short tier, and the row
order of the append-only long tier.

A table is backend-free: the disk table of the long tier
(:class:`memcore.stores.long_disk.DiskTable`) subclasses it, overriding where its rows come
from (the log) and what a write commits first.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.core.rows import Rows, capacity_for
from memcore.recall.index import HybridIndex
from memcore.recall.namespace import NamespaceRecall
from memcore.recall.weights import HybridWeights
from memcore.types import MemoryHit, MemoryTier, Namespace, StoredMemory

__all__ = ["RamColumns", "Table", "copy_metadata"]

_SCALARS = (str, int, float, bool, type(None))


def copy_metadata(meta: Mapping[str, Any] | bytes) -> dict:
    """An independent copy of stored metadata (a dict, or its JSON bytes)."""
    if isinstance(meta, bytes):
        return json.loads(meta)
    if all(type(v) in _SCALARS for v in meta.values()):
        return dict(meta)
    return copy.deepcopy(dict(meta))


class RamColumns:
    """The per-row arrays of one namespace in RAM (grown by doubling).

    Attributes
    ----------
    vectors : ndarray of shape (capacity, dim), float32
    created_at, updated_at, last_accessed_at : ndarray of shape (capacity,), float64
    access_count : ndarray of shape (capacity,), int64
    importance : ndarray of shape (capacity,), float32
    alive : ndarray of shape (capacity,), bool
    capacity : int

    Parameters
    ----------
    dim : int
    capacity : int
        Rows to hold at first (at least 64).

    Examples
    --------
    >>> cols = RamColumns(4, 10); cols.vectors.shape
    (64, 4)
    """

    SPEC = (("created_at", np.float64), ("updated_at", np.float64),
            ("last_accessed_at", np.float64), ("access_count", np.int64),
            ("importance", np.float32), ("alive", np.bool_))

    def __init__(self, dim: int, capacity: int):
        self.dim = int(dim)
        self.capacity = 0
        self._grow(capacity_for(capacity))

    def _grow(self, capacity: int) -> None:
        for name, shape, dtype in (("vectors", (capacity, self.dim), np.float32),
                                   *((n, (capacity,), d) for n, d in self.SPEC)):
            arr = np.zeros(shape, dtype)
            old = getattr(self, name, None)
            if old is not None:
                arr[:old.shape[0]] = old
            setattr(self, name, arr)
        self.capacity = capacity

    def ensure(self, rows: int) -> None:
        """Grow (by doubling) until ``rows`` rows fit."""
        if rows > self.capacity:
            self._grow(capacity_for(rows, self.capacity))

    def release(self) -> None:
        """Nothing to unmap (the arrays go with the table)."""


class Table:
    """One namespace's rows. Not thread-safe by itself: the owning store's lock guards it.

    Parameters
    ----------
    namespace : tuple of str
    columns : RamColumns or memcore.storage.Columns
    reuse : bool, default False
        Reuse the rows of removed keys (a bounded tier); False appends every write (the rows
        of a disk log are append-only).
    """

    __slots__ = ("namespace", "columns", "reuse", "keys", "key_of", "texts", "metadata",
                 "importance", "rows", "free", "recall", "expiry", "filter_masks",
                 "index_dirty")

    def __init__(self, namespace: Namespace, columns: Any, *, reuse: bool = False):
        self.namespace = namespace
        self.columns = columns
        self.reuse = reuse
        self.keys: dict[str, int] = {}
        self.key_of: list[str | None] = []
        self.texts: list[str | None] = []
        self.metadata: list[dict | bytes | None] = []   # bytes: JSON not parsed yet
        self.importance: list[float] = []               # exact (the column is float32)
        self.rows = 0                                   # rows [0, rows) were written
        self.free: list[int] = []
        self.recall: NamespaceRecall | None = None      # hybrid indexes, built on first use
        self.expiry: np.ndarray | None = None           # (>= rows, 2) [expires_at, ttl], 0: never
        self.filter_masks: dict = {}                    # repr(filter) -> (predicate, mask)
        self.index_dirty = False        # a hybrid index changed since it was last saved

    @property
    def live(self) -> int:
        return len(self.keys)

    def lookup_many(self, keys: Sequence[str]) -> list[int | None]:
        """The live row of each key (None when absent)."""
        return list(map(self.keys.get, keys))

    def live_rows(self) -> np.ndarray:
        """ndarray (live,), int64: the live rows in :attr:`keys` order."""
        return np.fromiter(self.keys.values(), np.int64, len(self.keys))

    def live_fields(self, texts: bool = True) -> tuple:
        """``(rows, keys, texts, metadata, importance)`` of the live rows in :attr:`keys`
        order, lists (``texts`` None unless asked; metadata dicts or JSON bytes)."""
        rows = list(self.keys.values())
        return (rows, [self.key_of[r] for r in rows],
                [self.texts[r] for r in rows] if texts else None,
                [self.metadata[r] for r in rows], [self.importance[r] for r in rows])

    # ------------------------------------------------------------------ reads
    def meta(self, row: int) -> dict:
        """The row's metadata, parsed once (never hand it out: see :meth:`memory`)."""
        m = self.metadata[row]
        if isinstance(m, bytes):
            m = self.metadata[row] = json.loads(m)
        return m

    def vector(self, row: int) -> np.ndarray:
        """A copy of the row's vector: shape (dim,), float32."""
        return np.array(self.columns.vectors[row])

    def fields(self, row: int) -> tuple[str, str, float, dict]:
        """key, text, importance and a private copy of the metadata of a row."""
        return (self.key_of[row], self.texts[row], self.importance[row],
                copy_metadata(self.metadata[row]))

    def memory(self, row: int, tier: MemoryTier) -> StoredMemory:
        c = self.columns
        key, text, importance, metadata = self.fields(row)
        e = self.expiry
        expires, ttl = (None, None) if e is None or row >= e.shape[0] else \
            (float(e[row, 0]) or None, float(e[row, 1]) or None)
        return StoredMemory(
            namespace=self.namespace, key=key, text=text, importance=importance,
            metadata=metadata, created_at=float(c.created_at[row]),
            updated_at=float(c.updated_at[row]), last_accessed_at=float(c.last_accessed_at[row]),
            access_count=int(c.access_count[row]), tier=tier, expires_at=expires, ttl=ttl)

    # ------------------------------------------------------------------ TTL
    def expired(self, now: float) -> np.ndarray | None:
        """ndarray (rows,), bool: rows whose time to live ran out (``0 < expires_at <= now``);
        None when no row of the table ever had one."""
        e = self.expiry
        if e is None:
            return None
        n = self.rows
        out = np.zeros(n, np.bool_)
        col = e[:n, 0]
        out[:col.shape[0]] = (col > 0) & (col <= now)
        return out

    def row_expired(self, row: int, now: float) -> bool:
        e = self.expiry
        return e is not None and row < e.shape[0] and 0 < e[row, 0] <= now

    def visible_live(self, now: float) -> int:
        """Live rows that have not expired."""
        exp = self.expired(now)
        if exp is None:
            return self.live
        return self.live - int(np.count_nonzero(exp & self.columns.alive[:self.rows]))

    def set_expiry(self, rows: np.ndarray, expires: np.ndarray | None,
                   ttl: np.ndarray | None) -> None:
        """Set ``[expires_at, ttl]`` of ``rows`` ((m,) int64; None: never). The column is
        allocated in RAM on the first expiring write (a disk store maps it first)."""
        e = self.expiry
        if expires is None and e is None:
            return
        need = int(rows.max()) + 1 if rows.shape[0] else 0
        if e is None or e.shape[0] < need:
            grown = np.zeros((max(need, self.columns.capacity), 2), np.float64)
            if e is not None:
                grown[:e.shape[0]] = e
            self.expiry = e = grown
        if expires is None:
            e[rows] = 0.0
        else:
            e[rows, 0] = expires
            e[rows, 1] = ttl

    def refresh_expiry(self, rows: Sequence[int], now: float) -> None:
        """``expires_at = now + ttl`` of the rows that have a time to live."""
        e = self.expiry
        if e is None:
            return
        idx = np.asarray([r for r in rows if r < e.shape[0]], np.int64)
        ttl = e[idx, 1]
        has = ttl > 0
        e[idx[has], 0] = now + ttl[has]

    def hits(self, rows: Sequence[int], scores: Sequence[float], sims: Sequence[float],
             now: float, half_life: float, tier: MemoryTier) -> list[MemoryHit]:
        """MemoryHits of ranked rows, with the recency and access time ranking used."""
        c = self.columns
        out = []
        for row, score, sim in zip(rows, scores, sims):
            key, text, importance, metadata = self.fields(row)
            t = float(c.last_accessed_at[row])
            out.append(MemoryHit(
                key=key, text=text, score=score, similarity=sim,
                recency=0.5 ** (max(now - t, 0.0) / half_life), importance=importance,
                tier=tier, metadata=metadata, namespace=self.namespace,
                created_at=float(c.created_at[row]), last_accessed_at=t))
        return out

    def live_metadata(self) -> tuple[np.ndarray, list]:
        """The live rows (ndarray (live,), int64) and their metadata (dicts, never handed
        out)."""
        rows = self.live_rows()
        return rows, [self.meta(r) for r in rows.tolist()]

    def mask(self, flt: Mapping[str, Any] | None) -> np.ndarray:
        """ndarray (rows,), bool: live rows matching a validated metadata filter (read-only:
        the last 8 filters' masks are kept, and every write and removal updates them, so a
        repeated filter costs one pass over the rows' metadata once)."""
        n = self.rows
        if not flt:
            return self.columns.alive[:n]
        tag = repr(flt)
        got = self.filter_masks.get(tag)
        if got is not None and got[1].shape[0] >= n:
            return got[1][:n]
        match = _validate.filter_predicate(flt)
        rows, metas = self.live_metadata()
        alive = np.zeros(self.columns.capacity, np.bool_)
        alive[rows[np.fromiter(map(match, metas), np.bool_, len(metas))]] = True
        if len(self.filter_masks) >= 8:
            self.filter_masks.clear()
        self.filter_masks[tag] = (match, alive)
        return alive[:n]

    def _masks_update(self, rows: Sequence[int], metadata: Sequence[Any]) -> None:
        """Set the kept filter masks of ``rows`` (just written, live) from their metadata
        (dicts or JSON bytes)."""
        cap = self.columns.capacity
        metas = [m if isinstance(m, dict) else json.loads(m) for m in metadata]
        for tag, (match, m) in list(self.filter_masks.items()):
            if m.shape[0] < cap:
                m = np.concatenate([m, np.zeros(cap - m.shape[0], np.bool_)])
                self.filter_masks[tag] = (match, m)
            for r, meta in zip(rows, metas):
                m[r] = match(meta)

    def visible(self, flt: Mapping[str, Any] | None, now: float) -> np.ndarray | None:
        """ndarray (rows,), bool: the live rows a search may return -- matching a validated
        filter's metadata conditions (:meth:`mask`) and column conditions
        (:func:`memcore._validate.column_mask`) and not expired; None when that is every live
        row (no filter, nothing expired)."""
        meta, cols = _validate.split_filter(flt)
        exp = self.expired(now)
        if exp is not None and not exp.any():
            exp = None
        if meta is None and cols is None and exp is None:
            return None
        n = self.rows
        alive = self.mask(meta) if meta is not None else self.columns.alive[:n]
        if cols is not None or exp is not None:
            alive = alive.copy()          # never write into a cached mask or the alive column
        if cols is not None:
            c = self.columns
            for key, cond in cols.items():
                alive &= _validate.column_mask(getattr(c, key[1:])[:n], cond)
        if exp is not None:
            alive &= ~exp
        return alive

    def recall_index(self, weights: HybridWeights, dim: int,
                     preparer: Callable | None) -> HybridIndex:
        """The hybrid index for ``weights``' structure, built from the live rows on first use."""
        if self.recall is None:
            self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors,
                                         created_at=lambda: self.columns.created_at)
        return self.recall.index(weights, self._recall_source)

    def _recall_source(self) -> tuple:
        rows = list(self.keys.values())
        return (rows, [self.texts[r] for r in rows],
                np.ascontiguousarray(self.columns.vectors[np.asarray(rows, np.int64)]),
                [self.meta(r) for r in rows])

    # ------------------------------------------------------------------ writes
    def take(self, m: int) -> list[int]:
        """``m`` rows for new keys: freed rows first (when reusing), then new ones."""
        out = []
        while self.reuse and self.free and len(out) < m:
            out.append(self.free.pop())
        n0, extra = self.rows, m - len(out)
        if extra:
            self.columns.ensure(n0 + extra)
            pad = [None] * extra
            self.key_of += pad
            self.texts += pad
            self.metadata += pad
            self.importance += [0.0] * extra
            self.rows = n0 + extra
            out += range(n0, n0 + extra)
        return out

    def write(self, rows: Sequence[int], batch: Rows, pick: Sequence[int] | None = None, *,
              columns: bool = True) -> None:
        """Store entries ``pick`` of a batch (all by default; lifecycle set) at ``rows``.

        A key's previous row dies unless it is the row written. Each written key moves to
        the young end of :attr:`keys`. ``columns=False`` when the caller has written the
        numeric columns already (a disk commit writes them before its log record).
        """
        sel = list(range(len(batch))) if pick is None else list(pick)
        if not sel:
            return
        c = self.columns
        idx = np.asarray(rows, np.int64)
        imps = [batch.importance[j] for j in sel]
        if self.recall is not None:                  # the index reads a row's old vector
            self.recall.delete_many(rows)            # when it leaves: before overwriting
        if columns:
            if batch.vectors is not None:
                c.vectors[idx] = batch.vectors[sel] if pick is not None else batch.vectors
            c.importance[idx] = imps
            for name in ("created_at", "updated_at", "last_accessed_at", "access_count"):
                col = getattr(batch, name)
                getattr(c, name)[idx] = col if pick is None else col[sel]
            exp = batch.expiry()
            self.set_expiry(idx, None if exp is None else exp[0][sel],
                            None if exp is None else exp[1][sel])
        c.alive[idx] = True
        keys = [batch.keys[j] for j in sel]
        rows = idx.tolist()
        live, dead = self.keys, []
        if len(set(keys)) == len(keys) and not any(map(live.__contains__, keys)):
            live.update(zip(keys, rows))
        else:
            for k, r in zip(keys, rows):
                old = live.pop(k, None)
                if old is not None and old != r:
                    dead.append(old)
                live[k] = r
        key_of, texts, metas, imp = self.key_of, self.texts, self.metadata, self.importance
        if rows and rows[0] + len(rows) == self.rows and rows == list(range(rows[0], self.rows)):
            s = slice(rows[0], self.rows)            # appended rows: slice assignment
            key_of[s], imp[s] = keys, imps
            texts[s] = [batch.texts[j] for j in sel]
            metas[s] = [batch.metadata[j] for j in sel]
        else:
            for r, j in zip(rows, sel):
                key_of[r], texts[r] = batch.keys[j], batch.texts[j]
                metas[r], imp[r] = batch.metadata[j], batch.importance[j]
        self.kill(dead)
        self._added(rows, batch, sel)

    def _added(self, rows: Sequence[int], batch: Rows, sel: Sequence[int]) -> None:
        """Bring the kept filter masks and the built hybrid indexes up to date with written
        ``rows`` (entries ``sel`` of ``batch``; those whose key a later entry replaced are
        skipped)."""
        if not self.filter_masks and (self.recall is None or not self.recall.indexes):
            return
        get = self.keys.get
        keep = [(r, j) for r, j in zip(rows, sel) if get(batch.keys[j]) == r]
        if self.filter_masks:
            self._masks_update([r for r, _ in keep], [batch.metadata[j] for _, j in keep])
        rec = self.recall
        if rec is not None and rec.indexes:
            self.index_dirty = True
            rec.put_many([r for r, _ in keep], [batch.texts[j] for _, j in keep],
                         np.ascontiguousarray(self.columns.vectors[[r for r, _ in keep]]),
                         [batch.metadata[j] for _, j in keep])

    def append(self, batch: Rows) -> None:
        """Store a batch (lifecycle set) in new rows (freed ones first when reusing)."""
        self.write(self.take(len(batch)), batch)

    def remove(self, keys: Sequence[str]) -> list[int]:
        """Remove live keys (missing ones are skipped); returns their rows."""
        rows = [r for r in map(self.keys.pop, keys, [None] * len(keys)) if r is not None]
        self.kill(rows)
        return rows

    def kill(self, rows: Sequence[int]) -> None:
        """Mark rows dead (their keys already left :attr:`keys`): live flags, kept filter
        masks, hybrid indexes and the rows' own fields (:meth:`_forget`)."""
        if not rows:
            return
        idx = np.asarray(rows, np.int64)
        self.columns.alive[idx] = False
        for _, m in self.filter_masks.values():
            m[idx[idx < m.shape[0]]] = False
        self._forget(rows)
        if self.recall is not None:
            self.index_dirty = self.index_dirty or bool(self.recall.indexes)
            self.recall.delete_many(rows)

    def _forget(self, rows: Sequence[int]) -> None:
        """Drop the Python fields of dead rows (and free them for reuse)."""
        key_of, texts, metas = self.key_of, self.texts, self.metadata
        for r in rows:
            key_of[r] = texts[r] = metas[r] = None
        if self.reuse:
            self.free.extend(rows)

    def rebuilt(self, vectors: np.ndarray) -> "Table":
        """A new table holding only the live rows (in :attr:`keys` order, renumbered from 0)
        with ``vectors`` ((live, dim) float32) and their times to live: what compaction and
        re-embedding make of an in-memory namespace."""
        rows, keys, texts, metas, imps = self.live_fields()
        idx = np.asarray(rows, np.int64)
        c = self.columns
        batch = Rows(self.namespace, keys, texts, imps, metas, vectors,
                     *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
                       ("created_at", "updated_at", "last_accessed_at", "access_count")))
        new = Table(self.namespace, RamColumns(vectors.shape[1], max(len(rows), 1)))
        new.write(new.take(len(rows)), batch)
        if self.expiry is not None:
            new.expiry = np.zeros((max(len(rows), 1), 2), np.float64)
            inside = idx < self.expiry.shape[0]
            new.expiry[:len(rows)][inside] = self.expiry[idx[inside]]
        return new

    def refresh(self, rows: Sequence[int], now: float) -> None:
        """``last_accessed_at = now`` and ``access_count += 1`` of the rows (each once)."""
        idx = np.asarray(rows, np.int64)
        if idx.shape[0]:
            self.columns.last_accessed_at[idx] = now
            self.columns.access_count[idx] += 1
