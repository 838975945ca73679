"""LongTermMemory: the unbounded long-term tier, in memory or persisted on disk.

Each namespace is a :class:`~memcore.core.table.Table` in RAM (``path=None``), or on disk a
:class:`~memcore.core.table.DiskTable` whose columns, key index and hybrid index are
memory-mapped from the namespace's files and whose keys, texts and metadata stay in its log
(:mod:`memcore.storage`: format 2, commit protocol, checkpoints, recovery). Opening reads the
last checkpoint and replays only the log written after it; nothing proportional to the
number of memories is built in Python at open or at the first search. Rows are append-only: a
replaced or deleted key's row is marked dead and reclaimed by :meth:`LongTermMemory.compact`.
A store of the older format 1 opens read-only as it is; :meth:`LongTermMemory.migrate`
(``memcore migrate PATH``) converts it.

Search path (decided by measurement, bench/test_bench_long.py): the fused top-k kernel scans
every row of the namespace once (similarity + decay + importance + alive/filter mask),
straight from the memory maps; on 384-d unit vectors it ran at 0.9-1.0x the time of a
single-thread FAISS ``IndexFlatIP`` similarity-only search at 1e3-1e5 rows, so no FAISS index
is kept, and the vectors are stored once.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import math
import os
import time
from typing import Any, Sequence

import numpy as np

from memcore import _validate, storage
from memcore.query import now as _now
from memcore.core.rows import Rows, encoded
from memcore.core.store import MemoryStore, check_embedder
from memcore.core.table import DiskTable, Table
from memcore.errors import (
    EmbedderMismatchError,
    FormatVersionError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreCorruptedError,
)
from memcore.recall.approx import AnnIndex, ApproximateSearch, load_faiss
from memcore.recall.hybrid import HybridIndex, HybridWeights
from memcore.recall.prep import QueryPreparer
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
    system_clock,
)

__all__ = ["LongTermMemory"]

logger = logging.getLogger("memcore")

DEFAULT_DURABILITY = "flush"
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _meta_bytes(metadata: Sequence[Any]) -> list[bytes]:
    return [m if isinstance(m, bytes) else (_JSON.encode(m).encode("utf-8") if m else b"{}")
            for m in metadata]


def _store_path(path: Any) -> str:
    """An absolute store path from a str or os.PathLike.

    Raises
    ------
    InvalidArgumentTypeError
        If ``path`` is neither (e.g. an int: a file descriptor is no store).
    InvalidArgumentError
        If it is empty (never silently the current directory) or holds a NUL.
    """
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentTypeError(f"path must be a str or os.PathLike, got "
                                       f"{type(path).__name__}")
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise InvalidArgumentTypeError(f"path must name a str path, got {type(raw).__name__}")
    if not raw or "\x00" in raw:
        raise InvalidArgumentError(f"path must be a non-empty directory path without NUL, "
                                   f"got {raw!r}")
    return os.path.abspath(raw)


def _disk(method):
    """Run a method that touches the store's files with their OS errors raised as memcore
    errors (:class:`memcore.storage.os_errors`)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with storage.os_errors(self.path or "<in memory>"):
            return method(self, *args, **kwargs)
    return run


@contextlib.contextmanager
def _gc_paused(n: int):
    """Pause the cyclic garbage collector while a batch of ``n`` items builds its objects
    (measured at 1e5 items: 20-25k items/s with the collector, 50-65k without). Nothing
    cyclic is created; the collector is re-enabled on the way out, exceptions included."""
    if n < 4096 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _expiry_open(t: Table, read_only: bool) -> None:
    """Map the namespace's TTL column file (:func:`memcore.storage.expiry_path`:
    ``(capacity, 2)`` float64 ``[expires_at, ttl]``, 0: never) as ``t.expiry``, copy-on-write
    when ``read_only``. A store without TTL (or written by an older memcore) has no file:
    nothing expires."""
    path = storage.expiry_path(t.files.directory, t.files.generation)
    have = os.path.getsize(path) // 16 if os.path.exists(path) else 0
    if have:
        t.expiry = np.memmap(path, np.float64, mode="c" if read_only else "r+",
                             shape=(have, 2))


def _expiry_grow(t: Table, rows: int) -> None:
    """Make the TTL column file hold ``rows`` rows (created on the first expiring write,
    grown by doubling with zero rows: never expires) and map it as ``t.expiry``."""
    have = 0 if t.expiry is None else t.expiry.shape[0]
    if rows <= have:
        return
    cap = max(have, storage.INITIAL_CAPACITY)
    while cap < rows:
        cap *= 2
    if t.expiry is not None:
        t.expiry.flush()
    path = storage.expiry_path(t.files.directory, t.files.generation)
    with open(path, "ab") as f:      # real zero bytes: a full disk raises here, never SIGBUS
        f.truncate(16 * have)
        f.write(bytes(16 * (cap - have)))
    t.expiry = np.memmap(path, np.float64, mode="r+", shape=(cap, 2))


def _write_expiry(t: Table, directory: str, generation: int, rows: Sequence[int]) -> None:
    """Write the TTL column of ``t``'s ``rows`` as the file of a new generation (before its
    header names it: compaction and reindex keep every time to live)."""
    if t.expiry is None:
        return
    e = np.zeros((max(len(rows), 1), 2), np.float64)
    idx = np.asarray(rows, np.int64)
    inside = idx < t.expiry.shape[0]
    e[:len(rows)][inside] = t.expiry[idx[inside]]
    os.makedirs(directory, exist_ok=True)
    with open(storage.expiry_path(directory, generation), "wb") as f:
        f.write(e.tobytes())
        f.flush()
        os.fsync(f.fileno())


def _checkpoint(t: Table) -> None:
    """Checkpoint one namespace (see :meth:`LongTermMemory.flush`)."""
    if isinstance(t.expiry, np.memmap) and t.expiry.mode == "r+":
        t.expiry.flush()
    if isinstance(t, DiskTable):
        t.checkpoint()
    else:
        t.files.checkpoint(t.columns, t.rows, t.offsets)


def _live(t: Table, texts: bool = True) -> tuple:
    """``(rows, keys, texts, metadata, importance)`` of a table's live rows, in row order
    (a :class:`DiskTable` decodes them from its log; ``texts`` is None unless asked)."""
    if isinstance(t, DiskTable):
        rows = t.live_rows()
        d = t.decode(rows, texts=texts)
        return (rows.tolist(), d["keys"], d.get("texts"), d["metadata"],
                d["importance"].tolist())
    rows = list(t.keys.values())
    return (rows, [t.key_of[r] for r in rows], [t.texts[r] for r in rows] if texts else None,
            [t.metadata[r] for r in rows], [t.importance[r] for r in rows])


def _index_structures(t: Table) -> list:
    """The structures of the hybrid indexes ``t`` has built."""
    return [] if t.recall is None else list(t.recall.indexes)


def _record_offsets(t: Table, rows: Sequence[int]) -> np.ndarray:
    idx = np.asarray(rows, np.int64)
    if isinstance(t, DiskTable):
        return np.asarray(t.columns.record_offset[idx], np.int64)
    return np.asarray(t.offsets, np.int64)[idx]


def _write_live(t: Table, vecs: np.ndarray, parent: str, generation: int, durability: str,
                log: bytes | None = None) -> str:
    """Write the live rows of ``t`` (with ``vecs``) as a complete format-2 generation of its
    namespace in ``parent`` (:func:`memcore.storage.write_namespace`); returns the namespace
    directory. With ``log`` (vectors unchanged) the live records are copied, not re-encoded.
    """
    rows, keys, texts, metas, imps = _live(t, texts=log is None)
    idx = np.asarray(rows, np.int64)
    c = t.columns
    _write_expiry(t, os.path.join(parent, storage.namespace_dirname(t.namespace)), generation,
                  rows)
    files, cols, _ = storage.write_namespace(
        parent, t.namespace, durability, keys, texts, _meta_bytes(metas), imps,
        *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
          ("created_at", "updated_at", "last_accessed_at", "access_count")),
        vecs, generation, log=log, offsets=None if log is None else _record_offsets(t, rows))
    storage.close_namespace(files, cols)
    return files.directory


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


def _table(ns: Namespace, cols: Any, files: Any, rep: Any, read_only: bool) -> Table:
    """A namespace's table: format 2 (:class:`DiskTable` from the opened checkpoint and log
    tail) or format 1 read-only (in RAM, from the whole log's :class:`memcore.storage.Replay`)."""
    if isinstance(rep, storage.OpenState):
        return DiskTable(ns, cols, files, rep.keys, rep.rows)
    t = Table(ns, storage.adopt_replay(cols, rep, read_only))
    t.files, t.rows = files, rep.rows
    keys, vals = rep.keys, list(rep.keys.values())
    if any(a > b for a, b in zip(vals, vals[1:])):
        keys = dict(sorted(keys.items(), key=lambda kv: kv[1]))   # oldest write first
    t.keys, t.key_of, t.texts, t.metadata = keys, rep.key_of, rep.texts, rep.metadata
    t.importance = list(rep.importance)
    t.offsets = np.asarray(rep.record_offset, np.int64).tolist()
    for row in rep.dead:
        t.key_of[row] = t.texts[row] = t.metadata[row] = None
    return t


class _EpochReplaced(Exception):
    """A read-only open found the epoch it was reading replaced by a reindex."""


class _Tables(dict):
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


class LongTermMemory(MemoryStore):
    """Unbounded long-term memory: namespaced keys with exact fused semantic recall.

    With ``path=None`` the store lives in RAM; with a ``path`` it persists there (format,
    commit protocol and recovery: :mod:`memcore.storage`) and reopening restores every item,
    its vector bit for bit, metadata and lifecycle fields without re-embedding. The API and
    its semantics are :class:`~memcore.core.store.MemoryStore`'s.

    Durability (``path`` given): ``"flush"`` (default) -- an acknowledged write survives the
    process being killed, at about the cost of one ``write`` syscall; ``"fsync"`` -- it also
    survives power loss, at the cost of two ``fdatasync`` per call; ``"none"`` -- records are
    buffered in the process (1 MiB) until ``flush()``/``close()``: for tests and bulk loads.
    ``put_many``/``put_stored`` commit once per namespace. Access statistics refreshed by
    searches are written to the memory maps only: a power loss (not a killed process) may lose
    the last seconds of them.

    Locking: one writer per path, across processes and within one (``StoreLockedError``
    after ``lock_timeout`` seconds). ``read_only=True`` takes no lock and maps the files
    read-only; it sees the store as of opening and refreshes access statistics in RAM only.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Store directory (created when missing, unless ``read_only``). None keeps the store in
        RAM.
    embedder : Embedder, optional
        Encodes texts. Required to create a store. When None on an existing store, its
        embedder name and dim are taken from the header; then ``put`` needs ``vector=`` and
        ``search`` needs ``query_vector=`` (else :class:`EmbedderMismatchError`).
    weights : DecayWeights, default DecayWeights()
    clock : Clock, default system_clock
    durability : {"flush", "fsync", "none"}, default "flush"
    lock_timeout : float, default 1.0
        Seconds to wait for the writer lock; 0 tries once.
    read_only : bool, default False
    repair : bool, default False
        On opening, rewrite damaged namespaces keeping every intact record (see
        :meth:`repair`) instead of raising :class:`StoreCorruptedError`.
    hybrid : HybridWeights, optional
        Default recall of :meth:`search` (similarity preset when None). A namespace's hybrid
        index is built from the stored rows on its first hybrid search, kept current by every
        write and, on disk, saved at each checkpoint and restored when the store opens.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery`` for hybrid recall.
    threads : int, default 1
        CPU threads a search's scan may use (numba's, set only while the scan runs); >= 2
        runs the parallel kernel (robots have 4-12 cores).
    approximate : ApproximateSearch, optional
        Opt in to approximate similarity-preset search for namespaces of at least
        ``approximate.min_rows`` rows (:mod:`memcore.recall.approx`: FAISS candidates, exact
        re-rank, the bound reported in :meth:`approximate_stats`). Needs ``memcore[ann]``.
        The index is built on a namespace's first such search, extended by later ones and
        saved at ``flush``/``close``. None (default): every search is exact.
    ttl : float, optional
        Default time to live in seconds of a put without ``ttl=`` (None: never expires).
        Times to live persist with the store (a column file per namespace).
    refresh_ttl : bool, default False
        Whether ``get``/``search`` restart the time to live of what they return by default.

    Attributes
    ----------
    embedder_name : str
    dim : int
    path : str or None
        Absolute store directory.

    Raises
    ------
    InvalidArgumentError
        On an unknown durability, a negative or non-finite lock_timeout, ``threads`` not an
        int >= 1, ``read_only`` or
        ``repair`` without a path, or no embedder for a new store.
    FormatVersionError
        If the store is of an older on-disk format and ``read_only`` is False (the message
        names ``memcore migrate PATH``), or of a newer one.
    InvalidArgumentTypeError
        If weights, hybrid, clock, query_preparer or embedder have the wrong type.
    EmbedderMismatchError
        If the store was written with another embedder (name or dim); the message names both.
    StoreLockedError
        If another writer holds the store for longer than ``lock_timeout``.
    StoreCorruptedError
        If the files are damaged beyond a torn tail.
    StoreNotFoundError
        If ``read_only`` and there is no store at ``path``.
    StorePathError, StorePermissionError, StoreIOError
        If ``path`` is a file, may not be written, or another I/O error occurs.

    Examples
    --------
    >>> import tempfile; from memcore import HashingEmbedder
    >>> root = tempfile.mkdtemp() + "/mem"
    >>> with LongTermMemory(root, HashingEmbedder(dim=64)) as ltm:
    ...     _ = ltm.put("robot", "dock", "the charging dock is in the hallway")
    >>> LongTermMemory.open(root).count("robot")
    1
    """

    def __init__(self, path: str | os.PathLike | None = None, embedder: Any = None, *,
                 weights: DecayWeights = DecayWeights(), clock: Clock = system_clock,
                 durability: str = DEFAULT_DURABILITY, lock_timeout: float = 1.0,
                 read_only: bool = False, repair: bool = False,
                 hybrid: HybridWeights | None = None,
                 query_preparer: QueryPreparer | None = None, threads: int = 1,
                 approximate: ApproximateSearch | None = None,
                 ttl: float | None = None, refresh_ttl: bool = False):
        if not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        self._setup(dim=None, embedder=embedder, clock=clock, weights=weights, hybrid=hybrid,
                    query_preparer=query_preparer, default_weights=weights, threads=threads,
                    ttl=ttl, refresh_ttl=refresh_ttl)
        if durability not in storage.DURABILITY_MODES:
            raise InvalidArgumentError(f"durability must be one of {storage.DURABILITY_MODES}, "
                                       f"got {durability!r}")
        try:
            lock_timeout = float(lock_timeout)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(f"lock_timeout must be seconds >= 0, got {lock_timeout!r}") from err
        if not (math.isfinite(lock_timeout) and lock_timeout >= 0):
            raise InvalidArgumentError(f"lock_timeout must be finite seconds >= 0, got {lock_timeout!r}")
        if embedder is not None:
            check_embedder(embedder, named=True)
        if approximate is not None:
            if not isinstance(approximate, ApproximateSearch):
                raise InvalidArgumentTypeError(f"approximate must be an ApproximateSearch, got "
                                               f"{type(approximate).__name__}")
            load_faiss()
        self.approximate = approximate
        self._ann: dict[Namespace, tuple[AnnIndex, int]] = {}    # index, rows saved
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.read_only = bool(read_only)
        self.format_version = storage.FORMAT_VERSION
        self._root: storage.StoreRoot | None = None
        self._closed = False
        self._tables = _Tables()
        self._stale_all: Any = None  # a reindex's embedder while it switches epochs
        self._stale: set = set()     # namespaces a write, checkpoint or compaction left
        self._healing = False        # half done (an exception mid-step): reloaded from disk
        self.repair_report: list[dict] = []
        if path is None:
            if read_only or repair:
                raise InvalidArgumentError("read_only and repair need a path; an in-memory store "
                                           "(path=None) has nothing to open or repair")
            if embedder is None:
                raise InvalidArgumentError("an in-memory LongTermMemory needs an embedder "
                                           "(it fixes the name and dim of its vectors)")
            self.path = None
            self.embedder_name, self.dim = str(embedder.name), int(embedder.dim)
            return
        self.path = _store_path(path)
        try:
            self._open_disk(bool(repair))
        except BaseException:
            self._release()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, embedder: Any = None, *, read_only: bool = True,
             **kwargs: Any) -> "LongTermMemory":
        """Open an existing store, read-only by default.

        Parameters
        ----------
        path : str or os.PathLike
        embedder : Embedder, optional
            Needed only to encode texts; checked against the store's header.
        read_only : bool, default True
        **kwargs
            Any other :class:`LongTermMemory` keyword (weights, clock, durability, ...).

        Raises
        ------
        StoreNotFoundError
            If there is no store at ``path`` (a FileNotFoundError).
        EmbedderMismatchError, StoreLockedError, StoreCorruptedError, FormatVersionError
            As for the constructor.
        """
        root = _store_path(path)
        storage.StoreRoot.require(root)
        return cls(root, embedder, read_only=read_only, **kwargs)

    @classmethod
    def migrate(cls, path: str | os.PathLike, *, progress: bool = True,
                lock_timeout: float = 1.0) -> int:
        """Convert a store written by an older on-disk format to the current one, in place.

        Every namespace is read as the old format reads it (its whole log replayed, every
        live vector checked against its record's CRC), and its live rows are written as a
        namespace of the current format in a new epoch directory; the store header naming
        that epoch and the new version then replaces the old one atomically (the commit
        point). Until then the old store is untouched and stays the store: a crash leaves it
        as it was, and running ``migrate`` again starts over. The records are copied byte for
        byte (rows renumbered); dead rows are dropped.

        Parameters
        ----------
        path : str or os.PathLike
        progress : bool, default True
            Show a tqdm progress bar (on stderr), one step per namespace row.
        lock_timeout : float, default 1.0
            Seconds to wait for the writer lock.

        Returns
        -------
        int
            Memories migrated; 0 when the store already is of the current format.

        Raises
        ------
        StoreNotFoundError
            If there is no store at ``path``.
        StoreLockedError
            If another writer holds the store.
        StoreCorruptedError
            If a namespace is damaged (naming the file and offset; nothing is changed).

        Examples
        --------
        >>> import tempfile; from memcore import HashingEmbedder
        >>> root = tempfile.mkdtemp() + "/mem"
        >>> with LongTermMemory(root, HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("robot", "dock", "the dock is in the hallway")
        >>> LongTermMemory.migrate(root, progress=False)     # already the current format
        0
        """
        root_path = os.path.abspath(os.fspath(path))
        with storage.os_errors(root_path):
            return cls._migrate(root_path, progress, lock_timeout)

    @classmethod
    def _migrate(cls, root_path: str, progress: bool, lock_timeout: float) -> int:
        from tqdm.auto import tqdm

        storage.StoreRoot.require(root_path)
        root = storage.StoreRoot.open(root_path, read_only=False, lock_timeout=lock_timeout)
        try:
            head = root.header
            if head["version"] >= storage.FORMAT_VERSION:
                return 0
            dim, total = head["dim"], 0
            dirs = root.namespace_dirs()          # (removes a half-written earlier attempt)
            epoch = root.begin_epoch()
            try:
                with tqdm(desc="migrate", unit="row", disable=not progress) as bar:
                    for directory in dirs:
                        files, cols, rep = storage.open_namespace(directory, dim, "flush",
                                                                       True, full=True)
                        try:
                            t = _table(files.ns, cols, files, rep, True)
                            bar.total = (bar.total or 0) + t.rows
                            if t.keys:
                                rows = list(t.keys.values())
                                vecs = np.ascontiguousarray(cols.vectors[rows])
                                log = files.verified_log(vecs, rows, _record_offsets(t, rows),
                                                         cols, "migrate() wrote nothing")
                                _write_live(t, vecs, epoch, 0, "flush", log)
                                total += len(rows)
                            bar.update(t.rows)
                        finally:
                            storage.close_namespace(files, cols)
                root.commit_epoch(head["embedder"], dim)
            except BaseException:
                root.abort_epoch()
                raise
            root.finish_epoch()
            return total
        finally:
            root.release()

    # ------------------------------------------------------------------ opening / closing
    @_disk
    def _open_disk(self, repair: bool) -> None:
        """Open the store; a read-only open that raced the writer's ``reindex`` (the epoch it
        started reading was replaced) starts over (bounded)."""
        for attempt in range(8):
            try:
                return self._open_disk_once(repair)
            except _EpochReplaced:
                self._release()
                self._tables = _Tables()
                time.sleep(0.002 * 2 ** attempt)
        self._open_disk_once(repair, last=True)

    def _raced(self, last: bool) -> bool:
        """Whether a read-only open should start over: the store header now names another
        epoch than the one being read."""
        if not self.read_only or last:
            return False
        try:
            head = storage.read_store_header(self.path)
        except (OSError, StoreCorruptedError):
            return True
        return head is None or head["epoch"] != self._root.epoch

    def _open_disk_once(self, repair: bool, last: bool = False) -> None:
        emb = self.embedder
        self._root = root = storage.StoreRoot.open(self.path, read_only=self.read_only,
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
            self.embedder_name, self.dim = str(emb.name), int(emb.dim)
            root.create(self.embedder_name, self.dim, durable=self.durability != "none")
            return
        self.embedder_name, self.dim = root.header["embedder"], root.header["dim"]
        self.format_version = root.header["version"]
        if self.format_version < storage.FORMAT_VERSION:
            hint = (f"{self.path} is in on-disk format version {self.format_version}; this "
                    f"memcore writes version {storage.FORMAT_VERSION}. Run `memcore migrate "
                    f"{self.path}` (or LongTermMemory.migrate(path)) to convert it")
            if not self.read_only:
                raise FormatVersionError(hint + "; until then it opens only with "
                                         "read_only=True (served as it is)")
            logger.warning("%s; it is served read-only as it is, every namespace read into "
                           "RAM", hint)
        if emb is not None and (str(emb.name) != self.embedder_name or int(emb.dim) != self.dim):
            raise EmbedderMismatchError(
                f"{self.path} was written with embedder {self.embedder_name!r} (dim {self.dim}), "
                f"but embedder {emb.name!r} (dim {emb.dim}) was given; pass the same embedder, "
                "or open it with that one and call reindex(new_embedder)")
        try:
            dirs = root.namespace_dirs()
        except StoreCorruptedError:
            if self._raced(last):
                raise _EpochReplaced() from None
            raise
        for directory in dirs:
            try:
                files, cols, rep = storage.open_namespace(
                    directory, self.dim, self.durability, self.read_only)
            except (StoreCorruptedError, FileNotFoundError) as err:
                if self._raced(last):
                    raise _EpochReplaced() from None
                if isinstance(err, FileNotFoundError):
                    if self.read_only and not os.path.isdir(directory):
                        continue                # cleared by the writer while we opened
                    raise
                if not repair or self.read_only:
                    self._isolate(directory, err)
                    continue
                self.repair_report.append(storage.repair_namespace(directory, self.dim,
                                                                   self._repair_embed()))
                files, cols, rep = storage.open_namespace(
                    directory, self.dim, self.durability, self.read_only)
            if not self.read_only and not isinstance(rep, storage.OpenState):
                storage.close_namespace(files, cols)
                raise FormatVersionError(
                    f"{directory} is a format-1 namespace in a format-2 store; run `memcore "
                    f"migrate {self.path}` or open the store with read_only=True")
            t = self._tables[files.ns] = _table(files.ns, cols, files, rep, self.read_only)
            _expiry_open(t, self.read_only)
            self._restore_recall(t, rep)

    def _isolate(self, directory: str, err: StoreCorruptedError) -> None:
        """Keep a namespace that failed to open out of the store: the others open and
        serve, a call on it raises ``err``'s message (:attr:`damaged`)."""
        msg = (f"{err} [namespace directory {os.path.basename(directory)} is isolated: the "
               "store's other namespaces serve; repair() or `memcore repair PATH` rewrites it]")
        self._tables.damaged[os.path.basename(directory)] = msg
        logger.warning("%s", msg)

    @property
    def damaged(self) -> dict[str, str]:
        """Namespaces that failed to open: directory name -> the error (each raises it when
        used; :meth:`repair` rewrites them). Empty for a healthy store."""
        return dict(self._tables.damaged)

    def _repair_embed(self):
        """What repair re-embeds a damaged vector's text with (None without an embedder)."""
        return None if self.embedder is None else self.embed

    def _restore_recall(self, t: Table, st: Any) -> None:
        """Restore a format-2 namespace's persisted hybrid indexes (its header's index
        entry) and replay the log tail into them."""
        entry = getattr(t.files, "index_entry", None)
        if not isinstance(t, DiskTable) or not entry:
            return
        indexes = {}
        for structure, manifest in storage.index_structures(entry):
            try:
                arrays, state = storage.read_index(t.files.directory, t.files.generation,
                                                   entry["checkpoint"], structure, manifest,
                                                   entry.get("crc"))
                indexes[structure] = HybridIndex.restore(
                    self.dim, arrays, state,
                    HybridWeights.for_structure(structure),
                    self.query_preparer, vectors=lambda t=t: t.columns.vectors,
                    created_at=lambda t=t: t.columns.created_at)
            except Exception as err:   # derived state: any damage -> rebuilt from the log
                log = logger.info if self.read_only and _replaced(t.files) else logger.warning
                log("the hybrid index of namespace %r could not be restored (%s); "
                               "it is rebuilt from the log on its first hybrid search",
                               t.files.ns, err)
        t.restore_recall(indexes, self.dim, self.query_preparer, st.events,
                         st.tail.put_offsets)

    def _release(self) -> None:
        for t in self._tables.values():
            t.expiry = None
            storage.close_namespace(t.files, t.columns)
        self._tables.clear()
        if self._root is not None:
            self._root.release()

    @_disk
    def flush(self) -> None:
        """Checkpoint: write buffered records, verify the vectors written since the last
        checkpoint against their records' CRCs, fsync every file, update the headers.

        Raises
        ------
        StoreClosedError
        StoreCorruptedError
            If such a vector no longer matches its record (the message names the vectors file,
            offset and row); that namespace's header keeps its previous checkpoint, and
            :meth:`repair` drops the key.
        """
        with self._lock:
            self._check_read()
            if self.path is None or self.read_only:
                return
            errors = []
            for t in list(self._tables.values()):   # a damaged namespace stops no other
                try:
                    self._checkpoint_step(t)
                except StoreCorruptedError as err:
                    errors.append(err)
                self._save_ann(t)
            if errors:
                raise errors[0]

    def close(self) -> None:
        """Checkpoint (see :meth:`flush`), unmap the files and release the writer lock.
        Idempotent; the store cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.path is not None and not self.read_only:
                    self.flush()
            finally:
                self._closed = True
                self._release()

    # ------------------------------------------------------------------ approximate path
    def _ann_file(self, t: Table) -> str | None:
        f = t.files
        if self.path is None or f is None or getattr(f, "directory", None) is None:
            return None
        return storage.ann_path(f.directory, f.generation)

    def _approximate(self, t: Table) -> tuple[AnnIndex, ApproximateSearch] | None:
        cfg = self.approximate
        if cfg is None or t.rows < cfg.min_rows:
            return None
        vectors = t.columns.vectors
        ann, saved = self._ann.get(t.namespace, (None, -1))
        if ann is None or not ann.covers(vectors, t.rows):
            path = self._ann_file(t)
            ann = AnnIndex.load(path) if path is not None else None
            saved = ann.rows if ann is not None else -1
            stale = ann is None or not ann.covers(vectors, t.rows) or (
                cfg.factory != "auto" and ann.factory != cfg.factory)
            if stale:
                ann, saved = AnnIndex.build(vectors, t.rows, cfg), -1
        ann.extend(vectors, t.rows)
        self._ann[t.namespace] = (ann, saved)
        return ann, cfg

    def _save_ann(self, t: Table) -> None:
        ann, saved = self._ann.get(t.namespace, (None, -1))
        path = self._ann_file(t)
        if ann is None or path is None or ann.rows == saved:
            return
        ann.save(path)          # older generations' indexes go with their files (remove_stale)
        self._ann[t.namespace] = (ann, ann.rows)

    def approximate_stats(self, namespace: NamespaceLike) -> dict[str, Any] | None:
        """The approximate path's state for ``namespace`` since opening: the counters of
        :attr:`memcore.recall.approx.AnnIndex.stats` (``searches``, ``closed``, ``open``,
        ``widened``, ``exact_hybrid``) plus ``factory`` (str) and ``rows`` (int, covered);
        None when it has not served a search."""
        entry = self._ann.get(_validate.namespace(namespace))
        if not entry:
            return None
        return dict(entry[0].stats, factory=entry[0].factory, rows=entry[0].rows)

    def __enter__(self) -> "LongTermMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.path is None else repr(self.path)
        return (f"LongTermMemory({where}, embedder={self.embedder_name!r}, dim={self.dim}, "
                f"namespaces={len(self._tables)}{', read_only' if self.read_only else ''})")

    # ------------------------------------------------------------------ store hooks
    def _check_read(self) -> None:
        if self._closed:
            raise StoreClosedError("this LongTermMemory is closed")
        if (self._stale or self._stale_all is not None) and not self._healing:
            self._heal()

    @contextlib.contextmanager
    def _step(self, ns: Namespace):
        """Mark ``ns`` stale while a commit step runs: if any exception (KeyboardInterrupt,
        MemoryError, a failing write, ...) leaves the step half done, the namespace stays
        marked and the next call reloads it from its files (:meth:`_heal`), which hold
        either the whole commit or none of it. Deliberately not a ``finally``."""
        self._stale.add(ns)
        yield
        self._stale.discard(ns)

    def _reload_all(self, embedder: Any) -> None:
        """Reopen every namespace of the epoch the store header names (a ``reindex`` that
        raised after its commit point, or before: whichever the header says happened)."""
        for t in list(self._tables.values()):
            storage.close_namespace(t.files, t.columns)
        self._tables = _Tables()
        head = storage.read_store_header(self.path)
        if (head["embedder"], head["dim"]) == (str(embedder.name), int(embedder.dim)):
            self.embedder, self.embedder_name, self.dim = embedder, head["embedder"], head["dim"]
        self._root.adopt(head)
        for directory in self._root.namespace_dirs():        # removes the other epoch
            t = self._reopen(directory)
            self._tables[t.namespace] = t
        self._stale.clear()
        self._stale_all = None

    def _heal(self) -> None:
        """Reload every stale namespace from disk (see :meth:`_step`)."""
        with self._lock, storage.os_errors(self.path or "<in memory>"):
            self._healing = True
            try:
                if self._stale_all is not None:
                    self._reload_all(self._stale_all)
                for ns in sorted(self._stale):
                    t = self._tables.pop(ns, None)
                    if t is not None:
                        storage.close_namespace(t.files, t.columns)
                    directory = os.path.join(self._root.epoch_dir, storage.namespace_dirname(ns))
                    if os.path.isfile(os.path.join(directory, storage.NAMESPACE_HEADER)):
                        self._tables[ns] = self._reopen(directory)
                    self._stale.discard(ns)
            finally:
                self._healing = False

    def _check_write(self) -> None:
        self._check_read()
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path} was opened read-only; open it with "
                                     "read_only=False (one writer at a time) to change it")

    def embed(self, texts: list) -> np.ndarray:
        if self.embedder is None:
            raise EmbedderMismatchError(
                f"this store was opened without an embedder (its vectors come from "
                f"{self.embedder_name!r}, dim {self.dim}); pass vector=/query_vector= or open "
                "it with that embedder")
        return encoded(self.embedder.encode(list(texts)), len(texts), self.dim,
                       self.embedder_name)

    def write(self, rows: Rows) -> list[StoredMemory]:
        with _gc_paused(len(rows)):
            return super().write(rows)

    @_disk
    def _apply(self, rows: Rows) -> None:
        """Append rows: columns, then the log (the commit), then the table. Lock held."""
        ns = rows.namespace
        if self.path is None:
            self._apply_rows(rows)
            return
        with self._step(ns):
            self._apply_rows(rows)
        t = self._tables[ns]
        if t.files.checkpoint_due(t.rows):
            self._checkpoint_step(t)

    def _checkpoint_step(self, t: Table) -> None:
        with self._step(t.namespace):
            _checkpoint(t)

    def _apply_rows(self, rows: Rows) -> None:
        ns = rows.namespace
        t = self._tables.get(ns)
        if t is None:
            if self.path is None:
                t = Table(ns, storage.Columns(self.dim, storage.INITIAL_CAPACITY))
            else:
                files, cols = storage.NamespaceFiles.create(self._root.epoch_dir, ns, self.dim,
                                                            self.durability)
                t = DiskTable(ns, cols, files, storage.new_key_index(files, cols), 0)
            self._tables[ns] = t
        m, n0, c = len(rows), t.rows, t.columns
        c.ensure(n0 + m)
        sl = slice(n0, n0 + m)
        c.vectors[sl] = rows.vectors
        c.importance[sl] = rows.importance
        for name in ("created_at", "updated_at", "last_accessed_at", "access_count"):
            getattr(c, name)[sl] = getattr(rows, name)
        exp = rows.expiry()
        if exp is not None or t.expiry is not None:   # a column like the others: before the commit
            if t.files is not None:
                _expiry_grow(t, n0 + m)
            t.set_expiry(np.arange(n0, n0 + m), *(exp or (None, None)))
            if t.files is not None and self.durability == "fsync":
                t.expiry.flush()
        if t.files is not None:
            c.record_offset[sl] = t.files.commit(
                c, n0, rows.keys, rows.texts, _meta_bytes(rows.metadata), rows.importance,
                rows.created_at, rows.updated_at, rows.last_accessed_at, rows.access_count,
                rows.vectors)
        t.write(t.take(m), rows, columns=False)

    @_disk
    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]:
        """As :meth:`MemoryStore.delete_keys` (so :meth:`~MemoryStore.delete` and
        :meth:`~MemoryStore.delete_many`); on disk the DEL records of the keys are one log
        commit (all or nothing after a crash, as a ``put_many``), and a delete that brings the
        log past the checkpoint interval writes a checkpoint (as a put does)."""
        with self._lock:
            live = super().delete_keys(namespace, keys)
            t = self._tables.get(namespace)
            if live and isinstance(t, DiskTable) and t.files.checkpoint_due(t.rows):
                self._checkpoint_step(t)
        return live

    @_disk
    def _remove(self, ns: Namespace, table: Table, found: Sequence[tuple[str, int]]) -> None:
        """On disk: commit the DEL records of ``found`` (one append), then remove the keys in
        RAM, as one step (:meth:`_step`). Lock held."""
        if table.files is None or not found:
            return super()._remove(ns, table, found)
        with self._step(ns):
            table.files.delete(table.columns, [r for _, r in found], [k for k, _ in found])
            super()._remove(ns, table, found)

    @_disk
    def _discard(self, table: Table) -> None:
        if table.files is not None:
            with self._step(table.namespace):
                storage.drop_namespace(table.files, table.columns)

    drop_empty = False     # a namespace's files stay until clear() or compact()

    def stats(self) -> dict[Namespace, dict[str, int]]:
        """Per namespace: ``live`` memories and ``rows`` used (live + garbage).

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> LongTermMemory(embedder=HashingEmbedder(dim=8)).stats()
        {}
        """
        self._check_read()
        with self._lock:
            return {ns: {"live": t.live, "rows": t.rows} for ns, t in sorted(self._tables.items())}

    # ------------------------------------------------------------------ maintenance
    def _rebuild(self, t: Table, vecs: np.ndarray) -> Table:
        """An in-memory table holding the live rows of ``t`` with ``vecs`` (path=None)."""
        rows, keys, texts, metas, imps = _live(t)
        idx = np.asarray(rows, np.int64)
        c = t.columns
        batch = Rows(t.namespace, keys, texts, imps, metas, vecs,
                     *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
                       ("created_at", "updated_at", "last_accessed_at", "access_count")))
        new = Table(t.namespace, storage.Columns(vecs.shape[1], max(len(rows), 1)))
        new.write(new.take(len(rows)), batch)
        if t.expiry is not None:
            new.expiry = np.zeros((max(len(rows), 1), 2), np.float64)
            inside = idx < t.expiry.shape[0]
            new.expiry[:len(rows)][inside] = t.expiry[idx[inside]]
        return new

    def _reindexed(self, t: Table, structures: list) -> Table:
        """``t`` with the hybrid indexes of ``structures`` built and checkpointed (a new
        generation's row ids differ: its indexes are built once here, not on a search)."""
        for structure in structures:
            t.recall_index(HybridWeights.for_structure(structure), self.dim,
                           self.query_preparer)
        if structures and isinstance(t, DiskTable):
            self._checkpoint_step(t)
        return t

    def lifecycle(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, tuple[float, int]]:
        """As :meth:`MemoryStore.lifecycle`, with one vectorised key-index lookup."""
        with self._lock:
            t = self._tables.get(namespace)
            if not isinstance(t, DiskTable):
                return super().lifecycle(namespace, keys)
            keys = list(keys)
            c = t.columns
            now = _now(self.clock) if t.expiry is not None else 0.0
            return {k: (float(c.created_at[r]), int(c.access_count[r]))
                    for k, r in zip(keys, t.index.lookup_many(keys, c.alive))
                    if r is not None and not t.row_expired(r, now)}

    def _reopen(self, directory: str) -> Table:
        files, cols, st = storage.open_namespace(directory, self.dim, self.durability, False)
        t = _table(files.ns, cols, files, st, False)
        _expiry_open(t, False)
        self._restore_recall(t, st)
        return t

    @_disk
    def compact(self, namespace: NamespaceLike | None = None) -> int:
        """Rewrite namespaces keeping only live rows; returns how many dead rows were dropped.

        Expired memories are swept first (:meth:`sweep`), so their rows are dropped too and
        the survivors keep their time to live. Crash-safe on disk: the new generation's files
        are complete and fsynced before the header naming them replaces the old one. A namespace left without live rows is
        removed. Every live vector is checked against its record's CRC before it is copied.

        Parameters
        ----------
        namespace : str or tuple of str, optional
            Only this namespace; every namespace when None.

        Raises
        ------
        InvalidNamespaceError, ReadOnlyStoreError
        StoreCorruptedError
            If a live vector does not match its record's CRC (naming the vectors file, offset
            and row); that namespace is left as it was, and :meth:`repair` drops the key.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=8))
        >>> for text in ("red door", "blue door", "green door"): _ = ltm.put("r", "door", text)
        >>> ltm.compact(), ltm.stats()
        (2, {('r',): {'live': 1, 'rows': 1}})
        """
        self._check_write()
        only = None if namespace is None else _validate.namespace(namespace)
        dropped = 0
        with self._lock:
            self._check_write()
            self.sweep(only)
            for ns in [only] if only is not None else list(self._tables):
                t = self._tables.get(ns)
                if t is None or t.rows == t.live:
                    continue
                dropped += t.rows - t.live
                if not t.keys:
                    with self._step(ns):
                        self._discard(t)
                        del self._tables[ns]
                    continue
                rows = list(t.keys.values())
                vecs = np.ascontiguousarray(t.columns.vectors[rows])
                if t.files is None:
                    self._tables[ns] = self._rebuild(t, vecs)
                    continue
                log = t.files.verified_log(vecs, rows, _record_offsets(t, rows), t.columns,
                                           "compact() wrote nothing")
                with self._step(ns):
                    directory = _write_live(t, vecs, self._root.epoch_dir,
                                            t.files.generation + 1, self.durability, log)
                    structures = _index_structures(t)
                    storage.retire_generation(t.files, t.columns)
                    del self._tables[ns]
                    self._tables[ns] = self._reopen(directory)
                self._tables[ns] = self._reindexed(self._tables[ns], structures)
        return dropped

    @_disk
    def reindex(self, embedder: Any, *, batch_size: int = 256, progress: bool = True) -> int:
        """Re-embed every text with a new embedder and switch the store to it.

        On disk a complete new epoch is written and fsynced, then the store header naming the
        new embedder and epoch replaces the old one (the commit point); a crash before that
        leaves the old store intact. Dead rows are dropped on the way.

        Parameters
        ----------
        embedder : Embedder
        batch_size : int, default 256
            Texts per ``encode`` call.
        progress : bool, default True
            Show a tqdm progress bar (on stderr).

        Returns
        -------
        int
            Memories re-embedded.

        Raises
        ------
        InvalidArgumentTypeError
            If ``embedder`` lacks ``encode``/``name``/``dim``.
        InvalidArgumentError
            If ``batch_size < 1``.
        EmbedderMismatchError, InvalidVectorError
            If the embedder returns a wrong shape or NaN/inf (nothing changes).
        ReadOnlyStoreError

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=8)); _ = ltm.put("r", "k", "door")
        >>> ltm.reindex(HashingEmbedder(dim=16), progress=False), ltm.dim
        (1, 16)
        """
        from tqdm.auto import tqdm

        self._check_write()
        check_embedder(embedder, named=True)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        name, dim = str(embedder.name), int(embedder.dim)
        with self._lock:
            self._check_write()
            if self._tables.damaged:
                raise StoreCorruptedError(
                    "reindex() would drop the damaged namespaces of this store; repair() "
                    f"them first: {'; '.join(self._tables.damaged.values())}")
            plan = [t for _, t in sorted(self._tables.items()) if t.keys]
            total = sum(t.live for t in plan)
            new_vecs = []
            with tqdm(total=total, desc="reindex", unit="memory", disable=not progress) as bar:
                for t in plan:
                    texts = _live(t)[2]
                    parts = []
                    for s in range(0, len(texts), batch_size):
                        chunk = texts[s:s + batch_size]
                        parts.append(encoded(embedder.encode(chunk), len(chunk), dim, name))
                        bar.update(len(chunk))
                    new_vecs.append(np.ascontiguousarray(np.concatenate(parts)))
            if self.path is None:
                self._tables = _Tables({t.namespace: self._rebuild(t, vecs)
                                        for t, vecs in zip(plan, new_vecs)})
                self.embedder, self.embedder_name, self.dim = embedder, name, dim
                return total
            epoch = self._root.begin_epoch()
            dirs = []
            self._stale_all = embedder      # until the switch is done: see _heal
            try:
                for t, vecs in zip(plan, new_vecs):
                    dirs.append(_write_live(t, vecs, epoch, 0, self.durability))
                self._root.commit_epoch(name, dim)
            except BaseException:
                if not self._root.next_committed():   # else the new epoch is the store
                    self._root.abort_epoch()
                    self._stale_all = None
                raise
            structures = [_index_structures(t) for t in plan]
            for t in self._tables.values():
                storage.close_namespace(t.files, t.columns)
            self._tables = _Tables()
            self.embedder, self.embedder_name, self.dim = embedder, name, dim
            self._root.finish_epoch()
            for directory in dirs:
                t = self._reopen(directory)
                self._tables[t.namespace] = t
            self._stale_all = None
            for built, t in zip(structures, list(self._tables.values())):
                self._tables[t.namespace] = self._reindexed(t, built)
            return total

    @_disk
    def repair(self) -> list[dict]:
        """Re-verify every file on disk and rewrite damaged namespaces from intact records.

        Each namespace's log is re-scanned and every live row's vector checked against its
        record's CRC. A damaged namespace is rewritten as a new generation (crash-safe, as
        :meth:`compact`): records with a bad frame or CRC are skipped, a key whose vector fails
        its CRC is dropped (never served with another row's vector). Opening with
        ``repair=True`` does the same for namespaces that fail to open.

        Repair never resurrects: a key whose last intact record nothing vouches for (a
        damaged record may have deleted or replaced it) is dropped and listed, and when it
        may still be current it is set aside in ``<path>/quarantine.<n>.jsonl`` (see
        :func:`memcore.storage.repair_namespace`).

        Returns
        -------
        list of dict
            One ``{"namespace", "kept", "dropped", "skipped", "uncertain", "lost_rows"}`` per
            rewritten namespace; ``uncertain`` lists every key repair could not vouch for.

        Raises
        ------
        ReadOnlyStoreError
            On a read-only store (an in-memory one has nothing to repair:
            InvalidArgumentError).

        Examples
        --------
        >>> import tempfile; from memcore import HashingEmbedder
        >>> with LongTermMemory(tempfile.mkdtemp(), HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("r", "k", "door"); report = ltm.repair()
        >>> report                                    # nothing was damaged
        []
        """
        self._check_write()
        if self.path is None:
            raise InvalidArgumentError("an in-memory LongTermMemory has no files to repair")
        report = []
        with self._lock:
            self._check_write()
            for t in list(self._tables.values()):
                try:
                    self._checkpoint_step(t)
                except StoreCorruptedError:
                    pass        # its header keeps the last good checkpoint: re-verified below
            for name in sorted(self._tables.damaged):
                directory = os.path.join(self._root.epoch_dir, name)
                report.append(storage.repair_namespace(directory, self.dim,
                                                       self._repair_embed()))
                del self._tables.damaged[name]
                t = self._reopen(directory)
                self._tables[t.namespace] = t
            for ns in list(self._tables):
                t = self._tables[ns]
                directory = t.files.directory
                if storage.namespace_intact(directory, self.dim, self.durability):
                    continue
                with self._step(ns):
                    storage.close_namespace(t.files, t.columns)
                    del self._tables[ns]
                    report.append(storage.repair_namespace(directory, self.dim, self._repair_embed()))
                    self._tables[ns] = self._reopen(directory)
        return report

    def verify(self) -> dict[Namespace, dict]:
        """Check every checksum of every namespace without changing anything (a scrub).

        Per namespace: the whole log (frames, CRCs, row rules), each row's record offset and
        live flag against the log, every live vector against its record's CRC, and the
        lifecycle fields and access statistics (finite, in range). Reads (search, get) check
        the vectors of the rows they return in any case; ``verify`` finds damage to rows no
        call has returned yet. Cost: one pass over the log and the vectors (measured in
        bench/test_bench_durability.py).

        Returns
        -------
        dict
            ``{namespace: {"rows", "live", "bad_rows": rows whose vector fails its CRC,
            "errors": messages naming file and offset}}``; a namespace is intact when both
            lists are empty; one that failed to open is keyed by its directory name (see
            :attr:`damaged`). :meth:`repair` rewrites damaged ones.

        Raises
        ------
        StoreClosedError

        Examples
        --------
        >>> import tempfile; from memcore import HashingEmbedder
        >>> with LongTermMemory(tempfile.mkdtemp(), HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("r", "k", "door"); ltm.verify()
        {('r',): {'rows': 1, 'live': 1, 'bad_rows': [], 'errors': []}}
        """
        self._check_read()
        with self._lock, storage.os_errors(self.path or "<in memory>"):
            out = {}
            for ns, t in sorted(self._tables.items()):
                if isinstance(t, DiskTable):
                    out[ns] = storage.verify_namespace(t.files, t.columns, t.rows)
            for name, msg in sorted(self._tables.damaged.items()):
                out[name] = {"rows": 0, "live": 0, "bad_rows": [], "errors": [msg]}
            return out

    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None:
        """As :meth:`MemoryStore.vector`; on disk the vector is checked against its record's
        CRC first (:class:`StoreCorruptedError` naming the file and row when damaged)."""
        table, row = self._find(namespace, key)
        if row is None:
            return None
        if isinstance(table, DiskTable):
            with self._lock:
                table.record(row)
        return np.array(table.columns.vectors[row])

    # ------------------------------------------------------------------ export / import
    @_disk
    def export_jsonl(self, path: str | os.PathLike) -> int:
        """Write every live memory to a JSON Lines file (:mod:`memcore.storage.jsonl`);
        returns how many.

        Raises
        ------
        OSError
            If the file cannot be written.
        """
        self._check_read()
        with self._lock:
            def rows():
                for ns, t in sorted(self._tables.items()):
                    for row in t.keys.values():
                        yield t.memory(row, self.tier), t.columns.vectors[row]
            return storage.export_jsonl(path, self.embedder_name, self.dim, rows())

    @_disk
    def import_jsonl(self, path: str | os.PathLike, *, batch_size: int = 4096) -> int:
        """Insert (or replace) the memories of an :meth:`export_jsonl` file; returns how many.

        Lifecycle fields are kept. Vectors are used bit for bit when the file's embedder name
        and dim equal this store's; otherwise the texts are re-embedded with this store's
        embedder.

        Parameters
        ----------
        path : str or os.PathLike
        batch_size : int, default 4096
            Memories per commit.

        Raises
        ------
        InvalidArgumentError
            If the file is not a memcore export or a line is malformed (naming the line).
        EmbedderMismatchError
            If re-embedding is needed and the store has no embedder.
        ReadOnlyStoreError

        Examples
        --------
        >>> import os, tempfile; from memcore import HashingEmbedder
        >>> path = os.path.join(tempfile.mkdtemp(), "mem.jsonl")
        >>> src = LongTermMemory(embedder=HashingEmbedder(dim=8)); _ = src.put("r", "k", "door")
        >>> src.export_jsonl(path), LongTermMemory(embedder=HashingEmbedder(dim=8)).import_jsonl(path)
        (1, 1)
        """
        self._check_write()
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        n = 0
        for mems, vecs in storage.import_jsonl(path, self.embedder_name, self.dim, batch_size,
                                               MemoryTier.LONG):
            self.put_stored(mems, vecs if vecs is not None
                            else self.embed([m.text for m in mems]))
            n += len(mems)
        return n
