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
"dim": dim, "generation": g, "records": r, "log_bytes": b, "rows": n}`` -- a *verified
checkpoint*: the first ``b`` bytes of the log (``r`` records) and the first ``n`` rows of every
column file were fsynced before the header was written, and each of the first ``n`` vectors was
checked against its PUT record's ``vector_crc`` (the rows written since the previous checkpoint
at every checkpoint; every live row when compaction writes a generation). Headers are
replaced atomically: write ``header.json.tmp``, fsync, rename over ``header.json``, fsync the
directory.

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

Compaction first checks every live vector against its PUT record's ``vector_crc`` (a mismatch
-> :class:`StoreCorruptedError` naming the vectors file, byte offset and row; nothing is
written, the old generation stays the store and ``repair()`` drops that key), then copies each
live row's PUT record byte for byte, patching only its row, ``last_accessed_at`` and
``access_count`` (and so the frame CRC): the result is what re-encoding would write. The
``vector_crc`` is never recomputed from the vectors file, so a damaged vector cannot be
laundered into a consistent row.

A checkpoint (``close()``, ``flush()``) checks the vectors of the rows written since the last
checkpoint against their records' ``vector_crc`` (a mismatch -> :class:`StoreCorruptedError`
as above; the header is not advanced, so the next open finds the row again), fsyncs every file
and then replaces the header with the current record count, log length and row count.

Recovery (on open)
------------------
1. Header: an unknown format or a missing field -> :class:`StoreCorruptedError`; a version
   newer than :data:`FORMAT_VERSION` -> :class:`FormatVersionError` (never a misread).
2. The log is scanned record by record (frame, length, CRC, row rule) -- frames and CRCs by
   the numba kernel :func:`memcore.kernels.logscan.scan_records`, fixed fields and texts
   decoded column-wise; any record that breaks a replay rule, or damage that is not a torn
   tail, is re-examined by the exact Python scan, which names it. At the first bad
   record at offset ``x``: if ``x`` lies inside the checkpoint, or any valid record follows
   it, the damage is in the middle of the file -> :class:`StoreCorruptedError` naming the file
   and ``x``. Otherwise it is a torn tail (a write cut short by a crash) and the log is
   truncated to ``x``, the end of the last committed record (read-only opens just ignore it).
3. Every row written since the last verified checkpoint (rows ``n`` and up) is checked
   against its record's ``vector_crc``; a mismatch -> :class:`StoreCorruptedError` naming the
   vectors file, byte offset and row. (Rows below ``n`` were verified and fsynced, and rows
   are append-only: nothing writes a committed row's vector again; ``repair()`` checks all.)
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
from memcore.kernels.logscan import CRC_TABLE, gather_segments, max_records, scan_records

__all__ = [
    "FORMAT_VERSION",
    "DURABILITY_MODES",
    "Columns",
    "NamespaceFiles",
    "Replay",
    "namespace_dirname",
    "encode_put",
    "encode_delete",
    "first_bad_row",
    "record_vector_crcs",
    "scan_log",
    "verify_vectors",
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


#: A whole PUT record's first 76 bytes: the frame, then the payload's fixed part.
FRAMED_PUT_DTYPE = np.dtype({
    "names": ["magic", "length", "crc", "op", "row", "created_at", "updated_at",
              "last_accessed_at", "access_count", "importance", "vector_crc", "key_len",
              "text_len", "meta_len"],
    "formats": ["<u4", "<u4", "<u4", "u1", "<u4", "<f8", "<f8", "<f8", "<i8", "<f8", "<u4",
                "<u4", "<u4", "<u4"],
    "offsets": [0, 4, 8, 12, 16, 20, 28, 36, 44, 52, 60, 64, 68, 72],
    "itemsize": 12 + 64})


def _patch_crcs(blob: bytearray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Write each record's payload CRC-32 into its frame (records at ``[starts, ends)``)."""
    n = starts.shape[0]
    if n == 0:
        return
    mv = memoryview(blob)
    crc = zlib.crc32
    crcs = np.fromiter((crc(mv[s + 12:e]) for s, e in zip(starts.tolist(), ends.tolist())),
                       np.dtype("<u4"), n)
    mv.release()
    buf = np.frombuffer(blob, np.uint8)
    buf[(starts + 8)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(n, 4)


def encode_puts(first_row: int, keys: Sequence[bytes], texts: Sequence[bytes],
                metas: Sequence[bytes], created_at, updated_at, last_accessed_at, access_count,
                importance, vector_crcs) -> tuple[bytearray, np.ndarray]:
    """Many framed PUT records at once, byte for byte what :func:`encode_put` writes.

    Parameters
    ----------
    first_row : int
        Row of the first record; the others follow.
    keys, texts, metas : sequence of bytes, length n
        UTF-8 key, text and metadata JSON.
    created_at, updated_at, last_accessed_at : array_like of shape (n,), float64
        Unix seconds.
    access_count : array_like of shape (n,), int64
    importance : array_like of shape (n,), float64
    vector_crcs : array_like of shape (n,), uint32

    Returns
    -------
    blob : bytearray
        The records, concatenated.
    offsets : ndarray of shape (n,), int64
        Where each record starts in ``blob``.

    Examples
    --------
    >>> blob, offs = encode_puts(0, [b"k"], [b"t"], [b"{}"], [1.0], [1.0], [1.0], [0], [0.5],
    ...                          [0])
    >>> bytes(blob) == encode_put(0, b"k", b"t", b"{}", 1.0, 1.0, 1.0, 0, 0.5, 0)
    True
    """
    n = len(keys)
    head = np.zeros(n, FRAMED_PUT_DTYPE)
    kl = np.fromiter(map(len, keys), np.int64, n)
    tl = np.fromiter(map(len, texts), np.int64, n)
    ml = np.fromiter(map(len, metas), np.int64, n)
    length = PUT_FIXED.size + kl + tl + ml
    head["magic"] = MAGIC
    head["length"] = length
    head["op"] = OP_PUT
    head["row"] = np.arange(first_row, first_row + n)
    head["created_at"] = created_at
    head["updated_at"] = updated_at
    head["last_accessed_at"] = last_accessed_at
    head["access_count"] = access_count
    head["importance"] = importance
    head["vector_crc"] = vector_crcs
    head["key_len"], head["text_len"], head["meta_len"] = kl, tl, ml
    ends = np.cumsum(length + FRAME.size)
    starts = ends - (length + FRAME.size)
    hb = head.tobytes()
    size = FRAMED_PUT_DTYPE.itemsize
    parts: list = [None] * (4 * n)
    parts[0::4] = [hb[i:i + size] for i in range(0, n * size, size)]
    parts[1::4] = keys
    parts[2::4] = texts
    parts[3::4] = metas
    blob = bytearray(b"".join(parts))
    _patch_crcs(blob, starts, ends)
    return blob, starts


def copy_puts(log: bytes, offsets: np.ndarray, last_accessed_at, access_count
              ) -> tuple[bytearray, np.ndarray]:
    """Copy PUT records of ``log`` as rows 0..n-1 of a new log, refreshing access statistics.

    Byte for byte what re-encoding each record with :func:`encode_put` (new row, the given
    ``last_accessed_at``/``access_count``, everything else as recorded) writes: compaction
    copies live records instead of rebuilding them field by field.

    Parameters
    ----------
    log : bytes
        The source log.
    offsets : ndarray of shape (n,), int64
        Where each PUT record starts in ``log`` (valid, CRC-checked records).
    last_accessed_at : array_like of shape (n,), float64
    access_count : array_like of shape (n,), int64

    Returns
    -------
    blob : bytearray
    offsets : ndarray of shape (n,), int64
        Where each record starts in ``blob``.

    Examples
    --------
    >>> rec = encode_put(7, b"k", b"t", b"{}", 1.0, 1.0, 1.0, 0, 0.5, 0)
    >>> blob, _ = copy_puts(rec, np.array([0]), [2.0], [3])
    >>> bytes(blob) == encode_put(0, b"k", b"t", b"{}", 1.0, 1.0, 2.0, 3, 0.5, 0)
    True
    """
    offsets = np.asarray(offsets, np.int64)
    n = offsets.shape[0]
    src = np.frombuffer(log, np.uint8)
    if n == 0:
        return bytearray(), offsets.copy()
    lengths = (src[(offsets + 4)[:, None] + np.arange(4)].copy().view("<u4").reshape(n)
               .astype(np.int64) + FRAME.size)
    out = bytearray(int(lengths.sum()))
    gather_segments(src, offsets, lengths, -1, np.frombuffer(out, np.uint8))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(out, np.uint8)
    for at, values, dtype in ((16, np.arange(n), "<u4"), (36, last_accessed_at, "<f8"),
                              (44, access_count, "<i8")):
        raw = np.ascontiguousarray(values, dtype=dtype).view(np.uint8).reshape(n, -1)
        buf[(starts + at)[:, None] + np.arange(raw.shape[1])] = raw
    del buf
    _patch_crcs(out, starts, ends)
    return out, starts


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


#: The fixed part of a PUT payload as a NumPy record (decodes every PUT of a log at once).
PUT_DTYPE = np.dtype({
    "names": ["op", "row", "created_at", "updated_at", "last_accessed_at", "access_count",
              "importance", "vector_crc", "key_len", "text_len", "meta_len"],
    "formats": ["u1", "<u4", "<f8", "<f8", "<f8", "<i8", "<f8", "<u4", "<u4", "<u4", "<u4"],
    "offsets": [0, 4, 8, 16, 24, 32, 40, 48, 52, 56, 60],
    "itemsize": PUT_FIXED.size})
DEL_DTYPE = np.dtype({"names": ["op", "row", "key_len"], "formats": ["u1", "<u4", "<u4"],
                      "offsets": [0, 4, 8], "itemsize": DEL_FIXED.size})


def _fixed_fields(buf: np.ndarray, starts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The fixed parts at payload offsets ``starts``, gathered into one record array."""
    idx = starts[:, None] + np.arange(dtype.itemsize, dtype=np.int64)
    return np.ascontiguousarray(buf[idx]).view(dtype).reshape(-1)


def _decode_segments(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                     text: bool) -> list | None:
    """Byte ranges of ``buf`` as str (``text``) or bytes, in one gather + decode + split.

    Returns None when a range is not valid UTF-8 (the caller falls back to the exact scan).
    """
    m = starts.shape[0]
    if m == 0:
        return []
    out = np.empty(int(lengths.sum()) + m - 1, np.uint8)
    gather_segments(buf, starts, lengths, 0, out)
    blob = out.tobytes()
    try:
        parts = blob.decode("utf-8").split("\0") if text else blob.split(b"\0")
    except UnicodeDecodeError:
        return None
    if len(parts) != m:      # a segment holds NUL bytes itself: slice them one by one
        mv = memoryview(buf)
        try:
            parts = [bytes(mv[s:s + n]).decode("utf-8") if text else bytes(mv[s:s + n])
                     for s, n in zip(starts.tolist(), lengths.tolist())]
        except UnicodeDecodeError:
            return None
    return parts


def _scan_log_fast(data: bytes, path: str, committed_bytes: int) -> Replay | None:
    """:func:`scan_log` without salvage, vectorised: the frame walk and CRCs in a numba kernel,
    fixed fields decoded by NumPy, texts by one ``decode`` per column.

    Handles clean logs and torn tails exactly as the record-by-record scan; returns None when
    a record breaks a replay rule (row numbering, DEL of a live row, UTF-8), so the caller
    re-runs the exact scan, which names the offset and decides torn tail vs corruption.
    """
    size = len(data)
    buf = np.frombuffer(data, np.uint8)
    offsets = np.empty(max_records(size), np.int64)
    count, stop = scan_records(buf, 0, CRC_TABLE, offsets)
    count, stop = int(count), int(stop)
    offsets = offsets[:count]
    if stop < size:                          # the first bad frame: torn tail or corruption
        try:
            _parse_one(data, stop, size)
            return None                      # the kernel and the exact parser disagree
        except _BadRecord:
            if stop < committed_bytes or _valid_record_after(data, stop, size) is not None:
                return None                  # corruption: the exact scan names it

    payload = offsets + FRAME.size
    ops = buf[payload] if count else np.zeros(0, np.uint8)
    is_put = ops == OP_PUT
    put_at = payload[is_put]
    fixed = _fixed_fields(buf, put_at, PUT_DTYPE)
    m = fixed.shape[0]
    if not np.array_equal(fixed["row"], np.arange(m, dtype=np.uint32)):
        return None
    kl = fixed["key_len"].astype(np.int64)
    tl = fixed["text_len"].astype(np.int64)
    ml = fixed["meta_len"].astype(np.int64)
    k0 = put_at + PUT_FIXED.size
    keys = _decode_segments(buf, k0, kl, True)
    texts = _decode_segments(buf, k0 + kl, tl, True)
    metas = _decode_segments(buf, k0 + kl + tl, ml, False)
    if keys is None or texts is None or metas is None:
        return None
    rep = Replay()
    dead: list[int] = []
    if m == count:                           # no deletes: the last PUT of a key wins
        live = dict(zip(keys, range(m)))
        if len(live) < m:
            dead = [i for i, k in enumerate(keys) if live[k] != i]
    else:
        del_at = payload[~is_put]
        dfix = _fixed_fields(buf, del_at, DEL_DTYPE)
        del_keys = _decode_segments(buf, del_at + DEL_FIXED.size,
                                    dfix["key_len"].astype(np.int64), True)
        if del_keys is None:
            return None
        del_rows = dfix["row"].tolist()
        live = {}
        row = d = 0
        for put in is_put.tolist():
            if put:
                k = keys[row]
                old = live.get(k)
                if old is not None:
                    dead.append(old)
                live[k] = row
                row += 1
            else:
                k = del_keys[d]
                old = live.pop(k, None)
                if old is None or old != del_rows[d]:
                    return None
                dead.append(old)
                d += 1
    rep.keys, rep.key_of, rep.texts, rep.metas, rep.dead = live, keys, texts, metas, dead
    rep.created_at = fixed["created_at"]
    rep.updated_at = fixed["updated_at"]
    rep.last_accessed_at = fixed["last_accessed_at"]
    rep.access_count = fixed["access_count"]
    rep.importance = fixed["importance"].tolist()
    rep.vector_crc = fixed["vector_crc"]
    rep.record_offset = offsets[is_put]
    rep.file_rows = range(m)
    rep.records = count
    rep.end = stop
    return rep


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
    if not salvage:
        rep = _scan_log_fast(data, path, committed_bytes)
        if rep is not None:
            if rep.end < committed_bytes:
                raise StoreCorruptedError(
                    f"{path} ends at offset {len(data)}, before its last checkpoint at "
                    f"{committed_bytes}; the file was truncated")
            return rep
    return _scan_log_exact(data, path, committed_bytes, salvage)


def _scan_log_exact(data: bytes, path: str, committed_bytes: int, salvage: bool) -> Replay:
    """:func:`scan_log` record by record in Python: salvage, and the arbiter of damage."""
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
        self.checkpoint_rows = 0    # rows covered by the header's (verified) checkpoint
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

    def checkpoint(self, cols: Columns, rows: int, offsets: Sequence[int]) -> None:
        """Verify the rows written since the last checkpoint, fsync everything, then atomically
        record the checkpoint in the header.

        Parameters
        ----------
        cols : Columns
        rows : int
            Rows in use.
        offsets : sequence of int, length rows
            Log offset of each row's PUT record.

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
        _write_ns_header(self.directory, self.ns, self.dim, self.generation, self.records,
                         self.log_bytes, rows, durable=True)
        self.checkpoint_rows = rows

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
    n = rep.rows
    if start >= n:
        return None
    bad = first_bad_row(vectors[start:n], np.asarray(rep.vector_crc[start:n], np.uint32))
    return None if bad is None else start + bad


def first_bad_row(vectors: np.ndarray, crcs: np.ndarray) -> int | None:
    """Index of the first row whose float32 bytes do not have the expected CRC-32, or None.

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
    crcs : ndarray of shape (n,), uint32
        The ``vector_crc`` of each row's PUT record.

    Examples
    --------
    >>> v = np.ones((2, 4), np.float32)
    >>> first_bad_row(v, np.asarray(vector_crcs(v), np.uint32)) is None
    True
    """
    n = vectors.shape[0]
    if n == 0:
        return None
    raw = np.ascontiguousarray(vectors, np.float32).view(np.uint8).reshape(n, -1)
    crc = zlib.crc32
    want = crcs.tolist()
    for i in range(n):
        if crc(raw[i]) != want[i]:
            return i
    return None


#: Where a PUT record's ``vector_crc`` lies, from the start of its frame.
VECTOR_CRC_AT = FRAME.size + 48


def record_vector_crcs(log, offsets: np.ndarray, base: int = 0) -> np.ndarray:
    """The ``vector_crc`` field of the PUT records starting at ``offsets`` (valid records).

    Parameters
    ----------
    log : bytes-like
        The log, or the part of it that starts at log offset ``base``.
    offsets : ndarray of shape (n,), int64
        Log offsets of PUT records.
    base : int, default 0

    Returns
    -------
    ndarray of shape (n,), uint32

    Examples
    --------
    >>> rec = encode_put(0, b"k", b"t", b"{}", 1.0, 1.0, 1.0, 0, 0.5, 1234)
    >>> record_vector_crcs(rec, np.array([0])).tolist()
    [1234]
    """
    buf = np.frombuffer(log, np.uint8)
    at = np.asarray(offsets, np.int64) - base + VECTOR_CRC_AT
    return np.ascontiguousarray(buf[at[:, None] + np.arange(4)]).view("<u4").reshape(-1)


def verify_vectors(vectors: np.ndarray, crcs: np.ndarray, rows, path: str, offsets,
                   what: str) -> None:
    """Check vectors against their PUT records' CRCs; raise naming the first bad one.

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
        The vectors as they are about to be trusted (checkpointed or copied).
    crcs : ndarray of shape (n,), uint32
        Their records' ``vector_crc``.
    rows : sequence of int, length n
        Their rows in the vectors file ``path`` (for the message).
    offsets : sequence of int, length n
        Log offsets of their PUT records (for the message).
    what : str
        What was refused, e.g. ``"compact() wrote nothing"``.

    Raises
    ------
    StoreCorruptedError
        Naming ``path``, the byte offset and row of the first mismatch.

    Examples
    --------
    >>> v = np.ones((1, 4), np.float32)
    >>> verify_vectors(v, np.zeros(1, np.uint32), [0], "vectors.0.f32", [0], "x")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memcore.errors.StoreCorruptedError: vectors.0.f32 is corrupted at offset 0: ...
    """
    bad = first_bad_row(vectors, crcs)
    if bad is None:
        return
    row = int(rows[bad])
    raise StoreCorruptedError(
        f"{path} is corrupted at offset {row * vectors.shape[1] * 4}: row {row} does not "
        f"match the CRC its PUT record (log offset {int(offsets[bad])}) holds; {what}; "
        "store.repair() or LongTermMemory(..., repair=True) drops that key")


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
    fields = list(zip(*rows)) if rows else [[]] * 8
    blob, _ = encode_puts(0, [k.encode("utf-8") for k in fields[0]],
                          [t.encode("utf-8") for t in fields[1]], list(fields[2]), fields[3],
                          fields[4], fields[5], fields[6], fields[7], vector_crcs(vectors))
    return write_generation_blob(directory, ns, dim, generation, blob, vectors, {
        "created_at": fields[3], "updated_at": fields[4], "last_accessed_at": fields[5],
        "access_count": fields[6], "importance": fields[7]})


def write_generation_blob(directory: str, ns: tuple, dim: int, generation: int, blob,
                          vectors: np.ndarray, columns: dict) -> tuple[Columns, int, int]:
    """:func:`write_generation` from ready records: ``blob`` holds one PUT per row (rows 0..n-1,
    e.g. from :func:`copy_puts`), ``columns`` maps created_at, updated_at, last_accessed_at,
    access_count and importance to (n,) arrays; vectors are (n, dim) float32.

    Returns
    -------
    (Columns, records, log_bytes) of the new generation.
    """
    n = vectors.shape[0]
    probe = Columns.__new__(Columns)
    probe.dim, probe.directory, probe.generation = dim, directory, generation
    with open(probe.path("vectors"), "wb") as f:       # write(): no page fault per 4 KiB
        f.write(np.ascontiguousarray(vectors, np.float32))
        f.flush()
        os.fsync(f.fileno())
    cols = Columns(dim, max(n, 1), directory, generation)
    log_path = os.path.join(directory, f"log.{generation}")
    if n:
        for name, values in columns.items():
            getattr(cols, name)[:n] = values
        cols.alive[:n] = True
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
