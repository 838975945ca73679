"""Retrieval peers for ``memcore bench locomo``: what a user could pick instead of memcore.

Each peer ranks one LoCoMo conversation's dialog turns (stored as ``"speaker: text"``) for
each question, offline, with all-MiniLM-L6-v2 as its embedder:

- ``mem0`` -- mem0 OSS (:pypi:`mem0ai`) ``Memory`` with ``infer=False`` (no LLM: every turn
  is stored as written), a local Qdrant collection (``path=``: the store mem0 documents for
  its hybrid search) and its ``langchain`` embedder provider over memcore's int8 MiniLM
  (through the embedding cache, as the LangGraph row; mem0's ``huggingface`` provider over
  the fp32 weights encodes one text per call on PyTorch: about 20 minutes per conversation
  on the shared 2-core machine). Its default search fuses the semantic score with BM25
  (fastembed's ``Qdrant/bm25``) and an entity boost (spaCy); where those parts cannot load
  offline, mem0 itself falls back to semantic-only and :func:`mem0_capabilities` records
  why (the row's note).
- ``langgraph`` -- LangGraph's ``InMemoryStore`` with an index config (``dims=384``,
  ``fields=["text"]``) whose ``embed`` is memcore's int8 MiniLM (through the embedding cache).
- ``om1-hybrid`` -- OM1's current memory retrieval re-implemented from its description (a
  reference, not OM1's code): HNSW dense candidates (FAISS ``IndexHNSWFlat``, inner product
  on unit vectors, M = 32) plus BM25 (bm25s, Lucene), each min-max normalised over the
  candidates, fused ``0.7 * dense + 0.3 * bm25``, ``+0.1`` when the memory is the same
  user's (LoCoMo has no current user: a turn whose speaker the question names), kept when its
  cosine is >= 0.3. OM1 returns the top 3; the row ranks further so R@5/R@10 can be read
  (its R@3 is what OM1 would hand its LLM).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile

import numpy as np

__all__ = ["mem0_rankings", "langgraph_rankings", "om1_hybrid_rankings", "mem0_capabilities",
           "OM1_DENSE", "OM1_BM25", "OM1_SAME_USER", "OM1_THRESHOLD"]

OM1_DENSE, OM1_BM25, OM1_SAME_USER, OM1_THRESHOLD = 0.7, 0.3, 0.1, 0.3
#: HNSW candidates per query in the OM1 reference (its dense search over-fetches, then fuses).
OM1_CANDIDATES = 64


def _quiet_env() -> None:
    """No telemetry, no hub downloads, mem0's own folder (``MEM0_DIR``) under the temp dir
    rather than ``~/.mem0``; set before mem0 is imported (it reads them at import)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", os.path.join(tempfile.gettempdir(), "memcore-bench-mem0"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def mem0_capabilities() -> list:
    """Why parts of mem0's default search cannot run here (empty when all of it runs).

    Tries what mem0 loads for its BM25 (fastembed ``Qdrant/bm25``) and entity boost (spaCy
    ``en_core_web_sm``) and returns one note per failure, with the error.
    """
    _quiet_env()
    notes = []
    try:
        from fastembed import SparseTextEmbedding

        with contextlib.redirect_stderr(io.StringIO()):
            SparseTextEmbedding(model_name="Qdrant/bm25")
    except Exception as err:  # noqa: BLE001 -- the row reports whatever stops it
        notes.append(f"mem0 BM25 off: fastembed Qdrant/bm25 unavailable offline "
                     f"({type(err).__name__}: {str(err).splitlines()[0][:160]})")
    try:
        import spacy

        spacy.load("en_core_web_sm")
    except Exception as err:  # noqa: BLE001
        notes.append(f"mem0 entity boost off: spaCy en_core_web_sm unavailable "
                     f"({type(err).__name__}: {str(err).splitlines()[0][:160]})")
    return notes


def _langchain_embeddings(embed):
    """A LangChain ``Embeddings`` over ``embed(list_of_str) -> list of vectors``."""
    from langchain.embeddings.base import Embeddings

    class CachedMiniLM(Embeddings):
        def embed_documents(self, texts):
            return embed(list(texts))

        def embed_query(self, text):
            return embed([text])[0]

    return CachedMiniLM()


def mem0_rankings(conv, k: int, embed) -> list:
    """mem0 OSS rankings (dialog ids, best first) for one conversation's questions with
    evidence: one ``Memory`` per conversation, ``add(..., infer=False)`` per turn,
    ``search(question, filters={"user_id": conv}, top_k=k, threshold=0)``; ``embed`` as
    LangGraph's (a list of texts to a list of 384-d vectors)."""
    _quiet_env()
    from mem0 import Memory

    for name in ("mem0", "mem0.memory.main", "mem0.vector_stores.qdrant", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    tmp = tempfile.mkdtemp(prefix="memcore-bench-mem0-")
    try:
        config = {
            "vector_store": {"provider": "qdrant",
                             "config": {"collection_name": "locomo", "path": f"{tmp}/qdrant",
                                        "embedding_model_dims": 384, "on_disk": False}},
            "embedder": {"provider": "langchain",
                         "config": {"model": _langchain_embeddings(embed),
                                    "embedding_dims": 384}},
            # infer=False never calls the LLM; mem0 still builds its client at construction.
            "llm": {"provider": "openai", "config": {"api_key": "unused-infer-false"}},
            "history_db_path": f"{tmp}/history.db",
        }
        mem = Memory.from_config(config)
        user = conv.sample_id
        for t in conv.turns:
            mem.add([{"role": "user", "content": t.memory_text}], user_id=user, infer=False,
                    metadata={"dia_id": t.dia_id})
        out = []
        for q in conv.questions:
            if not q.evidence:
                continue
            res = mem.search(q.question, filters={"user_id": user}, top_k=k, threshold=0.0)
            out.append([r["metadata"]["dia_id"] for r in res["results"]][:k])
        return out
    finally:
        with contextlib.suppress(Exception):
            mem.vector_store.client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def langgraph_rankings(conv, k: int, embed) -> list:
    """LangGraph ``InMemoryStore(index={"dims": 384, "embed": embed, "fields": ["text"]})``:
    one ``put`` per turn, ``search(ns, query=question, limit=k)`` per question."""
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore(index={"dims": 384, "embed": embed, "fields": ["text"]})
    ns = ("locomo", conv.sample_id)
    for t in conv.turns:
        store.put(ns, t.dia_id, {"text": t.memory_text})
    return [[it.key for it in store.search(ns, query=q.question, limit=k)]
            for q in conv.questions if q.evidence]


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return np.zeros_like(x) if hi <= lo else (x - lo) / (hi - lo)


def om1_hybrid_rankings(conv, k: int, doc_vecs: np.ndarray, query_vecs: np.ndarray,
                        bm25) -> list:
    """The OM1 reference (module notes) for one conversation; ``bm25`` is a
    :class:`bench.quality.BM25` over the turns' texts, ``*_vecs`` unit MiniLM rows."""
    import faiss

    from memcore.recall.prep import DefaultQueryPreparer

    index = faiss.IndexHNSWFlat(doc_vecs.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = 128
    index.add(np.ascontiguousarray(doc_vecs, np.float32))
    ids = [t.dia_id for t in conv.turns]
    speakers = np.array([t.speaker.casefold() for t in conv.turns])
    names = sorted({t.speaker for t in conv.turns})
    prep = DefaultQueryPreparer()
    qs = [q for q in conv.questions if q.evidence]
    n = len(ids)
    bm_all = bm25.scores([q.question for q in qs])  # (n_queries, n)
    out = []
    for qi, q in enumerate(qs):
        sims, cand = index.search(query_vecs[qi:qi + 1], min(OM1_CANDIDATES, n))
        cand = cand[0][cand[0] >= 0]
        bm = bm_all[qi]
        lex = np.argsort(-bm, kind="stable")[:OM1_CANDIDATES]
        cand = np.unique(np.concatenate([cand, lex[bm[lex] > 0]]))
        cos = doc_vecs[cand] @ query_vecs[qi]
        fused = OM1_DENSE * _minmax(cos) + OM1_BM25 * _minmax(bm[cand])
        named = prep(q.question, names).entities
        fused = fused + OM1_SAME_USER * np.isin(speakers[cand], list(named))
        keep = cos >= OM1_THRESHOLD
        cand, fused = cand[keep], fused[keep]
        order = np.argsort(-fused, kind="stable")[:k]
        out.append([ids[i] for i in cand[order]])
    return out
