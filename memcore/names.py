"""Namespaces as people type them: the command line's form, and did-you-mean hints.

A leaf module (json, difflib, errors): the stores' strict lookups (``missing_ok=False``), the
command line and :class:`~memcore.SemanticMemory` word their hints here, once.
"""

from __future__ import annotations

import difflib
import json
from typing import Iterable

from memcore.errors import UnknownNamespaceError

__all__ = ["format_namespace", "namespace_hint", "unknown_namespace"]


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


def unknown_namespace(ns: tuple[str, ...], known: Iterable[tuple[str, ...]]
                      ) -> UnknownNamespaceError:
    """The error of a strict lookup (``missing_ok=False``) of ``ns``, which holds nothing.

    Examples
    --------
    >>> str(unknown_namespace(("note",), [("notes",)]))
    "namespace 'note' holds no memories; did you mean 'notes'?"
    """
    hint = namespace_hint(ns, known)
    return UnknownNamespaceError(f"namespace {format_namespace(ns)!r} holds no memories"
                                 + (f"; {hint}" if hint else ""))
