"""The pack of small namespaces (format 3, :mod:`memcore.storage`).

A store with many small namespaces (one per user, as agent frameworks keep them) holds their
rows in ONE format-2 namespace directory, the *pack* (reserved namespace
:data:`~memcore.storage.layout.PACK_NAMESPACE`): its log, columns, checkpoints, key index,
verify/repair and compaction are the format-2 machinery unchanged. A row's key there is
composite -- the namespace as compact JSON, a NUL, the key (:func:`pack_key`) -- and the
pack's side column ``nsid`` (int64, written before the commit like the TTL column) holds
each row's namespace id (:func:`namespace_id`, a 64-bit hash of that JSON), so that open
knows the rows of every namespace without reading a record: :class:`Pack` keeps ``id ->
rows`` (the live rows sorted by id at open, plus the rows appended since) and each
namespace's live count.

A namespace in the pack is served by a :class:`PackedTable`: an in-RAM
:class:`~memcore.core.table.Table` of its rows gathered from the pack (records decoded, CRC
and namespace checked, vectors checked against their records' CRCs) on first use, kept in a
bounded LRU; its writes commit to the pack first (one log append per ``put_many``), then to
the copy; access statistics and TTL refreshes are written through to the pack's columns.
Ranking, filters, TTL and hybrid recall are those of an in-memory table, on O(rows of the
namespace), never O(pack rows).

Once a namespace passes :data:`PACK_MAX` live rows it is *promoted*: a format-2 namespace
directory is created (atomically, empty), its rows committed there as one batch, then their
pack rows are tombstoned (one DEL batch). A crash in between leaves both: at open a
directory that holds rows wins (the pack rows are dropped), an empty one loses (removed).
"""

from __future__ import annotations

import collections
import logging
import mmap
import os
from typing import Any, Sequence

import numpy as np

from memcore import storage
from memcore.core.rows import Rows
from memcore.core.table import RamColumns, Table
from memcore.errors import StoreCorruptedError
from memcore.storage.columns import grow_expiry, open_expiry
from memcore.storage.layout import PACK_NAMESPACE, namespace_id, ns_prefix, pack_key, split_key
from memcore.storage.records import first_bad_row, record_vector_crcs, verify_vectors
from memcore.types import Namespace

__all__ = ["PACK_CACHE_ROWS", "PACK_MAX", "Pack", "PackedTable", "enabled", "namespace_id",
           "pack_key", "split_key"]

logger = logging.getLogger("memcore")

#: Live rows above which a namespace of the pack moves to its own format-2 directory.
PACK_MAX = 256

#: Rows of packed namespaces kept gathered in RAM (least recently used dropped first).
PACK_CACHE_ROWS = 1 << 14

#: Whether a disk store puts new namespaces into the pack (format 3): on by default; the
#: environment variable ``MEMCORE_PACK=0`` turns it off (new namespaces get directories of
#: their own, format 2); a store that already holds a pack always serves its packed
#: namespaces.
ENABLED = os.environ.get("MEMCORE_PACK", "1") != "0"


def enabled() -> bool:
    """Whether new namespaces of a disk store go to the pack (:data:`ENABLED`)."""
    return bool(ENABLED)


class Pack:
    """The pack: its :class:`~memcore.stores.long_disk.DiskTable` (``table``), its
    ``nsid`` side column and the namespace index built from it.

    Parameters
    ----------
    table : DiskTable
        The pack directory's table (reserved namespace).
    read_only : bool

    Attributes
    ----------
    live : dict of int -> int
        Live rows of each namespace id.
    expiring : set of int
        Namespace ids with a row that has a time to live.
    """

    def __init__(self, table: Any, read_only: bool):
        self.table, self.read_only = table, read_only
        f = table.files
        self.nsid = open_expiry(f.directory, f.generation, read_only, "nsid")
        self._vfd: tuple | None = None          # (path, fd) of the vectors file read
        self._open_fd()
        self.index()

    # ------------------------------------------------------------------ index
    def index(self, suspect: np.ndarray | None = None) -> None:
        """(Re)build ``id -> rows`` and the live counts from the ``nsid`` column and the
        live flags (rows whose id is missing, or among the pack rows ``suspect``, are given
        it from their record's key)."""
        t = self.table
        rows = t.live_rows()
        have = 0 if self.nsid is None else self.nsid.shape[0]
        ids = np.zeros(rows.shape[0], np.int64)
        inside = rows < have
        if have:
            ids[inside] = self.nsid[rows[inside]]
        if suspect is not None:
            ids[np.isin(rows, suspect)] = 0
        unset = np.flatnonzero(ids == 0)
        if unset.shape[0]:                   # a repaired generation, a lost side file
            keys = t.decode(rows[unset], texts=False, metadata=False)["keys"]
            ids[unset] = [namespace_id(split_key(k)[0]) for k in keys]
            if not self.read_only:
                self.nsid = grow_expiry(self.nsid, t.files.directory, t.files.generation,
                                        t.rows, "nsid")
                self.nsid[rows[unset]] = ids[unset]
                self.nsid.flush()
        order = np.argsort(ids, kind="stable")
        self.ids, self.rows = ids[order], rows[order]
        self.extra: dict[int, list] = {}
        uniq, counts = np.unique(self.ids, return_counts=True)
        self.live = dict(zip(uniq.tolist(), counts.tolist()))
        self.expiring: set[int] = set()
        e = t.expiry
        if e is not None:
            ok = rows < e.shape[0]
            hot = np.zeros(rows.shape[0], np.bool_)
            hot[ok] = e[rows[ok], 1] > 0
            self.expiring = set(np.unique(ids[hot]).tolist())

    def check_ids(self, named: Any) -> None:
        """Check each namespace id that ``named`` (the catalog's ids) lacks against the key
        of one of its rows: an id its key does not imply is a damaged ``nsid`` value (a
        damaged value is a group of its own), so those rows get the ids their keys imply
        (on disk too, for a writer) and the index is rebuilt. O(one record per unnamed id)."""
        suspect = []
        for h in [h for h in self.live if h not in named]:
            rows = self.rows_of(h)
            try:
                key = self.table.decode(rows[:1], texts=False, metadata=False)["keys"][0]
                ns = split_key(key)[0]
            except StoreCorruptedError:
                continue                      # named (or not) by the caller, which warns
            if namespace_id(ns) != h:
                suspect.append(rows)
        if suspect:
            rows = np.concatenate(suspect)
            logger.warning("%s: the namespace ids of %d pack rows were damaged; taken from "
                           "their records", self.table.files.directory, rows.shape[0])
            self.index(rows)

    def rows_of(self, nsid: int) -> np.ndarray:
        """ndarray (k,), int64: the live pack rows of namespace id ``nsid``, ascending
        (O(log N + k))."""
        lo = int(np.searchsorted(self.ids, nsid, "left"))
        hi = int(np.searchsorted(self.ids, nsid, "right"))
        rows = self.rows[lo:hi]
        extra = self.extra.get(nsid)
        if extra:
            rows = np.concatenate([rows, np.asarray(extra, np.int64)])
        rows = rows[self.table.columns.alive[rows]]
        rows.sort()
        return rows

    def name(self, nsid: int) -> tuple:
        """The namespace of id ``nsid``, from the key of one of its rows."""
        rows = self.rows_of(nsid)
        key = self.table.decode(rows[:1], texts=False, metadata=False)["keys"][0]
        return split_key(key)[0]

    def names(self) -> str:
        """Up to 5 namespaces of the pack, for messages."""
        return ", ".join(repr(self.name(h)) for h in list(self.live)[:5])

    # ------------------------------------------------------------------ writes
    def append(self, nsid: int, batch: Rows) -> np.ndarray:
        """Commit ``batch`` (composite keys, lifecycle set) to the pack: the ``nsid`` of its
        new rows first (like the columns), then the table's commit. Returns its rows."""
        t = self.table
        n0, m = t.rows, len(batch)
        f = t.files
        self.nsid = grow_expiry(self.nsid, f.directory, f.generation, n0 + m, "nsid")
        self.nsid[n0:n0 + m] = nsid
        if f.durability == "fsync":
            self.nsid.flush()
        t.append(batch)
        self.extra.setdefault(nsid, []).extend(range(n0, n0 + m))
        if batch.expiry() is not None:
            self.expiring.add(nsid)
        return np.arange(n0, n0 + m, dtype=np.int64)

    def remove(self, keys: Sequence[str]) -> None:
        """Commit DEL records of live composite ``keys`` (one batch)."""
        if keys:
            self.table.remove(list(keys))

    def flush_nsid(self) -> None:
        """fsync the ``nsid`` column (a checkpoint)."""
        if self.nsid is not None and not self.read_only:
            self.nsid.flush()

    def read_vectors(self, rows: np.ndarray) -> np.ndarray:
        """ndarray (len(rows), dim), float32: the vectors of ``rows`` (ascending), read with
        one ``pread`` per run of consecutive rows -- not through the memory map, where a
        fault maps a whole page-cache folio (up to 2 MB) into this process for a few rows.

        Raises
        ------
        StoreCorruptedError
            If the vectors file is shorter than the rows.
        """
        cols = self.table.columns
        if not self._open_fd():          # replaced by a writer since this reader mapped it
            return np.ascontiguousarray(cols.vectors[rows])
        fd, dim, path = self._vfd[1], cols.dim, self._vfd[0]
        out = np.empty((rows.shape[0], dim), np.float32)
        if not rows.shape[0] or not dim:
            return out
        cuts = np.flatnonzero(np.diff(rows) != 1) + 1
        for s, e in zip([0, *cuts.tolist()], [*cuts.tolist(), rows.shape[0]]):
            want = (e - s) * dim * 4
            got = os.preadv(fd, [memoryview(out[s:e]).cast("B")], int(rows[s]) * dim * 4)
            if got != want:
                raise StoreCorruptedError(f"{path} ends inside row {int(rows[s])} (it holds "
                                          f"fewer rows than the pack's columns)")
        return out

    def _open_fd(self) -> bool:
        """Open the vectors file of the current generation for :meth:`read_vectors`
        (a reader at open: its snapshot); False when it is gone."""
        path = self.table.columns.path("vectors")
        if self._vfd is None or self._vfd[0] != path:
            self._close_fd()
            try:
                self._vfd = (path, os.open(path, os.O_RDONLY))
            except FileNotFoundError:
                return False
        return True

    def _close_fd(self) -> None:
        if self._vfd is not None:
            os.close(self._vfd[1])
            self._vfd = None

    def release_pages(self) -> None:
        """Drop the writer's mapped pages of the pack's files from this process's resident
        set (after a checkpoint: they are in the file and the page cache), so that a long
        ingest's RSS stays bounded by the checkpoint interval, not the pack's size."""
        if self.read_only:
            return
        maps = [getattr(self.table.columns, "_mm", {}).get(n) for n in self.table.columns.names]
        for arr in maps + [self.nsid, self.table.expiry]:
            mm = getattr(arr, "_mmap", None)
            if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                try:
                    mm.madvise(mmap.MADV_DONTNEED)
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        self.nsid = None
        self._close_fd()
        self.table.close()


class TightColumns(RamColumns):
    """:class:`~memcore.core.table.RamColumns` sized to the rows, grown by half (a packed
    namespace's copy: thousands of them may be in RAM, 64 rows each would dominate)."""

    def __init__(self, dim: int, capacity: int):
        self.dim = int(dim)
        self.capacity = 0
        self._grow(max(int(capacity), 1))

    def ensure(self, rows: int) -> None:
        if rows > self.capacity:
            self._grow(max(rows, self.capacity + self.capacity // 2))


class PackedTable(Table):
    """One namespace of the pack, gathered into RAM (see the module docstring).

    Parameters
    ----------
    namespace : tuple of str
    pack : Pack
    dim : int
    """

    __slots__ = ("pack", "nsid", "prefix", "prow", "bad")

    packed = True

    def __init__(self, namespace: Namespace, pack: Pack, dim: int, capacity: int = 1):
        super().__init__(namespace, TightColumns(dim, capacity))
        self.pack, self.nsid, self.prefix = pack, namespace_id(namespace), ns_prefix(namespace)
        self.prow = np.zeros(0, np.int64)           # local row -> pack row
        #: pack rows left out of the copy because their record or vector is damaged ->
        #: the error (:class:`_PackKeys` raises it for their keys)
        self.bad: dict[int, Exception] = {}

    @classmethod
    def load(cls, namespace: Namespace, pack: Pack, dim: int) -> "PackedTable":
        """Gather namespace's live rows from the pack: records decoded (CRC checked), each
        key's namespace checked, each vector checked against its record's CRC.

        Raises
        ------
        StoreCorruptedError
            Naming the pack's log or vectors file.
        """
        rows = pack.rows_of(namespace_id(namespace))
        t = cls(namespace, pack, dim, rows.shape[0])
        pt = pack.table
        if not rows.shape[0]:
            return t
        offsets = pt.record_offsets(rows)
        log = pt.files.log_array()
        try:
            d = storage.checkpoint.decode_puts(log, offsets, pt.files.log_path)
        except StoreCorruptedError:          # damaged records: every other row serves
            d, rows, offsets = t._intact(log, rows, offsets)
        keep = [i for i, k in enumerate(d["keys"]) if k.startswith(t.prefix)]
        if len(keep) < rows.shape[0]:                # another namespace's id (a collision)
            rows, offsets = rows[keep], offsets[keep]
        c = pt.columns
        vecs = pack.read_vectors(rows)
        crcs = record_vector_crcs(log, offsets)
        if first_bad_row(vecs, crcs) is not None:    # damaged vectors: never served
            ok = []
            for i, (r, o) in enumerate(zip(rows.tolist(), offsets.tolist())):
                try:
                    verify_vectors(vecs[i:i + 1], crcs[i:i + 1], [r], c.path("vectors"), [o],
                                   "it was not served")
                    ok.append(i)
                except StoreCorruptedError as err:
                    t.bad[r] = err
            keep = [keep[i] for i in ok]
            rows, offsets, vecs = rows[ok], offsets[ok], vecs[ok]
        n = len(t.prefix)
        batch = Rows(namespace, [d["keys"][i][n:] for i in keep],
                     [d["texts"][i] for i in keep], d["importance"][keep].tolist(),
                     [d["metadata"][i] for i in keep], vecs,
                     *(np.ascontiguousarray(getattr(c, name)[rows]) for name in
                       ("created_at", "updated_at", "last_accessed_at", "access_count")))
        local = t.take(rows.shape[0])
        Table.write(t, local, batch)
        e = pt.expiry
        if e is not None:
            inside = rows < e.shape[0]
            ex = np.zeros((rows.shape[0], 2), np.float64)
            ex[inside] = e[rows[inside]]
            if ex.any():
                t.set_expiry(np.asarray(local, np.int64), ex[:, 0], ex[:, 1])
        t.prow = rows.astype(np.int64)
        if t.bad:
            t.keys = _PackKeys(t.keys, t)                    # type: ignore[assignment]
        if pack.read_only:           # a reader's copy: vectors read-only, as its maps are
            t.columns.vectors.flags.writeable = False
        return t

    def _intact(self, log: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> tuple:
        """Decode the records one by one; a damaged one's row goes to :attr:`bad` (a key
        lookup that reaches it raises its error, as a format-2 read does)."""
        path = self.pack.table.files.log_path
        parts, ok = [], []
        for i in range(offsets.shape[0]):
            try:
                parts.append(storage.checkpoint.decode_puts(log, offsets[i:i + 1], path))
                ok.append(i)
            except StoreCorruptedError as err:
                self.bad[int(rows[i])] = err
        d = {"keys": [p["keys"][0] for p in parts], "texts": [p["texts"][0] for p in parts],
             "metadata": [p["metadata"][0] for p in parts],
             "importance": np.asarray([p["importance"][0] for p in parts], np.float64)}
        return d, rows[ok], offsets[ok]

    # ------------------------------------------------------------------ writes
    def append(self, batch: Rows) -> None:
        """Commit ``batch`` (lifecycle set) to the pack, then store it in the copy."""
        cb = Rows(PACK_NAMESPACE, [self.prefix + k for k in batch.keys], batch.texts,
                  batch.importance, batch.metadata, batch.vectors, batch.created_at,
                  batch.updated_at, batch.last_accessed_at, batch.access_count, batch.ttl,
                  batch.expires_at)
        prow = self.pack.append(self.nsid, cb)
        Table.write(self, self.take(len(batch)), batch)
        self.prow = np.concatenate([self.prow, prow])
        self.pack.live[self.nsid] = self.live

    def remove(self, keys: Sequence[str]) -> list[int]:
        """Commit the DEL records of the live ``keys`` to the pack, then remove them."""
        found = [k for k in keys if k in self.keys]
        self.pack.remove([self.prefix + k for k in found])
        rows = Table.remove(self, found)
        self.pack.live[self.nsid] = self.live
        return rows

    def refresh(self, rows: Sequence[int], now: float) -> None:
        Table.refresh(self, rows, now)
        idx = np.asarray(rows, np.int64)
        if idx.shape[0]:
            self.pack.table.refresh(self.prow[idx], now)

    def refresh_expiry(self, rows: Sequence[int], now: float) -> None:
        Table.refresh_expiry(self, rows, now)
        if self.expiry is not None and self.pack.table.expiry is not None:
            self.pack.table.refresh_expiry(self.prow[np.asarray(rows, np.int64)].tolist(), now)

    def keys_composite(self) -> list[str]:
        """The composite pack keys of the live keys."""
        return [self.prefix + k for k in dict.keys(self.keys)]

    def close(self) -> None:
        """Nothing to release (the copy goes with the table)."""


class _PackKeys(dict):
    """The live keys of a :class:`PackedTable` with damaged rows: a key missing from the
    copy is looked up in the pack, and one whose row is damaged raises that row's error;
    listing them raises the first (a format-2 namespace raises so when it reads them)."""

    def __init__(self, keys: dict, table: PackedTable):
        super().__init__(keys)
        self.t = table

    def _missing(self, key: Any) -> None:
        t = self.t
        if isinstance(key, str):
            row = t.pack.table.lookup(t.prefix + key)   # a damaged record raises here
            if row is not None and row in t.bad:
                raise t.bad[row]

    def get(self, key: Any, default: Any = None) -> Any:
        row = dict.get(self, key)
        if row is None:
            self._missing(key)
            return default
        return row

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __iter__(self):
        raise next(iter(self.t.bad.values()))

    def items(self):                                 # type: ignore[override]
        raise next(iter(self.t.bad.values()))


class PackCache:
    """The :class:`PackedTable` copies in RAM, least recently used first, bounded by
    :data:`PACK_CACHE_ROWS` rows in all (each counted with its capacity when last put)."""

    def __init__(self):
        self.tables: collections.OrderedDict = collections.OrderedDict()
        self.total = 0

    def get(self, ns: Namespace) -> PackedTable | None:
        got = self.tables.get(ns)
        if got is None:
            return None
        self.tables.move_to_end(ns)
        return got[0]

    def put(self, t: PackedTable) -> None:
        self.pop(t.namespace)
        self.tables[t.namespace] = (t, t.columns.capacity)
        self.total += t.columns.capacity
        while self.total > PACK_CACHE_ROWS and len(self.tables) > 1:
            _, (_, rows) = self.tables.popitem(last=False)
            self.total -= rows

    def pop(self, ns: Namespace) -> None:
        got = self.tables.pop(ns, None)
        if got is not None:
            self.total -= got[1]

    def clear(self) -> None:
        self.tables.clear()
        self.total = 0
