"""LongTermMemory: the unbounded long-term tier, in memory or persisted on disk.

The store chooses its backend once, at construction: :class:`RamSpace` (``path=None``: each
namespace a :class:`~memcore.core.table.Table` in RAM) or
:class:`~memcore.stores.long_disk.DiskSpace` (each namespace a
:class:`~memcore.stores.long_disk.DiskTable` whose columns, key index and hybrid index are
memory-mapped from the namespace's files and whose keys, texts and metadata stay in its log;
:mod:`memcore.storage`: format 2, commit protocol, checkpoints, recovery). The maintenance
verbs (compact, reindex, repair, verify, migrate) are :mod:`memcore.stores.long_admin`'s.
Opening reads the
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
import gc
import math
import os
from typing import Any, Callable, Sequence

import numpy as np

from memcore import _validate, storage
from memcore.core.rows import INITIAL_CAPACITY, Rows, encoded
from memcore.core.store import MemoryStore, check_embedder
from memcore.core.table import RamColumns, Table
from memcore.errors import (
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    ReadOnlyStoreError,
    StoreClosedError,
)
from memcore.recall.approx import AnnIndex, ApproximateSearch, load_faiss
from memcore.recall.weights import HybridWeights
from memcore.recall.prep import QueryPreparer
from memcore.stores.long_admin import LongTermAdmin, disk_errors
from memcore.stores.long_disk import DiskSpace, Tables
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
    system_clock,
)

__all__ = ["LongTermMemory", "RamSpace"]

DEFAULT_DURABILITY = "flush"


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


def _embed_with(embedder: Any) -> Callable | None:
    """What repair re-embeds a damaged vector's text with (None without an embedder)."""
    if embedder is None:
        return None
    return lambda texts: encoded(embedder.encode(list(texts)), len(texts), int(embedder.dim),
                                 str(embedder.name))


class RamSpace:
    """The in-memory backend of a :class:`LongTermMemory` (``path=None``): each namespace
    a :class:`~memcore.core.table.Table` in RAM; commits, checkpoints and healing are
    nothing, compaction and re-embedding rebuild the tables (the disk backend:
    :class:`~memcore.stores.long_disk.DiskSpace`).

    Parameters
    ----------
    dim : int
    """

    read_only = False
    needs_heal = False

    def __init__(self, dim: int):
        self.dim = dim
        self.tables = Tables()
        self.repair_report: list[dict] = []

    def make_room(self, t: Table, m: int) -> Table:
        """``t`` (only a disk store moves a namespace before a write)."""
        return t

    def new_table(self, ns: Namespace, m: int = 0) -> Table:
        return Table(ns, RamColumns(self.dim, INITIAL_CAPACITY))

    def step(self, ns: Namespace) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def after_write(self, t: Table) -> None:
        """Nothing: there is no log to checkpoint."""

    def flush(self, each: Callable[[Table], None]) -> None:
        """Nothing to checkpoint."""

    def discard(self, t: Table) -> None:
        """Nothing: the table goes with its last reference."""

    def ann_file(self, t: Table) -> None:
        """None: the approximate index is never saved."""

    def release(self) -> None:
        self.tables.clear()

    def compact(self, t: Table) -> None:
        rows = list(t.keys.values())
        self.tables[t.namespace] = t.rebuilt(np.ascontiguousarray(t.columns.vectors[rows]))

    def compact_pack(self) -> int:
        """Nothing (only a disk store has a pack)."""
        return 0

    def reindex(self, plan: Sequence[Table], vectors: Sequence[np.ndarray],
                embedder: Any) -> None:
        new = {t.namespace: t.rebuilt(vecs) for t, vecs in zip(plan, vectors)}
        self.tables.reset()
        self.tables.update(new)
        self.dim = int(embedder.dim)

    def repair(self, embed: Any) -> list[dict]:
        raise InvalidArgumentError("an in-memory LongTermMemory has no files to repair")

    def verify(self) -> dict:
        return {}


class LongTermMemory(LongTermAdmin, MemoryStore):
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
        Default recall of :meth:`search` (similarity preset when None). With hybrid weights
        each namespace's hybrid index (of their structure) is part of every write: built
        from the stored rows by the first write that finds it missing, then kept current by
        ``put``/``put_many`` (one batched update)/deletes. Any other index is built on its
        first hybrid search. On disk an index built from the rows is checkpointed at once
        by a writer (a read-only store keeps it in RAM), saved again at each checkpoint and
        restored when the store opens (only the log after the checkpoint is replayed into
        it); :meth:`warmup` (``memcore warmup PATH``) builds and saves them in bulk.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery`` for hybrid recall.
    threads : int, default 1
        CPU threads a search's scan and its BM25 of common terms may use (numba's, set only
        while they run); >= 2 runs the parallel kernels, whose results equal the 1-thread
        ones bit for bit (robots have 4-12 cores).
    approximate : ApproximateSearch, optional
        Opt in to approximate similarity-preset search for namespaces of at least
        ``approximate.min_rows`` rows (:mod:`memcore.recall.approx`: FAISS candidates, exact
        re-rank, the bound reported in :meth:`approximate_stats`). Needs ``memcore-agent[ann]``.
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
        self._closed = False
        self._space: RamSpace | DiskSpace
        if path is None:
            if read_only or repair:
                raise InvalidArgumentError("read_only and repair need a path; an in-memory store "
                                           "(path=None) has nothing to open or repair")
            if embedder is None:
                raise InvalidArgumentError("an in-memory LongTermMemory needs an embedder "
                                           "(it fixes the name and dim of its vectors)")
            self.path = None
            self.embedder_name, self.dim = str(embedder.name), int(embedder.dim)
            self._space = RamSpace(self.dim)
        else:
            self.path = _store_path(path)
            self._space = DiskSpace(self.path, durability, self.read_only, lock_timeout,
                                    query_preparer)
            try:
                with storage.os_errors(self.path):
                    self.embedder_name, self.dim, self.format_version = self._space.open(
                        embedder, bool(repair), _embed_with(embedder))
            except BaseException:
                self._release()
                raise
        self._tables = self._space.tables
        if isinstance(self._space, DiskSpace):
            self._space.on_evict = self._evicted
        #: what opening with ``repair=True`` rebuilt (one dict per namespace or header)
        self.repair_report: list[dict] = self._space.repair_report

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
            Read-only by default: a write (``put``, ``delete``, ...) raises
            :class:`~memcore.errors.ReadOnlyStoreError`. Pass ``read_only=False`` to write.
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

    # ------------------------------------------------------------------ opening / closing
    @property
    def damaged(self) -> dict[str, str]:
        """Namespaces that failed to open: directory name -> the error (each raises it when
        used; :meth:`repair` rewrites them). Empty for a healthy store."""
        self._probe()
        return dict(self._tables.damaged)

    def _probe(self) -> None:
        """On disk, open every namespace not yet opened (one at a time) so that damage
        is found and isolated (a namespace's files are otherwise opened on first use)."""
        if isinstance(self._space, DiskSpace) and not self._space.probed and not self._closed:
            with self._lock:
                self._space.probe()

    def _release(self) -> None:
        self._space.release()

    @disk_errors
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
            self._space.flush(self._save_ann)

    def close(self) -> None:
        """Checkpoint (see :meth:`flush`), unmap the files and release the writer lock.
        Idempotent; the store cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only:
                    self.flush()
            finally:
                self._closed = True
                self._release()

    # ------------------------------------------------------------------ approximate path
    def _approximate(self, t: Table) -> tuple[AnnIndex, ApproximateSearch] | None:
        cfg = self.approximate
        if cfg is None or t.rows < cfg.min_rows:
            return None
        vectors = t.columns.vectors
        ann, saved = self._ann.get(t.namespace, (None, -1))
        if ann is None or not ann.covers(vectors, t.rows):
            path = self._space.ann_file(t)
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
        path = self._space.ann_file(t)
        if ann is None or path is None or ann.rows == saved:
            return
        ann.save(path)          # older generations' indexes go with their files (remove_stale)
        self._ann[t.namespace] = (ann, ann.rows)

    def _evicted(self, t: Table) -> None:
        """A namespace is being closed (the LRU of open namespaces): save and drop its
        approximate index."""
        if not self.read_only:
            self._save_ann(t)
        self._ann.pop(t.namespace, None)

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
        if self._space.needs_heal:
            self._heal()

    def _heal(self) -> None:
        """Reload what an interrupted commit step left half done (:meth:`DiskSpace.heal`)."""
        with self._lock, storage.os_errors(self.path):
            adopted = self._space.heal()
            if adopted is not None:      # an interrupted reindex had committed
                self.embedder, self.embedder_name, self.dim = \
                    adopted, str(adopted.name), int(adopted.dim)

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

    @disk_errors
    def _apply(self, rows: Rows) -> None:
        """Append rows to their namespace's table (on disk: columns, then the log -- the
        commit -- then the table, as one step; then a checkpoint when due). With hybrid
        weights (``hybrid=``) the namespace's hybrid index is built first when missing (on
        disk: checkpointed at once) and the table's write keeps it current. Lock held."""
        ns = rows.namespace
        t = self._tables.get(ns)
        if t is None:
            with self._space.step(ns):
                t = self._tables[ns] = self._space.new_table(ns, len(rows))
        else:
            t = self._space.make_room(t, len(rows))
        if not self.hybrid.is_similarity and ns[0] not in self.unindexed:
            t.recall_index(self.hybrid, self.dim, self.query_preparer)   # part of every write
        with self._space.step(ns):
            t.append(rows)
        self._space.after_write(t)

    @disk_errors
    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]:
        """As :meth:`MemoryStore.delete_keys` (so :meth:`~MemoryStore.delete` and
        :meth:`~MemoryStore.delete_many`); on disk the DEL records of the keys are one log
        commit (all or nothing after a crash, as a ``put_many``), and a delete that brings the
        log past the checkpoint interval writes a checkpoint (as a put does)."""
        with self._lock:
            live = super().delete_keys(namespace, keys)
            t = self._tables.get(namespace)
            if live and t is not None:
                self._space.after_write(t)
        return live

    @disk_errors
    def _remove(self, ns: Namespace, table: Table, found: Sequence[tuple[str, int]]) -> None:
        """Remove ``found`` as one step (on disk the table commits their DEL records in one
        append first). Lock held."""
        with self._space.step(ns):
            super()._remove(ns, table, found)

    @disk_errors
    def _discard(self, table: Table) -> None:
        self._space.discard(table)

    drop_empty = False     # a namespace's files stay until clear() or compact()

    #: First namespace segments whose writes do not build a missing hybrid index (one built
    #: by a search is still kept current): namespaces never searched, such as
    #: :class:`~memcore.SemanticMemory`'s short-tier journal.
    unindexed: tuple[str, ...] = ()

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
            return {ns: {"live": t.live, "rows": t.rows} for ns, t in self._tables.items()}

    # ------------------------------------------------------------------ export / import
    @disk_errors
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
                for ns, t in self._tables.items():      # sorted; one open at a time
                    for row in t.keys.values():
                        yield t.memory(row, self.tier), t.columns.vectors[row]
            return storage.export_jsonl(path, self.embedder_name, self.dim, rows())

    @disk_errors
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
