"""Scanning a namespace log: replay, torn-tail recovery and salvage (see
:mod:`memcore.storage`, Recovery)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memcore._crc import crc32
from memcore.errors import StoreCorruptedError
from memcore.kernels.logscan import CRC_TABLE, gather_segments, max_records, scan_records
from memcore.storage.records import (
    BATCH_COUNT_AT,
    DEL_FIXED,
    FRAME,
    MAGIC,
    MAX_PAYLOAD,
    OP_DEL,
    OP_PUT,
    MAX_BATCH_COUNT,
    PENDING_MAGIC,
    PUT_FIXED,
    batch_count,
    first_bad_row,
    pending_batch_at,
)

#: How a :class:`StoreCorruptedError` of a damaged log ends.
REPAIR_HINT = ("store.repair() or LongTermMemory(..., repair=True) rewrites it keeping every "
               "intact record")


@dataclass
class Replay:
    """What a log scan recovers: one entry per row (dead rows included), plus the live keys.

    Per-row lists are indexed by row; ``keys`` maps each live key to its row.
    """

    keys: dict = field(default_factory=dict)
    key_of: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    metadata: list = field(default_factory=list)          # raw JSON bytes
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
    damaged: list = field(default_factory=list)          # their offsets (salvage; no torn tail)
    end: int = 0                                         # end of the last good record

    @property
    def rows(self) -> int:
        return len(self.key_of)


class BadRecord(Exception):
    """A record that fails its frame, CRC or row rules at ``offset`` (scan control flow:
    callers turn it into StoreCorruptedError or skip it when salvaging)."""

    def __init__(self, offset: int, reason: str):
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def parse_one(data, off: int, size: int):
    """Parse the record at ``off``: (op, fields, next_offset); raises BadRecord."""
    if size - off < FRAME.size:
        raise BadRecord(off, f"a {size - off}-byte fragment where a record frame starts")
    magic, length, crc = FRAME.unpack_from(data, off)
    if magic != MAGIC:
        raise BadRecord(off, f"bad record magic 0x{magic:08x}")
    start = off + FRAME.size
    end = start + length
    if length > MAX_PAYLOAD or end > size:
        raise BadRecord(off, f"record length {length} runs past the end of the file")
    if crc32(data[start:end]) != crc:
        raise BadRecord(off, "record CRC-32 mismatch")
    op = data[start]
    if op == OP_PUT:
        if length < PUT_FIXED.size:
            raise BadRecord(off, "PUT record shorter than its fixed part")
        fixed = PUT_FIXED.unpack_from(data, start)
        kl, tl, ml = fixed[8], fixed[9], fixed[10]
        p = start + PUT_FIXED.size
        if p + kl + tl + ml != end:
            raise BadRecord(off, "PUT record field lengths disagree with its length")
        try:
            key = bytes(data[p:p + kl]).decode("utf-8")
            text = bytes(data[p + kl:p + kl + tl]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise BadRecord(off, f"PUT record holds invalid UTF-8: {err}") from err
        meta = bytes(data[p + kl + tl:end])
        return OP_PUT, (fixed, key, text, meta), end
    if op == OP_DEL:
        if length < DEL_FIXED.size:
            raise BadRecord(off, "DEL record shorter than its fixed part")
        _, row, kl = DEL_FIXED.unpack_from(data, start)
        if start + DEL_FIXED.size + kl != end:
            raise BadRecord(off, "DEL record key length disagrees with its length")
        try:
            key = bytes(data[start + DEL_FIXED.size:end]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise BadRecord(off, f"DEL record holds invalid UTF-8: {err}") from err
        return OP_DEL, (row, key), end
    raise BadRecord(off, f"unknown record op {op}")


def _apply(rep: Replay, op: int, fields, off: int, salvage: bool = False) -> None:
    """Apply one parsed record to the replay; raises BadRecord when it breaks the row rules.

    With ``salvage`` rows missing from a damaged log are skipped: a PUT may name any row after
    the previous one, and ``file_rows`` keeps where each replayed row lives in the files.
    """
    if op == OP_PUT:
        fixed, key, text, meta = fields
        row = fixed[1]
        expected = rep.file_rows[-1] + 1 if rep.file_rows else 0
        if row != expected and not (salvage and row > expected):
            raise BadRecord(off, f"PUT record names row {row}, expected row {expected}")
        old = rep.keys.get(key)
        if old is not None:
            rep.dead.append(old)
        rep.keys[key] = len(rep.key_of)
        rep.file_rows.append(row)
        rep.key_of.append(key)
        rep.texts.append(text)
        rep.metadata.append(meta)
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
            raise BadRecord(off, f"DEL record for {key!r} names row {row}, which is not its "
                                  "live row")
        del rep.keys[key]
        rep.dead.append(idx)
    rep.records += 1


def valid_record_after(data, off: int, size: int) -> int | None:
    """Offset of the first CRC-valid record frame strictly after ``off``, or None."""
    magic = FRAME.pack(MAGIC, 0, 0)[:4]
    pos = off + 1
    while True:
        pos = data.find(magic, pos)
        if pos < 0:
            return None
        try:
            parse_one(data, pos, size)
            return pos
        except BadRecord:
            pos += 1


def short_batch(buf: np.ndarray, offsets: np.ndarray) -> tuple[int, int, int] | None:
    """The last committed batch among the records at ``offsets`` when fewer of its records
    follow than its count says, else None.

    A batch's records are all written before its commit byte (``"fsync"``: and synced), so a
    committed head is always followed by its whole batch: one that is not was cut by damage
    (a truncated log), never by a crash -- except for a reader racing the writer's append,
    which cuts the batch as if it were uncommitted (:func:`~memcore.storage.checkpoint.
    scan_tail`).

    Parameters
    ----------
    buf : ndarray of shape (size,), uint8
        The log bytes.
    offsets : ndarray of shape (count,), int64
        The intact records' offsets in ``buf``, in log order (all committed).

    Returns
    -------
    (head, count, present) or None
        The head's index in ``offsets``, its batch count, and the records present from it.

    Examples
    --------
    >>> from memcore.storage.records import encode_delete, mark_batch, COMMIT_BYTE
    >>> blob = bytearray(encode_delete(0, b"a") + encode_delete(1, b"b") + encode_delete(2, b"c"))
    >>> mark_batch(blob, 3); blob[0:1] = COMMIT_BYTE
    >>> buf, n = np.frombuffer(bytes(blob), np.uint8), len(blob) // 3
    >>> short_batch(buf, np.array([0, n, 2 * n]))           # whole: None
    >>> short_batch(buf, np.array([0, n]))                  # the log cut after two
    (0, 3, 2)
    """
    offsets = np.asarray(offsets, np.int64)
    if offsets.shape[0] == 0:
        return None
    at = offsets + BATCH_COUNT_AT
    count = (buf[at].astype(np.int64) | (buf[at + 1].astype(np.int64) << 8)
             | (buf[at + 2].astype(np.int64) << 16))
    heads = np.flatnonzero(count >= 2)
    if heads.shape[0] == 0:
        return None
    j = int(heads[-1])
    c, present = int(count[j]), offsets.shape[0] - j
    if c >= MAX_BATCH_COUNT or present >= c:
        return None
    return j, c, present


def short_batch_message(path: str, offset: int, batch: tuple[int, int, int]) -> str:
    """What :class:`StoreCorruptedError` says of :func:`short_batch`'s finding at ``offset``."""
    return (f"{path} is corrupted at offset {offset}: the committed batch of {batch[1]} records "
            f"there holds only {batch[2]} (the log was cut inside it, which no crash does: a "
            f"batch commits after all its records are written)")


def tail_damage(data, off: int, size: int, committed_bytes: int, base: int = 0, *,
                committed_batches: bool = True) -> str | None:
    """Why the first bad record at ``off`` is damage, or None when the log may be cut there
    (a write that never committed: a torn tail or an uncommitted batch). ``data`` starts at
    log offset ``base`` (for the message).

    Damage: ``off`` inside the checkpoint; a valid record after the uncommitted stretch;
    a pending record (:data:`~memcore.storage.records.PENDING_MAGIC`) without a batch count
    (no writer leaves one: a record whose first byte was zeroed) or followed by more intact
    records than its batch holds; a record whose frame and length are intact and fit in the
    file, with a bad CRC and a non-zero last byte (a flipped bit: a torn write is short, or
    ends in the zeros of a file extended but never written); with ``committed_batches``, a
    record cut short whose magic is committed and whose batch count is >= 2 (a committed
    batch's head: its batch was whole before its commit byte, so only damage cuts it; a
    reader racing the writer passes False and cuts it like a torn tail).
    """
    if off < committed_bytes:
        return "inside the last checkpoint"
    pos = off
    if pending_batch_at(data, off, size):
        count = batch_count(data, off)
        if count < 2:
            return "a pending record that heads no batch (its first byte was zeroed)"
        pos = off + FRAME.size + FRAME.unpack_from(data, off)[1]
        k = 1
        while k < count or count == MAX_BATCH_COUNT:
            try:
                pos = parse_one(data, pos, size)[2]
            except BadRecord:
                break
            k += 1
    later = valid_record_after(data, pos - 1, size) if pos < size else None
    if later is not None:
        return f"followed by a valid record at offset {base + later}"
    if (committed_batches and pos == off and size - off >= BATCH_COUNT_AT + 3
            and FRAME.unpack_from(data, off)[0] == MAGIC and batch_count(data, off) >= 2):
        return (f"the first record of a committed batch of {batch_count(data, off)} records, "
                "cut short (no crash does: a batch commits after all its records are written)")
    if pos == off and size - off >= FRAME.size:
        magic, length, _ = FRAME.unpack_from(data, off)
        end = off + FRAME.size + length
        if magic in (MAGIC, PENDING_MAGIC) and length <= MAX_PAYLOAD and end <= size \
                and data[end - 1] != 0:
            return ("a whole record at the end of the log that fails its checks (a flipped "
                    "bit, not a torn write)")
    return None


#: The fixed part of a PUT payload as a NumPy record (decodes every PUT of a log at once).
PUT_DTYPE = np.dtype({
    "names": ["op", "row", "created_at", "updated_at", "last_accessed_at", "access_count",
              "importance", "vector_crc", "key_len", "text_len", "meta_len"],
    "formats": ["u1", "<u4", "<f8", "<f8", "<f8", "<i8", "<f8", "<u4", "<u4", "<u4", "<u4"],
    "offsets": [0, 4, 8, 16, 24, 32, 40, 48, 52, 56, 60],
    "itemsize": PUT_FIXED.size})
DEL_DTYPE = np.dtype({"names": ["op", "row", "key_len"], "formats": ["u1", "<u4", "<u4"],
                      "offsets": [0, 4, 8], "itemsize": DEL_FIXED.size})


def fixed_fields(buf: np.ndarray, starts: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The fixed parts at payload offsets ``starts``, gathered into one record array."""
    idx = starts[:, None] + np.arange(dtype.itemsize, dtype=np.int64)
    return np.ascontiguousarray(buf[idx]).view(dtype).reshape(-1)


def decode_segments(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
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


def frame_scan(data: bytes) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The numba frame walk over ``data``: (bytes as uint8, frame offsets (count,) int64, count,
    offset of the first bad frame or ``len(data)``)."""
    buf = np.frombuffer(data, np.uint8)
    offsets = np.empty(max_records(len(data)), np.int64)
    count, stop = scan_records(buf, 0, CRC_TABLE, offsets)
    count, stop = int(count), int(stop)
    return buf, offsets[:count], count, stop


def _scan_log_fast(data: bytes, path: str, committed_bytes: int) -> Replay | None:
    """:func:`scan_log` without salvage, vectorised: the frame walk and CRCs in a numba kernel,
    fixed fields decoded by NumPy, texts by one ``decode`` per column.

    Handles clean logs and torn tails exactly as the record-by-record scan; returns None when
    a record breaks a replay rule (row numbering, DEL of a live row, UTF-8), so the caller
    re-runs the exact scan, which names the offset and decides torn tail vs corruption.
    """
    size = len(data)
    buf, offsets, count, stop = frame_scan(data)
    if stop < size:                          # the first bad frame: torn tail or corruption
        try:
            parse_one(data, stop, size)
            return None                      # the kernel and the exact parser disagree
        except BadRecord:
            if tail_damage(data, stop, size, committed_bytes) is not None:
                return None                  # corruption: the exact scan names it

    if short_batch(buf, offsets) is not None:
        return None                          # damage: the exact scan names it
    payload = offsets + FRAME.size
    ops = buf[payload] if count else np.zeros(0, np.uint8)
    is_put = ops == OP_PUT
    put_at = payload[is_put]
    fixed = fixed_fields(buf, put_at, PUT_DTYPE)
    m = fixed.shape[0]
    if not np.array_equal(fixed["row"], np.arange(m, dtype=np.uint32)):
        return None
    kl = fixed["key_len"].astype(np.int64)
    tl = fixed["text_len"].astype(np.int64)
    ml = fixed["meta_len"].astype(np.int64)
    k0 = put_at + PUT_FIXED.size
    keys = decode_segments(buf, k0, kl, True)
    texts = decode_segments(buf, k0 + kl, tl, True)
    metadata = decode_segments(buf, k0 + kl + tl, ml, False)
    if keys is None or texts is None or metadata is None:
        return None
    rep = Replay()
    dead: list[int] = []
    if m == count:                           # no deletes: the last PUT of a key wins
        live = dict(zip(keys, range(m)))
        if len(live) < m:
            dead = [i for i, k in enumerate(keys) if live[k] != i]
    else:
        del_at = payload[~is_put]
        dfix = fixed_fields(buf, del_at, DEL_DTYPE)
        del_keys = decode_segments(buf, del_at + DEL_FIXED.size,
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
    rep.keys, rep.key_of, rep.texts, rep.metadata, rep.dead = live, keys, texts, metadata, dead
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
    >>> from memcore.storage.records import encode_delete
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
    return scan_log_exact(data, path, committed_bytes, salvage)


def scan_log_exact(data: bytes, path: str, committed_bytes: int, salvage: bool) -> Replay:
    """:func:`scan_log` record by record in Python: salvage, and the arbiter of damage."""
    size = len(data)
    rep = Replay()
    off = 0
    intact: list[int] = []                   # the records read, for the batch count check
    while off < size:
        try:
            op, fields, nxt = parse_one(data, off, size)
            _apply(rep, op, fields, off, salvage)
            intact.append(off)
        except BadRecord as bad:
            where = tail_damage(data, off, size, committed_bytes)
            if where is None:                # a torn tail or an uncommitted batch: never committed
                rep.skipped += salvage and not pending_batch_at(data, off, size)
                break
            if salvage and pending_batch_at(data, off, size):
                # intact but for its first byte (a committed record: see tail_damage)
                rec = bytearray(data[off:off + FRAME.size + FRAME.unpack_from(data, off)[1]])
                rec[0] = MAGIC & 0xFF
                try:
                    op, fields, n = parse_one(rec, 0, len(rec))
                    _apply(rep, op, fields, off, salvage)
                except BadRecord:
                    pass
                else:
                    rep.skipped += 1
                    intact.append(off)
                    off = rep.end = off + n
                    continue
            later = valid_record_after(data, off, size)
            if salvage:
                rep.skipped += 1
                rep.damaged.append(off)
                if later is None:
                    break
                off = later
                continue
            raise StoreCorruptedError(
                f"{path} is corrupted at offset {off} ({bad.reason}), {where}; {REPAIR_HINT}"
            ) from None
        off = nxt
        rep.end = off
    if off < committed_bytes and not salvage:
        raise StoreCorruptedError(
            f"{path} ends at offset {size}, before its last checkpoint at {committed_bytes}; "
            "the file was truncated")
    batch = short_batch(np.frombuffer(data, np.uint8), np.asarray(intact, np.int64))
    if batch is not None:
        if not salvage:
            raise StoreCorruptedError(
                f"{short_batch_message(path, intact[batch[0]], batch)}; {REPAIR_HINT}")
        rep.skipped += 1                     # the batch's missing records: nothing vouches
        rep.damaged.append(rep.end)          # for what they replaced or deleted
    return rep



def first_bad_vector(vectors: np.ndarray, rep: Replay, start: int) -> int | None:
    n = rep.rows
    if start >= n:
        return None
    bad = first_bad_row(vectors[start:n], np.asarray(rep.vector_crc[start:n], np.uint32))
    return None if bad is None else start + bad
