"""A static embedder distilled from all-MiniLM-L6-v2: a table lookup, microseconds per text.

tokenizers is imported on first use, so ``import memcore`` stays fast.
"""

from __future__ import annotations

import os
import threading
import unicodedata
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memcore import _text
from memcore.embedders.onnx import MAX_TEXT_CHARS, verify_model_file
from memcore.errors import InvalidArgumentError, ModelChecksumError
from memcore.models import manifest as _manifest
from memcore.models import resource as _resource

__all__ = ["StaticEmbedder"]

_MODEL_DIR = "static-minilm-l6-v2"


class StaticEmbedder:
    """Static word-piece vectors distilled from all-MiniLM-L6-v2 (the model2vec recipe).

    A text is tokenised with MiniLM's own uncased WordPiece tokenizer (no ``[CLS]``/``[SEP]``),
    the vectors of its word pieces are summed and the sum is L2-normalised: no neural network
    runs, so a short text costs a few microseconds of lookup after the tokenizer (about 0.05 ms
    per text in all on a 2-core EPYC VM), on any CPU. Each word piece's vector is MiniLM's mean output for
    that piece alone, rotated onto its principal axes and cut to ``dim`` (256), and weighted
    down the more frequent the piece (SIF); ``memcore/models/static-minilm-l6-v2/build.py``
    builds it from the fp32 sentence-transformers weights and its docstring gives the recipe.
    The table ships as package data (int8 codes with one scale per row, about 8 MB) and is held
    as float32 once loaded (``vocab_size * dim * 4`` bytes, about 31 MB).

    Word order and context are lost, so it ranks below :class:`MiniLMEmbedder`: with hybrid
    recall (``HybridWeights.hybrid()``), LoCoMo dev R@10 0.798 vs 0.836 and SciFact nDCG@10
    0.673 vs 0.736 (2026-12-04, ``memcore bench locomo|beir --runs
    memcore-hybrid,memcore-hybrid-static``); the same recall without its dense signal gives
    0.786 on LoCoMo. Choose it where the encode must cost microseconds on any CPU. Its vectors
    live in another space than MiniLM's: a store written by one refuses the other.

    Texts are cut to their first :data:`memcore.embedders.onnx.MAX_TEXT_CHARS` characters
    before tokenising (bounding the cost of a huge text); every word piece of the rest counts.
    Non-ASCII text is NFKC-normalised first, so full-width letters and ligatures such as
    ``"ﬁ"`` find their word pieces (BERT's own normaliser does not fold them).
    A text without word pieces of known vector (empty, whitespace, characters the vocabulary
    does not have) gets an all-zero row, as the :class:`Embedder` protocol allows.

    Parameters
    ----------
    model_dir : str or path-like, optional
        A folder holding ``manifest.json`` and the vectors file of another build (e.g. one
        written by ``build.py --out``); the packaged one when None.

    Attributes
    ----------
    name : str
        From the manifest, e.g. ``"static-minilm-l6-v2-256d-v1"`` (dimension and recipe
        version included, so stores never mix two builds).
    dim : int
        256 for the packaged build.

    Raises
    ------
    FileNotFoundError
        If ``model_dir`` holds no ``manifest.json``.

    Examples
    --------
    >>> emb = StaticEmbedder()
    >>> emb.encode(["The battery is low", ""]).shape
    (2, 256)
    """

    def __init__(self, model_dir: str | os.PathLike | None = None):
        import json

        self.model_dir = None if model_dir is None else Path(model_dir)
        if self.model_dir is None:
            self._manifest = _manifest(_MODEL_DIR)
        else:
            self._manifest = json.loads((self.model_dir / "manifest.json").read_text("utf-8"))
        self.name: str = str(self._manifest["name"])
        self.dim: int = int(self._manifest["dim"])
        self._table: np.ndarray | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"StaticEmbedder(model_dir={self.model_dir!r})"

    def load(self) -> "StaticEmbedder":
        """Read and verify the vectors and load the tokenizer now (else on first encode).

        Returns
        -------
        StaticEmbedder
            self.

        Raises
        ------
        ModelChecksumError
            If the vectors file's size or sha256 differs from the manifest's, or its table
            does not have ``vocab_size`` rows of ``dim``.

        Examples
        --------
        >>> StaticEmbedder().load().dim
        256
        """
        if self._table is None:
            with self._lock:
                if self._table is None:
                    tokenizer = self._make_tokenizer()
                    self._table = self._read_table()
                    self._tokenizer = tokenizer
        return self

    def _vectors_path(self) -> Path:
        if self.model_dir is not None:
            return self.model_dir / self._manifest["file"]
        return Path(str(_resource(_MODEL_DIR, self._manifest["file"])))

    def _read_table(self) -> np.ndarray:
        man = self._manifest
        path = self._vectors_path()
        verify_model_file(path, man["sha256"], int(man["size_bytes"]),
                          remedy="; reinstall memcore, or rebuild it with build.py")
        with np.load(path) as z:
            codes, scales = z["codes"], z["scales"]
        if codes.dtype != np.int8 or codes.shape != (int(man["vocab_size"]), self.dim) \
                or scales.shape != (codes.shape[0],):
            raise ModelChecksumError(
                f"{path} holds codes {codes.dtype} {codes.shape} and scales {scales.shape}; the "
                f"manifest expects int8 ({man['vocab_size']}, {self.dim})")
        return np.ascontiguousarray(codes * scales.astype(np.float32)[:, None], np.float32)

    def _make_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        source = self._manifest["tokenizer_model"]
        tokenizer = Tokenizer.from_str(
            _resource(source, _manifest(source)["tokenizer"]).read_text(encoding="utf-8"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer

    def encode(self, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
        """Embed texts.

        Parameters
        ----------
        texts : sequence of str
        batch_size : int, default 256
            Texts tokenised per call of the tokenizer (its batch call runs on a thread pool).

        Returns
        -------
        ndarray of shape (len(texts), dim), float32, C-contiguous
            Unit-norm rows; all-zero for a text without known word pieces.

        Raises
        ------
        InvalidTextError
            If texts is a str, or an element is not a str or holds a lone surrogate.
        InvalidArgumentError
            If batch_size is not an int >= 1 (a ``ValueError``).
        ModelChecksumError
            On first use, see :meth:`load`.

        Examples
        --------
        >>> v = StaticEmbedder().encode(["robot", "the robot arm"])
        >>> v.dtype, v.shape
        (dtype('float32'), (2, 256))
        """
        texts = _text.check_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        out = np.zeros((len(texts), self.dim), np.float32)
        if not texts:
            return out
        self.load()
        texts = [t if len(t) <= MAX_TEXT_CHARS else t[:MAX_TEXT_CHARS] for t in texts]
        texts = [t if t.isascii() else unicodedata.normalize("NFKC", t) for t in texts]
        for lo in range(0, len(texts), batch_size):
            self._encode_into(texts[lo:lo + batch_size], out[lo:lo + batch_size])
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        np.divide(out, norms[:, None], out=out, where=norms[:, None] > 0)
        return out

    def _encode_into(self, texts: list, out: np.ndarray) -> None:
        """Sum each text's word-piece vectors into its row of ``out``."""
        if len(texts) == 1:
            ids = self._tokenizer.encode(texts[0], add_special_tokens=False).ids
            if ids:
                self._table.take(ids, axis=0).sum(axis=0, out=out[0])
            return
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, count=len(encodings))
        ids = np.fromiter((i for e in encodings for i in e.ids), np.int64,
                          count=int(lengths.sum()))
        rows = np.flatnonzero(lengths)
        if rows.size:
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[rows]
            out[rows] = np.add.reduceat(self._table.take(ids, axis=0), starts, axis=0)
