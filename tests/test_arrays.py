"""memcore.arrays: the RamArrays side of the Arrays contract."""

import numpy as np
import pytest

from memcore.arrays import Arrays, RamArrays, grown_capacity
from memcore.errors import InvalidArgumentError, MemcoreError


def test_alloc_zero_filled_exact_dtype_and_protocol():
    a = RamArrays()
    x = a.alloc("win", (3, 9), np.int32)
    assert isinstance(a, Arrays)
    assert x.shape == (3, 9) and x.dtype == np.int32 and not x.any() and x.flags.c_contiguous
    assert a.get("win") is x and a.get("nope") is None and a.names() == ["win"]


def test_grow_keeps_contents_new_rows_zero_never_shrinks():
    a = RamArrays()
    x = a.alloc("codes", (2, 4), np.int8)
    x[:] = 5
    y = a.grow("codes", 3)
    assert y.shape == (16, 4) and (y[:2] == 5).all() and not y[2:].any()
    assert a.grow("codes", 1) is y and a.get("codes") is y


def test_errors_derive_from_memcore_and_value_error():
    a = RamArrays()
    with pytest.raises(InvalidArgumentError):
        a.grow("missing", 4)
    with pytest.raises(ValueError):
        a.alloc("", (1,), np.int8)
    with pytest.raises(MemcoreError):
        a.alloc("x", (-1,), np.int8)


def test_grown_capacity_doubles():
    assert [grown_capacity(c, n) for c, n in [(0, 0), (0, 1), (16, 16), (16, 17), (40, 100)]] \
        == [0, 16, 16, 32, 100]
