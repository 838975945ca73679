"""Threads of a parallel kernel call: the user's ``threads`` checked once
(:func:`check_threads`), numba's thread count set only for the call (:func:`numba_threads`)."""

from __future__ import annotations

import contextlib
from typing import Any

import numba
import numpy as np

from memcore.errors import InvalidArgumentError

__all__ = ["check_threads", "numba_threads"]


@contextlib.contextmanager
def numba_threads(n: int):
    """numba's thread count set to ``n`` inside the block (restored after; nothing changes
    for ``n <= 1``), capped at ``NUMBA_NUM_THREADS``."""
    if n <= 1:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(min(int(n), numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def check_threads(threads: Any) -> int:
    """``threads`` as an int >= 1.

    Raises
    ------
    InvalidArgumentError
        If it is not an int >= 1 (bools refused).

    Examples
    --------
    >>> check_threads(2)
    2
    """
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise InvalidArgumentError(f"threads must be an int >= 1, got {threads!r}")
    return int(threads)
