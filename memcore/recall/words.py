"""The words BM25 indexes beside a memory's text: Snowball stemming and date words.

- :func:`stemmer` / :func:`stem_many`: English Snowball stems (PyStemmer), for documents and
  queries of ``HybridWeights(stem=True)``;
- :func:`date_words`: a time's UTC day as words (``"8 may 2023"``), what
  ``HybridWeights(dates=True)`` adds to a memory's BM25 document;
- :func:`bm25_documents`: a memory's BM25 document from these.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Callable, Sequence

import numpy as np

__all__ = ["MONTHS", "bm25_documents", "date_words", "stemmer", "stem_many"]

#: English month names, lower case, January first.
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")


@functools.lru_cache(maxsize=4096)
def _day_words(day: int) -> str:
    t = np.datetime64(day, "D")
    month = t.astype("datetime64[M]")
    m = int(month.astype(np.int64))
    return (f"{int((t - month).astype(np.int64)) + 1} {MONTHS[m % 12]} "
            f"{1970 + m // 12}")


def date_words(created_at: Sequence[float] | np.ndarray) -> list[str]:
    """Each time's UTC day as words, ``"8 may 2023"`` ("" for a non-finite time): what
    ``HybridWeights(dates=True)`` adds to a memory's BM25 document.

    Parameters
    ----------
    created_at : sequence of float
        Unix seconds.

    Returns
    -------
    list of str

    Examples
    --------
    >>> date_words([1683554160.0, float("nan")])
    ['8 may 2023', '']
    """
    if isinstance(created_at, np.ndarray):
        created_at = created_at.reshape(-1).tolist()
    return [_day_words(math.floor(t / 86400.0)) if math.isfinite(t) and abs(t) < 1e15 else ""
            for t in map(float, created_at)]


_WORDS = re.compile(r"\w+")


@functools.lru_cache(maxsize=1)
def stemmer() -> Callable[[str], str]:
    """``text -> stemmed words joined by spaces`` (Snowball English, PyStemmer).

    Raises
    ------
    ImportError
        Without PyStemmer (naming it; ``stem=False`` needs none).
    """
    try:
        import Stemmer
    except ImportError as err:
        raise ImportError("HybridWeights(stem=True) needs PyStemmer: pip install PyStemmer "
                          "(or pass stem=False)") from err
    stem_words = Stemmer.Stemmer("english").stemWords
    findall = _WORDS.findall

    def stem(text: str) -> str:
        return " ".join(stem_words(findall(text.lower())))
    return stem


def stem_many(texts: list, stem: Callable[[str], str]) -> list:
    """``[stem(t) for t in texts]`` in one pass: the texts are lower-cased joined by NUL
    (neither a word character nor cased, so each text lower-cases alone), split at white
    space (never inside a word), and each distinct piece's words stemmed once. Texts holding a
    NUL (or non-str) take the per-text path."""
    try:
        big = "\x00".join(texts)
    except TypeError:
        return [stem(t) for t in texts]
    if big.count("\x00") != len(texts) - 1 or len(texts) < 64:
        return [stem(t) for t in texts]
    import Stemmer                                # present: ``stem`` came from stemmer()

    pieces = big.lower().replace("\x00", " \x00 ").split()
    pieces.append("\x00")
    distinct = list(set(pieces))
    findall = _WORDS.findall
    words = [findall(p) for p in distinct]
    stems = iter(Stemmer.Stemmer("english").stemWords([w for ws in words for w in ws]))
    table = {p: " ".join([next(stems) for _ in ws]) for p, ws in zip(distinct, words)}
    table["\x00"] = "\x00"
    out = " ".join(filter(None, map(table.__getitem__, pieces))).split("\x00")
    out.pop()                                     # after the closing NUL
    return [t.strip(" ") for t in out]


def bm25_documents(texts: Sequence[str], speakers: Sequence, created_at: Sequence[float] | None
                   = None, stem: Callable[[str], str] | None = None) -> list:
    """What BM25 indexes for each memory: ``"speaker: text"`` (the speaker is a field of the
    memory: a question naming them matches), then its day's :func:`date_words` when
    ``created_at`` is given, stemmed by ``stem`` when given.

    Parameters
    ----------
    texts : sequence of str
    speakers : sequence of str or None
    created_at : sequence of float, optional
        Unix s per memory.
    stem : callable, optional
        :func:`stemmer`'s function.

    Returns
    -------
    list of str

    Examples
    --------
    >>> bm25_documents(["I adopted a dog"], ["Ann"], [1683554160.0])
    ['Ann: I adopted a dog\\n8 may 2023']
    """
    ts = [f"{sp}: {t}" if sp else t for t, sp in zip(texts, speakers)]
    if created_at is not None:
        ts = [f"{t}\n{d}" if d else t for t, d in zip(ts, date_words(created_at))]
    if stem is None:
        return ts
    return stem_many(ts, stem)
