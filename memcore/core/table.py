"""One namespace's rows in memory: the columns the kernels scan plus keys, texts and metadata.

Rows are indexed by an int row id. The columns (:class:`~memcore.storage.Columns`, in RAM or
memory-mapped) hold ``vectors`` (rows, dim) float32, ``created_at``/``updated_at``/
``last_accessed_at`` float64 Unix seconds, ``access_count`` int64, ``importance`` float32 and
``alive`` bool; the Python lists hold key, text, metadata and the exact importance of each row.
``keys`` maps every live key to its row, ordered by last write (oldest first): the FIFO order
of the short tier, and the row order of the append-only long tier.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.core.rows import Rows
from memcore.recall.index import HybridIndex
from memcore.recall.namespace import NamespaceRecall, episode_speaker
from memcore.recall.weights import HybridWeights
from memcore.types import MemoryHit, MemoryTier, Namespace, StoredMemory

__all__ = ["DiskTable", "Table", "copy_metadata"]

_SCALARS = (str, int, float, bool, type(None))


def copy_metadata(meta: Mapping[str, Any] | bytes) -> dict:
    """An independent copy of stored metadata (a dict, or its JSON bytes)."""
    if isinstance(meta, bytes):
        return json.loads(meta)
    if all(type(v) in _SCALARS for v in meta.values()):
        return dict(meta)
    return copy.deepcopy(dict(meta))


class Table:
    """One namespace's rows. Not thread-safe by itself: the owning store's lock guards it.

    Parameters
    ----------
    namespace : tuple of str
    columns : Columns
    reuse : bool, default False
        Reuse the rows of removed keys (a bounded tier); False appends every write (the rows
        of a disk log are append-only).
    """

    __slots__ = ("namespace", "columns", "reuse", "keys", "key_of", "texts", "metadata",
                 "importance", "rows", "free", "recall", "files", "offsets", "expiry",
                 "filter_masks")

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
        self.files: Any = None                          # the disk files (long tier)
        self.offsets: list[int] = []                    # log offset of each row's record
        self.expiry: np.ndarray | None = None           # (>= rows, 2) [expires_at, ttl], 0: never
        self.filter_masks: dict = {}                    # repr(filter) -> (predicate, mask)

    @property
    def live(self) -> int:
        return len(self.keys)

    # ------------------------------------------------------------------ reads
    def meta(self, row: int) -> dict:
        """The row's metadata, parsed once (never hand it out: see :meth:`memory`)."""
        m = self.metadata[row]
        if isinstance(m, bytes):
            m = self.metadata[row] = json.loads(m)
        return m

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

    def mask(self, flt: Mapping[str, Any] | None) -> np.ndarray:
        """ndarray (rows,), bool: live rows matching a validated metadata filter (read-only:
        the last 8 filters' masks are kept, and every write and removal updates them, so a
        repeated filter costs one pass over the rows once)."""
        n = self.rows
        if not flt:
            return self.columns.alive[:n]
        tag = repr(flt)
        got = self.filter_masks.get(tag)
        if got is not None and got[1].shape[0] >= n:
            return got[1][:n]
        alive = np.zeros(self.columns.capacity, np.bool_)
        match, meta = _validate.filter_predicate(flt), self.meta
        for row in self.keys.values():
            if match(meta(row)):
                alive[row] = True
        if len(self.filter_masks) >= 8:
            self.filter_masks.clear()
        self.filter_masks[tag] = (match, alive)
        return alive[:n]

    def _masks_update(self, rows: Sequence[int]) -> None:
        """Set the kept filter masks of ``rows`` (just written, live) from their metadata."""
        cap = self.columns.capacity
        for tag, (match, m) in list(self.filter_masks.items()):
            if m.shape[0] < cap:
                m = np.concatenate([m, np.zeros(cap - m.shape[0], np.bool_)])
                self.filter_masks[tag] = (match, m)
            for r in rows:
                m[r] = match(self.meta(r))

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
        if self.filter_masks:
            self._masks_update([r for r, j in zip(rows, sel) if live.get(batch.keys[j]) == r])
        rec = self.recall
        if rec is not None and rec.indexes:
            alive = [(r, j) for r, j in zip(rows, sel) if live.get(batch.keys[j]) == r]
            rec.put_many([r for r, _ in alive], [batch.texts[j] for _, j in alive],
                         np.ascontiguousarray(c.vectors[[r for r, _ in alive]]),
                         [batch.metadata[j] for _, j in alive])

    def remove(self, keys: Sequence[str]) -> list[int]:
        """Remove live keys (missing ones are skipped); returns their rows."""
        rows = [r for r in map(self.keys.pop, keys, [None] * len(keys)) if r is not None]
        self.kill(rows)
        return rows

    def kill(self, rows: Sequence[int]) -> None:
        """Mark rows dead (their keys already left :attr:`keys`)."""
        if not rows:
            return
        idx = np.asarray(rows, np.int64)
        self.columns.alive[idx] = False
        for _, m in self.filter_masks.values():
            m[idx[idx < m.shape[0]]] = False
        key_of, texts, metas = self.key_of, self.texts, self.metadata
        for r in rows:
            key_of[r] = texts[r] = metas[r] = None
        if self.recall is not None:
            self.recall.delete_many(rows)
        if self.reuse:
            self.free.extend(rows)

    def refresh(self, rows: Sequence[int], now: float) -> None:
        """``last_accessed_at = now`` and ``access_count += 1`` of the rows (each once)."""
        idx = np.asarray(rows, np.int64)
        if idx.shape[0]:
            self.columns.last_accessed_at[idx] = now
            self.columns.access_count[idx] += 1


#: Rows per batch when a :class:`DiskTable` builds a hybrid index from its log.
BUILD_CHUNK = 131_072


class _DiskKeys:
    """The live keys of a :class:`DiskTable` as the read-only mapping key -> row the store
    core uses (``get``, ``in``, ``[]``, ``len``, iteration in row order, ``values``)."""

    __slots__ = ("t",)

    def __init__(self, table: "DiskTable"):
        self.t = table

    def get(self, key: str, default: Any = None) -> Any:
        row = self.t.lookup(key)
        return default if row is None else row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.t.lookup(key) is not None

    def __getitem__(self, key: str) -> int:
        row = self.t.lookup(key)
        if row is None:
            raise KeyError(key)
        return row

    def __len__(self) -> int:
        return self.t.n_live

    def __bool__(self) -> bool:
        return self.t.n_live > 0

    def values(self) -> list[int]:
        return self.t.live_rows().tolist()

    def __iter__(self):
        return iter(self.t.decode(self.t.live_rows(), texts=False, metadata=False)["keys"])

    def items(self):
        rows = self.t.live_rows()
        return zip(self.t.decode(rows, texts=False, metadata=False)["keys"], rows.tolist())


class DiskTable(Table):
    """One format-2 namespace (:mod:`memcore.storage`): the columns are memory-mapped and
    nothing per row lives in Python objects. Keys, texts and metadata stay in the log: a
    key lookup goes through the key index (:class:`~memcore.storage.checkpoint.KeyIndex`,
    confirmed by the key of the row's record), and texts and metadata are read from the
    rows' PUT records (one CRC-checked ``pread`` each) for the memories returned only.

    A metadata filter reads the metadata of every live row once (one vectorised pass over
    the memory-mapped log, JSON parsed per row); its mask is then kept (up to 8 filters) and
    updated by every write from the written rows' metadata, so repeating a filter costs
    nothing more.

    Parameters
    ----------
    namespace : tuple of str
    columns : Columns
        Format-2 columns (``alive`` in RAM, ``record_offset`` mapped).
    files : NamespaceFiles
    index : KeyIndex
    rows : int
        Rows in use.
    """

    __slots__ = ("index", "n_live", "_masks", "index_dirty")

    def __init__(self, namespace: Namespace, columns: Any, files: Any, index: Any, rows: int):
        super().__init__(namespace, columns)
        self.files, self.index, self.rows = files, index, rows
        self.keys = _DiskKeys(self)                                 # type: ignore[assignment]
        self.n_live = int(np.count_nonzero(columns.alive[:rows]))
        self._masks: dict = {}
        self.index_dirty = False        # a hybrid index changed since the last checkpoint

    @property
    def live(self) -> int:
        return self.n_live

    # ------------------------------------------------------------------ reads
    def lookup(self, key: str) -> int | None:
        return self.index.lookup(key, self.columns.alive)

    def live_rows(self) -> np.ndarray:
        """ndarray (live,), int64: the live rows, ascending (oldest write first)."""
        return np.flatnonzero(self.columns.alive[:self.rows]).astype(np.int64)

    def decode(self, rows: np.ndarray, **which: bool) -> dict:
        """Fields of the rows' PUT records (see :meth:`NamespaceFiles.decode`)."""
        return self.files.decode(self.columns.record_offset[np.asarray(rows, np.int64)], **which)

    def record(self, row: int) -> Any:
        return self.files.verified_put(self.columns, row)     # the vector's CRC checked

    def meta(self, row: int) -> dict:
        return json.loads(self.record(row).metadata)

    def fields(self, row: int) -> tuple[str, str, float, dict]:
        rec = self.record(row)
        return rec.key, rec.text, rec.importance, json.loads(rec.metadata)

    def mask(self, flt: Mapping[str, Any] | None) -> np.ndarray:
        n = self.rows
        if not flt:
            return self.columns.alive[:n]
        tag = repr(flt)
        got = self._masks.get(tag)
        if got is not None:
            return got[1][:n]
        rows = self.live_rows()
        match = _validate.filter_predicate(flt)
        metas = self.decode(rows, keys=False, texts=False)["metadata"]
        alive = np.zeros(self.columns.capacity, np.bool_)
        alive[rows[[match(json.loads(m)) for m in metas]]] = True
        if len(self._masks) >= 8:
            self._masks.clear()
        self._masks[tag] = (flt, alive)
        return alive[:n]

    def _masks_add(self, rows: Sequence[int], metadata: Sequence[Any]) -> None:
        """Keep the cached filter masks current for new live rows (their metadata given)."""
        cap = self.columns.capacity
        for tag, (flt, m) in list(self._masks.items()):
            if m.shape[0] < cap:
                m = np.concatenate([m, np.zeros(cap - m.shape[0], np.bool_)])
                self._masks[tag] = (flt, m)
            for r, meta in zip(rows, metadata):
                m[r] = _validate.matches_filter(
                    meta if isinstance(meta, dict) else json.loads(meta), flt)

    def recall_index(self, weights: HybridWeights, dim: int,
                     preparer: Callable | None) -> HybridIndex:
        """The hybrid index for ``weights``' structure: restored at open from the last
        checkpoint (then kept current by every write), else built from the live rows on first
        use (and written at the next checkpoint)."""
        if self.recall is None:
            self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors,
                                         created_at=lambda: self.columns.created_at)
        key = weights.structure()
        idx = self.recall.indexes.get(key)
        if idx is None:                       # built in chunks: bounded memory at any size
            idx = HybridIndex(dim, weights, preparer, vectors=self.recall.vectors,
                              created_at=self.recall.created_at)
            rows = self.live_rows()
            vecs = self.columns.vectors
            for s in range(0, rows.shape[0], BUILD_CHUNK):
                part = rows[s:s + BUILD_CHUNK]
                d = self.decode(part, keys=False)
                lo, hi = int(part[0]), int(part[-1]) + 1
                idx.put_many(part.tolist(), d["texts"],
                             vecs[lo:hi] if hi - lo == part.shape[0] else vecs[part],
                             [episode_speaker(json.loads(m)) for m in d["metadata"]])
            self.recall.indexes[key] = idx
            self.index_dirty = True
        return idx

    def restore_recall(self, indexes: dict, dim: int, preparer: Callable | None,
                       events: Sequence[tuple], offsets: np.ndarray) -> None:
        """Adopt hybrid indexes restored from a checkpoint (``{structure: HybridIndex}``)
        and bring them up to date with the log tail (``events``: ``(row, killed)`` per PUT,
        ``(-1, row)`` per DEL, in log order; ``offsets`` of the tail's PUT records)."""
        self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors,
                                         created_at=lambda: self.columns.created_at)
        self.recall.indexes.update(indexes)
        if not len(events):
            return
        d = self.files.decode(np.asarray(offsets, np.int64), keys=False)
        vecs, rec = self.columns.vectors, self.recall
        run: list = []                      # consecutive new rows: one put_many

        def flush() -> None:
            if run:
                rows = [r for r, _ in run]
                rec.put_many(rows, [d["texts"][i] for _, i in run], vecs[rows],
                             [json.loads(d["metadata"][i]) for _, i in run])
                run.clear()

        pi = 0
        for row, other in events:
            if row >= 0 and other < 0:
                run.append((row, pi))
                pi += 1
                continue
            flush()
            if other >= 0:
                rec.delete(other)
            if row >= 0:
                rec.put(row, d["texts"][pi], vecs[row], json.loads(d["metadata"][pi]))
                pi += 1
        flush()
        self.index_dirty = True

    def hybrid_state(self) -> dict | None:
        """``{structure: (arrays, small_state)}`` of the built hybrid indexes, or None."""
        if self.recall is None or not self.recall.indexes:
            return None
        return {key: (idx.arrays, idx.small_state()) for key, idx in self.recall.indexes.items()}

    # ------------------------------------------------------------------ writes
    def take(self, m: int) -> list[int]:
        n0 = self.rows
        self.columns.ensure(n0 + m)
        self.rows = n0 + m
        return list(range(n0, n0 + m))

    def write(self, rows: Sequence[int], batch: Rows, pick: Sequence[int] | None = None, *,
              columns: bool = True) -> None:
        """As :meth:`Table.write`; the batch's rows must be new (appended) rows."""
        sel = list(range(len(batch))) if pick is None else list(pick)
        if not sel:
            return
        c = self.columns
        idx = np.asarray(rows, np.int64)
        if columns:
            c.vectors[idx] = batch.vectors[sel]
            c.importance[idx] = [batch.importance[j] for j in sel]
            for name in ("created_at", "updated_at", "last_accessed_at", "access_count"):
                getattr(c, name)[idx] = getattr(batch, name)[sel]
        c.alive[idx] = True
        keys = [batch.keys[j] for j in sel]
        before = self.index.lookup_many(keys, c.alive)
        tail, dead, new = self.index.tail, [], 0
        for k, r, old in zip(keys, idx.tolist(), before):
            prev = tail.get(k)
            if prev is not None:
                old = prev
            if old is None:
                new += 1
            elif old != r:
                dead.append(old)
            tail[k] = r
        self.n_live += new
        self.kill(dead)
        if self._masks:
            keep = [(r, j) for r, j in zip(idx.tolist(), sel) if tail.get(batch.keys[j]) == r]
            self._masks_add([r for r, _ in keep], [batch.metadata[j] for _, j in keep])
        rec = self.recall
        if rec is not None and rec.indexes:
            self.index_dirty = True
            keep = [(r, j) for r, j in zip(idx.tolist(), sel) if tail.get(batch.keys[j]) == r]
            rec.put_many([r for r, _ in keep], [batch.texts[j] for _, j in keep],
                         np.ascontiguousarray(c.vectors[[r for r, _ in keep]]),
                         [batch.metadata[j] for _, j in keep])

    def remove(self, keys: Sequence[str]) -> list[int]:
        rows = []
        for k in keys:
            row = self.lookup(k)
            if row is not None:
                self.index.tail.pop(k, None)
                rows.append(row)
        self.n_live -= len(rows)
        self.kill(rows)
        return rows

    def kill(self, rows: Sequence[int]) -> None:
        if not rows:
            return
        idx = np.asarray(rows, np.int64)
        self.columns.alive[idx] = False
        for _, m in self._masks.values():
            m[idx[idx < m.shape[0]]] = False
        if self.recall is not None:
            self.index_dirty = self.index_dirty or bool(self.recall.indexes)
            self.recall.delete_many(rows)

    def checkpoint(self) -> None:
        """Write a checkpoint (:meth:`NamespaceFiles.checkpoint`), the hybrid indexes
        included."""
        c = self.columns
        self.files.checkpoint(c, self.rows, c.record_offset, keys=self.index,
                              hybrid=self.hybrid_state(), hybrid_dirty=self.index_dirty)
        self.index_dirty = False
