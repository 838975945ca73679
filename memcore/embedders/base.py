"""The :class:`Embedder` protocol every embedder implements."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    Attributes
    ----------
    name : str
        Stable id including version/variant (e.g. ``"minilm-l6-v2-int8"``); stores record it and
        refuse to mix vectors of two embedders.
    dim : int
        Vector dimension.
    """

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Embed texts.

        Returns
        -------
        ndarray of shape (len(texts), dim), float32, C-contiguous; each row has unit L2 norm,
        or is all zeros for a text with no content. ``encode([])`` has shape (0, dim).
        """
        ...
