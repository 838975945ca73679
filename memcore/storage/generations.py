"""A namespace's generations and their commit protocol: the files of the current generation
(:class:`NamespaceFiles`: reads of single records, commits, checkpoints), writing a complete
new generation (compaction, repair, reindex, migrate) and retiring old ones (see
:mod:`memcore.storage`, Commit protocol). Opening a generation is
:mod:`memcore.storage.recovery`'s."""

from __future__ import annotations

import errno
import json
import mmap
import os
import zlib
from typing import Iterable, Sequence

import numpy as np

from memcore.errors import StoreCorruptedError
from memcore.storage.checkpoint import (
    CHECKPOINT_BYTES,
    CHECKPOINT_ROWS,
    KeyIndex,
    PutRecord,
    checkpoint_names,
    decode_puts,
    key_hashes,
    load_checkpoint_files,
    read_put,
    write_checkpoint_files,
)
from memcore.storage.columns import (INITIAL_CAPACITY, Columns, RowChecks, check_path,
                                     column_crcs, expiry_path, open_expiry, side_path,
                                     write_checks)
from memcore.storage.layout import (
    FORMAT_VERSION,
    NAMESPACE_FORMAT,
    NAMESPACE_HEADER,
    NAMESPACE_ID,
    TMP_PREFIX,
    TRASH_PREFIX,
    ann_path,
    atomic_write_json,
    column_path,
    fsync_dir,
    fsync_path,
    log_path,
    namespace_dirname,
    owned_name,
    read_json,
    remove_owned,
    write_namespace_identity,
)
from memcore.storage.mapped import index_file_names, index_prefix, write_index
from memcore.storage.records import (
    COMMIT_BYTE,
    FRAME,
    copy_puts,
    encode_delete,
    encode_put,
    encode_puts,
    mark_batch,
    record_vector_crcs,
    vector_crcs,
    verify_vectors,
)

NONE_BUFFER_BYTES = 1 << 20


class NamespaceFiles:
    """One namespace's directory: header, log and column files of the current generation.

    Not thread-safe by itself (the store's lock guards it). Construct with :meth:`create` or
    :func:`memcore.storage.recovery.open_namespace`.
    """

    def __init__(self, directory: str, ns: tuple, dim: int, generation: int,
                 durability: str, read_only: bool):
        self.directory = directory
        self.ns = ns
        self.dim = dim
        self.generation = generation
        self.durability = durability
        self.read_only = read_only
        self.log_path = log_path(directory, generation)
        self.log_bytes = 0          # bytes in the log file incl. anything buffered
        self.records = 0
        self.checkpoint_rows = 0    # rows covered by the header's (verified) checkpoint
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_records = 0
        #: the header says ``unwitnessed`` (``durability="none"`` may have buffered records
        #: whose ``record_offset`` is in the column while they are not in the log: see
        #: :func:`~memcore.storage.recovery.witnessed_cut`)
        self.unwitnessed = False
        self._fd = None if read_only else os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._mfd: int | None = None    # writes a batch's commit byte (see _write_batch)
        self._vec_fd = None
        self.version = FORMAT_VERSION
        self.checkpoint_id = 0          # format 2: the checkpoint the header names
        self.checkpoint_log_bytes = 0
        self._rfd: int | None = None    # format 2: reads single records
        self.index_entry: dict | None = None   # format 2: the header's hybrid-index entry
        #: format 2: the check file of the in-place fields (:class:`RowChecks`), and what
        #: open's check of it found (:class:`~memcore.storage.columns.CheckReport`)
        self.checks: RowChecks | None = None
        self.check_report = None

    # ---------------------------------------------------------------- create

    @classmethod
    def create(cls, parent: str, ns: tuple, dim: int, durability: str) -> tuple["NamespaceFiles", Columns]:
        """Create a namespace directory atomically (built as ``tmp-*``, then renamed)."""
        name = namespace_dirname(ns)
        final = os.path.join(parent, name)
        tmp = os.path.join(parent, f"{TMP_PREFIX}{name}-{os.getpid()}")
        remove_owned(tmp, "namespace")
        os.makedirs(tmp)
        durable = durability != "none"
        cols = Columns(dim, INITIAL_CAPACITY, tmp, 0)
        open(log_path(tmp, 0), "wb").close()
        if durable:
            cols.sync()
        crcs = write_checkpoint_files(tmp, 0, 0, np.zeros(0, np.bool_), np.zeros(0, np.uint64),
                                      np.zeros(0, np.int64), durable=durable)
        crcs.update(column_crcs(cols, 0))
        write_namespace_identity(tmp, ns, durable=durable)
        _write_ns_header(tmp, ns, dim, 0, 0, 0, 0, durable=durable, crc=crcs,
                         unwitnessed=not durable)
        cols.release()
        os.rename(tmp, final)
        if durable:
            fsync_dir(parent)
        files = cls(final, ns, dim, 0, durability, False)
        files.unwitnessed = not durable
        files.checks = RowChecks(final, 0, False, 0)
        return files, Columns(dim, INITIAL_CAPACITY, final, 0)

    # ---------------------------------------------------------------- format 2 reads

    def read_fd(self) -> int:
        if self._pending:
            self.flush_pending()
        if self._rfd is None:
            self._rfd = os.open(self.log_path, os.O_RDONLY)
        return self._rfd

    def read_put(self, offset: int) -> PutRecord:
        """The PUT record at log ``offset`` (CRC checked; buffered records written first).

        Raises
        ------
        StoreCorruptedError
        """
        return read_put(self.read_fd(), int(offset), self.log_path)

    def verified_put(self, cols: Columns, row: int) -> PutRecord:
        """The PUT record of ``row`` after checking the row's vector against the record's
        ``vector_crc`` (one CRC-32 of ``dim * 4`` bytes): every row a call returns is
        verified before it is served, so a damaged vector never yields a wrong memory.

        Raises
        ------
        StoreCorruptedError
            Naming the vectors file, byte offset and row (or the log and offset).
        """
        offset = int(cols.record_offset[row])
        rec = self.read_put(offset)
        vec = cols.vectors[row]
        if zlib.crc32(vec) != rec.vector_crc:
            verify_vectors(vec[None, :], np.asarray([rec.vector_crc], np.uint32), [row],
                           cols.path("vectors"), [offset], "it was not served")
        return rec

    def key_at(self, offset: int) -> str:
        return self.read_put(offset).key

    def log_array(self) -> np.ndarray:
        """The log as a read-only memory map, ndarray (log_bytes,), uint8."""
        self.read_fd()
        if self.log_bytes == 0:
            return np.zeros(0, np.uint8)
        mm = mmap.mmap(self.read_fd(), self.log_bytes, access=mmap.ACCESS_READ)
        return np.frombuffer(mm, np.uint8)          # through the open fd: never by path

    def decode(self, offsets: np.ndarray, **which: bool) -> dict:
        """:func:`~memcore.storage.checkpoint.decode_puts` of this log's records."""
        return decode_puts(self.log_array(), offsets, self.log_path, **which)

    def checkpoint_due(self, rows: int) -> bool:
        """Whether the log or rows grew past the automatic checkpoint interval."""
        return (self.version >= 2 and not self.read_only
                and (rows - self.checkpoint_rows >= CHECKPOINT_ROWS
                     or self.log_bytes - self.checkpoint_log_bytes >= CHECKPOINT_BYTES))

    # ---------------------------------------------------------------- commits

    def append(self, blob: bytes, cols: Columns, records: int = 1) -> None:
        """Commit ``records`` records (already framed, in ``blob``) according to the
        durability mode."""
        if self.durability == "none":
            if not self.unwitnessed and self.version >= 2:
                self.mark_unwitnessed()
            counts = (self._pending_records + records, self._pending_bytes + len(blob),
                      self.log_bytes + len(blob))
            # one line: an exception (a signal's, an injected one) lands before it or after
            # it, never between the buffered blob and its counts (a blob buffered uncounted
            # would shift every later record's offset when the buffer is written)
            self._pending.append(blob); self._pending_records, self._pending_bytes, self.log_bytes = counts  # noqa: E501,E702
            if self._pending_bytes >= NONE_BUFFER_BYTES:
                try:
                    self.flush_pending()
                except BaseException:            # this commit failed; earlier ones stay pending
                    self._pending.pop()
                    self._pending_records -= records
                    self._pending_bytes -= len(blob)
                    self.log_bytes -= len(blob)
                    raise
            return
        self.flush_pending()
        if self.durability == "fsync":
            cols.sync_vectors()
        self._write_batch(blob, self.log_bytes, records)
        self.log_bytes += len(blob)
        if self.durability == "fsync":
            os.fdatasync(self._fd)

    def mark_unwitnessed(self) -> None:
        """Set ``unwitnessed`` in the namespace header before the first buffered record
        (``durability="none"``): a crash loses buffered records whose rows' ``record_offset``
        is already in the column, so that column no longer witnesses a cut log until a
        writer that writes through has checkpointed (one header write per writer and
        generation)."""
        path = os.path.join(self.directory, NAMESPACE_HEADER)
        head = read_json(path, "namespace header")
        head["unwitnessed"] = 1
        atomic_write_json(path, head, durable=False)
        self.unwitnessed = True

    def _write_batch(self, blob, base: int, records: int) -> None:
        """Append ``blob`` (``records`` records) at log offset ``base`` as one commit. One
        record is atomic by its CRC; several (``put_many``) are written with the first
        record's magic pending (:data:`~memcore.storage.records.PENDING_MAGIC`) and the
        batch's record count in its pad bytes (:func:`~memcore.storage.records.mark_batch`),
        then committed by writing its first byte: a process killed mid-write leaves an
        uncommitted batch that recovery cuts whole, never a prefix of it (``"fsync"`` syncs
        the records before the byte), and the count tells a pending batch from a damaged
        record followed by later commits."""
        length = FRAME.unpack_from(blob, 0)[1] if len(blob) >= FRAME.size else 0
        if len(blob) <= FRAME.size + length:
            _write_all(self._fd, blob, base)
            return
        blob = blob if isinstance(blob, bytearray) else bytearray(blob)
        mark_batch(blob, records)
        _write_all(self._fd, blob, base)
        try:
            if self.durability == "fsync":
                os.fdatasync(self._fd)
            if self._mfd is None:           # pwrite ignores the offset on an O_APPEND fd
                self._mfd = os.open(self.log_path, os.O_WRONLY)
            if os.pwrite(self._mfd, COMMIT_BYTE, base) != 1:
                raise OSError(errno.EIO, "the batch's commit byte was not written")
        except BaseException:
            os.ftruncate(self._fd, base)
            raise

    def commit(self, cols: Columns, first_row: int, keys: Sequence[str], texts: Sequence[str],
               metadata: Sequence[bytes], importance, created_at, updated_at, last_accessed_at,
               access_count, vectors: np.ndarray) -> list[int]:
        """Append the PUT records of rows ``first_row...`` (their vectors and columns are in
        ``cols`` already): the commit point. Returns each record's log offset."""
        base = self.log_bytes
        if len(keys) == 1:                           # put(): skip the batch machinery
            blob = encode_put(first_row, keys[0].encode("utf-8"), texts[0].encode("utf-8"),
                              metadata[0], float(created_at[0]), float(updated_at[0]),
                              float(last_accessed_at[0]), int(access_count[0]), importance[0],
                              zlib.crc32(np.ascontiguousarray(vectors[0], np.float32)))
            offsets = [base]
        else:
            blob, starts = encode_puts(first_row, [k.encode("utf-8") for k in keys],
                                       [t.encode("utf-8") for t in texts], metadata, created_at,
                                       updated_at, last_accessed_at, access_count, importance,
                                       vector_crcs(vectors))
            offsets = (starts + base).tolist()
        self.append(blob, cols, len(keys))
        self.records += len(keys)
        return offsets

    def delete(self, cols: Columns, rows: Sequence[int], keys: Sequence[str]) -> None:
        """Commit the DEL records of ``keys`` at their ``rows`` with one append (several
        records: one batch, all or nothing after a crash, see :meth:`_write_batch`)."""
        self.append(b"".join(encode_delete(row, key.encode("utf-8"))
                             for row, key in zip(rows, keys)), cols, len(keys))
        self.records += len(keys)

    def verified_log(self, vectors: np.ndarray, rows: Sequence[int], offsets: np.ndarray,
                     cols: Columns, what: str) -> bytes:
        """The log's bytes, after checking ``vectors`` (rows ``rows``) against the CRCs of
        their records at ``offsets``: a damaged vector is never copied into a new generation.

        Raises
        ------
        StoreCorruptedError
            Naming the vectors file, offset and row; ``what`` says what was not done. Also
            when one of ``rows`` has a time to live its row check could not verify at open
            (a new generation would check the unverified value as verified).
        """
        self.flush_pending()
        with open(self.log_path, "rb") as f:
            log = f.read(self.log_bytes)
        verify_vectors(vectors, record_vector_crcs(log, offsets), rows, cols.path("vectors"),
                       offsets, what)
        bad = sorted(set(self.check_report.unverified if self.check_report else ())
                     & set(int(r) for r in rows))
        if bad:
            raise StoreCorruptedError(
                f"{self.checks.path} is corrupted at offset {bad[0] * 32}: the time to live of "
                f"row {bad[0]} cannot be verified ({len(bad)} row(s)); {what}; repair() "
                "rewrites the namespace")
        return log

    def flush_pending(self) -> None:
        if self._pending:
            pending, nbytes, nrec = self._pending, self._pending_bytes, self._pending_records
            self._pending, self._pending_bytes, self._pending_records = [], 0, 0   # written once
            try:
                self._write_batch(bytearray(b"".join(pending)), self.log_bytes - nbytes, nrec)
            except BaseException:                           # cut back: still pending
                self._pending, self._pending_bytes, self._pending_records = pending, nbytes, nrec
                raise

    def checkpoint(self, cols: Columns, rows: int, offsets: Sequence[int],
                   keys: KeyIndex | None = None, hybrid: dict | None = None,
                   hybrid_dirty: bool = False) -> None:
        """Verify the rows written since the last checkpoint, fsync everything, then atomically
        record the checkpoint in the header.

        Parameters
        ----------
        cols : Columns
        rows : int
            Rows in use.
        offsets : sequence of int, length rows
            Log offset of each row's PUT record.
        keys : KeyIndex, optional
            Format 2: the key index, persisted with the live flags as checkpoint files
            (written once under new names) before the header naming them replaces the old one.
        hybrid : dict, optional
            Format 2: the namespace's hybrid indexes, ``{structure: (arrays, small_state)}``,
            written as index checkpoint files with the others (the header drops its index
            entry when None).
        hybrid_dirty : bool, default False
            Whether an index changed since it was last written.

        Raises
        ------
        StoreCorruptedError
            If a vector written since the last checkpoint no longer matches its record's
            ``vector_crc``; the header keeps the previous checkpoint (the next open re-checks
            the row).
        """
        if self.read_only:
            return
        self.flush_pending()
        start = min(self.checkpoint_rows, rows)
        if start < rows:
            first = int(offsets[start])
            with open(self.log_path, "rb") as f:
                f.seek(first)
                tail = f.read(self.log_bytes - first)
            part = np.asarray(offsets[start:rows], np.int64)
            verify_vectors(cols.vectors[start:rows], record_vector_crcs(tail, part, first),
                           range(start, rows), cols.path("vectors"), part,
                           "the checkpoint was not written")
        cols.sync()
        if self.checks is not None:
            self.checks.flush()
        os.fsync(self._fd)
        if self.version < 2:
            _write_ns_header(self.directory, self.ns, self.dim, self.generation, self.records,
                             self.log_bytes, rows, durable=True, version=1)
            self.checkpoint_rows = rows
            return
        if rows == self.checkpoint_rows and self.log_bytes == self.checkpoint_log_bytes \
                and not hybrid_dirty:
            return
        c = self.checkpoint_id + 1
        hashes, krows = keys.merged(cols.alive[:rows])
        crcs = write_checkpoint_files(self.directory, self.generation, c, cols.alive[:rows],
                                      hashes, krows, durable=False)
        crcs.update(column_crcs(cols, rows))
        entry = None
        if hybrid:
            index_crcs: dict = {}
            entry = {"checkpoint": c, "structures": {
                index_prefix(key)[2:]: write_index(self.directory, self.generation, c, key,
                                                   arrays, state, durable=True,
                                                   crcs=index_crcs)
                for key, (arrays, state) in hybrid.items()}, "crc": index_crcs}
        for name in checkpoint_names(self.generation, c):
            fsync_path(os.path.join(self.directory, name))
        fsync_dir(self.directory)
        _write_ns_header(self.directory, self.ns, self.dim, self.generation, self.records,
                         self.log_bytes, rows, durable=True, checkpoint=c, live=len(hashes),
                         index=entry, crc=crcs, rowcheck=self.checks is not None,
                         unwitnessed=self.durability == "none")
        self.unwitnessed = self.durability == "none"
        remove_checkpoint(self.directory, self.generation, self.checkpoint_id)
        for name in index_file_names(self.generation, self.index_entry) - \
                index_file_names(self.generation, entry):
            _unlink(os.path.join(self.directory, name))
        self.index_entry = entry
        self.checkpoint_rows, self.checkpoint_id = rows, c
        self.checkpoint_log_bytes = self.log_bytes
        _, keys.hashes, keys.rows = load_checkpoint_files(self.directory, self.generation, c, rows)
        keys.tail.clear()

    def close(self) -> None:
        """Write anything buffered and close the log's descriptors (each forgotten before it
        is closed: an interrupted close never closes a descriptor twice)."""
        if self._fd is not None:
            self.flush_pending()
        for name in ("_fd", "_rfd", "_mfd"):
            fd = getattr(self, name)
            setattr(self, name, None)
            if fd is not None:
                os.close(fd)


def new_key_index(files: NamespaceFiles, cols: Columns, hashes: np.ndarray | None = None,
                  rows: np.ndarray | None = None) -> KeyIndex:
    """The key index of a format-2 namespace (empty unless a checkpoint's arrays are given);
    hash matches are confirmed by the key of the row's record."""
    return KeyIndex(np.zeros(0, np.uint64) if hashes is None else hashes,
                    np.zeros(0, np.int64) if rows is None else rows,
                    lambda row: files.read_put(cols.record_offset[row]).key)


def file_bytes(path: str) -> bytes | None:
    """A small file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_all(fd: int, blob: bytes, committed: int) -> None:
    """Append ``blob`` to the log; on failure (disk full, I/O error) cut the file back to its
    ``committed`` bytes, so that no torn record precedes the next append (which would turn a
    failed write into damage in the middle of the log)."""
    view = memoryview(blob)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.ftruncate(fd, committed)
        raise


def _write_ns_header(directory: str, ns: tuple, dim: int, generation: int, records: int,
                     log_bytes: int, rows: int, *, durable: bool, version: int = FORMAT_VERSION,
                     checkpoint: int = 0, live: int = 0, index: dict | None = None,
                     crc: dict | None = None, rowcheck: bool = True,
                     unwitnessed: bool = False) -> None:
    head = {"format": NAMESPACE_FORMAT, "version": version, "namespace": list(ns),
            "dim": int(dim), "generation": int(generation), "records": int(records),
            "log_bytes": int(log_bytes), "rows": int(rows)}
    if version >= 2:
        head.update(checkpoint=int(checkpoint), live=int(live))
        if crc:
            head["crc"] = {k: int(v) for k, v in crc.items()}
        if index:
            head["index"] = index
        if rowcheck:              # the check file covers every row (open checks them)
            head["rowcheck"] = 1
        if unwitnessed:           # see NamespaceFiles.mark_unwitnessed
            head["unwitnessed"] = 1
    atomic_write_json(os.path.join(directory, NAMESPACE_HEADER), head, durable=durable)


def remove_checkpoint(directory: str, generation: int, checkpoint: int) -> None:
    """Delete the files of a checkpoint a newer header no longer names."""
    for name in checkpoint_names(generation, checkpoint):
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass


def write_generation(directory: str, ns: tuple, dim: int, generation: int,
                     rows: Iterable[tuple], vectors: np.ndarray) -> tuple[Columns, int, int]:
    """Write a complete new generation (log + columns), fsync it, then commit its header.

    ``rows`` yields ``(key, text, meta_bytes, created_at, updated_at, last_accessed_at,
    access_count, importance)`` in row order, ``vectors`` is (n, dim) float32. Until the header
    is replaced the previous generation stays the store (crash-safe compaction/repair).

    Returns
    -------
    (Columns, records, log_bytes) of the new generation.
    """
    rows = list(rows)
    fields = list(zip(*rows)) if rows else [[]] * 8
    blob, starts = encode_puts(0, [k.encode("utf-8") for k in fields[0]],
                          [t.encode("utf-8") for t in fields[1]], list(fields[2]), fields[3],
                          fields[4], fields[5], fields[6], fields[7], vector_crcs(vectors))
    return write_generation_blob(directory, ns, dim, generation, blob, vectors, {
        "created_at": fields[3], "updated_at": fields[4], "last_accessed_at": fields[5],
        "access_count": fields[6], "importance": fields[7]}, list(fields[0]), starts)


def write_generation_blob(directory: str, ns: tuple, dim: int, generation: int, blob,
                          vectors: np.ndarray, columns: dict, keys: Sequence[str],
                          offsets: np.ndarray) -> tuple[Columns, int, int]:
    """:func:`write_generation` from ready records: ``blob`` holds one PUT per row (rows 0..n-1,
    e.g. from :func:`copy_puts`), starting at ``offsets``; ``keys`` are their keys (all
    distinct); ``columns`` maps created_at, updated_at, last_accessed_at, access_count and
    importance to (n,) arrays; vectors are (n, dim) float32. Writes format 2: the columns,
    the log and checkpoint 0 (every row live), fsynced, then the header.

    Returns
    -------
    (Columns, records, log_bytes) of the new generation.
    """
    n = vectors.shape[0]
    write_namespace_identity(directory, ns, durable=True)
    with open(column_path(directory, "vectors", generation), "wb") as f:       # write(): no page fault per 4 KiB
        f.write(np.ascontiguousarray(vectors, np.float32))
        f.flush()
        os.fsync(f.fileno())
    cols = Columns(dim, max(n, 1), directory, generation)
    lpath = log_path(directory, generation)
    if n:
        for name, values in columns.items():
            getattr(cols, name)[:n] = values
        cols.record_offset[:n] = offsets
        cols.alive[:n] = True
    with open(lpath, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    cols.sync()
    write_checks(directory, generation, cols, open_expiry(directory, generation, True), n)
    hashes = key_hashes(list(keys))
    order = np.argsort(hashes, kind="stable")
    crcs = write_checkpoint_files(directory, generation, 0, cols.alive[:n], hashes[order],
                                  order.astype(np.int64), durable=True)
    crcs.update(column_crcs(cols, n))
    _write_ns_header(directory, ns, dim, generation, n, len(blob), n, durable=True,
                     checkpoint=0, live=n, crc=crcs)
    return cols, n, len(blob)


def remove_stale(directory: str, generation: int, checkpoint: int | None = None,
                 index: dict | None = None) -> None:
    """Delete every file of a namespace directory but the header, ``generation``'s files
    (the TTL column and the approximate index included) and (format 2) those of
    ``checkpoint`` and of the hybrid-index entry ``index``."""
    ann = os.path.basename(ann_path(directory, generation))
    keep = {NAMESPACE_HEADER, NAMESPACE_ID, os.path.basename(log_path(directory, generation)),
            os.path.basename(expiry_path(directory, generation)), ann, ann + ".json",
            os.path.basename(check_path(directory, generation)),
            os.path.basename(side_path(directory, generation, "nsid"))}
    keep.update(os.path.basename(column_path(directory, n, generation))
                for n in Columns.NAMES + Columns.NAMES_V2)
    if checkpoint is not None:
        keep |= checkpoint_names(generation, checkpoint)
    keep |= index_file_names(generation, index)
    for entry in os.listdir(directory):
        if entry not in keep and owned_name("namespace", entry):    # never a user's file
            try:
                os.unlink(os.path.join(directory, entry))
            except (IsADirectoryError, FileNotFoundError):
                pass


def close_namespace(files: "NamespaceFiles | None", cols: Columns) -> None:
    """Close a namespace's log (writing anything buffered) and unmap its columns."""
    if files is not None:
        files.close()
        if files.checks is not None:
            files.checks.release()
    cols.release()


def drop_namespace(files: "NamespaceFiles", cols: Columns) -> None:
    """Remove a namespace's directory: renamed away (atomic), then deleted."""
    close_namespace(files, cols)
    parent = os.path.dirname(files.directory)
    trash = os.path.join(parent, TRASH_PREFIX + os.path.basename(files.directory))
    remove_owned(trash, "namespace")
    os.rename(files.directory, trash)
    if files.durability != "none":
        fsync_dir(parent)
    remove_owned(trash, "namespace")


def retire_generation(files: "NamespaceFiles", cols: Columns) -> None:
    """Close and delete the files of a generation a newer one has replaced."""
    close_namespace(files, cols)
    cols.remove_files()
    try:
        os.unlink(files.log_path)
    except FileNotFoundError:
        pass


def write_namespace(parent: str, ns: tuple, durability: str, keys: Sequence[str],
                    texts: Sequence[str], metadata: Sequence[bytes], importance, created_at,
                    updated_at, last_accessed_at, access_count, vectors: np.ndarray,
                    generation: int, *, log: bytes | None = None,
                    offsets: np.ndarray | None = None) -> tuple["NamespaceFiles", Columns, list]:
    """Write a namespace's rows as a complete generation in ``parent``/<its directory>.

    With ``log`` and ``offsets`` (the current log and each row's record offset; vectors
    unchanged: compaction) the records are copied and patched (:func:`copy_puts`), else
    encoded; the bytes are the same. On failure the new generation's files are removed.

    Returns
    -------
    files : NamespaceFiles
    cols : Columns
    offsets : list of int
        Log offset of each row's record.
    """
    dim = vectors.shape[1]
    directory = os.path.join(parent, namespace_dirname(ns))
    os.makedirs(directory, exist_ok=True)
    columns = {"created_at": created_at, "updated_at": updated_at,
               "last_accessed_at": last_accessed_at, "access_count": access_count,
               "importance": importance}
    try:
        if log is not None:
            blob, starts = copy_puts(log, offsets, last_accessed_at, access_count)
        else:
            blob, starts = encode_puts(0, [k.encode("utf-8") for k in keys],
                                       [t.encode("utf-8") for t in texts], list(metadata),
                                       created_at, updated_at, last_accessed_at, access_count,
                                       list(importance), vector_crcs(vectors))
        cols, records, log_bytes = write_generation_blob(directory, ns, dim, generation, blob,
                                                         vectors, columns, keys, starts)
    except BaseException:
        committed = file_bytes(os.path.join(directory, NAMESPACE_HEADER))
        try:
            committed = committed is not None and \
                json.loads(committed).get("generation") == generation
        except ValueError:
            committed = False
        if committed:            # the header already names it: the generation is the store
            raise
        for name in Columns.NAMES_V2:
            for path in (column_path(directory, name, generation),
                         log_path(directory, generation), check_path(directory, generation)):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        raise
    files = NamespaceFiles(directory, ns, dim, generation, durability, False)
    files.records, files.log_bytes = records, log_bytes
    files.checkpoint_rows = len(keys)                    # write_generation_blob's header
    files.checkpoint_log_bytes = log_bytes
    return files, cols, starts.tolist()
