"""Record-log kernels: CRC-32, a frame walk that validates every record, and a segment gather.

The store layer's record log is a sequence of frames ``magic u32, length u32,
crc32 u32`` (little-endian) followed by ``length`` payload bytes. Opening a store walks the
whole log; in Python that costs ~10 us per record, here it is a tight loop over ``uint8``
bytes. The kernels only check *structure* (frame, length, CRC-32, the payload's own field
lengths); the replay rules (row numbering, DEL of a live row, UTF-8) stay in ``memcore``,
which also decodes the fixed fields with NumPy from the offsets found here.

CRC-32 is zlib's (reflected polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF),
computed slicing-by-4 from a (4, 256) table built once at import (:data:`CRC_TABLE`) and passed
in, so the kernels stay pure. Kernels are ``cache=True``, never ``fastmath``, accept read-only
(memory-mapped) inputs and do no bounds checks on their outputs: the caller sizes them (see
:func:`max_records`). NumPy/zlib oracles with the same names live in
:mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "CRC_TABLE",
    "LOG_MAGIC",
    "MAX_PAYLOAD",
    "crc32",
    "crc_rows",
    "gather_segments",
    "max_records",
    "scan_records",
]

#: Frame magic ``"MMCR"`` (little-endian u32), and the largest payload a frame may declare.
LOG_MAGIC = 0x52434D4D
MAX_PAYLOAD = 1 << 30
_FRAME = 12
_PUT_FIXED = 64
_DEL_FIXED = 12
_OP_PUT = 1
_OP_DEL = 2


def _crc_table() -> np.ndarray:
    t = np.zeros((4, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for i in range(256):
        for s in range(1, 4):
            t[s, i] = (int(t[s - 1, i]) >> 8) ^ int(t[0, int(t[s - 1, i]) & 0xFF])
    return t


#: ndarray of shape (4, 256), uint32: the slicing-by-4 tables of zlib's CRC-32.
CRC_TABLE = _crc_table()
CRC_TABLE.setflags(write=False)


@numba.njit(cache=True, locals={"c": numba.uint32})
def crc32(data, start, stop, table):
    """zlib's CRC-32 of ``data[start:stop]``.

    Parameters
    ----------
    data : ndarray of shape (n,), uint8
    start, stop : int
        Byte range, ``0 <= start <= stop <= n``.
    table : ndarray of shape (4, 256), uint32
        :data:`CRC_TABLE`.

    Returns
    -------
    int
        The CRC-32, as ``zlib.crc32(bytes(data[start:stop]))``.

    Raises
    ------
    Nothing (no bounds checks).

    Examples
    --------
    >>> import zlib
    >>> crc32(np.frombuffer(b"abc", np.uint8), 0, 3, CRC_TABLE) == zlib.crc32(b"abc")
    True
    """
    c = np.uint32(0xFFFFFFFF)
    i = start
    while i + 4 <= stop:
        c ^= (np.uint32(data[i]) | (np.uint32(data[i + 1]) << np.uint32(8))
              | (np.uint32(data[i + 2]) << np.uint32(16)) | (np.uint32(data[i + 3]) << np.uint32(24)))
        c = (table[3, c & np.uint32(0xFF)] ^ table[2, (c >> np.uint32(8)) & np.uint32(0xFF)]
             ^ table[1, (c >> np.uint32(16)) & np.uint32(0xFF)] ^ table[0, c >> np.uint32(24)])
        i += 4
    while i < stop:
        c = table[0, (c ^ np.uint32(data[i])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
        i += 1
    return c ^ np.uint32(0xFFFFFFFF)


@numba.njit(cache=True, locals={"c": numba.uint32})
def crc_rows(a, b, table, out):
    """zlib's CRC-32 of each row of ``a`` followed by the same row of ``b``.

    Parameters
    ----------
    a : ndarray of shape (n, wa), uint8, C-contiguous
    b : ndarray of shape (n, wb), uint8, C-contiguous (``wb`` may be 0)
    table : ndarray of shape (4, 256), uint32
        :data:`CRC_TABLE`.
    out : ndarray of shape (n,), uint32
        Written: ``out[i] = zlib.crc32(bytes(a[i]) + bytes(b[i]))``.

    Examples
    --------
    >>> import zlib
    >>> a = np.frombuffer(b"abcdefgh", np.uint8).reshape(2, 4); out = np.empty(2, np.uint32)
    >>> crc_rows(a, a[:, :0], CRC_TABLE, out); int(out[1]) == zlib.crc32(b"efgh")
    True
    """
    n, wa, wb = a.shape[0], a.shape[1], b.shape[1]
    for i in range(n):                   # indexed in place: a view per row costs 10x
        c = np.uint32(0xFFFFFFFF)
        for part in range(2):
            d = a if part == 0 else b
            w = wa if part == 0 else wb
            j = 0
            while j + 4 <= w:                # slicing-by-4, as :func:`crc32`
                c ^= (np.uint32(d[i, j]) | (np.uint32(d[i, j + 1]) << np.uint32(8))
                      | (np.uint32(d[i, j + 2]) << np.uint32(16))
                      | (np.uint32(d[i, j + 3]) << np.uint32(24)))
                c = (table[3, c & np.uint32(0xFF)] ^ table[2, (c >> np.uint32(8)) & np.uint32(0xFF)]
                     ^ table[1, (c >> np.uint32(16)) & np.uint32(0xFF)]
                     ^ table[0, c >> np.uint32(24)])
                j += 4
            while j < w:
                c = table[0, (c ^ np.uint32(d[i, j])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
                j += 1
        out[i] = c ^ np.uint32(0xFFFFFFFF)


@numba.njit(cache=True)
def _u32(data, p):
    return (np.int64(data[p]) | (np.int64(data[p + 1]) << 8) | (np.int64(data[p + 2]) << 16)
            | (np.int64(data[p + 3]) << 24))


def max_records(n_bytes):
    """Upper bound on the records ``n_bytes`` of log can hold (every record is >= 24 bytes).

    Examples
    --------
    >>> max_records(0)
    1
    """
    return int(n_bytes) // (_FRAME + _DEL_FIXED) + 1


@numba.njit(cache=True)
def scan_records(data, start, table, out_offsets):
    """Walk the record frames of a log from ``start`` until the end or the first bad record.

    A record at offset ``x`` is good when its 12-byte frame fits, its magic is
    :data:`LOG_MAGIC`, its length is at most :data:`MAX_PAYLOAD` and fits in ``data``, the
    payload's CRC-32 matches, and its op is PUT (1: at least 64 payload bytes, and
    ``64 + key_len + text_len + meta_len == length``) or DEL (2: at least 12 bytes, and
    ``12 + key_len == length``).

    Parameters
    ----------
    data : ndarray of shape (n,), uint8
        The log bytes (may be read-only).
    start : int
        Offset of the first record.
    table : ndarray of shape (4, 256), uint32
        :data:`CRC_TABLE`.
    out_offsets : ndarray of shape (>= max_records(n - start),), int64
        Written: the offset of each good record, in order.

    Returns
    -------
    count : int
        Good records found (``out_offsets[:count]``).
    stop : int
        Offset after the last good record: ``n`` for a clean log, else the offset of the
        first bad record.

    Raises
    ------
    Nothing (no bounds checks on ``out_offsets``).

    Examples
    --------
    A log of one DEL record (key ``b"k"``) followed by a torn frame:

    >>> import struct, zlib
    >>> payload = struct.pack("<B7xI", 2, 1) + b"k"
    >>> log = struct.pack("<III", LOG_MAGIC, len(payload), zlib.crc32(payload)) + payload
    >>> scan_records(np.frombuffer(log + b"MM", np.uint8), 0, CRC_TABLE,
    ...              np.empty(max_records(len(log) + 2), np.int64))
    (1, 25)
    """
    size = data.shape[0]
    off = start
    count = 0
    while off < size:
        if size - off < _FRAME:
            break
        if _u32(data, off) != LOG_MAGIC:
            break
        length = _u32(data, off + 4)
        begin = off + _FRAME
        end = begin + length
        if length > MAX_PAYLOAD or end > size:
            break
        if crc32(data, begin, end, table) != _u32(data, off + 8):
            break
        op = data[begin]
        if op == _OP_PUT:
            if length < _PUT_FIXED:
                break
            var = _u32(data, begin + 52) + _u32(data, begin + 56) + _u32(data, begin + 60)
            if _PUT_FIXED + var != length:
                break
        elif op == _OP_DEL:
            if length < _DEL_FIXED:
                break
            if _DEL_FIXED + _u32(data, begin + 8) != length:
                break
        else:
            break
        out_offsets[count] = off
        count += 1
        off = end
    return count, off


@numba.njit(cache=True)
def gather_segments(data, starts, lengths, sep, out):
    """Concatenate ``data[starts[i]:starts[i] + lengths[i]]``, one ``sep`` byte between.

    Parameters
    ----------
    data : ndarray of shape (n,), uint8
    starts, lengths : ndarray of shape (m,), int64
    sep : int
        Separator byte value (0-255); negative for none.
    out : ndarray of shape (lengths.sum() + max(m - 1, 0),), uint8
        (``(lengths.sum(),)`` without a separator.)
        Written.

    Returns
    -------
    int
        Bytes written (``out.shape[0]``).

    Raises
    ------
    Nothing (no bounds checks).

    Examples
    --------
    >>> out = np.empty(3, np.uint8)
    >>> gather_segments(np.frombuffer(b"abc", np.uint8), np.array([0, 2]), np.array([1, 1]),
    ...                 0, out); bytes(out)
    3
    b'a\\x00c'
    """
    p = 0
    for i in range(starts.shape[0]):
        if i and sep >= 0:
            out[p] = sep
            p += 1
        s = starts[i]
        for j in range(lengths[i]):
            out[p + j] = data[s + j]
        p += lengths[i]
    return p
