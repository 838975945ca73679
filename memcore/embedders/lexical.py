"""The lexical scorer: term-frequency cosine, always available (no model)."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from memcore import _text, _validate
from memcore.kernels import hashing as _k

__all__ = ["SemanticScorer", "LexicalScorer"]


@runtime_checkable
class SemanticScorer(Protocol):
    """A pluggable similarity between two texts (higher is more similar).

    Attributes
    ----------
    name : str
        Stable id including version (e.g. ``"lexical-tf-cosine-v1"``).
    """

    name: str

    def score(self, a: str, b: str) -> float:
        """Similarity of two texts."""
        ...

    def score_many(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Similarity of query to each text: ndarray of shape (len(texts),), float32."""
        ...


class LexicalScorer:
    """Cosine similarity of term-frequency vectors under memcore's Unicode tokenisation.

    Texts are NFKC-normalised and casefolded and split into tokens exactly as
    :class:`~memcore.embedders.HashingEmbedder`'s unicode mode does (runs of letters/digits of
    any script, character bigrams for CJK/kana/Thai...). Each text becomes the vector of its
    token counts (tokens identified by a 64-bit hash, so there is no dimension and, in practice,
    no collision); the score is their cosine, in [0, 1]. A text without tokens scores 0.0
    against everything, including itself. Symmetric: ``score(a, b) == score(b, a)``.

    Attributes
    ----------
    name : str
        ``"lexical-tf-cosine-v1"``.

    Examples
    --------
    >>> scorer = LexicalScorer()
    >>> round(scorer.score("the cat sat", "The cat!"), 4)
    0.8165
    >>> scorer.score_many("dock", ["return to the dock", "battery low"]).tolist()
    [0.5, 0.0]
    """

    name = "lexical-tf-cosine-v1"

    def __repr__(self) -> str:
        return "LexicalScorer()"

    def score(self, a: str, b: str) -> float:
        """Term-frequency cosine of two texts.

        Parameters
        ----------
        a, b : str

        Returns
        -------
        float
            In [0, 1]; 0.0 when either text has no token.

        Raises
        ------
        InvalidTextError
            If a or b is not a str or holds a lone surrogate.

        Examples
        --------
        >>> LexicalScorer().score("red apple", "apple red")
        1.0
        """
        a = _validate.text(a, name="a")
        b = _validate.text(b, name="b")
        return float(self._scores(a, [b])[0])

    def score_many(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Term-frequency cosine of one query against each of many texts.

        Parameters
        ----------
        query : str
        texts : sequence of str

        Returns
        -------
        ndarray of shape (len(texts),), float32
            In [0, 1].

        Raises
        ------
        InvalidTextError
            If query is not a str, texts is a str, or any of them is not a str or holds a lone
            surrogate.

        Examples
        --------
        >>> LexicalScorer().score_many("x", []).shape
        (0,)
        """
        query = _validate.text(query, name="query")
        texts = _text.check_texts(texts)
        return self._scores(query, texts)

    @staticmethod
    def _scores(query: str, texts: list) -> np.ndarray:
        q_hashes, _, q_counts = _text.token_hashes([query], parallel=False)
        hashes, offsets, counts = _text.token_hashes(texts)
        out = np.empty(len(texts), np.float32)
        _k.tf_cosine(q_hashes[:q_counts[0]], hashes, offsets, counts, out)
        return out
