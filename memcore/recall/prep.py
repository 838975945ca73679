"""Query preparation for hybrid recall: one query text, one form per signal.

Hybrid recall (:mod:`memcore.recall.index`) scores a query with BM25 and with a dense embedder;
each works best on a different form of the question. A *query preparer* is any callable

    preparer(text: str, entities: Collection[str]) -> PreparedQuery

where ``entities`` are the names the namespace's memories are about (their ``speaker``
metadata). It must be pure and fast (it runs on every recall). :class:`DefaultQueryPreparer`
implements the rules measured on LoCoMo dev (issue 9):

- **Lexical (BM25)**: question and function words are dropped ("what did Caroline research"
  -> "caroline research"). BM25's idf already discounts common words, but in a few-hundred-memory
  conversation "did" or "when" still carry weight and pull in the wrong turns (+0.06 R@10).
- **Dense**: names of known entities are rewritten to the first person ("Caroline's dog" ->
  "my dog", "Caroline" -> "I"). Stored memories are written by their speaker, so the name is
  rarely in the memory's text while it dominates a small model's embedding of the question.
- **Entities**: the known names found in the query, for the speaker boost.

Pass ``query_preparer=`` to :class:`memcore.recall.weights.HybridWeights`-using stores to replace it
(e.g. a language-specific stop list, or an LLM rewrite).
"""

from __future__ import annotations

from memcore.errors import InvalidArgumentError

import re
from dataclasses import dataclass
from typing import Collection, Protocol

__all__ = ["PreparedQuery", "QueryPreparer", "DefaultQueryPreparer", "ENGLISH_QUESTION_WORDS",
           "identity_preparer"]

#: Question and function words dropped from the lexical query by default (English).
ENGLISH_QUESTION_WORDS = frozenset("""
a about after all also am an and any are as at be been before being both but by can could
did do does doing done during each for from had has have having he her hers him his how i if
in into is it its just kind me might more most my of on once or other our out over own same
she should so some such than that the their them then there these they this those through to
too under until up very was we were what when where which while who whom whose why will with
would you your yours ever many much s t
""".split())

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class PreparedQuery:
    """A query in the form each signal scores.

    Attributes
    ----------
    lexical : str
        Text for BM25 (tokenised like the stored texts).
    dense : str
        Text for the embedder.
    entities : frozenset of str
        Known entity names (casefolded) the query mentions; memories whose ``speaker`` is one
        of them get the speaker boost.
    """

    lexical: str
    dense: str
    entities: frozenset = frozenset()


class QueryPreparer(Protocol):
    """``(text, entities) -> PreparedQuery``; see the module notes."""

    def __call__(self, text: str, entities: Collection[str]) -> PreparedQuery:
        ...


def identity_preparer(text: str, entities: Collection[str] = ()) -> PreparedQuery:
    """No preparation: both signals see the query as written, no entities are detected.

    Examples
    --------
    >>> identity_preparer("What did Ann do?").lexical
    'What did Ann do?'
    """
    return PreparedQuery(text, text, frozenset())


class DefaultQueryPreparer:
    """The default rules: stop words out for BM25, entity names to first person for dense.

    Parameters
    ----------
    stop_words : collection of str, default :data:`ENGLISH_QUESTION_WORDS`
        Casefolded words dropped from the lexical query. If every word of the query is a stop
        word, the lexical query keeps them all (better than an empty query).
    names : {"first_person", "remove", "keep"}, default "first_person"
        What happens to known entity names in the dense query.

    Raises
    ------
    ValueError
        If names is not one of the three modes.

    Examples
    --------
    >>> p = DefaultQueryPreparer()("What did Caroline's dog eat?", ["Caroline", "Mel"])
    >>> p.lexical, p.dense, sorted(p.entities)
    ('caroline dog eat', 'What did my dog eat?', ['caroline'])
    """

    _MODES = ("first_person", "remove", "keep")

    def __init__(self, stop_words: Collection[str] = ENGLISH_QUESTION_WORDS, *,
                 names: str = "first_person"):
        if names not in self._MODES:
            raise InvalidArgumentError(f"names must be one of {self._MODES}, got {names!r}")
        self.stop_words = frozenset(w.casefold() for w in stop_words)
        self.names = names
        self._cache: dict = {}

    def __repr__(self) -> str:
        return f"DefaultQueryPreparer(names={self.names!r}, {len(self.stop_words)} stop words)"

    def _pattern(self, entities: frozenset):
        pat = self._cache.get(entities)
        if pat is None:
            alts = "|".join(sorted((re.escape(e) for e in entities), key=len, reverse=True))
            pat = re.compile(rf"\b({alts})(?:'s|’s)?\b", re.IGNORECASE) if alts else None
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[entities] = pat
        return pat

    def __call__(self, text: str, entities: Collection[str] = ()) -> PreparedQuery:
        words = _WORD.findall(text.casefold())
        kept = [w for w in words if w not in self.stop_words]
        lexical = " ".join(kept if kept else words)
        known = frozenset(e.casefold() for e in entities if e and e.strip())
        found: set = set()
        dense = text
        pat = self._pattern(known)
        if pat is not None:
            def sub(m: re.Match) -> str:
                found.add(m.group(1).casefold())
                if self.names == "keep":
                    return m.group(0)
                if self.names == "remove":
                    return ""
                return "my" if m.group(0) != m.group(1) else "I"
            dense = pat.sub(sub, text)
            if self.names == "remove":
                dense = " ".join(dense.split())
        return PreparedQuery(lexical, dense, frozenset(found))
