"""What the front ends (command line, MCP server) show of a store: memories and hits as JSON-ready
dicts, the key derived from a text, and the did-you-mean hint for a namespace that holds nothing.

Examples
--------
>>> from memcore import HashingEmbedder, LongTermMemory
>>> with LongTermMemory(None, HashingEmbedder(dim=32)) as ltm:
...     m = ltm.put("notes", text_key("buy milk", "cli"), "buy milk")
...     memory_dict(m)["key"], namespace_hint(("note",), ltm.namespaces())
('cli:9799a972c6b6f616', "did you mean 'notes'?")
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any, Iterable

__all__ = ["memory_dict", "hit_dict", "text_key", "format_namespace", "namespace_hint"]


def memory_dict(m: Any) -> dict[str, Any]:
    """A :class:`~memcore.StoredMemory` as a JSON-ready dict (times in Unix seconds).

    Examples
    --------
    >>> from memcore import HashingEmbedder, LongTermMemory
    >>> with LongTermMemory(None, HashingEmbedder(dim=32)) as ltm:
    ...     sorted(memory_dict(ltm.put(("agent", "chat"), "k", "hello")))[:4]
    ['access_count', 'created_at', 'importance', 'key']
    """
    return {"namespace": list(m.namespace), "key": m.key, "text": m.text,
            "importance": m.importance, "metadata": dict(m.metadata), "created_at": m.created_at,
            "updated_at": m.updated_at, "last_accessed_at": m.last_accessed_at,
            "access_count": m.access_count, "tier": m.tier.value}


def hit_dict(h: Any) -> dict[str, Any]:
    """A :class:`~memcore.MemoryHit` as a JSON-ready dict (its score and the signals shown).

    Examples
    --------
    >>> from memcore import HashingEmbedder, LongTermMemory
    >>> with LongTermMemory(None, HashingEmbedder(dim=32)) as ltm:
    ...     _ = ltm.put("notes", "k", "the red door")
    ...     [(d["key"], d["namespace"], d["tier"]) for d in map(hit_dict, ltm.search("notes", "red door"))]
    [('k', ['notes'], 'long')]
    """
    d = {"key": h.key, "text": h.text, "score": h.score, "similarity": h.similarity,
         "recency": h.recency, "importance": h.importance, "tier": h.tier.value,
         "metadata": dict(h.metadata), "namespace": list(h.namespace),
         "created_at": h.created_at, "last_accessed_at": h.last_accessed_at}
    if h.explanation is not None:
        d["explanation"] = h.explanation
    return d


def explanation_lines(e: dict) -> list[str]:
    """A hit's ``explanation`` (:func:`memcore.recall.score.explained`) as text lines: one
    per signal (contribution = weight x signal, z-normalised where the statistics say), then
    the fused score and how ``score`` follows.

    Examples
    --------
    >>> e = {"contributions": {"similarity": 0.5, "recency": 0.0, "importance": 0.0},
    ...      "signals": {"similarity": 0.5, "recency": 1.0, "importance": 0.5},
    ...      "weights": {"similarity": 1.0, "recency": 0.0, "importance": 0.0},
    ...      "normalisation": {}, "fused": 0.5, "weight_scale": None, "score": 0.5}
    >>> explanation_lines(e)[0]
    'similarity       +0.5000  = 1 x 0.5'
    """
    out = []
    for name, c in e["contributions"].items():
        line = f"{name:<16} {c:+8.4f}"
        if name in e["signals"]:
            x, w = e["signals"][name], e["weights"][name]
            z = e["normalisation"].get(name)
            line += (f"  = {w:g} x {x:.4g}" if z is None else
                     f"  = {w:g} x z({x:.4g}; mean {z['mean']:.4g}, std {z['std']:.4g})")
        out.append(line)
    scale = e["weight_scale"]
    out.append(f"{'fused':<16} {e['fused']:+8.4f}" + (
        "  = score" if scale is None else
        f"  -> score = Phi({e['fused']:.4f} / {scale:g}) = {e['score']:.4f}"))
    return out


def text_key(text: str, prefix: str) -> str:
    """The default key of a memory: ``prefix:`` + 16 hex digits of the SHA-1 of its text, so
    storing the same text twice keeps one memory.

    Examples
    --------
    >>> text_key("hello", "cli")
    'cli:aaf4c61ddcc5e8a2'
    """
    return f"{prefix}:" + hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def format_namespace(ns: tuple[str, ...]) -> str:
    """A namespace as the command line takes it: one segment as itself, else a JSON list.

    Examples
    --------
    >>> format_namespace(("notes",)), format_namespace(("agent", "chat"))
    ('notes', '["agent", "chat"]')
    """
    if len(ns) == 1 and not ns[0].startswith("["):
        return ns[0]
    return json.dumps(list(ns), ensure_ascii=False)


def namespace_hint(ns: tuple[str, ...], known: Iterable[tuple[str, ...]], *,
                   limit: int = 3) -> str:
    """What to say when ``ns`` holds nothing but the store has ``known`` namespaces.

    In order: namespaces that end with ``ns`` under a longer prefix (a
    :class:`~memcore.SemanticMemory` keeps mode ``chat`` in ``("agent", "chat")``), then the
    names closest to it (difflib, cutoff 0.6), at most ``limit``; "" when none is near.

    Examples
    --------
    >>> namespace_hint(("chat",), [("agent", "chat"), ("notes",)])
    'did you mean \\'["agent", "chat"]\\'? (SemanticMemory keeps a mode under its prefix: ("agent", mode) by default)'
    >>> namespace_hint(("note",), [("notes",), ("nodes",), ("robot",)])
    "did you mean 'notes' or 'nodes'?"
    >>> namespace_hint(("kitchen",), [("notes",)])
    ''
    """
    known = [tuple(k) for k in known if tuple(k) != tuple(ns)]
    prefixed = [k for k in known if len(k) > len(ns) and k[-len(ns):] == tuple(ns)][:limit]
    if prefixed:
        return (f"did you mean {_alternatives(prefixed)}? (SemanticMemory keeps a mode under "
                f"its prefix: (\"agent\", mode) by default)")
    names = {format_namespace(k): k for k in known}
    close = difflib.get_close_matches(format_namespace(ns), list(names), n=limit, cutoff=0.6)
    return f"did you mean {_alternatives([names[c] for c in close])}?" if close else ""


def _alternatives(namespaces: list) -> str:
    quoted = [repr(format_namespace(k)) for k in namespaces]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
