"""The hybrid index: BM25 + dense similarity + episodic context, fused exactly from int8 codes.

A :class:`HybridIndex` holds one namespace's recall state beside the store's own columns, as
flat arrays allocated through an :class:`~memcore.arrays.Arrays` (RAM, or memory-mapped
files in a long-term store), with no per-row Python objects:

- the own-text BM25 postings (:class:`~memcore.recall.lexical.LexicalIndex`) of each memory's
  text, prefixed with its speaker when it has one;
- each memory's episode window: its radius-:data:`MAX_WINDOW` neighbourhood in episode order
  (a fixed-stride ``win`` column), so any radius up to :data:`MAX_WINDOW` is a query-time
  choice;
- int8 and 4-bit codes of the vectors with per-row scale and error-bound norms
  (:mod:`memcore.kernels.codes`): the scan's first pass reads the 4-bit codes, the int8
  codes tighten the bounds of the rows it cannot exclude;
- speaker and episode codes, and per episode its last row.

An *episode* (e.g. a conversation session) is an ordered list of memories: a new memory joins
the end of its episode; replacing a memory moves it to the end (as a rebuild in write order
would); deleting it closes the gap. Each write changes O(window) rows, and the state always
equals a rebuild (tested). A memory without an episode is its own window.

No context matrix and no second index of window texts: the context vector
``c_i = alpha * v_i + (1 - alpha) * mean(v_j, j in W(i))`` is a fixed combination of rows, so
``q . c_i`` is the same combination of the rows' similarities (a stencil over the windows,
:mod:`memcore.kernels.scan`), and the BM25 of the window document (the window's texts
concatenated) follows from the own postings (tf and length summed over the window, df over
window documents; :func:`memcore.kernels.bm25.bm25_context_scores_sparse`). So alpha, the
window radii and BM25's k1/b are query-time parameters; only ``stem`` and ``dates`` (the
memory's day as words in its BM25 document) fix the content.

The score (:func:`memcore.kernels.scan.hybrid_exact_topk`, computed by
:func:`~memcore.kernels.scan.hybrid_scan_topk` from the codes with exact rerank)::

    w_dense * z(q . c) + decay terms + w_lexical * z(bm25) + w_lexical_context * z(bm25_ctx)
    + w_speaker * [query names the memory's speaker]

with ``z`` over the namespace's live memories per query. The dense statistics come from
float64 moment sums kept under put/delete (``sum c`` and ``sum c c^T`` of the context vectors
``c`` for each (alpha, radius) a normalised search has used; the own vectors for radius 0),
built by one pass the first time and O(window) per write after: O(dim^2) per query, no
pass; :mod:`memcore.kernels.moments`), BM25's from its sparse scores; a metadata filter takes
one exact pass instead.

*Pruning* (:meth:`HybridIndex.search`, opt-in: :attr:`HybridIndex.prune_share`; measured
slower than the full scan on the scale workloads: :data:`PRUNE_DF_SHARE`). A query term
held by at least that share of the live rows (a speaker's name) is *common*; its postings
stay out of the scan. Each of its contributions to a row is below its idf (own text) or its window idf
(the window-document frequencies are kept by every write), so the fused score of any row is
at most its *partial* score (the common terms left out) plus ``G = w_lexical * inv_lexical *
sum idf + w_lexical_context * inv_context * sum idf_ctx`` over the common terms. The scan
ranks by the partial score; the best ``K`` rows are scored in full from their term lists
(:func:`memcore.kernels.bm25.bm25_rows`, ``bm25_context_rows``: the postings kernels' values
bit for bit) by :func:`memcore.kernels.candidates.hybrid_rows_topk`; when the ``K``-th
partial score plus ``G`` (with float slack) is below the k-th full score, the result is the
unpruned one (same rows, same scores), else ``K`` grows 8x (from :data:`PRUNE_POOL`; the
full scan past a quarter of the rows). The z statistics are the same as unpruned (given, or
from every row's BM25).

Weights and presets: :mod:`memcore.recall.weights`; a store namespace's indexes:
:mod:`memcore.recall.namespace`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from memcore import _text
from memcore.arrays import RamArrays
from memcore.errors import DimensionMismatchError, InvalidArgumentError, InvalidVectorError
from memcore.kernels import bm25 as _kb
from memcore.kernels import codes as _kc
from memcore.kernels import moments as _km
from memcore.kernels import candidates as _kcand
from memcore.kernels import scan as _ks
from memcore.kernels import reference as _ref
from memcore.recall.lexical import LexicalIndex, bm25_idf
from memcore.recall.prep import DefaultQueryPreparer, PreparedQuery, QueryPreparer
from memcore.recall.threads import check_threads, numba_threads
from memcore.recall.weights import MAX_WINDOW, HybridWeights
from memcore.recall.words import bm25_documents, stemmer
from memcore.types import DecayWeights

__all__ = ["HybridIndex", "HybridResult", "LexicalSignals", "ROW_ARRAYS", "EPISODE_ARRAYS"]


@dataclass(frozen=True)
class HybridResult:
    """Rows of a hybrid search, best first (``ids``: int64, -1 pads; ``scores``/``sims``:
    float32, -inf pads; ``count`` filled slots)."""

    ids: np.ndarray
    scores: np.ndarray
    sims: np.ndarray
    count: int


_STRIDE = 2 * MAX_WINDOW + 1

#: Per-row arrays of a :class:`HybridIndex` (name -> dtype, trailing shape), allocated through
#: its :class:`~memcore.arrays.Arrays`; ``D`` stands for dim, ``H`` for the bytes of a 4-bit
#: row (:func:`memcore.kernels.codes.nibble_width`).
ROW_ARRAYS = {
    "alive": (np.bool_, ()), "codes": (np.int8, ("D",)), "scale": (np.float32, ()),
    "cnorm": (np.float32, ()), "rnorm": (np.float32, ()),
    "codes4": (np.uint8, ("H",)), "scale4": (np.float32, ()), "cnorm4": (np.float32, ()),
    "rnorm4": (np.float32, ()),
    "win": (np.int32, (_STRIDE,)), "win_pos": (np.int8, ()), "win_cnt": (np.int8, ()),
    "episode": (np.int32, ()), "speaker": (np.int32, ()),
}
#: The scan's ``codes`` tuple (:func:`memcore.kernels.scan.hybrid_scan_topk`), in order.
_CODE_ARRAYS = ("codes", "scale", "cnorm", "rnorm", "codes4", "scale4", "cnorm4", "rnorm4")


def _row_shape(tail: tuple, dim: int) -> tuple:
    """A per-row array's trailing shape (``D``: dim, ``H``: a 4-bit row's bytes)."""
    return tuple(dim if t == "D" else _kc.nibble_width(dim) if t == "H" else t for t in tail)


#: Per-episode arrays: the episode key's 64-bit hash and its last row + 1 (0: empty).
EPISODE_ARRAYS = {"ep_key": np.uint64, "ep_last": np.int64}
#: Per-term array: ``ctx_df[t, r - 1]``, the live rows whose radius-``r`` window document
#: holds term ``t`` (the window BM25's document frequency), ``r = 1 .. MAX_WINDOW``, kept by
#: every write (:func:`memcore.kernels.bm25.window_term_counts`); rebuilt by one pass when an
#: index written before it is restored.
CTX_DF = "ctx_df"


def _episode_hash(episode: Hashable) -> int:
    """A stable 64-bit hash of an episode id (persisted, so never Python's salted hash)."""
    if isinstance(episode, float) and episode.is_integer():
        episode = int(episode)                 # 3 and 3.0 are one episode, as dict keys are
    data = f"{type(episode).__name__}:{episode!r}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _check_rows(rows: Any) -> list:
    """Rows as a list of ints >= 0 (an int ndarray is checked at once).

    Raises
    ------
    InvalidArgumentError
    """
    if isinstance(rows, np.ndarray) and rows.dtype.kind in "iu" and rows.ndim == 1:
        if rows.shape[0] and rows.min() < 0:
            raise InvalidArgumentError(f"rows must be ints >= 0, got {int(rows.min())}")
        return rows.tolist()
    return [LexicalIndex.check_row(r) for r in rows]


@dataclass(frozen=True)
class LexicalSignals:
    """A query's sparse BM25 signals over one index: the rows that score (int64, ascending)
    and their scores (float64) for the memory's own text and for its episode window."""

    own_rows: np.ndarray
    own_vals: np.ndarray
    ctx_rows: np.ndarray
    ctx_vals: np.ndarray


_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float64)
#: The scan's ``sparse`` tuple with no signal.
_NO_SPARSE = (np.zeros(1, np.int64), _EMPTY_I, _EMPTY_F, _EMPTY_F, _EMPTY_F, _EMPTY_F)

def _padded(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A search's outputs before the scan: ids (k,) int64 all -1, scores and sims (k,)
    float32 all -inf."""
    return (np.full(k, -1, np.int64), np.full(k, -np.inf, np.float32),
            np.full(k, -np.inf, np.float32))


#: A query term whose document frequency is at least this share of the live rows is
#: *common*: :meth:`HybridIndex.search` leaves its postings out of the scan and bounds its
#: contributions (module notes, *Pruning*). Off (``math.inf``) by default: on the
#: repetitive scale workload (bench/results/scale-sparse-20261205.md) the common terms'
#: bound is several z units (at 1.5 % of the rows, four common terms bound ~18 units; at
#: 10 %, ~3.7), so the scan must return hundreds to thousands of rows before it closes, and
#: even with the z statistics given for free the pruned search was slower (1e5: 5.0-17 ms vs
#: 4.4 ms p50) or at best even (1e6: 53-164 ms vs 55 ms p50, p99 up to 2 s).
PRUNE_DF_SHARE = math.inf
#: First candidate pool of a pruned search (grown 8x while the bound does not close).
PRUNE_POOL = 256

#: Rows up to which a moment-sum update is an einsum rather than a BLAS product.
_SMALL_UPDATE = 16


class HybridIndex:
    """One namespace's hybrid-recall state, keyed by the store's row ids, in flat arrays.

    State (nothing per row in Python objects): per row the int8 code of the vector with its
    scale and error-bound norms (:mod:`memcore.kernels.codes`), liveness, the episode window
    (``win``: the row's radius-:data:`MAX_WINDOW` episode neighbourhood in episode order,
    ``win_pos`` the row's own place in it, ``win_cnt`` its length), episode and speaker codes;
    the own-text BM25 postings (:class:`~memcore.recall.lexical.LexicalIndex`, no second
    index of window texts: window BM25 is computed from the own postings); per episode its key
    hash and last row. Small state: the term / episode / speaker dicts, counters, and the
    float64 moment sums of the dense signals (built on the first normalised search, then kept
    current by every write). All arrays go through ``arrays`` (:mod:`memcore.arrays`).

    Weights, alpha, window radii (<= :data:`MAX_WINDOW`) and BM25's k1/b are all query-time;
    only ``stem`` and ``dates`` fix what is indexed.

    Parameters
    ----------
    dim : int
        Embedding dim.
    weights : HybridWeights, optional
        The default weights of :meth:`search` (only ``stem`` and ``dates`` fix the index's
        content).
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery``; :class:`~memcore.recall.prep.DefaultQueryPreparer`
        by default.
    arrays : Arrays, optional
        Where the flat arrays live; a fresh :class:`~memcore.arrays.RamArrays` when None.
    vectors : callable, optional
        ``vectors() -> ndarray (>= n_rows, dim) float32``: the store's vector column, indexed
        by row (read for exact reranking and the moment sums). None: the index keeps its own
        copy in ``arrays`` (name ``vectors``). With a store's column, a row is deleted from
        the index before its vector is overwritten.
    created_at : callable, optional
        ``created_at() -> ndarray (>= n_rows,) float64``: the store's ``created_at`` column
        (Unix s), read at :meth:`put_many` for the rows' date words when the weights have
        ``dates`` and no ``created_at`` is passed.

    Raises
    ------
    ValueError
        If dim is not an int >= 1.

    Examples
    --------
    >>> idx = HybridIndex(4)
    >>> idx.put(0, "Ann: I adopted a dog", np.eye(4, dtype=np.float32)[0], episode="s1",
    ...         speaker="Ann")
    >>> idx.search("What did Ann adopt?", np.eye(4, dtype=np.float32)[0], top_k=1).ids.tolist()
    [0]
    """

    def __init__(self, dim: int, weights: HybridWeights | None = None,
                 query_preparer: QueryPreparer | None = None, *, arrays: Any = None,
                 vectors: Callable[[], np.ndarray] | None = None,
                 created_at: Callable[[], np.ndarray] | None = None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InvalidArgumentError(f"HybridIndex dim must be an int >= 1, got {dim!r}")
        self.dim = int(dim)
        self.weights = weights if weights is not None else HybridWeights()
        if not isinstance(self.weights, HybridWeights):
            raise InvalidArgumentError(f"weights must be HybridWeights, got {type(self.weights).__name__}")
        self.query_preparer = query_preparer or DefaultQueryPreparer()
        self._stem = stemmer() if self.weights.stem else None
        self.arrays = arrays if arrays is not None else RamArrays()
        self._vsrc = vectors
        self._tsrc = created_at
        w = self.weights
        self.lexical = LexicalIndex(w.k1, w.b, arrays=self.arrays, prefix="lex.")
        self._fresh4 = self.arrays.get("codes4") is None and self.arrays.get("codes") is not None
        for name, (dtype, tail) in ROW_ARRAYS.items():
            if self.arrays.get(name) is None:
                self.arrays.alloc(name, (0,) + _row_shape(tail, self.dim), dtype)
        if self.arrays.get(CTX_DF) is None:
            self.arrays.alloc(CTX_DF, (0, MAX_WINDOW), np.int64)
        self._seen = np.zeros(0, np.int64)          # window_term_counts' scratch (RAM)
        self._tick = 1
        if vectors is None and self.arrays.get("vectors") is None:
            self.arrays.alloc("vectors", (0, self.dim), np.float32)
        for name, dtype in EPISODE_ARRAYS.items():
            if self.arrays.get(name) is None:
                self.arrays.alloc(name, (0,), dtype)
        self.n_rows = 0
        self.n_live = 0
        self._n_eps = 0
        self._ep_ids: dict[int, int] = {}
        self._spk_code: dict[str, int] = {}        # casefolded name -> code (1-based)
        self._spk_names: list[str] = []            # code - 1 -> name as last written
        self._spk_count: list[int] = []            # code - 1 -> live rows
        self._ctx_len = np.zeros(MAX_WINDOW + 1, np.int64)   # sum of window-doc lengths, per r
        self._sums: dict = {}                      # (alpha, radius) -> sums (_moment_sums)
        if w.normalize:                            # the default weights' sums: kept from the
            r = self._dense_radius(w)              # start, so no search has to build them
            self._sums[(1.0, 0) if r == 0 else (float(w.alpha), r)] = (
                np.zeros(self.dim), np.zeros((self.dim, self.dim)))
        self._wcache: dict[int, list] = {}         # radius -> _window_cache's list
        #: :data:`PRUNE_DF_SHARE` of this index (``math.inf``, the default: never prune).
        self.prune_share = PRUNE_DF_SHARE
        #: :data:`PRUNE_POOL` of this index.
        self.prune_pool = PRUNE_POOL
        #: The last :meth:`search`'s scan statistics: rows reranked exactly, exact
        #: similarities computed, rows flagged, candidates (``memcore.kernels.scan``).
        self.last_scan_stats = np.zeros(4, np.int64)

    def __len__(self) -> int:
        return self.n_live

    # ------------------------------------------------------------------ state
    def small_state(self) -> dict:
        """Everything besides ``arrays`` needed to resume: counters, speakers (UTF-8 JSON
        bytes), window-document lengths and the moment sums when built.

        Returns
        -------
        dict of str -> ndarray
        """
        st = {"n_rows": np.int64(self.n_rows), "n_live": np.int64(self.n_live),
              "n_episodes": np.int64(self._n_eps), "ctx_len": self._ctx_len.copy(),
              "speakers": np.frombuffer(json.dumps(
                  [[k, self._spk_names[c - 1], self._spk_count[c - 1]]
                   for k, c in self._spk_code.items()], ensure_ascii=False).encode(), np.uint8
              ).copy()}
        st.update({"lex." + k: v for k, v in self.lexical.small_state().items()})
        for j, ((alpha, r), (c1, c2)) in enumerate(self._sums.items()):
            st[f"sums.{j}.key"] = np.array([alpha, r], np.float64)
            st[f"sums.{j}.c1"], st[f"sums.{j}.c2"] = c1.copy(), c2.copy()
        return st

    @classmethod
    def restore(cls, dim: int, arrays: Any, state: dict, weights: HybridWeights | None = None,
                query_preparer: QueryPreparer | None = None, *,
                vectors: Callable[[], np.ndarray] | None = None,
                created_at: Callable[[], np.ndarray] | None = None) -> "HybridIndex":
        """The index over ``arrays`` as they were when ``state`` (:meth:`small_state`) was
        taken. O(terms + episodes + speakers) Python; nothing proportional to the rows, except
        once for an index checkpointed before the 4-bit codes existed: they are derived from
        the vectors (~1-3 s per million rows; a writer's next checkpoint keeps them).

        Raises
        ------
        InvalidArgumentError
            If an array the index needs is missing from ``arrays``.
        """
        for name in list(ROW_ARRAYS) + list(EPISODE_ARRAYS):
            if arrays.get(name) is None and name not in _CODE_ARRAYS[4:]:
                raise InvalidArgumentError(f"cannot restore a hybrid index: array {name!r} is missing")
        recount = arrays.get(CTX_DF) is None       # written before ctx_df was kept
        idx = cls(dim, weights, query_preparer, arrays=arrays, vectors=vectors,
                  created_at=created_at)
        idx.n_rows = int(state["n_rows"])
        if idx._fresh4:                   # checkpointed before the 4-bit codes: derived once
            idx._derive_nibbles()         # (a writer's next checkpoint keeps them)
        idx.n_live = int(state["n_live"])
        idx._n_eps = int(state["n_episodes"])
        idx._ctx_len = np.array(state["ctx_len"], np.int64)
        for key, name, count in json.loads(bytes(np.asarray(state["speakers"], np.uint8))):
            idx._spk_names.append(name)
            idx._spk_count.append(int(count))
            idx._spk_code[key] = len(idx._spk_names)
        idx._ep_ids = dict(zip(arrays.get("ep_key")[:idx._n_eps].tolist(), range(idx._n_eps)))
        w = idx.weights
        idx.lexical = LexicalIndex.restore(
            arrays, {k[4:]: v for k, v in state.items() if k.startswith("lex.")}, w.k1, w.b,
            prefix="lex.")
        idx._sums = {}
        j = 0
        while f"sums.{j}.key" in state:
            alpha, r = (float(x) for x in state[f"sums.{j}.key"])
            idx._sums[(alpha, int(r))] = (np.array(state[f"sums.{j}.c1"], np.float64),
                                          np.array(state[f"sums.{j}.c2"], np.float64))
            j += 1
        if recount:
            idx._recount_window_terms()
        return idx

    def _a(self, name: str) -> np.ndarray:
        return self.arrays.get(name)

    def _codes(self, n: int) -> tuple:
        """The first ``n`` rows' int8 and 4-bit codes with their scales and norms (the
        scan's ``codes``)."""
        return tuple(self._a(name)[:n] for name in _CODE_ARRAYS)

    def _vectors(self) -> np.ndarray:
        return self._vsrc() if self._vsrc is not None else self.arrays.get("vectors")

    def _derive_nibbles(self) -> None:
        """The 4-bit codes of every row from the vectors (an index checkpointed before they
        existed): ~1-3 s per million rows of dim 384, once."""
        cap = self._a("alive").shape[0]
        for name in _CODE_ARRAYS[4:]:
            self.arrays.grow(name, cap)
        vec = self._vectors()
        four = tuple(self._a(name) for name in _CODE_ARRAYS[4:])
        for a in range(0, self.n_rows, 65536):
            b = min(a + 65536, self.n_rows)
            _kc.encode_nibbles(np.ascontiguousarray(vec[a:b], np.float32),
                               *(x[a:b] for x in four))

    def _encode(self, rows: np.ndarray, V: np.ndarray) -> None:
        """The int8 and 4-bit codes of ``V`` (the vectors of ``rows``) into their arrays."""
        m = rows.shape[0]
        out = (np.empty((m, self.dim), np.int8), *(np.empty(m, np.float32) for _ in range(3)),
               np.empty((m, _kc.nibble_width(self.dim)), np.uint8),
               *(np.empty(m, np.float32) for _ in range(3)))
        _kc.encode_rows(V, *out[:4])
        _kc.encode_nibbles(V, *out[4:])
        for name, x in zip(_CODE_ARRAYS, out):
            self._a(name)[rows] = x

    def _ensure_rows(self, need: int) -> None:
        if need <= self._a("alive").shape[0]:
            return
        for name in ROW_ARRAYS:
            self.arrays.grow(name, need)
        if self._vsrc is None:
            self.arrays.grow("vectors", need)

    # ------------------------------------------------------------------ writes
    def put(self, row: int, text: str, vector: np.ndarray, *, episode: Hashable = None,
            speaker: str | None = None, created_at: float | None = None) -> None:
        """Add or replace the memory at ``row``; O(window) work. A replaced row is removed
        first and joins the end of its episode (as a rebuild in write order places it).

        Parameters
        ----------
        row : int
            The store's row, >= 0.
        text : str
            Indexed for BM25 as ``"speaker: text"`` when a speaker is given.
        vector : ndarray of shape (dim,), float32
            The memory's own (unit) embedding.
        episode : hashable, optional
            Episode id (e.g. a session); the memory joins the end of its episode.
        speaker : str, optional
            Who said or wrote the memory (for the speaker boost and query preparation).
        created_at : float, optional
            When it was stored (Unix s), for the date words of ``HybridWeights(dates=True)``;
            the ``created_at`` column given at construction when None (no date words
            without either).

        Raises
        ------
        DimensionMismatchError
            If vector has the wrong shape.
        InvalidVectorError
            If vector holds NaN or inf.
        InvalidTextError, ValueError
            For a bad text or row.
        """
        row = LexicalIndex.check_row(row)
        v = np.ascontiguousarray(vector, np.float32).reshape(-1)
        if v.shape[0] != self.dim:
            raise DimensionMismatchError(f"vector has dim {v.shape[0]}, but this index was "
                                         f"built with dim={self.dim}")
        if not np.isfinite(v).all():
            raise InvalidVectorError(f"vector for row {row} holds NaN or inf")
        _text.check_texts([text], encodable=False)
        self.delete(row)
        self.put_many([row], [text], v[None, :], [(episode, speaker)],
                      None if created_at is None else [created_at])

    def put_many(self, rows: Sequence[int], texts: Sequence[str], vectors: np.ndarray,
                 episode_speakers: Sequence[tuple],
                 created_at: Sequence[float] | np.ndarray | None = None) -> None:
        """Add new rows in order (one tokeniser call); equal to :meth:`put` for each row.

        Parameters
        ----------
        rows : sequence of int
            Rows not in the index yet.
        texts : sequence of str
        vectors : ndarray of shape (len(rows), dim), float32
        episode_speakers : sequence of (episode, speaker)
        created_at : sequence of float, optional
            Unix s per row (see :meth:`put`); the ``created_at`` column when None.

        Raises
        ------
        ValueError
            If a row is already indexed or the lengths differ.
        DimensionMismatchError, InvalidVectorError
            On bad vectors.
        """
        rows = _check_rows(rows)
        m = len(rows)
        V = np.ascontiguousarray(vectors, np.float32).reshape(m, -1) if m else \
            np.zeros((0, self.dim), np.float32)
        if len(texts) != m or len(episode_speakers) != m or (
                created_at is not None and len(created_at) != m):
            raise InvalidArgumentError(
                f"put_many got {m} rows, {len(texts)} texts, {len(episode_speakers)} "
                f"episode/speaker pairs and {'no' if created_at is None else len(created_at)} "
                f"created_at")
        if m == 0:
            return
        if V.shape[1] != self.dim:
            raise DimensionMismatchError(f"vectors have dim {V.shape[1]}, but this index was "
                                         f"built with dim={self.dim}")
        if not np.isfinite(V).all():
            raise InvalidVectorError("vectors hold NaN or inf")
        alive = self._a("alive")
        if len(set(rows)) != m or any(r < self.n_rows and alive[r] for r in rows):
            raise InvalidArgumentError("put_many takes distinct rows that are not indexed yet")
        if self.weights.dates and created_at is None and self._tsrc is not None:
            created_at = self._tsrc()[np.asarray(rows, np.int64)]
        hashes, offsets, counts = self._tokens(texts, [es[1] for es in episode_speakers],
                                               created_at if self.weights.dates else None)
        top = max(rows) + 1
        self._ensure_rows(top)
        self.n_rows = max(self.n_rows, top)
        ra = np.asarray(rows, np.int64)
        if self._vsrc is None:
            self._a("vectors")[ra] = V
        self._encode(ra, V)
        self.lexical.add_tokens_batch(ra, hashes, offsets[:m], counts)
        self._link(ra, episode_speakers)

    def _tail(self, last: int, k: int) -> list:
        """The last ``k`` rows of an episode ending at row ``last`` (episode order)."""
        win, pos = self._a("win"), self._a("win_pos")
        out = [last]
        while len(out) < k:
            first = out[0]
            p = int(pos[first])
            if p == 0:
                break
            out[:0] = win[first, max(0, p - (k - len(out))):p].tolist()
        return out[-k:]

    def _link(self, rows: np.ndarray, episode_speakers: Sequence[tuple]) -> None:
        """Link new rows (tokens, codes and vectors in place), in order, to their episodes'
        ends: each episode's new rows and its last ``2 R`` old rows form a segment whose
        windows are recomputed at once (the old rows' left context included)."""
        ep_last = None
        segs: dict[int, list] = {}               # episode id -> [old tail..., new rows...]
        n_old: dict[int, int] = {}
        lone: list = []
        spk_of = []
        hashes: dict = {}
        for row, (ep, sp) in zip(rows.tolist(), episode_speakers):
            spk_of.append(sp)
            if ep is None:
                lone.append(row)
                continue
            h = hashes.get(ep)
            if h is None:
                h = hashes[ep] = _episode_hash(ep)
            eid = self._ep_ids.get(h, -1)
            if eid < 0:
                eid = self._ep_ids[h] = self._n_eps
                self._n_eps += 1
                for name in EPISODE_ARRAYS:
                    if self._n_eps > self._a(name).shape[0]:
                        self.arrays.grow(name, self._n_eps)
                self._a("ep_key")[eid] = h
                self._a("ep_last")[eid] = 0
            seg = segs.get(eid)
            if seg is None:
                ep_last = self._a("ep_last")
                last = int(ep_last[eid]) - 1
                seg = segs[eid] = self._tail(last, 2 * MAX_WINDOW) if last >= 0 else []
                n_old[eid] = len(seg)
            seg.append(row)
        old = [r for eid, seg in segs.items()
               for r in seg[max(0, n_old[eid] - MAX_WINDOW):n_old[eid]]]
        old = np.asarray(old, np.int64)
        self._account(old, -1.0)
        # one flat sequence of segments; element j's window is seq[lo_j:hi_j]
        seqs = [[r] for r in lone] + list(segs.values())
        seg_len = np.array([len(x) for x in seqs], np.int64)
        seq = np.fromiter((r for x in seqs for r in x), np.int64, int(seg_len.sum()))
        seg_start = np.repeat(np.cumsum(seg_len) - seg_len, seg_len)
        seg_end = seg_start + np.repeat(seg_len, seg_len)
        j = np.arange(seq.shape[0], dtype=np.int64)
        first_new = np.repeat(np.concatenate([np.zeros(len(lone), np.int64),
                                              np.array([n_old[e] for e in segs], np.int64)])
                              if seqs else np.zeros(0, np.int64), seg_len)
        redo = j - seg_start >= first_new - MAX_WINDOW           # old tail rows and new rows
        j = j[redo]
        lo = np.maximum(seg_start[redo], j - MAX_WINDOW)
        hi = np.minimum(seg_end[redo], j + MAX_WINDOW + 1)
        cols = lo[:, None] + np.arange(_STRIDE, dtype=np.int64)[None, :]
        ok = cols < hi[:, None]
        W = np.where(ok, seq[np.minimum(cols, seq.shape[0] - 1)], -1).astype(np.int32)
        target = seq[j]
        self._a("win")[target] = W
        self._a("win_pos")[target] = (j - lo).astype(np.int8)
        self._a("win_cnt")[target] = (hi - lo).astype(np.int8)
        self._windows_changed(target)
        if segs:
            ep_last = self._a("ep_last")
            for eid, seg in segs.items():
                ep_last[eid] = seg[-1] + 1
            ep_of = {r: eid + 1 for eid, seg in segs.items() for r in seg[n_old[eid]:]}
            self._a("episode")[rows] = [ep_of.get(r, 0) for r in rows.tolist()]
        else:
            self._a("episode")[rows] = 0
        self._a("alive")[rows] = True
        self.n_live += rows.shape[0]
        for row, sp in zip(rows.tolist(), spk_of):
            self._set_speaker(row, sp)
        self._account(np.concatenate([old, rows]), 1.0, own=rows)

    def delete(self, row: int) -> bool:
        """Remove the memory at ``row``; its episode neighbours' windows close the gap.

        Returns
        -------
        bool
            True if the row held a memory.
        """
        return self.delete_many([row]) == 1

    def delete_many(self, rows: Sequence[int]) -> int:
        """Remove the memories at ``rows`` (rows not in the index, and repeats, are skipped);
        equal to :meth:`delete` of each in turn, with the window-length and moment-sum
        bookkeeping done once for the batch: every row whose window a removal can change
        is in a removed row's window (windows are symmetric), so those rows' shares leave
        the sums before and re-enter after all the removals (one rank-k update each way,
        not one per row: a consolidation moving 32 memories out of the short tier).

        Returns
        -------
        int
            How many rows held a memory.

        Examples
        --------
        >>> idx = HybridIndex(4, HybridWeights())
        >>> idx.put_many([0, 1, 2], ["a dog", "a cat", "a cow"], np.eye(4, dtype=np.float32)[:3],
        ...              [(1, None)] * 3)
        >>> idx.delete_many([0, 2, 2, 7]), idx.n_live
        (2, 1)
        """
        alive = self._a("alive")
        gone: list[int] = []
        seen: set[int] = set()
        for row in rows:
            row = LexicalIndex.check_row(row)
            if row < self.n_rows and alive[row] and row not in seen:
                gone.append(row)
                seen.add(row)
        if not gone:
            return 0
        win, cnt = self._a("win"), self._a("win_cnt")
        near = set(seen)
        for row in gone:
            near.update(win[row, :int(cnt[row])].tolist())
        affected = np.asarray(sorted(near), np.int64)
        self._account(affected, -1.0, own=np.asarray(gone, np.int64))
        for row in gone:
            self._unlink(row)
        self._account(affected, 1.0)        # the removed rows are no longer alive: skipped
        if self._vsrc is None:
            self._a("vectors")[gone] = 0.0
        self._windows_changed(affected)
        return len(gone)

    def _unlink(self, row: int) -> None:
        """Take live ``row`` out of its episode's windows and out of every per-row structure
        (no sum bookkeeping: :meth:`delete_many` does it around the batch)."""
        win, pos, cnt = self._a("win"), self._a("win_pos"), self._a("win_cnt")
        px, cx = int(pos[row]), int(cnt[row])
        prevs, nexts = win[row, :px].tolist(), win[row, px + 1:cx].tolist()
        left = win[prevs[0], :int(pos[prevs[0]])].tolist() if prevs else []
        right = win[nexts[-1], int(pos[nexts[-1]]) + 1:int(cnt[nexts[-1]])].tolist() \
            if nexts else []
        seg = left + prevs + nexts + right
        for j in range(len(left), len(left) + len(prevs) + len(nexts)):
            y = seg[j]
            lo, hi = max(0, j - MAX_WINDOW), min(len(seg), j + MAX_WINDOW + 1)
            win[y, :hi - lo] = seg[lo:hi]
            win[y, hi - lo:] = -1
            pos[y], cnt[y] = j - lo, hi - lo
        eid = int(self._a("episode")[row]) - 1
        if eid >= 0 and not nexts:
            self._a("ep_last")[eid] = prevs[-1] + 1 if prevs else 0
        win[row, 0] = row
        win[row, 1:] = -1
        pos[row], cnt[row] = 0, 1
        self._a("episode")[row] = 0
        self._a("alive")[row] = False
        self.n_live -= 1
        self._set_speaker(row, None)
        self.lexical.remove(row)

    def _account(self, rows: np.ndarray, sign: float, own: np.ndarray | None = None) -> None:
        """Add (``sign`` 1) or remove (-1) the live ``rows``' shares of the window-document
        lengths and the moment sums (before and after a write changes their windows);
        ``own``: the rows whose own vectors enter or leave ``sum v`` and ``sum v v^T``."""
        rows = np.asarray(rows, np.int64)
        rows = rows[self._a("alive")[rows]]
        if rows.shape[0] == 0:
            return
        pos = self._a("win_pos")[rows].astype(np.int64)[:, None]
        cnt = self._a("win_cnt")[rows].astype(np.int64)[:, None]
        W = self._a("win")[rows]
        lens = self.lexical.row_lengths[np.maximum(W, 0)]
        col = np.arange(_STRIDE, dtype=np.int64)[None, :]
        for r in range(MAX_WINDOW + 1):
            ok = (col >= pos - r) & (col <= pos + r) & (col < cnt)
            self._ctx_len[r] += int(sign) * int(lens[ok].sum())
        self._count_window_terms(rows, sign)
        if not self._sums:
            return
        V = self._vectors()
        own = np.zeros(0, np.int64) if own is None else np.asarray(own, np.int64)
        own = own[self._a("alive")[own]]
        for (alpha, r), (c1, c2) in self._sums.items():
            these = own if r == 0 else rows
            for a in range(0, these.shape[0], 16384):
                C = self._context_vectors(V, these[a:a + 16384], alpha, r)
                c1 += sign * C.sum(axis=0)
                # A write's few rows: einsum, not BLAS (OpenBLAS wakes its threads even
                # for a (k, 384) product, and on a busy machine they spin: 2-10x slower puts).
                c2 += sign * (C.T @ C if C.shape[0] > _SMALL_UPDATE
                              else np.einsum("ki,kj->ij", C, C))

    def _count_window_terms(self, rows: np.ndarray, sign: float) -> None:
        """Add (``sign`` 1) or remove (-1) live ``rows``' window documents' terms in
        ``ctx_df`` (:data:`CTX_DF`)."""
        nt = self.lexical._n_terms
        if self._a(CTX_DF).shape[0] < nt:
            self.arrays.grow(CTX_DF, nt)
        if self._seen.shape[0] < nt:
            seen = np.zeros(max(nt, 2 * self._seen.shape[0]), np.int64)
            seen[:self._seen.shape[0]] = self._seen
            self._seen = seen
        self._tick = _kb.window_term_counts(
            np.asarray(rows, np.int64), int(sign), self._a("win"), self._a("win_pos"),
            self._a("win_cnt"), self.lexical.forward(), self._seen, self._tick, self._a(CTX_DF))

    def _recount_window_terms(self) -> None:
        """``ctx_df`` from scratch: one pass over the live rows' windows."""
        self._a(CTX_DF)[:] = 0
        self._count_window_terms(np.flatnonzero(self._a("alive")[:self.n_rows]), 1.0)

    def context_df(self, q_terms: np.ndarray, radius: int) -> np.ndarray:
        """Live rows whose radius-``radius`` window document holds each term (the window
        BM25's ``df_ctx``; radius 0: the own document's ``df``), kept by every write.

        Parameters
        ----------
        q_terms : ndarray of shape (m,), int64
            Term ids of :attr:`lexical`.
        radius : int
            In [0, :data:`MAX_WINDOW`].

        Returns
        -------
        ndarray of shape (m,), int64
        """
        q_terms = np.asarray(q_terms, np.int64)
        if radius == 0:
            return self.lexical._a("df")[q_terms].astype(np.int64)
        return self._a(CTX_DF)[q_terms, radius - 1].astype(np.int64)

    def _context_vectors(self, V: np.ndarray, rows: np.ndarray, alpha: float, r: int
                         ) -> np.ndarray:
        """(len(rows), dim) float64: ``alpha * v_i + (1 - alpha) * mean(v_j, j in W_r(i))``
        (``v_i`` itself for r = 0; :func:`memcore.kernels.moments.stride_context_vectors`)."""
        return _km.stride_context_vectors(V, np.asarray(rows, np.int64), self._a("win"),
                                          self._a("win_pos"), self._a("win_cnt"),
                                          float(alpha), int(r))

    def _set_speaker(self, row: int, speaker: str | None) -> None:
        spk = self._a("speaker")
        old = int(spk[row])
        if old:
            self._spk_count[old - 1] -= 1
            spk[row] = 0
        if speaker:
            key = str(speaker).casefold()
            code = self._spk_code.get(key)
            if code is None:
                self._spk_names.append(str(speaker))
                self._spk_count.append(0)
                code = self._spk_code[key] = len(self._spk_names)
            self._spk_names[code - 1] = str(speaker)
            self._spk_count[code - 1] += 1
            spk[row] = code

    def _lexical_texts(self, texts: Sequence[str], speakers: Sequence,
                       created_at: Sequence[float] | None = None) -> list:
        """What BM25 indexes for each memory (:func:`~memcore.recall.words.bm25_documents`,
        stemmed when the weights say so)."""
        return bm25_documents(texts, speakers, created_at, self._stem)

    def _tokens(self, texts: Sequence[str], speakers: Sequence,
                created_at: Sequence[float] | None = None) -> tuple:
        """The token hashes of each memory's :meth:`_lexical_texts` (the layout of
        :func:`memcore._text.token_hashes`)."""
        return _text.token_hashes(self._lexical_texts(texts, speakers, created_at))

    # ------------------------------------------------------------------ reads
    def entities(self) -> list[str]:
        """Speaker names of the live memories (as last written)."""
        return [self._spk_names[c - 1] for c in self._spk_code.values()
                if self._spk_count[c - 1] > 0]

    def prepare(self, text: str) -> PreparedQuery:
        """Run the query preparer with this namespace's entities."""
        return self.query_preparer(text, self.entities())

    def windows(self, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row's radius-``radius`` episode window, the layout of
        :mod:`memcore.kernels.scan`: ``win_start``, ``win_len`` (n_rows,) int64 and
        ``win_rows`` (the flat window column, int32). Derived from ``win_pos``/``win_cnt``
        once per radius, then kept current row by row (a write changes O(window) rows)."""
        got = self._window_cache(radius)
        n = self.n_rows
        return got[0][:n], got[1][:n], self._a("win")[:n].reshape(-1)

    def context_lengths(self, radius: int) -> np.ndarray:
        """Each row's radius-``radius`` window-document length in tokens (the sum of its
        window's own lengths; :func:`memcore.kernels.bm25.window_lengths`), (n_rows,) int32,
        cached and kept current like :meth:`windows`."""
        return self._window_cache(radius)[3][:self.n_rows]

    def _window_cache(self, radius: int) -> list:
        """``[win_start, win_len, rows valid, context lengths]`` of a radius, brought up to
        ``n_rows``."""
        n = self.n_rows
        got = self._wcache.get(radius)
        if got is None:
            cap = n + n // 4 + 64
            got = self._wcache[radius] = [np.zeros(cap, np.int64), np.zeros(cap, np.int64), 0,
                                          np.zeros(cap, np.int32)]
        if got[2] < n:
            if got[0].shape[0] < n:
                cap = max(n, 2 * got[0].shape[0])
                for k in (0, 1, 3):
                    grown = np.zeros(cap, got[k].dtype)
                    grown[:got[2]] = got[k][:got[2]]
                    got[k] = grown
            self._window_rows(got, radius, np.arange(got[2], n, dtype=np.int64))
            got[2] = n
        return got

    def _window_rows(self, got: list, radius: int, rows: np.ndarray) -> None:
        pos = self._a("win_pos")[rows].astype(np.int64)
        cnt = self._a("win_cnt")[rows].astype(np.int64)
        lo = pos - np.minimum(pos, radius)
        got[0][rows] = rows * _STRIDE + lo
        got[1][rows] = np.minimum(cnt, pos + radius + 1) - lo
        _kb.window_lengths(self.lexical.row_lengths, got[0], got[1],
                           self._a("win").reshape(-1), rows, got[3])

    def _windows_changed(self, rows: np.ndarray) -> None:
        """Recompute the cached :meth:`windows` entries of ``rows`` (whose windows changed);
        rows past a cache's valid range are computed on its next use."""
        rows = np.asarray(rows, np.int64)
        for radius, got in self._wcache.items():
            stale = rows[rows < got[2]]
            if stale.shape[0]:
                self._window_rows(got, radius, stale)

    def _moment_sums(self, alpha: float, radius: int) -> tuple:
        """``(sum c, sum c c^T)`` in float64 over the live rows' context vectors ``c`` for
        (alpha, radius) (the own vectors for radius 0): built by one pass (chunked float64
        GEMM) the first time a normalised search asks for them, then kept current by every
        write (O(window) rank-k updates)."""
        key = (1.0, 0) if radius == 0 else (float(alpha), int(radius))
        got = self._sums.get(key)
        if got is None:
            V = self._vectors()
            live = np.flatnonzero(self._a("alive")[:self.n_rows])
            c1 = np.zeros(self.dim)
            c2 = np.zeros((self.dim, self.dim))
            for a in range(0, live.shape[0], 16384):
                C = self._context_vectors(V, live[a:a + 16384], key[0], key[1])
                c1 += C.sum(axis=0)
                c2 += C.T @ C
            got = self._sums[key] = (c1, c2)
        return got

    def search(self, query: str | PreparedQuery, query_vector: np.ndarray, *, top_k: int = 10,
               weights: HybridWeights | None = None, decay: DecayWeights | None = None,
               now: float = 0.0, last_accessed_at: np.ndarray | None = None,
               importance: np.ndarray | None = None, alive: np.ndarray | None = None,
               threshold: float = -math.inf, lexical: LexicalSignals | None = None,
               stats: np.ndarray | None = None, threads: int = 1,
               rows: np.ndarray | None = None) -> HybridResult:
        """Exact hybrid top-k over the live rows (:func:`memcore.kernels.scan.hybrid_scan_topk`).

        The score of row ``i`` (module notes): ``w_dense`` times the z-normalised context
        similarity ``alpha * sim_i + (1 - alpha) * mean(sim_j, j in W(i))`` (``W(i)``: the
        ``dense_window`` episode window; the own similarity when ``alpha == 1`` or the
        window is 0), the decay terms, ``w_lexical`` and ``w_lexical_context`` times the
        z-normalised BM25 of the text and of the ``lexical_window`` window document, and
        ``w_speaker`` when the query names the row's speaker. z statistics are over the live
        rows: from the moment sums (no pass) without a filter, by one exact pass with one.

        Parameters
        ----------
        query : str or PreparedQuery
            A str goes through the query preparer; its ``dense`` form is what the caller
            should have encoded as ``query_vector``.
        query_vector : ndarray of shape (dim,), float32
        top_k : int, default 10
        weights : HybridWeights, optional
            The index's own by default.
        decay : DecayWeights, optional
            Recency and importance terms; none by default.
        now : float
            Unix seconds for recency.
        last_accessed_at : ndarray of shape (n_rows,), float64, optional
        importance : ndarray of shape (n_rows,), float32, optional
        alive : ndarray of shape (n_rows,), bool, optional
            Further restricts the candidates (a metadata filter); ANDed with liveness, and
            the z statistics are then over these rows.
        threshold : float
            Minimum own similarity of a candidate.
        lexical : LexicalSignals, optional
            :meth:`lexical_signals` of this query, when the caller has them already.
        stats : ndarray of shape (3, 3), float64, optional
            :meth:`moments` of this query, when the caller has them already.
        threads : int, default 1
            numba threads for the scan (>= 2: the parallel kernel).
        rows : ndarray of int64, optional
            Score only these distinct rows, exactly (the approximate path's candidates,
            :func:`memcore.kernels.candidates.hybrid_rows_topk`): no scan.

        Returns
        -------
        HybridResult

        Raises
        ------
        ValueError
            If top_k < 1, threads < 1 or an array has the wrong length.
        DimensionMismatchError
            If query_vector has the wrong dim.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise InvalidArgumentError(f"top_k must be an int >= 1, got {top_k!r}")
        threads = check_threads(threads)
        w = weights if weights is not None else self.weights
        if isinstance(query, str) and self.n_rows:
            query = self.prepare(query)
        plan = self._prune_plan(query, w) if rows is None and lexical is None else None
        if plan is not None:
            q_terms, q_idf, common = plan
            if stats is None and w.normalize:    # exact z statistics: every row's BM25
                lexical = full = self._term_signals(q_terms, q_idf, w, threads)
            else:
                full = None
                lexical = LexicalSignals(_EMPTY_I, _EMPTY_F, _EMPTY_I, _EMPTY_F)
        w, _, q, prepared, live, lex, stats, decay = self._inputs(
            query, query_vector, weights, decay, now, last_accessed_at, importance, alive,
            lexical, stats, threads)
        n = self.n_rows
        ids, scores, sims = _padded(int(top_k))
        if n == 0:
            return HybridResult(ids, scores, sims, 0)
        if plan is not None:
            got = self._search_pruned(q, prepared, w, stats, decay, live, float(threshold),
                                      int(top_k), threads, plan)
            if got is not None:
                return got
            lex = full if full is not None else self._term_signals(q_terms, q_idf, w, threads)
        dense, windows, sparse, _ = self._scan_args(prepared, w, stats, lex)
        if rows is not None:         # the approximate path's candidates, scored exactly
            count = _kcand.hybrid_rows_topk(
                np.asarray(rows, np.int64), q, self._vectors()[:n], windows, float(w.alpha),
                dense, sparse, decay, live, float(threshold), (ids, scores, sims))
            return HybridResult(ids, scores, sims, int(count))
        st = np.zeros(4, np.int64)
        with numba_threads(threads):
            count = _ks.hybrid_scan_topk(
                q, self._codes(n), self._vectors()[:n], windows, float(w.alpha), dense, sparse,
                decay, live, float(threshold), (ids, scores, sims, st), parallel=threads > 1)
        self.last_scan_stats = st
        return HybridResult(ids, scores, sims, int(count))

    def _prune_plan(self, prepared: PreparedQuery, w: HybridWeights) -> tuple | None:
        """``(q_terms, q_idf, common)`` when :meth:`search` prunes the query's common terms
        (``common``: bool per term occurrence, document frequency at least
        :attr:`prune_share` of the live rows); None when no term is common (or BM25 is off)."""
        if not (w.lexical or w.lexical_context) or not self.lexical.n_docs \
                or not isinstance(prepared, PreparedQuery) or self.prune_share == math.inf:
            return None
        q_terms, q_idf = self._query_terms(prepared)
        if q_terms.shape[0] == 0:
            return None
        common = self.lexical._a("df")[q_terms] >= self.prune_share * self.n_live
        return (q_terms, q_idf, common) if common.any() else None

    def _search_pruned(self, q: np.ndarray, prepared: PreparedQuery, w: HybridWeights,
                       stats: np.ndarray | None, decay: tuple, live: np.ndarray,
                       threshold: float, k: int, threads: int, plan: tuple
                       ) -> HybridResult | None:
        """:meth:`search`'s result without the common terms' postings in the scan (module
        notes, *Pruning*): the scan ranks by the fused score without the common terms'
        BM25 contributions, each of which is at most its idf times the signal's weight and
        ``inv``; the full score of its ``K`` best rows is computed exactly from their term
        lists; when the ``K``-th best partial score plus the common terms' bound ``G`` is
        below the k-th full score, no other row can enter the top-k (else ``K`` grows).
        None: the pool reached a quarter of the rows (the caller scans every row)."""
        q_terms, q_idf, common = plan
        n = self.n_rows
        r = int(w.lexical_window)
        inv = [self._z(stats, i, w)[1] for i in (1, 2)]
        ctx_idf = np.zeros(q_terms.shape[0])
        if w.lexical_context and self._ctx_len[r] > 0:
            ctx_idf = _kb.context_idf(self.context_df(q_terms, r), self.n_live)
        bound = w.lexical * inv[0] * float(q_idf[common].sum()) \
            + w.lexical_context * inv[1] * float(ctx_idf[common].sum())
        part = self._term_signals(q_terms[~common], q_idf[~common], w, threads)
        dense, windows, sparse, _ = self._scan_args(prepared, w, stats, part)
        V = self._vectors()[:n]
        pool = max(self.prune_pool, 4 * k)
        while True:
            ids, scores, sims = _padded(pool)
            st = np.zeros(4, np.int64)
            with numba_threads(threads):
                count = _ks.hybrid_scan_topk(
                    q, self._codes(n), V, windows, float(w.alpha), dense, sparse, decay, live,
                    threshold, (ids, scores, sims, st), parallel=threads > 1)
            cand = np.sort(ids[:count])
            full = self._signals_at(cand, q_terms, q_idf, ctx_idf, w)
            _, _, sp_full, _ = self._scan_args(prepared, w, stats, full)
            out = _padded(k)
            got = _kcand.hybrid_rows_topk(cand, q, V, windows, float(w.alpha), dense, sp_full,
                                          decay, live, threshold, out)
            self.last_scan_stats = st
            if count < pool:                     # every candidate row is in the pool
                return HybridResult(*out, int(got))
            tau = float(out[1][k - 1]) if got == k else -math.inf
            e = float(scores[pool - 1])          # no row outside scores above it (float32)
            u = e + abs(e) * 2.0 ** -22 + bound * (1.0 + 1e-12) \
                + 1e-9 * (1.0 + abs(e) + bound)
            if u < tau - abs(tau) * 2.0 ** -22:
                return HybridResult(*out, int(got))
            if 4 * pool >= self.n_live:
                return None
            pool *= 8

    @staticmethod
    def _z(stats: np.ndarray | None, i: int, w: HybridWeights) -> tuple[float, float]:
        """``(mean, inv)`` of signal ``i`` (0 dense, 1 lexical, 2 lexical context) for the
        z-score; ``(0, 1)`` without normalisation; ``inv`` 0 for a constant signal."""
        if not w.normalize:
            return 0.0, 1.0
        cnt, mean, m2 = stats[i]
        std = math.sqrt(m2 / cnt) if cnt > 0 and m2 > 0 else 0.0
        return mean, (1.0 / std if std > 0.0 else 0.0)

    def _inputs(self, query: str | PreparedQuery, query_vector: np.ndarray,
                weights: HybridWeights | None, decay: DecayWeights | None, now: float,
                last_accessed_at: np.ndarray | None, importance: np.ndarray | None,
                alive: np.ndarray | None, lexical: LexicalSignals | None,
                stats: np.ndarray | None, threads: int = 1) -> tuple:
        """:meth:`search`'s arguments checked and completed: the weights, decay weights,
        query vector, prepared query, candidate mask, lexical signals, z statistics and the
        scan's ``decay`` tuple."""
        w = weights if weights is not None else self.weights
        d = decay if decay is not None else DecayWeights(1.0, 0.0, 0.0)
        n = self.n_rows
        q, prepared, live = self._query(query, query_vector, alive)
        t = self._column(last_accessed_at, n, np.float64, "last_accessed_at")
        imp = self._column(importance, n, np.float32, "importance")
        lex = lexical if lexical is not None else self.lexical_signals(prepared, w, threads)
        if stats is None and w.normalize:
            stats = self.moments(prepared, q, weights=w, alive=alive, lexical=lex)
        terms = (t, imp, float(now), float(d.half_life), float(d.w_recency),
                 float(d.w_importance))
        return w, d, q, prepared, live, lex, stats, terms

    def _scan_args(self, prepared: PreparedQuery, w: HybridWeights, stats: np.ndarray | None,
                   lex: LexicalSignals) -> tuple:
        """The scan kernel's ``dense``, ``windows`` and ``sparse`` arguments for a query, and
        the name of each sparse signal (``"lexical"``, ``"lexical_context"``, ``"speaker"``)."""
        n = self.n_rows

        def z(i):
            return self._z(stats, i, w)

        r = self._dense_radius(w)
        mu, inv = z(0)
        dense = np.array([w.dense, mu, inv, 0.0, 0.0, 0.0]) if r == 0 else \
            np.array([0.0, 0.0, 0.0, w.dense, mu, inv])
        windows = self.windows(max(r, 0))
        sp_rows, sp_vals, sp_w, sp_mu, sp_inv, names = [], [], [], [], [], []
        for i, (rows_, vals_, weight, name) in enumerate(
                ((lex.own_rows, lex.own_vals, w.lexical, "lexical"),
                 (lex.ctx_rows, lex.ctx_vals, w.lexical_context, "lexical_context")), start=1):
            if weight:
                m_, i_ = z(i)
                sp_rows.append(rows_)
                sp_vals.append(vals_)
                sp_w.append(weight)
                sp_mu.append(m_)
                sp_inv.append(i_)
                names.append(name)
        if w.speaker:
            codes = [self._spk_code[e] for e in prepared.entities if e in self._spk_code]
            if codes:
                rows_ = _ks.rows_in(self._a("speaker")[:n], np.array(codes, np.int32))
                sp_rows.append(rows_)
                sp_vals.append(np.ones(rows_.shape[0]))
                sp_w.append(w.speaker)
                sp_mu.append(0.0)
                sp_inv.append(1.0)
                names.append("speaker")
        sp_ptr = np.zeros(len(sp_rows) + 1, np.int64)
        np.cumsum([x.shape[0] for x in sp_rows], out=sp_ptr[1:])
        sp_r = np.concatenate(sp_rows) if sp_rows else _EMPTY_I
        sp_v = np.concatenate(sp_vals).astype(np.float64, copy=False) if sp_vals else _EMPTY_F
        sparse = (sp_ptr, sp_r, sp_v, np.array(sp_w, np.float64), np.array(sp_mu, np.float64),
                  np.array(sp_inv, np.float64))
        return dense, windows, sparse, names

    def explain(self, rows: Sequence[int], query: str | PreparedQuery, query_vector: np.ndarray,
                *, weights: HybridWeights | None = None, decay: DecayWeights | None = None,
                now: float = 0.0, last_accessed_at: np.ndarray | None = None,
                importance: np.ndarray | None = None, alive: np.ndarray | None = None,
                lexical: LexicalSignals | None = None, stats: np.ndarray | None = None
                ) -> list[dict]:
        """Each term of :meth:`search`'s fused score of ``rows`` (arguments as there; the
        rows after ranking, so only they are recomputed, in float64 by the scan's NumPy oracle
        :func:`memcore.kernels.reference.hybrid_terms`).

        Returns
        -------
        list of dict, one per row
            ``contributions``: name -> float, the terms (fused-score units) that sum to
            ``fused``: ``dense`` (``w_dense * z(context similarity)``), ``lexical`` (own-text
            BM25; a memory's day is words of it with ``HybridWeights.dates``),
            ``lexical_context`` (episode-window BM25), ``speaker`` (``w_speaker`` when the
            query names the memory's speaker), ``recency`` (``w_recency * 2 ** (-age /
            half_life)``), ``importance`` (``w_importance * importance``);
            ``signals``: the same names -> the raw value (cosine, BM25 score, 0/1, recency in
            (0, 1], importance in [0, 1]); ``weights``: name -> weight;
            ``normalisation``: ``dense``, ``lexical``, ``lexical_context`` -> ``{"mean",
            "std"}`` of the signal over the live (filtered) memories, the z statistics
            (``std`` 0: the signal is constant and contributes 0; absent without
            ``weights.normalize``); ``fused``: float, the sum of ``contributions``.

        Raises
        ------
        ValueError, DimensionMismatchError
            As :meth:`search`.
        """
        rows = np.asarray(_check_rows(rows), np.int64)
        w, d, q, prepared, _, lex, stats, terms_decay = self._inputs(
            query, query_vector, weights, decay, now, last_accessed_at, importance, alive,
            lexical, stats)
        n = self.n_rows
        if rows.shape[0] and int(rows.max()) >= n:
            raise InvalidArgumentError(f"rows must be < {n}, got {int(rows.max())}")
        dense, windows, sparse, names = self._scan_args(prepared, w, stats, lex)
        terms, _ = _ref.hybrid_terms(rows, q, self._vectors()[:n], windows, float(w.alpha),
                                     dense, sparse, terms_decay)
        label = {"dense": "dense", "context": "dense", "recency": "recency",
                 "importance": "importance"}
        weight = {"dense": w.dense, "lexical": w.lexical, "lexical_context": w.lexical_context,
                  "speaker": w.speaker, "recency": d.w_recency, "importance": d.w_importance}
        norm = {}
        if w.normalize and stats is not None:
            for i, name in enumerate(("dense", "lexical", "lexical_context")):
                cnt, mean, m2 = (float(v) for v in stats[i])
                norm[name] = {"mean": mean,
                              "std": math.sqrt(m2 / cnt) if cnt > 0 and m2 > 0 else 0.0}
        out = []
        for j in range(rows.shape[0]):
            con = dict.fromkeys(weight, 0.0)
            sig = dict.fromkeys(weight, 0.0)
            fused = 0.0
            for name, raw, c in terms:
                key = names[name[1]] if isinstance(name, tuple) else label[name]
                con[key] = float(c[j])
                sig[key] = float(raw[j])
                fused += float(c[j])
            out.append({"contributions": con, "signals": sig, "weights": dict(weight),
                        "normalisation": {k: dict(v) for k, v in norm.items()},
                        "fused": fused})
        return out

    def search_similarity(self, query_vector: np.ndarray, *, top_k: int, decay: DecayWeights,
                          now: float, last_accessed_at: np.ndarray, importance: np.ndarray,
                          alive: np.ndarray | None = None, threshold: float = -math.inf,
                          threads: int = 1) -> HybridResult:
        """The similarity preset from the codes: ``w_similarity * sim + w_recency * recency +
        w_importance * importance`` (the fused decay score, Park et al. 2023), ``sim`` the
        exact float64 inner product, ranked exactly
        (:func:`memcore.kernels.scan.hybrid_scan_topk` with only the own similarity).

        Parameters
        ----------
        query_vector : ndarray of shape (dim,), float32
        top_k : int
        decay : DecayWeights
        now : float
            Unix seconds.
        last_accessed_at : ndarray of shape (n_rows,), float64
        importance : ndarray of shape (n_rows,), float32
        alive : ndarray of shape (n_rows,), bool, optional
            Candidates (ANDed with liveness).
        threshold : float
            Minimum similarity.
        threads : int, default 1

        Returns
        -------
        HybridResult

        Raises
        ------
        ValueError, DimensionMismatchError
            As :meth:`search`.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise InvalidArgumentError(f"top_k must be an int >= 1, got {top_k!r}")
        threads = check_threads(threads)
        n = self.n_rows
        q = np.ascontiguousarray(query_vector, np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(f"query_vector has dim {q.shape[0]}, but this index "
                                         f"was built with dim={self.dim}")
        live = self._a("alive")[:n]
        if alive is not None:
            live = live & self._column(alive, n, np.bool_, "alive")
        t = self._column(last_accessed_at, n, np.float64, "last_accessed_at")
        imp = self._column(importance, n, np.float32, "importance")
        ids, scores, sims = _padded(int(top_k))
        if n == 0:
            return HybridResult(ids, scores, sims, 0)
        terms = (t, imp, float(now), float(decay.half_life), float(decay.w_recency),
                 float(decay.w_importance))
        with numba_threads(threads):
            count = _ks.hybrid_scan_topk(
                q, self._codes(n), self._vectors()[:n], self.windows(0), 1.0,
                np.array([float(decay.w_similarity), 0.0, 1.0, 0.0, 0.0, 0.0]), _NO_SPARSE,
                terms, live, float(threshold), (ids, scores, sims, np.zeros(4, np.int64)),
                parallel=threads > 1)
        return HybridResult(ids, scores, sims, int(count))

    @staticmethod
    def _dense_radius(w: HybridWeights) -> int:
        """The dense window radius a search uses (0: the own similarity only)."""
        return 0 if w.alpha == 1.0 or w.dense_window == 0 else int(w.dense_window)

    def lexical_signals(self, prepared: PreparedQuery, weights: HybridWeights | None = None,
                        threads: int = 1) -> LexicalSignals:
        """BM25 of the query against each row's text and its episode-window document, for
        the rows that score (sparse; window BM25 from the own postings and the windows);
        ``threads`` >= 2: common terms are scored on that many numba threads (the same
        signals bit for bit).

        Returns
        -------
        LexicalSignals
            Empty where the weights leave a signal out.
        """
        w = weights if weights is not None else self.weights
        if not ((w.lexical or w.lexical_context) and self.lexical.n_docs):
            return LexicalSignals(_EMPTY_I, _EMPTY_F, _EMPTY_I, _EMPTY_F)
        return self._term_signals(*self._query_terms(prepared), w, threads)

    def _query_terms(self, prepared: PreparedQuery) -> tuple[np.ndarray, np.ndarray]:
        """The query's BM25 term ids (stemmed as indexed; repeats kept, in order) and idf."""
        q = prepared.lexical if self._stem is None else self._stem(prepared.lexical)
        h, _, c = _text.token_hashes([q], parallel=False)
        return self.lexical.query_terms(h[:c[0]])

    def own_scores(self, rows: np.ndarray, prepared: PreparedQuery, df: dict, n_docs: int,
                   avgdl: float, weights: HybridWeights | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Own-text BM25 of ``rows`` with corpus statistics given instead of the index's own
        (an index holding part of a corpus: the same contributions as
        :meth:`lexical_signals` over the whole corpus, :func:`memcore.kernels.bm25.bm25_rows`).

        Parameters
        ----------
        rows : ndarray of shape (m,), int64
            Ascending rows.
        prepared : PreparedQuery
        df : dict of int -> int
            Documents of the corpus holding each term, by its token hash (uint64 as int;
            :func:`memcore._text.token_hashes`); a term not there is in none.
        n_docs : int
            Documents of the corpus.
        avgdl : float
            Their mean length in tokens, > 0.
        weights : HybridWeights, optional
            k1 and b; the index's by default.

        Returns
        -------
        rows : ndarray of shape (s,), int64
            The rows that score (ascending).
        scores : ndarray of shape (s,), float64
        """
        w = weights if weights is not None else self.weights
        rows = np.asarray(rows, np.int64)
        q = prepared.lexical if self._stem is None else self._stem(prepared.lexical)
        h, _, c = _text.token_hashes([q], parallel=False)
        h = h[:c[0]]
        ids = self.lexical.term_ids(h)
        cdf = np.array([df.get(x, 0) for x in h.tolist()], np.int64)
        keep = (ids >= 0) & (cdf > 0)
        if not keep.any() or not rows.shape[0] or not avgdl > 0.0:
            return _EMPTY_I, _EMPTY_F
        x = _kb.bm25_rows(rows, ids[keep], bm25_idf(cdf[keep], int(n_docs)),
                          self.lexical.forward(), float(w.k1), float(w.b), float(avgdl),
                          np.empty(rows.shape[0]))
        ok = x != 0.0
        return rows[ok], x[ok]

    def _term_signals(self, q_terms: np.ndarray, q_idf: np.ndarray, w: HybridWeights,
                      threads: int = 1) -> LexicalSignals:
        """:meth:`lexical_signals` for the given query terms (postings kernels)."""
        own = ctx = (_EMPTY_I, _EMPTY_F)
        if w.lexical:
            own = self.lexical.sparse_scores(q_terms, q_idf, w.k1, w.b, threads)
        if w.lexical_context:
            r = int(w.lexical_window)
            ws, wl, wr = self.windows(r)
            ctx = self.lexical.context_scores(q_terms, ws, wl, wr, self.context_lengths(r),
                                              int(self._ctx_len[r]), w.k1, w.b, r, threads)
        return LexicalSignals(own[0], own[1], ctx[0], ctx[1])

    def _signals_at(self, rows: np.ndarray, q_terms: np.ndarray, q_idf: np.ndarray,
                    ctx_idf: np.ndarray, w: HybridWeights) -> LexicalSignals:
        """:meth:`lexical_signals` restricted to ``rows`` (ascending, live), from the rows'
        term lists (:func:`memcore.kernels.bm25.bm25_rows`, ``bm25_context_rows``: the same
        values bit for bit); ``ctx_idf``: :func:`~memcore.kernels.bm25.context_idf` of the
        terms' kept window-document frequencies."""
        lex = self.lexical
        own = ctx = (_EMPTY_I, _EMPTY_F)
        if not lex.n_docs or q_terms.shape[0] == 0:
            return LexicalSignals(_EMPTY_I, _EMPTY_F, _EMPTY_I, _EMPTY_F)
        fwd = lex.forward()
        if w.lexical:
            x = _kb.bm25_rows(rows, q_terms, q_idf, fwd, w.k1, w.b, lex.avgdl,
                              np.empty(rows.shape[0]))
            ok = x != 0.0
            own = (rows[ok], x[ok])
        r = int(w.lexical_window)
        total = int(self._ctx_len[r])
        if w.lexical_context and total > 0:
            x = _kb.bm25_context_rows(rows, q_terms, ctx_idf, fwd, self.windows(r),
                                      self.context_lengths(r), w.k1, w.b, total / lex.n_docs,
                                      np.empty(rows.shape[0]))
            ok = x != 0.0
            ctx = (rows[ok], x[ok])
        return LexicalSignals(own[0], own[1], ctx[0], ctx[1])

    def moments(self, query: str | PreparedQuery, query_vector: np.ndarray, *,
                weights: HybridWeights | None = None, alive: np.ndarray | None = None,
                lexical: LexicalSignals | None = None, dense: bool = True) -> np.ndarray:
        """Count, mean and sum of squared deviations of each z-normalised signal over the
        live rows: what :meth:`search` normalises by, for pooling several indexes' statistics
        (:func:`~memcore.recall.weights.pooled_weights`). Without ``alive`` from the moment
        sums (no pass over the rows: O(dim^2)); with it (a filter) by one exact pass over those
        rows.

        Parameters
        ----------
        query, query_vector, weights, alive, lexical
            As in :meth:`search`.
        dense : bool, default True
            False: the dense row is left zero (a caller that has it skips the pass over the
            vectors).

        Returns
        -------
        ndarray of shape (3, 3), float64
            Rows dense, lexical, lexical context; columns count, mean, M2.

        Examples
        --------
        >>> idx = HybridIndex(4, HybridWeights())
        >>> idx.put_many([0, 1], ["a dog", "a cat"], np.eye(4, dtype=np.float32)[:2],
        ...              [(None, None)] * 2)
        >>> idx.moments("dog", np.eye(4, dtype=np.float32)[0])[0].tolist()   # dense: n, mean, M2
        [2.0, 0.5, 0.5]
        """
        w = weights if weights is not None else self.weights
        q, prepared, live = self._query(query, query_vector, alive)
        lex = lexical if lexical is not None else self.lexical_signals(prepared, w)
        out = np.zeros((3, 3), np.float64)
        r = self._dense_radius(w)
        if alive is None:
            nl = self.n_live
            if nl == 0:
                return out
            if dense:
                out[0] = self.sum_moments(*self._moment_sums(w.alpha, r), q, nl)
            for i, (rows_, vals_) in enumerate(((lex.own_rows, lex.own_vals),
                                                (lex.ctx_rows, lex.ctx_vals)), start=1):
                mean_, var_ = _km.sparse_moments(vals_, nl)
                out[i] = (nl, mean_, var_ * nl)
            return out
        rows = np.flatnonzero(live)
        if rows.shape[0] == 0:
            return out
        sig = [self._dense_signal(q, rows, w) if dense else None]
        for rows_, vals_ in ((lex.own_rows, lex.own_vals), (lex.ctx_rows, lex.ctx_vals)):
            full = np.zeros(self.n_rows)
            full[rows_] = vals_
            sig.append(full[rows])
        for i, xx in enumerate(sig):
            if xx is None:
                continue
            m = xx.mean()
            out[i] = (xx.shape[0], m, float(((xx - m) ** 2).sum()))
        return out

    def _dense_signal(self, q: np.ndarray, rows: np.ndarray, w: HybridWeights) -> np.ndarray:
        """The dense signal of ``rows`` (own or context similarity; one pass over the
        vectors): ndarray (len(rows),), float64."""
        r = self._dense_radius(w)
        sims = (self._vectors()[:self.n_rows] @ q).astype(np.float64)
        if r == 0:
            return sims[rows]
        ws, wl, wr = self.windows(r)
        acc = np.zeros(rows.shape[0])
        for off in range(2 * r + 1):
            ok = off < wl[rows]
            acc[ok] += sims[wr[ws[rows[ok]] + off]]
        return w.alpha * sims[rows] + (1.0 - w.alpha) * (acc / wl[rows])

    @staticmethod
    def sum_moments(c1: np.ndarray, c2: np.ndarray, q: np.ndarray, n: int
                    ) -> tuple[float, float, float]:
        """Count, mean and M2 of ``q . c`` over ``n`` vectors ``c`` from their sums.

        Parameters
        ----------
        c1 : ndarray of shape (dim,), float64
            ``sum c``.
        c2 : ndarray of shape (dim, dim), float64
            ``sum c c^T``.
        q : ndarray of shape (dim,), float32
        n : int

        Returns
        -------
        tuple of float
            ``(n, mean, M2)``; a variance within float64 rounding of ``E[x^2]`` is 0 (a
            constant signal).
        """
        if n == 0:
            return 0.0, 0.0, 0.0
        q64 = q.astype(np.float64)
        mean = float(q64 @ c1) / n
        e2 = float(q64 @ c2 @ q64) / n
        var = e2 - mean * mean
        # cancellation: a variance within float64 rounding of E[x^2] is a constant signal
        var = var if var > 1e-12 * max(e2, 1e-300) else 0.0
        return float(n), mean, var * n

    def _query(self, query: str | PreparedQuery, query_vector: np.ndarray,
               alive: np.ndarray | None) -> tuple[np.ndarray, PreparedQuery, np.ndarray]:
        """The checked query vector, the prepared query and the candidate mask."""
        q = np.ascontiguousarray(query_vector, np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(f"query_vector has dim {q.shape[0]}, but this index "
                                         f"was built with dim={self.dim}")
        prepared = query if isinstance(query, PreparedQuery) else self.prepare(query)
        n = self.n_rows
        live = self._a("alive")[:n]
        if alive is not None:
            live = live & self._column(alive, n, np.bool_, "alive")
        return q, prepared, live

    @staticmethod
    def _column(arr: Any, n: int, dtype, name: str) -> np.ndarray:
        if arr is None:
            return np.zeros(n, dtype)
        a = np.ascontiguousarray(arr, dtype)
        if a.shape != (n,):
            raise InvalidArgumentError(f"{name} must have shape ({n},), got {a.shape}")
        return a
