"""The hashing-trick embedder: no model, no download, microseconds per text."""

from __future__ import annotations

from memcore.errors import InvalidArgumentError

from typing import Sequence

import numpy as np

from memcore import _numba, _text
from memcore.kernels import hashing as _k

__all__ = ["HashingEmbedder"]

_MODES = ("unicode", "classic")


class HashingEmbedder:
    """Bag-of-tokens vectors by the hashing trick, computed by numba kernels.

    Each token adds +1 or -1 to one of ``dim`` buckets; the sum is L2-normalised. Similar
    texts share tokens, so their vectors have a high cosine. It needs no model and is always
    available: :func:`memcore.embedders.default` falls back to it.

    Modes
    -----
    ``"unicode"`` (default)
        Text is NFKC-normalised and casefolded; tokens are runs of letters, digits and
        combining marks of any script, and character bigrams in scripts written without spaces
        (CJK ideographs, kana, Thai, ...); see :mod:`memcore._text`. Bucket = low 32 bits of a
        64-bit token hash mod dim; sign = bit 63 of the same hash (independent of the bucket).
    ``"classic"``
        Bit-exact to the classic recipe: lowercase; every character outside ``[a-z0-9 ]``
        becomes a space; split on whitespace; drop tokens shorter than 2 characters;
        bucket = 32-bit FNV-1a(token) mod dim; sign = +1 if the token's first character code
        is even, else -1; sum; L2-normalise. Non-ASCII letters are dropped.

    A text without tokens (empty, whitespace, punctuation, emoji only, ...) gets an
    **all-zero row**: the one exception to unit norm, as the :class:`Embedder` protocol allows;
    so does a text whose signed tokens cancel exactly. Texts holding lone surrogates are
    rejected (:class:`~memcore.errors.InvalidTextError`), never silently replaced. NUL and other
    control characters separate tokens.

    Parameters
    ----------
    dim : int, default 384
        Number of buckets (vector dimension), >= 1.
    mode : {"unicode", "classic"}, default "unicode"
    parallel : bool, optional
        Force (True) or forbid (False) the multi-threaded kernels; by default a batch of at least
        :data:`memcore._text.PARALLEL_MIN_TEXTS` texts runs in parallel.

    Attributes
    ----------
    name : str
        ``"hashing-unicode-v1"`` or ``"hashing-classic-v1"``; stores also record ``dim``.
    dim : int

    Raises
    ------
    ValueError
        If dim is not an int >= 1, mode is unknown, or parallel is not None/bool.

    Examples
    --------
    >>> emb = HashingEmbedder(dim=256)
    >>> vecs = emb.encode(["The battery is low", "battery low!"])
    >>> vecs.shape, vecs.dtype
    ((2, 256), dtype('float32'))
    """

    def __init__(self, dim: int = 384, mode: str = "unicode", *, parallel: bool | None = None):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InvalidArgumentError(f"HashingEmbedder dim must be an int >= 1, got {dim!r}")
        if mode not in _MODES:
            raise InvalidArgumentError(f"HashingEmbedder mode must be one of {_MODES}, got {mode!r}")
        if parallel is not None and not isinstance(parallel, bool):
            raise InvalidArgumentError(f"HashingEmbedder parallel must be None, True or False, got {parallel!r}")
        self.dim = int(dim)
        self.mode = mode
        self.parallel = parallel
        self.name = f"hashing-{mode}-v1"

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, mode={self.mode!r}, parallel={self.parallel!r})"

    def load(self) -> "HashingEmbedder":
        """Compile the kernels and build the class table now rather than on first use.

        Returns
        -------
        HashingEmbedder
            self.

        Examples
        --------
        >>> emb = HashingEmbedder().load()
        """
        self.encode(["warm up"])
        if self.parallel is not False:
            self._encode_into(["warm up"], np.empty((1, self.dim), np.float32), parallel=True)
        return self

    def encode(self, texts: Sequence[str], *, batch_size: int = 4096) -> np.ndarray:
        """Embed texts.

        Parameters
        ----------
        texts : sequence of str
        batch_size : int, default 4096
            Texts handed to the kernel at once; bounds the temporary UTF-8 buffer.

        Returns
        -------
        ndarray of shape (len(texts), dim), float32, C-contiguous
            Unit-norm rows, or all-zero rows for texts without tokens.

        Raises
        ------
        InvalidTextError
            If texts is a str, or an element is not a str or holds a lone surrogate.
        ValueError
            If batch_size is not an int >= 1.

        Examples
        --------
        >>> HashingEmbedder().encode([]).shape
        (0, 384)
        """
        texts = _text.check_texts(texts, encodable=False)   # pack_utf8 checks encoding
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        out = np.empty((len(texts), self.dim), np.float32)
        for lo in range(0, len(texts), batch_size):
            chunk = texts[lo:lo + batch_size]
            self._encode_into(chunk, out[lo:lo + len(chunk)])
        return out

    def _encode_into(self, texts: list, out: np.ndarray, parallel: bool | None = None) -> None:
        _numba.load()                # interrupt-safe first load of numba's registries
        if parallel is None:
            parallel = _text.use_parallel(len(texts), self.parallel)
        if self.mode == "classic":
            # The kernel lowercases ASCII itself; str.lower covers the rest (e.g. KELVIN SIGN
            # lowers to "k"), which keeps the result identical to the str recipe.
            data, offsets, _ = _text.pack([t if t.isascii() else t.lower() for t in texts])
            kernel = _k.hash_embed_classic_parallel if parallel else _k.hash_embed_classic
            kernel(data, offsets, out)
            return
        hashes, offsets, counts = _text.unicode_token_hashes(texts, parallel=parallel)
        if parallel:
            _k.embed_token_hashes_parallel(hashes, offsets, counts, out)
        else:
            _k.embed_token_hashes(hashes, offsets, counts, out)
