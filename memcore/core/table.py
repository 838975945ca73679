"""One namespace's rows in memory: the columns the kernels scan plus keys, texts and metadata.

Rows are indexed by an int row id. The columns (:class:`~memcore.storage.Columns`, in RAM or
memory-mapped) hold ``vectors`` (rows, dim) float32, ``created_at``/``updated_at``/
``last_accessed_at`` float64 Unix seconds, ``access_count`` int64, ``importance`` float32 and
``alive`` bool; the Python lists hold key, text, metadata and the exact importance of each row.
``keys`` maps every live key to its row, ordered by last write (oldest first): the FIFO order
of the short tier, and the row order of the append-only long tier.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from memcore import _validate
from memcore.core.rows import Rows
from memcore.recall.hybrid import HybridIndex, HybridWeights, NamespaceRecall
from memcore.types import MemoryHit, MemoryTier, Namespace, StoredMemory

__all__ = ["Table", "copy_metadata"]

_SCALARS = (str, int, float, bool, type(None))


def copy_metadata(meta: Mapping[str, Any] | bytes) -> dict:
    """An independent copy of stored metadata (a dict, or its JSON bytes)."""
    if isinstance(meta, bytes):
        return json.loads(meta)
    if all(type(v) in _SCALARS for v in meta.values()):
        return dict(meta)
    return copy.deepcopy(dict(meta))


class Table:
    """One namespace's rows. Not thread-safe by itself: the owning store's lock guards it.

    Parameters
    ----------
    namespace : tuple of str
    columns : Columns
    reuse : bool, default False
        Reuse the rows of removed keys (a bounded tier); False appends every write (the rows
        of a disk log are append-only).
    """

    __slots__ = ("namespace", "columns", "reuse", "keys", "key_of", "texts", "metadata",
                 "importance", "rows", "free", "recall", "files", "offsets")

    def __init__(self, namespace: Namespace, columns: Any, *, reuse: bool = False):
        self.namespace = namespace
        self.columns = columns
        self.reuse = reuse
        self.keys: dict[str, int] = {}
        self.key_of: list[str | None] = []
        self.texts: list[str | None] = []
        self.metadata: list[dict | bytes | None] = []   # bytes: JSON not parsed yet
        self.importance: list[float] = []               # exact (the column is float32)
        self.rows = 0                                   # rows [0, rows) were written
        self.free: list[int] = []
        self.recall: NamespaceRecall | None = None      # hybrid indexes, built on first use
        self.files: Any = None                          # the disk files (long tier)
        self.offsets: list[int] = []                    # log offset of each row's record

    @property
    def live(self) -> int:
        return len(self.keys)

    # ------------------------------------------------------------------ reads
    def meta(self, row: int) -> dict:
        """The row's metadata, parsed once (never hand it out: see :meth:`memory`)."""
        m = self.metadata[row]
        if isinstance(m, bytes):
            m = self.metadata[row] = json.loads(m)
        return m

    def memory(self, row: int, tier: MemoryTier) -> StoredMemory:
        c = self.columns
        return StoredMemory(
            namespace=self.namespace, key=self.key_of[row], text=self.texts[row],
            importance=self.importance[row], metadata=copy_metadata(self.metadata[row]),
            created_at=float(c.created_at[row]), updated_at=float(c.updated_at[row]),
            last_accessed_at=float(c.last_accessed_at[row]),
            access_count=int(c.access_count[row]), tier=tier)

    def hits(self, rows: Sequence[int], scores: Sequence[float], sims: Sequence[float],
             now: float, half_life: float, tier: MemoryTier) -> list[MemoryHit]:
        """MemoryHits of ranked rows, with the recency and access time ranking used."""
        c = self.columns
        out = []
        for row, score, sim in zip(rows, scores, sims):
            t = float(c.last_accessed_at[row])
            out.append(MemoryHit(
                key=self.key_of[row], text=self.texts[row], score=score, similarity=sim,
                recency=0.5 ** (max(now - t, 0.0) / half_life), importance=self.importance[row],
                tier=tier, metadata=copy_metadata(self.metadata[row]),
                namespace=self.namespace, created_at=float(c.created_at[row]),
                last_accessed_at=t))
        return out

    def mask(self, flt: Mapping[str, Any] | None) -> np.ndarray:
        """ndarray (rows,), bool: live rows matching a validated metadata filter."""
        n = self.rows
        if not flt:
            return self.columns.alive[:n]
        alive = np.zeros(n, np.bool_)
        match, meta = _validate.matches_filter, self.meta
        for row in self.keys.values():
            if match(meta(row), flt):
                alive[row] = True
        return alive

    def recall_index(self, weights: HybridWeights, dim: int,
                     preparer: Callable | None) -> HybridIndex:
        """The hybrid index for ``weights``' structure, built from the live rows on first use."""
        if self.recall is None:
            self.recall = NamespaceRecall(dim, preparer, vectors=lambda: self.columns.vectors)
        return self.recall.index(weights, self._recall_source)

    def _recall_source(self) -> tuple:
        rows = list(self.keys.values())
        return (rows, [self.texts[r] for r in rows],
                np.ascontiguousarray(self.columns.vectors[np.asarray(rows, np.int64)]),
                [self.meta(r) for r in rows])

    # ------------------------------------------------------------------ writes
    def take(self, m: int) -> list[int]:
        """``m`` rows for new keys: freed rows first (when reusing), then new ones."""
        out = []
        while self.reuse and self.free and len(out) < m:
            out.append(self.free.pop())
        n0, extra = self.rows, m - len(out)
        if extra:
            self.columns.ensure(n0 + extra)
            pad = [None] * extra
            self.key_of += pad
            self.texts += pad
            self.metadata += pad
            self.importance += [0.0] * extra
            self.rows = n0 + extra
            out += range(n0, n0 + extra)
        return out

    def write(self, rows: Sequence[int], batch: Rows, pick: Sequence[int] | None = None, *,
              columns: bool = True) -> None:
        """Store entries ``pick`` of a batch (all by default; lifecycle set) at ``rows``.

        A key's previous row dies unless it is the row written. Each written key moves to
        the young end of :attr:`keys`. ``columns=False`` when the caller has written the
        numeric columns already (a disk commit writes them before its log record).
        """
        sel = list(range(len(batch))) if pick is None else list(pick)
        if not sel:
            return
        c = self.columns
        idx = np.asarray(rows, np.int64)
        imps = [batch.importance[j] for j in sel]
        if self.recall is not None:                  # the index reads a row's old vector
            for r in rows:                           # when it leaves: before overwriting
                self.recall.delete(r)
        if columns:
            if batch.vectors is not None:
                c.vectors[idx] = batch.vectors[sel] if pick is not None else batch.vectors
            c.importance[idx] = imps
            for name in ("created_at", "updated_at", "last_accessed_at", "access_count"):
                col = getattr(batch, name)
                getattr(c, name)[idx] = col if pick is None else col[sel]
        c.alive[idx] = True
        keys = [batch.keys[j] for j in sel]
        rows = idx.tolist()
        live, dead = self.keys, []
        if len(set(keys)) == len(keys) and not any(map(live.__contains__, keys)):
            live.update(zip(keys, rows))
        else:
            for k, r in zip(keys, rows):
                old = live.pop(k, None)
                if old is not None and old != r:
                    dead.append(old)
                live[k] = r
        key_of, texts, metas, imp = self.key_of, self.texts, self.metadata, self.importance
        if rows and rows[0] + len(rows) == self.rows and rows == list(range(rows[0], self.rows)):
            s = slice(rows[0], self.rows)            # appended rows: slice assignment
            key_of[s], imp[s] = keys, imps
            texts[s] = [batch.texts[j] for j in sel]
            metas[s] = [batch.metadata[j] for j in sel]
        else:
            for r, j in zip(rows, sel):
                key_of[r], texts[r] = batch.keys[j], batch.texts[j]
                metas[r], imp[r] = batch.metadata[j], batch.importance[j]
        self.kill(dead)
        rec = self.recall
        if rec is not None and rec.indexes:
            alive = [(r, j) for r, j in zip(rows, sel) if live.get(batch.keys[j]) == r]
            rec.put_many([r for r, _ in alive], [batch.texts[j] for _, j in alive],
                         np.ascontiguousarray(c.vectors[[r for r, _ in alive]]),
                         [batch.metadata[j] for _, j in alive])

    def remove(self, keys: Sequence[str]) -> list[int]:
        """Remove live keys (missing ones are skipped); returns their rows."""
        rows = [r for r in map(self.keys.pop, keys, [None] * len(keys)) if r is not None]
        self.kill(rows)
        return rows

    def kill(self, rows: Sequence[int]) -> None:
        """Mark rows dead (their keys already left :attr:`keys`)."""
        if not rows:
            return
        self.columns.alive[np.asarray(rows, np.int64)] = False
        key_of, texts, metas = self.key_of, self.texts, self.metadata
        for r in rows:
            key_of[r] = texts[r] = metas[r] = None
        if self.recall is not None:
            for r in rows:
                self.recall.delete(r)
        if self.reuse:
            self.free.extend(rows)

    def refresh(self, rows: Sequence[int], now: float) -> None:
        """``last_accessed_at = now`` and ``access_count += 1`` of the rows (each once)."""
        idx = np.asarray(rows, np.int64)
        if idx.shape[0]:
            self.columns.last_accessed_at[idx] = now
            self.columns.access_count[idx] += 1
