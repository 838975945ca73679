"""Hybrid recall: BM25 + dense similarity + episodic context, fused exactly in one kernel pass.

A :class:`HybridIndex` holds one namespace's recall state beside the store's own columns:

- a :class:`~memcore.recall.lexical.LexicalIndex` over each memory's text, prefixed with its speaker
  when it has one (``lexical``), and one over
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
:class:`HybridWeights` (``hybrid()``, ``no_model()`` for the hashing embedder, and
``similarity()``, the pure-cosine OM1 contract).

In the stores (``hybrid=`` on :class:`~memcore.ShortTermMemory`,
:class:`~memcore.LongTermMemory`, :class:`~memcore.TwoTierMemory`,
:class:`~memcore.SemanticMemory`; the last two default to hybrid recall) each namespace keeps
a :class:`NamespaceRecall`: its :class:`HybridIndex` is built from the stored texts, vectors
and ``episode``/``speaker`` metadata on the first hybrid search, then kept current by every
put/replace/delete (O(window)). It is not persisted: opening a store stays as fast as
before (0.18 s at 1e5 memories measured), and the first hybrid search after opening pays
the build: one vectorised pass (stemming each distinct word once, one tokeniser call, batch
postings and window merges in numba, :meth:`HybridIndex._build`), leaving exactly the state
the per-row path would (tested). Measured at 1e5 LoCoMo-like memories (~150 bytes), one
core: about 2.2 s, down from 9 s per row; stemming (0.8 s) and tokenising dominate. The similarity preset never builds an index and runs the stores' original kernel,
so its ranking is exactly the pure-cosine one.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from memcore import _text
from memcore.errors import DimensionMismatchError, InvalidArgumentError, InvalidVectorError
from memcore.kernels import bm25 as _kb
from memcore.kernels import hybrid as _kh
from memcore.recall.lexical import LexicalIndex
from memcore.recall.prep import DefaultQueryPreparer, PreparedQuery, QueryPreparer
from memcore.types import DecayWeights

__all__ = ["HybridWeights", "HybridIndex", "HybridResult", "NamespaceRecall", "episode_speaker",
           "default_for", "pooled_weights"]


#: Fields of :meth:`HybridWeights.no_model` (tuned on LoCoMo dev with the hashing embedder).
NO_MODEL_FIELDS = dict(dense=0.5, lexical=0.25, lexical_context=1.0, speaker=2.0, alpha=0.4,
                       dense_window=2, lexical_window=2, k1=2.0, b=0.75, stem=True)


@dataclass(frozen=True)
class HybridWeights:
    """Weights of hybrid recall. Decay terms (recency, importance) come from
    :class:`~memcore.DecayWeights`.

    Defaults (``HybridWeights.hybrid()``, for MiniLM) were tuned on the six LoCoMo dev
    conversations only (coordinate search over the fields below, as in
    the coordinate search of issue 9 (bench.hybrid_tuning, retired), with stemmed BM25 over ``"speaker:
    text"``): dense weighs most, the BM25 of the +-2 context window three times the memory's
    own BM25, a strong speaker boost (added in z units), stemmed BM25 with ``k1 = 0.6`` and
    ``b = 0.5``, and a combined dense matrix with ``alpha = 0.4`` of the memory's own
    embedding and 0.6 of the mean over its +-2 neighbours. ``HybridWeights.no_model()`` is
    the same search for the hashing embedder (BM25 weighs more). ``HybridWeights.similarity()``
    is pure cosine (the OM1 contract): ranking identical to :class:`~memcore.DecayWeights`
    alone.

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
    stem : bool
        BM25 over Snowball-stemmed English words (documents and queries; PyStemmer), so
        "adopted" matches "adopt". Measured on LoCoMo dev: +0.028 R@10 without a model,
        +0.009 with MiniLM.

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
    lexical_context: float = 0.75
    speaker: float = 2.0
    alpha: float = 0.4
    dense_window: int = 2
    lexical_window: int = 2
    k1: float = 0.6
    b: float = 0.5
    normalize: bool = True
    stem: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("normalize", "stem"):
                if not isinstance(v, bool):
                    raise InvalidArgumentError(f"HybridWeights.{f.name} must be a bool, got {v!r}")
                continue
            if f.name in ("dense_window", "lexical_window"):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= 64:
                    raise InvalidArgumentError(f"HybridWeights.{f.name} must be an int in [0, 64], got {v!r}")
                continue
            hi = {"alpha": 1.0, "b": 1.0, "k1": 100.0}.get(f.name, math.inf)
            if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
                    or not 0.0 <= v <= hi):
                raise InvalidArgumentError(f"HybridWeights.{f.name} must be finite and in [0, {hi}], "
                                 f"got {v!r}")

    @classmethod
    def hybrid(cls) -> "HybridWeights":
        """The default: BM25 + dense + episodic context + speaker boost, z-normalised."""
        return cls()

    @classmethod
    def similarity(cls) -> "HybridWeights":
        """Pure cosine of the memory's own embedding (plus the DecayWeights terms)."""
        return cls(dense=1.0, lexical=0.0, lexical_context=0.0, speaker=0.0, alpha=1.0,
                   dense_window=0, lexical_window=0, normalize=False, stem=False)

    @classmethod
    def no_model(cls) -> "HybridWeights":
        """For the hashing embedder (no neural model): BM25 and its context weigh more.

        Tuned on the six LoCoMo dev conversations with ``HashingEmbedder(dim=384)``
        (the coordinate search of issue 9).
        """
        return cls(**NO_MODEL_FIELDS)

    @property
    def is_similarity(self) -> bool:
        """True when only the memory's own cosine counts (no lexical, context, boost or z):
        stores then rank exactly as with :class:`~memcore.DecayWeights` alone."""
        return (self.lexical == 0.0 and self.lexical_context == 0.0 and self.speaker == 0.0
                and self.alpha == 1.0 and not self.normalize)

    def structure(self) -> tuple:
        """The fields fixing a :class:`HybridIndex`'s content (alpha, windows, k1, b)."""
        return (float(self.alpha), int(self.dense_window), int(self.lexical_window),
                float(self.k1), float(self.b), bool(self.stem))


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
        ``(text, entities) -> PreparedQuery``; :class:`~memcore.recall.prep.DefaultQueryPreparer`
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
            raise InvalidArgumentError(f"HybridIndex dim must be an int >= 1, got {dim!r}")
        self.dim = int(dim)
        self.weights = weights if weights is not None else HybridWeights()
        if not isinstance(self.weights, HybridWeights):
            raise InvalidArgumentError(f"weights must be HybridWeights, got {type(self.weights).__name__}")
        self.query_preparer = query_preparer or DefaultQueryPreparer()
        w = self.weights
        self._stem = _stemmer() if w.stem else None
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
        self._speaker_code: dict[str, int] = {}   # casefolded name -> small int, never reused
        self._speaker_of = np.zeros(0, np.int32)  # per row: code + 1, 0 for none
        self._names: dict[str, str] = {}         # casefolded -> as written
        self.n_rows = 0

    #: Build an empty index's first :meth:`put_many` with batch postings (False: per row, the
    #: reference the batch build is tested against).
    _batch_build = True

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
            Indexed for BM25 as ``"speaker: text"`` when a speaker is given.
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
        hashes, _, counts = _text.token_hashes([self._lexical_text(text, speaker)],
                                               parallel=False)
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

    def put_many(self, rows: Sequence[int], texts: Sequence[str], vectors: np.ndarray,
                 episode_speakers: Sequence[tuple]) -> None:
        """Add new rows in order (one tokeniser call; each window is computed once).

        Equal to calling :meth:`put` for each row in order.

        Parameters
        ----------
        rows : sequence of int
            Rows not in the index yet.
        texts : sequence of str
        vectors : ndarray of shape (len(rows), dim), float32
        episode_speakers : sequence of (episode, speaker)

        Raises
        ------
        ValueError
            If a row is already indexed or the lengths differ.
        DimensionMismatchError, InvalidVectorError
            On bad vectors.
        """
        rows = [LexicalIndex._check_row(r) for r in rows]
        m = len(rows)
        V = np.ascontiguousarray(vectors, np.float32).reshape(m, -1) if m else \
            np.zeros((0, self.dim), np.float32)
        if len(texts) != m or len(episode_speakers) != m:
            raise InvalidArgumentError(f"put_many got {m} rows, {len(texts)} texts and "
                             f"{len(episode_speakers)} episode/speaker pairs")
        if m == 0:
            return
        if V.shape[1] != self.dim:
            raise DimensionMismatchError(f"vectors have dim {V.shape[1]}, but this index was "
                                         f"built with dim={self.dim}")
        if not np.isfinite(V).all():
            raise InvalidVectorError("vectors hold NaN or inf")
        if len(set(rows)) != m or any(r in self._tokens for r in rows):
            raise InvalidArgumentError("put_many takes distinct rows that are not indexed yet")
        hashes, offsets, counts = _text.token_hashes(
            self._lexical_texts(texts, [es[1] for es in episode_speakers]))
        self.n_rows = max(self.n_rows, max(rows) + 1)
        cap = self.n_rows                            # headroom when growing: a batch build
        if cap > self._E.shape[0]:                   # is not followed by a copy on the next put
            cap += cap // 4 + 64
        self._E = _grow2(self._E, cap)
        self._C = _grow2(self._C, cap)
        self._alive = _grow2(self._alive, cap)
        ra = np.asarray(rows, np.int64)
        self._E[ra] = V
        self._alive[ra] = True
        if not self._tokens and self._batch_build:
            self._build(rows, ra, hashes, offsets, counts, episode_speakers)
            return
        eps: dict = {}
        todo: list = []
        for i, row in enumerate(rows):
            toks = hashes[offsets[i]:offsets[i] + counts[i]].copy()
            self._tokens[row] = toks
            self.lexical.add_tokens(row, toks)
            ep = self._place(row, episode_speakers[i])
            if ep is None:
                todo.append(row)
            else:
                self._episodes.setdefault(ep, []).append(row)
                eps[ep] = eps.get(ep, 0) + 1
        for row in todo:
            self._refresh(row)
        r = self._radius()
        for ep, n_new in eps.items():
            members = self._episodes[ep]
            for p in range(max(0, len(members) - n_new - r), len(members)):
                self._refresh(members[p], members, p)

    def _build(self, rows: list, ra: np.ndarray, hashes: np.ndarray, offsets: np.ndarray,
               counts: np.ndarray, episode_speakers: Sequence[tuple]) -> None:
        """:meth:`put_many` into an empty index, vectorised: the same state as the per-row
        path (rows refreshed in its order: rows without an episode, then each episode's
        members in order), built with batch postings (:meth:`LexicalIndex.add_docs`)."""
        m = len(rows)
        counts = np.asarray(counts, np.int64)
        starts = np.zeros(m + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        total = int(starts[m])                     # the tokens, packed (no spare slots)
        hashes = hashes[np.repeat(np.asarray(offsets[:m], np.int64) - starts[:m], counts)
                        + np.arange(total, dtype=np.int64)]
        bounds = starts.tolist()
        self._tokens.update(zip(rows, [hashes[a:b] for a, b in zip(bounds[:-1], bounds[1:])]))
        starts = starts[:m]
        uniq = np.unique(hashes)
        tok = np.searchsorted(uniq, hashes).astype(np.int64)
        ident = np.arange(m + 1, dtype=np.int64)
        ptr, term_ids, tfs, term_of = self.lexical.add_docs(
            ra, uniq, tok, np.ones(total, np.int32), starts, counts, ident, counts)
        # episodes, and the refresh order of the per-row path
        todo: list = []
        episodes = self._episodes
        for i, row in enumerate(rows):
            ep = self._place(row, episode_speakers[i])
            if ep is None:
                todo.append(i)
            else:
                episodes.setdefault(ep, []).append(i)
        groups = [[i] for i in todo] + list(episodes.values())
        for ep, members in episodes.items():     # positions -> rows
            episodes[ep] = [rows[i] for i in members]
        glen = np.array([len(g) for g in groups], np.int64)
        order = np.fromiter((i for g in groups for i in g), np.int64, m)   # positions
        gstart = np.repeat(np.cumsum(glen) - glen, glen)                  # per refresh entry
        glen_e = np.repeat(glen, glen)
        pos = np.arange(m, dtype=np.int64) - gstart

        def windows(radius: int):
            lo = gstart + np.maximum(pos - radius, 0)
            k = gstart + np.minimum(pos + radius + 1, glen_e) - lo
            return lo, k

        w = self.weights
        lo, k = windows(w.lexical_window)
        kptr = np.zeros(m + 1, np.int64)
        np.cumsum(k, out=kptr[1:])
        members = order[np.repeat(lo - kptr[:-1], k) + np.arange(kptr[m], dtype=np.int64)]
        # each window's document merges its members' (term, tf) lists, not their raw tokens
        gid_of = np.empty(int(term_of.max()) + 1 if term_of.shape[0] else 0, np.int64)
        known = np.flatnonzero(term_of >= 0)
        gid_of[term_of[known]] = known
        self.lexical_context.add_docs(
            ra[order], uniq, gid_of[term_ids], tfs, ptr[members], ptr[members + 1] - ptr[members],
            kptr, np.add.reduceat(counts[members], kptr[:-1]), merge=True)
        # combined dense matrix: the window mean summed in window order, as numpy's mean
        lo, k = windows(w.dense_window)
        _kb.window_means(self._E, ra[order], lo, k, float(w.alpha), self._C)

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

    def _place(self, row: int, episode_speaker: tuple) -> Hashable:
        """Record a row's speaker and episode; returns the episode."""
        ep, sp = episode_speaker
        self._set_speaker(row, sp)
        self._episode_of[row] = ep
        return ep

    def _set_speaker(self, row: int, speaker: str | None) -> None:
        old = self._speaker.pop(row, None)
        if old is not None:
            rows = self._speaker_rows[old]
            rows.discard(row)
            if not rows:
                del self._speaker_rows[old]
                self._names.pop(old, None)
        if row < self._speaker_of.shape[0]:
            self._speaker_of[row] = 0
        if speaker:
            key = str(speaker).casefold()
            self._speaker[row] = key
            self._speaker_rows.setdefault(key, set()).add(row)
            self._names[key] = str(speaker)
            code = self._speaker_code.setdefault(key, len(self._speaker_code))
            self._speaker_of = _grow2(self._speaker_of, row + 1)
            self._speaker_of[row] = code + 1

    def _radius(self) -> int:
        return max(self.weights.dense_window, self.weights.lexical_window)

    def _window(self, row: int, radius: int, members: list | None = None,
                p: int | None = None) -> list:
        if members is None:
            episode = self._episode_of.get(row)
            if episode is None:
                return [row]
            members = self._episodes[episode]
            p = members.index(row)
        return members[max(0, p - radius):p + radius + 1]

    def _refresh_around(self, row: int) -> None:
        for nb in self._window(row, self._radius()):
            self._refresh(nb)

    def _refresh(self, row: int, members: list | None = None, p: int | None = None) -> None:
        """Recompute one row's context representations from its current window (``members``
        and ``p``: the row's episode list and position, when the caller knows them)."""
        w = self.weights
        if members is None and self._episode_of.get(row) is not None:
            members = self._episodes[self._episode_of[row]]
            p = members.index(row)
        if members is None:
            dwin = lwin = [row]
        else:
            dwin = self._window(row, w.dense_window, members, p)
            lwin = self._window(row, w.lexical_window, members, p)
        mean = self._E[dwin].astype(np.float64).mean(axis=0)
        self._C[row] = (w.alpha * self._E[row].astype(np.float64)
                        + (1.0 - w.alpha) * mean).astype(np.float32)
        self.lexical_context.add_tokens(row, np.concatenate([self._tokens[j] for j in lwin]))

    def _lexical_texts(self, texts: Sequence[str], speakers: Sequence) -> list:
        """:meth:`_lexical_text` of many memories (stemmed in one pass)."""
        ts = [f"{sp}: {t}" if sp else t for t, sp in zip(texts, speakers)]
        if self._stem is None:
            return ts
        return _stem_many(ts, self._stem)

    def _lexical_text(self, text: str, speaker: str | None) -> str:
        """What BM25 indexes for a memory: ``"speaker: text"`` (the speaker is a field of the
        memory: a question naming them matches), stemmed when the weights say so."""
        t = f"{speaker}: {text}" if speaker else text
        return t if self._stem is None else self._stem(t)

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
               threshold: float = -math.inf, lexical: np.ndarray | None = None
               ) -> HybridResult:
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
        lexical : ndarray of shape (2, n_rows), float64, optional
            :meth:`lexical_signals` of this query, when the caller has them already.

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
            raise InvalidArgumentError(f"top_k must be an int >= 1, got {top_k!r}")
        w = weights if weights is not None else self.weights
        d = decay if decay is not None else DecayWeights(1.0, 0.0, 0.0)
        n = self.n_rows
        q, prepared, live = self._query(query, query_vector, alive)
        t = self._column(last_accessed_at, n, np.float64, "last_accessed_at")
        imp = self._column(importance, n, np.float32, "importance")
        w_lex = np.array([w.lexical, w.lexical_context], np.float64)
        lex = self._signals(lexical, prepared, w)
        boost = np.zeros(n, np.float32)
        if w.speaker:
            spk = self._speaker_of[:n]
            for e in prepared.entities:
                code = self._speaker_code.get(e)
                if code is not None and e in self._speaker_rows:
                    boost[:spk.shape[0]][spk == code + 1] = 1.0
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

    def _signals(self, lexical: np.ndarray | None, prepared: PreparedQuery,
                 w: HybridWeights) -> np.ndarray:
        if lexical is not None and lexical.shape == (2, self.n_rows):
            return lexical
        return self.lexical_signals(prepared, w)

    def lexical_signals(self, prepared: PreparedQuery, weights: HybridWeights | None = None
                        ) -> np.ndarray:
        """BM25 of the query against each row's text (row 0) and its episode window (row 1).

        Returns
        -------
        ndarray of shape (2, n_rows), float64
            Zeros where the weights leave a signal out, and for dead rows.
        """
        w = weights if weights is not None else self.weights
        n = self.n_rows
        lex = np.zeros((2, n), np.float64)
        if w.lexical or w.lexical_context:
            q = prepared.lexical if self._stem is None else self._stem(prepared.lexical)
            h, _, c = _text.token_hashes([q], parallel=False)
            if w.lexical:
                self.lexical.scores_tokens(h[:c[0]], lex[0])
            if w.lexical_context:
                self.lexical_context.scores_tokens(h[:c[0]], lex[1])
        return lex

    def moments(self, query: str | PreparedQuery, query_vector: np.ndarray, *,
                weights: HybridWeights | None = None, alive: np.ndarray | None = None,
                lexical: np.ndarray | None = None) -> np.ndarray:
        """Count, mean and sum of squared deviations of each z-normalised signal over the
        live rows: what :meth:`search` normalises by, for pooling several indexes' statistics
        (:func:`pooled_weights`).

        Parameters
        ----------
        query, query_vector, weights, alive, lexical
            As in :meth:`search`.

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
        n = self.n_rows
        q, prepared, live = self._query(query, query_vector, alive)
        vectors = self._E[:n] if w.alpha == 1.0 else self._C[:n]
        rows = np.flatnonzero(live)
        out = np.zeros((3, 3), np.float64)
        sig = [(vectors @ q)[rows].astype(np.float64)]     # one pass, no copy of the matrix
        lex = self._signals(lexical, prepared, w)
        sig += [lex[0, rows], lex[1, rows]]
        for i, x in enumerate(sig):
            if x.shape[0]:
                m = x.mean()
                out[i] = (x.shape[0], m, float(((x - m) ** 2).sum()))
        return out

    def _query(self, query: str | PreparedQuery, query_vector: np.ndarray,
               alive: np.ndarray | None) -> tuple[np.ndarray, PreparedQuery, np.ndarray]:
        """The checked query vector, the prepared query and the candidate mask."""
        q = np.ascontiguousarray(query_vector, np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(f"query_vector has dim {q.shape[0]}, but this index "
                                         f"was built with dim={self.dim}")
        prepared = query if isinstance(query, PreparedQuery) else self.prepare(query)
        n = self.n_rows
        live = self._alive[:n].copy()
        if alive is not None:
            live &= self._column(alive, n, np.bool_, "alive")
        return q, prepared, live

    @staticmethod
    def _column(arr: Any, n: int, dtype, name: str) -> np.ndarray:
        if arr is None:
            return np.zeros(n, dtype)
        a = np.ascontiguousarray(arr, dtype)
        if a.shape != (n,):
            raise InvalidArgumentError(f"{name} must have shape ({n},), got {a.shape}")
        return a


_MISSING = object()


_WORDS = re.compile(r"\w+")


@functools.lru_cache(maxsize=1)
def _stemmer() -> Callable[[str], str]:
    """``text -> stemmed words joined by spaces`` (Snowball English, PyStemmer)."""
    try:
        import Stemmer
    except ImportError as err:
        raise ImportError("HybridWeights(stem=True) needs PyStemmer: pip install PyStemmer "
                          "(or pass stem=False)") from err
    stem_words = Stemmer.Stemmer("english").stemWords
    findall = _WORDS.findall

    def stem(text: str) -> str:
        return " ".join(stem_words(findall(text.lower())))
    return stem


def _stem_many(texts: list, stem: Callable[[str], str]) -> list:
    """``[stem(t) for t in texts]`` in one pass: the texts are lower-cased joined by NUL
    (neither a word character nor cased, so each text lower-cases alone), split at white
    space (never inside a word), and each distinct piece's words stemmed once. Texts holding a
    NUL (or non-str) take the per-text path."""
    try:
        big = "\x00".join(texts)
    except TypeError:
        return [stem(t) for t in texts]
    if big.count("\x00") != len(texts) - 1 or len(texts) < 64:
        return [stem(t) for t in texts]
    import Stemmer

    pieces = big.lower().replace("\x00", " \x00 ").split()
    pieces.append("\x00")
    distinct = list(set(pieces))
    findall = _WORDS.findall
    words = [findall(p) for p in distinct]
    stems = iter(Stemmer.Stemmer("english").stemWords([w for ws in words for w in ws]))
    table = {p: " ".join([next(stems) for _ in ws]) for p, ws in zip(distinct, words)}
    table["\x00"] = "\x00"
    out = " ".join(filter(None, map(table.__getitem__, pieces))).split("\x00")
    out.pop()                                     # after the closing NUL
    return [t.strip(" ") for t in out]


def episode_speaker(metadata: dict | None) -> tuple[Hashable, str | None]:
    """The ``episode`` and ``speaker`` a store's hybrid index reads from a memory's metadata.

    ``metadata["episode"]`` may be any JSON value (a str or int session id is typical; lists
    and dicts are keyed by their canonical JSON); ``metadata["speaker"]`` counts when it is a
    non-empty str.

    Parameters
    ----------
    metadata : dict or None

    Returns
    -------
    episode : hashable or None
    speaker : str or None

    Examples
    --------
    >>> episode_speaker({"episode": 3, "speaker": "Ann"})
    (3, 'Ann')
    """
    if not metadata:
        return None, None
    ep = metadata.get("episode")
    if ep is not None and not isinstance(ep, (str, int, float)):
        import json

        ep = json.dumps(ep, sort_keys=True, ensure_ascii=False)
    sp = metadata.get("speaker")
    return ep, (sp if isinstance(sp, str) and sp.strip() else None)


class NamespaceRecall:
    """A store namespace's hybrid indexes: one per index structure, built on first use.

    Stores keep one of these per namespace. :meth:`index` builds the index a search's
    :class:`HybridWeights` need (structure: alpha, windows, k1, b) from the namespace's live
    rows the first time, in row order (the insertion order of the rows that source yields);
    afterwards :meth:`put`/:meth:`delete` keep every built index current (O(window) each).
    A namespace that is only ever searched with the similarity preset builds nothing.

    Parameters
    ----------
    dim : int
    query_preparer : callable, optional
        Passed to each :class:`HybridIndex`.

    Examples
    --------
    >>> rec = NamespaceRecall(4)
    >>> idx = rec.index(HybridWeights(), lambda: ([0], ["hi"], np.eye(4, dtype=np.float32)[:1],
    ...                                           [{}]))
    >>> len(idx)
    1
    """

    __slots__ = ("dim", "query_preparer", "indexes")

    def __init__(self, dim: int, query_preparer: QueryPreparer | None = None):
        self.dim = int(dim)
        self.query_preparer = query_preparer
        self.indexes: dict[tuple, HybridIndex] = {}

    def index(self, weights: HybridWeights,
              source: Callable[[], tuple]) -> HybridIndex:
        """The index for ``weights``' structure, built from ``source()`` when missing.

        ``source() -> (rows, texts, vectors, metadata)``: the live rows in insertion order,
        their texts, (n, dim) float32 vectors and metadata dicts.
        """
        key = weights.structure()
        idx = self.indexes.get(key)
        if idx is None:
            idx = HybridIndex(self.dim, weights, self.query_preparer)
            rows, texts, vectors, metadata = source()
            idx.put_many(rows, texts, vectors, [episode_speaker(m) for m in metadata])
            self.indexes[key] = idx
        return idx

    def put(self, row: int, text: str, vector: np.ndarray, metadata: dict | None) -> None:
        """Add or replace a row in every built index (a replaced row moves to the end of its
        episode, as a rebuild in insertion order would place it)."""
        if not self.indexes:
            return
        ep, sp = episode_speaker(metadata)
        for idx in self.indexes.values():
            idx.delete(row)
            idx.put(row, text, vector, episode=ep, speaker=sp)

    def put_many(self, rows: Sequence[int], texts: Sequence[str], vectors: np.ndarray,
                 metadata: Sequence[dict | None]) -> None:
        """:meth:`put` for a batch of new rows (one tokeniser call per index)."""
        if not self.indexes or not len(rows):
            return
        es = [episode_speaker(m) for m in metadata]
        for idx in self.indexes.values():
            for r in rows:
                idx.delete(r)
            idx.put_many(rows, texts, vectors, es)

    def delete(self, row: int) -> None:
        """Remove a row from every built index."""
        for idx in self.indexes.values():
            idx.delete(row)

    def clear(self) -> None:
        """Forget every index (they are rebuilt on the next hybrid search)."""
        self.indexes.clear()


def default_for(embedder: Any) -> HybridWeights:
    """The default hybrid weights for an embedder: :meth:`HybridWeights.no_model` for the
    hashing embedder (no neural model), :meth:`HybridWeights.hybrid` otherwise.

    Examples
    --------
    >>> from memcore.embedders import HashingEmbedder
    >>> default_for(HashingEmbedder()) == HybridWeights.no_model()
    True
    """
    from memcore.embedders.hashing import HashingEmbedder

    return HybridWeights.no_model() if isinstance(embedder, HashingEmbedder) \
        else HybridWeights.hybrid()


def pooled_weights(weights: HybridWeights, moments: Sequence[np.ndarray],
                   w_similarity: float = 1.0) -> tuple[HybridWeights, float]:
    """Weights that rank several indexes (e.g. two tiers) as one, z over their union.

    ``z(x) = (x - mean) / std`` with the pooled mean and population std is affine, so
    ``weights`` with ``normalize=True`` over the union equals un-normalised weights
    ``w_s / std_s`` on the raw signals plus one constant, ``-sum_s w_s mean_s / std_s``, the
    same for every memory: each index ranks with the returned weights, and adding the
    constant to their scores gives the union's z-scores.

    Parameters
    ----------
    weights : HybridWeights
        With ``normalize=True`` (else returned unchanged with offset 0.0).
    moments : sequence of ndarray of shape (3, 3), float64
        :meth:`HybridIndex.moments` of each index.
    w_similarity : float, default 1.0
        The DecayWeights factor the stores apply to the dense weight (enters the offset).

    Returns
    -------
    weights : HybridWeights
        ``normalize=False``, signal weights divided by the pooled std (0 where std is 0).
    offset : float
        Add to each returned score.

    Examples
    --------
    >>> m = np.array([[2, 0.5, 0.02], [2, 1.0, 2.0], [2, 1.0, 2.0]], np.float64)
    >>> w, off = pooled_weights(HybridWeights(), [m])
    >>> round(w.dense, 3), round(off, 3)        # -(1.5 * 0.5 / 0.1 + 0.25 + 0.75)
    (15.0, -8.5)
    """
    if not weights.normalize:
        return weights, 0.0
    n = np.zeros(3)
    mean = np.zeros(3)
    m2 = np.zeros(3)
    for mo in moments:                       # Chan et al.'s parallel update
        nb, mb, m2b = mo[:, 0], mo[:, 1], mo[:, 2]
        tot = n + nb
        delta = mb - mean
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(tot > 0, nb / np.where(tot > 0, tot, 1.0), 0.0)
        mean = mean + delta * frac
        m2 = m2 + m2b + delta * delta * n * frac
        n = tot
    std = np.sqrt(np.where(n > 0, m2 / np.where(n > 0, n, 1.0), 0.0))
    base = np.array([weights.dense * w_similarity, weights.lexical, weights.lexical_context])
    scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 0.0)
    offset = -float((base * mean * scale).sum())
    raw = np.array([weights.dense, weights.lexical, weights.lexical_context]) * scale
    return replace(weights, dense=float(raw[0]), lexical=float(raw[1]),
                   lexical_context=float(raw[2]), normalize=False), offset
