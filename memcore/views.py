"""What the front ends (command line, MCP server) show of a store: memories and hits as JSON-ready
dicts, the key derived from a text, a hit's explanation as lines (hints: :mod:`memcore.names`).

Examples
--------
>>> from memcore import HashingEmbedder, LongTermMemory
>>> with LongTermMemory(None, HashingEmbedder(dim=32)) as ltm:
...     m = ltm.put("notes", text_key("buy milk", "cli"), "buy milk")
...     memory_dict(m)["key"]
'cli:9799a972c6b6f616'
"""

from __future__ import annotations

import hashlib
from typing import Any

from memcore.agent import SHORT_JOURNAL
from memcore.names import format_namespace, namespace_hint

__all__ = ["memory_dict", "hit_dict", "text_key", "explanation_lines", "empty_namespace_note",
           "missing_memory_message"]


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


def empty_namespace_note(store: Any, ns: tuple[str, ...]) -> str | None:
    """Why a search of ``ns`` found nothing, when ``ns`` holds no memories: ``None`` if it holds
    some; otherwise ``no memories in namespace NS`` plus where its memories may be (see
    :func:`missing_memory_message`). The command line's ``search`` and the MCP ``recall`` tool
    both show this note.

    Parameters
    ----------
    store : a memcore store
        Anything with ``count(ns)`` and ``namespaces()``.
    ns : tuple of str
        The namespace searched.

    Returns
    -------
    str or None
        e.g. ``"no memories in namespace note; did you mean 'notes'?"``.
    """
    return None if store.count(ns) else f"no memories in {_whereabouts(store, ns)}"


def missing_memory_message(store: Any, ns: tuple[str, ...], key: str) -> str:
    """The message for a ``get`` of a ``key`` that ``ns`` does not hold: ``no memory KEY in
    namespace NS``, plus, when ``ns`` holds no memories at all, where they may be: SemanticMemory's
    short-tier journal (stored but not consolidated into the long tier yet) or the nearest
    namespaces that hold some (``did you mean 'notes'?``).

    Parameters
    ----------
    store : a memcore store
        Anything with ``count(ns)`` and ``namespaces()``.
    ns : tuple of str
        The namespace looked in.
    key : str
        The key not found.

    Returns
    -------
    str
        e.g. ``"no memory 'k' in namespace note; did you mean 'notes'?"``.
    """
    return f"no memory {key!r} in {_whereabouts(store, ns)}"


def _whereabouts(store: Any, ns: tuple[str, ...]) -> str:
    """``namespace NS``, plus, when it holds no memories, where they may be."""
    label = f"namespace {format_namespace(ns)}"
    if store.count(ns):
        return label
    every = store.namespaces()
    journal = (SHORT_JOURNAL,) + ns
    if journal in every:
        return (f"{label}; SemanticMemory's short tier holds {store.count(journal)} "
                f"memories of it, not consolidated into the long tier yet (they are in the "
                f"internal journal namespace {format_namespace(journal)})")
    known = sorted({k[1:] if k[0] == SHORT_JOURNAL else k for k in every})
    hint = namespace_hint(ns, known)
    return label + (f"; {hint}" if hint else "")
