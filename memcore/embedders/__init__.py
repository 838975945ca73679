"""Text embedders and scorers.

* :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 int8 on onnxruntime, 384-d, the default.
* :class:`HashingEmbedder`: the hashing trick in numba; no model, always available.
* :class:`StaticEmbedder`: static word-piece vectors distilled from MiniLM (package data),
  256-d, a table lookup: ~0.05 ms per text on any CPU.
* :class:`LexicalScorer`: term-frequency cosine of two texts, always available.
* :class:`CallableEmbedder`, :class:`SentenceTransformerEmbedder`: your own model, its output
  checked and normalised (:mod:`memcore.embedders.wrappers`).
* :func:`default`: MiniLM when its model loads, else hashing (with a logged warning).
"""

from __future__ import annotations

import functools
import logging

from memcore.embedders.base import Embedder
from memcore.embedders.hashing import HashingEmbedder
from memcore.embedders.lexical import LexicalScorer, SemanticScorer
from memcore.embedders.onnx import MiniLMEmbedder
from memcore.embedders.static import StaticEmbedder
from memcore.embedders.wrappers import CallableEmbedder, SentenceTransformerEmbedder
from memcore.errors import MemcoreError

__all__ = [
    "Embedder",
    "SemanticScorer",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "StaticEmbedder",
    "LexicalScorer",
    "CallableEmbedder",
    "SentenceTransformerEmbedder",
    "default",
]

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def default() -> Embedder:
    """The process-wide default embedder, chosen once and then reused.

    :class:`MiniLMEmbedder` when its model loads (found and checksum-verified); otherwise
    ``HashingEmbedder(dim=384, mode="unicode")`` with a warning on the ``memcore.embedders``
    logger saying why. The choice is cached for the life of the process
    (``default.cache_clear()`` forgets it), so every store opened with the default records the
    same ``name`` and ``dim`` and vectors of two spaces never mix.

    Returns
    -------
    Embedder
        A loaded MiniLMEmbedder, or a HashingEmbedder.

    Examples
    --------
    >>> emb = default()
    >>> emb.name, emb.dim
    ('minilm-l6-v2-int8-mixed', 384)
    """
    try:
        return MiniLMEmbedder().load()
    except (MemcoreError, ImportError, OSError, RuntimeError) as err:
        logger.warning(
            "MiniLM embedder unavailable (%s: %s); falling back to HashingEmbedder "
            "(lexical hashing vectors, weaker semantic recall)", type(err).__name__, err)
        return HashingEmbedder(dim=384, mode="unicode")
