"""Bring your own model: :class:`CallableEmbedder` wraps a plain function,
:class:`SentenceTransformerEmbedder` a sentence-transformers model.

Any object with ``name``, ``dim`` and ``encode`` is an embedder (the
:class:`~memcore.embedders.Embedder` protocol); these two wrappers add what a hand-written one
usually forgets: every batch the model returns is checked (shape ``(n, dim)``, numeric, finite)
and L2-normalised once, ``encode([])`` keeps the shape ``(0, dim)``, and a bad row names the
embedder and the text it came from. Stores record ``name`` and ``dim`` and refuse to mix two
embedders' vectors, so ``name`` must change whenever the model does.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from memcore import _validate
from memcore.errors import (
    DimensionMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTextError,
    InvalidVectorError,
    MissingDependencyError,
    install_hint,
)

__all__ = ["CallableEmbedder", "SentenceTransformerEmbedder"]


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class CallableEmbedder:
    """An embedder from a function ``fn(texts: list[str]) -> array of shape (len(texts), dim)``.

    The function may return any numeric array-like (lists, float64, unnormalised rows): the
    output is checked and converted to unit-norm float32 rows. An all-zero row (a text the
    model finds no content in) stays all zeros, as the protocol allows; such a text is never
    recalled.

    Parameters
    ----------
    fn : callable
        Called with a list of at most ``batch_size`` str.
    dim : int
        The vector dimension ``fn`` returns, >= 1.
    name : str
        Stable id of the model and its version (e.g. ``"my-model-v2"``); stores record it and
        refuse vectors of another name.

    Raises
    ------
    InvalidArgumentTypeError
        If ``fn`` is not callable or ``name`` is not a str.
    InvalidArgumentError
        If ``dim`` is not an int >= 1 or ``name`` is blank.

    Examples
    --------
    >>> emb = CallableEmbedder(lambda texts: [[len(t), 1.0] for t in texts], dim=2, name="len-v1")
    >>> [round(float(x), 4) for x in emb.encode(["abc"])[0]], emb.encode([]).shape  # [3, 1]/sqrt(10)
    ([0.9487, 0.3162], (0, 2))
    """

    def __init__(self, fn: Callable[[list], Any], dim: int, name: str) -> None:
        if not callable(fn):
            raise InvalidArgumentTypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(name, str):
            raise InvalidArgumentTypeError(f"name must be a str, got {type(name).__name__}")
        if not name.strip() or "\x00" in name:
            raise InvalidArgumentError(f"name must be a non-blank str without NUL, got {name!r}")
        self._fn = fn
        self.dim = _positive_int(dim, "dim")
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Embed ``texts`` with the wrapped function, ``batch_size`` texts per call.

        Parameters
        ----------
        texts : sequence of str
        batch_size : int, default 32

        Returns
        -------
        ndarray of shape (len(texts), dim), float32, C-contiguous
            Unit-norm rows, or all-zero rows where the function returned zeros.

        Raises
        ------
        InvalidTextError
            If ``texts`` is a str (not a sequence of them) or holds a non-str.
        DimensionMismatchError
            If the function returns another shape than ``(len(batch), dim)``.
        InvalidVectorError
            If it returns non-numeric values, NaN or inf.
        """
        if isinstance(texts, (str, bytes)):
            raise InvalidTextError("texts must be a sequence of str, got a single "
                                   f"{type(texts).__name__}; wrap it in a list")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidTextError(f"texts[{i}] must be a str, got {type(t).__name__}")
        batch_size = _positive_int(batch_size, "batch_size")
        out = np.zeros((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), batch_size):
            batch = texts[start:start + batch_size]
            out[start:start + len(batch)] = self._checked(self._fn(batch), batch, start)
        return out

    def _checked(self, raw: Any, batch: list, start: int) -> np.ndarray:
        """The function's output for ``batch`` as unit-norm float32 rows (zero rows kept)."""
        where = f"embedder {self.name!r}"
        try:
            arr = np.asarray(raw)
        except (TypeError, ValueError) as err:
            raise InvalidVectorError(f"{where} returned {type(raw).__name__}, not an array: "
                                     f"{err}") from err
        if arr.shape != (len(batch), self.dim):
            raise DimensionMismatchError(
                f"{where} returned shape {arr.shape} for {len(batch)} texts; expected "
                f"({len(batch)}, {self.dim}) (dim={self.dim} as declared)")
        if arr.dtype.kind not in "fiu":
            raise InvalidVectorError(f"{where} returned dtype {arr.dtype}; expected numbers")
        try:
            return _validate.vectors(arr, self.dim, name=f"{where}'s output", allow_zero=True)
        except InvalidVectorError as err:
            finite = np.isfinite(arr.astype(np.float64)).all(axis=1)
            if not finite.all():
                row = int(np.flatnonzero(~finite)[0])
                raise InvalidVectorError(
                    f"{where} returned NaN or inf for text {start + row} "
                    f"({batch[row][:60]!r})") from err
            raise


class SentenceTransformerEmbedder(CallableEmbedder):
    """A sentence-transformers model as a memcore embedder (``pip install
    memcore-agent[sentence-transformers]``).

    Parameters
    ----------
    model : str or SentenceTransformer
        A model name or local folder (loaded with ``SentenceTransformer(model, device=device)``;
        it is downloaded from the Hugging Face hub only if it is not cached), or a model object
        you built.
    name : str, optional
        The id stores record. Default: ``"st:" + model`` for a str, or ``"st:" + the model's
        ``name_or_path``/``model_card_data.base_model`` for an object; an object without either
        needs ``name=``.
    device : str, optional
        Only for a str ``model``; sentence-transformers' default when None.
    precision : {"float32"}, default "float32"
        Vectors are stored as float32; quantised precisions are refused.

    Raises
    ------
    ImportError
        If sentence-transformers is not installed (a str ``model``).
    InvalidArgumentTypeError
        If ``model`` has no ``encode``.
    InvalidArgumentError
        If the dimension or a name cannot be determined, or ``device`` is given with an object.

    Examples
    --------
    >>> emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> emb.name, emb.dim  # doctest: +SKIP
    ('st:all-MiniLM-L6-v2', 384)
    """

    def __init__(self, model: Any, *, name: str | None = None, device: str | None = None,
                 precision: str = "float32") -> None:
        if precision != "float32":
            raise InvalidArgumentError(f"precision must be 'float32' (stores keep float32 "
                                       f"vectors), got {precision!r}")
        if isinstance(model, str):
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as err:
                raise MissingDependencyError(
                    f"SentenceTransformerEmbedder({model!r}) needs sentence-transformers: "
                    f"{install_hint('sentence-transformers')}") from err
            ident = model
            model = SentenceTransformer(model, device=device)
        else:
            if device is not None:
                raise InvalidArgumentError("device applies to a model loaded by name; move a "
                                           "model object yourself (model.to(device))")
            if not callable(getattr(model, "encode", None)):
                raise InvalidArgumentTypeError(
                    f"model must be a model name or a SentenceTransformer, got "
                    f"{type(model).__name__}")
            card = getattr(model, "model_card_data", None)
            ident = getattr(model, "name_or_path", None) or getattr(card, "base_model", None)
        if name is None:
            if not ident:
                raise InvalidArgumentError(
                    "this model object records no name; pass name='your-model-v1' (stores "
                    "record it so vectors of two models never mix)")
            name = f"st:{ident}"
        get_dim = (getattr(model, "get_embedding_dimension", None)    # sentence-transformers >= 6
                   or getattr(model, "get_sentence_embedding_dimension", None))
        dim = get_dim() if callable(get_dim) else None
        if dim is None:
            raise InvalidArgumentError(f"cannot tell the output dimension of {name!r} "
                                       f"(its get_embedding_dimension() returned None)")
        self.model = model
        super().__init__(self._encode_batch, dim, name)

    def _encode_batch(self, texts: list) -> np.ndarray:
        return self.model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)
