"""memcore's Unicode tokenisation, shared by the hashing embedder, the lexical scorer and BM25.

The Python side does what ``str`` does best and hands numba flat arrays:

1. :func:`check_texts` validates a batch (a sequence of str; lone surrogates raise
   :class:`~memcore.errors.InvalidTextError`).
2. :func:`normalize` folds each text: NFKC, then ``str.casefold``, then NFKC again when
   casefolding left the text unnormalised (the NFKC_Casefold recipe); ASCII text only needs
   ``str.lower``.
3. :func:`pack_utf8` concatenates the UTF-8 encodings into ``data: uint8[:]`` and
   ``offsets: int64[n + 1]``.
4. The numba kernel :func:`memcore.kernels.hashing.unicode_token_hashes` tokenises with the
   per-code-point class table :func:`char_class_table` and writes one 64-bit hash per token.

:func:`token_hashes` runs the whole pipeline. Tokens are maximal runs of letters, digits and
combining marks of any script; in scripts written without spaces (Han ideographs, kana, Thai,
Lao, Khmer, Myanmar) each pair of adjacent characters is a token (a lone character is a token
by itself). Everything else (spaces, punctuation, symbols, emoji, controls incl. NUL)
separates tokens. The classes come from this Python's :mod:`unicodedata`
(``unicodedata.unidata_version``), as does NFKC.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, Sequence

import numba
import numpy as np

from memcore import _validate
from memcore.errors import InvalidTextError
from memcore.kernels import hashing as _k

__all__ = [
    "NOSPACE_RANGES",
    "PARALLEL_MIN_TEXTS",
    "char_class_table",
    "check_texts",
    "normalize",
    "pack_utf8",
    "token_hashes",
    "use_parallel",
]

#: Batches of at least this many texts use the ``*_parallel`` kernels (when numba has > 1
#: thread). Below it, thread start-up costs more than it saves.
PARALLEL_MIN_TEXTS = 512

#: Code-point ranges (inclusive) of scripts written without spaces between words; letters,
#: digits and marks in them are tokenised as character bigrams.
NOSPACE_RANGES = (
    (0x0E00, 0x0E7F),    # Thai
    (0x0E80, 0x0EFF),    # Lao
    (0x1000, 0x109F),    # Myanmar
    (0x1780, 0x17FF),    # Khmer
    (0x3005, 0x3007),    # 々 〆 〇
    (0x3021, 0x3029),    # Hangzhou numerals
    (0x3031, 0x3035),    # kana repeat marks
    (0x303B, 0x303C),    # 〻 〼
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x31F0, 0x31FF),    # Katakana phonetic extensions
    (0x3400, 0x4DBF),    # CJK ext. A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0x1AFF0, 0x1B16F),  # Kana extended / supplement
    (0x20000, 0x3FFFF),  # CJK ext. B and later, planes 2-3
)

#: Zero-width (non-)joiners are word-internal in several scripts: they continue a token.
_JOINERS = (0x200C, 0x200D)


@functools.lru_cache(maxsize=1)
def char_class_table() -> np.ndarray:
    """Per-code-point token class used by the unicode tokeniser.

    ``SEP`` (0) everywhere except: letters (L*) and numbers (N*) are ``WORD`` (1), or
    ``NOSPACE`` (2) inside :data:`NOSPACE_RANGES`; combining marks (M*) and ZWNJ/ZWJ are
    ``MARK`` (3) everywhere (so a Thai vowel sign stays with its consonant). Built once per
    process (about 0.15 s).

    Returns
    -------
    ndarray of shape (0x110000,), uint8, read-only

    Examples
    --------
    >>> int(char_class_table()[ord("a")]), int(char_class_table()[ord("東")])
    (1, 2)
    """
    classes = {"L": _k.WORD, "N": _k.WORD, "M": _k.MARK}
    cats = np.frombuffer(
        bytes(classes.get(unicodedata.category(chr(cp))[0], _k.SEP) for cp in range(0x110000)),
        dtype=np.uint8).copy()
    for cp in _JOINERS:
        cats[cp] = _k.MARK
    for lo, hi in NOSPACE_RANGES:
        block = cats[lo:hi + 1]
        block[block == _k.WORD] = _k.NOSPACE
    cats.setflags(write=False)
    return cats


def check_texts(texts: Any, *, name: str = "texts", encodable: bool = True) -> list:
    """Validate a batch of texts and return it as a list.

    Parameters
    ----------
    texts : sequence of str
        A bare ``str`` is rejected (it would otherwise be read as a sequence of characters).
    encodable : bool, default True
        Also check that every text encodes as UTF-8. Callers that go on to :func:`pack_utf8`
        pass False: it performs the same check without encoding twice.

    Returns
    -------
    list of str

    Raises
    ------
    InvalidTextError
        If texts is a str or not a sequence, an element is not a str, or an element holds a
        lone surrogate (not encodable as UTF-8); the message gives the index.

    Examples
    --------
    >>> check_texts(("a", "b"))
    ['a', 'b']
    """
    if isinstance(texts, (str, bytes)):
        raise InvalidTextError(
            f"{name} must be a sequence of str, got a single {type(texts).__name__}; "
            f"wrap it in a list: [{name[:-1] if name.endswith('s') else name}]")
    try:
        out = list(texts)
    except TypeError as err:
        raise InvalidTextError(
            f"{name} must be a sequence of str, got {type(texts).__name__}") from err
    for i, t in enumerate(out):
        if type(t) is not str:
            _validate.text(t, name=f"{name}[{i}]")
    if encodable:
        try:
            "".join(out).encode("utf-8")
        except UnicodeEncodeError:
            for i, t in enumerate(out):
                _validate.text(t, name=f"{name}[{i}]")
    return out


def normalize(text: str) -> str:
    """NFKC + casefold a text (the unicode tokeniser's input form).

    Parameters
    ----------
    text : str
        Assumed valid (see :func:`check_texts`).

    Returns
    -------
    str

    Examples
    --------
    >>> normalize("Straße ＡＢＣ ﬁ")
    'strasse abc fi'
    """
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    if not unicodedata.is_normalized("NFKC", folded):
        folded = unicodedata.normalize("NFKC", folded)
    return folded


def pack_utf8(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the UTF-8 encodings of texts.

    Parameters
    ----------
    texts : list of str

    Returns
    -------
    data : ndarray of shape (n_bytes,), uint8, read-only
    offsets : ndarray of shape (len(texts) + 1,), int64
        Text ``i`` is ``data[offsets[i]:offsets[i + 1]]``.

    Raises
    ------
    InvalidTextError
        If a text holds a lone surrogate (``texts[i]`` is named).

    Examples
    --------
    >>> data, offsets = pack_utf8(["hé", "x"])
    >>> offsets.tolist()
    [0, 3, 4]
    """
    try:
        parts = [t.encode("utf-8") for t in texts]
    except UnicodeEncodeError:
        check_texts(texts)        # raises, naming the text
        raise
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, count=len(parts)), out=offsets[1:])
    blob = b"".join(parts)
    return np.frombuffer(blob, np.uint8), offsets


def use_parallel(n_texts: int, parallel: bool | None) -> bool:
    """Whether a batch of n_texts should use the ``*_parallel`` kernels.

    ``parallel=None`` decides by size (>= :data:`PARALLEL_MIN_TEXTS` and more than one numba
    thread); True/False force the choice.
    """
    if parallel is None:
        return n_texts >= PARALLEL_MIN_TEXTS and numba.get_num_threads() > 1
    return bool(parallel)


def token_hashes(texts: Sequence[str], *, parallel: bool | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokenise texts (NFKC + casefold, unicode tokenisation) into 64-bit token hashes.

    Parameters
    ----------
    texts : sequence of str
    parallel : bool, optional
        Force (True) or forbid (False) the parallel kernel; by default chosen by batch size.

    Returns
    -------
    hashes : ndarray of shape (n_slots,), uint64
        Text ``i``'s token hashes, in order, are ``hashes[offsets[i]:offsets[i] + counts[i]]``.
    offsets : ndarray of shape (len(texts) + 1,), int64
    counts : ndarray of shape (len(texts),), int64

    Raises
    ------
    InvalidTextError
        See :func:`check_texts`.

    Examples
    --------
    >>> hashes, offsets, counts = token_hashes(["Hello wörld", "東京タワー"])
    >>> counts.tolist()
    [2, 4]
    """
    texts = check_texts(texts, encodable=False)
    data, offsets = pack_utf8([normalize(t) for t in texts])
    hashes = np.empty(data.shape[0], np.uint64)
    counts = np.empty(len(texts), np.int64)
    kernel = (_k.unicode_token_hashes_parallel if use_parallel(len(texts), parallel)
              else _k.unicode_token_hashes)
    kernel(data, offsets, char_class_table(), hashes, counts)
    return hashes, offsets, counts
