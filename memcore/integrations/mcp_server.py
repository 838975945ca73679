"""memcore as an MCP server: ``memcore mcp --store PATH`` (``pip install 'memcore-agent[mcp]'``).

Serves five tools over stdio with the official MCP Python SDK (``mcp`` 2.x, ``MCPServer``):

- ``remember(text, namespace, key, importance, metadata)``: store (or replace) one memory;
- ``recall(query, namespace, top_k, threshold, filter, explain)``: the most relevant memories,
  best first (hybrid recall with the default MiniLM embedder, as
  :class:`~memcore.LongTermMemory`); with ``explain`` each hit's ``explanation``, its score's
  terms one per signal (:func:`memcore.recall.score.explained`);
- ``get(key, namespace)``, ``forget(key, namespace)``, ``list_namespaces(prefix)``.

A namespace is a str (one segment, ``"a/b"`` included) or a list of str segments, as in the
library. ``filter`` is the store's metadata filter, passed through unchanged (``{"room":
"kitchen"}``, ``{"room": {"$in": [...]}}``, ...); a malformed one is a tool error.

Design
------
- stdout is the protocol: logging goes to stderr only, and nothing in memcore prints.
- Writes never block a recall. The SDK runs each tool call in a worker thread and serves
  requests concurrently; every write goes to one writer thread (so writes keep their order)
  that embeds the text before taking the store's lock, and a recall embeds its query in its
  own thread and hands the access refresh of what it returns to the writer. A recall waits
  at most for one write's commit (under the store's lock), never for an embedding. On Linux
  the writer thread runs niced (:data:`WRITER_NICENESS`), so on a busy CPU a recall's
  embedding goes first.
  ``remember`` answers once its memory is written, so a following ``recall`` finds it.
- The store is opened for writing (one writer process per store: a second server on the same
  path fails with the locked-store message) with the embedder it was written with, or the
  default embedder for a new store, as the ``memcore`` command line does.
- Start-up loads the model and compiles the kernels (and each namespace's hybrid index), so
  the first recall is as fast as the others.

Client configuration (Claude Desktop's ``claude_desktop_config.json``)::

    {"mcpServers": {"memcore": {"command": "memcore",
                                "args": ["mcp", "--store", "/home/me/.memcore"]}}}
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memcore import __version__, _validate
from memcore.errors import (InvalidArgumentTypeError, InvalidTextError, MemcoreError,
                            MemoryNotFoundError, MissingDependencyError, install_hint)
from memcore.open import AUTO, open_store
from memcore.views import (empty_namespace_note, hit_dict, memory_dict, missing_memory_message,
                           text_key)

__all__ = ["MemoryTools", "build_server", "serve"]

logger = logging.getLogger(__name__)

Namespace = str | list[str]


def _namespace(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, (str, tuple)):
        raise InvalidArgumentTypeError(
            f"namespace must be a str or a list of str, got {type(value).__name__}")
    return _validate.namespace(value)


#: How much nicer (lower CPU priority) the writer thread runs than the recalls, on Linux.
WRITER_NICENESS = 5


def _lower_priority() -> None:
    """Run the calling thread (the writer) at a lower CPU priority, so on a busy machine
    a recall's embedding gets the CPU before a background write's (Linux: the niceness of
    one thread; elsewhere nothing)."""
    if sys.platform.startswith("linux") and hasattr(os, "setpriority"):
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid)
                           + WRITER_NICENESS)
        except OSError as err:   # e.g. a sandbox refusing it: writes still work
            logger.debug("could not lower the writer thread's priority: %s", err)


class MemoryTools:
    """The tools of the MCP server over one store, independent of the transport.

    Every method takes and returns JSON-ready values (the tool's arguments and result).

    Parameters
    ----------
    path : str or os.PathLike
        The store directory or ``postgresql://`` URL; created (with the default embedder, and
        a log line at INFO) when absent (:func:`memcore.open.open_store`).
    embedder : {"minilm", "hashing"} or Embedder, optional
        A name as ``memcore --embedder``, or any embedder object (e.g. a
        :class:`~memcore.embedders.CallableEmbedder`; the store checks it against the one it
        was written with); the store's own embedder when None.

    Raises
    ------
    StoreLockedError
        If another process writes to the store.
    EmbedderMismatchError
        If the store was written with an embedder the command line cannot build.

    Examples
    --------
    >>> tools = MemoryTools("memcore-data", embedder="hashing")          # doctest: +SKIP
    >>> tools.remember("The spare key is under the blue pot.")["key"]     # doctest: +SKIP
    'mcp:4b0c...'
    """

    def __init__(self, path: Any, *, embedder: Any = None) -> None:
        self.store = open_store(path, AUTO if embedder is None else embedder, lock_timeout=1.0)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcore-mcp-writer",
                                          initializer=_lower_priority)
        self._closed = threading.Event()

    def __enter__(self) -> "MemoryTools":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Finish queued writes and close the store. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._writer.shutdown(wait=True)
        self.store.close()

    def warmup(self) -> None:
        """Load the model, compile the ranking kernels and build every namespace's hybrid
        index, without changing the store (searches peek with ``touch=False``)."""
        with open_store(None, self.store.embedder) as scratch:
            scratch.put("warmup", "a", "the robot warms up its memory")
            scratch.put("warmup", "b", "warm up")
            scratch.search("warmup", "warm up", top_k=1, touch=False)
        for ns in self.store.namespaces():
            self.store.search(ns, "warm up", top_k=1, touch=False)

    # ------------------------------------------------------------------ the tools
    def remember(self, text: str, namespace: Namespace = "default", key: str | None = None,
                 importance: float = 0.5, metadata: dict[str, Any] | None = None) -> dict:
        """Store (or replace) one memory; returns it as stored.

        The key defaults to one derived from the text (``mcp:`` + 16 hex digits of its SHA-1),
        so remembering the same text twice keeps one memory. Runs on the writer thread and
        returns once the memory is written (``created_at``/``updated_at`` in Unix seconds).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, InvalidArgumentError, InvalidArgumentTypeError
            On a bad namespace, blank text, key, importance outside [0, 1] or metadata that
            is not a JSON object; nothing is written.
        InvalidTextError
            Also if the text has no content for the embedder (it could never be recalled).
        """
        ns = _namespace(namespace)
        key = key if key is not None else text_key(text, "mcp")
        future = self._writer.submit(self._put, ns, key, text, importance, metadata)
        return memory_dict(future.result())

    def _put(self, ns: tuple, key: str, text: str, importance: float, metadata: Any) -> Any:
        """On the writer thread: embed (outside the store's lock), refuse a text without
        content, then write."""
        _validate.memory_text(text)
        vec = self.store.embed([text])[0]
        if not vec.any():
            raise InvalidTextError(
                f"text {text[:80]!r} has no content for embedder {self.store.embedder_name!r}; "
                f"it could never be recalled")
        return self.store.put(ns, key, text, importance=importance, metadata=metadata,
                              vector=vec)

    def recall(self, query: str, namespace: Namespace = "default", top_k: int = 5,
               threshold: float | None = None, filter: dict[str, Any] | None = None,
               explain: bool = False) -> list:
        """The memories of ``namespace`` most relevant to ``query``, best first.

        ``threshold`` is the minimum cosine similarity (none by default); ``filter`` the
        metadata filter; ``explain`` adds each hit's ``explanation``. Recalled memories count as accessed (``last_accessed_at``,
        ``access_count``), refreshed by the writer thread once the answer is ready, so the
        refresh (a write) is not on the recall's path.

        Raises
        ------
        InvalidNamespaceError, InvalidArgumentError, InvalidArgumentTypeError
            On a bad namespace, top_k, threshold outside [-1, 1] or a malformed filter.
        """
        ns = _namespace(namespace)
        hits = self.store.search(ns, query, top_k=top_k, filter=filter, touch=False,
                                 threshold=-1.0 if threshold is None else threshold,
                                 explain=bool(explain))
        if hits:   # the access refresh is a write: the writer thread does it, after answering
            self._writer.submit(self.store.touch, ns, [h.key for h in hits])
        return [hit_dict(h) for h in hits]

    def why_empty(self, namespace: Namespace = "default") -> str | None:
        """Why a recall of ``namespace`` can find nothing: ``None`` when it holds memories,
        otherwise the note the command line's ``search`` shows
        (:func:`memcore.views.empty_namespace_note`: ``no memories in namespace NS; did you
        mean ...?``)."""
        return empty_namespace_note(self.store, _namespace(namespace))

    def get(self, key: str, namespace: Namespace = "default") -> dict:
        """One memory by key.

        Raises
        ------
        MemoryNotFoundError
            (a LookupError) If ``namespace`` holds no ``key``.
        """
        ns = _namespace(namespace)
        found = self.store.get(ns, key)
        if found is None:
            raise MemoryNotFoundError(missing_memory_message(self.store, ns, key))
        return memory_dict(found)

    def forget(self, key: str, namespace: Namespace = "default") -> dict:
        """Delete one memory; ``deleted`` says whether it existed."""
        ns = _namespace(namespace)
        deleted = self._writer.submit(self.store.delete, ns, key).result()
        return {"deleted": bool(deleted), "namespace": list(ns), "key": key}

    def list_namespaces(self, prefix: Namespace | None = None) -> list:
        """Every namespace (under ``prefix``, whole segments) with its memory count."""
        pre = None if prefix is None else _namespace(prefix)
        return [{"namespace": list(ns), "count": self.store.count(ns)}
                for ns in self.store.namespaces(pre)]


def build_server(tools: MemoryTools) -> Any:
    """An ``mcp.server.mcpserver.MCPServer`` exposing ``tools``' five methods.

    Raises
    ------
    ImportError
        If the MCP SDK is not installed (``pip install 'memcore-agent[mcp]'``).
    """
    _check_sdk()
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    def run(method: Any, *args: Any) -> Any:
        """``method(*args)``; bad input becomes a ToolError carrying memcore's message (the
        model reads it and can correct the call); anything else stays a crash."""
        try:
            return method(*args)
        except (MemcoreError, ValueError, TypeError, LookupError) as err:
            raise ToolError(f"{type(err).__name__}: {err}") from err

    server = MCPServer(
        name="memcore", version=__version__,
        instructions="Long-term memory. `remember` facts worth keeping; `recall` them by "
                     "meaning before answering. Namespaces separate users or topics.")

    @server.tool()
    def remember(text: str, namespace: Namespace = "default", key: str | None = None,
                 importance: float = 0.5, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store a memory (replacing the one with the same key). importance is in [0, 1];
        metadata is a JSON object that recall's filter can match."""
        return run(tools.remember, text, namespace, key, importance, metadata)

    @server.tool()
    def recall(query: str, namespace: Namespace = "default", top_k: int = 5,
               threshold: float | None = None,
               filter: dict[str, Any] | None = None, explain: bool = False) -> dict[str, Any]:
        """The memories most relevant to query, best first. threshold: minimum cosine
        similarity in [-1, 1]; filter: metadata conditions, e.g. {"room": "kitchen"},
        {"room": {"$in": ["kitchen", "hall"]}}, {"room": {"$ne": "garage"}}; explain: add
        each hit's score terms, one per signal, that sum to its fused score. With no hits in
        a namespace that holds no memories, note says so and names the nearest namespaces."""
        hits = run(tools.recall, query, namespace, top_k, threshold, filter, explain)
        note = None if hits else run(tools.why_empty, namespace)
        return {"hits": hits} if note is None else {"hits": hits, "note": note}

    @server.tool()
    def get(key: str, namespace: Namespace = "default") -> dict[str, Any]:
        """One memory by key."""
        return run(tools.get, key, namespace)

    @server.tool()
    def forget(key: str, namespace: Namespace = "default") -> dict[str, Any]:
        """Delete one memory by key."""
        return run(tools.forget, key, namespace)

    @server.tool()
    def list_namespaces(prefix: Namespace | None = None) -> dict[str, Any]:
        """Namespaces (under prefix) and how many memories each holds."""
        return {"namespaces": run(tools.list_namespaces, prefix)}

    return server


def serve(path: Any, *, embedder: Any = None, warmup: bool = True) -> int:
    """Open the store, warm up and serve the tools over stdio until the client disconnects.

    Returns the exit status (0). Logging goes to stderr; stdout carries only the protocol.

    Raises
    ------
    ImportError, MemcoreError, OSError
        From :func:`build_server` or :class:`MemoryTools` (the caller reports them).
    """
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="memcore mcp: %(levelname)s: %(message)s", force=True)
    _check_sdk()   # before the store is opened and the model loaded
    with MemoryTools(path if isinstance(path, str) else os.fspath(path),
                     embedder=embedder) as tools:
        server = build_server(tools)
        if warmup:
            tools.warmup()
        logger.info("serving %s (embedder %s) over stdio", tools.store.path,
                    tools.store.embedder_name)
        server.run("stdio")
    return 0


def _check_sdk() -> None:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError("memcore mcp needs the MCP Python SDK 2.x: "
                                     + install_hint("mcp")) from err
