"""Where an index's flat arrays live: one small protocol, so recall code never knows.

The hybrid index (:class:`memcore.recall.index.HybridIndex`) keeps its whole per-row,
per-term and pool state in named NumPy arrays whose first axis is a capacity that grows by
doubling. It allocates and grows them only through an :class:`Arrays`:

- :class:`RamArrays` (this module): plain NumPy arrays in RAM (the short tier, a store opened
  read-only in an old format, tests).
- ``MappedArrays`` (:mod:`memcore.storage`): memory-mapped files ``<name>.<generation>.<dtype>``
  next to a long-term store's columns, grown like the columns, persisted at checkpoints.

What is *not* an array -- the few small, non-row-proportional values an index needs to
resume (term-hash -> term-id table, episode -> last row, speaker names, counters, the
float64 moment sums) -- is exchanged as ``dict[str, ndarray]`` by
``HybridIndex.small_state()`` and restored by ``HybridIndex.restore(dim, arrays, state, ...)``;
a store persists that dict beside the arrays (e.g. one ``.npy`` per key) at the same checkpoint.

Contract (both implementations)
--------------------------------
``alloc(name, shape, dtype)``
    A new zero-filled array; ``shape[0]`` is the capacity axis. Allocating an existing name
    replaces it (the old contents are dropped).
``grow(name, capacity)``
    The array with its first axis at least ``capacity`` (never shrinks), contents kept, new
    rows zero. The returned object replaces any earlier one (callers re-read it).
``get(name)``
    The current array, or None if ``name`` was never allocated (used by ``restore``).
``names()``
    The allocated names.

The arrays handed out are writable, C-contiguous, with exactly the requested dtype; index
code writes into them in place.

How the hybrid index uses it (the interface the store layer codes against)
-------------------------------------------------------------------------
``HybridIndex(dim, weights=None, query_preparer=None, *, arrays=None, vectors=None)``
    ``arrays``: an :class:`Arrays` (a fresh :class:`RamArrays` when None) the index allocates
    every per-row, per-term, per-episode and pool array in; ``vectors``: a callable returning
    the store's (>= n_rows, dim) float32 vector column indexed by row (None: the index keeps
    its own ``vectors`` array in ``arrays``).
``index.small_state() -> dict[str, ndarray]``
    Everything else needed to resume (counters, moment sums, speaker names as UTF-8 bytes).
``HybridIndex.restore(dim, arrays, state, weights=None, query_preparer=None, *, vectors=None)``
    An index over ``arrays`` as they were when ``state`` was taken (O(terms + episodes) Python,
    nothing proportional to the rows); then ``put``/``put_many``/``delete`` replay a log tail.
"""

from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable

import numpy as np

from memcore.errors import InvalidArgumentError

__all__ = ["Arrays", "RamArrays", "grown_capacity"]


def grown_capacity(current: int, need: int, minimum: int = 16) -> int:
    """The capacity after growing ``current`` to hold ``need`` rows: doubling, at least
    ``minimum``.

    Examples
    --------
    >>> grown_capacity(16, 17), grown_capacity(0, 3), grown_capacity(64, 10)
    (32, 16, 64)
    """
    cap = max(int(current), 0)
    if need <= cap:
        return cap
    return max(int(need), 2 * cap, int(minimum))


@runtime_checkable
class Arrays(Protocol):
    """Named, growable, zero-initialised arrays (see the module notes for the contract)."""

    def alloc(self, name: str, shape: tuple, dtype) -> np.ndarray:
        ...

    def grow(self, name: str, capacity: int) -> np.ndarray:
        ...

    def get(self, name: str) -> np.ndarray | None:
        ...

    def names(self) -> Iterable[str]:
        ...


class RamArrays:
    """:class:`Arrays` in RAM.

    Examples
    --------
    >>> a = RamArrays()
    >>> x = a.alloc("doc_len", (4,), np.uint32)
    >>> x[1] = 7
    >>> y = a.grow("doc_len", 5)
    >>> y.shape, int(y[1]), a.get("doc_len") is y
    ((16,), 7, True)
    """

    __slots__ = ("_arrays",)

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        nbytes = sum(a.nbytes for a in self._arrays.values())
        return f"RamArrays({len(self._arrays)} arrays, {nbytes} bytes)"

    def alloc(self, name: str, shape: tuple, dtype) -> np.ndarray:
        """A zero-filled array ``name`` of ``shape`` (``shape[0]`` = capacity).

        Raises
        ------
        InvalidArgumentError
            If ``name`` is not a non-empty str or ``shape`` has a negative entry.
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"array name must be a non-empty str, got {name!r}")
        shape = tuple(int(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
        if not shape or min(shape) < 0:
            raise InvalidArgumentError(f"array {name!r} needs a shape of sizes >= 0, got {shape}")
        arr = np.zeros(shape, np.dtype(dtype))
        self._arrays[name] = arr
        return arr

    def grow(self, name: str, capacity: int) -> np.ndarray:
        """``name`` with at least ``capacity`` rows (doubling), contents kept, new rows zero.

        Raises
        ------
        InvalidArgumentError
            If ``name`` was never allocated.
        """
        arr = self._arrays.get(name)
        if arr is None:
            raise InvalidArgumentError(f"array {name!r} was never allocated")
        cap = grown_capacity(arr.shape[0], int(capacity))
        if cap == arr.shape[0]:
            return arr
        out = np.zeros((cap,) + arr.shape[1:], arr.dtype)
        out[:arr.shape[0]] = arr
        self._arrays[name] = out
        return out

    def get(self, name: str) -> np.ndarray | None:
        """The array ``name``, or None."""
        return self._arrays.get(name)

    def names(self) -> list[str]:
        """Allocated names, in allocation order."""
        return list(self._arrays)

    @property
    def nbytes(self) -> int:
        """Bytes held by all arrays."""
        return sum(a.nbytes for a in self._arrays.values())
