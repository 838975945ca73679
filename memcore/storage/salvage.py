"""What a damaged log still tells about the rows repair cannot replay (lost rows).

A row the last checkpoint holds live whose PUT record fails its CRC (or its frame) is *lost*:
:func:`~memcore.storage.repair.repair_namespace` cannot serve it, since any of its bytes may
be wrong. What it can still say about it, without guessing:

- its **key**, when the key bytes at the row's ``record_offset`` hash (64-bit BLAKE2b, the key
  index's hash) to the hash the checkpoint's ``keyhash``/``keyrow`` files hold for that row;
  the checkpoint files are trusted only when their CRCs verify. The key-length field may
  itself be damaged, so every length up to :data:`MAX_KEY_SCAN` bytes is tried;
- its **last version**, set aside in the quarantine file, when the key is known, the record's
  field lengths add up and its vector matches the record's ``vector_crc``: the text and
  metadata are then what the record holds, but the record failed its CRC, so that version is
  listed as not vouched for (an invalid UTF-8 byte reads as U+FFFD, metadata that is no JSON
  object as ``{}``).

A lost row whose key has a later intact version in the log is not lost (that version
decides), and one whose key nothing confirms is reported by row number.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import numpy as np

from memcore.core.rows import MAX_ACCESS_COUNT, timestamp
from memcore.errors import MemcoreError
from memcore.storage.checkpoint import crc32_of, key_hashes, load_checkpoint_files
from memcore.storage.layout import column_path
from memcore.storage.records import FRAME, PUT_FIXED

__all__ = ["LostRow", "lost_rows", "quarantine_rows", "MAX_KEY_SCAN"]

#: Longest key (UTF-8 bytes) tried when a lost record's key-length field does not give a key
#: that hashes to the checkpoint's hash.
MAX_KEY_SCAN = 4096


@dataclass
class LostRow:
    """One row the checkpoint holds live whose record repair could not replay.

    Attributes
    ----------
    row : int
        Its row in the column files.
    key : str or None
        Its key, confirmed by the checkpoint's key hash; None when nothing confirms one.
    memory : tuple or None
        ``(key, text, metadata JSON bytes, created_at, updated_at, last_accessed_at,
        access_count, importance)`` of its last version (the layout repair writes rows in),
        or None when it cannot be set aside.
    vector : ndarray of shape (dim,), float32, or None
        Its vector, checked against the record's ``vector_crc`` (with ``memory``).
    """

    row: int
    key: str | None
    memory: tuple | None = None
    vector: np.ndarray | None = None


def lost_rows(directory: str, generation: int, header: dict, log: bytes,
              alive: np.ndarray, replayed: dict, vectors: np.ndarray) -> list[LostRow]:
    """The rows a verified checkpoint holds live that a salvaging replay did not recover.

    Parameters
    ----------
    directory : str
        The namespace directory.
    generation : int
    header : dict
        The namespace header (its ``"checkpoint"``, ``"rows"`` and ``"crc"`` name and check
        the checkpoint files).
    log : bytes
        The generation's whole log.
    alive : ndarray of shape (rows,), bool
        The checkpoint's live flags (verified by the caller).
    replayed : dict
        Row in the column files -> key, for every PUT the replay recovered.
    vectors : ndarray of shape (have, dim), float32
        The vectors file's rows.

    Returns
    -------
    list of LostRow
        By row, ascending.

    Examples
    --------
    >>> lost_rows("/nonexistent", 0, {}, b"", np.zeros(0, bool), {}, np.zeros((0, 4), np.float32))
    []
    """
    missing = [r for r in np.flatnonzero(alive).tolist() if r not in replayed]
    if not missing:
        return []
    hashes = _checkpoint_hashes(directory, generation, header, alive.shape[0])
    offsets = _record_offsets(directory, generation, header, alive.shape[0])
    latest: dict = {}
    for r, k in replayed.items():
        latest[k] = max(r, latest.get(k, -1))
    out = []
    for r in missing:
        lost = _salvage(log, r, hashes.get(r), None if offsets is None else int(offsets[r]),
                        vectors)
        if lost.key is not None and latest.get(lost.key, -1) > r:
            continue                    # a later intact version of the key decides
        out.append(lost)
    return out


def _checkpoint_hashes(directory: str, generation: int, header: dict, rows: int) -> dict:
    """Row -> key hash from the checkpoint's key index files ({} unless their CRCs verify)."""
    crcs = header.get("crc")
    try:
        _, hashes, keyrow = load_checkpoint_files(directory, generation, header["checkpoint"],
                                                  rows, crcs)
    except (KeyError, TypeError, OSError, MemcoreError, ValueError):
        return {}
    if not (isinstance(crcs, dict) and "keyhash" in crcs and "keyrow" in crcs):
        return {}                       # a store written before checksums: nothing vouches
    return dict(zip(keyrow.tolist(), hashes.tolist()))


def _record_offsets(directory: str, generation: int, header: dict, rows: int):
    """The checkpointed rows' record offsets, when the column verifies its CRC, else None."""
    want = (header.get("crc") or {}).get("record_offset")
    try:
        offsets = np.fromfile(column_path(directory, "record_offset", generation), np.int64,
                              count=rows)
    except (OSError, ValueError):
        return None
    if want is None or offsets.shape[0] != rows or crc32_of(offsets) != want:
        return None
    return offsets


def _salvage(log: bytes, row: int, want_hash, offset, vectors: np.ndarray) -> LostRow:
    """What the damaged PUT record of ``row`` at ``offset`` still tells (see the module)."""
    if want_hash is None or offset is None or not 0 <= offset <= len(log) - FRAME.size:
        return LostRow(row, None)
    start = offset + FRAME.size
    fixed = PUT_FIXED.unpack_from(log, start) if len(log) - start >= PUT_FIXED.size else None
    p = start + PUT_FIXED.size
    lengths = ([fixed[8]] if fixed else []) + list(range(1, MAX_KEY_SCAN + 1))
    key = None
    for kl in lengths:
        if p + kl > len(log):
            break
        try:
            cand = log[p:p + kl].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if int(key_hashes([cand])[0]) == want_hash:
            key = cand
            break
    if key is None:
        return LostRow(row, None)
    length = FRAME.unpack_from(log, offset)[1]
    kl, tl, ml = (fixed[8], fixed[9], fixed[10]) if fixed else (-1, 0, 0)
    if kl != len(key.encode("utf-8")) or PUT_FIXED.size + kl + tl + ml != length \
            or start + length > len(log) or row >= vectors.shape[0] \
            or zlib.crc32(vectors[row].tobytes()) != fixed[7]:
        return LostRow(row, key)        # listed by key; nothing whole to set aside
    text = log[p + kl:p + kl + tl].decode("utf-8", "replace")
    meta = bytes(log[p + kl + tl:p + kl + tl + ml])
    try:
        meta = meta if isinstance(json.loads(meta or b"{}"), dict) else b"{}"
    except ValueError:
        meta = b"{}"
    times = []
    for t in fixed[2:5]:
        try:
            times.append(timestamp(t, "time"))
        except MemcoreError:
            times.append(0.0)
    count = fixed[5] if 0 <= fixed[5] <= MAX_ACCESS_COUNT else 0
    importance = fixed[6] if 0.0 <= fixed[6] <= 1.0 else 0.5
    return LostRow(row, key, (key, text, meta, *times, count, importance), vectors[row].copy())


def quarantine_rows(lost: list) -> tuple[list, list]:
    """The memories and vectors of the lost rows that can be set aside."""
    aside = [lr for lr in lost if lr.memory is not None]
    return [lr.memory for lr in aside], [lr.vector for lr in aside]

