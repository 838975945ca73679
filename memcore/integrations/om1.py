"""A drop-in for OM1's ``SemanticMemoryProvider`` backed by :class:`~memcore.SemanticMemory`.

OM1 (OpenMind's robot runtime) keeps a process-wide ``SemanticMemoryProvider`` in
``src/providers/semantic_memory_provider.py``: its Fuser calls ``retrieve(query, mode)`` every
tick and puts the returned documents into the prompt as a ``RELEVANT MEMORIES`` section, and
the LLM history hook calls ``store(sensory_input, action_response, mode, tick)`` after each
answer. This class has the same constructor (no arguments, one instance per process), the
same ``configure(enabled, top_k, similarity_threshold)``, attributes (``enabled``, ``top_k``,
``similarity_threshold``) and methods, and the same documents (``"Input: ... | Response:
..."``, each side capped at :data:`MAX_TEXT_LENGTH` characters), so OM1 switches by changing
one import::

    from memcore.integrations.om1 import SemanticMemoryProvider

What changes underneath: sentence-transformers + ChromaDB become memcore (the int8 MiniLM
on onnxruntime, hybrid recall), a store no longer blocks the tick (the background writer),
one vector per tick instead of two (the query's is reused for the stored pair), and memories
can be keyed by user as well as mode (``user_id``).

Behaviour kept from OM1, deliberately: a disabled provider does nothing (``retrieve`` returns
``[]``); a failure inside ``store``/``retrieve``/``clear_mode`` is logged and swallowed (a
robot's tick must not die of its memory); a model that does not load disables the provider
with an error in the log. Wrong configuration values raise at once
(:class:`~memcore.errors.InvalidArgumentError`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Mapping

from memcore import _validate
from memcore.errors import InvalidArgumentTypeError

__all__ = ["SemanticMemoryProvider", "MAX_TEXT_LENGTH", "CONFIG_KEYS", "PATH_ENV"]

logger = logging.getLogger(__name__)

#: Characters kept of each side of a memory and of a query (OM1's ``MAX_TEXT_LENGTH``).
MAX_TEXT_LENGTH = 1000

#: OM1 configuration keys -> :meth:`SemanticMemoryProvider.configure` arguments.
CONFIG_KEYS = {"semantic_memory_enabled": "enabled", "semantic_memory_top_k": "top_k",
               "semantic_memory_threshold": "similarity_threshold",
               "semantic_memory_path": "path", "semantic_memory_user_id": "user_id"}

#: Environment variable naming the store directory when ``configure`` gets no ``path``.
PATH_ENV = "MEMCORE_OM1_PATH"

_PREFIX = ("om1",)


def _default_path() -> str:
    from platformdirs import user_data_path

    return os.environ.get(PATH_ENV) or str(user_data_path("memcore") / "om1")


class SemanticMemoryProvider:
    """Semantic memory of an OM1 robot, one namespace per mode (and user).

    ``SemanticMemoryProvider()`` returns the process's one instance (created thread-safely on
    first call); :meth:`reset` closes and forgets it. Nothing is loaded until the provider is
    configured enabled (or first used enabled).

    Memories live in the namespace ``("om1", mode)``, or ``("om1", "user", user_id, mode)``
    once a user is set, in a :class:`~memcore.SemanticMemory` on disk at ``path``.

    Attributes
    ----------
    enabled : bool
        False until :meth:`configure` enables it (OM1's default).
    top_k : int
        Memories per :meth:`retrieve`, default 3.
    similarity_threshold : float
        Minimum cosine similarity of a memory, default 0.3.
    user_id : str or None
        The user whose memories are read and written; None for the robot's shared ones.

    Examples
    --------
    >>> from memcore import HashingEmbedder
    >>> import tempfile
    >>> provider = SemanticMemoryProvider()
    >>> provider.configure(enabled=True, path=tempfile.mkdtemp(), embedder=HashingEmbedder())
    >>> provider.store("A person waves at the robot.", "I wave back.", "greeter", tick=1)
    >>> provider.flush()   # stores are queued to the background writer
    >>> provider.retrieve("a person waves", "greeter")
    ['Input: A person waves at the robot. | Response: I wave back.']
    >>> SemanticMemoryProvider.reset()
    """

    _instance: "SemanticMemoryProvider | None" = None
    _instance_lock = threading.Lock()

    def __new__(cls) -> "SemanticMemoryProvider":
        with cls._instance_lock:
            if cls._instance is None:
                self = super().__new__(cls)
                self._setup()
                cls._instance = self
            return cls._instance

    def _setup(self) -> None:
        self.enabled = False
        self.top_k = 3
        self.similarity_threshold = 0.3
        self.user_id: str | None = None
        self.path: str | None = None
        self._embedder: Any = None
        self._memory: Any = None
        self._lock = threading.RLock()

    @classmethod
    def reset(cls) -> None:
        """Close the instance (writing what is queued) and forget it; the next
        ``SemanticMemoryProvider()`` is a new, unconfigured one."""
        with cls._instance_lock:
            inst, cls._instance = cls._instance, None
        if inst is not None:
            inst.close()

    # ------------------------------------------------------------------ configuration
    def configure(self, enabled: bool = False, top_k: int = 3, similarity_threshold: float = 0.3,
                  *, path: Any = None, user_id: str | None = None, embedder: Any = None) -> None:
        """Set the provider up, as OM1's ``configure``; enabling it loads the model now.

        Parameters
        ----------
        enabled : bool, default False
        top_k : int, default 3
        similarity_threshold : float, default 0.3
            Minimum cosine similarity, in [-1, 1].
        path : str or os.PathLike, optional
            Store directory; ``$MEMCORE_OM1_PATH``, else the user data dir's ``memcore/om1``.
        user_id : str, optional
            Key memories by this user as well as by mode (see :meth:`set_user`).
        embedder : Embedder, optional
            When None: the embedder an existing store was written with (MiniLM or hashing,
            rebuilt as the ``memcore`` command line does), else ``memcore.embedders.default()``.

        Raises
        ------
        InvalidArgumentError, InvalidArgumentTypeError
            On a bad top_k, threshold, enabled or user_id (nothing changes).
        """
        if not isinstance(enabled, bool):
            raise InvalidArgumentTypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        top_k = _validate.top_k(top_k)
        threshold = _validate.threshold(similarity_threshold)
        user_id = self._check_user(user_id)
        with self._lock:
            reopen = (path is not None and str(path) != self.path) or embedder is not None \
                or user_id != self.user_id
            if reopen:
                self._close_memory()
            self.enabled, self.top_k, self.similarity_threshold = enabled, top_k, threshold
            self.user_id = user_id
            if path is not None:
                self.path = os.fspath(path)
            if embedder is not None:
                self._embedder = embedder
            if self.enabled:
                self._ensure_initialized()

    def configure_from(self, config: Any) -> None:
        """:meth:`configure` from an OM1 config: a mapping or an object with the keys of
        :data:`CONFIG_KEYS` (``semantic_memory_enabled``, ``semantic_memory_top_k``,
        ``semantic_memory_threshold``, optional ``semantic_memory_path`` and
        ``semantic_memory_user_id``); absent keys take ``configure``'s defaults.

        Examples
        --------
        >>> p = SemanticMemoryProvider()
        >>> p.configure_from({"semantic_memory_enabled": False, "semantic_memory_top_k": 5})
        >>> p.enabled, p.top_k
        (False, 5)
        >>> SemanticMemoryProvider.reset()
        """
        get = config.get if isinstance(config, Mapping) else \
            (lambda key, default=None: getattr(config, key, default))
        kwargs = {arg: get(key) for key, arg in CONFIG_KEYS.items() if get(key) is not None}
        self.configure(**kwargs)

    def set_user(self, user_id: str | None) -> None:
        """Read and write ``user_id``'s memories from now on (None: the shared ones).

        Switching drains the queued stores of the previous user into their namespaces first.

        Raises
        ------
        InvalidNamespaceError
            If ``user_id`` is empty or holds NUL.
        """
        user_id = self._check_user(user_id)
        with self._lock:
            if user_id != self.user_id:
                self._close_memory()
                self.user_id = user_id

    @staticmethod
    def _check_user(user_id: Any) -> str | None:
        if user_id is not None:
            _validate.namespace(("user", user_id))   # a non-empty str without NUL
        return user_id

    def namespace_prefix(self) -> tuple[str, ...]:
        """``("om1",)``, or ``("om1", "user", user_id)`` with a user set."""
        return _PREFIX if self.user_id is None else _PREFIX + ("user", self.user_id)

    def _ensure_initialized(self) -> Any:
        """The SemanticMemory, opened (model loaded, kernels compiled) on first need; None
        (and the provider disabled, as OM1 does) when it cannot be opened."""
        with self._lock:
            if self._memory is not None:
                return self._memory
            from memcore.agent import SemanticMemory

            if self.path is None:
                self.path = _default_path()
            try:
                os.makedirs(self.path, exist_ok=True)
                self._memory = SemanticMemory(
                    self.path, self._embedder, top_k=self.top_k,
                    threshold=self.similarity_threshold, namespace=self.namespace_prefix(),
                    max_input_chars=MAX_TEXT_LENGTH, max_response_chars=MAX_TEXT_LENGTH)
            except Exception as err:   # OM1: a memory that cannot start disables itself
                logger.error("semantic memory disabled: cannot open %s: %s: %s", self.path,
                             type(err).__name__, err)
                self.enabled = False
                return None
            logger.info("semantic memory at %s (embedder %s, namespace %s)", self.path,
                        getattr(self._memory.embedder, "name", "?"), self.namespace_prefix())
            return self._memory

    def _active(self) -> Any:
        return self._ensure_initialized() if self.enabled else None

    # ------------------------------------------------------------------ the tick
    def store(self, sensory_input: str, action_response: str, mode: str,
              tick: int | None = None) -> None:
        """Remember one tick's input and the action taken, in ``mode``'s namespace.

        Queued to the background writer (returns at once). Blank input is skipped; an error
        is logged, never raised.
        """
        memory = self._active()
        if memory is None:
            return
        try:
            if not isinstance(sensory_input, str) or not sensory_input.strip():
                logger.debug("not storing a blank sensory input (mode=%s)", mode)
                return
            memory.store(sensory_input, str(action_response), mode, background=True,
                         metadata={"mode": mode} if tick is None else {"mode": mode, "tick": tick})
        except Exception as err:
            logger.error("failed to store memory (mode=%s): %s: %s", mode, type(err).__name__, err)

    def retrieve(self, query: str, mode: str, top_k: int | None = None) -> list[str]:
        """The memories of ``mode`` most relevant to ``query``, best first, as OM1 documents
        (``"Input: ... | Response: ..."``); ``[]`` when disabled or on error (logged)."""
        memory = self._active()
        if memory is None:
            return []
        try:
            hits = memory.retrieve(str(query)[:MAX_TEXT_LENGTH], mode,
                                   top_k=self.top_k if top_k is None else top_k,
                                   threshold=self.similarity_threshold)
        except Exception as err:
            logger.error("failed to retrieve memories (mode=%s): %s: %s", mode,
                         type(err).__name__, err)
            return []
        return [_document(h) for h in hits]

    def memories_section(self, inputs: str, mode: str) -> str:
        """The prompt section OM1's Fuser builds from :meth:`retrieve`: ``"\\nRELEVANT
        MEMORIES:\\n1. ...\\n2. ...\\n"``, or "" when nothing is relevant (or the input is
        blank)."""
        if not isinstance(inputs, str) or not inputs.strip():
            return ""
        memories = self.retrieve(inputs, mode)
        if not memories:
            return ""
        return "\nRELEVANT MEMORIES:\n" + "".join(f"{i}. {m}\n" for i, m in enumerate(memories, 1))

    def clear_mode(self, mode: str) -> int:
        """Forget every memory of ``mode`` (this user's, with a user set); returns how many
        (0 when disabled or on error, logged)."""
        memory = self._active()
        if memory is None:
            return 0
        try:
            n = memory.clear_mode(mode)
        except Exception as err:
            logger.error("failed to clear memories of mode %s: %s: %s", mode,
                         type(err).__name__, err)
            return 0
        logger.info("cleared %d memories of mode %s", n, mode)
        return n

    # ------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """Wait until every queued store is written (a no-op when not initialized)."""
        with self._lock:
            memory = self._memory
        if memory is not None:
            memory.flush()

    def _close_memory(self) -> None:
        with self._lock:
            memory, self._memory = self._memory, None
        if memory is not None:
            try:
                memory.close()
            except Exception as err:
                logger.error("closing semantic memory: %s: %s", type(err).__name__, err)

    def close(self) -> None:
        """Write what is queued, consolidate and close the store (reopened on next use)."""
        self._close_memory()


def _document(hit: Any) -> str:
    response = hit.metadata.get("response", "") if hasattr(hit.metadata, "get") else ""
    return f"Input: {hit.text} | Response: {response}"

