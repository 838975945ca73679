"""Opt-in approximate recall for namespaces past one exact scan per tick (>= 1e7 memories).

The exact scan reads every row's int8 code once per query: about 33 ms of memory bandwidth
per million rows on one core, so from ~1e7 rows no exact path fits a 20 ms tick. This module
trades exactness for a bounded candidate set, and says so:

1. **Candidates** from a FAISS index over the namespace's vectors (any
   ``faiss.index_factory`` string over inner product; default ``"IVF{nlist},SQ8"`` with
   ``nlist ~ sqrt(n)``: 384 bytes per row in RAM, trained on a sample of the rows).
2. **Exact re-rank** of the candidates: their float64 similarities from the stored float32
   vectors, then the fused decay score (Park et al. 2023), by the kernel that scores the hybrid
   path's candidates (:func:`memcore.kernels.candidates.hybrid_rows_topk` with the own
   similarity only: the exact similarity preset's arithmetic, bit for bit),
   filter and threshold -- scores and similarities are those of the exact path.
3. **The bound.** If the index ranked every row correctly by similarity, no row outside the
   candidates could score above ``w_sim * s_c + w_rec + w_imp`` (``s_c`` the lowest candidate
   similarity, recency and importance at most 1). When the k-th re-ranked score reaches that
   bound the result is what the exact path returns *given the index's candidate order*; when
   it does not, the candidate count is widened (x4, up to ``max_candidates``) before giving up.
   The remaining error is the index's own (a true neighbour it did not return): the recall@k
   against the exact path is measured by ``memcore bench scale --approximate`` and reported
   in the README, never assumed. Each store counts, per namespace, searches answered with the
   bound closed and without (:attr:`AnnIndex.stats`).

The index is derived state: rows are append-only between compactions, so it covers a prefix of
the rows and is extended with the new ones before a search; it is saved beside the store's
files at ``flush``/``close`` with a fingerprint of the rows it covers, and rebuilt whenever the
fingerprint does not match (compaction renumbers rows; a crash may lose unacknowledged rows).
A stale or damaged index file can only cost candidates, never a wrong score: every candidate is
re-read from the columns and checked alive.

Hybrid recall (:meth:`AnnIndex.hybrid_rows`): the candidates are the index's ``candidates``
rows by similarity, plus the ``candidates`` rows with the highest BM25 of their own text and
of their episode window; they are scored exactly (:func:`memcore.kernels.candidates.hybrid_rows_topk`,
z statistics over all live rows as on the exact path). The speaker boost and the context
stencil let rows outside every list reach the top-k, so no bound is claimed for hybrid
queries: they are counted as ``hybrid`` and their recall@k against the exact path is
measured by the benchmark.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memcore._crc import crc32, file_crc32
from memcore.errors import (InvalidArgumentError, MissingDependencyError, StoreIOError,
                            install_hint)
from memcore.kernels.candidates import hybrid_rows_topk

__all__ = ["ApproximateSearch", "AnnIndex", "load_faiss"]

log = logging.getLogger(__name__)


def load_faiss() -> Any:
    """The ``faiss`` module.

    Raises
    ------
    MissingDependencyError
        If faiss is not installed (``pip install "memcore-agent[ann]"``).
    """
    try:
        import faiss
    except ImportError as err:
        raise MissingDependencyError(
            f"approximate search needs FAISS (faiss-cpu): {install_hint('ann')}") from err
    return faiss


@dataclass(frozen=True)
class ApproximateSearch:
    """Settings of the opt-in approximate path (module notes).

    Parameters
    ----------
    min_rows : int, default 1_000_000
        Namespaces with fewer rows are ranked exactly (the exact scan is then within a tick).
    factory : str, default "auto"
        A ``faiss.index_factory`` description over inner product (``"HNSW32,SQ8"``,
        ``"IVF4096,PQ48"``, ...); ``"auto"`` is ``"IVF{nlist},SQ8"`` with ``nlist`` the power
        of two nearest ``min(sqrt(n), n / 39)`` at build time.
    candidates : int, default 512
        Candidates taken first; widened x4 while the bound is open.
    max_candidates : int, default 8192
    nprobe : int, default 32
        Inverted lists visited (IVF indexes); ``efSearch`` is set to the candidate count
        (HNSW indexes).
    train_rows : int, default 65536
        Rows sampled (evenly) to train the index (at least 39 per inverted list are needed).

    Raises
    ------
    InvalidArgumentError
        On a non-positive count or ``candidates > max_candidates``.

    Examples
    --------
    >>> ApproximateSearch(min_rows=10).candidates
    512
    """

    min_rows: int = 1_000_000
    factory: str = "auto"
    candidates: int = 512
    max_candidates: int = 8192
    nprobe: int = 32
    train_rows: int = 65536

    def __post_init__(self) -> None:
        for name in ("min_rows", "candidates", "max_candidates", "nprobe", "train_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InvalidArgumentError(f"ApproximateSearch.{name} must be an int >= 1, got {v!r}")
        if self.candidates > self.max_candidates:
            raise InvalidArgumentError(f"candidates ({self.candidates}) > max_candidates "
                                       f"({self.max_candidates})")
        if not isinstance(self.factory, str) or not self.factory.strip():
            raise InvalidArgumentError(f"factory must be a faiss.index_factory string, got {self.factory!r}")

    def factory_for(self, n: int) -> str:
        """The factory string for a namespace of ``n`` rows."""
        if self.factory != "auto":
            return self.factory
        # ~sqrt(n) lists, with at least 39 training rows per list (FAISS's k-means minimum):
        # at 1e6 rows, 1,024 lists; training and assignment cost grow with the list count
        target = min(math.sqrt(max(n, 1)), max(n, 1) / 39)
        nlist = 1 << max(4, round(math.log2(max(target, 1))))
        return f"IVF{nlist},SQ8"


def _fingerprint(vectors: np.ndarray, rows: int) -> int:
    """CRC-32 of the first, middle and last covered rows' vector bytes (which rows the index
    was built from: compaction or a lost tail changes them)."""
    crc = crc32(np.int64(rows).tobytes())
    for r in sorted({0, rows // 2, rows - 1}):
        if 0 <= r < rows:
            crc = crc32(np.ascontiguousarray(vectors[r]).tobytes(), crc)
    return crc


@dataclass
class AnnIndex:
    """One namespace's candidate index (module notes).

    Attributes
    ----------
    index : faiss.Index
        Over rows ``[0, rows)`` by inner product.
    rows : int
    factory : str
    stats : dict of str to int
        ``searches`` (similarity preset), ``closed`` (bound reached), ``open`` (returned with
        the bound not reached at ``max_candidates``), ``widened`` (searches that widened at
        least once), ``hybrid`` (hybrid queries: candidates without a bound).
    """

    index: Any
    rows: int
    factory: str
    fingerprint: int = 0
    stats: dict = field(default_factory=lambda: dict(searches=0, closed=0, open=0, widened=0,
                                                      hybrid=0))

    @classmethod
    def build(cls, vectors: np.ndarray, rows: int, config: ApproximateSearch) -> "AnnIndex":
        """Train and fill an index over ``vectors[:rows]`` ((n, dim) float32, unit rows)."""
        faiss = load_faiss()
        dim = vectors.shape[1]
        factory = config.factory_for(rows)
        try:
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as err:
            raise InvalidArgumentError(f"faiss.index_factory cannot build {factory!r}: {err}") from err
        if not index.is_trained:
            ivf = faiss.try_extract_index_ivf(index)
            want = max(config.train_rows, 39 * ivf.nlist if ivf is not None else 0)
            step = max(1, rows // want)
            sample = np.ascontiguousarray(vectors[:rows:step], dtype=np.float32)
            log.info("training %s on %d of %d rows", factory, len(sample), rows)
            index.train(sample)
        ann = cls(index, 0, factory)
        ann.extend(vectors, rows)
        return ann

    def extend(self, vectors: np.ndarray, rows: int, block: int = 65536) -> None:
        """Add rows ``[self.rows, rows)`` (rows are append-only between compactions)."""
        for start in range(self.rows, rows, block):
            stop = min(rows, start + block)
            self.index.add(np.ascontiguousarray(vectors[start:stop], dtype=np.float32))
        if rows > self.rows:
            self.rows = rows
            self.fingerprint = _fingerprint(vectors, rows)

    def covers(self, vectors: np.ndarray, rows: int) -> bool:
        """Whether this index was built from ``vectors[:self.rows]`` and ``self.rows <= rows``."""
        return self.rows <= rows and _fingerprint(vectors, self.rows) == self.fingerprint

    def candidates(self, query: np.ndarray, count: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``count`` rows by approximate similarity: ``(ids int64, sims float32)``,
        best first, without FAISS's -1 padding."""
        faiss = load_faiss()
        count = min(count, self.rows)
        params = None
        ivf = faiss.try_extract_index_ivf(self.index)
        if ivf is not None:
            params = faiss.SearchParametersIVF(nprobe=min(nprobe, ivf.nlist))
        elif "HNSW" in self.factory:
            params = faiss.SearchParametersHNSW(efSearch=max(count, 16))
        sims, ids = self.index.search(query.reshape(1, -1).astype(np.float32), count, params=params)
        keep = ids[0] >= 0
        return ids[0][keep].astype(np.int64), sims[0][keep]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str) -> None:
        """Write the index to ``path`` and its sidecar ``path + ".json"`` (tmp + rename)."""
        faiss = load_faiss()
        tmp = path + ".tmp"
        try:
            faiss.write_index(self.index, tmp)
            os.replace(tmp, path)
            meta = dict(rows=self.rows, factory=self.factory, fingerprint=self.fingerprint,
                        crc=file_crc32(path))
            with open(tmp, "w") as f:
                json.dump(meta, f)
            os.replace(tmp, path + ".json")
        except (OSError, RuntimeError) as err:
            raise StoreIOError(f"cannot save the approximate index {path}: {err}") from err

    @classmethod
    def load(cls, path: str) -> "AnnIndex | None":
        """The index saved at ``path``, or None when missing or damaged (then rebuilt)."""
        faiss = load_faiss()
        try:
            with open(path + ".json") as f:
                meta = json.load(f)
            if file_crc32(path) != meta["crc"]:
                log.warning("approximate index %s is damaged (CRC); rebuilding it", path)
                return None
            index = faiss.read_index(path)
            return cls(index, int(meta["rows"]), str(meta["factory"]), int(meta["fingerprint"]))
        except FileNotFoundError:
            return None
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as err:
            log.warning("approximate index %s unreadable (%s); rebuilding it", path, err)
            return None

    # ------------------------------------------------------------------ search
    def hybrid_rows(self, config: ApproximateSearch, query: np.ndarray, lexical: Any) -> np.ndarray:
        """A hybrid query's candidate rows (module notes): sorted, distinct, int64.

        Parameters
        ----------
        config : ApproximateSearch
        query : ndarray of shape (dim,), float32
            The dense query vector.
        lexical : LexicalSignals
            The query's sparse BM25 signals (own text and episode window).
        """
        self.stats["hybrid"] += 1
        count = config.candidates
        parts = [self.candidates(query, count, config.nprobe)[0]]
        for rows, vals in ((lexical.own_rows, lexical.own_vals), (lexical.ctx_rows, lexical.ctx_vals)):
            if rows.shape[0] > count:
                rows = rows[np.argpartition(-vals, count - 1)[:count]]
            parts.append(np.asarray(rows, np.int64))
        return np.unique(np.concatenate(parts))

    def topk(self, config: ApproximateSearch, query: np.ndarray, vectors: np.ndarray, *,
             top_k: int, alive: np.ndarray, last_accessed_at: np.ndarray,
             importance: np.ndarray, now: float, half_life: float, w_sim: float,
             w_rec: float, w_imp: float, threshold: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The fused decay top-k over the index's candidates, re-ranked exactly.

        Parameters
        ----------
        config : ApproximateSearch
        query : ndarray of shape (dim,), float32
            Unit query vector.
        vectors : ndarray of shape (n, dim), float32
            The namespace's vectors (``n >= self.rows``).
        top_k : int
        alive : ndarray of shape (n,), bool
            Live rows that match the filter.
        last_accessed_at : ndarray of shape (n,), float64
        importance : ndarray of shape (n,), float32
        now, half_life, w_sim, w_rec, w_imp, threshold : float
            As in :func:`memcore.kernels.topk.fused_topk` (Park et al. 2023).

        Returns
        -------
        rows : ndarray of shape (m,), int64
        scores, similarities : ndarray of shape (m,), float32
            Best first; ``m <= top_k``.
        closed : bool
            Whether the bound closed (module notes).
        """
        self.stats["searches"] += 1
        count = config.candidates
        # the similarity preset as the exact path scores it: the own similarity, weight w_sim,
        # no window, no sparse signal (HybridIndex.search_similarity)
        dense = np.array([float(w_sim), 0.0, 1.0, 0.0, 0.0, 0.0])
        none_i, none_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        windows = (none_i, none_i, none_i)
        sparse = (np.zeros(1, np.int64), none_i, none_f, none_f, none_f, none_f)
        decay = (last_accessed_at, importance, float(now), float(half_life), float(w_rec),
                 float(w_imp))
        ids_out = np.empty(top_k, np.int64)
        sc_out = np.empty(top_k, np.float32)
        si_out = np.empty(top_k, np.float32)
        widened = False
        while True:
            ids, approx = self.candidates(query, count, config.nprobe)
            ids = ids[ids < alive.shape[0]]
            m = hybrid_rows_topk(ids, query, vectors, windows, 1.0, dense, sparse, decay, alive,
                                 float(threshold), (ids_out, sc_out, si_out))
            exhausted = len(ids) < count or count >= self.rows
            # no row outside the candidates has a similarity above the lowest candidate's
            # (the index's order), nor recency or importance above 1
            floor = float(approx[-1]) if len(approx) else -1.0
            bound = w_sim * floor + w_rec + w_imp
            closed = exhausted or (m == top_k and float(sc_out[m - 1]) >= bound)
            if closed or count >= config.max_candidates:
                break
            count = min(config.max_candidates, count * 4)
            widened = True
        self.stats["widened"] += widened
        self.stats["closed" if closed else "open"] += 1
        if not closed:
            log.debug("approximate search returned with the bound open at %d candidates", count)
        return ids_out[:m], sc_out[:m], si_out[:m], closed

