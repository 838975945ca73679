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
   per-code-point class table :func:`char_class_table` (or :func:`ascii_class_table` when
   the batch is ASCII, which spares building the full table) and writes one 64-bit hash per
   token.

:func:`token_hashes` runs the whole pipeline. Tokens are maximal runs of letters, digits and
combining marks of any script; in scripts written without spaces (Han ideographs, kana, Thai,
Lao, Khmer, Myanmar) each pair of adjacent characters is a token (a lone character is a token
by itself). Everything else (spaces, punctuation, symbols, emoji, controls incl. NUL)
separates tokens. The classes come from this Python's :mod:`unicodedata`
(``unicodedata.unidata_version``), as does NFKC.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Sequence

import numba
import numpy as np

from memcore import _numba, _validate
from memcore.errors import InvalidTextError
from memcore.kernels import hashing as _k

__all__ = [
    "NOSPACE_RANGES",
    "PARALLEL_MIN_TEXTS",
    "ascii_class_table",
    "char_class_table",
    "class_table",
    "check_texts",
    "normalize",
    "pack",
    "pack_utf8",
    "token_hashes",
    "unicode_token_hashes",
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


#: Token class of each Unicode general category (the two-letter ``unicodedata.category``).
_CATEGORY_CLASS = {
    cat: _k.WORD if cat[0] in "LN" else _k.MARK if cat[0] == "M" else _k.SEP
    for cat in ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So "
                "Zs Zl Zp Cc Cf Cs Co Cn").split()}

#: Bump when the on-disk form of the class table changes.
_TABLE_FORMAT = 1

logger = logging.getLogger(__name__)


def _category_classes(code_points) -> np.ndarray:
    """Class of each code point from its general category alone (writable uint8 array)."""
    return np.frombuffer(bytes(map(_CATEGORY_CLASS.__getitem__,
                                   map(unicodedata.category, map(chr, code_points)))),
                         np.uint8).copy()


def _build_table(stop: int) -> np.ndarray:
    """Classes of code points ``0 .. stop - 1`` computed from :mod:`unicodedata` (the definition).

    All of Unicode takes about 0.1-0.3 s (one ``unicodedata.category`` call per code point).
    """
    table = _category_classes(range(stop))
    for cp in _JOINERS:
        if cp < stop:
            table[cp] = _k.MARK
    for lo, hi in NOSPACE_RANGES:
        block = table[lo:hi + 1]
        block[block == _k.WORD] = _k.NOSPACE
    table.setflags(write=False)
    return table


def _classes_at(code_points: np.ndarray) -> np.ndarray:
    """Classes of arbitrary code points (int64 array); the same rules as :func:`_build_table`."""
    classes = _category_classes(code_points.tolist())
    classes[np.isin(code_points, _JOINERS)] = _k.MARK
    for lo, hi in NOSPACE_RANGES:
        classes[(code_points >= lo) & (code_points <= hi) & (classes == _k.WORD)] = _k.NOSPACE
    return classes


def _table_cache_path() -> Path | None:
    """Where the run-length form of the class table is cached, or None if there is no cache dir.

    ``$MEMCORE_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("memcore")``. The name holds
    ``unicodedata.unidata_version`` and a digest of the tokenisation rules, so a new Python (new
    Unicode data) or a change of the rules never reads a stale table.
    """
    env = os.environ.get("MEMCORE_CACHE_DIR")
    try:
        if env:
            base = Path(env)
        else:
            import platformdirs

            base = Path(platformdirs.user_cache_dir("memcore"))
    except Exception:   # no home directory, exotic platform: run without the cache
        return None
    rules = repr((_TABLE_FORMAT, NOSPACE_RANGES, _JOINERS, sorted(_CATEGORY_CLASS.items()),
                  (_k.SEP, _k.WORD, _k.NOSPACE, _k.MARK)))
    digest = hashlib.sha256(rules.encode()).hexdigest()[:12]
    return base / f"char-classes-unicode-{unicodedata.unidata_version}-{digest}.npy"


def _load_table(path: Path) -> np.ndarray | None:
    """The class table from its cached runs, or None if the file is missing, malformed or stale.

    The file holds ``runs``: int32 of shape (n_runs, 2), rows ``(first code point, class)``.
    Beyond format checks, the first and last code point of every run are recomputed from
    :mod:`unicodedata` (about 4k look-ups, ~1 ms); as runs are maximal, a moved boundary or a
    wrong class fails this check.
    """
    try:
        runs = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if runs.dtype != np.int32 or runs.ndim != 2 or runs.shape[0] == 0 or runs.shape[1] != 2:
        return None
    starts = runs[:, 0].astype(np.int64)
    classes = runs[:, 1]
    if starts[0] != 0 or starts[-1] >= 0x110000 or np.any(np.diff(starts) <= 0) \
            or classes.min() < 0 or classes.max() > _k.MARK:
        return None
    ends = np.append(starts[1:], 0x110000)
    table = np.repeat(classes.astype(np.uint8), ends - starts)
    sample = np.union1d(starts, ends - 1)
    if not np.array_equal(table[sample], _classes_at(sample)):
        return None
    table.setflags(write=False)
    return table


def _save_table(path: Path, table: np.ndarray) -> None:
    """Cache the runs of table at path (atomic rename; failures are logged and ignored)."""
    starts = np.concatenate([[0], np.flatnonzero(np.diff(table)) + 1])
    runs = np.stack([starts, table[starts]], axis=1).astype(np.int32)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, runs)
        os.replace(tmp, path)
    except OSError as err:
        logger.debug("could not cache the character class table at %s: %s", path, err)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@functools.lru_cache(maxsize=1)
def char_class_table() -> np.ndarray:
    """Per-code-point token class used by the unicode tokeniser.

    ``SEP`` (0) everywhere except: letters (L*) and numbers (N*) are ``WORD`` (1), or
    ``NOSPACE`` (2) inside :data:`NOSPACE_RANGES`; combining marks (M*) and ZWNJ/ZWJ are
    ``MARK`` (3) everywhere (so a Thai vowel sign stays with its consonant).

    Built from :mod:`unicodedata` once per Python/Unicode version (0.1-0.3 s) and cached as
    about 1.8k runs (~15 KB) under the user cache dir (``$MEMCORE_CACHE_DIR`` overrides it),
    from which later processes load it in about 1 ms; see :func:`_load_table` for how a cached
    copy is checked. All-ASCII batches never need it (:func:`ascii_class_table`).

    Returns
    -------
    ndarray of shape (0x110000,), uint8, read-only

    Examples
    --------
    >>> int(char_class_table()[ord("a")]), int(char_class_table()[ord("東")])
    (1, 2)
    """
    path = _table_cache_path()
    table = _load_table(path) if path is not None and path.exists() else None
    if table is None:
        table = _build_table(0x110000)
        if path is not None:
            _save_table(path, table)
    return table


@functools.lru_cache(maxsize=1)
def ascii_class_table() -> np.ndarray:
    """``char_class_table()[:128]``, built without the rest (microseconds).

    The unicode kernel reads the table only at the code points present in its input, so for
    all-ASCII data this table gives bit-identical results.

    Returns
    -------
    ndarray of shape (128,), uint8, read-only

    Examples
    --------
    >>> int(ascii_class_table()[ord("7")])
    1
    """
    return _build_table(0x80)


def class_table(is_ascii: bool) -> np.ndarray:
    """The class table to hand the unicode kernel: the 128-entry one when the data is ASCII."""
    return ascii_class_table() if is_ascii else char_class_table()


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
    data, offsets, _ = pack(texts)
    return data, offsets


def pack(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, bool]:
    """:func:`pack_utf8`, also telling whether every text is ASCII.

    Runs of ASCII texts are joined and encoded at once (their byte lengths are their
    character counts; ``str.isascii`` is O(1) in CPython); only non-ASCII texts are encoded
    one by one.

    Returns
    -------
    data : ndarray of shape (n_bytes,), uint8, read-only
    offsets : ndarray of shape (len(texts) + 1,), int64
    is_ascii : bool
        True iff every byte of data is < 0x80.

    Raises
    ------
    InvalidTextError
        As :func:`pack_utf8`.

    Examples
    --------
    >>> pack(["hi", "yo"])[2]
    True
    """
    texts = texts if isinstance(texts, list) else list(texts)
    n = len(texts)
    lengths = np.fromiter(map(len, texts), np.int64, count=n)
    non_ascii = np.flatnonzero(~np.fromiter(map(str.isascii, texts), np.bool_, count=n))
    if non_ascii.size == 0:
        blob = "".join(texts).encode("ascii")
    else:
        pieces = []
        prev = 0
        try:
            for i in non_ascii.tolist():
                pieces.append("".join(texts[prev:i]).encode("ascii"))
                piece = texts[i].encode("utf-8")
                pieces.append(piece)
                lengths[i] = len(piece)
                prev = i + 1
        except UnicodeEncodeError:
            check_texts(texts)        # raises, naming the text
            raise
        pieces.append("".join(texts[prev:]).encode("ascii"))
        blob = b"".join(pieces)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(blob, np.uint8), offsets, non_ascii.size == 0


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
    return unicode_token_hashes(texts, parallel=use_parallel(len(texts), parallel))


def unicode_token_hashes(texts: list, *, parallel: bool
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`token_hashes` of already checked texts, with the kernel chosen by the caller."""
    _numba.load()
    data, offsets, is_ascii = pack([t.lower() if t.isascii() else normalize(t) for t in texts])
    hashes = np.empty(data.shape[0], np.uint64)
    counts = np.empty(len(texts), np.int64)
    kernel = _k.unicode_token_hashes_parallel if parallel else _k.unicode_token_hashes
    kernel(data, offsets, class_table(is_ascii), hashes, counts)
    return hashes, offsets, counts
