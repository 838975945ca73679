"""Threads of a parallel kernel call: the user's ``threads`` checked once
(:func:`check_threads`), numba's thread count set only for the call (:func:`numba_threads`)."""

from __future__ import annotations

import contextlib
from typing import Any

import numba
import numpy as np

from memcore.errors import InvalidArgumentError

__all__ = ["check_threads", "numba_threads", "thread_count"]


@contextlib.contextmanager
def numba_threads(n: int):
    """numba's thread count set to ``n`` inside the block (restored after; nothing changes
    for ``n <= 1``), capped at ``NUMBA_NUM_THREADS``."""
    if n <= 1:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(thread_count(n))
    try:
        yield
    finally:
        numba.set_num_threads(old)


def thread_count(n: int) -> int:
    """The threads a parallel kernel gets for a request of ``n``: ``n`` capped at
    ``NUMBA_NUM_THREADS`` (1 for ``n <= 1``).

    Examples
    --------
    >>> thread_count(1), thread_count(0)
    (1, 1)
    """
    return 1 if n <= 1 else min(int(n), numba.config.NUMBA_NUM_THREADS)


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
