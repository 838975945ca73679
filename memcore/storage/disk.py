"""The disk table: memory-mapped columns, a namespace's files and their commit protocol
(see :mod:`memcore.storage`)."""

from __future__ import annotations

import errno
import json
import mmap
import os
import time
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from memcore.core.rows import MAX_ABS_TIME, MAX_ACCESS_COUNT
from memcore.errors import StoreCorruptedError
from memcore.storage.layout import (
    TMP_PREFIX,
    TRASH_PREFIX,
    fsync_dir,
    fsync_path,
    COLUMNS,
    COLUMNS_V2,
    FORMAT_VERSION,
    NAMESPACE_FORMAT,
    NAMESPACE_HEADER,
    NAMESPACE_ID,
    ann_path,
    atomic_write_json,
    check_version,
    checkpoint_path,
    column_path,
    log_path,
    namespace_dirname,
    namespace_identity,
    owned_name,
    read_json,
    remove_owned,
    write_namespace_identity,
)
from memcore.storage.salvage import lost_rows, quarantine_rows
from memcore.storage.checkpoint import (
    _REPAIR as _REPAIR_HINT,
    CHECKPOINT_BYTES,
    CHECKPOINT_ROWS,
    KeyIndex,
    PutRecord,
    Tail,
    checkpoint_names,
    crc32_of,
    decode_puts,
    key_hashes,
    load_checkpoint_files,
    read_put,
    scan_tail,
    write_checkpoint_files,
)
from memcore.storage.log import Replay, first_bad_vector, scan_log
from memcore.storage.mapped import index_file_names, index_prefix, write_index
from memcore.storage.records import (
    COMMIT_BYTE,
    FRAME,
    OP_PUT,
    PUT_FIXED,
    copy_puts,
    encode_delete,
    encode_put,
    encode_puts,
    record_vector_crcs,
    vector_crcs,
    verify_vectors,
)

INITIAL_CAPACITY = 64
NONE_BUFFER_BYTES = 1 << 20

# ---------------------------------------------------------------------------------- columns

def _capacity_for(rows: int, current: int = 0) -> int:
    cap = max(INITIAL_CAPACITY, current)
    while cap < rows:
        cap *= 2
    return cap


class Columns:
    """The per-row arrays of one namespace, in RAM or memory-mapped from files.

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
    directory, generation : str and int, optional
        Back the arrays by ``<directory>/<name>.<generation>.<suffix>`` files (created or
        extended to ``capacity`` rows) instead of RAM.
    read_only : bool, default False
        Map the files read-only (they are never extended).

    Examples
    --------
    >>> cols = Columns(4, 10); cols.vectors.shape
    (64, 4)
    """

    NAMES = ("vectors",) + tuple(c[0] for c in COLUMNS)
    NAMES_V2 = ("vectors",) + tuple(c[0] for c in COLUMNS_V2)

    def __init__(self, dim: int, capacity: int, directory: str | None = None,
                 generation: int = 0, read_only: bool = False, version: int = FORMAT_VERSION,
                 need: int | None = None):
        self.dim = int(dim)
        self.directory = directory
        self.generation = int(generation)
        self.read_only = read_only
        self.version = version if directory is not None else 1
        self.capacity = int(capacity) if read_only else _capacity_for(capacity)
        self._mm: dict = {}
        try:
            self._map(self.capacity)
        except OSError as err:         # a full disk: map only the ``need`` rows in use
            if read_only or directory is None or need is None or err.errno != errno.ENOSPC:
                raise
            self._map(-(-max(need, 1) // INITIAL_CAPACITY) * INITIAL_CAPACITY)

    @property
    def names(self) -> tuple:
        """The file-backed arrays (format 2 keeps ``alive`` in RAM and maps
        ``record_offset``)."""
        return self.NAMES_V2 if self.version >= 2 else self.NAMES

    def path(self, name: str) -> str:
        return column_path(self.directory, name, self.generation)

    def _spec(self):
        yield "vectors", np.dtype(np.float32), (self.dim,)
        for name, dtype, _ in (COLUMNS_V2 if self.version >= 2 else COLUMNS):
            yield name, np.dtype(dtype), ()

    def _map(self, capacity: int) -> None:
        if self.version >= 2:                     # RAM, restored from checkpoint snapshots
            alive = np.zeros(capacity, np.bool_)
            old = getattr(self, "alive", None)
            if old is not None:          # (a failed growth may have left a longer one)
                k = min(capacity, old.shape[0])
                alive[:k] = old[:k]
            self.alive = alive
        for name, dtype, tail in self._spec():
            shape = (capacity,) + tail
            if self.directory is None:
                arr = np.zeros(shape, dtype)
                old = getattr(self, name, None)
                if old is not None:
                    arr[: old.shape[0]] = old
            else:
                path = self.path(name)
                need = int(np.prod(shape)) * dtype.itemsize
                if self.read_only:
                    have = os.path.getsize(path)
                    rows = have // (dtype.itemsize * (tail[0] if tail else 1))
                    if rows < capacity:
                        raise StoreCorruptedError(
                            f"{path} holds {rows} rows at offset {have}, fewer than the "
                            f"{capacity} the namespace needs")
                    # vectors stay read-only; the other columns are private copy-on-write maps
                    # (a read-only search refreshes access statistics in RAM only)
                    mm = np.memmap(path, dtype=dtype, mode="r" if name == "vectors" else "c",
                                   shape=shape)
                else:
                    _reserve(path, need)
                    mm = np.memmap(path, dtype=dtype, mode="r+", shape=shape)
                self._mm[name] = mm
                arr = mm.view(np.ndarray)        # plain ndarray: what numba dispatches on
            setattr(self, name, arr)
        self.capacity = capacity

    def ensure(self, rows: int) -> None:
        """Grow (by doubling) until ``rows`` rows fit; on a full disk (ENOSPC) only to
        ``rows`` rounded up to 64, so a store stays writable with little space left.

        Raises
        ------
        OSError
            ENOSPC when even that does not fit (nothing committed changes).
        """
        if rows > self.capacity:
            try:
                self._map(_capacity_for(rows, self.capacity))
            except OSError as err:
                if err.errno != errno.ENOSPC or self.directory is None:
                    raise
                self._map(-(-rows // INITIAL_CAPACITY) * INITIAL_CAPACITY)

    def file_capacity(self) -> int:
        """Rows the vectors file can hold (file-backed only)."""
        return os.path.getsize(self.path("vectors")) // (4 * self.dim)

    def sync(self, rows: int | None = None) -> None:
        """fsync every backing file (no-op in RAM)."""
        if self.directory is None or self.read_only:
            return
        for name in self.names:
            self._mm[name].flush()

    def sync_vectors(self) -> None:
        if self.directory is not None and not self.read_only:
            self._mm["vectors"].flush()

    def release(self) -> None:
        """Drop the memory maps (the arrays are unusable afterwards)."""
        for name in self.names:
            arr = self._mm.pop(name, None)
            mm = getattr(arr, "_mmap", None)
            setattr(self, name, None)
            if mm is not None:
                try:
                    mm.close()
                except (BufferError, ValueError):
                    pass   # a view is still alive somewhere; the GC unmaps it later

    def remove_files(self) -> None:
        for name in self.names:
            try:
                os.unlink(self.path(name))
            except FileNotFoundError:
                pass



def _reserve(path: str, need: int) -> None:
    """Grow a file to ``need`` bytes with its disk blocks allocated (``posix_fallocate``), so
    that a full disk raises ENOSPC here (an ``OSError``, mapped to StoreIOError) instead of
    SIGBUS when a store into the memory map later finds no block to page in."""
    with open(path, "ab") as f:
        have = f.tell()
        if have >= need:
            return
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is None:
            f.truncate(need)
            return
        try:
            fallocate(f.fileno(), have, need - have)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                os.ftruncate(f.fileno(), have)     # leave the file as it was
                raise
            f.truncate(need)                       # a file system without fallocate


# ---------------------------------------------------------------------------------- namespace

class NamespaceFiles:
    """One namespace's directory: header, log and column files of the current generation.

    Not thread-safe by itself (the store's lock guards it). Construct with :meth:`create` or
    :meth:`open`.
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
        self._fd = None if read_only else os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._mfd: int | None = None    # writes a batch's commit byte (see _write_batch)
        self._vec_fd = None
        self.version = FORMAT_VERSION
        self.checkpoint_id = 0          # format 2: the checkpoint the header names
        self.checkpoint_log_bytes = 0
        self._rfd: int | None = None    # format 2: reads single records
        self.index_entry: dict | None = None   # format 2: the header's hybrid-index entry

    # ---------------------------------------------------------------- create / open

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
        crcs["record_offset"] = crc32_of(b"")
        write_namespace_identity(tmp, ns, durable=durable)
        _write_ns_header(tmp, ns, dim, 0, 0, 0, 0, durable=durable, crc=crcs)
        cols.release()
        os.rename(tmp, final)
        if durable:
            fsync_dir(parent)
        files = cls(final, ns, dim, 0, durability, False)
        return files, Columns(dim, INITIAL_CAPACITY, final, 0)

    @classmethod
    def open(cls, directory: str, dim: int, durability: str, read_only: bool, *,
             salvage: bool = False, full: bool = False
             ) -> tuple["NamespaceFiles", Columns, "Replay | OpenState"]:
        """Open and recover a namespace directory (see the module docstring, Recovery).

        A read-only open races the writer (no lock): a checkpoint or compaction may replace
        the files its header named while it reads them. Whenever an open fails and the
        header changed meanwhile (or vanished), it is read again (bounded, with short
        sleeps): only damage seen under a stable header is an error.

        Raises
        ------
        StoreCorruptedError, FormatVersionError
        FileNotFoundError
            The namespace directory vanished under a read-only open (the store's writer
            cleared it or replaced the epoch).
        """
        if not read_only or salvage or full:
            return cls._open_once(directory, dim, durability, read_only, salvage=salvage,
                                  full=full)
        hpath = os.path.join(directory, NAMESPACE_HEADER)
        for attempt in range(8):
            before = _file_bytes(hpath)
            try:
                return cls._open_once(directory, dim, durability, True)
            except (StoreCorruptedError, FileNotFoundError):
                after = _file_bytes(hpath)
                if after is None and not os.path.isdir(directory):
                    raise FileNotFoundError(errno.ENOENT, "the namespace vanished",
                                            directory) from None
                if after == before or attempt == 7:
                    raise
            time.sleep(0.001 * 2 ** attempt)
        raise AssertionError("unreachable")

    @classmethod
    def _open_once(cls, directory: str, dim: int, durability: str, read_only: bool, *,
                   salvage: bool = False, full: bool = False
                   ) -> tuple["NamespaceFiles", Columns, "Replay | OpenState"]:
        hpath = os.path.join(directory, NAMESPACE_HEADER)
        try:
            h = read_json(hpath, "namespace header")
        except FileNotFoundError:
            raise StoreCorruptedError(f"{hpath} is missing (offset 0)") from None
        check_version(h, hpath, NAMESPACE_FORMAT)
        for name in ("dim", "generation", "records", "log_bytes", "rows"):
            v = h.get(name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise StoreCorruptedError(f"{hpath} lacks a valid {name!r} (got {v!r})")
        raw_ns = h.get("namespace")
        if (not isinstance(raw_ns, list) or not raw_ns
                or not all(isinstance(s, str) and s for s in raw_ns)):
            raise StoreCorruptedError(f"{hpath} lacks a valid 'namespace' (got {raw_ns!r})")
        ns = tuple(raw_ns)
        if namespace_dirname(ns) != os.path.basename(directory):
            raise StoreCorruptedError(
                f"{hpath} names namespace {ns!r}, which does not belong in directory "
                f"{os.path.basename(directory)!r}")
        if h["dim"] != dim:
            raise StoreCorruptedError(f"{hpath} has dim {h['dim']}, the store header says {dim}")
        if h["version"] >= 2 and not (salvage or full):
            return cls._open_v2(directory, h, ns, dim, durability, read_only)
        gen = h["generation"]
        lpath = log_path(directory, gen)
        data = _read_log(lpath, 0)[1]
        rep = scan_log(data, lpath, 0 if salvage else h["log_bytes"], salvage=salvage)
        if not read_only and not salvage and rep.end < len(data):
            _cut_torn_tail(lpath, rep.end, durability)
        vec_path = column_path(directory, "vectors", gen)
        have_rows = _vector_rows(vec_path, dim)
        if have_rows < rep.rows and not salvage:
            raise StoreCorruptedError(
                f"{vec_path} ends at offset {have_rows * dim * 4}, before row {rep.rows} that "
                f"the log commits")
        if read_only:
            cap, short = _file_rows_min(directory, gen, have_rows)
            if cap < rep.rows:
                raise StoreCorruptedError(
                    f"{short} holds only {cap} rows (it ends at offset "
                    f"{os.path.getsize(short)}), but the log commits {rep.rows}")
            cols = Columns(dim, cap, directory, gen, read_only=True, version=h["version"])
        else:
            cols = Columns(dim, _capacity_for(max(rep.rows, 1), have_rows), directory, gen,
                           version=h["version"])
        files = cls(directory, ns, dim, gen, durability, read_only)
        files.version = h["version"]
        files.records = rep.records
        files.log_bytes = rep.end
        files.checkpoint_rows = min(h["rows"], rep.rows)
        if not salvage:
            start = files.checkpoint_rows          # rows since the last verified checkpoint
            try:
                verify_vectors(cols.vectors[start:rep.rows],
                               np.asarray(rep.vector_crc[start:rep.rows], np.uint32),
                               range(start, rep.rows), vec_path,
                               rep.record_offset[start:rep.rows], "the store was not opened")
            except StoreCorruptedError:
                files.close()
                cols.release()
                raise
        if not read_only and h["version"] < 2:
            remove_stale(directory, gen)
        return files, cols, rep

    @classmethod
    def _open_v2(cls, directory: str, h: dict, ns: tuple, dim: int, durability: str,
                 read_only: bool) -> tuple["NamespaceFiles", Columns, "OpenState"]:
        """Open a format-2 namespace: map the files, load the checkpoint (live flags, key
        index) and replay only the log records after it (see the module docstring)."""
        gen, ck_rows, ck_bytes = h["generation"], h["rows"], h["log_bytes"]
        ck = h.get("checkpoint")
        hpath = os.path.join(directory, NAMESPACE_HEADER)
        if not isinstance(ck, int) or isinstance(ck, bool) or ck < 0:
            raise StoreCorruptedError(f"{hpath} lacks a valid 'checkpoint' (got {ck!r})")
        lpath = log_path(directory, gen)
        size, data = _read_log(lpath, ck_bytes)
        if size < ck_bytes:
            raise StoreCorruptedError(
                f"{lpath} is corrupted at offset {size}: it ends there, before its last "
                f"checkpoint at {ck_bytes} (the file was truncated); {_REPAIR_HINT}")
        tail = scan_tail(data, ck_bytes, lpath, ck_rows)
        if not read_only and tail.end < size:
            _cut_torn_tail(lpath, tail.end, durability)
        m = len(tail.put_keys)
        rows = ck_rows + m
        vec_path = column_path(directory, "vectors", gen)
        have_rows = _vector_rows(vec_path, dim)
        if have_rows < rows:
            raise StoreCorruptedError(
                f"{vec_path} ends at offset {have_rows * dim * 4}, before row {rows} that "
                f"the log commits")
        crcs = h.get("crc")
        if crcs is not None and not (isinstance(crcs, dict) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in crcs.values())):
            raise StoreCorruptedError(f"{hpath} has an invalid 'crc' entry (got {crcs!r})")
        alive0, hashes, krows = load_checkpoint_files(directory, gen, ck, ck_rows, crcs)
        if read_only:
            cap, short = _file_rows_min(directory, gen, have_rows, COLUMNS_V2)
            if cap < rows:
                raise StoreCorruptedError(
                    f"{short} holds only {cap} rows (it ends at offset "
                    f"{os.path.getsize(short)}), but the log commits {rows}")
            cols = Columns(dim, cap, directory, gen, read_only=True, version=2)
        else:
            cols = Columns(dim, _capacity_for(max(rows, 1), have_rows), directory, gen,
                           version=2, need=rows)
        if crcs and "record_offset" in crcs and \
                crc32_of(cols.record_offset[:ck_rows]) != crcs["record_offset"]:
            cols.release()
            raise StoreCorruptedError(
                f"{cols.path('record_offset')} fails its CRC-32 over its first {ck_rows} rows "
                f"(offset 0): the column file was damaged; {_REPAIR_HINT}")
        files = cls(directory, ns, dim, gen, durability, read_only)
        files.version = 2
        files.records = h["records"] + tail.records
        files.log_bytes = tail.end
        files.checkpoint_rows = ck_rows
        files.checkpoint_id = ck
        files.checkpoint_log_bytes = ck_bytes
        files.index_entry = _index_entry(h, hpath, ck)
        files._read_fd()         # now: a compaction by another process may delete this log
        try:
            cols.alive[:ck_rows] = alive0
            if m:
                _adopt_tail(cols, tail, ck_rows, read_only)
                verify_vectors(cols.vectors[ck_rows:rows],
                               np.asarray(tail.put_fixed["vector_crc"], np.uint32),
                               range(ck_rows, rows), vec_path, tail.put_offsets,
                               "the store was not opened")
            _restore_invalid_stats(files, cols, rows)
            keys = new_key_index(files, cols, hashes, krows)
            events = _replay_keys(keys, cols.alive, tail, ck_rows, lpath)
        except BaseException:
            files.close()
            cols.release()
            raise
        if not read_only:
            remove_stale(directory, gen, ck, files.index_entry)
        return files, cols, OpenState(keys, rows, tail, events)

    # ---------------------------------------------------------------- format 2 reads

    def _read_fd(self) -> int:
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
        return read_put(self._read_fd(), int(offset), self.log_path)

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
        self._read_fd()
        if self.log_bytes == 0:
            return np.zeros(0, np.uint8)
        mm = mmap.mmap(self._read_fd(), self.log_bytes, access=mmap.ACCESS_READ)
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

    def append(self, blob: bytes, cols: Columns) -> None:
        """Commit records (already framed) according to the durability mode."""
        if self.durability == "none":
            self._pending.append(blob)
            self._pending_bytes += len(blob)
            self.log_bytes += len(blob)
            if self._pending_bytes >= NONE_BUFFER_BYTES:
                try:
                    self.flush_pending()
                except BaseException:            # this commit failed; earlier ones stay pending
                    self._pending.pop()
                    self._pending_bytes -= len(blob)
                    self.log_bytes -= len(blob)
                    raise
            return
        self.flush_pending()
        if self.durability == "fsync":
            cols.sync_vectors()
        self._write_batch(blob, self.log_bytes)
        self.log_bytes += len(blob)
        if self.durability == "fsync":
            os.fdatasync(self._fd)

    def _write_batch(self, blob, base: int) -> None:
        """Append ``blob`` at log offset ``base`` as one commit. One record is atomic by its
        CRC; several (``put_many``) are written with the first record's magic pending
        (:data:`~memcore.storage.records.PENDING_MAGIC`), then committed by writing its
        first byte: a process killed mid-write leaves an uncommitted batch that recovery
        cuts whole, never a prefix of it (``"fsync"`` syncs the records before the byte)."""
        length = FRAME.unpack_from(blob, 0)[1] if len(blob) >= FRAME.size else 0
        if len(blob) <= FRAME.size + length:
            _write_all(self._fd, blob, base)
            return
        blob = blob if isinstance(blob, bytearray) else bytearray(blob)
        blob[0] = 0
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
        self.append(blob, cols)
        self.records += len(keys)
        return offsets

    def delete(self, cols: Columns, rows: Sequence[int], keys: Sequence[str]) -> None:
        """Commit the DEL records of ``keys`` at their ``rows`` with one append (several
        records: one batch, all or nothing after a crash, see :meth:`_write_batch`)."""
        self.append(b"".join(encode_delete(row, key.encode("utf-8"))
                             for row, key in zip(rows, keys)), cols)
        self.records += len(keys)

    def verified_log(self, vectors: np.ndarray, rows: Sequence[int], offsets: np.ndarray,
                     cols: Columns, what: str) -> bytes:
        """The log's bytes, after checking ``vectors`` (rows ``rows``) against the CRCs of
        their records at ``offsets``: a damaged vector is never copied into a new generation.

        Raises
        ------
        StoreCorruptedError
            Naming the vectors file, offset and row; ``what`` says what was not done.
        """
        self.flush_pending()
        with open(self.log_path, "rb") as f:
            log = f.read(self.log_bytes)
        verify_vectors(vectors, record_vector_crcs(log, offsets), rows, cols.path("vectors"),
                       offsets, what)
        return log

    def flush_pending(self) -> None:
        if self._pending:
            pending, nbytes = self._pending, self._pending_bytes
            self._pending, self._pending_bytes = [], 0      # never written twice
            try:
                self._write_batch(bytearray(b"".join(pending)), self.log_bytes - nbytes)
            except BaseException:                           # cut back: still pending
                self._pending, self._pending_bytes = pending, nbytes
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
        crcs["record_offset"] = crc32_of(cols.record_offset[:rows])
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
                         index=entry, crc=crcs)
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


@dataclass
class OpenState:
    """What opening a format-2 namespace recovers beside its files and columns."""

    keys: KeyIndex
    rows: int
    tail: Tail
    #: the tail's effect in log order: ``(row, killed row or -1)`` per PUT, ``(-1, row)`` per DEL
    events: list


def _adopt_tail(cols: Columns, tail: Tail, first: int, read_only: bool) -> None:
    """Write the columns of the rows the log tail commits (RAM copies when read-only)."""
    f = tail.put_fixed
    m = f.shape[0]
    sl = slice(first, first + m)
    values = {"created_at": f["created_at"], "updated_at": f["updated_at"],
              "importance": f["importance"].astype(np.float32),
              "record_offset": tail.put_offsets,
              "last_accessed_at": np.fmax(cols.last_accessed_at[sl], f["last_accessed_at"]),
              "access_count": np.maximum(cols.access_count[sl], f["access_count"])}
    for name, val in values.items():
        arr = getattr(cols, name)
        if not arr.flags.writeable:
            arr = np.array(arr)
            setattr(cols, name, arr)
        arr[sl] = val
    cols.alive[sl] = True


def _restore_invalid_stats(files: NamespaceFiles, cols: Columns, rows: int) -> None:
    """Validate the numeric columns of every row on open (:func:`invalid_stats`: timestamps
    finite and in range, ``access_count`` and importance in range); a damaged value is
    replaced by its row's PUT record (CRC checked), with one warning."""
    bad = invalid_stats(cols, rows)
    if not bad.shape[0]:
        return
    import logging

    logging.getLogger("memcore").warning(
        "%s: %d row(s) held invalid lifecycle fields or access statistics (the first row %d); "
        "restored from their log records", files.directory, bad.shape[0], int(bad[0]))
    fd = files._read_fd()
    for row in bad.tolist():
        off = int(cols.record_offset[row])
        files.read_put(off)                                   # CRC checked
        f = PUT_FIXED.unpack_from(os.pread(fd, FRAME.size + PUT_FIXED.size, off), FRAME.size)
        for name, val in (("created_at", f[2]), ("updated_at", f[3]),
                          ("last_accessed_at", f[4]), ("access_count", f[5]),
                          ("importance", f[6])):
            arr = getattr(cols, name)
            if not arr.flags.writeable:
                arr = np.array(arr)
                setattr(cols, name, arr)
            arr[row] = val


def _index_entry(h: dict, hpath: str, checkpoint: int) -> dict | None:
    entry = h.get("index")
    if entry is None:
        return None
    if (not isinstance(entry, dict) or entry.get("checkpoint") != checkpoint
            or not isinstance(entry.get("structures"), dict)):
        raise StoreCorruptedError(f"{hpath} has an invalid 'index' entry (got {entry!r})")
    return entry


def _replay_keys(keys: KeyIndex, alive: np.ndarray, tail: Tail, first: int, path: str) -> list:
    """Apply the tail's PUT and DEL records to the key index and the live flags; returns
    :attr:`OpenState.events`."""
    pre = keys.lookup_many(tail.put_keys, alive)      # the checkpoint's rows of the keys
    live = keys.tail
    events = []
    pi = di = 0
    for op in tail.ops.tolist():
        if op == OP_PUT:
            k = tail.put_keys[pi]
            old = live.get(k)
            if old is None:
                p = pre[pi]
                old = p if p is not None and alive[p] else None
            if old is not None:
                alive[old] = False
            live[k] = first + pi
            events.append((first + pi, -1 if old is None else old))
            pi += 1
        else:
            k, row = tail.del_keys[di], tail.del_rows[di]
            old = keys.lookup(k, alive)
            if old != row:
                raise StoreCorruptedError(
                    f"{path} holds a DEL record for {k!r} naming row {row}, which is not its "
                    f"live row; {_REPAIR_HINT}")
            alive[row] = False
            live.pop(k, None)
            events.append((-1, row))
            di += 1
    return events


def _file_bytes(path: str) -> bytes | None:
    """A small file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _read_log(path: str, start: int) -> tuple[int, bytes]:
    """The size of the log at ``path`` and its bytes from offset ``start``.

    Raises
    ------
    StoreCorruptedError
        If the file is missing.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(start)
            return size, f.read()
    except FileNotFoundError:
        raise StoreCorruptedError(f"{path} is missing (offset 0)") from None


def _vector_rows(path: str, dim: int) -> int:
    """How many whole float32 rows of ``dim`` the vector file at ``path`` holds.

    Raises
    ------
    StoreCorruptedError
        If the file is missing.
    """
    try:
        return os.path.getsize(path) // (4 * dim)
    except FileNotFoundError:
        raise StoreCorruptedError(f"{path} is missing (offset 0)") from None


def _cut_torn_tail(path: str, end: int, durability: str) -> None:
    """Truncate a log to ``end``, the end of its last committed record (a torn tail)."""
    os.truncate(path, end)
    if durability == "fsync":
        fsync_path(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _file_rows_min(directory: str, generation: int, have_rows: int,
                   columns: tuple = COLUMNS) -> int:
    """Rows every column file can hold (read-only opens map what exists) and the path of
    the file that holds the fewest."""
    rows, short = have_rows, column_path(directory, "vectors", generation)
    for name, dtype, _ in columns:
        path = column_path(directory, name, generation)
        try:
            have = os.path.getsize(path) // np.dtype(dtype).itemsize
        except FileNotFoundError:
            raise StoreCorruptedError(f"{path} is missing (offset 0)") from None
        if have < rows:
            rows, short = have, path
    return max(rows, 1), short



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
                     crc: dict | None = None) -> None:
    head = {"format": NAMESPACE_FORMAT, "version": version, "namespace": list(ns),
            "dim": int(dim), "generation": int(generation), "records": int(records),
            "log_bytes": int(log_bytes), "rows": int(rows)}
    if version >= 2:
        head.update(checkpoint=int(checkpoint), live=int(live))
        if crc:
            head["crc"] = {k: int(v) for k, v in crc.items()}
        if index:
            head["index"] = index
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
    hashes = key_hashes(list(keys))
    order = np.argsort(hashes, kind="stable")
    crcs = write_checkpoint_files(directory, generation, 0, cols.alive[:n], hashes[order],
                                  order.astype(np.int64), durable=True)
    crcs["record_offset"] = crc32_of(cols.record_offset[:n])
    _write_ns_header(directory, ns, dim, generation, n, len(blob), n, durable=True,
                     checkpoint=0, live=n, crc=crcs)
    return cols, n, len(blob)


def _verified_checkpoint(directory: str, h: dict) -> tuple[np.ndarray | None, int]:
    """The live flags of a header's checkpoint when its CRC verifies them (else None), and
    the log bytes the checkpoint covers."""
    ck, rows, crcs = h.get("checkpoint"), h.get("rows"), h.get("crc")
    gen, nbytes = h.get("generation"), h.get("log_bytes")
    if (h.get("version", 0) < 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          for v in (ck, rows, gen, nbytes))
            or not isinstance(crcs, dict) or "alive" not in crcs):
        return None, 0
    try:
        alive = np.fromfile(checkpoint_path(directory, "alive", gen, ck), np.bool_)
    except (OSError, ValueError):
        return None, 0
    if alive.shape[0] != rows or crc32_of(alive) != crcs["alive"]:
        return None, 0
    return alive, nbytes


def repair_namespace(directory: str, dim: int, embed=None) -> dict:
    """Rewrite a namespace as a new generation from every intact record (crash-safe).

    Records with a bad frame, CRC or row rule are skipped; a live key whose vector fails its
    record's CRC (or lies past the end of the vectors file) is re-embedded from its logged
    text when ``embed`` (``texts -> (n, dim) float32``) is given and the result matches the
    record's CRC bit for bit (an exact repair), else dropped -- never served with another
    row's vector. Lifecycle fields come from the records, access statistics from the
    column files when they are valid (finite, in range).

    Repair never resurrects: a damaged record may have been a DEL or a replacing PUT, so a key
    is kept only when something vouches for its last intact record. Rows the last checkpoint
    covers are vouched for by its live flags (when their CRC verifies): a row the checkpoint
    holds dead stays dead, whatever record was lost. Past the checkpoint a key is vouched for
    when its last intact record follows every damaged stretch. Every other key is dropped
    from the store and listed in ``"uncertain"``; when it may still be current (past the
    checkpoint) its last intact version (with its vector) is written to ``quarantine.<n>.jsonl`` in the store's root directory (an
    :meth:`~memcore.LongTermMemory.export_jsonl` file: inspect it, ``import_jsonl`` what is
    still wanted). A row the checkpoint holds live whose record was lost is listed by key
    when the checkpoint's key hash confirms the key its damaged record still holds, and its
    last version is set aside too when its vector matches (:mod:`memcore.storage.salvage`).

    Returns
    -------
    dict
        ``{"namespace": tuple, "kept": live keys kept, "dropped": live keys dropped,
        "skipped": damaged log stretches skipped, "uncertain": sorted keys dropped because
        nothing vouches for them (a damaged record may have deleted or replaced them, or
        their vector is damaged, or their record was lost), "lost_rows": rows the checkpoint
        holds live whose record was lost, "lost_keys": their keys (None where nothing
        confirms one), "quarantine": the path of the quarantine file written, or None,
        "reembedded": damaged vectors re-embedded exactly}``.

    Raises
    ------
    StoreCorruptedError
        If the namespace header itself is unreadable (nothing names the namespace).
    FormatVersionError
        If the header is of a newer format.

    Examples
    --------
    >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
    >>> from memcore.storage.layout import StoreRoot
    >>> root = tempfile.mkdtemp()
    >>> with LongTermMemory(root, HashingEmbedder(dim=8)) as ltm:
    ...     _ = ltm.put("ns", "k", "some text")
    >>> ns_dir = StoreRoot.open(root, read_only=True, lock_timeout=0).namespace_dirs()[0]
    >>> repair_namespace(ns_dir, 8)    # doctest: +NORMALIZE_WHITESPACE
    {'namespace': ('ns',), 'kept': 1, 'dropped': 0, 'skipped': 0, 'uncertain': [],
     'lost_rows': 0, 'lost_keys': [], 'quarantine': None, 'reembedded': 0}
    """
    hpath = os.path.join(directory, NAMESPACE_HEADER)
    try:
        h = read_json(hpath, "namespace header")
        check_version(h, hpath, NAMESPACE_FORMAT)
    except (FileNotFoundError, StoreCorruptedError):
        h = {}
    ns = h.get("namespace")
    ns = tuple(ns) if isinstance(ns, list) and all(isinstance(x, str) for x in ns) else ()
    gen = h.get("generation")
    if ns and isinstance(gen, int) and not isinstance(gen, bool) and gen >= 0 \
            and namespace_dirname(ns) == os.path.basename(directory) and h.get("dim") == dim:
        return _repair(directory, ns, dim, gen, h, embed)
    # the header is lost or damaged: the namespace from namespace.json (or the directory's
    # name), the newest generation's log; every record replayed, nothing checkpointed trusted
    ns = namespace_identity(directory)
    if ns is None:
        raise StoreCorruptedError(f"{hpath} is damaged at offset 0 and nothing else names the "
                                  "namespace of its directory; it cannot be repaired")
    gens = [int(e[4:]) for e in os.listdir(directory) if e.startswith("log.") and e[4:].isdigit()]
    return _repair(directory, ns, dim, max(gens, default=0), {}, embed)


def _repair(directory: str, ns: tuple, dim: int, gen: int, h: dict, embed=None) -> dict:
    lpath = log_path(directory, gen)
    try:
        with open(lpath, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    ck_alive, ck_bytes = _verified_checkpoint(directory, h)
    rep = scan_log(data, lpath, min(ck_bytes, len(data)), salvage=True)
    try:
        have = os.path.getsize(column_path(directory, "vectors", gen)) // (4 * dim)
    except FileNotFoundError:
        have = 0
    vecs = (np.fromfile(column_path(directory, "vectors", gen), dtype=np.float32, count=have * dim)
            .reshape(have, dim) if have else np.zeros((0, dim), np.float32))
    stats = {}
    for name, dtype in (("last_accessed_at", np.float64), ("access_count", np.int64)):
        try:
            stats[name] = np.fromfile(column_path(directory, name, gen), dtype=dtype)
        except (FileNotFoundError, ValueError):
            stats[name] = np.zeros(0, dtype)
    # the last damaged stretch nothing else vouches across: past the checkpoint, or anywhere
    # when the checkpoint's live flags cannot be verified
    blind = [x for x in rep.damaged if ck_alive is None or x >= ck_bytes]
    last_damage = max(blind) if blind else -1
    ck_rows = 0 if ck_alive is None else ck_alive.shape[0]
    keep, uncertain, quarantine = [], [], []
    fixed: dict = {}                      # replay index -> re-embedded vector (exact)
    for key, idx in sorted(rep.keys.items(), key=lambda kv: kv[1]):
        fr = rep.file_rows[idx]
        vec_ok = fr < have and zlib.crc32(vecs[fr].tobytes()) == rep.vector_crc[idx]
        if not vec_ok and embed is not None:
            try:
                v = np.ascontiguousarray(embed([rep.texts[idx]])[0], np.float32)
            except Exception:             # a failing embedder repairs nothing
                v = None
            if v is not None and v.shape == (dim,) and zlib.crc32(v) == rep.vector_crc[idx]:
                fixed[idx] = v
                vec_ok = True
        if fr < ck_rows and not ck_alive[fr]:
            uncertain.append(key)           # certainly not current: deleted or replaced
        elif rep.record_offset[idx] < last_damage:
            uncertain.append(key)           # maybe current: kept aside, not served
            if vec_ok:
                quarantine.append(idx)
        elif not vec_ok:
            uncertain.append(key)
        else:
            keep.append(idx)
    lost = [] if ck_alive is None else lost_rows(  # keys confirmed by the checkpoint's hashes
        directory, gen, h, data, ck_alive,
        {rep.file_rows[i]: rep.key_of[i] for i in range(rep.rows)}, vecs)
    uncertain += [lr.key for lr in lost if lr.key is not None and lr.key not in uncertain]

    def row_of(idx):
        fr = rep.file_rows[idx]
        la, ac = float(rep.last_accessed_at[idx]), int(rep.access_count[idx])
        if fr < stats["last_accessed_at"].shape[0]:
            got = float(stats["last_accessed_at"][fr])
            if valid_time(got):
                la = max(la, got)
        if fr < stats["access_count"].shape[0]:
            got = int(stats["access_count"][fr])
            if 0 <= got <= MAX_ACCESS_COUNT:
                ac = max(ac, got)
        return (rep.key_of[idx], rep.texts[idx], rep.metadata[idx], rep.created_at[idx],
                rep.updated_at[idx], la, ac, rep.importance[idx])

    def vectors_of(idxs):
        if not idxs:
            return np.zeros((0, dim), np.float32)
        return np.stack([fixed[i] if i in fixed else vecs[rep.file_rows[i]] for i in idxs])

    aside, aside_vecs = quarantine_rows(lost)
    qpath = None
    if quarantine or aside:
        qpath = _write_quarantine(
            directory, ns, dim, gen, [row_of(i) for i in quarantine] + aside,
            np.concatenate([vectors_of(quarantine)] + [v[None] for v in aside_vecs]))
    rows = [row_of(i) for i in keep]
    new_vecs = vectors_of(keep)
    cols, _, _ = write_generation(directory, ns, dim, gen + 1, rows, new_vecs)
    cols.release()
    remove_stale(directory, gen + 1, 0)
    unknown = sum(lr.key is None for lr in lost)
    return {"namespace": ns, "kept": len(keep), "dropped": len(uncertain) + unknown,
            "skipped": rep.skipped, "uncertain": uncertain, "lost_rows": len(lost),
            "lost_keys": [lr.key for lr in lost], "quarantine": qpath,
            "reembedded": len(fixed)}




def valid_time(t) -> bool:
    """Whether a timestamp is finite and within :data:`MAX_ABS_TIME`."""
    return bool(np.isfinite(t)) and abs(t) <= MAX_ABS_TIME


def _write_quarantine(directory: str, ns: tuple, dim: int, gen: int, rows: list,
                      vectors: np.ndarray) -> str:
    """Write the memories repair could not vouch for to ``<root>/quarantine.<n>.jsonl`` (an
    export file; ``n`` the first number not taken) and return its path."""

    from memcore.storage.jsonl import export_jsonl
    from memcore.storage.layout import STORE_HEADER
    from memcore.types import MemoryTier, StoredMemory

    root = os.path.dirname(os.path.dirname(directory))
    try:
        embedder = read_json(os.path.join(root, STORE_HEADER), "store header").get("embedder")
    except (OSError, StoreCorruptedError):
        embedder = None
    n = 0
    while os.path.exists(path := os.path.join(root, f"quarantine.{n}.jsonl")):
        n += 1
    mems = [(StoredMemory(namespace=ns, key=k, text=t, importance=float(imp),
                          metadata=json.loads(meta or b"{}"), created_at=float(ca),
                          updated_at=float(ua), last_accessed_at=float(la),
                          access_count=int(ac), tier=MemoryTier.LONG), vectors[i])
            for i, (k, t, meta, ca, ua, la, ac, imp) in enumerate(rows)]
    export_jsonl(path, str(embedder or "unknown"), dim, mems)
    return path


def expiry_path(directory: str, generation: int) -> str:
    """The TTL column of a generation: ``(capacity, 2)`` float64 ``[expires_at, ttl]`` (Unix
    seconds, seconds; 0: never expires), written by :mod:`memcore.stores.long` like the other
    columns (before the log commit, fsynced at checkpoints). Only a namespace that ever had
    a time to live has the file; a missing file means nothing expires."""
    return os.path.join(directory, f"expiry.{generation}.f64")


def remove_stale(directory: str, generation: int, checkpoint: int | None = None,
                 index: dict | None = None) -> None:
    """Delete every file of a namespace directory but the header, ``generation``'s files
    (the TTL column and the approximate index included) and (format 2) those of
    ``checkpoint`` and of the hybrid-index entry ``index``."""
    ann = os.path.basename(ann_path(directory, generation))
    keep = {NAMESPACE_HEADER, NAMESPACE_ID, os.path.basename(log_path(directory, generation)),
            os.path.basename(expiry_path(directory, generation)), ann, ann + ".json"}
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
        committed = _file_bytes(os.path.join(directory, NAMESPACE_HEADER))
        try:
            committed = committed is not None and \
                json.loads(committed).get("generation") == generation
        except ValueError:
            committed = False
        if committed:            # the header already names it: the generation is the store
            raise
        for name in Columns.NAMES_V2:
            for path in (column_path(directory, name, generation),
                         log_path(directory, generation)):
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


def bad_rows(vectors: np.ndarray, crcs: np.ndarray) -> list[int]:
    """Every row whose float32 bytes do not have the expected CRC-32 (ascending)."""
    n = vectors.shape[0]
    if n == 0:
        return []
    raw = np.ascontiguousarray(vectors, np.float32).view(np.uint8).reshape(n, -1)
    crc = zlib.crc32
    return [i for i, want in enumerate(np.asarray(crcs, np.uint32).tolist())
            if crc(raw[i]) != want]


def verify_namespace(files: "NamespaceFiles", cols: Columns, rows: int) -> dict:
    """Check every checksum of an open format-2 namespace without changing anything: the
    whole log (frames, CRCs, row rules), each row's ``record_offset`` and live flag against
    the log, every live row's vector against its record's ``vector_crc``, and the access
    statistics (finite, in range).

    Returns
    -------
    dict
        ``{"rows", "live", "bad_rows": rows whose vector fails its CRC, "errors": messages}``
        -- intact when both lists are empty.
    """
    errors: list[str] = []
    files.flush_pending()
    with open(files.log_path, "rb") as f:
        data = f.read(files.log_bytes)
    try:
        rep = scan_log(data, files.log_path, len(data))
    except StoreCorruptedError as err:
        return {"rows": rows, "live": int(np.count_nonzero(cols.alive[:rows])), "bad_rows": [],
                "errors": [str(err)]}
    if rep.rows != rows:
        errors.append(f"{files.log_path} commits {rep.rows} rows, the namespace holds {rows}")
    n = min(rep.rows, rows)
    offs = np.asarray(rep.record_offset[:n], np.int64)
    wrong = np.flatnonzero(np.asarray(cols.record_offset[:n], np.int64) != offs)
    if wrong.shape[0]:
        errors.append(f"{cols.path('record_offset')} is corrupted at offset "
                      f"{int(wrong[0]) * 8}: row {int(wrong[0])} does not point at its record")
    alive = np.ones(rep.rows, np.bool_)
    if len(rep.dead):
        alive[np.asarray(rep.dead, np.int64)] = False
    diff = np.flatnonzero(alive[:n] != cols.alive[:n])
    if diff.shape[0]:
        errors.append(f"the live flags of {files.directory} disagree with its log at row "
                      f"{int(diff[0])}")
    live = np.flatnonzero(alive[:n])
    crcs = np.asarray(rep.vector_crc, np.uint32)[live]
    bad = [int(live[i]) for i in bad_rows(cols.vectors[live], crcs)] if live.shape[0] else []
    if bad:
        errors.append(f"{cols.path('vectors')} is corrupted at offset "
                      f"{bad[0] * cols.dim * 4}: {len(bad)} row(s) fail their records' "
                      f"vector CRC, the first row {bad[0]}")
    stats = invalid_stats(cols, n)
    if stats.shape[0]:
        errors.append(f"{files.directory}: {stats.shape[0]} row(s) hold invalid access "
                      f"statistics or lifecycle fields, the first row {int(stats[0])}")
    return {"rows": rows, "live": int(live.shape[0]), "bad_rows": bad, "errors": errors}


def invalid_stats(cols: Columns, rows: int) -> np.ndarray:
    """Rows (ascending int64) whose timestamps are not finite or beyond
    :data:`MAX_ABS_TIME`, whose ``access_count`` is outside [0, :data:`MAX_ACCESS_COUNT`]
    or whose importance is outside [0, 1] (one vectorised pass over the columns)."""
    bad = np.zeros(rows, np.bool_)
    for name in ("created_at", "updated_at", "last_accessed_at"):
        t = getattr(cols, name)[:rows]
        with np.errstate(invalid="ignore"):
            bad |= ~(np.abs(t) <= MAX_ABS_TIME)           # NaN compares False
    ac = cols.access_count[:rows]
    bad |= (ac < 0) | (ac > MAX_ACCESS_COUNT)
    imp = cols.importance[:rows]
    with np.errstate(invalid="ignore"):
        bad |= ~((imp >= 0) & (imp <= 1))
    return np.flatnonzero(bad).astype(np.int64)


def embedder_reproduces(epoch_dir: str, embedder) -> bool:
    """Whether ``embedder`` re-embeds stored texts of an epoch to their records' vectors bit
    for bit (up to 8 texts of its first namespace with rows; one match suffices, as rows
    written with precomputed vectors never match): what vouches for a rebuilt store
    header."""
    from memcore.core.rows import encoded

    for entry in sorted(os.listdir(epoch_dir)):
        hpath = os.path.join(epoch_dir, entry, NAMESPACE_HEADER)
        try:
            h = read_json(hpath, "namespace header")
            lpath = log_path(os.path.join(epoch_dir, entry), h["generation"])
            with open(lpath, "rb") as f:
                data = f.read(1 << 20)
        except (OSError, KeyError, TypeError, StoreCorruptedError):
            continue
        rep = scan_log(data, lpath, 0, salvage=True)
        if not rep.rows:
            continue
        if h.get("dim") != int(embedder.dim):
            return False
        texts = list(rep.texts[:8])
        try:
            vecs = encoded(embedder.encode(texts), len(texts), int(embedder.dim),
                           str(embedder.name))
        except Exception:
            return False
        return any(zlib.crc32(np.ascontiguousarray(v)) == c
                   for v, c in zip(vecs, list(rep.vector_crc[:8])))
    return False


def namespace_intact(directory: str, dim: int, durability: str) -> bool:
    """True when a namespace opens cleanly (its checkpoint files pass their CRCs) and every
    row's vector matches its record."""
    try:
        files, cols, _ = NamespaceFiles.open(directory, dim, durability, True)
        close_namespace(files, cols)
        files, cols, rep = NamespaceFiles.open(directory, dim, durability, False, full=True)
    except StoreCorruptedError:
        return False
    try:
        return first_bad_vector(cols.vectors, rep, 0) is None
    finally:
        close_namespace(files, cols)


def adopt_replay(cols: Columns, rep: Replay, read_only: bool) -> Columns:
    """Make a namespace's columns agree with its log replay and return them.

    The log decides ``created_at``, ``updated_at``, ``importance`` and ``alive``; access
    statistics take the larger of the mapped and the recorded value. Read-only maps cannot be
    written: they get RAM copies where the files disagree, and always for the access
    statistics (a read-only search refreshes them in RAM only).
    """
    n = rep.rows
    alive = np.ones(n, np.bool_)
    if rep.dead:
        alive[np.asarray(rep.dead, np.int64)] = False
    derived = {"created_at": np.asarray(rep.created_at, np.float64),
               "updated_at": np.asarray(rep.updated_at, np.float64),
               "importance": np.asarray(rep.importance, np.float32), "alive": alive}
    stats = {"last_accessed_at": np.fmax(cols.last_accessed_at[:n],
                                         np.asarray(rep.last_accessed_at, np.float64)),
             "access_count": np.maximum(cols.access_count[:n],
                                        np.asarray(rep.access_count, np.int64))}
    if not read_only:
        for name, val in {**derived, **stats}.items():
            getattr(cols, name)[:n] = val
        return cols
    for name, val in derived.items():
        if not np.array_equal(getattr(cols, name)[:n], val):
            setattr(cols, name, val)
    for name, val in stats.items():
        setattr(cols, name, np.ascontiguousarray(val))
    return cols
