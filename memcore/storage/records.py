"""Records of the namespace log: framing, PUT/DEL encoding, CRCs of vectors.

Layout: see :mod:`memcore.storage` (Record layout).
"""

from __future__ import annotations

import struct
from typing import Sequence

import numpy as np

from memcore._crc import crc32
from memcore.errors import StoreCorruptedError
from memcore.kernels.logscan import gather_segments

MAGIC = 0x52434D4D
#: The magic of a batch's first record until the batch is committed: its first byte is 0,
#: and the commit writes that one byte (``COMMIT_BYTE``) once every record is in the log.
PENDING_MAGIC = MAGIC & ~0xFF
COMMIT_BYTE = bytes([MAGIC & 0xFF])
OP_PUT = 1
OP_DEL = 2
FRAME = struct.Struct("<III")                   # magic, payload length, crc32(payload)
PUT_FIXED = struct.Struct("<B3xIdddqdIIII")     # 64 bytes
DEL_FIXED = struct.Struct("<B3xII")             # 12 bytes
MAX_PAYLOAD = 1 << 30

def encode_put(row: int, key: bytes, text: bytes, meta: bytes, created_at: float,
               updated_at: float, last_accessed_at: float, access_count: int,
               importance: float, vector_crc: int) -> bytes:
    """One framed PUT record (see the module docstring for the layout)."""
    payload = b"".join((PUT_FIXED.pack(OP_PUT, row, created_at, updated_at, last_accessed_at,
                                       access_count, importance, vector_crc, len(key), len(text),
                                       len(meta)), key, text, meta))
    return FRAME.pack(MAGIC, len(payload), crc32(payload)) + payload


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
    crc = crc32
    crcs = np.fromiter((crc(mv[s + 12:e]) for s, e in zip(starts.tolist(), ends.tolist())),
                       np.dtype("<u4"), n)
    mv.release()
    buf = np.frombuffer(blob, np.uint8)
    buf[(starts + 8)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(n, 4)


def encode_puts(first_row: int, keys: Sequence[bytes], texts: Sequence[bytes],
                metadata: Sequence[bytes], created_at, updated_at, last_accessed_at, access_count,
                importance, vector_crcs) -> tuple[bytearray, np.ndarray]:
    """Many framed PUT records at once, byte for byte what :func:`encode_put` writes.

    Parameters
    ----------
    first_row : int
        Row of the first record; the others follow.
    keys, texts, metadata : sequence of bytes, length n
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
    ml = np.fromiter(map(len, metadata), np.int64, n)
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
    parts[3::4] = metadata
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
    buf[(starts + BATCH_COUNT_AT)[:, None] + np.arange(3)] = 0     # no batch count
    for at, values, dtype in ((16, np.arange(n), "<u4"), (36, last_accessed_at, "<f8"),
                              (44, access_count, "<i8")):
        raw = np.ascontiguousarray(values, dtype=dtype).view(np.uint8).reshape(n, -1)
        buf[(starts + at)[:, None] + np.arange(raw.shape[1])] = raw
    del buf
    _patch_crcs(out, starts, ends)
    return out, starts


def pending_batch_at(data, off: int, size: int) -> bool:
    """Whether an uncommitted batch starts at ``off``: an intact record (length and CRC
    valid) whose magic is :data:`PENDING_MAGIC` -- a ``put_many`` whose commit byte was not
    written (the process died first). Recovery cuts the log there, like a torn tail."""
    if size - off < FRAME.size:
        return False
    magic, length, crc = FRAME.unpack_from(data, off)
    start = off + FRAME.size
    return (magic == PENDING_MAGIC and length <= MAX_PAYLOAD and start + length <= size
            and crc32(data[start:start + length]) == crc)


#: Where a batch's first record holds the batch's record count: its payload's 3 pad bytes
#: (u24, little-endian; readers of format 2 ignore them, so old ones read the files as before).
#: Every other record has 0 there. Saturates at :data:`MAX_BATCH_COUNT` ("at least that many").
BATCH_COUNT_AT = FRAME.size + 1
MAX_BATCH_COUNT = 0xFFFFFF


def mark_batch(blob: bytearray, count: int) -> None:
    """Make ``blob``'s first record the pending head of a batch of ``count`` records: its pad
    bytes hold ``count`` (its CRC recomputed) and its magic is :data:`PENDING_MAGIC` until the
    commit byte is written.

    Examples
    --------
    >>> blob = bytearray(encode_delete(0, b"a") + encode_delete(1, b"b"))
    >>> mark_batch(blob, 2); batch_count(blob, 0), pending_batch_at(blob, 0, len(blob))
    (2, True)
    """
    length = FRAME.unpack_from(blob, 0)[1]
    at = BATCH_COUNT_AT
    blob[at:at + 3] = min(count, MAX_BATCH_COUNT).to_bytes(3, "little")
    struct.pack_into("<I", blob, 8, crc32(memoryview(blob)[FRAME.size:FRAME.size + length]))
    blob[0] = 0


def batch_count(data, off: int) -> int:
    """The batch count in the pad bytes of the record at ``off`` (0: not a batch's head)."""
    return int.from_bytes(bytes(data[off + BATCH_COUNT_AT:off + BATCH_COUNT_AT + 3]), "little")


def encode_delete(row: int, key: bytes) -> bytes:
    """One framed DEL record."""
    payload = DEL_FIXED.pack(OP_DEL, row, len(key)) + key
    return FRAME.pack(MAGIC, len(payload), crc32(payload)) + payload



def vector_crcs(vectors: np.ndarray) -> list[int]:
    """CRC-32 of each row's float32 bytes, as the PUT records store them."""
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    crc = crc32
    return [crc(row) for row in v.view(np.uint8).reshape(v.shape[0], -1)] if v.shape[0] else []



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
    crc = crc32
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
