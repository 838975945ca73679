"""The hybrid index on disk: :class:`MappedArrays` and its checkpoint files (see
:mod:`memcore.storage`, Hybrid index).

A namespace's hybrid index (:class:`memcore.recall.index.HybridIndex`) keeps its state in
named flat arrays (through the :class:`memcore.arrays.Arrays` protocol) plus a small
dict (``small_state()``). A checkpoint writes both under new names::

    hx<s>.<name>.<g>.i<i>.<dtype>    one array (raw little-endian, its whole capacity)
    hx<s>.state.<g>.i<i>.npz         the small state (numpy .npz)

``s`` is the index structure (bit 0: stemmed BM25; bit 1: date words, ``HybridWeights.dates``),
``g`` the generation and ``i`` the
index checkpoint; the namespace header's ``"index"`` entry names ``i`` and each array's dtype
and shape. Files are never modified after they are written, so a crash leaves the header's
index files intact; an index changed since is re-derived from the log tail at open.
"""

from __future__ import annotations

import io
import os
import zipfile
from typing import Any, Iterable

import numpy as np

from memcore._crc import crc32_of, file_crc32
from memcore.arrays import RamArrays
from memcore.errors import StoreCorruptedError

__all__ = ["MappedArrays", "index_prefix", "write_index", "read_index", "index_file_names"]


def index_prefix(structure: tuple) -> str:
    """``"hx<s>"``: the file prefix of an index structure ``(stem, dates)``, ``s = stem + 2 *
    dates`` (``"hx1"``: stemmed, no date words, as written before date words existed)."""
    dates = bool(structure[1]) if len(structure) > 1 else False
    return f"hx{int(bool(structure[0])) + 2 * int(dates)}"


def _suffix(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    return {"b": "u8"}.get(dtype.kind, f"{dtype.kind}{dtype.itemsize * 8}")


def _array_path(directory: str, prefix: str, name: str, generation: int, ic: int,
                dtype: np.dtype) -> str:
    return os.path.join(directory, f"{prefix}.{name}.{generation}.i{ic}.{_suffix(dtype)}")


def _state_path(directory: str, prefix: str, generation: int, ic: int) -> str:
    return os.path.join(directory, f"{prefix}.state.{generation}.i{ic}.npz")


class MappedArrays(RamArrays):
    """:class:`memcore.arrays.Arrays` over the array files of an index checkpoint.

    Each array is a private copy-on-write memory map of its file (``mmap`` ``MAP_PRIVATE``):
    reading costs nothing until touched, writes stay in the process (the files keep the
    checkpoint's bytes), and growing past a file's capacity moves that array to RAM (doubling,
    as :class:`~memcore.arrays.RamArrays`, whose ``alloc``/``grow``/``get``/``names``
    it keeps). The next checkpoint writes every array to new files.

    Examples
    --------
    >>> a = MappedArrays()
    >>> a.alloc("doc_len", (4,), np.uint32).shape, a.names()
    ((4,), ['doc_len'])
    """

    __slots__ = ()

    @classmethod
    def open(cls, directory: str, prefix: str, generation: int, ic: int,
             manifest: dict, crcs: dict | None = None) -> "MappedArrays":
        """Map the arrays of index checkpoint ``ic`` (``manifest``: name -> [dtype, shape]),
        checking each file against ``crcs`` (file name -> CRC-32) when given.

        Raises
        ------
        StoreCorruptedError
            If a file is missing, its size disagrees with the manifest or it fails its CRC.
        """
        out = cls()
        for name, (dtype, shape) in manifest.items():
            dtype, shape = np.dtype(dtype), tuple(int(s) for s in shape)
            path = _array_path(directory, prefix, name, generation, ic, dtype)
            need = int(np.prod(shape)) * dtype.itemsize
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                raise StoreCorruptedError(f"{path} is missing (offset 0)") from None
            if size != need:
                raise StoreCorruptedError(f"{path} has {size} bytes at offset 0, expected {need} "
                                          f"for shape {shape}")
            out._arrays[name] = (np.zeros(shape, dtype) if need == 0 else
                                 np.memmap(path, dtype=dtype, mode="c", shape=shape)
                                 .view(np.ndarray))
            if need:
                _prefetch(path)
            _check_crc(path, crcs)
        return out


def _check_crc(path: str, crcs: dict | None) -> None:
    want = (crcs or {}).get(os.path.basename(path))
    if want is not None and file_crc32(path) != want:
        raise StoreCorruptedError(f"{path} fails its CRC-32 (offset 0): the index file was "
                                  f"damaged")


#: Bytes of rows :func:`_used_rows` tests at a time, from the end.
_USED_BLOCK_BYTES = 4 << 20


def _used_rows(arr: np.ndarray) -> int:
    """Rows up to the last one holding a non-zero byte (capacity beyond is never written:
    the file keeps its size with a hole, which costs no disk blocks). Blocks of rows are
    tested from the end, so the cost is the zero capacity past the last used row plus one
    block, not the whole array (a pass over every row took 1.9 s of a 6.5 s checkpoint of
    a 1e6-row index)."""
    if arr.size == 0:
        return 0
    raw = np.ascontiguousarray(arr).reshape(arr.shape[0], -1)
    raw = raw.view(np.dtype(f"u{arr.dtype.itemsize}")) if arr.dtype.itemsize in (1, 2, 4, 8) \
        else raw.view(np.uint8)                  # bit patterns: -0.0 is not zero
    step = max(1, _USED_BLOCK_BYTES // max(raw.shape[1] * raw.itemsize, 1))
    hi = raw.shape[0]
    while hi > 0:
        lo = max(0, hi - step)
        block = raw[lo:hi]
        if block.any():
            nz = np.flatnonzero(block.any(axis=1))
            return lo + int(nz[-1]) + 1
        hi = lo
    return 0


def _prefetch(path: str) -> None:
    """Ask the kernel to read a file into the page cache in the background (the first scan
    after a cold open then finds it there, or reads it in large sequential requests)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def write_index(directory: str, generation: int, ic: int, structure: tuple, arrays: Any,
                state: dict, *, durable: bool, crcs: dict | None = None) -> dict:
    """Write one index's arrays and small state as index checkpoint ``ic``; returns the
    manifest (name -> [dtype, shape]) the header records. ``crcs``, when given, receives
    each written file's name -> CRC-32 of its bytes."""
    prefix = index_prefix(structure)
    manifest = {}
    for name in arrays.names():
        arr = np.ascontiguousarray(arrays.get(name))
        dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        path = _array_path(directory, prefix, name, generation, ic, dtype)
        arr = arr.astype(dtype, copy=False)
        with open(path, "wb") as f:
            used = _used_rows(arr)
            if used:                              # (a zero-length view cannot be cast)
                f.write(memoryview(arr[:used]).cast("B"))
            f.truncate(arr.nbytes)                # the zero rows beyond: a sparse hole
            f.flush()
            if durable:
                os.fsync(f.fileno())
        manifest[name] = [dtype.str, list(arr.shape)]
        if crcs is not None:
            crcs[os.path.basename(path)] = crc32_of(arr)
    spath = _state_path(directory, prefix, generation, ic)
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in state.items()})
    blob = buf.getvalue()
    with open(spath, "wb") as f:
        f.write(blob)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    if crcs is not None:
        crcs[os.path.basename(spath)] = crc32_of(blob)
    return manifest


def read_index(directory: str, generation: int, ic: int, structure: tuple,
               manifest: dict, crcs: dict | None = None) -> tuple[MappedArrays, dict]:
    """The arrays (mapped) and small state of one index at index checkpoint ``ic``, each
    file checked against ``crcs`` (file name -> CRC-32) when given.

    Raises
    ------
    StoreCorruptedError
    """
    prefix = index_prefix(structure)
    arrays = MappedArrays.open(directory, prefix, generation, ic, manifest, crcs)
    path = _state_path(directory, prefix, generation, ic)
    try:
        _check_crc(path, crcs)
    except FileNotFoundError:
        raise StoreCorruptedError(f"{path} is missing (offset 0)") from None
    try:
        with open(path, "rb") as f:     # bytes first: np.load leaks its file on a bad zip
            blob = f.read()
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            state = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise StoreCorruptedError(f"{path} is missing (offset 0)") from None
    except (ValueError, OSError, TypeError, EOFError, KeyError, zipfile.BadZipFile) as err:
        # damaged bytes can fail numpy's .npz reader in any of these (a '|i9' dtype is a TypeError)
        raise StoreCorruptedError(f"{path} is not a readable .npz at offset 0: {err}") from None
    return arrays, state


def index_file_names(generation: int, entry: dict | None) -> set[str]:
    """File names of the index checkpoint a header's ``"index"`` entry names."""
    if not entry:
        return set()
    ic, out = entry["checkpoint"], set()
    for s, manifest in entry["structures"].items():
        prefix = f"hx{s}"
        out.add(os.path.basename(_state_path("", prefix, generation, ic)))
        for name, (dtype, _) in manifest.items():
            out.add(os.path.basename(_array_path("", prefix, name, generation, ic,
                                                 np.dtype(dtype))))
    return out


def structures(entry: dict | None) -> Iterable[tuple]:
    """``(structure, manifest)`` of each index a header's ``"index"`` entry names."""
    for s, manifest in (entry or {}).get("structures", {}).items():
        yield (bool(int(s) & 1), bool(int(s) & 2)), manifest
