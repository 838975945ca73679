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
           "OM1Hybrid", "mem0_memory", "mem0_close", "OM1_DENSE", "OM1_BM25", "OM1_SAME_USER",
           "OM1_THRESHOLD"]

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


def mem0_memory(folder: str, embed, collection: str = "locomo"):
    """A mem0 OSS ``Memory`` as the peer rows configure it: a local Qdrant collection under
    ``folder``, the ``langchain`` embedder provider over ``embed``
    (a list of texts to a list of 384-d vectors), the history SQLite file under ``folder``.
    mem0's loggers are quietened; telemetry and hub downloads are off (:func:`_quiet_env`)."""
    _quiet_env()
    from mem0 import Memory

    for name in ("mem0", "mem0.memory.main", "mem0.vector_stores.qdrant", "httpx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    config = {
        "vector_store": {"provider": "qdrant",
                         "config": {"collection_name": collection, "path": f"{folder}/qdrant",
                                    "embedding_model_dims": 384, "on_disk": False}},
        "embedder": {"provider": "langchain",
                     "config": {"model": _langchain_embeddings(embed), "embedding_dims": 384}},
        # infer=False never calls the LLM; mem0 still builds its client at construction.
        "llm": {"provider": "openai", "config": {"api_key": "unused-infer-false"}},
        "history_db_path": f"{folder}/history.db",
    }
    return Memory.from_config(config)


def mem0_close(mem) -> None:
    """Close a :func:`mem0_memory`'s Qdrant client (its folder can then be removed)."""
    with contextlib.suppress(Exception):
        mem.vector_store.client.close()


def mem0_rankings(conv, k: int, embed) -> list:
    """mem0 OSS rankings (dialog ids, best first) for one conversation's questions with
    evidence: one :func:`mem0_memory` per conversation, ``add(..., infer=False)`` per turn,
    ``search(question, filters={"user_id": conv}, top_k=k, threshold=0)``; ``embed`` as
    LangGraph's (a list of texts to a list of 384-d vectors)."""
    tmp = tempfile.mkdtemp(prefix="memcore-bench-mem0-")
    mem = None
    try:
        mem = mem0_memory(tmp, embed)
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
        if mem is not None:
            mem0_close(mem)
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


def _top_stable(x: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(-x, kind="stable")[:k]`` (ties to the lower index) in O(n) for k << n."""
    n = x.shape[0]
    if n <= k:
        return np.argsort(-x, kind="stable")
    kth = np.partition(x, n - k)[n - k]  # the k-th largest value
    above = np.flatnonzero(x > kth)
    sel = np.concatenate([above, np.flatnonzero(x == kth)[:k - above.shape[0]]])
    return sel[np.argsort(-x[sel], kind="stable")]


class OM1Hybrid:
    """The OM1 reference retrieval (module notes) over a growing set of memories.

    Dense side: a FAISS ``IndexHNSWFlat`` (M = 32, inner product on unit vectors, efSearch
    128), which also keeps the vectors (the exact cosine of a BM25-only candidate is read back
    from it). Lexical side: :class:`bench.quality.BM25` (bm25s, Lucene). bm25s has no
    incremental add, so memories added after the last full build live in a second, small BM25
    index rebuilt on every :meth:`add`; past :attr:`TAIL_MAX` of them the full index is
    rebuilt. The two indices' scores are concatenated (each with its own IDF, an approximation
    that only touches memories added since the last build); the fusion normalises BM25 over
    the candidates anyway.

    Parameters
    ----------
    dim : int
        Vector width (384 for MiniLM).

    Examples
    --------
    >>> idx = OM1Hybrid(2)
    >>> idx.add(["Ann: the dock is red"], np.array([[1.0, 0.0]], np.float32), ["Ann"])
    >>> idx.search("Where is the dock?", np.array([1.0, 0.0], np.float32), 3)[0].tolist()
    [0]
    """

    #: Memories kept in the small BM25 index before the full one is rebuilt.
    TAIL_MAX = 1024

    def __init__(self, dim: int):
        import faiss

        from memcore.recall.prep import DefaultQueryPreparer

        self.index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efSearch = 128
        self.texts: list = []
        self.speakers: list = []  # casefolded; "" for none
        self.names: set = set()   # the speakers as written (what the query preparer matches)
        self._prep = DefaultQueryPreparer()
        self._bm25_main = self._bm25_tail = None
        self._main_n = 0

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, texts: list, vectors: np.ndarray, speakers: list, bm25=None) -> None:
        """Append memories: ``texts`` (n,), unit ``vectors`` (n, dim) float32, ``speakers``
        (n,) the user each memory is about (``""`` for none). ``bm25``: a
        :class:`bench.quality.BM25` the caller built over every text stored once these are
        added (the first add only); default: built here.

        Raises
        ------
        ValueError
            If bm25 is given for other texts than all of them, or the lengths differ.
        """
        from bench.quality import BM25

        if not len(texts) == vectors.shape[0] == len(speakers):
            raise ValueError(f"{len(texts)} texts, {vectors.shape[0]} vectors and "
                             f"{len(speakers)} speakers: expected one of each per memory")
        if bm25 is not None and (self.texts or bm25.n != len(texts)):
            raise ValueError("bm25 must index exactly the texts of the first add")
        self.index.add(np.ascontiguousarray(vectors, np.float32))
        self.texts += list(texts)
        self.speakers += [s.casefold() for s in speakers]
        self.names.update(s for s in speakers if s)
        if self._main_n == 0 or len(self.texts) - self._main_n > self.TAIL_MAX:
            self._bm25_main, self._bm25_tail = bm25 or BM25(self.texts), None
            self._main_n = len(self.texts)
        else:
            self._bm25_tail = BM25(self.texts[self._main_n:])

    def _bm25(self, query: str) -> np.ndarray:
        parts = [self._bm25_main.scores([query])[0]]
        if self._bm25_tail is not None:
            parts.append(self._bm25_tail.scores([query])[0])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def search(self, query: str, query_vector: np.ndarray, top_k: int,
               bm25: np.ndarray | None = None) -> tuple:
        """Rows of the best memories for ``query``, best first.

        Parameters
        ----------
        query : str
            The query text (BM25 and the same-user names).
        query_vector : ndarray of shape (dim,), float32
            Its unit embedding.
        top_k : int
            Results at most (fewer when fewer pass the cosine threshold).
        bm25 : ndarray of shape (len(self),), float32, optional
            The query's BM25 scores when the caller computed them already (a batch).

        Returns
        -------
        ids : ndarray of shape (<= top_k,), int64
            Rows in insertion order.
        similarity : ndarray of shape (<= top_k,), float32
            Their cosine to the query (each >= ``OM1_THRESHOLD``).
        """
        n = len(self.texts)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = np.ascontiguousarray(query_vector, np.float32).reshape(1, -1)
        _, dense = self.index.search(q, min(OM1_CANDIDATES, n))
        dense = dense[0][dense[0] >= 0]
        bm = self._bm25(query) if bm25 is None else bm25
        lex = _top_stable(bm, OM1_CANDIDATES)
        cand = np.unique(np.concatenate([dense, lex[bm[lex] > 0]]))
        cos = self.index.reconstruct_batch(cand) @ q[0]
        fused = OM1_DENSE * _minmax(cos) + OM1_BM25 * _minmax(bm[cand])
        named = self._prep(query, sorted(self.names)).entities
        fused = fused + OM1_SAME_USER * np.array([self.speakers[i] in named for i in cand])
        keep = cos >= OM1_THRESHOLD
        cand, fused, cos = cand[keep], fused[keep], cos[keep]
        order = np.argsort(-fused, kind="stable")[:top_k]
        return cand[order].astype(np.int64), cos[order]


def om1_hybrid_rankings(conv, k: int, doc_vecs: np.ndarray, query_vecs: np.ndarray,
                        bm25) -> list:
    """The OM1 reference (:class:`OM1Hybrid`) for one conversation: its turns stored with
    their speakers, each question with evidence ranked; ``bm25`` is a
    :class:`bench.quality.BM25` over the turns' texts, ``*_vecs`` unit MiniLM rows (turns,
    questions with evidence)."""
    idx = OM1Hybrid(doc_vecs.shape[1])
    idx.add([t.memory_text for t in conv.turns], doc_vecs, [t.speaker for t in conv.turns],
            bm25=bm25)
    ids = [t.dia_id for t in conv.turns]
    qs = [q.question for q in conv.questions if q.evidence]
    bm_all = idx._bm25_main.scores(qs)  # (n_queries, n): one batch
    return [[ids[i] for i in idx.search(q, query_vecs[qi], k, bm25=bm_all[qi])[0]]
            for qi, q in enumerate(qs)]
