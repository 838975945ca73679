"""Hybrid recall: BM25 + dense similarity + episodic context, fused exactly in one kernel pass.

A :class:`HybridIndex` holds one namespace's recall state beside the store's own columns:

- a :class:`~memcore.lexical.LexicalIndex` over each memory's text (``lexical``) and one over
  the text of its episode window, the memory and its ``+-lexical_window`` neighbours
  (``lexical_context``);
- the *combined dense matrix* ``C_i = alpha * e_i + (1 - alpha) * mean(e_j, |j - i| <=
  dense_window)`` (neighbours within the same episode, the memory itself included), so one scan
  scores the memory and its context (no re-encoding);
- each memory's ``speaker`` (metadata), for the speaker boost and the query preparer.

An *episode* (e.g. a conversation session) is an ordered list of memories: a new memory joins
the end of its episode; replacing a memory keeps its place; deleting it closes the gap. Each
write recomputes only the windows that include the changed memory (O(window) work), and the
result always equals recomputation from scratch (tested). A memory without an episode is its
own window.

The score (:mod:`memcore.kernels.hybrid`)::

    w_dense * z(q . C) + decay terms + w_lexical * z(bm25) + w_lexical_context * z(bm25_ctx)
    + w_speaker * [query names the memory's speaker]

with ``z`` over the namespace's live memories per query. Weights and presets:
:class:`HybridWeights`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from typing import Any, Callable, Hashable

import numpy as np

from memcore import _text
from memcore.errors import DimensionMismatchError, InvalidVectorError
from memcore.kernels import hybrid as _kh
from memcore.lexical import LexicalIndex
from memcore.query_prep import DefaultQueryPreparer, PreparedQuery, QueryPreparer
from memcore.types import DecayWeights

__all__ = ["HybridWeights", "HybridIndex", "HybridResult"]


@dataclass(frozen=True)
class HybridWeights:
    """Weights of hybrid recall. Decay terms (recency, importance) come from
    :class:`~memcore.DecayWeights`.

    Defaults (``HybridWeights.hybrid()``) were tuned on the six LoCoMo dev conversations only
    (``python -m bench.hybrid_tuning locomo --grid``): dense weighs most, the BM25 of the
    context window twice the memory's own BM25, a strong speaker boost (it is added in z units),
    BM25 with ``k1 = 0.9`` and a low length normalisation ``b = 0.1``, and a combined dense matrix with
    ``alpha = 0.4`` of the memory's own embedding. ``HybridWeights.similarity()`` is pure
    cosine (the OM1 contract): ranking identical to :class:`~memcore.DecayWeights` alone.

    Parameters
    ----------
    dense, lexical, lexical_context, speaker : float
        Non-negative finite weights.
    alpha : float
        Share of the memory's own embedding in the combined dense matrix, in [0, 1].
    dense_window, lexical_window : int
        Episode neighbours on each side in the dense mean and the lexical window, >= 0.
    k1, b : float
        BM25 parameters (k1 in [0, 100], b in [0, 1]).
    normalize : bool
        z-normalise each signal per query (True) or use raw values (the similarity preset).

    Raises
    ------
    ValueError
        Naming the field, for a negative/non-finite weight or an out-of-range parameter.

    Examples
    --------
    >>> HybridWeights.similarity().lexical
    0.0
    """

    dense: float = 1.5
    lexical: float = 0.25
    lexical_context: float = 0.5
    speaker: float = 2.0
    alpha: float = 0.4
    dense_window: int = 1
    lexical_window: int = 2
    k1: float = 0.9
    b: float = 0.1
    normalize: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "normalize":
                if not isinstance(v, bool):
                    raise ValueError(f"HybridWeights.normalize must be a bool, got {v!r}")
                continue
            if f.name in ("dense_window", "lexical_window"):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= 64:
                    raise ValueError(f"HybridWeights.{f.name} must be an int in [0, 64], got {v!r}")
                continue
            hi = {"alpha": 1.0, "b": 1.0, "k1": 100.0}.get(f.name, math.inf)
            if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
                    or not 0.0 <= v <= hi):
                raise ValueError(f"HybridWeights.{f.name} must be finite and in [0, {hi}], "
                                 f"got {v!r}")

    @classmethod
    def hybrid(cls) -> "HybridWeights":
        """The default: BM25 + dense + episodic context + speaker boost, z-normalised."""
        return cls()

    @classmethod
    def similarity(cls) -> "HybridWeights":
        """Pure cosine of the memory's own embedding (plus the DecayWeights terms)."""
        return cls(dense=1.0, lexical=0.0, lexical_context=0.0, speaker=0.0, alpha=1.0,
                   dense_window=0, lexical_window=0, normalize=False)


@dataclass(frozen=True)
class HybridResult:
    """Rows of a hybrid search, best first (``ids``: int64, -1 pads; ``scores``/``sims``:
    float32, -inf pads; ``count`` filled slots)."""

    ids: np.ndarray
    scores: np.ndarray
    sims: np.ndarray
    count: int


def _grow2(arr: np.ndarray, need: int) -> np.ndarray:
    if need <= arr.shape[0]:
        return arr
    out = np.zeros((max(need, 2 * arr.shape[0], 16),) + arr.shape[1:], arr.dtype)
    out[:arr.shape[0]] = arr
    return out


class HybridIndex:
    """One namespace's hybrid-recall state, keyed by the store's row ids.

    Parameters
    ----------
    dim : int
        Embedding dim.
    weights : HybridWeights, optional
        Fixes the index's structure (windows, alpha, BM25 k1/b); the signal weights can be
        overridden per search.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery``; :class:`~memcore.query_prep.DefaultQueryPreparer`
        by default.

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
                 query_preparer: QueryPreparer | None = None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"HybridIndex dim must be an int >= 1, got {dim!r}")
        self.dim = int(dim)
        self.weights = weights if weights is not None else HybridWeights()
        if not isinstance(self.weights, HybridWeights):
            raise ValueError(f"weights must be HybridWeights, got {type(self.weights).__name__}")
        self.query_preparer = query_preparer or DefaultQueryPreparer()
        w = self.weights
        self.lexical = LexicalIndex(w.k1, w.b)
        self.lexical_context = LexicalIndex(w.k1, w.b)
        self._E = np.zeros((0, self.dim), np.float32)
        self._C = np.zeros((0, self.dim), np.float32)
        self._alive = np.zeros(0, np.bool_)
        self._tokens: dict[int, np.ndarray] = {}
        self._episode_of: dict[int, Hashable] = {}
        self._episodes: dict[Hashable, list] = {}
        self._speaker: dict[int, str] = {}
        self._speaker_rows: dict[str, set] = {}
        self._names: dict[str, str] = {}         # casefolded -> as written
        self.n_rows = 0

    def __len__(self) -> int:
        return len(self._tokens)

    # ------------------------------------------------------------------ writes
    def put(self, row: int, text: str, vector: np.ndarray, *, episode: Hashable = None,
            speaker: str | None = None) -> None:
        """Add or replace the memory at ``row``; O(window) work.

        Parameters
        ----------
        row : int
            The store's row, >= 0.
        text : str
        vector : ndarray of shape (dim,), float32
            The memory's own (unit) embedding.
        episode : hashable, optional
            Episode id (e.g. a session); a new memory joins the end of its episode, a replaced
            one keeps its place if the episode is unchanged.
        speaker : str, optional
            Who said or wrote the memory (for the speaker boost and query preparation).

        Raises
        ------
        DimensionMismatchError
            If vector has the wrong shape.
        InvalidVectorError
            If vector holds NaN or inf.
        InvalidTextError, ValueError
            For a bad text or row.
        """
        row = LexicalIndex._check_row(row)
        v = np.ascontiguousarray(vector, np.float32).reshape(-1)
        if v.shape[0] != self.dim:
            raise DimensionMismatchError(f"vector has dim {v.shape[0]}, but this index was "
                                         f"built with dim={self.dim}")
        if not np.isfinite(v).all():
            raise InvalidVectorError(f"vector for row {row} holds NaN or inf")
        hashes, _, counts = _text.token_hashes([text], parallel=False)
        toks = hashes[:counts[0]].copy()
        old_ep = self._episode_of.get(row, _MISSING) if row in self._tokens else _MISSING
        if old_ep is not _MISSING and old_ep != episode:
            self.delete(row)
        self.n_rows = max(self.n_rows, row + 1)
        self._E = _grow2(self._E, self.n_rows)
        self._C = _grow2(self._C, self.n_rows)
        self._alive = _grow2(self._alive, self.n_rows)
        self._E[row] = v
        self._alive[row] = True
        self._tokens[row] = toks
        self.lexical.add_tokens(row, toks)
        self._set_speaker(row, speaker)
        if row not in self._episode_of:
            self._episode_of[row] = episode
            if episode is not None:
                self._episodes.setdefault(episode, []).append(row)
        self._refresh_around(row)

    def delete(self, row: int) -> bool:
        """Remove the memory at ``row``; its episode neighbours' windows close the gap.

        Returns
        -------
        bool
            True if the row held a memory.
        """
        row = LexicalIndex._check_row(row)
        if row not in self._tokens:
            return False
        episode = self._episode_of.pop(row)
        neighbours: list = []
        if episode is not None:
            members = self._episodes[episode]
            p = members.index(row)
            r = self._radius()
            neighbours = members[max(0, p - r):p] + members[p + 1:p + 1 + r]
            members.pop(p)
            if not members:
                del self._episodes[episode]
        del self._tokens[row]
        self._alive[row] = False
        self._E[row] = 0.0
        self._C[row] = 0.0
        self.lexical.remove(row)
        self.lexical_context.remove(row)
        self._set_speaker(row, None)
        for nb in neighbours:
            self._refresh(nb)
        return True

    def _set_speaker(self, row: int, speaker: str | None) -> None:
        old = self._speaker.pop(row, None)
        if old is not None:
            rows = self._speaker_rows[old]
            rows.discard(row)
            if not rows:
                del self._speaker_rows[old]
                self._names.pop(old, None)
        if speaker:
            key = str(speaker).casefold()
            self._speaker[row] = key
            self._speaker_rows.setdefault(key, set()).add(row)
            self._names[key] = str(speaker)

    def _radius(self) -> int:
        return max(self.weights.dense_window, self.weights.lexical_window)

    def _window(self, row: int, radius: int) -> list:
        episode = self._episode_of.get(row)
        if episode is None:
            return [row]
        members = self._episodes[episode]
        p = members.index(row)
        return members[max(0, p - radius):p + radius + 1]

    def _refresh_around(self, row: int) -> None:
        for nb in self._window(row, self._radius()):
            self._refresh(nb)

    def _refresh(self, row: int) -> None:
        """Recompute one row's context representations from its current window."""
        w = self.weights
        dwin = self._window(row, w.dense_window)
        mean = self._E[dwin].astype(np.float64).mean(axis=0)
        self._C[row] = (w.alpha * self._E[row].astype(np.float64)
                        + (1.0 - w.alpha) * mean).astype(np.float32)
        lwin = self._window(row, w.lexical_window)
        self.lexical_context.add_tokens(row, np.concatenate([self._tokens[j] for j in lwin]))

    # ------------------------------------------------------------------ reads
    def entities(self) -> list[str]:
        """Speaker names of the live memories (as first written)."""
        return list(self._names.values())

    def prepare(self, text: str) -> PreparedQuery:
        """Run the query preparer with this namespace's entities."""
        return self.query_preparer(text, self.entities())

    def combined(self) -> np.ndarray:
        """The combined dense matrix: ndarray (n_rows, dim), float32 (zero rows where dead)."""
        return self._C[:self.n_rows]

    def search(self, query: str | PreparedQuery, query_vector: np.ndarray, *, top_k: int = 10,
               weights: HybridWeights | None = None, decay: DecayWeights | None = None,
               now: float = 0.0, last_accessed_at: np.ndarray | None = None,
               importance: np.ndarray | None = None, alive: np.ndarray | None = None,
               threshold: float = -math.inf) -> HybridResult:
        """Exact hybrid top-k over the live rows.

        Parameters
        ----------
        query : str or PreparedQuery
            A str goes through the query preparer; its ``dense`` form is what the caller
            should have encoded as ``query_vector``.
        query_vector : ndarray of shape (dim,), float32
        top_k : int, default 10
        weights : HybridWeights, optional
            Signal weights; the index's own by default. Structural fields (windows, alpha, k1,
            b) always come from the index. ``alpha == 1.0`` (e.g. ``similarity()``) scans the
            memories' own embeddings, any other value the index's combined matrix.
        decay : DecayWeights, optional
            Recency and importance terms; none by default.
        now : float
            Unix seconds for recency.
        last_accessed_at : ndarray of shape (n_rows,), float64, optional
        importance : ndarray of shape (n_rows,), float32, optional
        alive : ndarray of shape (n_rows,), bool, optional
            Further restricts the candidates (e.g. a metadata filter); ANDed with liveness.
        threshold : float
            Minimum dense similarity of a candidate.

        Returns
        -------
        HybridResult

        Raises
        ------
        ValueError
            If top_k < 1 or an array has the wrong length.
        DimensionMismatchError
            If query_vector has the wrong dim.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
        w = weights if weights is not None else self.weights
        d = decay if decay is not None else DecayWeights(1.0, 0.0, 0.0)
        n = self.n_rows
        q = np.ascontiguousarray(query_vector, np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(f"query_vector has dim {q.shape[0]}, but this index "
                                         f"was built with dim={self.dim}")
        prepared = query if isinstance(query, PreparedQuery) else self.prepare(query)
        live = self._alive[:n].copy()
        if alive is not None:
            live &= self._column(alive, n, np.bool_, "alive")
        t = self._column(last_accessed_at, n, np.float64, "last_accessed_at")
        imp = self._column(importance, n, np.float32, "importance")
        w_lex = np.array([w.lexical, w.lexical_context], np.float64)
        lex = np.zeros((2, n), np.float64)
        if w.lexical or w.lexical_context:
            h, _, c = _text.token_hashes([prepared.lexical], parallel=False)
            if w.lexical:
                self.lexical.scores_tokens(h[:c[0]], lex[0])
            if w.lexical_context:
                self.lexical_context.scores_tokens(h[:c[0]], lex[1])
        boost = np.zeros(n, np.float32)
        if w.speaker:
            for e in prepared.entities:
                rows = self._speaker_rows.get(e)
                if rows:
                    boost[np.fromiter(rows, np.int64, len(rows))] = 1.0
        vectors = self._E[:n] if w.alpha == 1.0 else self._C[:n]
        k = int(top_k)
        ids = np.empty(k, np.int64)
        scores = np.empty(k, np.float32)
        sims = np.empty(k, np.float32)
        count = _kh.hybrid_topk(q, vectors, lex, float(w.dense), w_lex, boost, float(w.speaker),
                                t, imp, live, float(now), float(d.half_life),
                                float(d.w_recency), float(d.w_importance), bool(w.normalize),
                                float(threshold), np.empty(n, np.float32), ids, scores, sims)
        return HybridResult(ids, scores, sims, int(count))

    @staticmethod
    def _column(arr: Any, n: int, dtype, name: str) -> np.ndarray:
        if arr is None:
            return np.zeros(n, dtype)
        a = np.ascontiguousarray(arr, dtype)
        if a.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
        return a


_MISSING = object()
