"""CRC-32 (zlib's polynomial and values) of in-memory data and of files, in 16 MiB chunks:
what a store's files and an index's checkpoint record, and what open verifies.

The checksum is computed by zlib-ng (``zlib_ng.zlib_ng.crc32``: SIMD folding, ~25 GB/s on
one core here against ~4 GB/s for the standard library's zlib) when it is installed (a
dependency), else by :func:`zlib.crc32`: the same values either way, so stores written with
one verify with the other. Files are read through a read-only memory map (no copy into a
buffer), each chunk's mapping dropped once summed (so a file's pages are not all counted in
the process's resident set at once).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

#: ``crc32(data, value=0)``: zlib-ng's when installed, else :func:`zlib.crc32` (same values).
try:
    from zlib_ng.zlib_ng import crc32
except ImportError:                       # pragma: no cover - zlib-ng is a dependency
    from zlib import crc32

__all__ = ["crc32", "crc32_of", "file_crc32"]

_CHUNK = 16 << 20


def crc32_of(data) -> int:
    """CRC-32 (zlib's values) of a bytes-like object or array, in 16 MiB chunks."""
    if isinstance(data, np.ndarray):              # (bytes of any shape, zero-size included)
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    mv = memoryview(data)
    mv = mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv
    crc = 0
    for i in range(0, len(mv), _CHUNK):
        crc = crc32(mv[i:i + _CHUNK], crc)
    return crc


def file_crc32(path: str) -> int:
    """CRC-32 (zlib's values) of a whole file, through a read-only memory map in 16 MiB
    chunks (read in chunks where the file cannot be mapped).

    Raises
    ------
    OSError
        If the file cannot be opened or read.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0
        try:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):         # a file system without mmap
            crc = 0
            while chunk := f.read(_CHUNK):
                crc = crc32(chunk, crc)
            return crc
    with m:
        drop = getattr(mmap, "MADV_DONTNEED", None)
        crc = 0
        for i in range(0, len(m), _CHUNK):
            with memoryview(m)[i:i + _CHUNK] as part:
                crc = crc32(part, crc)
            if drop is not None:              # unmap the chunk's pages (they stay cached)
                m.madvise(drop, i, min(_CHUNK, len(m) - i))
    return crc
