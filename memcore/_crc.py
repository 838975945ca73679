"""CRC-32 (zlib) of in-memory data and of files, in 16 MiB chunks: what a store's files and an
index's checkpoint record, and what open verifies."""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["crc32_of", "file_crc32"]


def crc32_of(data) -> int:
    """CRC-32 (zlib) of a bytes-like object or array, in 16 MiB chunks."""
    if isinstance(data, np.ndarray):              # (bytes of any shape, zero-size included)
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    mv = memoryview(data)
    mv = mv.cast("B") if mv.ndim != 1 or mv.itemsize != 1 else mv
    crc, step = 0, 16 << 20
    for i in range(0, len(mv), step):
        crc = zlib.crc32(mv[i:i + step], crc)
    return crc


def file_crc32(path: str) -> int:
    """CRC-32 (zlib) of a whole file, read in 16 MiB chunks."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc
