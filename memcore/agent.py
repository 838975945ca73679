"""SemanticMemory: what an agent or robot runtime calls every control tick.

A tick reads like this::

    hits = memory.retrieve(sensed_text, mode="patrol")      # encodes sensed_text once
    prompt = system_prompt + memory.format_prompt(hits)     # "RELEVANT MEMORIES" section
    answer = llm(prompt)
    memory.store(sensed_text, answer, mode="patrol", background=True)  # reuses the vector

Design
------
- One namespace per robot *mode*: ``namespace + (mode,)`` (``("agent", "patrol")`` by default).
  Any non-empty mode name without NUL is safe: namespaces are tuples, never joined into
  strings, and the on-disk store encodes them injectively (never as raw paths).
- Storage is a :class:`~memcore.TwoTierMemory`: writes land in a bounded in-memory
  :class:`~memcore.ShortTermMemory`; :meth:`SemanticMemory.consolidate` (run automatically every
  ``consolidate_every`` stores, and by :meth:`close`) promotes what clears the
  :class:`~memcore.PromotionPolicy` into a :class:`~memcore.LongTermMemory`, on disk when
  ``path`` is given. What the short tier evicts before qualifying is forgotten.
- Durability (``path`` given): every store is also written to a journal of the short tier in
  the long store (namespace ``(SHORT_JOURNAL,) + namespace``, trimmed to the short tier at
  each consolidation) before :meth:`SemanticMemory.store` returns, so an acknowledged store
  survives the process being killed at the long store's ``durability`` (one ``put_many``
  more per tick); opening replays the journal into the short tier. With ``background=True``
  the durability point is :meth:`flush` (or :meth:`close`).
- A pair memory's text is the input (the situation); its vector is the embedding of that input,
  which :meth:`retrieve` computed for the same text this tick. The last retrieved text's vector
  is cached, so ``retrieve`` + ``store`` of one tick calls the embedder once.
- ``store(..., background=True)`` hands the write to one worker thread that embeds (what has no
  vector yet) and writes in batches; :meth:`flush` waits for it, :meth:`close` drains,
  consolidates and closes. A worker error is raised (as :class:`BackgroundWriteError`) by the
  next call, never swallowed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from memcore import _numba, _validate
from memcore.errors import (
    BackgroundWriteError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidNamespaceError,
    MemoryClosedError,
    UnknownNamespaceError,
)
from memcore.extractors import MemoryExtractor, PairExtractor, Turn
from memcore.open import describe, is_url, open_store, own_embedder
from memcore.names import namespace_hint
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryTier,
    Namespace,
    NamespaceLike,
    PromotionPolicy,
    system_clock,
)

__all__ = [
    "SemanticMemory",
    "warm_ticks",
    "BackgroundWriteError",
    "MemoryClosedError",
    "format_prompt",
    "human_age",
]

#: The scratch corpus of :meth:`SemanticMemory.warmup`: turns with common and rare words,
#: numbers and names, stored under three speakers.
_WARMUP_SPEAKERS = ("Ada", "Grace", "Linus")
_WARMUP_TURNS = tuple(
    f"{what} {when}" for what in (
        "I moved to Lisbon and started painting", "the robot charged its battery in the kitchen",
        "we adopted a dog called Biscuit", "my sister plays the xylophone at the concert",
        "I ran a marathon in 3 hours 58 minutes", "the warehouse shelves hold 1200 boxes",
        "I read a book about quantum chemistry", "the garden needs water every morning")
    for when in ("last week", "on 12 May 2023", "yesterday"))

logger = logging.getLogger(__name__)

#: First namespace segment of the short tier's journal in the long store (see Design).
SHORT_JOURNAL = "memcore-short-journal"

PROMPT_HEADER = "RELEVANT MEMORIES"


def human_age(seconds: float) -> str:
    """An age in human terms: "just now", "42 s ago", "3 min ago", "5 h ago", "2 days ago".

    Parameters
    ----------
    seconds : float
        Age in seconds; negative (a clock that went back) counts as 0.

    Examples
    --------
    >>> human_age(185.0)
    '3 min ago'
    """
    s = max(float(seconds), 0.0) if math.isfinite(seconds) else 0.0
    if s < 5:
        return "just now"
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if s < limit:
            return f"{int(s // size)} {unit} ago"
    days = int(s // 86400)
    if days < 14:
        return f"{days} day{'s' if days != 1 else ''} ago"
    if days < 60:
        return f"{days // 7} weeks ago"
    if days < 730:
        return f"{days // 30} months ago"
    return f"{days // 365} years ago"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def format_prompt(hits: Sequence[MemoryHit], now: float) -> str:
    """The "RELEVANT MEMORIES" prompt section for ``hits``, or "" when there are none.

    One line per memory, in the given order, with its age (``now - created_at``) in human
    terms. A pair memory reads ``input -> response``; any other memory is its text. Newlines in
    texts are collapsed, so each memory stays on one line.

    Parameters
    ----------
    hits : sequence of MemoryHit
    now : float
        Unix seconds the ages are measured from.

    Examples
    --------
    >>> from memcore import MemoryHit, MemoryTier
    >>> hit = MemoryHit("k", "Where is the kettle?", 0.9, 0.9, 1.0, 0.5, MemoryTier.SHORT,
    ...                 {"kind": "pair", "response": "In the left cupboard."}, created_at=1000.0)
    >>> print(format_prompt([hit], now=1180.0))
    RELEVANT MEMORIES
    - [3 min ago] Where is the kettle? -> In the left cupboard.
    <BLANKLINE>
    """
    if not hits:
        return ""
    lines = [PROMPT_HEADER]
    for hit in hits:
        age = human_age(now - hit.created_at)
        response = hit.metadata.get("response") if isinstance(hit.metadata, Mapping) else None
        body = _one_line(hit.text)
        if hit.metadata.get("kind") == "pair" and isinstance(response, str) and response.strip():
            body = f"{body} -> {_one_line(response)}"
        lines.append(f"- [{age}] {body}")
    return "\n".join(lines) + "\n"


@dataclass
class _Write:
    namespace: Namespace
    items: list[MemoryItem]
    vectors: list[np.ndarray | None]


_STOP = object()


def _percentiles(samples: deque) -> dict[str, float | int]:
    if not samples:
        return {"count": 0, "p50_ms": float("nan"), "p95_ms": float("nan")}
    arr = np.fromiter(samples, np.float64, len(samples))
    p50, p95 = np.percentile(arr, [50, 95])
    return {"count": len(arr), "p50_ms": float(p50), "p95_ms": float(p95)}


class SemanticMemory:
    """Tick-oriented semantic memory with one namespace per robot mode.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Directory of the persistent long tier (:class:`~memcore.LongTermMemory`); in memory
        when None. A ``postgresql://`` URL keeps it in PostgreSQL
        (:class:`~memcore.stores.postgres.PostgresMemory`, ``memcore-agent[postgres]``). Opened by
        :func:`memcore.open.open_store`: a directory without a store is created, and the
        ``memcore`` logger says so at INFO (a typo'd path shows there).
    embedder : Embedder, optional
        When None: for an existing store, the embedder it was written with, rebuilt from the
        name and dim it records (as the ``memcore`` command line opens it;
        :func:`memcore.open.own_embedder`); for a new store or ``path=None``,
        ``memcore.embedders.default()`` (the first MiniLM use on a machine logs at INFO that it
        prepares the model, about 15 s).
    top_k : int, default 3
        Hits per :meth:`retrieve`.
    threshold : float, default 0.3
        Minimum cosine similarity of a hit.
    weights : DecayWeights, optional
        Ranking weights of both tiers; ``DecayWeights()`` when None.
    hybrid : HybridWeights, optional
        Recall of both tiers (:mod:`memcore.recall`: BM25 + dense + episodic context, from
        the ``episode``/``speaker`` metadata of stored memories); when None
        ``HybridWeights.hybrid()``, or ``HybridWeights.no_model()`` with the hashing
        embedder. ``HybridWeights.similarity()`` ranks by pure cosine.
    namespace : str or tuple of str, default ("agent",)
        Prefix of every mode's namespace (``namespace + (mode,)``).
    short_capacity : int, default 256
        Memories per mode kept in the short tier.
    policy : PromotionPolicy, optional
        What :meth:`consolidate` promotes; ``PromotionPolicy()`` when None.
    consolidate_every : int, default 32
        Run :meth:`consolidate` after this many stores; 0 disables it. Must be <=
        ``short_capacity`` (otherwise memories are evicted before they can be promoted).
    max_input_chars, max_response_chars : int, default 1000
        Caps per side of a stored pair; truncation is recorded in its metadata.
    extractors : sequence of MemoryExtractor, default ()
        Extra extractors run on every stored turn (e.g. ``FactExtractor()``); their memories go
        into the same mode's namespace, embedded by their own text.
    clock : Clock, optional
        Unix seconds; ``time.time`` when None. Every timestamp and age comes from it.
    durability, lock_timeout
        Passed to :class:`~memcore.LongTermMemory`; only valid with a ``path``.
    batch_size : int, default 64
        Most memories the background worker embeds and writes per batch.
    warmup : bool, default True
        Run :meth:`warmup` now, so the first tick does not pay for model loading and JIT
        compilation.
    preload : bool, default True
        With ``warmup=False``: start a background thread (``memcore-preload``) that loads every
        memcore kernel signature numba's on-disk cache holds (:func:`memcore._numba.preload`),
        without running one; failures are logged at DEBUG and ignored. (With ``warmup`` the
        warmup loads the tick's kernels itself; a preload alongside slowed the first ticks.)
    threads : int, default 1
        CPU threads a recall's scan may use (both tiers; numba's, set only while the scan
        runs). Robots have 4-12 cores; >= 2 runs the parallel kernel.
    approximate : ApproximateSearch, optional
        The long tier's opt-in approximate search for namespaces past
        ``approximate.min_rows`` memories (see :class:`~memcore.LongTermMemory`); exact when
        None.

    Raises
    ------
    ValueError
        On a bad number (``threads`` included), or ``durability``/``lock_timeout`` without
        ``path``.
    StoreLockedError
        If another process writes to ``path``.
    EmbedderMismatchError
        If ``embedder`` differs from the one the store was written with, or, with
        ``embedder=None``, memcore cannot rebuild that one by name.

    Examples
    --------
    >>> from memcore import HashingEmbedder
    >>> with SemanticMemory(embedder=HashingEmbedder()) as mem:
    ...     _ = mem.store("My name is Ada.", "Hello Ada!", mode="chat")
    ...     hits = mem.retrieve("What is my name?", mode="chat")
    >>> hits[0].text
    'My name is Ada.'
    """

    def __init__(self, path: Any = None, embedder: Any = None, top_k: int = 3, threshold: float = 0.3,
                 weights: DecayWeights | None = None, *, hybrid: Any = None,
                 namespace: NamespaceLike = ("agent",),
                 short_capacity: int = 256, policy: PromotionPolicy | None = None,
                 consolidate_every: int = 32, max_input_chars: int = 1000,
                 max_response_chars: int = 1000, extractors: Sequence[MemoryExtractor] = (),
                 clock: Clock | None = None, durability: str | None = None,
                 lock_timeout: float | None = None, batch_size: int = 64, warmup: bool = True,
                 threads: int = 1, approximate: Any = None, preload: bool = True) -> None:
        from memcore.stores.short import ShortTermMemory
        from memcore.recall.threads import check_threads
        from memcore.recall.weights import HybridWeights, default_for
        from memcore.tiered import TwoTierMemory

        self.threads = check_threads(threads)
        self.top_k = _validate.top_k(top_k)
        self.threshold = _validate.threshold(threshold)
        if weights is not None and not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        self.weights = weights if weights is not None else DecayWeights()
        if hybrid is not None and not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        self.prefix: Namespace = _validate.namespace(namespace)
        for name, value in (("short_capacity", short_capacity), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(consolidate_every, bool) or not isinstance(consolidate_every, int) \
                or not 0 <= consolidate_every <= short_capacity:
            raise InvalidArgumentError(f"consolidate_every must be an int in [0, short_capacity={short_capacity}] "
                             f"(0 disables it), got {consolidate_every!r}")
        if policy is not None and not isinstance(policy, PromotionPolicy):
            raise InvalidArgumentTypeError(f"policy must be a PromotionPolicy, got {type(policy).__name__}")
        for ex in extractors:
            if not isinstance(ex, MemoryExtractor):
                raise InvalidArgumentTypeError(f"extractors must have extract(turn), got {type(ex).__name__}")
        if path is None and (durability is not None or lock_timeout is not None):
            raise InvalidArgumentError("durability and lock_timeout apply to a persistent store; pass path= too")
        self.consolidate_every = consolidate_every
        self.batch_size = batch_size
        self.clock: Clock = clock if clock is not None else system_clock
        self._pair = PairExtractor(max_input_chars=max_input_chars, max_response_chars=max_response_chars)
        self._extractors = list(extractors)
        if embedder is None:      # the store's own, as the command line opens it
            embedder = own_embedder(path)
        self.embedder = embedder
        self.hybrid = hybrid if hybrid is not None else default_for(embedder)
        self.path = path
        long_kwargs: dict[str, Any] = {"weights": self.weights, "clock": self.clock,
                                       "hybrid": self.hybrid, "threads": self.threads}
        if durability is not None:
            long_kwargs["durability"] = durability
        if lock_timeout is not None:
            long_kwargs["lock_timeout"] = lock_timeout
        if is_url(path):      # a PostgreSQL + pgvector server (memcore-agent[postgres])
            if durability is not None or lock_timeout is not None:
                raise InvalidArgumentError("durability and lock_timeout apply to the embedded "
                                           "store; PostgreSQL commits every write")
            if approximate is not None:
                raise InvalidArgumentError("approximate applies to the embedded store; "
                                           "PostgreSQL ranks from its own HNSW index")
            self.path = describe(path)   # never echo the password (repr, stats)
        elif approximate is not None:
            long_kwargs["approximate"] = approximate
        self.long = open_store(path, embedder, **long_kwargs)   # a new store is logged (INFO)
        try:
            self.short = ShortTermMemory(capacity=short_capacity, embedder=embedder, clock=self.clock,
                                         weights=self.weights, hybrid=self.hybrid,
                                         threads=self.threads)
            self.tiers = TwoTierMemory(self.short, self.long,
                                       policy=policy if policy is not None else PromotionPolicy(),
                                       weights=self.weights, hybrid=self.hybrid,
                                       threads=self.threads)
        except BaseException:
            self.long.close()
            raise
        self._lock = threading.Lock()
        self._cache: tuple[str, np.ndarray, tuple[Namespace, str]] | None = None
        self._since_consolidate = 0
        self._stored = 0
        self._consolidations = 0
        self._retrieve_ms: deque = deque(maxlen=10_000)
        self._store_ms: deque = deque(maxlen=10_000)
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._journal_lock = threading.RLock()   # a write's journal + short tier vs a trim
        self._journaled = path is not None and not getattr(self.long, "read_only", False)
        if self._journaled:
            if hasattr(self.long, "unindexed"):          # never searched: no hybrid index
                self.long.unindexed = (SHORT_JOURNAL,)
            try:
                self._replay_journal()
            except BaseException:
                self.long.close()
                raise
        if warmup:            # loads what a tick calls; a preload beside it would hold the GIL
            self.warmup()     # and numba's compiler lock through the first ticks
        elif preload:
            _numba.start_preload()

    # ------------------------------------------------------------------ helpers
    def __repr__(self) -> str:
        return (f"SemanticMemory(path={self.path!r}, embedder={getattr(self.embedder, 'name', '?')!r}, "
                f"top_k={self.top_k}, threshold={self.threshold})")

    def __enter__(self) -> "SemanticMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check(self) -> None:
        if self._closed:
            raise MemoryClosedError("this SemanticMemory is closed")
        err, self._error = self._error, None
        if err is not None:
            raise BackgroundWriteError(f"a background store failed: {type(err).__name__}: {err}") from err

    def namespace_of(self, mode: str) -> Namespace:
        """The namespace holding ``mode``'s memories: ``self.prefix + (mode,)``.

        Raises
        ------
        InvalidNamespaceError
            If ``mode`` is not a str, is empty, or holds NUL.
        """
        if not isinstance(mode, str):
            raise InvalidNamespaceError(f"mode must be a str, got {type(mode).__name__}")
        return _validate.namespace(self.prefix + (mode,))

    def _encode(self, text: str, source: tuple[Namespace, str]) -> np.ndarray:
        """The vector of ``text``, the dense form of ``source = (namespace, input)``, kept (one
        entry) for a following :meth:`store` of that input in that namespace."""
        cached = self._cache
        if cached is not None and cached[0] == text:
            vec = cached[1]
        else:
            vec = np.ascontiguousarray(self.embedder.encode([text])[0], dtype=np.float32)
        self._cache = (text, vec, source)
        return vec

    def warmup(self) -> None:
        """Load the model and compile the kernels a tick uses, leaving no trace in the store.

        Runs ticks on a private scratch memory built like this one (same embedder, recall,
        weights and threads; 24 turns of three speakers; retrieves of common, rare and
        unknown terms, names and a filter; stores, consolidation and, when this memory has a
        path, the journal and its trim in a temporary directory under ``/dev/shm`` where
        writable), so that no later tick compiles or loads a numba kernel (about 0.1 s with
        numba's cache warm, ~2 s with it empty). Nothing reaches this memory's store.
        With hybrid recall it also builds the hybrid index of every mode already stored in the
        long tier without one (otherwise the first retrieve of a mode pays it: about 11 s at
        1e5 memories, 0.1 s at 600) and, on a writable store, saves it at once; the long
        tier's writes keep it current from then on.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> mem = SemanticMemory(embedder=HashingEmbedder(), warmup=False); mem.warmup()
        """
        if not self.hybrid.is_similarity:
            for mode_ns in self.long.namespaces(self.prefix):
                self.long.entities(mode_ns, hybrid=self.hybrid)      # builds the index
        if not np.any(self.embedder.encode(["warm up"])):
            return                        # an embedder that sees no content in English
        warm_ticks(self.embedder, hybrid=self.hybrid, weights=self.weights, threads=self.threads,
                   on_disk=self._journaled and not is_url(self.path), clock=self.clock)

    # ------------------------------------------------------------------ the tick
    def retrieve(self, inputs: str, mode: str, *, top_k: int | None = None,
                 threshold: float | None = None, filter: Mapping[str, Any] | None = None,
                 touch: bool = True, missing_ok: bool = True) -> list[MemoryHit]:
        """The memories of ``mode`` most relevant to ``inputs``: top_k above the threshold.

        Encodes ``inputs`` once -- its dense form for hybrid recall
        (:meth:`TwoTierMemory.dense_query`: known speakers' names to first person), which is
        ``inputs`` itself unless it names one -- caches the vector for a following
        :meth:`store` of the same text (which then embeds nothing: one encode per tick), and
        searches both tiers with it.

        Parameters
        ----------
        inputs : str
            What the agent senses now. Empty, whitespace-only or content-free text
            (an all-zero embedding) returns [].
        mode : str
        top_k, threshold : optional
            Override the instance's defaults for this call.
        filter : dict, optional
            Metadata filter (``{"k": v}``, ``$in``, ``$ne``), applied before top-k.
        touch : bool, default True
            Refresh the returned memories' ``last_accessed_at``/``access_count`` (which counts
            toward promotion); False peeks.
        missing_ok : bool, default True
            Whether a mode that holds no memories (see :meth:`modes`; queued background
            writes count once written) returns []. False raises
            :class:`UnknownNamespaceError` instead, naming the nearest modes: a strict mode
            that catches a typo'd mode.

        Returns
        -------
        list of MemoryHit, best first, at most top_k.

        Raises
        ------
        UnknownNamespaceError
            (a ValueError) If ``missing_ok`` is False and ``mode`` holds no memories; the
            message lists the modes that do and the nearest of them.
        InvalidNamespaceError, InvalidTextError, ValueError
            On a bad mode, text, top_k, threshold or filter.
        BackgroundWriteError
            If an earlier background store failed.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> mem = SemanticMemory(embedder=HashingEmbedder(), warmup=False)
        >>> _ = mem.store("The kettle is in the left cupboard.", "Noted.", mode="kitchen")
        >>> mem.retrieve("Where is the kettle?", mode="kitchen")[0].text
        'The kettle is in the left cupboard.'
        >>> mem.retrieve("Where is the kettle?", mode="kitchn", missing_ok=False)
        Traceback (most recent call last):
        ...
        memcore.errors.UnknownNamespaceError: mode 'kitchn' holds no memories; did you mean 'kitchen'? (modes with memories: kitchen)
        """
        self._check()
        t0 = time.perf_counter()
        if not isinstance(mode, str):
            raise InvalidNamespaceError(f"mode must be a str, got {type(mode).__name__}")
        if not missing_ok:
            known = self.modes()
            if mode not in known:
                hint = namespace_hint((mode,), [(m,) for m in known])
                raise UnknownNamespaceError(
                    f"mode {mode!r} holds no memories" + (f"; {hint}" if hint else "")
                    + f" (modes with memories: {', '.join(known) or 'none yet'})")
        ns = self.prefix + (mode,)        # resolve validates it (once per retrieve)
        rq = self.tiers.resolve(   # validated, prepared and embedded once (cached for store())
            ns, inputs, top_k=self.top_k if top_k is None else top_k,
            threshold=self.threshold if threshold is None else threshold, weights=self.weights,
            filter=filter, touch=touch,
            encode=lambda texts: self._encode(texts[0], (ns, inputs))[None, :])
        hits = [] if rq is None else self.tiers.search(rq)
        with self._lock:
            self._retrieve_ms.append((time.perf_counter() - t0) * 1e3)
        return hits

    def store(self, input: str, response: str, mode: str, *, importance: float | None = None,
              metadata: Mapping[str, Any] | None = None, key: str | None = None,
              background: bool = False) -> list[MemoryItem]:
        """Store the input/response pair of a tick (plus what the extra extractors find).

        The pair is one memory whose text is ``input`` (capped at ``max_input_chars``) and whose
        ``metadata["response"]`` is ``response`` (capped at ``max_response_chars``); a cut side
        is listed in ``metadata["truncated"]``. Its vector is the one :meth:`retrieve` made of
        ``input`` when it was the last text retrieved (in the same mode) -- the embedding of its
        dense form, known speakers' names to first person (LoCoMo dev, every turn stored so:
        R@10 0.8355 vs 0.8358 with the raw text's, R@5 0.745 vs 0.748) -- else the embedding of
        ``input``, so a tick that retrieves then stores encodes once. The same pair stored twice
        replaces itself (stable key, ``created_at`` kept) unless ``key`` is given.

        Writes are ordered within each path (foreground, or the background queue); a
        foreground store of a key still queued in the background may land first, so
        :meth:`flush` before mixing the two on one key. A background write becomes visible to
        :meth:`retrieve` once the worker has written it.

        Parameters
        ----------
        input, response : str
            An empty or whitespace-only ``input`` raises :class:`InvalidTextError`, as the
            stores do. An input without content for the embedder (an all-zero vector, e.g.
            only punctuation for the hashing embedder) could never be recalled and is not
            written.
        mode : str
        importance : float, optional
            In [0, 1]; 0.5 when None. Decides promotion to the long tier.
        metadata : dict, optional
            JSON-serialisable, merged into the memory's metadata.
        key : str, optional
            Explicit key of the pair memory.
        background : bool, default False
            Queue the write to the worker thread and return at once; it is durable once
            :meth:`flush` (or :meth:`close`) returns. Without it the store is durable on
            return at the long store's durability (``path`` given; see the module's Design).

        Returns
        -------
        list of MemoryItem
            What was written (or queued), the pair first.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ValueError, TypeError
            On a bad mode, a blank or invalid text, importance, key or metadata (before
            anything is written).
        BackgroundWriteError
            If an earlier background store failed.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> with SemanticMemory(embedder=HashingEmbedder(), warmup=False) as mem:
        ...     items = mem.store("Battery at 18 percent.", "Going to the dock.", mode="patrol")
        >>> [(m.text, m.metadata["response"]) for m in items]
        [('Battery at 18 percent.', 'Going to the dock.')]
        """
        self._check()
        t0 = time.perf_counter()
        ns = self.namespace_of(mode)
        _validate.memory_text(input)
        turn = Turn(user=input, assistant=response, timestamp=self.clock(), namespace=ns,
                    metadata=_validate.metadata(metadata))
        items = self._pair.extract(turn)
        if not items:
            return []
        pair = items[0]
        if importance is not None or key is not None:
            pair = MemoryItem(key=pair.key if key is None else _validate.key(key), text=pair.text,
                              importance=pair.importance if importance is None
                              else _validate.importance(importance),
                              metadata=pair.metadata)
        extra = [it for ex in self._extractors for it in ex.extract(turn)]
        items = [pair] + extra
        cached = self._cache
        vectors: list[np.ndarray | None] = [cached[1] if cached is not None
                                            and (cached[0] == input or cached[2] == (ns, input))
                                            and np.any(cached[1]) else None]
        vectors += [None] * len(extra)
        write = _Write(ns, items, vectors)
        if background:
            self._start_worker()
            self._queue.put(write)
        else:
            self._write([write])
        with self._lock:
            self._store_ms.append((time.perf_counter() - t0) * 1e3)
        return items

    # ------------------------------------------------------------------ journal
    def _journal_ns(self, ns: Namespace) -> Namespace:
        return (SHORT_JOURNAL,) + ns

    def _replay_journal(self) -> None:
        """Refill the short tier from its journal (what the last process stored and had not
        promoted), lifecycle fields and vectors as stored."""
        from dataclasses import replace

        for jns in self.long.namespaces((SHORT_JOURNAL,) + self.prefix):
            keys = self.long.keys(jns)
            mems = [self.long.get(jns, k) for k in keys]
            vecs = np.stack([self.long.vector(jns, k) for k in keys]) if keys else None
            if mems:
                self.short.put_stored([replace(m, namespace=jns[1:], tier=MemoryTier.SHORT)
                                       for m in mems], vecs)

    def _trim_journal(self) -> None:
        """Drop from the journal what the short tier no longer holds (promoted or evicted)."""
        for jns in self.long.namespaces((SHORT_JOURNAL,) + self.prefix):
            held = set(self.short.keys(jns[1:]))
            gone = [k for k in self.long.keys(jns) if k not in held]
            if gone:
                self.long.delete_many(jns, gone)      # one commit (log append) per namespace

    # ------------------------------------------------------------------ writing
    def _write(self, writes: list[_Write]) -> None:
        """Embed what has no vector (one encoder call) and write each namespace with put_many."""
        todo = [(w, i) for w in writes for i, v in enumerate(w.vectors) if v is None]
        if todo:
            encoded = self.embedder.encode([w.items[i].text for w, i in todo])
            for (w, i), vec in zip(todo, encoded):
                w.vectors[i] = vec
        by_ns: dict[Namespace, tuple[list[MemoryItem], list[np.ndarray]]] = {}
        for w in writes:
            items, vecs = by_ns.setdefault(w.namespace, ([], []))
            for item, vec in zip(w.items, w.vectors):
                if not np.any(vec):
                    # Content-free text (e.g. only punctuation for the hashing embedder) has
                    # no direction: it could never be recalled, so it is not stored.
                    logger.debug("skipping %r in %r: its embedding is all zeros", item.key, w.namespace)
                    continue
                items.append(item)
                vecs.append(vec)
        for ns, (items, vecs) in by_ns.items():
            if items:
                batch = np.stack(vecs).astype(np.float32, copy=False)
                with self._journal_lock:          # never trimmed between the two writes
                    if self._journaled:           # durable first (see Design: Durability)
                        self.long.put_many(self._journal_ns(ns), items, vectors=batch)
                    self.tiers.put_many(ns, items, vectors=batch)
        with self._lock:
            self._stored += len(writes)
            self._since_consolidate += len(writes)
            due = self.consolidate_every and self._since_consolidate >= self.consolidate_every
            if due:
                self._since_consolidate = 0
        if due:
            self._consolidate_now()

    def _consolidate_now(self) -> Any:
        with self._journal_lock:
            result = self.tiers.consolidate(now=self.clock())
            if self._journaled:
                self._trim_journal()
        with self._lock:
            self._consolidations += 1
        return result

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="memcore-writer", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < self.batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            writes = [w for w in batch if w is not _STOP]
            try:
                if writes:
                    self._write(writes)
            except BaseException as err:  # re-raised by the caller's next call
                logger.debug("background write failed", exc_info=True)
                if self._error is None:
                    self._error = err
            finally:
                for _ in batch:
                    self._queue.task_done()
            if any(w is _STOP for w in batch):
                return

    def flush(self) -> None:
        """Wait until every queued background store is written.

        Raises
        ------
        BackgroundWriteError
            If a queued write failed.
        MemoryClosedError
            If the memory is closed.
        """
        if self._closed:
            raise MemoryClosedError("this SemanticMemory is closed")
        self._queue.join()
        self._check()

    def close(self) -> None:
        """Drain the background queue, consolidate the short tier, and close the long tier.

        Idempotent. Memories that do not clear the promotion policy stay in the short tier's
        journal (``path`` given) and are back in the short tier when the path is opened
        again; without a path they are forgotten.

        Raises
        ------
        BackgroundWriteError
            If a queued write failed (the store is closed anyway).
        """
        if self._closed:
            return
        try:
            if self._worker is not None:
                self._queue.put(_STOP)
                self._worker.join()
                self._worker = None
            pending, self._error = self._error, None
            if not getattr(self.long, "read_only", False):
                self._consolidate_now()
        finally:
            self._closed = True
            self.long.close()
        if pending is not None:
            raise BackgroundWriteError(
                f"a background store failed: {type(pending).__name__}: {pending}") from pending

    # ------------------------------------------------------------------ housekeeping
    def format_prompt(self, hits: Sequence[MemoryHit], *, now: float | None = None) -> str:
        """The "RELEVANT MEMORIES" section for ``hits`` ("" for none); ages from the clock.

        See :func:`format_prompt`.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> SemanticMemory(embedder=HashingEmbedder(), warmup=False).format_prompt([])
        ''
        """
        return format_prompt(hits, self.clock() if now is None else float(now))

    def consolidate(self) -> Any:
        """Flush pending writes, then promote qualifying short-tier memories to the long tier.

        Returns
        -------
        What :meth:`TwoTierMemory.consolidate` returns (the promotion count).

        Raises
        ------
        BackgroundWriteError
        """
        self.flush()
        with self._lock:
            self._since_consolidate = 0
        return self._consolidate_now()

    def clear_mode(self, mode: str) -> int:
        """Forget every memory of ``mode`` in both tiers (after flushing); returns how many.

        Raises
        ------
        InvalidNamespaceError
        """
        ns = self.namespace_of(mode)
        self.flush()
        if self._journaled:
            self.long.clear(self._journal_ns(ns))
        return int(self.tiers.clear(ns))

    def modes(self) -> list[str]:
        """The modes that hold memories (in either tier), sorted.

        Examples
        --------
        >>> from memcore import HashingEmbedder
        >>> mem = SemanticMemory(embedder=HashingEmbedder(), warmup=False)
        >>> _ = mem.store("Battery low.", "Docking.", mode="patrol"); mem.modes()
        ['patrol']
        """
        self._check()
        n = len(self.prefix)
        return sorted({ns[n] for ns in self.tiers.namespaces(self.prefix) if len(ns) == n + 1})

    def stats(self) -> dict[str, Any]:
        """Counts per tier and mode, and latency so far.

        Returns
        -------
        dict with ``embedder``, ``modes`` ({mode: {"short": n, "long": n}}), ``tiers``
        ({"short": n, "long": n}), ``stored`` (store calls written), ``pending`` (queued
        background writes), ``consolidations``, and ``retrieve``/``store`` each
        ``{"count", "p50_ms", "p95_ms"}`` over the last 10,000 calls (NaN before the first).
        A background store's latency is the time to queue it.
        """
        self._check()
        modes = {}
        for mode in self.modes():
            ns = self.prefix + (mode,)
            modes[mode] = {MemoryTier.SHORT.value: self.short.count(ns),
                           MemoryTier.LONG.value: self.long.count(ns)}
        with self._lock:
            return {
                "embedder": getattr(self.embedder, "name", type(self.embedder).__name__),
                "path": None if self.path is None else str(self.path),
                "modes": modes,
                "tiers": {t.value: sum(m[t.value] for m in modes.values()) for t in MemoryTier},
                "stored": self._stored,
                "pending": self._queue.unfinished_tasks,
                "consolidations": self._consolidations,
                "retrieve": _percentiles(self._retrieve_ms),
                "store": _percentiles(self._store_ms),
            }


def warm_ticks(embedder: Any, *, hybrid: Any = None, weights: DecayWeights | None = None,
               threads: int = 1, on_disk: bool = True, clock: Clock | None = None) -> None:
    """Run ticks on a private scratch :class:`SemanticMemory` (what :meth:`SemanticMemory.warmup`
    and ``memcore warmup PATH`` do): every numba kernel signature a tick of a memory with these
    settings calls is compiled (and saved in numba's cache) or loaded from it now.

    64 memories are written to the long tier, then 24 turns of three speakers are stored
    (common and rare words, numbers, dates), each preceded by retrieves of the turn, of terms
    rare in either tier (the sparse BM25 kernels), of a name with a filter and a peek; a
    retrieve of a common and of unknown terms follows; consolidation runs every 12 stores.
    With ``on_disk`` the scratch memory lives in a temporary directory (under ``/dev/shm``
    where writable), so the journal's writes and trim and the disk store's reads run too.

    Parameters
    ----------
    embedder : Embedder
    hybrid : HybridWeights, optional
        Recall of the memory to warm (``default_for(embedder)`` when None).
    weights : DecayWeights, optional
    threads : int, default 1
        Scan threads (>= 2 warms the parallel kernels).
    on_disk : bool, default True
        Warm the persistent long tier's and the journal's paths too.
    clock : Clock, optional

    Examples
    --------
    >>> from memcore import HashingEmbedder
    >>> warm_ticks(HashingEmbedder(), on_disk=False)
    """
    import tempfile

    ram = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with contextlib.ExitStack() as stack:
        where = None
        if on_disk:
            where = stack.enter_context(tempfile.TemporaryDirectory(prefix="memcore-warmup-",
                                                                    dir=ram))
        scratch = SemanticMemory(where, embedder=embedder, threshold=0.0, weights=weights,
                                 hybrid=hybrid, short_capacity=32, consolidate_every=12,
                                 clock=clock, warmup=False, preload=False, threads=threads)
        stack.callback(scratch.close)
        n_long = 64        # rare terms (df 1) take the sparse BM25 kernels past 8 rows
        vecs = np.ascontiguousarray(embedder.encode(list(_WARMUP_TURNS)), dtype=np.float32)
        scratch.long.put_many(
            scratch.namespace_of("warmup"),
            [MemoryItem(key=f"w{j}", text=f"{_WARMUP_TURNS[j % len(_WARMUP_TURNS)]}, ticket {2000 + j}",
                        metadata={"speaker": _WARMUP_SPEAKERS[j % 3], "episode": f"p{j // 8}"})
             for j in range(n_long)],
            vectors=np.resize(vecs, (n_long, vecs.shape[1])))
        if scratch.hybrid.is_similarity:     # a store's saved hybrid index is kept by writes
            from memcore.recall.weights import HybridWeights
            scratch.long.entities(scratch.namespace_of("warmup"), hybrid=HybridWeights.no_model())
        for i, text in enumerate(_WARMUP_TURNS):
            speaker = _WARMUP_SPEAKERS[i % len(_WARMUP_SPEAKERS)]
            scratch.retrieve(f"{speaker}, {text}", "warmup")
            scratch.retrieve(f"{1000 + i - 1}", "warmup")                 # rare in the short tier
            scratch.retrieve(f"ticket {2000 + i}", "warmup", touch=False)  # rare in the long tier
            scratch.retrieve(f"what did {speaker} say about xylophones?", "warmup",
                             filter={"speaker": speaker}, touch=False)
            scratch.store(f"{speaker}: {text}, ticket {1000 + i}", f"noted {i}", "warmup",
                          metadata={"speaker": speaker, "episode": f"e{i // 6}"})
        scratch.retrieve("the", "warmup")
        scratch.retrieve("zzyzx quark", "warmup", touch=False)
        scratch.consolidate()
        if on_disk:     # the log's frame walk (a checkpoint's tail scan) may not run above
            from memcore.storage.columns import row_crcs
            from memcore.storage.log import decode_segments, frame_scan
            frame_scan(b"")
            decode_segments(np.frombuffer(b"a", np.uint8), np.zeros(1, np.int64),  # a read-only
                            np.ones(1, np.int64), True)                 # log's texts (the pack)
            row_crcs(np.zeros((64, 8), np.uint8), np.zeros((64, 8), np.uint8))  # row checks
