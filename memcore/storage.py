"""The on-disk format of :class:`~memcore.LongTermMemory`: files, records, commits, recovery.

Everything a store persists lives under its root directory; no namespace string ever becomes
a path by itself.

Files
-----
::

    <root>/
      memcore.json              store header (JSON): {"format": "memcore-ltm", "version": 1,
                                "embedder": name, "dim": dim, "epoch": e}
      LOCK                      the single-writer lock (filelock / fcntl.flock); never read
      ns.<e>/                   the namespaces of epoch e (``reindex`` writes epoch e+1)
        n-<slug>-<hash>/        one namespace; hash = first 32 hex digits of sha256 of the
                                namespace as a JSON list, slug = up to 40 chars of [a-z0-9_-]
          header.json           namespace header (JSON), see below
          log.<g>               append-only record log of generation g
          vectors.<g>.f32       (capacity, dim) float32 memory map, row-major, unit rows
          created_at.<g>.f64    (capacity,) float64 Unix seconds
          updated_at.<g>.f64    (capacity,) float64 Unix seconds
          last_accessed_at.<g>.f64  (capacity,) float64 Unix seconds
          access_count.<g>.i64  (capacity,) int64
          importance.<g>.f32    (capacity,) float32 in [0, 1]
          alive.<g>.u8          (capacity,) uint8 (bool)

The directory name is injective (the hash covers the exact namespace; the header stores the
namespace and open checks the two agree), lower-case (safe on case-insensitive file systems),
ASCII, at most 80 characters, and starts with ``n-`` (so "CON", "..", "" and friends are never a
name). All arrays are little-endian and grow by doubling their capacity (``ftruncate``, then
a new memory map); rows are append-only: a replaced or deleted key's row is only marked dead
and stays garbage until :func:`compact_namespace` writes a new generation.

Namespace header: ``{"format": "memcore-ltm-namespace", "version": 1, "namespace": [...],
"dim": dim, "generation": g, "records": r, "log_bytes": b, "rows": n}`` -- a *checkpoint*: the
first ``b`` bytes of the log (``r`` records) and the first ``n`` rows of every column file were
fsynced before the header was written. Headers are replaced atomically: write
``header.json.tmp``, fsync, rename over ``header.json``, fsync the directory.

Record layout (little-endian)
-----------------------------
Every record is a 12-byte frame ``magic u32 = 0x5243_4D4D ("MMCR"), length u32, crc32 u32``
followed by ``length`` payload bytes; the CRC-32 (zlib) covers the payload.

- PUT (``op = 1``), 64 fixed bytes then the variable parts::

      op u8, pad 3, row u32, created_at f64, updated_at f64, last_accessed_at f64,
      access_count i64, importance f64, vector_crc u32, key_len u32, text_len u32,
      meta_len u32, key utf-8, text utf-8, metadata JSON utf-8

  ``row`` must equal the number of PUT records before it (rows are append-only), and
  ``vector_crc`` is the CRC-32 of the row's ``dim * 4`` vector bytes, so a key can never come
  back with another row's vector. A PUT of a key that already has a row kills that row.
- DEL (``op = 2``): ``op u8, pad 3, row u32, key_len u32, key utf-8``; ``row`` must be the key's
  live row.

The log is the source of truth for which rows exist, their keys, texts, metadata,
``created_at``, ``updated_at``, ``importance`` and ``alive``; open re-derives those columns
from it. ``last_accessed_at`` and ``access_count`` are refreshed in the memory maps only (no log
record per search); open takes the larger of the mapped value and the PUT record's value.

Commit protocol
---------------
A write (``put``, ``put_many``, ``put_stored``, ``delete``) first writes vectors and columns of
*new* rows into the memory maps (never touching a committed row's vector), then appends its
records to the log with one ``write`` -- the commit point. ``put_many`` commits once.

- ``durability="flush"`` (default): the records are written to the OS before the call returns.
  An acknowledged write survives the process being killed (the memory maps and the log share
  the page cache), not a power loss.
- ``"fsync"``: additionally ``fdatasync`` the vectors file before, and the log after, the
  append: an acknowledged write survives power loss (two syncs per call).
- ``"none"``: records are buffered in the process and written at 1 MiB, ``flush()``,
  ``close()`` or a checkpoint; a crash loses the buffered writes (tests, bulk loads).

A checkpoint (``close()``, ``flush()``, ``compact()``) fsyncs every file and then replaces the
header with the current record count, log length and row count.

Recovery (on open)
------------------
1. Header: an unknown format or a missing field -> :class:`StoreCorruptedError`; a version
   newer than :data:`FORMAT_VERSION` -> :class:`FormatVersionError` (never a misread).
2. The log is scanned record by record (frame, length, CRC, row rule). At the first bad
   record at offset ``x``: if ``x`` lies inside the checkpoint, or any valid record follows
   it, the damage is in the middle of the file -> :class:`StoreCorruptedError` naming the file
   and ``x``. Otherwise it is a torn tail (a write cut short by a crash) and the log is
   truncated to ``x``, the end of the last committed record (read-only opens just ignore it).
3. Rows past the checkpoint are checked against their records' ``vector_crc``; a mismatch ->
   :class:`StoreCorruptedError` naming the vectors file and byte offset. (Checkpointed rows
   were fsynced; ``verify``/``repair`` checks all rows.)
4. Derived columns are rewritten from the log; files of other generations or epochs and
   half-created or half-deleted namespace directories (``tmp-*``, ``trash-*``) are removed.

:func:`repair_namespace` rewrites a namespace as a new generation from every intact record:
records with a bad frame or CRC are skipped (the scan resynchronises on the next magic), a
PUT whose vector fails its CRC is dropped, and the rest is replayed as usual. Compaction and
repair are crash-safe: the new generation's files are complete and fsynced before the header
that names them replaces the old one; until then the old generation is the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from memcore.errors import FormatVersionError, StoreCorruptedError

__all__ = [
    "FORMAT_VERSION",
    "DURABILITY_MODES",
    "Columns",
    "NamespaceFiles",
    "Replay",
    "namespace_dirname",
    "encode_put",
    "encode_delete",
    "scan_log",
    "atomic_write_json",
    "read_store_header",
    "write_store_header",
]

FORMAT_VERSION = 1
STORE_FORMAT = "memcore-ltm"
NAMESPACE_FORMAT = "memcore-ltm-namespace"
STORE_HEADER = "memcore.json"
NAMESPACE_HEADER = "header.json"
LOCK_FILE = "LOCK"
DURABILITY_MODES = ("fsync", "flush", "none")

MAGIC = 0x52434D4D
OP_PUT = 1
OP_DEL = 2
FRAME = struct.Struct("<III")                   # magic, payload length, crc32(payload)
PUT_FIXED = struct.Struct("<B3xIdddqdIIII")     # 64 bytes
DEL_FIXED = struct.Struct("<B3xII")             # 12 bytes
MAX_PAYLOAD = 1 << 30
INITIAL_CAPACITY = 64
NONE_BUFFER_BYTES = 1 << 20

#: name, dtype, file suffix of every per-row column (vectors are separate: (capacity, dim)).
COLUMNS = (
    ("created_at", np.float64, "f64"),
    ("updated_at", np.float64, "f64"),
    ("last_accessed_at", np.float64, "f64"),
    ("access_count", np.int64, "i64"),
    ("importance", np.float32, "f32"),
    ("alive", np.bool_, "u8"),
)


# ---------------------------------------------------------------------------------- names

def namespace_dirname(ns: Sequence[str]) -> str:
    """Injective, filesystem-safe directory name of a namespace.

    Parameters
    ----------
    ns : tuple of str
        A validated namespace.

    Returns
    -------
    str
        ``"n-<slug>-<hash>"``: ASCII ``[a-z0-9_-]``, at most 80 characters.

    Examples
    --------
    >>> namespace_dirname(("..",))[:5]
    'n-__-'
    """
    blob = json.dumps(list(ns), ensure_ascii=False).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(blob).hexdigest()[:32]
    slug = re.sub(r"[^a-z0-9_-]", "_", ".".join(ns).lower())[:40]
    return f"n-{slug}-{digest}"


# ---------------------------------------------------------------------------------- files

def fsync_dir(path: str) -> None:
    """fsync a directory so a rename or create inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: str, obj: Any, *, durable: bool = True) -> None:
    """Replace ``path`` by a JSON document atomically (temp, fsync, rename, fsync dir).

    Examples
    --------
    >>> atomic_write_json(str(tmp_path / "h.json"), {"version": 1})   # doctest: +SKIP
    """
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, sort_keys=True)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise StoreCorruptedError(f"{what} {path} is not valid JSON at offset "
                                  f"{getattr(err, 'pos', getattr(err, 'start', 0))}: {err}") from err
    if not isinstance(obj, dict):
        raise StoreCorruptedError(f"{what} {path} must hold a JSON object at offset 0")
    return obj


def _check_version(obj: dict, path: str, fmt: str) -> None:
    if obj.get("format") != fmt:
        raise StoreCorruptedError(
            f"{path} has format {obj.get('format')!r} at offset 0, expected {fmt!r}")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreCorruptedError(f"{path} has no valid format version (got {version!r})")
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"{path} was written by on-disk format version {version}, but this memcore reads "
            f"versions <= {FORMAT_VERSION}; upgrade memcore to open it")


def read_store_header(root: str) -> dict | None:
    """The store header of ``root`` (validated), or None when the store does not exist yet.

    Raises
    ------
    FormatVersionError
        If the store was written by a newer format version.
    StoreCorruptedError
        If the header is unreadable or lacks a field.
    """
    path = os.path.join(root, STORE_HEADER)
    try:
        obj = _read_json(path, "store header")
    except FileNotFoundError:
        return None
    _check_version(obj, path, STORE_FORMAT)
    for name, typ in (("embedder", str), ("dim", int), ("epoch", int)):
        if not isinstance(obj.get(name), typ) or isinstance(obj.get(name), bool):
            raise StoreCorruptedError(f"store header {path} lacks a valid {name!r} at offset 0")
    return obj


def write_store_header(root: str, embedder: str, dim: int, epoch: int, *, durable: bool) -> None:
    """Atomically write the store header (the commit point of ``reindex``)."""
    atomic_write_json(os.path.join(root, STORE_HEADER),
                      {"format": STORE_FORMAT, "version": FORMAT_VERSION, "embedder": embedder,
                       "dim": int(dim), "epoch": int(epoch)}, durable=durable)


# ---------------------------------------------------------------------------------- records

def encode_put(row: int, key: bytes, text: bytes, meta: bytes, created_at: float,
               updated_at: float, last_accessed_at: float, access_count: int,
               importance: float, vector_crc: int) -> bytes:
    """One framed PUT record (see the module docstring for the layout)."""
    payload = b"".join((PUT_FIXED.pack(OP_PUT, row, created_at, updated_at, last_accessed_at,
                                       access_count, importance, vector_crc, len(key), len(text),
                                       len(meta)), key, text, meta))
    return FRAME.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def encode_delete(row: int, key: bytes) -> bytes:
    """One framed DEL record."""
    payload = DEL_FIXED.pack(OP_DEL, row, len(key)) + key
    return FRAME.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


@dataclass
class Replay:
    """What a log scan recovers: one entry per row (dead rows included), plus the live keys.

    Per-row lists are indexed by row; ``keys`` maps each live key to its row.
    """

    keys: dict = field(default_factory=dict)
    key_of: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    metas: list = field(default_factory=list)          # raw JSON bytes
    created_at: list = field(default_factory=list)
    updated_at: list = field(default_factory=list)
    last_accessed_at: list = field(default_factory=list)
    access_count: list = field(default_factory=list)
    importance: list = field(default_factory=list)
    vector_crc: list = field(default_factory=list)
    record_offset: list = field(default_factory=list)
    dead: list = field(default_factory=list)            # rows killed by a later record
    file_rows: list = field(default_factory=list)       # row in the column files (salvage)
    records: int = 0
    skipped: int = 0                                     # damaged stretches skipped (salvage)
    end: int = 0                                         # end of the last good record

    @property
    def rows(self) -> int:
        return len(self.key_of)


class _BadRecord(Exception):
    def __init__(self, offset: int, reason: str):
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def _parse_one(data, off: int, size: int):
    """Parse the record at ``off``: (op, fields, next_offset); raises _BadRecord."""
    if size - off < FRAME.size:
        raise _BadRecord(off, f"a {size - off}-byte fragment where a record frame starts")
    magic, length, crc = FRAME.unpack_from(data, off)
    if magic != MAGIC:
        raise _BadRecord(off, f"bad record magic 0x{magic:08x}")
    start = off + FRAME.size
    end = start + length
    if length > MAX_PAYLOAD or end > size:
        raise _BadRecord(off, f"record length {length} runs past the end of the file")
    if zlib.crc32(data[start:end]) != crc:
        raise _BadRecord(off, "record CRC-32 mismatch")
    op = data[start]
    if op == OP_PUT:
        if length < PUT_FIXED.size:
            raise _BadRecord(off, "PUT record shorter than its fixed part")
        fixed = PUT_FIXED.unpack_from(data, start)
        kl, tl, ml = fixed[8], fixed[9], fixed[10]
        p = start + PUT_FIXED.size
        if p + kl + tl + ml != end:
            raise _BadRecord(off, "PUT record field lengths disagree with its length")
        try:
            key = bytes(data[p:p + kl]).decode("utf-8")
            text = bytes(data[p + kl:p + kl + tl]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise _BadRecord(off, f"PUT record holds invalid UTF-8: {err}") from err
        meta = bytes(data[p + kl + tl:end])
        return OP_PUT, (fixed, key, text, meta), end
    if op == OP_DEL:
        if length < DEL_FIXED.size:
            raise _BadRecord(off, "DEL record shorter than its fixed part")
        _, row, kl = DEL_FIXED.unpack_from(data, start)
        if start + DEL_FIXED.size + kl != end:
            raise _BadRecord(off, "DEL record key length disagrees with its length")
        try:
            key = bytes(data[start + DEL_FIXED.size:end]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise _BadRecord(off, f"DEL record holds invalid UTF-8: {err}") from err
        return OP_DEL, (row, key), end
    raise _BadRecord(off, f"unknown record op {op}")


def _apply(rep: Replay, op: int, fields, off: int, salvage: bool = False) -> None:
    """Apply one parsed record to the replay; raises _BadRecord when it breaks the row rules.

    With ``salvage`` rows missing from a damaged log are skipped: a PUT may name any row after
    the previous one, and ``file_rows`` keeps where each replayed row lives in the files.
    """
    if op == OP_PUT:
        fixed, key, text, meta = fields
        row = fixed[1]
        expected = rep.file_rows[-1] + 1 if rep.file_rows else 0
        if row != expected and not (salvage and row > expected):
            raise _BadRecord(off, f"PUT record names row {row}, expected row {expected}")
        old = rep.keys.get(key)
        if old is not None:
            rep.dead.append(old)
        rep.keys[key] = len(rep.key_of)
        rep.file_rows.append(row)
        rep.key_of.append(key)
        rep.texts.append(text)
        rep.metas.append(meta)
        rep.created_at.append(fixed[2])
        rep.updated_at.append(fixed[3])
        rep.last_accessed_at.append(fixed[4])
        rep.access_count.append(fixed[5])
        rep.importance.append(fixed[6])
        rep.vector_crc.append(fixed[7])
        rep.record_offset.append(off)
    else:
        row, key = fields
        idx = rep.keys.get(key)
        if idx is None or rep.file_rows[idx] != row:
            raise _BadRecord(off, f"DEL record for {key!r} names row {row}, which is not its "
                                  "live row")
        del rep.keys[key]
        rep.dead.append(idx)
    rep.records += 1


def _valid_record_after(data, off: int, size: int) -> int | None:
    """Offset of the first CRC-valid record frame strictly after ``off``, or None."""
    magic = FRAME.pack(MAGIC, 0, 0)[:4]
    pos = off + 1
    while True:
        pos = data.find(magic, pos)
        if pos < 0:
            return None
        try:
            _parse_one(data, pos, size)
            return pos
        except _BadRecord:
            pos += 1


def scan_log(data: bytes, path: str, committed_bytes: int, *, salvage: bool = False) -> Replay:
    """Replay a log: every record up to the first bad one (or, with salvage, every intact one).

    Parameters
    ----------
    data : bytes
        The whole log file.
    path : str
        Its path, for error messages.
    committed_bytes : int
        Length covered by the last checkpoint; damage before it is never a torn tail.
    salvage : bool, default False
        Skip damaged records (resynchronising on the next valid frame) instead of raising.

    Returns
    -------
    Replay
        ``end`` is the offset after the last good record: the length a torn log is cut to.

    Raises
    ------
    StoreCorruptedError
        If a bad record is followed by a valid one or lies inside the checkpoint (not with
        ``salvage``).

    Examples
    --------
    >>> scan_log(encode_delete(0, b"k")[:5], "log.0", 0).end      # a torn tail
    0
    """
    size = len(data)
    rep = Replay()
    off = 0
    while off < size:
        try:
            op, fields, nxt = _parse_one(data, off, size)
            _apply(rep, op, fields, off, salvage)
        except _BadRecord as bad:
            later = _valid_record_after(data, off, size)
            if salvage:
                rep.skipped += 1
                if later is None:
                    break
                off = later
                continue
            if later is not None or off < committed_bytes:
                where = ("inside the last checkpoint" if off < committed_bytes
                         else f"followed by a valid record at offset {later}")
                raise StoreCorruptedError(
                    f"{path} is corrupted at offset {off} ({bad.reason}), {where}; "
                    "LongTermMemory(..., repair=True) or store.repair() rewrites it keeping "
                    "every intact record") from None
            break                                    # torn tail
        off = nxt
        rep.end = off
    if off < committed_bytes and not salvage:
        raise StoreCorruptedError(
            f"{path} ends at offset {size}, before its last checkpoint at {committed_bytes}; "
            "the file was truncated")
    return rep


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

    def __init__(self, dim: int, capacity: int, directory: str | None = None,
                 generation: int = 0, read_only: bool = False):
        self.dim = int(dim)
        self.directory = directory
        self.generation = int(generation)
        self.read_only = read_only
        self.capacity = int(capacity) if read_only else _capacity_for(capacity)
        self._mm: dict = {}
        self._map(self.capacity)

    def path(self, name: str) -> str:
        suffix = "f32" if name == "vectors" else dict((c[0], c[2]) for c in COLUMNS)[name]
        return os.path.join(self.directory, f"{name}.{self.generation}.{suffix}")

    def _spec(self):
        yield "vectors", np.dtype(np.float32), (self.dim,)
        for name, dtype, _ in COLUMNS:
            yield name, np.dtype(dtype), ()

    def _map(self, capacity: int) -> None:
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
                    mm = np.memmap(path, dtype=dtype, mode="r", shape=shape)
                else:
                    with open(path, "ab") as f:
                        if f.tell() < need:
                            f.truncate(need)
                    mm = np.memmap(path, dtype=dtype, mode="r+", shape=shape)
                self._mm[name] = mm
                arr = mm.view(np.ndarray)        # plain ndarray: what numba dispatches on
            setattr(self, name, arr)
        self.capacity = capacity

    def ensure(self, rows: int) -> None:
        """Grow (by doubling) until ``rows`` rows fit."""
        if rows > self.capacity:
            self._map(_capacity_for(rows, self.capacity))

    def file_capacity(self) -> int:
        """Rows the vectors file can hold (file-backed only)."""
        return os.path.getsize(self.path("vectors")) // (4 * self.dim)

    def sync(self, rows: int | None = None) -> None:
        """fsync every backing file (no-op in RAM)."""
        if self.directory is None or self.read_only:
            return
        for name in self.NAMES:
            self._mm[name].flush()

    def sync_vectors(self) -> None:
        if self.directory is not None and not self.read_only:
            self._mm["vectors"].flush()

    def release(self) -> None:
        """Drop the memory maps (the arrays are unusable afterwards)."""
        for name in self.NAMES:
            arr = self._mm.pop(name, None)
            mm = getattr(arr, "_mmap", None)
            setattr(self, name, None)
            if mm is not None:
                try:
                    mm.close()
                except (BufferError, ValueError):
                    pass   # a view is still alive somewhere; the GC unmaps it later

    def remove_files(self) -> None:
        for name in self.NAMES:
            try:
                os.unlink(self.path(name))
            except FileNotFoundError:
                pass


def vector_crcs(vectors: np.ndarray) -> list[int]:
    """CRC-32 of each row's float32 bytes, as the PUT records store them."""
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    crc = zlib.crc32
    return [crc(row) for row in v.view(np.uint8).reshape(v.shape[0], -1)] if v.shape[0] else []


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
        self.log_path = os.path.join(directory, f"log.{generation}")
        self.log_bytes = 0          # bytes in the log file incl. anything buffered
        self.records = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._fd = None if read_only else os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._vec_fd = None

    # ---------------------------------------------------------------- create / open

    @classmethod
    def create(cls, parent: str, ns: tuple, dim: int, durability: str) -> tuple["NamespaceFiles", Columns]:
        """Create a namespace directory atomically (built as ``tmp-*``, then renamed)."""
        name = namespace_dirname(ns)
        final = os.path.join(parent, name)
        tmp = os.path.join(parent, f"tmp-{name}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        durable = durability != "none"
        cols = Columns(dim, INITIAL_CAPACITY, tmp, 0)
        open(os.path.join(tmp, "log.0"), "wb").close()
        if durable:
            cols.sync()
        _write_ns_header(tmp, ns, dim, 0, 0, 0, 0, durable=durable)
        cols.release()
        os.rename(tmp, final)
        if durable:
            fsync_dir(parent)
        files = cls(final, ns, dim, 0, durability, False)
        return files, Columns(dim, INITIAL_CAPACITY, final, 0)

    @classmethod
    def open(cls, directory: str, dim: int, durability: str, read_only: bool, *,
             salvage: bool = False) -> tuple["NamespaceFiles", Columns, Replay]:
        """Open and recover a namespace directory (see the module docstring, Recovery).

        Raises
        ------
        StoreCorruptedError, FormatVersionError
        """
        hpath = os.path.join(directory, NAMESPACE_HEADER)
        try:
            h = _read_json(hpath, "namespace header")
        except FileNotFoundError:
            raise StoreCorruptedError(f"{hpath} is missing (offset 0)") from None
        _check_version(h, hpath, NAMESPACE_FORMAT)
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
        gen = h["generation"]
        log_path = os.path.join(directory, f"log.{gen}")
        try:
            with open(log_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise StoreCorruptedError(f"{log_path} is missing (offset 0)") from None
        rep = scan_log(data, log_path, 0 if salvage else h["log_bytes"], salvage=salvage)
        if not read_only and not salvage and rep.end < len(data):
            os.truncate(log_path, rep.end)           # torn tail
            if durability == "fsync":
                fd = os.open(log_path, os.O_WRONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        probe = Columns.__new__(Columns)
        probe.dim, probe.directory, probe.generation, probe._mm = dim, directory, gen, {}
        vec_path = probe.path("vectors")
        try:
            have_rows = probe.file_capacity()
        except FileNotFoundError:
            raise StoreCorruptedError(f"{vec_path} is missing (offset 0)") from None
        if have_rows < rep.rows and not salvage:
            raise StoreCorruptedError(
                f"{vec_path} ends at offset {have_rows * dim * 4}, before row {rep.rows} that "
                f"the log commits")
        if read_only:
            probe.read_only = True
            cap = _file_rows_min(probe, have_rows)
            if cap < rep.rows:
                raise StoreCorruptedError(
                    f"a column file in {directory} holds only {cap} rows, but the log commits "
                    f"{rep.rows}")
            cols = Columns(dim, cap, directory, gen, read_only=True)
        else:
            cols = Columns(dim, _capacity_for(max(rep.rows, 1), have_rows), directory, gen)
        files = cls(directory, ns, dim, gen, durability, read_only)
        files.records = rep.records
        files.log_bytes = rep.end
        if not salvage:
            bad = _first_bad_vector(cols.vectors, rep, start=min(h["rows"], rep.rows))
            if bad is not None:
                files.close()
                cols.release()
                raise StoreCorruptedError(
                    f"{vec_path} is corrupted at offset {bad * dim * 4}: row {bad} does not "
                    f"match the CRC its PUT record (log offset {rep.record_offset[bad]}) holds; "
                    "LongTermMemory(..., repair=True) or store.repair() drops it")
        if not read_only:
            files._remove_stale()
        return files, cols, rep

    def _remove_stale(self) -> None:
        keep = {NAMESPACE_HEADER, f"log.{self.generation}"}
        keep.update(os.path.basename(Columns.path(self._probe(), n)) for n in Columns.NAMES)
        for entry in os.listdir(self.directory):
            if entry not in keep:
                try:
                    os.unlink(os.path.join(self.directory, entry))
                except IsADirectoryError:
                    shutil.rmtree(os.path.join(self.directory, entry), ignore_errors=True)
                except FileNotFoundError:
                    pass

    def _probe(self) -> Columns:
        probe = Columns.__new__(Columns)
        probe.dim, probe.directory, probe.generation = self.dim, self.directory, self.generation
        return probe

    # ---------------------------------------------------------------- commits

    def append(self, blob: bytes, cols: Columns) -> None:
        """Commit records (already framed) according to the durability mode."""
        if self.durability == "none":
            self._pending.append(blob)
            self._pending_bytes += len(blob)
            self.log_bytes += len(blob)
            if self._pending_bytes >= NONE_BUFFER_BYTES:
                self.flush_pending()
            return
        self.flush_pending()
        if self.durability == "fsync":
            cols.sync_vectors()
        _write_all(self._fd, blob)
        self.log_bytes += len(blob)
        if self.durability == "fsync":
            os.fdatasync(self._fd)

    def flush_pending(self) -> None:
        if self._pending:
            _write_all(self._fd, b"".join(self._pending))
            self._pending.clear()
            self._pending_bytes = 0

    def checkpoint(self, cols: Columns, rows: int) -> None:
        """fsync everything, then atomically record the checkpoint in the header."""
        if self.read_only:
            return
        self.flush_pending()
        cols.sync()
        os.fsync(self._fd)
        _write_ns_header(self.directory, self.ns, self.dim, self.generation, self.records,
                         self.log_bytes, rows, durable=True)

    def close(self) -> None:
        self.flush_pending()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _file_rows_min(cols: Columns, have_rows: int) -> int:
    """Rows every column file of ``cols`` can hold (read-only opens map what exists)."""
    rows = have_rows
    for name, dtype, _ in COLUMNS:
        try:
            rows = min(rows, os.path.getsize(cols.path(name)) // np.dtype(dtype).itemsize)
        except FileNotFoundError:
            raise StoreCorruptedError(f"{cols.path(name)} is missing (offset 0)") from None
    return max(rows, 1)


def _first_bad_vector(vectors: np.ndarray, rep: Replay, start: int) -> int | None:
    crc = zlib.crc32
    n = rep.rows
    if start >= n:
        return None
    raw = np.asarray(vectors[start:n]).view(np.uint8).reshape(n - start, -1)
    want = rep.vector_crc
    for i in range(n - start):
        if crc(raw[i]) != want[start + i]:
            return start + i
    return None


def _write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_ns_header(directory: str, ns: tuple, dim: int, generation: int, records: int,
                     log_bytes: int, rows: int, *, durable: bool) -> None:
    atomic_write_json(os.path.join(directory, NAMESPACE_HEADER), {
        "format": NAMESPACE_FORMAT, "version": FORMAT_VERSION, "namespace": list(ns),
        "dim": int(dim), "generation": int(generation), "records": int(records),
        "log_bytes": int(log_bytes), "rows": int(rows)}, durable=durable)


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
    n = len(rows)
    cols = Columns(dim, max(n, 1), directory, generation)
    log_path = os.path.join(directory, f"log.{generation}")
    crcs = vector_crcs(vectors)
    parts = []
    for i, (k, t, m, c, u, la, ac, imp) in enumerate(rows):
        parts.append(encode_put(i, k.encode("utf-8"), t.encode("utf-8"), m, c, u, la, ac, imp,
                                crcs[i]))
        cols.created_at[i] = c
        cols.updated_at[i] = u
        cols.last_accessed_at[i] = la
        cols.access_count[i] = ac
        cols.importance[i] = imp
    if n:
        cols.vectors[:n] = vectors
        cols.alive[:n] = True
    blob = b"".join(parts)
    with open(log_path, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    cols.sync()
    _write_ns_header(directory, ns, dim, generation, n, len(blob), n, durable=True)
    return cols, n, len(blob)


def repair_namespace(directory: str, dim: int) -> dict:
    """Rewrite a namespace as a new generation from every intact record (crash-safe).

    Records with a bad frame, CRC or row rule are skipped; a live key whose vector fails its
    record's CRC (or lies past the end of the vectors file) is dropped, never served with
    another row's vector. Lifecycle fields come from the records, access statistics from the
    column files when readable.

    Returns
    -------
    dict
        ``{"namespace": tuple, "kept": live keys kept, "dropped": live keys dropped,
        "skipped": damaged log stretches skipped}``.

    Raises
    ------
    StoreCorruptedError
        If the namespace header itself is unreadable (nothing names the namespace).
    FormatVersionError
        If the header is of a newer format.

    Examples
    --------
    >>> repair_namespace(ns_dir, 384)["dropped"]               # doctest: +SKIP
    0
    """
    hpath = os.path.join(directory, NAMESPACE_HEADER)
    h = _read_json(hpath, "namespace header")
    _check_version(h, hpath, NAMESPACE_FORMAT)
    ns = tuple(h.get("namespace") or ())
    gen = h.get("generation")
    if not ns or not isinstance(gen, int) or namespace_dirname(ns) != os.path.basename(directory):
        raise StoreCorruptedError(f"{hpath} does not name this namespace at offset 0; "
                                  "it cannot be repaired")
    log_path = os.path.join(directory, f"log.{gen}")
    try:
        with open(log_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    rep = scan_log(data, log_path, 0, salvage=True)
    probe = Columns.__new__(Columns)
    probe.dim, probe.directory, probe.generation, probe._mm = dim, directory, gen, {}
    try:
        have = probe.file_capacity()
    except FileNotFoundError:
        have = 0
    vecs = (np.fromfile(probe.path("vectors"), dtype=np.float32, count=have * dim)
            .reshape(have, dim) if have else np.zeros((0, dim), np.float32))
    stats = {}
    for name, dtype in (("last_accessed_at", np.float64), ("access_count", np.int64)):
        try:
            stats[name] = np.fromfile(probe.path(name), dtype=dtype)
        except (FileNotFoundError, ValueError):
            stats[name] = np.zeros(0, dtype)
    keep, dropped = [], 0
    for idx in sorted(rep.keys.values()):
        fr = rep.file_rows[idx]
        if fr >= have or zlib.crc32(vecs[fr].tobytes()) != rep.vector_crc[idx]:
            dropped += 1
            continue
        keep.append(idx)
    rows = []
    for idx in keep:
        fr = rep.file_rows[idx]
        la, ac = rep.last_accessed_at[idx], rep.access_count[idx]
        if fr < stats["last_accessed_at"].shape[0] and np.isfinite(stats["last_accessed_at"][fr]):
            la = max(la, float(stats["last_accessed_at"][fr]))
        if fr < stats["access_count"].shape[0]:
            ac = max(ac, int(stats["access_count"][fr]))
        rows.append((rep.key_of[idx], rep.texts[idx], rep.metas[idx], rep.created_at[idx],
                     rep.updated_at[idx], la, ac, rep.importance[idx]))
    new_vecs = vecs[[rep.file_rows[i] for i in keep]] if keep else np.zeros((0, dim), np.float32)
    cols, _, _ = write_generation(directory, ns, dim, gen + 1, rows, new_vecs)
    cols.release()
    files = NamespaceFiles.__new__(NamespaceFiles)
    files.directory, files.dim, files.generation = directory, dim, gen + 1
    files._remove_stale()
    return {"namespace": ns, "kept": len(keep), "dropped": dropped, "skipped": rep.skipped}
