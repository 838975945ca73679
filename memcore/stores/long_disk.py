"""LongTermMemory's namespaces on disk (:mod:`memcore.storage`, format 2).

:class:`DiskTable` is one format-2 namespace: its columns, key index and hybrid indexes are
memory-mapped from the namespace's files, and its keys, texts and metadata stay in its log.
:class:`LogTable` is a format-1 namespace served read-only (its whole log replayed into RAM).
:class:`DiskSpace` is the disk backend of a :class:`~memcore.LongTermMemory` (chosen once, at
construction; an in-memory store has :class:`RamSpace`): the store root and lock, opening
and creating namespaces, commit steps and healing after an interrupted one, checkpoints,
and the disk half of compaction, re-embedding and repair.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from memcore import storage
from memcore.core.rows import Rows
from memcore.core.table import Table
from memcore.errors import (
    EmbedderMismatchError,
    FormatVersionError,
    InvalidArgumentError,
    StoreCorruptedError,
)
from memcore.recall.index import HybridIndex
from memcore.recall.namespace import NamespaceRecall, episode_speaker
from memcore.recall.weights import HybridWeights
from memcore.storage.catalog import Catalog
from memcore.storage.columns import grow_expiry, open_expiry, write_expiry
from memcore.storage.layout import PACK_DIR, PACK_NAMESPACE
from memcore.stores import long_pack
from memcore.stores.long_pack import Pack, PackCache, PackedTable
from memcore.types import Namespace

__all__ = ["OPEN_NAMESPACES", "DiskSpace", "DiskTable", "LazyTables", "LogTable", "Tables",
           "open_table", "write_live"]

logger = logging.getLogger("memcore")

_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)

#: Rows per batch when a :class:`DiskTable` builds a hybrid index from its log.
BUILD_CHUNK = 131_072


def meta_bytes(metadata: Sequence[Any]) -> list[bytes]:
    """Metadata as the JSON bytes of its records (bytes pass through)."""
    return [m if isinstance(m, bytes) else (_JSON.encode(m).encode("utf-8") if m else b"{}")
            for m in metadata]


class Tables(dict):
    """namespace -> Table, plus the namespaces found damaged on open (``damaged``: directory
    name -> message). Looking up a damaged namespace raises :class:`StoreCorruptedError`
    with that message; iteration sees only the healthy ones, which open and serve."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.damaged: dict[str, str] = {}

    def _check(self, ns: Any) -> None:
        if self.damaged and isinstance(ns, tuple):
            msg = self.damaged.get(storage.namespace_dirname(ns))
            if msg is not None:
                raise StoreCorruptedError(msg)

    def get(self, ns: Any, default: Any = None) -> Any:
        self._check(ns)
        return super().get(ns, default)

    def __getitem__(self, ns: Any) -> Any:
        self._check(ns)
        return super().__getitem__(ns)

    def pop(self, ns: Any, *default: Any) -> Any:
        self._check(ns)
        return super().pop(ns, *default)

    def reset(self) -> None:
        """Forget every table and every damaged namespace."""
        self.clear()
        self.damaged.clear()


class _Members(dict):
    """A dict that counts its membership changes (``version``): the namespaces a
    :class:`LazyTables` knows, whose sorted list it keeps until one is added or removed."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.version = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self:
            self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self.version += 1

    def pop(self, key: Any, *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def update(self, *args: Any, **kw: Any) -> None:    # pragma: no cover - unused
        self.version += 1
        super().update(*args, **kw)

    def setdefault(self, *args: Any) -> Any:            # pragma: no cover - unused
        self.version += 1
        return super().setdefault(*args)

    def popitem(self) -> Any:                            # pragma: no cover - unused
        self.version += 1
        return super().popitem()


#: At most this many namespaces of a disk store have their files open at once (the least
#: recently used one is checkpointed and closed to open another): open file descriptors and
#: memory maps are bounded by it, never by the number of namespaces.
OPEN_NAMESPACES = 4


class LazyTables(Tables):
    """The tables of a :class:`DiskSpace`: every namespace of the catalog is a key, but only
    the :data:`OPEN_NAMESPACES` most recently used ones are open (the dict's own items, in
    use order). Looking one up opens it (``opener(dirname)``; damage found there isolates it
    as damage at store open does); opening one more closes the least recently used one
    (``closer(table)``). ``items()``/``values()`` open the namespaces one at a time, in
    namespace order; :meth:`open_tables` lists the open ones.

    Parameters
    ----------
    opener : callable
        ``opener(dirname) -> Table``; raises :class:`StoreCorruptedError` or
        FileNotFoundError.
    closer : callable
        ``closer(table)``: save, checkpoint and close an evicted table.
    """

    def __init__(self, opener: Callable[[str], Any], closer: Callable[[Any], None]):
        super().__init__()
        self.opener, self.closer = opener, closer
        self.dirs: dict[Namespace, str] = _Members()   # every known namespace -> directory
        self.limit = OPEN_NAMESPACES
        self.pinned = 0
        self.catalog: Any = None                  # memcore.storage.catalog.Catalog
        #: format 3: the namespaces served by the pack -> their namespace id, the gathered
        #: copies (an LRU bounded by rows), what gathers one and what summarises one
        self.packed: dict[Namespace, int] = _Members()
        self._sorted: tuple = (None, [])          # ((versions), sorted namespaces)
        self.cache = PackCache()
        self.pack_loader: Callable[[Namespace], Any] | None = None
        self.pack_summary: Callable[[int], tuple[int, bool]] | None = None
        self.pack_lost: set = set()               # the namespaces of a damaged pack
        self.pack_damage = ""
        self.pack_error: type = StoreCorruptedError

    def _check(self, ns: Any) -> None:
        if self.pack_lost and ns in self.pack_lost:
            raise self.pack_error(self.pack_damage)
        super()._check(ns)

    def _open(self, ns: Namespace) -> Any:
        name = self.dirs[ns]
        self._evict(self.limit - 1)
        try:
            t = self.opener(name)
        except FileNotFoundError:
            del self.dirs[ns]                     # removed by the writer (a reader)
            return None
        except StoreCorruptedError as err:
            del self.dirs[ns]
            raise StoreCorruptedError(self.isolate(name, err)) from None
        dict.__setitem__(self, ns, t)
        return t

    def isolate(self, name: str, err: Exception, note: str = "") -> str:
        """Record directory ``name`` as damaged (see :class:`Tables`), ``note`` appended to
        the message (the pack's: the namespaces it holds); returns the message."""
        msg = (f"{err} [namespace directory {name} is isolated: the store's other namespaces "
               f"serve; repair() or `memcore repair PATH` rewrites it]{note}")
        self.damaged[name] = msg
        logger.warning("%s", msg)
        return msg

    def _evict(self, keep: int) -> None:
        if self.pinned:
            return
        while dict.__len__(self) > keep:
            ns = next(iter(dict.keys(self)))
            self.closer(dict.pop(self, ns))

    def get(self, ns: Any, default: Any = None) -> Any:
        self._check(ns)
        if ns in self.packed:
            t = self.cache.get(ns)
            if t is None:
                t = self.pack_loader(ns)
                self.cache.put(t)
            return t
        t = dict.pop(self, ns, None)
        if t is not None:
            dict.__setitem__(self, ns, t)       # most recently used last
            return t
        if ns in self.dirs:
            t = self._open(ns)
        return default if t is None else t

    def __getitem__(self, ns: Any) -> Any:
        t = self.get(ns)
        if t is None:
            raise KeyError(ns)
        return t

    def __setitem__(self, ns: Any, t: Any) -> None:
        if getattr(t, "packed", False):
            self.dirs.pop(ns, None)
            dict.pop(self, ns, None)
            self.packed[ns] = t.nsid
            self.cache.put(t)
            return
        if self.packed.pop(ns, None) is not None:
            self.cache.pop(ns)
        dict.pop(self, ns, None)
        self._evict(self.limit - 1)
        self.dirs[ns] = os.path.basename(t.files.directory)
        dict.__setitem__(self, ns, t)

    def __delitem__(self, ns: Any) -> None:
        if self.packed.pop(ns, None) is not None:
            self.cache.pop(ns)
            return
        dict.pop(self, ns, None)
        del self.dirs[ns]

    def pop(self, ns: Any, *default: Any) -> Any:
        t = self.get(ns)
        if t is None:
            if default:
                return default[0]
            raise KeyError(ns)
        del self[ns]
        return t

    def __contains__(self, ns: object) -> bool:
        return ns in self.dirs or ns in self.packed

    def __len__(self) -> int:
        return len(self.dirs) + len(self.packed)

    def __iter__(self):
        return iter(self.keys())

    def keys(self):                                  # type: ignore[override]
        """Every namespace, sorted (a fresh list; the sort is kept until one is added or
        removed)."""
        return list(self._members()[0])

    def _members(self) -> tuple[list, list]:
        """The sorted namespaces and, for each, its pack id or None (kept until one is
        added or removed)."""
        v = (id(self.dirs), self.dirs.version, id(self.packed), self.packed.version)
        if self._sorted[0] != v:
            names = sorted([*self.dirs, *self.packed])
            get = self.packed.get
            self._sorted = (v, (names, [get(ns) for ns in names]))
        return self._sorted[1]

    def items(self):                                 # type: ignore[override]
        """(namespace, table) of every healthy namespace in namespace order, each opened
        when reached (a damaged one is isolated and skipped)."""
        for ns in self.keys():
            try:
                t = self.get(ns)
            except StoreCorruptedError:
                continue
            if t is not None:
                yield ns, t

    def values(self):                                # type: ignore[override]
        return (t for _, t in self.items())

    def summaries(self) -> list[tuple[Namespace, int, bool]]:
        """``(namespace, live, has_ttl)`` of every namespace, sorted: an open one's from its
        table, another's from the catalog's trusted summary, else it is opened to learn it."""
        out = []
        summary = self.catalog.summary if self.catalog is not None else {}
        names, ids = self._members()
        for ns, h in zip(names, ids):
            if h is not None:
                out.append((ns, *self.pack_summary(h)))
                continue
            t = dict.get(self, ns)
            s = summary.get(self.dirs[ns]) if t is None else None
            if s is None:
                try:
                    t = self.get(ns)
                except StoreCorruptedError:
                    continue
                if t is None:
                    continue
                out.append((ns, t.live, t.expiry is not None))
            else:
                out.append((ns, s[0], s[2]))
        return out

    def open_tables(self) -> list:
        """The open tables (least recently used first)."""
        return list(dict.values(self))

    @contextlib.contextmanager
    def all_open(self):
        """Let every namespace stay open while the block runs (a reindex holds them all)."""
        self.pinned += 1
        try:
            yield
        finally:
            self.pinned -= 1
            self._evict(self.limit)

    def clear(self) -> None:
        dict.clear(self)
        self.dirs.clear()
        self.packed.clear()
        self.cache.clear()
        self.pack_lost = set()
        self.pack_error = StoreCorruptedError

    def copy(self):                                  # pragma: no cover - never a dict copy
        raise TypeError("LazyTables cannot be copied")


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

    A write commits first (:meth:`append`: columns, then the log record, the commit point;
    :meth:`remove`: DEL records), then updates the table. A metadata filter reads the
    metadata of every live row once (one vectorised pass over the memory-mapped log); its
    mask is kept like a :class:`Table`'s.

    Parameters
    ----------
    namespace : tuple of str
    columns : memcore.storage.Columns
        Format-2 columns (``alive`` in RAM, ``record_offset`` mapped).
    files : memcore.storage.NamespaceFiles
    index : memcore.storage.KeyIndex
    rows : int
        Rows in use.
    """

    __slots__ = ("files", "index", "n_live", "saver")

    def __init__(self, namespace: Namespace, columns: Any, files: Any, index: Any, rows: int):
        super().__init__(namespace, columns)
        self.files, self.index, self.rows = files, index, rows
        #: called with the table after it built a hybrid index from its rows (the disk
        #: backend's :meth:`DiskSpace.save_index`: a writer checkpoints it at once)
        self.saver: Callable[["DiskTable"], None] | None = None
        self.keys = _DiskKeys(self)                                 # type: ignore[assignment]
        self.n_live = int(np.count_nonzero(columns.alive[:rows]))

    @classmethod
    def create(cls, parent: str, ns: Namespace, dim: int, durability: str) -> "DiskTable":
        """A new, empty namespace directory in ``parent`` (an epoch directory)."""
        files, cols = storage.NamespaceFiles.create(parent, ns, dim, durability)
        return cls(ns, cols, files, storage.new_key_index(files, cols), 0)

    @property
    def live(self) -> int:
        return self.n_live

    # ------------------------------------------------------------------ reads
    def lookup(self, key: str) -> int | None:
        return self.index.lookup(key, self.columns.alive)

    def lookup_many(self, keys: Sequence[str]) -> list[int | None]:
        return self.index.lookup_many(list(keys), self.columns.alive)

    def live_rows(self) -> np.ndarray:
        """ndarray (live,), int64: the live rows, ascending (oldest write first)."""
        return np.flatnonzero(self.columns.alive[:self.rows]).astype(np.int64)

    def decode(self, rows: np.ndarray, **which: bool) -> dict:
        """Fields of the rows' PUT records (see :meth:`NamespaceFiles.decode`)."""
        return self.files.decode(self.record_offsets(rows), **which)

    def record_offsets(self, rows: Sequence[int]) -> np.ndarray:
        """ndarray (len(rows),), int64: the log offset of each row's PUT record."""
        return np.asarray(self.columns.record_offset[np.asarray(rows, np.int64)], np.int64)

    def record(self, row: int) -> Any:
        return self.files.verified_put(self.columns, row)     # the vector's CRC checked

    def meta(self, row: int) -> dict:
        return json.loads(self.record(row).metadata)

    def fields(self, row: int) -> tuple[str, str, float, dict]:
        rec = self.record(row)
        return rec.key, rec.text, rec.importance, json.loads(rec.metadata)

    def vector(self, row: int) -> np.ndarray:
        """A copy of the row's vector, checked against its record's CRC first.

        Raises
        ------
        StoreCorruptedError
            Naming the vectors file and row when it is damaged.
        """
        self.record(row)
        return np.array(self.columns.vectors[row])

    def live_metadata(self) -> tuple[np.ndarray, list]:
        rows = self.live_rows()
        metas = self.decode(rows, keys=False, texts=False)["metadata"]
        return rows, [json.loads(m) for m in metas]

    def live_fields(self, texts: bool = True) -> tuple:
        """As :meth:`Table.live_fields`, decoded from the log (metadata as JSON bytes)."""
        rows = self.live_rows()
        d = self.decode(rows, texts=texts)
        return (rows.tolist(), d["keys"], d.get("texts"), d["metadata"],
                d["importance"].tolist())

    def recall_index(self, weights: HybridWeights, dim: int, preparer: Callable | None,
                     progress: Callable[[int], Any] | None = None) -> HybridIndex:
        """The hybrid index for ``weights``' structure: restored at open from the last
        checkpoint (then kept current by every write), else built from the live rows on first
        use, in chunks of :data:`BUILD_CHUNK` rows (bounded memory at any size), then handed
        to :attr:`saver` (a writer checkpoints it at once).

        Parameters
        ----------
        weights : HybridWeights
        dim : int
        preparer : callable or None
        progress : callable, optional
            ``progress(rows)`` after each chunk of a build (a progress bar's ``update``).
        """
        if self.recall is None:
            self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors,
                                          created_at=lambda: self.columns.created_at)
        key = weights.structure()
        idx = self.recall.indexes.get(key)
        if idx is None:
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
                if progress is not None:
                    progress(part.shape[0])
            self.recall.indexes[key] = idx
            self.index_dirty = True
            if self.saver is not None:
                self.saver(self)
        return idx

    def index_unsaved(self) -> bool:
        """Whether a built hybrid index that holds rows is named by no checkpoint yet (a
        reopen would rebuild it from the whole log instead of replaying the log tail)."""
        if self.recall is None or not self.index_dirty or self.files.read_only:
            return False
        saved = {s for s, _ in storage.index_structures(self.files.index_entry)}
        return any(len(idx) and key not in saved for key, idx in self.recall.indexes.items())

    def restore_recall(self, dim: int, preparer: Callable | None, state: Any,
                       read_only: bool) -> None:
        """Restore the hybrid indexes the header's index entry names (each from its files;
        derived state: one that cannot be restored is rebuilt from the log on its first
        hybrid search) and bring them up to date with the log tail (``state``: the
        :class:`memcore.storage.OpenState` of the open)."""
        entry = self.files.index_entry
        if not entry:
            return
        indexes = {}
        for structure, manifest in storage.index_structures(entry):
            try:
                arrays, small = storage.read_index(self.files.directory, self.files.generation,
                                                   entry["checkpoint"], structure, manifest,
                                                   entry.get("crc"))
                indexes[structure] = HybridIndex.restore(
                    dim, arrays, small, HybridWeights.for_structure(structure), preparer,
                    vectors=lambda: self.columns.vectors,
                    created_at=lambda: self.columns.created_at)
            except Exception as err:   # derived state: any damage -> rebuilt from the log
                log = logger.info if read_only and _replaced(self.files) else logger.warning
                log("the hybrid index of namespace %r could not be restored (%s); "
                    "it is rebuilt from the log on its first hybrid search", self.files.ns, err)
        self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors,
                                      created_at=lambda: self.columns.created_at)
        self.recall.indexes.update(indexes)
        events = state.events
        if not len(events):
            return
        d = self.files.decode(np.asarray(state.tail.put_offsets, np.int64), keys=False)
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

    def append(self, batch: Rows) -> None:
        """Commit a batch (lifecycle set) as new rows: vectors, columns and times to live
        into the memory maps, then the PUT records to the log (the commit point), then the
        table. Lock held; the store wraps it in a commit step."""
        m, n0, c = len(batch), self.rows, self.columns
        c.ensure(n0 + m)
        sl = slice(n0, n0 + m)
        c.vectors[sl] = batch.vectors
        c.importance[sl] = batch.importance
        for name in ("created_at", "updated_at", "last_accessed_at", "access_count"):
            getattr(c, name)[sl] = getattr(batch, name)
        exp = batch.expiry()
        if exp is not None or self.expiry is not None:   # a column like the others
            self.expiry = grow_expiry(self.expiry, self.files.directory, self.files.generation,
                                      n0 + m)
            self.set_expiry(np.arange(n0, n0 + m), *(exp or (None, None)))
        self.files.checks.stamp(c, self.expiry, n0, n0 + m)
        if self.files.durability == "fsync":
            if self.expiry is not None:
                self.expiry.flush()
            self.files.checks.flush()
        c.record_offset[sl] = self.files.commit(
            c, n0, batch.keys, batch.texts, meta_bytes(batch.metadata), batch.importance,
            batch.created_at, batch.updated_at, batch.last_accessed_at, batch.access_count,
            batch.vectors)
        self.write(self.take(m), batch, columns=False)

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
        self._added(idx.tolist(), batch, sel)

    def remove(self, keys: Sequence[str]) -> list[int]:
        """Commit the DEL records of the live ``keys`` (one append: all or nothing after a
        crash), then remove them; returns their rows."""
        rows, found = [], []
        for k in keys:
            row = self.lookup(k)
            if row is not None:
                rows.append(row)
                found.append(k)
        if not rows:
            return rows
        self.files.delete(self.columns, rows, found)
        for k in found:
            self.index.tail.pop(k, None)
        self.n_live -= len(rows)
        self.kill(rows)
        return rows

    def _forget(self, rows: Sequence[int]) -> None:
        """Nothing: a disk row's fields live in the log, and rows are append-only."""

    def refresh(self, rows: Sequence[int], now: float) -> None:
        """As :meth:`Table.refresh`, with each row's check (:meth:`RowChecks.touch`)."""
        self.files.checks.touch(self.columns, np.asarray(rows, np.int64), now)

    def refresh_expiry(self, rows: Sequence[int], now: float) -> None:
        """As :meth:`Table.refresh_expiry`, with each row's check copy
        (:meth:`RowChecks.refresh_expiry`)."""
        if self.expiry is not None:
            self.files.checks.refresh_expiry(self.expiry, np.asarray(rows, np.int64), now)

    # ------------------------------------------------------------------ files
    def checkpoint_due(self) -> bool:
        return self.files.checkpoint_due(self.rows)

    def checkpoint(self) -> None:
        """Write a checkpoint (:meth:`NamespaceFiles.checkpoint`), the TTL column and the
        hybrid indexes included."""
        if isinstance(self.expiry, np.memmap) and self.expiry.mode == "r+":
            self.expiry.flush()
        c = self.columns
        self.files.checkpoint(c, self.rows, c.record_offset, keys=self.index,
                              hybrid=self.hybrid_state(), hybrid_dirty=self.index_dirty)
        self.index_dirty = False

    def verify(self) -> dict:
        """:func:`memcore.storage.verify_namespace` of this namespace."""
        return storage.verify_namespace(self.files, self.columns, self.rows, self.expiry)

    def close(self) -> None:
        """Write anything buffered, close the log and unmap the files; the references that
        keep a mapping (and its descriptor) alive are dropped, so that a table closed by the
        LRU of open namespaces frees them at once, not at the next cyclic collection."""
        self.expiry = None
        storage.close_namespace(self.files, self.columns)
        self.index = self.recall = self.saver = None
        self.filter_masks = {}


class LogTable(Table):
    """A format-1 namespace served read-only as it is: the whole log replayed into RAM
    (keys, texts and metadata as Python objects), the columns memory-mapped.

    Parameters
    ----------
    namespace : tuple of str
    columns : memcore.storage.Columns
    files : memcore.storage.NamespaceFiles
    rep : memcore.storage.Replay
        The replay of the whole log.
    read_only : bool
    """

    __slots__ = ("files", "offsets")

    def __init__(self, namespace: Namespace, columns: Any, files: Any, rep: Any,
                 read_only: bool):
        super().__init__(namespace, storage.adopt_replay(columns, rep, read_only))
        self.files, self.rows = files, rep.rows
        keys, vals = rep.keys, list(rep.keys.values())
        if any(a > b for a, b in zip(vals, vals[1:])):
            keys = dict(sorted(keys.items(), key=lambda kv: kv[1]))   # oldest write first
        self.keys, self.key_of, self.texts, self.metadata = keys, rep.key_of, rep.texts, rep.metadata
        self.importance = list(rep.importance)
        self.offsets = np.asarray(rep.record_offset, np.int64)
        for row in rep.dead:
            self.key_of[row] = self.texts[row] = self.metadata[row] = None

    def record_offsets(self, rows: Sequence[int]) -> np.ndarray:
        """ndarray (len(rows),), int64: the log offset of each row's PUT record."""
        return self.offsets[np.asarray(rows, np.int64)]

    def close(self) -> None:
        storage.close_namespace(self.files, self.columns)


def open_table(directory: str, dim: int, durability: str, read_only: bool,
               preparer: Callable | None) -> DiskTable | LogTable:
    """Open a namespace directory as its table: format 2 as a :class:`DiskTable` (TTL column
    mapped, hybrid indexes restored), format 1 as a :class:`LogTable`.

    Raises
    ------
    StoreCorruptedError, FormatVersionError, FileNotFoundError
        As :func:`memcore.storage.open_namespace`; FormatVersionError also for a format-1
        namespace opened for writing.
    """
    files, cols, st = storage.open_namespace(directory, dim, durability, read_only)
    if not isinstance(st, storage.OpenState):
        if not read_only:
            storage.close_namespace(files, cols)
            raise FormatVersionError(
                f"{directory} is a format-1 namespace in a format-2 store; run `memcore "
                f"migrate {os.path.dirname(os.path.dirname(directory))}` or open the store "
                "with read_only=True")
        t: DiskTable | LogTable = LogTable(files.ns, cols, files, st, read_only)
    else:
        t = DiskTable(files.ns, cols, files, st.keys, st.rows)
    t.expiry = st.expiry if isinstance(t, DiskTable) else \
        open_expiry(files.directory, files.generation, read_only)
    if isinstance(t, DiskTable):
        t.restore_recall(dim, preparer, st, read_only)
    return t


def write_live(t: DiskTable | LogTable, vecs: np.ndarray, parent: str, generation: int,
               durability: str, log: bytes | None = None, side: dict | None = None) -> str:
    """Write the live rows of ``t`` (with ``vecs``) as a complete format-2 generation of its
    namespace in ``parent`` (:func:`memcore.storage.write_namespace`); returns the namespace
    directory. With ``log`` (vectors unchanged) the live records are copied, not re-encoded.
    """
    rows, keys, texts, metas, imps = t.live_fields(texts=log is None)
    idx = np.asarray(rows, np.int64)
    c = t.columns
    write_expiry(t.expiry, os.path.join(parent, storage.namespace_dirname(t.namespace)),
                 generation, rows)
    for name, values in (side or {}).items():     # the pack's nsid column
        write_expiry(values, os.path.join(parent, storage.namespace_dirname(t.namespace)),
                     generation, rows, name)
    files, cols, _ = storage.write_namespace(
        parent, t.namespace, durability, keys, texts, meta_bytes(metas), imps,
        *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
          ("created_at", "updated_at", "last_accessed_at", "access_count")),
        vecs, generation, log=log, offsets=None if log is None else t.record_offsets(rows))
    storage.close_namespace(files, cols)
    return files.directory


def _changed(t: DiskTable) -> bool:
    """Whether ``t`` holds rows, records or a hybrid index its last checkpoint lacks."""
    f = t.files
    return (t.rows != f.checkpoint_rows or f.log_bytes != f.checkpoint_log_bytes
            or bool(t.index_dirty))


def _replaced(files: Any) -> bool:
    """Whether a writer has replaced the checkpoint a read-only open read (its header now
    names another generation or checkpoint): the index files it named may be gone."""
    try:
        with open(os.path.join(files.directory, storage.NAMESPACE_HEADER)) as f:
            h = json.load(f)
        return (h.get("generation"), h.get("checkpoint")) != (files.generation,
                                                              files.checkpoint_id)
    except (OSError, ValueError):
        return True


def _index_structures(t: Table) -> list:
    """The structures of the hybrid indexes ``t`` has built."""
    return [] if t.recall is None else list(t.recall.indexes)


def _split_pack_report(rep: dict, pack: Pack | None) -> list[dict]:
    """A repair report of the pack as reports of its namespaces (see
    :meth:`DiskSpace._repair_pack`)."""
    fields = ("uncertain", "lost_keys", "stats_reset", "ttl_unverified")
    by: dict = {}
    for field in fields:
        for composite in rep.get(field) or []:
            if composite is None:
                continue
            try:
                ns, key = storage.split_key(composite)
            except StoreCorruptedError:
                continue
            by.setdefault(ns, {f: [] for f in fields})[field].append(key)
    if not by:
        return [rep]
    out = []
    for i, (ns, keys) in enumerate(sorted(by.items())):
        live = 0 if pack is None else pack.live.get(long_pack.namespace_id(ns), 0)
        out.append(dict(rep, namespace=ns, kept=live, dropped=len(keys["uncertain"]),
                        **keys, lost_rows=len(keys["lost_keys"]),
                        reembedded=rep.get("reembedded", 0) if i == 0 else 0))
    return out


class _EpochReplaced(Exception):
    """A read-only open found the epoch it was reading replaced by a reindex."""


class DiskSpace:
    """The disk backend of a :class:`~memcore.LongTermMemory` (see :mod:`memcore.storage`):
    its store root, its tables (:attr:`tables`: one :class:`DiskTable` per namespace, or
    :class:`LogTable` for a format-1 store served read-only) and the steps that change files.

    Every commit step (:meth:`step`: a write, delete, checkpoint, clear, compaction; a
    reindex marks the whole store) marks its namespace stale until it finished; any exception
    in between leaves the mark, and :meth:`heal` reloads the namespace from its files, which
    hold the whole commit or none of it.

    Parameters
    ----------
    path : str
        Absolute store directory.
    durability : {"flush", "fsync", "none"}
    read_only : bool
    lock_timeout : float
        Seconds to wait for the writer lock.
    preparer : callable, optional
        The store's query preparer (restored hybrid indexes use it).
    """

    def __init__(self, path: str, durability: str, read_only: bool, lock_timeout: float,
                 preparer: Callable | None):
        self.path, self.durability, self.read_only = path, durability, read_only
        self.lock_timeout, self.preparer = lock_timeout, preparer
        self.root: storage.StoreRoot | None = None
        self.tables = LazyTables(self._open_dir, self._evict)
        self.catalog: Catalog | None = None
        #: called with a table before it is evicted (the store saves its approximate index)
        self.on_evict: Callable[[Table], None] | None = None
        self.probed = False
        self.dim = 0
        self.repair_report: list[dict] = []
        self.stale: set = set()          # namespaces a step left half done
        self.stale_all: Any = None       # a reindex's embedder while it switches epochs
        self.healing = False
        #: format 3: the pack of small namespaces (None until a store has one)
        self.pack: Pack | None = None
        #: whether new namespaces go to the pack (:func:`memcore.stores.long_pack.enabled`)
        self.use_pack = long_pack.enabled()
        self.tables.pack_loader = self._load_packed
        self.tables.pack_summary = self._pack_summary

    # ------------------------------------------------------------------ opening
    def open(self, embedder: Any, repair: bool, embed: Callable | None) -> tuple[str, int, int]:
        """Open (or create) the store and every namespace; a read-only open that raced the
        writer's ``reindex`` (the epoch it started reading was replaced) starts over
        (bounded).

        Parameters
        ----------
        embedder : Embedder or None
        repair : bool
            Rebuild a lost store header and rewrite namespaces that fail to open.
        embed : callable, optional
            What repair re-embeds a damaged vector's text with.

        Returns
        -------
        (embedder_name, dim, format_version) of the store.
        """
        for attempt in range(8):
            try:
                return self._open_once(embedder, repair, embed)
            except _EpochReplaced:
                self.release()
                self.tables.reset()
                time.sleep(0.002 * 2 ** attempt)
        return self._open_once(embedder, repair, embed, last=True)

    def _raced(self, last: bool) -> bool:
        """Whether a read-only open should start over: the store header now names another
        epoch than the one being read."""
        if not self.read_only or last:
            return False
        try:
            head = storage.read_store_header(self.path)
        except (OSError, StoreCorruptedError):
            return True
        return head is None or head["epoch"] != self.root.epoch

    def _open_once(self, emb: Any, repair: bool, embed: Callable | None,
                   last: bool = False) -> tuple[str, int, int]:
        self.root = root = storage.StoreRoot.open(self.path, read_only=self.read_only,
                                                  lock_timeout=self.lock_timeout)
        if root.header is None and (root.damage is not None or storage.store_epochs(self.path)):
            if not repair:                       # lost or damaged, never an empty store
                raise root.damage or storage.missing_header_error(self.path)
            root.adopt(storage.recover_store_header(self.path, emb,
                                                    storage.embedder_reproduces))
            self.repair_report.append({"store_header": "rebuilt", "epoch": root.epoch})
        if root.header is None:
            if emb is None:
                raise InvalidArgumentError(f"{self.path} holds no store yet; creating one needs "
                                           "an embedder")
            name, self.dim = str(emb.name), int(emb.dim)
            root.create(name, self.dim, durable=self.durability != "none")
            self._load_catalog([])
            return name, self.dim, storage.FORMAT_VERSION
        name, self.dim = root.header["embedder"], root.header["dim"]
        version = root.header["version"]
        if version < storage.FORMAT_VERSION:
            hint = (f"{self.path} is in on-disk format version {version}; this "
                    f"memcore writes version {storage.FORMAT_VERSION}. Run `memcore migrate "
                    f"{self.path}` (or LongTermMemory.migrate(path)) to convert it")
            if not self.read_only:
                raise FormatVersionError(hint + "; until then it opens only with "
                                         "read_only=True (served as it is)")
            logger.warning("%s; it is served read-only as it is, every namespace read into "
                           "RAM", hint)
        if emb is not None and (str(emb.name) != name or int(emb.dim) != self.dim):
            raise EmbedderMismatchError(
                f"{self.path} was written with embedder {name!r} (dim {self.dim}), "
                f"but embedder {emb.name!r} (dim {emb.dim}) was given; pass the same embedder, "
                "or open it with that one and call reindex(new_embedder)")
        try:
            dirs = root.namespace_dirs()
        except StoreCorruptedError:
            if self._raced(last):
                raise _EpochReplaced() from None
            raise
        self._load_catalog(dirs)
        if self.read_only:
            self._open_every_namespace(last)
        if repair and not self.read_only:
            self.probe()
            self.repair_report.extend(self._repair_damaged(embed))
        return name, self.dim, version

    def _open_every_namespace(self, last: bool) -> None:
        """A read-only store opens every namespace at open and keeps it open (no LRU): it
        holds no lock, so a writer's compaction or reindex may delete the epoch it reads at
        any time, and only files opened (mapped) before that keep serving its snapshot. An
        open that fails because the epoch was replaced meanwhile starts over (see
        :meth:`_raced`); damage under a stable epoch isolates its namespace, as at a
        writer's first use. The descriptor bound of :data:`OPEN_NAMESPACES` therefore holds
        for a writer, not for a reader (format 3's shared segments would bound both)."""
        self.tables.limit = 1 << 62
        for ns in list(self.tables.dirs):
            try:
                t = self.tables.get(ns)
            except StoreCorruptedError:
                if self._raced(last):
                    raise _EpochReplaced() from None
                continue
            if t is None and self._raced(last):
                raise _EpochReplaced()

    def _load_catalog(self, dirs: Sequence[str]) -> None:
        """Learn the namespaces of the current epoch from its catalog (reconciled with the
        directory listing ``dirs``) without opening any; a directory nothing names is
        opened now to learn its namespace."""
        names = [os.path.basename(d) for d in dirs]
        has_pack = PACK_DIR in names
        self.catalog, unnamed = Catalog.load(self.path, self.root.epoch,
                                             [n for n in names if n != PACK_DIR],
                                             self.read_only, self.durability == "fsync")
        self.tables.catalog = self.catalog
        self.probed = False
        for name, ns in self.catalog.dirs.items():
            self.tables.dirs[ns] = name
        for name in unnamed:
            try:
                t = self._open_dir(name)
            except FileNotFoundError:
                continue
            except StoreCorruptedError as err:
                self.tables.isolate(name, err)
                continue
            self.tables[t.namespace] = t
            self.catalog.add(name, t.namespace)
        self._close_pack()
        if has_pack:
            self._open_pack()

    # ------------------------------------------------------------------ the pack (format 3)
    def _open_pack(self) -> None:
        """Open the pack of the current epoch and register its namespaces (named by the
        catalog, else by a row's key); a damaged pack is isolated, naming its namespaces."""
        directory = os.path.join(self.root.epoch_dir, PACK_DIR)
        self.tables.pack_lost, self.tables.pack_error = set(), StoreCorruptedError
        try:
            with storage.os_errors(self.path):
                t = open_table(directory, self.dim, self.durability, self.read_only, None)
            if not isinstance(t, DiskTable):
                raise StoreCorruptedError(f"{directory} is no format-2 pack")
            self.pack = Pack(t, self.read_only)
        except (StoreCorruptedError, FormatVersionError) as err:
            self.pack = None
            names = sorted(self.catalog.packed.values())
            self.tables.pack_lost = set(names)
            if isinstance(err, FormatVersionError):   # not damage: raised on first use
                self.tables.pack_error = FormatVersionError
                self.tables.pack_damage = str(err)
                return
            self.tables.pack_damage = self.tables.isolate(
                PACK_DIR, err, f" [the pack holds {len(names)} namespaces: "
                f"{', '.join(map(repr, names[:5]))}{' ...' if len(names) > 5 else ''}]")
            return
        self._register_packed()

    def _register_packed(self) -> None:
        pack, cat = self.pack, self.catalog
        named = {} if cat is None else cat.packed
        pack.check_ids(named)
        live = pack.live
        # the catalog's names first, in its order (a rewrite writes them sorted: the sorted
        # list of namespaces is then one merge), a CRC-checked line each (a wrong one only
        # names no rows); an id it lacks is named by one of its records
        found = [(ns, h) for h, ns in named.items() if h in live]
        for h in [h for h in live if h not in named]:
            try:
                ns = pack.name(h)
            except StoreCorruptedError as err:
                logger.warning("a namespace of the pack cannot be named (%s)", err)
                continue
            if cat is not None:
                cat.add_packed(h, ns)
            found.append((ns, h))
        for ns, h in found:
            if ns in self.tables.dirs:
                self._settle_promotion(ns, h)
            else:
                self.tables.packed[ns] = h
        for h in [h for h in named if h not in pack.live]:
            cat.drop_packed(h)      # (named is empty without a catalog)

    def _settle_promotion(self, ns: Namespace, h: int) -> None:
        """``ns`` has a directory and rows in the pack: a promotion cut short. A directory
        that holds rows wins (the pack rows are dropped); an empty one loses."""
        try:
            d = self.tables.get(ns)
        except StoreCorruptedError:
            return                                   # isolated; the pack rows wait
        if d is not None and d.rows > 0:
            if not self.read_only:
                rows = self.pack.rows_of(h)
                keys = self.pack.table.decode(rows, texts=False, metadata=False)["keys"]
                with self.step(PACK_NAMESPACE):
                    self.pack.remove(keys)
                self.pack.live.pop(h, None)
                if self.catalog is not None:
                    self.catalog.drop_packed(h)
            return
        del self.tables[ns]
        if d is not None:
            if self.read_only:
                d.close()
            else:
                storage.drop_namespace(d.files, d.columns)
                if self.catalog is not None:
                    self.catalog.drop(os.path.basename(d.files.directory))
        self.tables.packed[ns] = h

    def _close_pack(self) -> None:
        self.tables.cache.clear()
        self.tables.packed.clear()
        if self.pack is not None:
            self.pack.close()
            self.pack = None

    def _load_packed(self, ns: Namespace) -> PackedTable:
        """A packed namespace gathered from the pack (the LRU's first use)."""
        if self.pack is None:
            raise StoreCorruptedError(self.tables.pack_damage or "the pack is not open")
        return PackedTable.load(ns, self.pack, self.dim)

    def _pack_summary(self, h: int) -> tuple[int, bool]:
        return self.pack.live.get(h, 0), h in self.pack.expiring

    def _pack_for_write(self) -> Pack | None:
        """The pack, created (store header version 3 first) when the store has none; None
        when it is damaged (new namespaces get directories meanwhile)."""
        if self.pack is not None:
            return self.pack
        if PACK_DIR in self.tables.damaged or self.read_only:
            return None
        head = storage.read_store_header(self.path)
        if head["version"] < storage.layout.PACK_VERSION:
            storage.write_store_header(self.path, head["embedder"], head["dim"], head["epoch"],
                                       durable=self.durability != "none",
                                       version=storage.layout.PACK_VERSION)
            self.root.header = storage.read_store_header(self.path)
        t = DiskTable.create(self.root.epoch_dir, PACK_NAMESPACE, self.dim, self.durability)
        self.pack = Pack(t, False)
        return self.pack

    def _checkpoint_pack(self) -> None:
        with self.step(PACK_NAMESPACE):
            self.pack.flush_nsid()
            self.pack.table.checkpoint()
        self.pack.release_pages()

    def promote(self, t: PackedTable) -> DiskTable:
        """Move a packed namespace to its own directory: created empty (atomically), its
        rows committed there as one batch, then its pack rows tombstoned (one batch).
        Returns its new table."""
        ns = t.namespace
        rows, keys, texts, metas, imps = t.live_fields()
        idx = np.asarray(rows, np.int64)
        c = t.columns
        exp = None if t.expiry is None else t.expiry[idx]
        batch = Rows(ns, keys, texts, imps, metas, np.ascontiguousarray(c.vectors[idx]),
                     *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
                       ("created_at", "updated_at", "last_accessed_at", "access_count")),
                     None if exp is None else exp[:, 1], None if exp is None else exp[:, 0])
        with self.step(ns):
            d = self._served(DiskTable.create(self.root.epoch_dir, ns, self.dim,
                                              self.durability))
            if self.catalog is not None:
                self.catalog.add(os.path.basename(d.files.directory), ns)
            if keys:
                d.append(batch)
                with self.step(PACK_NAMESPACE):
                    self.pack.remove(t.keys_composite())
            self.pack.live.pop(t.nsid, None)
            if self.catalog is not None:
                self.catalog.drop_packed(t.nsid)
            self.tables[ns] = d
        self.after_write(d)
        return d

    def compact_pack(self) -> int:
        """Compact the pack (its live rows as its next generation, the ``nsid`` column
        carried); returns the rows dropped."""
        p = self.pack
        if p is None or self.read_only:
            return 0
        t = p.table
        if t.rows == t.live:
            return 0
        dead = np.flatnonzero(~t.columns.alive[:t.rows])
        have = 0 if p.nsid is None else p.nsid.shape[0]
        ids = p.nsid[dead[dead < have]] if have else np.zeros(0, np.int64)
        # the garbage of namespaces still here (a cleared or promoted one's is not counted,
        # as a format-2 namespace directory removed is not)
        dropped = int(np.count_nonzero(np.isin(ids, np.fromiter(
            self.tables.packed.values(), np.int64, len(self.tables.packed)))))
        rows = t.live_rows()
        vecs = np.ascontiguousarray(t.columns.vectors[rows])
        log = t.files.verified_log(vecs, rows.tolist(), t.record_offsets(rows), t.columns,
                                   "compact() wrote nothing")
        with self.step(PACK_NAMESPACE):
            directory = write_live(t, vecs, self.root.epoch_dir, t.files.generation + 1,
                                   self.durability, log, side={"nsid": p.nsid})
            storage.retire_generation(t.files, t.columns)
            self.tables.cache.clear()
            p.table = self.reopen(directory)
            p.nsid = open_expiry(directory, p.table.files.generation, False, "nsid")
            p.index()
        for ns, h in list(self.tables.packed.items()):
            if h not in p.live:                 # emptied by deletes: gone, as in format 2
                del self.tables[ns]
                if self.catalog is not None:
                    self.catalog.drop_packed(h)
        return dropped

    def _open_dir(self, name: str) -> DiskTable | LogTable:
        """Open namespace directory ``name`` of the current epoch (a table's first use)."""
        directory = os.path.join(self.root.epoch_dir, name)
        with storage.os_errors(self.path):
            return self._served(open_table(directory, self.dim, self.durability,
                                           self.read_only, self.preparer))

    def _evict(self, t: DiskTable | LogTable) -> None:
        """Close a least recently used table: its approximate index saved, a checkpoint
        when it changed since the last one, its summary noted in the catalog."""
        try:
            if self.on_evict is not None:
                self.on_evict(t)
            if not self.read_only and isinstance(t, DiskTable) and _changed(t):
                try:
                    self.checkpoint(t)
                except StoreCorruptedError as err:   # the header keeps the last good one
                    logger.warning("namespace %r was closed without a checkpoint (%s)",
                                   t.namespace, err)
            if self.catalog is not None:
                self.catalog.note(os.path.basename(t.files.directory), t.live, t.rows,
                                  t.expiry is not None)
        finally:
            t.close()

    def probe(self) -> None:
        """Open every namespace once, one at a time, so that any damaged one is isolated
        (:attr:`Tables.damaged`); packed namespaces are checked when gathered."""
        for ns in list(self.tables.dirs):
            try:
                self.tables.get(ns)
            except StoreCorruptedError:
                pass
        self.probed = True

    def reopen(self, directory: str) -> DiskTable | LogTable:
        """Open a namespace directory of this store for writing."""
        return self._served(open_table(directory, self.dim, self.durability, False,
                                       self.preparer))

    def release(self) -> None:
        """Close every table (a writer's catalog gets its clean-close marker) and release
        the writer lock."""
        try:
            for t in self.tables.open_tables():
                if self.catalog is not None:
                    self.catalog.note(os.path.basename(t.files.directory), t.live, t.rows,
                                      t.expiry is not None)
                t.close()
            if self.catalog is not None and self.root is not None \
                    and self.root.lock is not None:
                try:
                    self.catalog.close()
                except OSError as err:        # derived state: rebuilt at the next open
                    logger.warning("the namespace catalog was not written (%s)", err)
        finally:
            self._close_pack()
            self.tables.clear()
            self.catalog = None
        if self.root is not None:
            self.root.release()

    # ------------------------------------------------------------------ steps
    @contextlib.contextmanager
    def step(self, ns: Namespace) -> Iterator[None]:
        """Mark ``ns`` stale while a commit step runs: if any exception (KeyboardInterrupt,
        MemoryError, a failing write, ...) leaves the step half done, the namespace stays
        marked and :meth:`heal` reloads it. Deliberately not a ``finally``."""
        self.stale.add(ns)
        if self.catalog is not None:
            self.catalog.touch()
        yield
        self.stale.discard(ns)

    @property
    def needs_heal(self) -> bool:
        """Whether a step was left half done (and no heal is running)."""
        return bool(self.stale or self.stale_all is not None) and not self.healing

    def heal(self) -> Any:
        """Reload every stale namespace from disk (see :meth:`step`); after an interrupted
        reindex, every namespace of the epoch the store header names.

        Returns
        -------
        Embedder or None
            The reindex's embedder when the store header names it (the store switched to
            it), else None.
        """
        self.healing = True
        adopted = None
        try:
            if self.stale_all is not None:
                adopted = self._reload_all(self.stale_all)
            repack = PACK_NAMESPACE in self.stale or any(
                ns in self.tables.packed for ns in self.stale)
            for ns in sorted(self.stale):
                if ns in self.tables.packed:
                    del self.tables[ns]
                t = dict.pop(self.tables, ns, None)
                if t is not None:
                    t.close()
                self.tables.dirs.pop(ns, None)
                directory = os.path.join(self.root.epoch_dir, storage.namespace_dirname(ns))
                if ns != PACK_NAMESPACE and \
                        os.path.isfile(os.path.join(directory, storage.NAMESPACE_HEADER)):
                    self.tables[ns] = self.reopen(directory)
                self.stale.discard(ns)
            if repack:                  # the pack reloaded: its namespaces registered again
                self._close_pack()
                if os.path.isdir(os.path.join(self.root.epoch_dir, PACK_DIR)):
                    self._open_pack()
        finally:
            self.healing = False
        return adopted

    def _reload_all(self, embedder: Any) -> Any:
        """Reopen every namespace of the epoch the store header names (a ``reindex`` that
        raised after its commit point, or before: whichever the header says happened)."""
        for t in self.tables.open_tables():
            t.close()
        self._close_pack()
        self.tables.reset()
        head = storage.read_store_header(self.path)
        adopted = None
        if (head["embedder"], head["dim"]) == (str(embedder.name), int(embedder.dim)):
            adopted, self.dim = embedder, head["dim"]
        self.root.adopt(head)
        self._load_catalog(self.root.namespace_dirs())      # removes the other epoch
        self.stale.clear()
        self.stale_all = None
        return adopted

    # ------------------------------------------------------------------ writes
    def make_room(self, t: Table, m: int) -> Table:
        """The table a write of ``m`` rows to ``t`` goes to: a packed namespace that would
        pass :data:`~memcore.stores.long_pack.PACK_MAX` live rows moves to its own directory
        first (so a bulk load is never written twice); otherwise ``t``."""
        if isinstance(t, PackedTable) and t.live + m > long_pack.PACK_MAX and not t.bad \
                and t.pack is self.pack and not self.read_only:
            return self.promote(t)
        return t

    def new_table(self, ns: Namespace, m: int = 0) -> DiskTable | PackedTable:
        """A new namespace's table (its first write: ``m`` rows): in the pack when
        :attr:`use_pack` (format 3) and ``m`` fits under
        :data:`~memcore.stores.long_pack.PACK_MAX`, else its directory created in the
        current epoch."""
        pack = self._pack_for_write() if self.use_pack and m <= long_pack.PACK_MAX else None
        if pack is not None:
            p = PackedTable(ns, pack, self.dim)
            if self.catalog is not None:
                self.catalog.add_packed(p.nsid, ns)
            return p
        t = self._served(DiskTable.create(self.root.epoch_dir, ns, self.dim,
                                          self.durability))
        if self.catalog is not None:
            self.catalog.add(os.path.basename(t.files.directory), ns)
        return t

    def checkpoint(self, t: DiskTable | PackedTable) -> None:
        """Checkpoint one namespace as a step (see :meth:`DiskTable.checkpoint`); a packed
        one's is the pack's."""
        if isinstance(t, PackedTable):
            self._checkpoint_pack()
            return
        with self.step(t.namespace):
            t.checkpoint()

    def after_write(self, t: DiskTable) -> None:
        """Checkpoint ``t`` once the log or rows grew past the automatic interval, or when
        it holds a hybrid index no checkpoint has saved yet (:meth:`DiskTable.index_unsaved`:
        afterwards a reopen only replays the log tail into the saved index)."""
        if isinstance(t, PackedTable):
            if t.namespace in self.tables.packed:
                self.tables.cache.put(t)          # its size counted as it is now
            if t.pack.table.checkpoint_due():
                self._checkpoint_pack()
            return
        if t.checkpoint_due() or t.index_unsaved():
            self.checkpoint(t)

    def save_index(self, t: DiskTable) -> None:
        """Checkpoint a hybrid index ``t`` has just built from its rows (a writer; a
        read-only store keeps it in RAM). Its tables' :attr:`DiskTable.saver`.

        A checkpoint that fails here (a damaged vector, a full disk) does not fail the search
        that built the index: it is logged, the namespace is reloaded from its files on the
        next call (:meth:`heal`) and the next write's checkpoint raises the error."""
        if self.read_only or not t.index_unsaved():
            return
        try:
            self.checkpoint(t)
        except (StoreCorruptedError, OSError) as err:
            logger.warning("the hybrid index of namespace %r was built but not saved (%s)",
                           t.namespace, err)

    def _served(self, t: DiskTable | LogTable) -> DiskTable | LogTable:
        """``t``, its hybrid index builds saved by :meth:`save_index`."""
        if isinstance(t, DiskTable):
            t.saver = self.save_index
        return t

    def flush(self, each: Callable[[Table], None]) -> None:
        """Checkpoint every namespace (a damaged one stops no other; the first error is
        raised at the end), calling ``each(table)`` after each; nothing when read-only."""
        if self.read_only:
            return
        errors = []
        for t in self.tables.open_tables():        # an evicted one was checkpointed
            try:
                self.checkpoint(t)
            except StoreCorruptedError as err:
                errors.append(err)
            each(t)
        if self.pack is not None:
            try:
                self._checkpoint_pack()
            except StoreCorruptedError as err:
                errors.append(err)
        if errors:
            raise errors[0]

    def discard(self, t: DiskTable | PackedTable) -> None:
        """Remove a cleared namespace's directory as a step (a packed one: DEL records of
        its keys in the pack, one batch)."""
        if isinstance(t, PackedTable):
            with self.step(t.namespace):
                t.pack.remove(t.keys_composite())
            t.pack.live.pop(t.nsid, None)
            if self.catalog is not None:
                self.catalog.drop_packed(t.nsid)
            return
        with self.step(t.namespace):
            storage.drop_namespace(t.files, t.columns)
        if self.catalog is not None:
            self.catalog.drop(os.path.basename(t.files.directory))

    def ann_file(self, t: Table) -> str:
        """Where the approximate index of ``t``'s generation is saved (None: a packed
        namespace keeps none)."""
        if isinstance(t, PackedTable):
            return None
        return storage.ann_path(t.files.directory, t.files.generation)

    # ------------------------------------------------------------------ maintenance
    def _reindexed(self, t: DiskTable, structures: list) -> DiskTable:
        """``t`` with the hybrid indexes of ``structures`` built and checkpointed (a new
        generation's row ids differ: its indexes are built once here, not on a search)."""
        for structure in structures:
            t.recall_index(HybridWeights.for_structure(structure), self.dim, self.preparer)
        if structures:
            self.checkpoint(t)
        return t

    def compact(self, t: DiskTable) -> None:
        """Rewrite ``t``'s live rows as its next generation (every live vector checked
        against its record first; the records copied), then serve that one. A packed
        namespace's copy is gathered again (:meth:`compact_pack` compacts the pack)."""
        ns = t.namespace
        if isinstance(t, PackedTable):
            self.tables.cache.pop(ns)
            return
        rows = list(t.keys.values())
        vecs = np.ascontiguousarray(t.columns.vectors[rows])
        log = t.files.verified_log(vecs, rows, t.record_offsets(rows), t.columns,
                                   "compact() wrote nothing")
        with self.step(ns):
            directory = write_live(t, vecs, self.root.epoch_dir, t.files.generation + 1,
                                   self.durability, log)
            structures = _index_structures(t)
            storage.retire_generation(t.files, t.columns)
            del self.tables[ns]
            self.tables[ns] = self.reopen(directory)
        self.tables[ns] = self._reindexed(self.tables[ns], structures)

    def reindex(self, plan: Sequence[DiskTable], vectors: Sequence[np.ndarray],
                embedder: Any) -> None:
        """Write the namespaces of ``plan`` with their new ``vectors`` as a new epoch, commit
        it with the new embedder in the store header, then serve it (see
        :meth:`LongTermMemory.reindex`)."""
        name, dim = str(embedder.name), int(embedder.dim)
        epoch = self.root.begin_epoch()
        dirs = []
        self.stale_all = embedder      # until the switch is done: see heal
        try:
            for t, vecs in zip(plan, vectors):
                dirs.append(write_live(t, vecs, epoch, 0, self.durability))
            self.root.commit_epoch(name, dim)
        except BaseException:
            if not self.root.next_committed():   # else the new epoch is the store
                self.root.abort_epoch()
                self.stale_all = None
            raise
        structures = {t.namespace: _index_structures(t) for t in plan}
        for t in self.tables.open_tables():
            t.close()
        self._close_pack()
        self.tables.reset()
        self.dim = dim
        self.root.finish_epoch()
        self._load_catalog(dirs)
        self.stale_all = None
        for ns, built in sorted(structures.items()):
            if built:
                self.tables[ns] = self._reindexed(self.tables[ns], built)

    def repair(self, embed: Callable | None) -> list[dict]:
        """Checkpoint what can be, then rewrite every damaged namespace (isolated at open, or
        failing :func:`memcore.storage.namespace_intact`) from its intact records."""
        report = []
        for t in self.tables.open_tables():
            try:
                self.checkpoint(t)
            except StoreCorruptedError:
                pass        # its header keeps the last good checkpoint: re-verified below
        self.probe()
        report.extend(self._repair_damaged(embed))
        if self.pack is not None:
            directory = self.pack.table.files.directory
            if not storage.namespace_intact(directory, self.dim, self.durability):
                with self.step(PACK_NAMESPACE):
                    report.extend(self._repair_pack(embed))
        for ns in list(self.tables.dirs):
            t = self.tables[ns]
            directory = t.files.directory
            if storage.namespace_intact(directory, self.dim, self.durability):
                continue
            with self.step(ns):
                t.close()
                del self.tables[ns]
                report.append(storage.repair_namespace(directory, self.dim, embed))
                self.tables[ns] = self.reopen(directory)
        return report

    def _repair_pack(self, embed: Callable | None) -> list[dict]:
        """Rewrite the pack from its intact records (:func:`memcore.storage.repair_namespace`)
        and serve it again; the report is split by namespace: one entry per namespace that
        lost or set aside a key (its keys as the user wrote them), else one for the pack."""
        directory = os.path.join(self.root.epoch_dir, PACK_DIR)
        self._close_pack()
        rep = storage.repair_namespace(directory, self.dim, embed)
        self._open_pack()
        return _split_pack_report(rep, self.pack)

    def _repair_damaged(self, embed: Callable | None) -> list[dict]:
        """Rewrite every namespace directory isolated as damaged (the pack included) from
        its intact records, and serve it again."""
        report = []
        for dname in sorted(self.tables.damaged):
            directory = os.path.join(self.root.epoch_dir, dname)
            if dname == PACK_DIR:
                del self.tables.damaged[dname]
                report.extend(self._repair_pack(embed))
                continue
            report.append(storage.repair_namespace(directory, self.dim, embed))
            del self.tables.damaged[dname]
            t = self.reopen(directory)
            self.tables[t.namespace] = t
        return report

    def verify(self) -> dict:
        """:meth:`DiskTable.verify` of every format-2 namespace, and the damaged ones'
        errors (keyed by directory name); an intact pack reports each of its namespaces
        (``rows`` = ``live``: its live rows), a damaged one its own report (keyed by
        :data:`~memcore.storage.layout.PACK_NAMESPACE`)."""
        out: dict = {}
        for ns in list(self.tables.dirs):
            try:
                t = self.tables.get(ns)
            except StoreCorruptedError:
                continue
            if isinstance(t, DiskTable):
                out[ns] = t.verify()
        if self.pack is not None:
            r = self.pack.table.verify()
            if r["errors"] or r["bad_rows"]:
                r["namespaces"] = self._pack_namespaces(r)
                out[PACK_NAMESPACE] = r
            else:                  # intact: each of its namespaces, as a directory's
                for ns, h in sorted(self.tables.packed.items()):
                    live = self.pack.live.get(h, 0)
                    out[ns] = {"rows": live, "live": live, "bad_rows": [], "errors": []}
        for name, msg in sorted(self.tables.damaged.items()):
            out[name] = {"rows": 0, "live": 0, "bad_rows": [], "errors": [msg]}
            if name == PACK_DIR:
                out[name]["namespaces"] = sorted(self.tables.pack_lost)
        return out

    def _pack_namespaces(self, report: dict) -> list:
        """The namespaces a damaged pack's verify ``report`` concerns: those of its bad rows
        when only vectors failed, else every namespace of the pack (its log and columns are
        shared)."""
        by_id = {h: ns for ns, h in self.tables.packed.items()}
        vectors_only = len(report["errors"]) == 1 and report["bad_rows"]
        rows = np.asarray(report["bad_rows"], np.int64)
        nsid = self.pack.nsid
        if not vectors_only or nsid is None or int(rows.max()) >= nsid.shape[0]:
            return sorted(by_id.values())
        ids = nsid[rows].tolist()
        return sorted({by_id[h] for h in ids if h in by_id})
