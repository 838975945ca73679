"""memcore._crc: zlib's CRC-32 values from zlib-ng, over memory and over memory-mapped files
(every chunk boundary, empty files), so stores written with either library verify with the
other."""

from __future__ import annotations

import mmap
import os
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import _crc


def test_zlib_ng_is_the_checksum_in_use():
    """zlib-ng is a dependency: the fast CRC, not the standard library's fallback."""
    from zlib_ng import zlib_ng

    assert _crc.crc32 is zlib_ng.crc32


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=20_000), start=st.integers(0, 2**32 - 1))
def test_crc32_equals_zlib(data, start):
    assert _crc.crc32(data, start) == zlib.crc32(data, start)


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3 * 4096 + 17), chunk=st.sampled_from([4096, 8192, 1 << 24]))
def test_file_and_array_crcs_equal_zlib_at_every_chunk_boundary(tmp_path_factory, data, chunk):
    path = tmp_path_factory.mktemp("crc") / "f.bin"
    path.write_bytes(data)
    old = _crc._CHUNK
    _crc._CHUNK = chunk                 # page-aligned chunks: several per file
    try:
        assert _crc.file_crc32(str(path)) == zlib.crc32(data)
        assert _crc.crc32_of(np.frombuffer(data, np.uint8)) == zlib.crc32(data)
    finally:
        _crc._CHUNK = old


def test_a_multi_dimensional_array_is_summed_as_its_bytes():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert _crc.crc32_of(a) == zlib.crc32(a.tobytes())
    assert _crc.crc32_of(a[:, ::2]) == zlib.crc32(np.ascontiguousarray(a[:, ::2]).tobytes())


def test_a_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        _crc.file_crc32(str(tmp_path / "absent"))


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_the_memory_map_is_released(tmp_path):
    """After a file's CRC its map is gone from the process (an exported buffer left alive
    would keep it mapped: a file handle and address space per checked file)."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * (3 * mmap.PAGESIZE + 5))
    old = _crc._CHUNK
    _crc._CHUNK = mmap.PAGESIZE
    try:
        assert _crc.file_crc32(str(path)) == zlib.crc32(path.read_bytes())
    finally:
        _crc._CHUNK = old
    with open("/proc/self/maps") as f:
        assert str(path) not in f.read()
