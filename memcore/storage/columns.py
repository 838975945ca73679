"""The column files of a namespace's generation: the per-row arrays the kernels scan,
memory-mapped from ``<name>.<generation>.<dtype>`` files (see :mod:`memcore.storage`, Files),
and the checks of their numeric values."""

from __future__ import annotations

import errno
import os

import numpy as np

from memcore.core.rows import INITIAL_CAPACITY, MAX_ABS_TIME, MAX_ACCESS_COUNT, capacity_for
from memcore._crc import crc32_of
from memcore.errors import StoreCorruptedError
from memcore.storage.layout import COLUMNS, COLUMNS_V2, FORMAT_VERSION, column_path

__all__ = ["CHECKED_COLUMNS", "INITIAL_CAPACITY", "Columns", "bad_column", "capacity_for",
           "column_crcs", "expiry_path", "grow_expiry", "SIDE_COLUMNS", "side_path",
           "invalid_stats", "open_expiry", "valid_time", "write_expiry"]


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
