"""Memory extractors: turn one conversation turn into the memories worth keeping.

A :class:`Turn` is what an agent saw and said in one tick (the user's text, the assistant's
answer, when, and in which namespace). A :class:`MemoryExtractor` maps a turn to a list of
:class:`~memcore.MemoryItem`; the caller writes them into ``turn.namespace``. Three are provided:

- :class:`PairExtractor`: the input/response pair as one memory (what
  :meth:`memcore.SemanticMemory.store` stores). The memory's text is the input (the situation
  it answers, so the text and its vector agree); the response lives in ``metadata["response"]``.
- :class:`FactExtractor`: rule-based, no model. First-person statements of the *user* ("my name
  is ...", "I work as ...", "I live in ...", "I come from ...", "I love/hate ...", "remember that
  ...", "my <thing> is ...") become facts with stable keys, so a later "my name is X" replaces the
  earlier one, and an importance by kind (a name matters more than a preference).
- :class:`LLMExtractor`: asks a caller-supplied completion function for a JSON list of facts
  ``{key, text, importance}``. Malformed or partial output yields the valid items and a logged
  warning, never an exception: an extractor runs inside the control tick.
"""

from __future__ import annotations

from memcore.errors import InvalidArgumentError, InvalidArgumentTypeError

import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from memcore import _validate
from memcore.types import MemoryItem, NamespaceLike

__all__ = [
    "Turn",
    "MemoryExtractor",
    "PairExtractor",
    "FactExtractor",
    "LLMExtractor",
    "FACT_IMPORTANCE",
    "pair_key",
    "truncate",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    """One exchange of a conversation: what the user said and what the assistant answered.

    Parameters
    ----------
    user : str
        The user's (or the sensed situation's) text.
    assistant : str
        The assistant's answer; may be "".
    timestamp : float
        When the turn happened, Unix seconds.
    namespace : str or tuple of str
        Where the extracted memories belong.
    metadata : dict, optional
        Extra JSON-serialisable fields copied into every extracted memory's metadata.

    Examples
    --------
    >>> Turn("My name is Ada.", "Nice to meet you, Ada!", 1_700_000_000.0, ("agent", "chat"))
    Turn(user='My name is Ada.', ...)
    """

    user: str
    assistant: str
    timestamp: float
    namespace: NamespaceLike
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class MemoryExtractor(Protocol):
    """Anything that maps a :class:`Turn` to the memories worth storing."""

    def extract(self, turn: Turn) -> list[MemoryItem]:
        """Return the memories of ``turn`` (possibly none); never raises on odd text."""
        ...


def truncate(text: str, max_chars: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``max_chars`` characters, ending with "…" when cut.

    Returns
    -------
    text : str
    truncated : bool
        True when the text was cut.

    Examples
    --------
    >>> truncate("abcdef", 4)
    ('abc…', True)
    """
    if len(text) <= max_chars:
        return text, False
    return text[: max(max_chars - 1, 0)] + "…", True


def pair_key(user: str, assistant: str) -> str:
    """A stable key for an input/response pair: ``"pair:"`` + 16 hex digits of its SHA-1.

    The same pair stored twice in one namespace replaces itself (keeping ``created_at``)
    instead of flooding the store with copies.

    Examples
    --------
    >>> pair_key("hello", "hi") == pair_key("hello", "hi")
    True
    """
    digest = hashlib.sha1(f"{user}\x1f{assistant}".encode("utf-8", "surrogatepass")).hexdigest()
    return "pair:" + digest[:16]


def _check_cap(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1 (characters), got {value!r}")
    return value


class PairExtractor:
    """The input/response pair as one memory.

    The memory's ``text`` is the (capped) user input, the situation the response answers, so
    its vector is the embedding of the input; the (capped) response is in
    ``metadata["response"]``. Caps are in characters; a cut side is listed in
    ``metadata["truncated"]`` together with the original lengths.

    Parameters
    ----------
    max_input_chars, max_response_chars : int, default 1000
        Caps per side, >= 1.
    importance : float, default 0.5
        Importance of every pair, in [0, 1].

    Raises
    ------
    ValueError
        If a cap is not an int >= 1 or importance is outside [0, 1].

    Examples
    --------
    >>> [item] = PairExtractor().extract(Turn("Door open?", "Yes.", 0.0, "patrol"))
    >>> item.text, item.metadata["response"]
    ('Door open?', 'Yes.')
    """

    def __init__(self, *, max_input_chars: int = 1000, max_response_chars: int = 1000,
                 importance: float = 0.5) -> None:
        self.max_input_chars = _check_cap(max_input_chars, "max_input_chars")
        self.max_response_chars = _check_cap(max_response_chars, "max_response_chars")
        self.importance = _validate.importance(importance)

    def extract(self, turn: Turn) -> list[MemoryItem]:
        """Return ``[MemoryItem]`` for the pair, or [] when the input is blank.

        Raises
        ------
        InvalidTextError
            If a text is not a str or holds lone surrogates.
        """
        user = _validate.text(turn.user, name="input")
        assistant = _validate.text(turn.assistant, name="response")
        if not user.strip():
            return []
        user_c, cut_in = truncate(user, self.max_input_chars)
        resp_c, cut_out = truncate(assistant, self.max_response_chars)
        meta: dict[str, Any] = dict(_validate.metadata(turn.metadata))
        meta.update({"kind": "pair", "response": resp_c, "timestamp": float(turn.timestamp)})
        truncated = [side for side, cut in (("input", cut_in), ("response", cut_out)) if cut]
        if truncated:
            meta["truncated"] = truncated
            meta["input_chars"] = len(user)
            meta["response_chars"] = len(assistant)
        return [MemoryItem(key=pair_key(user, assistant), text=user_c,
                           importance=self.importance, metadata=meta)]


#: Importance of each fact kind found by :class:`FactExtractor`.
FACT_IMPORTANCE: dict[str, float] = {
    "name": 0.9,
    "reminder": 0.8,
    "occupation": 0.7,
    "home": 0.7,
    "origin": 0.6,
    "age": 0.6,
    "attribute": 0.6,
    "preference": 0.5,
}

# A value runs to the end of its clause: these words or punctuation end it.
_VALUE = r"(?P<value>[^,;.!?\n]+?)"
_END = r"(?=\s*(?:[,;.!?\n]|\bbut\b|\band\b|\bbecause\b|\bso\b|$))"
_I = r"(?:^|\b)(?:i\s*am|i'm|im|i\s+am)"
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(r"(?:\bmy\s+name\s+is|\bcall\s+me|" + _I + r"\s+called)\s+" + _VALUE + _END, re.I)),
    ("occupation", re.compile(r"(?:\bi\s+work\s+as|" + _I + r"\s+working\s+as|\bmy\s+job\s+is)\s+" +
                              _VALUE + _END, re.I)),
    ("home", re.compile(r"\bi\s+(?:live|reside|stay)\s+in\s+" + _VALUE + _END, re.I)),
    ("origin", re.compile(r"(?:\bi\s+come\s+from|" + _I + r"\s+from)\s+" + _VALUE + _END, re.I)),
    ("age", re.compile(_I + r"\s+(?P<value>\d{1,3})\s+years?\s+old", re.I)),
    ("preference", re.compile(r"\bi\s+(?:really\s+)?(?P<verb>love|like|enjoy|hate|dislike|can't\s+stand)"
                              r"\s+" + _VALUE + _END, re.I)),
    ("reminder", re.compile(r"\bremember\s+(?:that\s+)?" + _VALUE + r"(?=\s*(?:[.!?\n]|$))", re.I)),
    ("attribute", re.compile(r"\bmy\s+(?P<attr>(?:[\w'-]+\s+){0,3}?[\w'-]+)\s+(?:is|are)\s+" + _VALUE + _END,
                             re.I)),
]
_NEGATIVE = {"hate", "dislike", "can't stand"}
_TEMPLATES = {
    "name": "The user's name is {v}.",
    "occupation": "The user works as {v}.",
    "home": "The user lives in {v}.",
    "origin": "The user comes from {v}.",
    "age": "The user is {v} years old.",
    "reminder": "Remember: {v}.",
}


def _slug(text: str, limit: int = 48) -> str:
    words = re.findall(r"\w+", text.casefold())
    slug = "-".join(words)[:limit].strip("-")
    return slug or hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _clean(value: str) -> str:
    return " ".join(value.split()).strip(" \"'“”‘’")


class FactExtractor:
    """Rule-based facts from the user's first-person statements; no model.

    Only ``turn.user`` is read (the assistant speaking in the first person says nothing about
    the user). Each fact gets a stable key, so a later statement of the same kind replaces the
    earlier one: ``user.name``, ``user.occupation``, ``user.home``, ``user.origin``,
    ``user.age``, ``user.preference.<thing>`` (so "I hate X" replaces "I love X"),
    ``user.<attribute>`` for "my <attribute> is ..." and ``reminder.<slug>`` for
    "remember that ...". Importance comes from :data:`FACT_IMPORTANCE` (override per kind
    with ``importance``). Values are capped at ``max_value_chars``.

    Parameters
    ----------
    importance : dict, optional
        Per-kind overrides of :data:`FACT_IMPORTANCE`, each in [0, 1].
    max_value_chars : int, default 200

    Raises
    ------
    ValueError
        On an unknown kind or an importance outside [0, 1].

    Examples
    --------
    >>> facts = FactExtractor().extract(Turn("Hi, my name is Ada and I love tea.", "", 0.0, "chat"))
    >>> [(f.key, f.text) for f in facts]
    [('user.name', "The user's name is Ada."), ('user.preference.tea', 'The user loves tea.')]
    """

    def __init__(self, *, importance: Mapping[str, float] | None = None, max_value_chars: int = 200) -> None:
        table = dict(FACT_IMPORTANCE)
        for kind, value in (importance or {}).items():
            if kind not in table:
                raise InvalidArgumentError(f"unknown fact kind {kind!r}; known: {', '.join(sorted(table))}")
            table[kind] = _validate.importance(value)
        self.importance = table
        self.max_value_chars = _check_cap(max_value_chars, "max_value_chars")

    def extract(self, turn: Turn) -> list[MemoryItem]:
        """Return the facts stated in ``turn.user``, first occurrence of each key first.

        A later statement of the same key in the same text wins (it is the user's correction).

        Raises
        ------
        InvalidTextError
            If ``turn.user`` is not a str or holds lone surrogates.
        """
        user = _validate.text(turn.user, name="turn.user")
        found: dict[str, MemoryItem] = {}
        claimed: list[tuple[int, int]] = []
        base = dict(_validate.metadata(turn.metadata))
        for kind, pattern in _RULES:
            for m in pattern.finditer(user):
                span = m.span("value")
                # "my name is X" must not also become the generic attribute "name".
                if any(a <= span[0] < b for a, b in claimed):
                    continue
                value = _clean(m.group("value"))
                if not value:
                    continue
                value, _ = truncate(value, self.max_value_chars)
                item = self._fact(kind, m, value, base, float(turn.timestamp))
                if item is None:
                    continue
                claimed.append(span)
                found.pop(item.key, None)
                found[item.key] = item
        return list(found.values())

    def _fact(self, kind: str, m: re.Match[str], value: str, base: dict, ts: float) -> MemoryItem | None:
        meta = dict(base, kind="fact", fact_kind=kind, value=value, source="user", timestamp=ts)
        if kind == "preference":
            verb = " ".join(m.group("verb").lower().split())
            meta["sentiment"] = "negative" if verb in _NEGATIVE else "positive"
            verb_s = {"can't stand": "can't stand"}.get(verb, verb + "s")
            key, text = f"user.preference.{_slug(value)}", f"The user {verb_s} {value}."
        elif kind == "attribute":
            attr = _clean(m.group("attr")).lower()
            if attr in {"name", "job"}:
                return None
            meta["attribute"] = attr
            key, text = f"user.{_slug(attr)}", f"The user's {attr} is {value}."
        elif kind == "reminder":
            key, text = f"reminder.{_slug(value)}", _TEMPLATES[kind].format(v=value)
        else:
            key, text = f"user.{kind}", _TEMPLATES[kind].format(v=value)
        return MemoryItem(key=key, text=text, importance=self.importance[kind], metadata=meta)


LLM_PROMPT = """Extract durable facts worth remembering from this conversation turn.
Answer with a JSON list only, e.g. [{{"key": "user.name", "text": "The user's name is Ada.", "importance": 0.9}}].
Use stable dotted keys (the same key for the same kind of fact), importance in [0, 1], and [] if nothing.

User: {user}
Assistant: {assistant}
"""


def _json_candidates(raw: str) -> list[Any]:
    """Every JSON value we can recover from an LLM answer, best guess first."""
    text = raw.strip()
    fenced = re.findall(r"```(?:json)?\s*(.*?)```", text, re.S)
    for chunk in [text, *fenced]:
        try:
            return [json.loads(chunk)]
        except ValueError:
            pass
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        try:
            return [json.loads(text[start:end + 1])]
        except ValueError:
            pass
    # Last resort: every flat {...} object that parses on its own (truncated lists, prose).
    out = []
    for obj in re.findall(r"\{[^{}]*\}", text):
        try:
            out.append(json.loads(obj))
        except ValueError:
            continue
    return [out] if out else []


class LLMExtractor:
    """Facts extracted by a caller-supplied LLM.

    ``complete(prompt) -> str`` is called once per turn with ``prompt_template`` filled with
    ``{user}`` and ``{assistant}``. The answer should be a JSON list of
    ``{"key": str, "text": str, "importance": float}``; a fenced block, prose around the list,
    a single object or a truncated list are tolerated. Invalid items are dropped, a missing or
    bad importance becomes ``default_importance``, a missing key becomes ``"fact.<slug of
    text>"``; each repair or drop logs one warning. A failing ``complete`` logs a warning and
    yields []. Nothing raises into the tick.

    Parameters
    ----------
    complete : callable (str) -> str
    prompt_template : str, optional
        Must contain ``{user}`` and ``{assistant}``.
    default_importance : float, default 0.5
    max_items : int, default 20
        At most this many facts per turn.

    Raises
    ------
    TypeError
        If ``complete`` is not callable.
    ValueError
        If the template lacks a placeholder, or a number is out of range.

    Examples
    --------
    >>> ex = LLMExtractor(lambda p: '[{"key": "user.pet", "text": "Has a cat.", "importance": 0.6}]')
    >>> ex.extract(Turn("I have a cat", "Cute!", 0.0, "chat"))[0].key
    'user.pet'
    """

    def __init__(self, complete: Callable[[str], str], *, prompt_template: str = LLM_PROMPT,
                 default_importance: float = 0.5, max_items: int = 20) -> None:
        if not callable(complete):
            raise InvalidArgumentTypeError(f"complete must be callable (str) -> str, got {type(complete).__name__}")
        for placeholder in ("{user}", "{assistant}"):
            if placeholder not in prompt_template:
                raise InvalidArgumentError(f"prompt_template must contain {placeholder}")
        self.complete = complete
        self.prompt_template = prompt_template
        self.default_importance = _validate.importance(default_importance)
        self.max_items = _check_cap(max_items, "max_items")

    def extract(self, turn: Turn) -> list[MemoryItem]:
        """Ask the LLM and return the valid facts (possibly []); never raises."""
        try:
            prompt = self.prompt_template.format(user=turn.user, assistant=turn.assistant)
            raw = self.complete(prompt)
        except Exception as err:  # a user callable: the tick must survive it
            logger.warning("LLMExtractor: completion failed (%s: %s); no facts this turn",
                           type(err).__name__, err)
            return []
        if not isinstance(raw, str):
            logger.warning("LLMExtractor: completion returned %s, not str; no facts", type(raw).__name__)
            return []
        candidates = _json_candidates(raw)
        if not candidates:
            logger.warning("LLMExtractor: no JSON in completion %r; no facts", raw[:80])
            return []
        value = candidates[0]
        entries = value if isinstance(value, list) else [value]
        try:
            base = dict(_validate.metadata(turn.metadata))
        except (TypeError, ValueError) as err:
            logger.warning("LLMExtractor: turn metadata dropped (%s)", err)
            base = {}
        items: dict[str, MemoryItem] = {}
        for i, entry in enumerate(entries):
            item = self._item(i, entry, base, turn.timestamp)
            if item is not None:
                items[item.key] = item
        if len(items) > self.max_items:
            logger.warning("LLMExtractor: %d facts, keeping the first %d", len(items), self.max_items)
        return list(items.values())[: self.max_items]

    def _item(self, i: int, entry: Any, base: dict, ts: Any) -> MemoryItem | None:
        if not isinstance(entry, dict):
            logger.warning("LLMExtractor: item %d is %s, not an object; dropped", i, type(entry).__name__)
            return None
        text = entry.get("text")
        if not isinstance(text, str) or not text.strip():
            logger.warning("LLMExtractor: item %d has no text; dropped", i)
            return None
        try:
            text = _validate.text(" ".join(text.split()))
        except ValueError:
            logger.warning("LLMExtractor: item %d text is not valid Unicode; dropped", i)
            return None
        key = entry.get("key")
        if not isinstance(key, str) or not key.strip() or "\x00" in key:
            if key is not None:
                logger.warning("LLMExtractor: item %d has a bad key %r; derived one from its text", i, key)
            key = "fact." + _slug(text)
        key = key.strip()
        imp = entry.get("importance", self.default_importance)
        ok = isinstance(imp, (int, float)) and not isinstance(imp, bool) and math.isfinite(imp)
        if not ok or not 0.0 <= imp <= 1.0:
            logger.warning("LLMExtractor: item %d importance %r not in [0, 1]; using %s",
                           i, imp, self.default_importance)
            imp = self.default_importance
        try:
            timestamp = float(ts)
        except (TypeError, ValueError):
            timestamp = 0.0
        meta = dict(base, kind="fact", source="llm", timestamp=timestamp)
        try:
            _validate.key(key)
        except ValueError:
            key = "fact." + _slug(text)
        return MemoryItem(key=key, text=text, importance=float(imp), metadata=meta)
