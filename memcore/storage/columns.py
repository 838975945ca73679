"""The column files of a namespace's generation: the per-row arrays the kernels scan,
memory-mapped from ``<name>.<generation>.<dtype>`` files (see :mod:`memcore.storage`, Files),
and the checks of their numeric values."""

from __future__ import annotations

import errno
import logging
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from memcore.core.rows import INITIAL_CAPACITY, MAX_ABS_TIME, MAX_ACCESS_COUNT, capacity_for
from memcore._crc import crc32_of
from memcore.errors import StoreCorruptedError
from memcore.kernels.logscan import CRC_TABLE, crc_rows
from memcore.storage.layout import COLUMNS, COLUMNS_V2, FORMAT_VERSION, column_path

__all__ = ["CHECKED_COLUMNS", "CHECK_DTYPE", "INITIAL_CAPACITY", "CheckReport", "Columns",
           "RowChecks", "SIDE_COLUMNS", "bad_column", "capacity_for", "check_path",
           "column_crcs", "expiry_crcs", "expiry_path", "grow_expiry", "invalid_stats",
           "open_expiry", "row_crcs", "side_path", "stats_crcs", "valid_time", "write_checks",
           "write_expiry"]


class Columns:
    """The per-row arrays of one namespace's generation, memory-mapped from its column files
    (the RAM columns of an in-memory table are :class:`memcore.core.table.RamColumns`).

    Attributes
    ----------
    vectors, created_at, updated_at, last_accessed_at, access_count, importance, alive, capacity
        As :class:`~memcore.core.table.RamColumns`'s (plain ndarray views of the maps;
        format 2 keeps ``alive`` in RAM).
    record_offset : ndarray of shape (capacity,), int64
        Format 2: the log offset of each row's PUT record.

    Parameters
    ----------
    dim : int
    capacity : int
    directory, generation : str and int
        The arrays are ``<directory>/<name>.<generation>.<suffix>`` files (created or
        extended to ``capacity`` rows).
    read_only : bool, default False
        Map the files read-only (they are never extended).
    version : int, default FORMAT_VERSION
        Format 1 maps ``alive`` as a column file; format 2 keeps it in RAM and maps
        ``record_offset``.
    need : int, optional
        Rows in use: on a full disk only these are mapped (rounded up to 64).

    Examples
    --------
    >>> import tempfile
    >>> cols = Columns(4, 10, tempfile.mkdtemp(), 0); cols.vectors.shape
    (64, 4)
    """

    NAMES = ("vectors",) + tuple(c[0] for c in COLUMNS)
    NAMES_V2 = ("vectors",) + tuple(c[0] for c in COLUMNS_V2)

    def __init__(self, dim: int, capacity: int, directory: str, generation: int,
                 read_only: bool = False, version: int = FORMAT_VERSION,
                 need: int | None = None):
        self.dim = int(dim)
        self.directory = directory
        self.generation = int(generation)
        self.read_only = read_only
        self.version = version
        self.capacity = int(capacity) if read_only else capacity_for(capacity)
        self._mm: dict = {}
        try:
            self._map(self.capacity)
        except OSError as err:         # a full disk: map only the ``need`` rows in use
            if read_only or need is None or err.errno != errno.ENOSPC:
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
        if self.version >= 2:                     # alive: RAM, restored from checkpoint files
            alive = np.zeros(capacity, np.bool_)
            old = getattr(self, "alive", None)
            if old is not None:          # (a failed growth may have left a longer one)
                k = min(capacity, old.shape[0])
                alive[:k] = old[:k]
            self.alive = alive
        for name, dtype, tail in self._spec():
            shape = (capacity,) + tail
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
            setattr(self, name, mm.view(np.ndarray))   # plain ndarray: what numba dispatches on
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
                self._map(capacity_for(rows, self.capacity))
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                self._map(-(-rows // INITIAL_CAPACITY) * INITIAL_CAPACITY)

    def file_capacity(self) -> int:
        """Rows the vectors file can hold."""
        return os.path.getsize(self.path("vectors")) // (4 * self.dim)

    def sync(self) -> None:
        """fsync every column file (no-op when read-only)."""
        if self.read_only:
            return
        for name in self.names:
            self._mm[name].flush()

    def sync_vectors(self) -> None:
        """fsync the vectors file (no-op when read-only)."""
        if not self.read_only:
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


def valid_time(t) -> bool:
    """Whether a timestamp is finite and within :data:`MAX_ABS_TIME`."""
    return bool(np.isfinite(t)) and abs(t) <= MAX_ABS_TIME


#: The optional side columns of a generation: name -> (dtype, values per row, suffix).
#: ``expiry``: ``[expires_at, ttl]`` (a namespace that ever had a time to live);
#: ``nsid``: the namespace id of each row of the pack (format 3, :mod:`memcore.storage`).
SIDE_COLUMNS = {"expiry": (np.float64, 2, "f64"), "nsid": (np.int64, 1, "i64")}


def side_path(directory: str, generation: int, name: str = "expiry") -> str:
    """The side column ``name`` of a generation (:data:`SIDE_COLUMNS`):
    ``<name>.<generation>.<suffix>``, written like the other columns (before the log commit,
    fsynced at checkpoints). A missing file means no row has a value (nothing expires)."""
    return os.path.join(directory, f"{name}.{generation}.{SIDE_COLUMNS[name][2]}")


def expiry_path(directory: str, generation: int) -> str:
    """The TTL column of a generation: ``(capacity, 2)`` float64 ``[expires_at, ttl]`` (Unix
    seconds, seconds; 0: never expires), see :func:`side_path`. Only a namespace that ever
    had a time to live has the file."""
    return side_path(directory, generation, "expiry")


def _side_shape(name: str, rows: int) -> tuple:
    width = SIDE_COLUMNS[name][1]
    return (rows, width) if width > 1 else (rows,)


def _side_row_bytes(name: str) -> int:
    dtype, width, _ = SIDE_COLUMNS[name]
    return np.dtype(dtype).itemsize * width


def open_expiry(directory: str, generation: int, read_only: bool,
                name: str = "expiry") -> np.memmap | None:
    """Map a generation's side column file (:func:`side_path`; the TTL column by default),
    copy-on-write when ``read_only``; None when it has none (a store without TTL, or
    written by an older memcore: nothing expires).

    Returns
    -------
    memmap of shape (capacity, 2) float64 (``expiry``) or (capacity,) int64 (``nsid``), or None
    """
    path = side_path(directory, generation, name)
    have = os.path.getsize(path) // _side_row_bytes(name) if os.path.exists(path) else 0
    if not have:
        return None
    return np.memmap(path, SIDE_COLUMNS[name][0], mode="c" if read_only else "r+",
                     shape=_side_shape(name, have))


def grow_expiry(expiry: np.memmap | None, directory: str, generation: int,
                rows: int, name: str = "expiry") -> np.memmap | None:
    """The side column file (the TTL column by default) made to hold ``rows`` rows: created
    on the first write that needs it, grown by doubling with zero rows (never expires) and
    mapped again; ``expiry`` itself when it holds them already.

    Raises
    ------
    OSError
        ENOSPC on a full disk (real zero bytes are written: never SIGBUS later).
    """
    have = 0 if expiry is None else expiry.shape[0]
    if rows <= have:
        return expiry
    cap = capacity_for(rows, have)
    if expiry is not None:
        expiry.flush()
    path = side_path(directory, generation, name)
    size = _side_row_bytes(name)
    with open(path, "ab") as f:
        f.truncate(size * have)
        f.write(bytes(size * (cap - have)))
    return np.memmap(path, SIDE_COLUMNS[name][0], mode="r+", shape=_side_shape(name, cap))


def write_expiry(expiry: np.ndarray | None, directory: str, generation: int,
                 rows, name: str = "expiry") -> None:
    """Write the side column values (the TTL values by default) of ``rows`` (sequence of
    int, the old rows in new row order) as the side column file of a new generation, fsynced
    before its header names it (compaction and reindex keep every time to live); nothing
    when ``expiry`` is None."""
    if expiry is None:
        return
    e = np.zeros(_side_shape(name, max(len(rows), 1)), SIDE_COLUMNS[name][0])
    idx = np.asarray(rows, np.int64)
    inside = idx < expiry.shape[0]
    e[:len(rows)][inside] = expiry[idx[inside]]
    os.makedirs(directory, exist_ok=True)
    with open(side_path(directory, generation, name), "wb") as f:
        f.write(e.tobytes())
        f.flush()
        os.fsync(f.fileno())


#: The column files whose first ``rows`` rows never change once checkpointed (the log
#: implies them): the namespace header's ``"crc"`` holds the CRC-32 of each at every
#: checkpoint, and open and ``verify()`` check them. Access statistics (refreshed by reads
#: without a log record) and ``expiry`` (moved by ``refresh_ttl``) are range-checked instead
#: (:func:`invalid_stats`).
CHECKED_COLUMNS = ("record_offset", "created_at", "updated_at", "importance")


def column_crcs(cols: "Columns", rows: int) -> dict:
    """``{name: CRC-32 of its first rows values}`` for each of :data:`CHECKED_COLUMNS`."""
    return {name: crc32_of(getattr(cols, name)[:rows]) for name in CHECKED_COLUMNS}


def bad_column(cols: "Columns", rows: int, crcs: dict | None) -> str | None:
    """The first of :data:`CHECKED_COLUMNS` whose first ``rows`` values fail the CRC-32 in
    ``crcs`` (a header's ``"crc"``; a column it lacks -- a header written before the check --
    is not checked), or None. Cost: one CRC pass over 28 bytes a row."""
    for name in CHECKED_COLUMNS:
        if crcs and name in crcs and crc32_of(getattr(cols, name)[:rows]) != crcs[name]:
            return name
    return None


# ---------------------------------------------------------------------------- row checks
#
# The fields that change in place -- ``last_accessed_at`` and ``access_count`` (every touch)
# and ``expiry`` (``refresh_ttl``) -- cannot be covered by the header's CRCs; each row's
# are covered by its row of the check file instead (see :mod:`memcore.storage`, Row checks).

#: One row of a generation's check file ``rowcheck.<g>.u8`` (32 bytes, little-endian):
#: ``stats``/``stats_next``: CRC-32 of the row's ``last_accessed_at`` (f64) and
#: ``access_count`` (i64) bytes, current and being written; ``exp``/``exp_next``: the same of
#: ``expires_at, ttl`` below; ``expires_at``, ``ttl``: a second copy of the row's TTL column.
CHECK_DTYPE = np.dtype([("stats", "<u4"), ("stats_next", "<u4"), ("exp", "<u4"),
                        ("exp_next", "<u4"), ("expires_at", "<f8"), ("ttl", "<f8")])

_SMALL = 64            # below this many rows a zlib call per row beats the vectorised CRC


def check_path(directory: str, generation: int) -> str:
    """The check file of a generation: ``(capacity,)`` :data:`CHECK_DTYPE` rows."""
    return os.path.join(directory, f"rowcheck.{generation}.u8")


def row_crcs(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """CRC-32 (zlib) of each row of ``a`` followed by the same row of ``b``.

    Parameters
    ----------
    a, b : ndarray of shape (n, w), uint8
        ``b`` optional (none: ``a``'s rows alone).

    Returns
    -------
    ndarray of shape (n,), uint32
        Few rows (a touch): one zlib call per row; more (open, verify): the numba kernel
        :func:`memcore.kernels.logscan.crc_rows`.

    Examples
    --------
    >>> import zlib
    >>> b = np.arange(2 * 16 * 70, dtype=np.uint64).astype(np.uint8).reshape(140, 16)
    >>> bool(row_crcs(b[:, :8], b[:, 8:])[3] == zlib.crc32(b[3].tobytes()) == row_crcs(b[:4])[3])
    True
    """
    n = a.shape[0]
    b = a[:, :0] if b is None else b
    if n < _SMALL:
        out = np.empty(n, np.uint32)
        for i in range(n):
            c = zlib.crc32(np.ascontiguousarray(a[i]))
            out[i] = zlib.crc32(np.ascontiguousarray(b[i]), c)
        return out
    out = np.empty(n, np.uint32)
    crc_rows(np.ascontiguousarray(a), np.ascontiguousarray(b), CRC_TABLE, out)
    return out


def _b8(a: np.ndarray) -> np.ndarray:
    """(n,) 8-byte values as (n, 8) uint8."""
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1, 8)


def stats_crcs(last_accessed_at: np.ndarray, access_count: np.ndarray) -> np.ndarray:
    """(n,) uint32: the ``stats`` CRC of rows with these ``last_accessed_at`` (float64) and
    ``access_count`` (int64)."""
    return row_crcs(_b8(np.asarray(last_accessed_at, np.float64)),
                    _b8(np.asarray(access_count, np.int64)))


def expiry_crcs(expires_at: np.ndarray, ttl: np.ndarray) -> np.ndarray:
    """(n,) uint32: the ``exp`` CRC of rows with these ``expires_at`` and ``ttl``
    (float64)."""
    return row_crcs(_b8(np.asarray(expires_at, np.float64)), _b8(np.asarray(ttl, np.float64)))


def expiry_rows(expiry: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """(len(rows), 2) float64 ``[expires_at, ttl]`` of ``rows`` (zeros past the column's
    end, or for every row when there is none)."""
    out = np.zeros((rows.shape[0], 2), np.float64)
    if expiry is not None:
        inside = rows < expiry.shape[0]
        out[inside] = expiry[rows[inside]]
    return out


def expiry_prefix(expiry: np.ndarray | None, n: int) -> np.ndarray:
    """:func:`expiry_rows` of rows ``[0, n)`` (slices, no gather)."""
    out = np.zeros((n, 2), np.float64)
    if expiry is not None:
        k = min(n, expiry.shape[0])
        out[:k] = expiry[:k]
    return out


def stamp_rows(a: np.ndarray, last_accessed_at: np.ndarray, access_count: np.ndarray,
               expiry: np.ndarray, rows: np.ndarray) -> None:
    """Write every field of the check rows ``rows`` of ``a`` (:data:`CHECK_DTYPE`) from
    their values: (k,) float64, (k,) int64 and (k, 2) float64 ``[expires_at, ttl]``."""
    s = stats_crcs(last_accessed_at, access_count)
    e = expiry_crcs(expiry[:, 0], expiry[:, 1])
    a["expires_at"][rows] = expiry[:, 0]
    a["ttl"][rows] = expiry[:, 1]
    for name, v in (("stats", s), ("stats_next", s), ("exp", e), ("exp_next", e)):
        a[name][rows] = v


@dataclass
class CheckScan:
    """What :meth:`RowChecks.scan` finds in rows ``[0, n)`` (each (k,) int64, ascending)."""

    #: rows whose access statistics match neither CRC (before the torn-touch rule)
    stats_bad: np.ndarray
    #: rows the torn-touch rule explains (``last_accessed_at`` written, ``access_count`` not)
    torn: np.ndarray
    #: rows whose check copy of ``[expires_at, ttl]`` matches neither CRC
    copy_bad: np.ndarray
    #: rows whose TTL column differs from their verified check copy
    ttl_differs: np.ndarray
    #: the verified copies, (n, 2) float64
    copies: np.ndarray


@dataclass
class CheckReport:
    """What open found and did (rows, ascending lists of int)."""

    #: rows whose access statistics failed their check and now hold their PUT record's
    reset: list = field(default_factory=list)
    #: rows whose check copy of the TTL is damaged: served from the TTL column, unverified
    unverified: list = field(default_factory=list)
    #: rows whose TTL column was restored from its verified copy
    restored: list = field(default_factory=list)


class RowChecks:
    """A generation's check file (:func:`check_path`, rows of :data:`CHECK_DTYPE`), memory-
    mapped for a writer, a private RAM copy for a read-only open, and the protocol that
    keeps it in step with in-place writes (see :mod:`memcore.storage`, Row checks).

    Attributes
    ----------
    arr : ndarray of shape (capacity,), CHECK_DTYPE
    """

    def __init__(self, directory: str, generation: int, read_only: bool, rows: int):
        self.directory, self.generation, self.read_only = directory, int(generation), read_only
        self.path = check_path(directory, generation)
        have = os.path.getsize(self.path) // CHECK_DTYPE.itemsize \
            if os.path.exists(self.path) else 0
        if read_only:
            self.arr = np.zeros(max(rows, have, 1), CHECK_DTYPE)
            if have:
                self.arr[:have] = np.fromfile(self.path, CHECK_DTYPE, count=have)
        elif have >= max(rows, 1):      # as it is: an open on a full disk allocates nothing
            self.arr = np.memmap(self.path, CHECK_DTYPE, mode="r+", shape=(have,))
        else:
            self.arr = np.zeros(0, CHECK_DTYPE)
            self.ensure(max(rows, 1))

    def plain(self) -> np.ndarray:
        """The rows as a plain ndarray view of the map (a memmap's field access costs
        microseconds a call)."""
        return self.arr.view(np.ndarray)

    def _mapped(self, capacity: int) -> np.ndarray:
        _reserve(self.path, capacity * CHECK_DTYPE.itemsize)
        return np.memmap(self.path, CHECK_DTYPE, mode="r+", shape=(capacity,))

    def ensure(self, rows: int) -> None:
        """Hold at least ``rows`` rows (grown by doubling; on a full disk only to ``rows``
        rounded up to 64, as :meth:`Columns.ensure`; new rows zero: unverified).

        Raises
        ------
        OSError
            ENOSPC when even that does not fit (nothing changes).
        """
        have = self.arr.shape[0]
        if rows <= have:
            return
        cap = capacity_for(rows, have)
        if self.read_only:
            grown = np.zeros(cap, CHECK_DTYPE)
            grown[:have] = self.arr
            self.arr = grown
            return
        if isinstance(self.arr, np.memmap):
            self.arr.flush()
        try:
            self.arr = self._mapped(cap)
        except OSError as err:    # a full disk: only ``rows`` rounded up to 64, as Columns
            if err.errno != errno.ENOSPC:
                raise
            self.arr = self._mapped(-(-rows // INITIAL_CAPACITY) * INITIAL_CAPACITY)

    def stamp(self, cols: "Columns", expiry: np.ndarray | None, start: int, stop: int) -> None:
        """Check rows ``[start, stop)`` from their current values (new rows, before their
        commit; a namespace whose header predates the checks, at open)."""
        self.ensure(max(stop, min(cols.capacity, capacity_for(stop, self.arr.shape[0]))))
        rows = np.arange(start, stop, dtype=np.int64)
        stamp_rows(self.plain(), cols.last_accessed_at[start:stop], cols.access_count[start:stop],
                   expiry_rows(expiry, rows), rows)

    def touch(self, cols: "Columns", rows: np.ndarray, now: float) -> None:
        """``last_accessed_at = now``, ``access_count += 1`` of ``rows`` (distinct), crash-safe:
        the new CRC goes to ``stats_next`` first, then the two values, then ``stats``; a kill
        between the values is recognised by :meth:`scan` (the torn-touch rule)."""
        if not rows.shape[0]:
            return
        a = self.plain()
        count = cols.access_count[rows] + 1
        a["stats_next"][rows] = stats_crcs(np.full(rows.shape[0], now, np.float64), count)
        cols.last_accessed_at[rows] = now
        cols.access_count[rows] = count
        a["stats"][rows] = a["stats_next"][rows]

    def refresh_expiry(self, expiry: np.ndarray, rows: np.ndarray, now: float) -> None:
        """``expires_at = now + ttl`` of the ``rows`` that have a time to live, crash-safe:
        ``exp_next``, then the check copy, then ``exp``, then the TTL column (a kill leaves
        the copy verified by one of the two CRCs; open restores the column from it)."""
        rows = rows[rows < expiry.shape[0]]
        ttl = expiry[rows, 1]
        has = ttl > 0
        rows, ttl = rows[has], ttl[has]
        if not rows.shape[0]:
            return
        new = now + ttl
        a = self.plain()
        a["exp_next"][rows] = expiry_crcs(new, ttl)
        a["expires_at"][rows] = new
        a["ttl"][rows] = ttl
        a["exp"][rows] = a["exp_next"][rows]
        expiry[rows, 0] = new

    def scan(self, cols: "Columns", expiry: np.ndarray | None, n: int) -> CheckScan:
        """Check rows ``[0, n)`` without changing anything (one vectorised CRC pass over 32
        bytes a row, and a comparison of the TTL column with its copy)."""
        self.ensure(n)
        a = self.plain()[:n]
        last, count = cols.last_accessed_at[:n], cols.access_count[:n]
        s = stats_crcs(last, count)
        bad = np.flatnonzero((s != a["stats"]) & (s != a["stats_next"]))
        torn = bad[stats_crcs(last[bad], count[bad] + 1) == a["stats_next"][bad]]
        copies = np.empty((n, 2), np.float64)
        copies[:, 0], copies[:, 1] = a["expires_at"], a["ttl"]
        e = expiry_crcs(copies[:, 0], copies[:, 1])
        ok = (e == a["exp"]) | (e == a["exp_next"])
        col = expiry_prefix(expiry, n)
        differs = ok & np.any(col.view(np.uint64) != copies.view(np.uint64), axis=1)
        return CheckScan(np.setdiff1d(bad, torn), torn, np.flatnonzero(~ok),
                         np.flatnonzero(differs), copies)

    def check(self, cols: "Columns", expiry: np.ndarray | None, n: int, record_stats,
              ) -> tuple[CheckReport, np.ndarray | None]:
        """Open's check of rows ``[0, n)``: statistics a torn touch left are completed;
        other failing statistics take their PUT record's values (``record_stats(rows) ->
        (last_accessed_at, access_count)``), silently when the record's values are what the
        check holds (a column damaged before any touch), else listed in ``reset`` (their
        checks are left as they are, so every open lists them until ``repair`` or a touch
        rewrites them); a TTL column value that differs from its verified copy is restored
        from it (``restored``, one warning); a damaged copy leaves the column's value served
        and the row listed in ``unverified``. A writer's changes reach the files; a reader's
        stay in its private copies.

        Returns
        -------
        (CheckReport, the TTL column: ``expiry``, or a new map/array when a restore needed
        rows it lacked)
        """
        sc = self.scan(cols, expiry, n)
        rep = CheckReport(unverified=sc.copy_bad.tolist(), restored=sc.ttl_differs.tolist())
        a = self.plain()
        if sc.torn.shape[0]:
            cols.access_count[sc.torn] += 1
        if sc.stats_bad.shape[0]:
            bad = sc.stats_bad
            last, count = record_stats(bad)
            want = stats_crcs(last, count)
            same = (want == a["stats"][bad]) | (want == a["stats_next"][bad])
            rep.reset = bad[~same].tolist()     # their checks stay as they are: until
            cols.last_accessed_at[bad] = last   # repair (or a touch) every open lists them
            cols.access_count[bad] = count
        if sc.ttl_differs.shape[0]:
            rows = sc.ttl_differs
            need = int(rows[-1]) + 1
            if expiry is None or expiry.shape[0] < need:
                if self.read_only:
                    grown = np.zeros((capacity_for(need), 2), np.float64)
                    if expiry is not None:
                        grown[:expiry.shape[0]] = expiry
                    expiry = grown
                else:
                    expiry = grow_expiry(expiry, self.directory, self.generation, need)
            expiry[rows] = sc.copies[rows]
        if rep.reset or rep.unverified or rep.restored:
            logging.getLogger("memcore").warning(
                "%s: row checks: %d row(s) of access statistics reset to their records, "
                "%d time(s) to live restored from their check copy, %d check copies "
                "damaged (TTL unverified); verify() lists them, repair() rewrites them",
                self.directory, len(rep.reset), len(rep.restored), len(rep.unverified))
        return rep, expiry

    def flush(self) -> None:
        """fsync the check file (no-op when read-only)."""
        if not self.read_only:
            self.arr.flush()

    def release(self) -> None:
        arr, self.arr = self.arr, np.zeros(0, CHECK_DTYPE)
        mm = getattr(arr, "_mmap", None)
        if mm is not None:
            try:
                mm.close()
            except (BufferError, ValueError):
                pass


def write_checks(directory: str, generation: int, cols: "Columns",
                 expiry: np.ndarray | None, n: int) -> None:
    """Write the check file of a new generation from its ``n`` rows' values, fsynced (before
    its header names it: compaction, repair, migrate)."""
    a = np.zeros(max(n, 1), CHECK_DTYPE)
    rows = np.arange(n, dtype=np.int64)
    stamp_rows(a, cols.last_accessed_at[:n], cols.access_count[:n], expiry_rows(expiry, rows),
               rows)
    with open(check_path(directory, generation), "wb") as f:
        f.write(a.tobytes())
        f.flush()
        os.fsync(f.fileno())
