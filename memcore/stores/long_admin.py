"""LongTermMemory's maintenance verbs: compaction, re-embedding, hybrid-index warm-up,
repair, verification and format migration (:class:`LongTermAdmin`, a mixin of
:class:`~memcore.LongTermMemory`).

Each verb does the store-level part (locking, validation, which namespaces, re-embedding)
here and leaves what differs between an in-memory and an on-disk store to the store's
backend (``self._space``: :class:`memcore.stores.long.RamSpace` or
:class:`memcore.stores.long_disk.DiskSpace`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

import numpy as np

from memcore import _validate, storage
from memcore.core.query import hybrid_weights
from memcore.core.rows import encoded
from memcore.core.store import check_embedder
from memcore.errors import InvalidArgumentError, StoreCorruptedError
from memcore.recall.weights import HybridWeights
from memcore.core.rows import Rows
from memcore.storage.layout import PACK_DIR, PACK_NAMESPACE
from memcore.stores import long_pack
from memcore.stores.long_disk import DiskTable, LogTable, open_table, write_live
from memcore.types import Namespace, NamespaceLike

__all__ = ["LongTermAdmin", "disk_errors"]


def disk_errors(method):
    """Run a method that touches the store's files with their OS errors raised as memcore
    errors (:class:`memcore.storage.os_errors`)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with storage.os_errors(self.path or "<in memory>"):
            return method(self, *args, **kwargs)
    return run


class LongTermAdmin:
    """The maintenance verbs of :class:`~memcore.LongTermMemory` (a mixin: the store's lock,
    tables and backend are its own)."""

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

        With the pack on (format 3, the default: :data:`memcore.stores.long_pack.ENABLED`),
        every namespace of at most ``PACK_MAX`` live rows moves into the pack (its records
        re-encoded under composite keys, timestamps, access counts and TTLs as they were)
        and the store header says version 3; a larger one keeps a directory of its own. A
        format-2 store is migrated when it has such a small namespace (else, or with the
        pack off, it already is of the current format).

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
            Memories migrated (every live row of the store, each rewritten); 0 when the
            store already is of the current format.

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
        >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
        >>> root = tempfile.mkdtemp() + "/mem"
        >>> with LongTermMemory(root, HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("robot", "dock", "the dock is in the hallway")
        >>> LongTermMemory.migrate(root, progress=False)     # already the current format
        0
        """
        root_path = os.path.abspath(os.fspath(path))
        with storage.os_errors(root_path):
            return _migrate(root_path, progress, lock_timeout)

    @disk_errors
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
        >>> from memcore import HashingEmbedder, LongTermMemory
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
            packed = getattr(self._tables, "packed", {})    # format 3: compacted as the pack
            for ns in [only] if only is not None else list(self._tables):
                if ns in packed:
                    continue
                t = self._tables.get(ns)
                if t is None or t.rows == t.live:
                    continue
                dropped += t.rows - t.live
                if not t.keys:
                    self._discard(t)
                    del self._tables[ns]
                    continue
                self._space.compact(t)
            if only is None or only in packed:
                dropped += self._space.compact_pack()
        return dropped

    @disk_errors
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
        >>> from memcore import HashingEmbedder, LongTermMemory
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=8)); _ = ltm.put("r", "k", "door")
        >>> ltm.reindex(HashingEmbedder(dim=16), progress=False), ltm.dim
        (1, 16)
        """
        self._check_write()
        check_embedder(embedder, named=True)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        name, dim = str(embedder.name), int(embedder.dim)
        with self._lock:
            self._check_write()
            self._probe()
            if self._tables.damaged:
                raise StoreCorruptedError(
                    "reindex() would drop the damaged namespaces of this store; repair() "
                    f"them first: {'; '.join(self._tables.damaged.values())}")
            hold = getattr(self._tables, "all_open", contextlib.nullcontext)
            with hold():        # a reindex holds every namespace until its epoch commits
                total = self._reindex(embedder, batch_size, progress)
            self.embedder, self.embedder_name, self.dim = embedder, name, dim
            return total

    def _reindex(self, embedder: Any, batch_size: int, progress: bool) -> int:
        """Re-embed every live memory and write the new epoch (lock held, namespaces held
        open)."""
        from tqdm.auto import tqdm

        name, dim = str(embedder.name), int(embedder.dim)
        plan = [t for _, t in self._tables.items() if t.keys]
        total = sum(t.live for t in plan)
        new_vecs = []
        with tqdm(total=total, desc="reindex", unit="memory", disable=not progress) as bar:
            for t in plan:
                texts = t.live_fields()[2]
                parts = []
                for s in range(0, len(texts), batch_size):
                    chunk = texts[s:s + batch_size]
                    parts.append(encoded(embedder.encode(chunk), len(chunk), dim, name))
                    bar.update(len(chunk))
                new_vecs.append(np.ascontiguousarray(np.concatenate(parts)))
        self._space.reindex(plan, new_vecs, embedder)
        return total

    @disk_errors
    def warmup(self, hybrid: Any = None, *, progress: bool = True) -> int:
        """Build the hybrid index of every namespace that lacks one and, on disk, save it at
        once (a writer: one checkpoint per namespace built; a read-only store keeps them in
        RAM): afterwards the first hybrid search of any process opening the store reads the
        saved index instead of building it from the rows (``memcore warmup PATH``; after a
        bulk load, or on a store written before writes kept the index).

        Parameters
        ----------
        hybrid : HybridWeights, optional
            Whose index structure to build: the store's ``hybrid`` when None, or
            ``HybridWeights.hybrid()`` when that is the similarity preset (which needs none).
        progress : bool, default True
            Show a tqdm progress bar of the memories indexed (on stderr; off when stderr is
            not a terminal).

        Returns
        -------
        int
            Memories indexed (0 when every namespace had its index).

        Raises
        ------
        InvalidArgumentTypeError
            If ``hybrid`` is not a HybridWeights.
        StoreCorruptedError
            If a namespace is damaged (``repair()`` it first), or a vector checked by the
            checkpoint fails its checksum.

        Examples
        --------
        >>> from memcore import HashingEmbedder, LongTermMemory
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=8)); _ = ltm.put("r", "k", "door")
        >>> ltm.warmup(progress=False), ltm.warmup(progress=False)
        (1, 0)
        """
        from tqdm.auto import tqdm

        self._check_read()
        hw = hybrid_weights(hybrid, self.hybrid)
        if hw.is_similarity:
            hw = HybridWeights.hybrid()
        key = hw.structure()
        with self._lock:
            self._check_read()
            self._probe()
            if self._tables.damaged:
                raise StoreCorruptedError(
                    "warmup() cannot index the damaged namespaces of this store; repair() "
                    f"them first: {'; '.join(self._tables.damaged.values())}")
            todo = {ns: t.live for ns, t in self._tables.items() if t.keys and (
                t.recall is None or key not in t.recall.indexes)}     # one open at a time
            total = sum(todo.values())
            with tqdm(total=total, desc="warmup", unit="memory",
                      disable=None if progress else True) as bar:
                for ns in todo:
                    t = self._tables[ns]
                    if isinstance(t, DiskTable):       # built in chunks: one update each
                        t.recall_index(hw, self.dim, self.query_preparer, progress=bar.update)
                    else:
                        t.recall_index(hw, self.dim, self.query_preparer)
                        bar.update(t.live)
            return total

    @disk_errors
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
            One ``{"namespace", "kept", "dropped", "skipped", "uncertain", "lost_rows",
            "stats_reset", "ttl_unverified", ...}`` per rewritten namespace
            (:func:`memcore.storage.repair_namespace`); ``uncertain`` lists every key repair
            could not vouch for and dropped, ``stats_reset``/``ttl_unverified`` the keys it
            kept whose access statistics or time to live it could not vouch for.

        Raises
        ------
        ReadOnlyStoreError
            On a read-only store (an in-memory one has nothing to repair:
            InvalidArgumentError).

        Examples
        --------
        >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
        >>> with LongTermMemory(tempfile.mkdtemp(), HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("r", "k", "door"); report = ltm.repair()
        >>> report                                    # nothing was damaged
        []
        """
        self._check_write()
        with self._lock:
            self._check_write()
            return self._space.repair(None if self.embedder is None else self.embed)

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
            :attr:`damaged`). The pack of small namespaces (format 3) is keyed by its
            reserved namespace, or its directory name when it failed to open; when damaged,
            its entry lists under ``"namespaces"`` the namespaces the damage concerns (those
            of its bad rows, else all of them). :meth:`repair` rewrites damaged ones.

        Raises
        ------
        StoreClosedError

        Examples
        --------
        >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
        >>> with LongTermMemory(tempfile.mkdtemp(), HashingEmbedder(dim=8)) as ltm:
        ...     _ = ltm.put("r", "k", "door"); ltm.verify()
        {('r',): {'rows': 1, 'live': 1, 'bad_rows': [], 'errors': []}}
        """
        self._check_read()
        with self._lock, storage.os_errors(self.path or "<in memory>"):
            return self._space.verify()


def _migrate(root_path: str, progress: bool, lock_timeout: float) -> int:
    """:meth:`LongTermAdmin.migrate` with OS errors left to the caller."""
    from tqdm.auto import tqdm

    storage.StoreRoot.require(root_path)
    root = storage.StoreRoot.open(root_path, read_only=False, lock_timeout=lock_timeout)
    try:
        head = root.header
        old = head["version"] < storage.FORMAT_VERSION          # format 1
        dim, total = head["dim"], 0
        dirs = root.namespace_dirs()          # (removes a half-written earlier attempt)
        if not old and not (head["version"] < storage.layout.PACK_VERSION
                            and long_pack.enabled() and _any_small(dirs, dim)):
            return 0
        epoch = root.begin_epoch()
        pack = None
        try:
            with tqdm(desc="migrate", unit="row", disable=not progress) as bar:
                for directory in dirs:
                    t, close = _open_old(directory, dim, old)
                    try:
                        bar.total = (bar.total or 0) + t.rows
                        if t.live and long_pack.enabled() and t.live <= long_pack.PACK_MAX:
                            if pack is None:
                                pack = long_pack.Pack(DiskTable.create(
                                    epoch, PACK_NAMESPACE, dim, "fsync"), False)
                            pack.append(long_pack.namespace_id(t.namespace), _pack_batch(t))
                        elif t.live:
                            rows = list(t.keys.values())
                            vecs = np.ascontiguousarray(t.columns.vectors[rows])
                            log = t.files.verified_log(vecs, rows, t.record_offsets(rows),
                                                       t.columns, "migrate() wrote nothing")
                            write_live(t, vecs, epoch, 0, "flush", log)
                        total += t.live
                        bar.update(t.rows)
                    finally:
                        close()
            if pack is not None:
                pack.flush_nsid()
                pack.table.checkpoint()
                pack.close()
                pack = None
            root.commit_epoch(head["embedder"], dim, version=storage.layout.PACK_VERSION
                              if os.path.isdir(os.path.join(epoch, PACK_DIR))
                              else storage.FORMAT_VERSION)
        except BaseException:
            if pack is not None:
                pack.close()
            root.abort_epoch()
            raise
        root.finish_epoch()
        return total
    finally:
        root.release()


def _open_old(directory: str, dim: int, format1: bool) -> tuple:
    """A namespace directory of the store being migrated, read-only, and what closes it:
    format 1 replayed into RAM (:class:`LogTable`), format 2 as a :class:`DiskTable`."""
    if format1:
        files, cols, rep = storage.open_namespace(directory, dim, "flush", True, full=True)
        return (LogTable(files.ns, cols, files, rep, True),
                lambda: storage.close_namespace(files, cols))
    t = open_table(directory, dim, "flush", True, None)
    return t, t.close


def _any_small(dirs: list, dim: int) -> bool:
    """Whether a format-2 namespace of ``dirs`` has at most ``PACK_MAX`` live rows (the
    pack is migrated to only when one would move into it)."""
    for directory in dirs:
        if os.path.basename(directory) == PACK_DIR:
            continue
        t = open_table(directory, dim, "flush", True, None)
        try:
            if 0 < t.live <= long_pack.PACK_MAX:
                return True
        finally:
            t.close()
    return False


def _pack_batch(t: DiskTable | LogTable) -> Rows:
    """The live rows of ``t`` as a batch for the pack: composite keys, every field and the
    lifecycle (timestamps, access count, TTL) as they are, each vector checked against its
    record's CRC first."""
    rows, keys, texts, metas, imps = t.live_fields()
    idx = np.asarray(rows, np.int64)
    c = t.columns
    vecs = np.ascontiguousarray(c.vectors[idx])
    t.files.verified_log(vecs, rows, t.record_offsets(rows), c, "migrate() wrote nothing")
    exp = None if t.expiry is None else np.asarray(t.expiry[idx], np.float64)
    prefix = storage.layout.ns_prefix(t.namespace)
    return Rows(PACK_NAMESPACE, [prefix + k for k in keys], texts, imps, metas, vecs,
                *(np.ascontiguousarray(getattr(c, name)[idx]) for name in
                  ("created_at", "updated_at", "last_accessed_at", "access_count")),
                None if exp is None else exp[:, 1], None if exp is None else exp[:, 0])
