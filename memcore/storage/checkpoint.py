"""Format 2: checkpoints, the persisted key index, reading single records, replaying the log
tail (see :mod:`memcore.storage`, Format 2)."""

from __future__ import annotations

import hashlib
import os
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from memcore._crc import crc32_of
from memcore.errors import StoreCorruptedError
from memcore.storage.layout import CHECKPOINT_FILES, checkpoint_path, fsync_dir
from memcore.storage.log import (  # noqa: F401  (REPAIR_HINT: imported from here too)
    DEL_DTYPE,
    PUT_DTYPE,
    REPAIR_HINT,
    BadRecord,
    decode_segments,
    fixed_fields,
    frame_scan,
    parse_one,
    short_batch,
    tail_damage,
)
from memcore.storage.records import DEL_FIXED, FRAME, MAGIC, OP_DEL, OP_PUT, PUT_FIXED

#: A checkpoint is written after this many log bytes or rows since the previous one.
CHECKPOINT_BYTES = 64 << 20
CHECKPOINT_ROWS = 65_536



# ---------------------------------------------------------------------------------- keys

def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """64-bit BLAKE2b of each key's UTF-8 bytes: ndarray (n,), uint64 (the key index's hash).

    Examples
    --------
    >>> key_hashes(["a", "a", "b"]).tolist()[0] == key_hashes(["a"]).tolist()[0]
    True
    """
    b2 = hashlib.blake2b
    blob = b"".join(b2(k.encode("utf-8"), digest_size=8).digest() for k in keys)
    return np.frombuffer(blob, "<u8").astype(np.uint64) if keys else np.zeros(0, np.uint64)


class KeyIndex:
    """Live key -> row of one format-2 namespace.

    The keys live at the last checkpoint are two arrays sorted by hash (``hashes`` (m,)
    uint64, ``rows`` (m,) int64; memory-mapped checkpoint files); keys written since are a
    dict (``tail``). A hash match is confirmed by the key of the row's record (``key_at``),
    and only while the row is alive: a replaced or deleted key's old row is dead.

    Parameters
    ----------
    hashes, rows : ndarray
    key_at : callable
        ``key_at(row) -> str``: the key of a row's PUT record.
    """

    __slots__ = ("hashes", "rows", "tail", "key_at")

    def __init__(self, hashes: np.ndarray, rows: np.ndarray, key_at) -> None:
        self.hashes, self.rows, self.tail, self.key_at = hashes, rows, {}, key_at

    def lookup(self, key: str, alive: np.ndarray, h: int | None = None) -> int | None:
        """The live row of ``key`` or None."""
        row = self.tail.get(key)
        if row is not None or self.hashes.shape[0] == 0:
            return row
        if h is None:
            h = int(key_hashes([key])[0])
        return self._persisted(key, h, alive)

    def _persisted(self, key: str, h: int, alive: np.ndarray) -> int | None:
        hs = self.hashes
        i = int(np.searchsorted(hs, np.uint64(h)))
        while i < hs.shape[0] and int(hs[i]) == h:
            row = int(self.rows[i])
            if alive[row] and self.key_at(row) == key:
                return row
            i += 1
        return None

    def lookup_many(self, keys: Sequence[str], alive: np.ndarray) -> list:
        """:meth:`lookup` of each key (one vectorised hash search)."""
        out = [self.tail.get(k) for k in keys]
        if self.hashes.shape[0] == 0:
            return out
        miss = [i for i, r in enumerate(out) if r is None]
        if not miss:
            return out
        hs = key_hashes([keys[i] for i in miss])
        pos = np.searchsorted(self.hashes, hs)
        hit = pos < self.hashes.shape[0]
        hit[hit] = self.hashes[pos[hit]] == hs[hit]
        for j in np.flatnonzero(hit).tolist():
            i = miss[j]
            out[i] = self._persisted(keys[i], int(hs[j]), alive)
        return out

    def merged(self, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sorted (hashes, rows) of every live key: the next checkpoint's key index."""
        keep = alive[self.rows] if self.rows.shape[0] else np.zeros(0, np.bool_)
        tail_keys = list(self.tail)
        hs = np.concatenate([np.asarray(self.hashes[keep], np.uint64), key_hashes(tail_keys)])
        rows = np.concatenate([np.asarray(self.rows[keep], np.int64),
                               np.fromiter(self.tail.values(), np.int64, len(tail_keys))])
        order = np.argsort(hs, kind="stable")
        return hs[order], rows[order]


# ---------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class PutRecord:
    """The variable fields of one PUT record (the numeric ones are columns)."""

    row: int
    key: str
    text: str
    metadata: bytes
    importance: float
    vector_crc: int = 0


def read_put(fd: int, offset: int, path: str) -> PutRecord:
    """The PUT record at log ``offset``: one ``pread`` (two for long records), CRC checked.

    Raises
    ------
    StoreCorruptedError
        Naming ``path`` and ``offset`` when the bytes there are not an intact PUT record.
    """
    head = os.pread(fd, 1024, offset)
    try:
        if len(head) < FRAME.size:
            raise BadRecord(offset, "the log ends inside the record")
        magic, length, crc = FRAME.unpack_from(head, 0)
        if magic != MAGIC:
            raise BadRecord(offset, f"bad record magic 0x{magic:08x}")
        end = FRAME.size + length
        if end > len(head):
            head += os.pread(fd, end - len(head), offset + len(head))
        payload = memoryview(head)[FRAME.size:end]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise BadRecord(offset, "record CRC-32 mismatch")
        if length < PUT_FIXED.size or payload[0] != OP_PUT:
            raise BadRecord(offset, "not a PUT record")
        fixed = PUT_FIXED.unpack_from(payload, 0)
        kl, tl, ml = fixed[8], fixed[9], fixed[10]
        p = PUT_FIXED.size
        if p + kl + tl + ml != length:
            raise BadRecord(offset, "PUT record field lengths disagree with its length")
        key = bytes(payload[p:p + kl]).decode("utf-8")
        text = bytes(payload[p + kl:p + kl + tl]).decode("utf-8")
        return PutRecord(fixed[1], key, text, bytes(payload[p + kl + tl:length]), fixed[6],
                         fixed[7])
    except (BadRecord, UnicodeDecodeError) as err:
        reason = err.reason if isinstance(err, BadRecord) else f"invalid UTF-8: {err}"
        raise StoreCorruptedError(f"{path} is corrupted at offset {offset} ({reason}); "
                                  f"{REPAIR_HINT}") from None


def decode_puts(log: np.ndarray, offsets: np.ndarray, path: str, *, keys: bool = True,
                texts: bool = True, metadata: bool = True) -> dict:
    """Fields of many PUT records at once (each CRC checked).

    Parameters
    ----------
    log : ndarray of shape (size,), uint8
        The log (e.g. memory-mapped).
    offsets : ndarray of shape (n,), int64
        Where each record starts.
    path : str
        The log's path, for errors.

    Returns
    -------
    dict
        ``"importance"`` (n,) float64 and the lists asked for: ``"keys"``, ``"texts"`` (str),
        ``"metadata"`` (JSON bytes).

    Raises
    ------
    StoreCorruptedError
        If a record is damaged (naming the file and its offset).
    """
    offsets = np.asarray(offsets, np.int64)
    n = offsets.shape[0]
    if n and int(offsets.max()) + FRAME.size + PUT_FIXED.size > log.shape[0]:
        bad = int(offsets[np.argmax(offsets)])
        raise StoreCorruptedError(f"{path} is corrupted at offset {bad} (the log ends inside "
                                  f"the record); {REPAIR_HINT}")
    fixed = fixed_fields(log, offsets + FRAME.size, PUT_DTYPE)
    frame = fixed_fields(log, offsets, np.dtype([("magic", "<u4"), ("length", "<u4"),
                                                  ("crc", "<u4")]))
    kl = fixed["key_len"].astype(np.int64)
    tl = fixed["text_len"].astype(np.int64)
    ml = fixed["meta_len"].astype(np.int64)
    length = frame["length"].astype(np.int64)
    ok = (frame["magic"] == MAGIC) & (fixed["op"] == OP_PUT) & \
        (length == PUT_FIXED.size + kl + tl + ml) & \
        (offsets + FRAME.size + length <= log.shape[0])
    if ok.all():
        crc = zlib.crc32
        mv = memoryview(log)
        got = np.fromiter((crc(mv[s:s + m]) for s, m in
                           zip((offsets + FRAME.size).tolist(), length.tolist())), np.uint32, n)
        ok = got == frame["crc"]
    if not ok.all():
        bad = int(offsets[np.argmin(ok)])
        raise StoreCorruptedError(f"{path} is corrupted at offset {bad} (not an intact PUT "
                                  f"record); {REPAIR_HINT}")
    k0 = offsets + FRAME.size + PUT_FIXED.size
    out: dict = {"importance": np.asarray(fixed["importance"], np.float64)}
    for want, name, start, lens, text in ((keys, "keys", k0, kl, True),
                                          (texts, "texts", k0 + kl, tl, True),
                                          (metadata, "metadata", k0 + kl + tl, ml, False)):
        if want:
            got = decode_segments(log, start, lens, text)
            if got is None:
                raise StoreCorruptedError(f"{path} holds invalid UTF-8 in a PUT record; "
                                          f"{REPAIR_HINT}")
            out[name] = got
    return out


# ---------------------------------------------------------------------------------- tail

@dataclass
class Tail:
    """The records after a checkpoint, decoded (see :func:`scan_tail`).

    ``ops`` is 1 (PUT) or 2 (DEL) per record in log order; PUT fields are per PUT, DEL fields
    per DEL; offsets are absolute log offsets.
    """

    ops: np.ndarray
    put_offsets: np.ndarray
    put_fixed: np.ndarray
    put_keys: list
    del_rows: list
    del_keys: list
    end: int

    @property
    def records(self) -> int:
        return int(self.ops.shape[0])


def scan_tail(data: bytes, base: int, path: str, first_row: int) -> Tail:
    """Decode the log records that follow a checkpoint.

    Parameters
    ----------
    data : bytes
        The log from offset ``base`` (the checkpoint's ``log_bytes``) to its end.
    base : int
    path : str
    first_row : int
        The checkpoint's row count: the first PUT must name this row, the next ones follow.

    Returns
    -------
    Tail
        ``end`` is the absolute offset after the last good record (a torn tail is cut there).

    Raises
    ------
    StoreCorruptedError
        If a damaged record is followed by a valid one, or a valid record breaks the row rule.
    """
    size = len(data)
    buf, offsets, count, stop = frame_scan(data)
    if stop < size:                      # a torn tail, an uncommitted batch or damage
        try:
            parse_one(data, stop, size)
        except BadRecord as bad:
            reason = bad.reason
        else:                            # never cut a record the exact parser accepts
            raise StoreCorruptedError(
                f"{path}: the frame scan stopped at offset {base + stop}, where the exact "
                f"parser reads a valid record; {REPAIR_HINT}")
        where = tail_damage(data, stop, size, 0, base)
        if where is not None:
            raise StoreCorruptedError(
                f"{path} is corrupted at offset {base + stop} ({reason}), {where}; "
                f"{REPAIR_HINT}")
    cut = short_batch(buf, offsets, base)
    if cut is not None:
        raise StoreCorruptedError(f"{path} is corrupted: {cut}; {REPAIR_HINT}")
    payload = offsets + FRAME.size
    ops = buf[payload] if count else np.zeros(0, np.uint8)
    if not np.isin(ops, (OP_PUT, OP_DEL)).all():
        bad = int(offsets[np.argmin(np.isin(ops, (OP_PUT, OP_DEL)))])
        raise StoreCorruptedError(f"{path} is corrupted at offset {base + bad} (unknown record "
                                  f"op); {REPAIR_HINT}")
    is_put = ops == OP_PUT
    put_at = payload[is_put]
    fixed = fixed_fields(buf, put_at, PUT_DTYPE)
    m = fixed.shape[0]
    expect = np.arange(first_row, first_row + m, dtype=np.int64)
    if not np.array_equal(fixed["row"].astype(np.int64), expect):
        bad = int(offsets[is_put][np.argmin(fixed["row"].astype(np.int64) == expect)])
        raise StoreCorruptedError(f"{path} is corrupted at offset {base + bad} (a PUT record "
                                  f"names the wrong row); {REPAIR_HINT}")
    kl = fixed["key_len"].astype(np.int64)
    keys = decode_segments(buf, put_at + PUT_FIXED.size, kl, True)
    del_at = payload[~is_put]
    dfix = fixed_fields(buf, del_at, DEL_DTYPE)
    del_keys = decode_segments(buf, del_at + DEL_FIXED.size, dfix["key_len"].astype(np.int64),
                                True)
    if keys is None or del_keys is None:
        raise StoreCorruptedError(f"{path} holds invalid UTF-8 in a record after offset {base}; "
                                  f"{REPAIR_HINT}")
    return Tail(ops, offsets[is_put] + base, fixed, keys, dfix["row"].astype(np.int64).tolist(),
                del_keys, base + stop)


# ---------------------------------------------------------------------------------- files

def write_checkpoint_files(directory: str, generation: int, checkpoint: int, alive: np.ndarray,
                           hashes: np.ndarray, rows: np.ndarray, *, durable: bool) -> dict:
    """Write the files of checkpoint ``checkpoint`` (new names; fsynced when ``durable``).

    Returns
    -------
    dict
        ``{name: CRC-32 of the file's bytes}`` for ``alive``, ``keyhash`` and ``keyrow``
        (what the namespace header records and open verifies).
    """
    crcs = {}
    for (name, dtype, _), arr in zip(CHECKPOINT_FILES, (alive, hashes, rows)):
        path = checkpoint_path(directory, name, generation, checkpoint)
        blob = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
        crcs[name] = zlib.crc32(blob)
        with open(path, "wb") as f:
            f.write(blob)
            f.flush()
            if durable:
                os.fsync(f.fileno())
    if durable:
        fsync_dir(directory)
    return crcs


def load_checkpoint_files(directory: str, generation: int, checkpoint: int, rows: int,
                          crcs: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alive (rows,) bool -- a RAM copy, hashes, key rows -- memory-mapped) of a checkpoint.

    ``crcs`` (the header's ``{name: CRC-32}``, absent in stores written before checksums)
    are checked against the files' bytes.

    Raises
    ------
    StoreCorruptedError
        If a file is missing, of the wrong size or fails its CRC-32 (naming the file).
    """
    out = []
    for name, dtype, _ in CHECKPOINT_FILES:
        path = checkpoint_path(directory, name, generation, checkpoint)
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            raise StoreCorruptedError(f"{path} is missing (offset 0)") from None
        item = np.dtype(dtype).itemsize
        if size % item or (name == "alive" and size != rows):
            raise StoreCorruptedError(f"{path} has {size} bytes at offset 0, not a whole "
                                      f"{'set of ' + str(rows) + ' rows' if name == 'alive' else 'array'}")
        if name == "alive":
            out.append(np.fromfile(path, np.bool_, rows) if rows else np.zeros(0, np.bool_))
        elif size == 0:
            out.append(np.zeros(0, dtype))
        else:
            out.append(np.memmap(path, dtype=np.dtype(dtype), mode="r").view(np.ndarray))
        if crcs and name in crcs and crc32_of(out[-1]) != crcs[name]:
            raise StoreCorruptedError(f"{path} fails its CRC-32 (offset 0): the checkpoint file "
                                      f"was damaged; {REPAIR_HINT}")
    if out[1].shape[0] != out[2].shape[0]:
        hk = checkpoint_path(directory, "keyhash", generation, checkpoint)
        kr = checkpoint_path(directory, "keyrow", generation, checkpoint)
        raise StoreCorruptedError(f"the key index files {hk} and {kr} disagree: "
                                  f"{out[1].shape[0]} hashes but {out[2].shape[0]} rows "
                                  f"(offset 0); {REPAIR_HINT}")
    if out[2].shape[0] and (int(out[2].max()) >= rows or int(out[2].min()) < 0):
        kr = checkpoint_path(directory, "keyrow", generation, checkpoint)
        raise StoreCorruptedError(f"{kr} names a row outside [0, {rows}) (offset 0); {REPAIR_HINT}")
    return out[0], out[1], out[2]


def checkpoint_names(generation: int, checkpoint: int) -> set[str]:
    """File names of one checkpoint (what :func:`remove_stale` keeps)."""
    return {os.path.basename(checkpoint_path("", n, generation, checkpoint))
            for n, _, _ in CHECKPOINT_FILES}
