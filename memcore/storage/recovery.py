"""Opening a namespace: recovery of its current generation from the header's checkpoint and
the log tail (format 2), or the whole log (format 1), see :mod:`memcore.storage`, Recovery."""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from memcore.errors import StoreCorruptedError
from memcore.storage.checkpoint import (
    REPAIR_HINT,
    KeyIndex,
    Tail,
    load_checkpoint_files,
    scan_tail,
)
from memcore.storage.columns import (Columns, RowChecks, bad_column, capacity_for,
                                     invalid_stats, open_expiry)
from memcore.storage.generations import (NamespaceFiles, close_namespace, file_bytes,
                                         new_key_index, remove_stale)
from memcore.storage.layout import (
    COLUMNS,
    COLUMNS_V2,
    NAMESPACE_FORMAT,
    NAMESPACE_HEADER,
    check_version,
    column_path,
    fsync_path,
    log_path,
    namespace_dirname,
    read_json,
)
from memcore.storage.log import Replay, scan_log
from memcore.storage.records import FRAME, OP_PUT, PUT_FIXED, verify_vectors


def open_namespace(directory: str, dim: int, durability: str, read_only: bool, *,
         salvage: bool = False, full: bool = False
         ) -> tuple[NamespaceFiles, Columns, "Replay | OpenState"]:
    """Open and recover a namespace directory (see :mod:`memcore.storage`, Recovery).

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
        return _open_once(directory, dim, durability, read_only, salvage=salvage,
                              full=full)
    hpath = os.path.join(directory, NAMESPACE_HEADER)
    for attempt in range(8):
        before = file_bytes(hpath)
        try:
            return _open_once(directory, dim, durability, True)
        except (StoreCorruptedError, FileNotFoundError):
            after = file_bytes(hpath)
            if after is None and not os.path.isdir(directory):
                raise FileNotFoundError(errno.ENOENT, "the namespace vanished",
                                        directory) from None
            if after == before or attempt == 7:
                raise
        time.sleep(0.001 * 2 ** attempt)
    raise AssertionError("unreachable")

def _open_once(directory: str, dim: int, durability: str, read_only: bool, *,
               salvage: bool = False, full: bool = False
               ) -> tuple[NamespaceFiles, Columns, "Replay | OpenState"]:
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
        return _open_v2(directory, h, ns, dim, durability, read_only)
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
        cols = Columns(dim, capacity_for(max(rep.rows, 1), have_rows), directory, gen,
                       version=h["version"])
    files = NamespaceFiles(directory, ns, dim, gen, durability, read_only)
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

def _open_v2(directory: str, h: dict, ns: tuple, dim: int, durability: str,
             read_only: bool) -> tuple[NamespaceFiles, Columns, "OpenState"]:
    """Open a format-2 namespace: map the files, load the checkpoint (live flags, key
    index) and replay only the log records after it (see :mod:`memcore.storage`)."""
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
            f"checkpoint at {ck_bytes} (the file was truncated); {REPAIR_HINT}")
    tail = scan_tail(data, ck_bytes, lpath, ck_rows, read_only=read_only)
    m = len(tail.put_keys)
    rows = ck_rows + m
    if not read_only and not h.get("unwitnessed"):
        w = witnessed_cut(directory, gen, rows, tail.end)
        if w is not None:
            raise StoreCorruptedError(
                f"{lpath} is corrupted at offset {tail.end}: the log ends before row {rows}, "
                f"whose record at offset {w} was committed (its record_offset and created_at "
                f"columns hold it: they are written after the record, so no crash leaves "
                f"them without it; the log was cut); {REPAIR_HINT}")
    if not read_only and tail.end < size:
        _cut_torn_tail(lpath, tail.end, durability)
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
        cols = Columns(dim, capacity_for(max(rows, 1), have_rows), directory, gen,
                       version=2, need=rows)
    bad = bad_column(cols, ck_rows, crcs)
    if bad is not None:
        cols.release()
        raise StoreCorruptedError(
            f"{cols.path(bad)} fails its CRC-32 over its first {ck_rows} rows "
            f"(offset 0): the column file was damaged; {REPAIR_HINT}")
    if not read_only and h.get("unwitnessed") and durability != "none":
        cols.record_offset[rows:] = 0   # what buffered records lost in a crash left: from
        #                                 now on the column witnesses again (see witnessed_cut)
    files = NamespaceFiles(directory, ns, dim, gen, durability, read_only)
    files.unwitnessed = bool(h.get("unwitnessed"))
    files.version = 2
    files.records = h["records"] + tail.records
    files.log_bytes = tail.end
    files.checkpoint_rows = ck_rows
    files.checkpoint_id = ck
    files.checkpoint_log_bytes = ck_bytes
    files.index_entry = _index_entry(h, hpath, ck)
    files.read_fd()         # now: a compaction by another process may delete this log
    try:
        cols.alive[:ck_rows] = alive0
        if m:
            _adopt_tail(cols, tail, ck_rows, read_only)
            verify_vectors(cols.vectors[ck_rows:rows],
                           np.asarray(tail.put_fixed["vector_crc"], np.uint32),
                           range(ck_rows, rows), vec_path, tail.put_offsets,
                           "the store was not opened")
        _restore_invalid_stats(files, cols, rows)
        expiry = _check_rows(files, cols, rows, bool(h.get("rowcheck")), read_only)
        keys = new_key_index(files, cols, hashes, krows)
        events = _replay_keys(keys, cols.alive, tail, ck_rows, lpath)
    except BaseException:
        close_namespace(files, cols)
        raise
    if not read_only:
        remove_stale(directory, gen, ck, files.index_entry)
    return files, cols, OpenState(keys, rows, tail, events, expiry)



@dataclass
class OpenState:
    """What opening a format-2 namespace recovers beside its files and columns."""

    keys: KeyIndex
    rows: int
    tail: Tail
    #: the tail's effect in log order: ``(row, killed row or -1)`` per PUT, ``(-1, row)`` per DEL
    events: list
    #: the TTL column (:func:`~memcore.storage.columns.open_expiry`, checked against its
    #: copies in the check file), or None when no row ever had a time to live
    expiry: "np.ndarray | None" = None


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


def _check_rows(files: NamespaceFiles, cols: Columns, rows: int, trusted: bool,
                read_only: bool) -> "np.ndarray | None":
    """Open the TTL column and the check file and check every row's in-place fields against
    it (:meth:`RowChecks.check`; a header written before the checks -- ``trusted`` False --
    has its rows' checks written from their values instead). Returns the TTL column."""
    expiry = open_expiry(files.directory, files.generation, read_only)
    files.checks = RowChecks(files.directory, files.generation, read_only, rows)
    if not trusted:
        files.checks.stamp(cols, expiry, 0, rows)
        return expiry
    files.check_report, expiry = files.checks.check(
        cols, expiry, rows, lambda bad: _record_stats(files, cols, bad))
    return expiry


def _record_fields(files: NamespaceFiles, cols: Columns, row: int) -> tuple:
    """The fixed fields of a row's PUT record (CRC checked), as :data:`PUT_FIXED` unpacks
    them."""
    off = int(cols.record_offset[row])
    files.read_put(off)                                   # CRC checked
    return PUT_FIXED.unpack_from(os.pread(files.read_fd(), FRAME.size + PUT_FIXED.size, off),
                                 FRAME.size)


def _record_stats(files: NamespaceFiles, cols: Columns, rows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``last_accessed_at`` (float64) and ``access_count`` (int64) of rows' PUT records."""
    fields = [_record_fields(files, cols, r) for r in rows.tolist()]
    return (np.asarray([f[4] for f in fields], np.float64),
            np.asarray([f[5] for f in fields], np.int64))


def _restore_invalid_stats(files: NamespaceFiles, cols: Columns, rows: int) -> None:
    """Validate the numeric columns of every row on open (:func:`invalid_stats`: timestamps
    finite and in range, ``access_count`` and importance in range); a damaged value is
    replaced by its row's PUT record (CRC checked), with one warning."""
    bad = invalid_stats(cols, rows)
    if not bad.shape[0]:
        return
    logging.getLogger("memcore").warning(
        "%s: %d row(s) held invalid lifecycle fields or access statistics (the first row %d); "
        "restored from their log records", files.directory, bad.shape[0], int(bad[0]))
    for row in bad.tolist():
        f = _record_fields(files, cols, row)
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
                    f"live row; {REPAIR_HINT}")
            alive[row] = False
            live.pop(k, None)
            events.append((-1, row))
            di += 1
    return events


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


def witnessed_cut(directory: str, generation: int, rows: int, log_end: int) -> int | None:
    """The log offset of row ``rows``'s PUT record when the columns witness that it was
    committed although the log (``log_end`` bytes of intact records) holds only rows below
    ``rows``: a log cut exactly between records or inside its last single record, which no
    crash leaves and no check of the log alone can tell from a torn write.

    A row's ``record_offset`` is written after its record is in the log (the commit point,
    see :meth:`~memcore.storage.columns.Columns` and ``LongTermMemory``'s append), its
    ``created_at`` before: both set past the log's rows means the log lost a committed
    record. A crash leaves neither set without the record (a torn or uncommitted write never
    gets its offset), except under ``durability="none"``, whose buffered records a crash
    loses after their offsets were written: such a writer marks the namespace header
    ``unwitnessed`` first, and the next writing-through writer zeroes the column past its rows
    before the header's next checkpoint drops the mark. Two files must agree, so one damaged
    byte in the unused part of a column cannot raise a false alarm. Returns None when no
    witness (or the columns are shorter than ``rows + 1``)."""
    got = []
    for name, dtype in (("record_offset", np.int64), ("created_at", np.float64)):
        size = np.dtype(dtype).itemsize
        try:
            fd = os.open(column_path(directory, name, generation), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            raw = os.pread(fd, size, rows * size)
        finally:
            os.close(fd)
        if len(raw) < size:
            return None
        got.append(np.frombuffer(raw, dtype)[0])
    offset, created = int(got[0]), float(got[1])
    if offset >= log_end and offset > 0 and created > 0.0 and np.isfinite(created):
        return offset
    return None


def _cut_torn_tail(path: str, end: int, durability: str) -> None:
    """Truncate a log to ``end``, the end of its last committed record (a torn tail)."""
    os.truncate(path, end)
    if durability == "fsync":
        fsync_path(path)


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
