"""The lexical terms :class:`~memcore.stores.postgres.PostgresMemory` keeps in SQL for its
stateless hybrid search (``memcore_postings``): memcore's own tokens of each memory's BM25
document (``"speaker: text"`` and its day's date words, stemmed: what
:class:`~memcore.recall.index.HybridIndex` indexes with the default structure ``stem=True``,
``dates=True``; :func:`memcore.recall.words.bm25_documents`), hashed as
:func:`memcore._text.token_hashes` does, the 64-bit hash stored as a signed int8. Each
memory's whole token sequence is also kept in its row (``memcore_memories.tokens``,
:func:`to_bytes`), so a searcher indexes its candidates' documents without tokenising or
stemming them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from memcore import _text
from memcore.recall.namespace import episode_speaker
from memcore.recall.words import bm25_documents, stem_many, stemmer

__all__ = ["document_tokens", "document_terms", "postings", "query_terms", "to_bytes",
           "from_bytes", "STRUCTURE"]

#: The :meth:`~memcore.recall.weights.HybridWeights.structure` (stem, dates) of the postings.
STRUCTURE = (True, True)


def _hashes(texts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h, off, cnt = _text.token_hashes(texts)
    return h.view(np.int64), off, cnt


def document_tokens(texts: Sequence[str], metadata: Sequence[dict | None],
                    created_at: Sequence[float]) -> list[np.ndarray]:
    """Each memory's BM25 document as its token hashes in document order (what the hybrid
    index of the default structure indexes for it): ``created_at`` (Unix s per memory) gives
    the date words.

    Returns
    -------
    list of ndarray of shape (dl,), int64
        The 64-bit token hashes viewed as signed (as stored).

    Examples
    --------
    >>> [t.shape[0] for t in document_tokens(["a dog, a cat"], [{"speaker": "Ann"}], [0.0])]
    [8]
    """
    docs = bm25_documents(texts, [episode_speaker(m)[1] for m in metadata], created_at,
                          stemmer())
    h, off, cnt = _hashes(docs)
    return [h[off[i]:off[i] + cnt[i]] for i in range(len(docs))]


def document_terms(texts: Sequence[str], metadata: Sequence[dict | None],
                   created_at: Sequence[float]
                   ) -> tuple[list[int], list[int], list[int], list[int]]:
    """The postings of a batch of memories (:func:`postings` of their
    :func:`document_tokens`).

    Examples
    --------
    >>> doc, term, tf, dl = document_terms(["a dog, a cat"], [{"speaker": "Ann"}], [0.0])
    >>> sorted(tf), dl[0]
    ([1, 1, 1, 1, 1, 1, 2], 8)
    """
    return postings(document_tokens(texts, metadata, created_at))


def postings(tokens: Sequence[np.ndarray]) -> tuple[list[int], list[int], list[int], list[int]]:
    """The postings of documents given as token hashes: parallel lists ``(doc, term, tf,
    dl)``, ``doc`` the index of the document, ``term`` the signed 64-bit token hash, ``tf``
    its count in the document and ``dl`` the document's length in tokens (an empty document
    has none).

    Examples
    --------
    >>> postings([np.array([5, 7, 5])])
    ([0, 0], [5, 7], [2, 1], [3, 3])
    """
    lens = np.fromiter((t.shape[0] for t in tokens), np.int64, len(tokens))
    if not lens.sum():
        return [], [], [], []
    doc = np.repeat(np.arange(len(tokens), dtype=np.int64), lens)
    term = np.concatenate(tokens).view(np.int64)
    order = np.lexsort((term, doc))                 # by document, then term
    doc, term = doc[order], term[order]
    first = np.flatnonzero(np.r_[True, (doc[1:] != doc[:-1]) | (term[1:] != term[:-1])])
    tf = np.diff(np.r_[first, doc.shape[0]])
    d = doc[first]
    return d.tolist(), term[first].tolist(), tf.tolist(), lens[d].tolist()


def to_bytes(tokens: np.ndarray) -> bytes:
    """A document's token hashes as stored in ``memcore_memories.tokens`` (little-endian
    int64)."""
    return np.asarray(tokens, "<i8").tobytes()


def from_bytes(data: bytes) -> np.ndarray:
    """Inverse of :func:`to_bytes`: ndarray (dl,), uint64 (the hashes as tokenised)."""
    return np.frombuffer(data, "<u8")


def query_terms(text: str) -> list[int]:
    """The signed 64-bit term hashes of a query's lexical text, in order, repeats kept (each
    occurrence is a BM25 term of the query, as in the hybrid index).

    Examples
    --------
    >>> t = query_terms("dogs and a dog")
    >>> len(t), len(set(t))
    (4, 3)
    """
    h, off, cnt = _hashes(stem_many([text], stemmer()))
    return h[off[0]:off[0] + cnt[0]].tolist()
