"""The one store factory: a path, a ``postgresql://`` URL or nothing, plus an embedder -> a store.

Every front end opens its store here: the ``memcore`` command line, the MCP server, the OM1
provider and :class:`~memcore.SemanticMemory`. The rules they share:

- ``where``: None keeps a :class:`~memcore.LongTermMemory` in RAM; a ``postgresql://`` or
  ``postgres://`` URL is a :class:`~memcore.stores.postgres.PostgresMemory`
  (``memcore-agent[postgres]``); anything else is a store directory.
- The embedder (:func:`open_store`'s ``embedder``): an embedder object is used as given (the
  store checks it against the name and dim it was written with); ``"minilm"``/``"hashing"``
  are built by name (:func:`build_embedder`); ``"auto"`` is the store's own, rebuilt from its
  recorded name and dim (:func:`matching_embedder`), or the default for a new store; None
  opens an existing store without one (reads, exports, searches with ``query_vector=``).
- A store that does not exist yet is created only by a writable open that may create
  (``create=True``) and has an embedder, and it says so: one line through ``notify`` (the
  ``memcore`` logger at INFO unless the caller passes its own, as the command line does to
  print it on stderr). So does the first use of the MiniLM model on a machine, which prepares
  (derives and checks) its variant for about 15 s.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from memcore import embedders, storage
from memcore.errors import (EmbedderMismatchError, InvalidArgumentError, MemcoreError,
                            StoreNotFoundError)
from memcore.stores.long import LongTermMemory

__all__ = ["EMBEDDERS", "AUTO", "open_store", "build_embedder", "matching_embedder",
           "store_embedder", "own_embedder", "is_url", "describe", "store_exists"]

logger = logging.getLogger("memcore")

#: The embedders :func:`build_embedder` builds by name (``memcore --embedder``).
EMBEDDERS = ("minilm", "hashing", "static")
#: ``embedder="auto"``: the store's own embedder, or the default for a new store.
AUTO = "auto"

Notify = Callable[[str], None]


def is_url(where: Any) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL (a PostgreSQL store).

    (:mod:`memcore.stores.postgres` is imported on first use, here and below, so that
    ``import memcore`` does not load the PostgreSQL backend.)

    Examples
    --------
    >>> is_url("postgresql://localhost/db"), is_url("./memcore-data"), is_url(None)
    (True, False, False)
    """
    from memcore.stores.postgres import is_postgres_url

    return is_postgres_url(where)


def describe(where: Any) -> str:
    """A store's location for messages: a URL without its password, a path as given.

    Examples
    --------
    >>> describe("postgresql://ann:s3cret@db/mem"), describe("robot-memory")
    ('postgresql://ann:***@db/mem', 'robot-memory')
    """
    if where is None:
        return "<in memory>"
    if is_url(where):
        from memcore.stores.postgres import redact

        return redact(where)
    return os.fspath(where)


def store_exists(path: Any) -> bool:
    """Whether ``path`` holds a memcore store (a store header, or namespaces that lost it).

    False only when there is certainly no store there; anything odd (a file in the way, a lost
    header, no permission) is True, so the store's own open reports it.

    Examples
    --------
    >>> import tempfile
    >>> store_exists(tempfile.mkdtemp()), store_exists("no/such/dir")
    (False, False)
    """
    try:
        storage.StoreRoot.require(os.path.abspath(os.fspath(path)))
    except StoreNotFoundError:
        return False
    except Exception:       # noqa: BLE001 -- the store's constructor says what is wrong
        return True
    return True


_noted_model = False


def _note_model_preparation(notify: Notify) -> None:
    """Say once per process that the MiniLM variant is being prepared, when it is not cached."""
    global _noted_model
    if _noted_model:
        return
    _noted_model = True
    try:
        from memcore.models import variants

        if variants.is_built(variants.DEFAULT_VARIANT):
            return
        where = variants.variant_dir(variants.DEFAULT_VARIANT)
    except Exception:       # noqa: BLE001 -- no model here: the embedder's load says why
        return
    notify(f"preparing the MiniLM model for this machine (first use only, about 15 s; cached "
           f"in {where})")


def build_embedder(name: str | None = None, *, notify: Notify | None = None) -> Any:
    """The embedder called ``name``: ``"hashing"`` (384-d unicode hashing), ``"minilm"`` (the
    packaged MiniLM, loaded now), ``"static"`` (word-piece vectors distilled from MiniLM,
    :class:`~memcore.embedders.StaticEmbedder`) or None: the default (MiniLM when its model loads, else
    hashing; :func:`memcore.embedders.default`).

    The first MiniLM load on a machine prepares the model (about 15 s); ``notify`` (default:
    the ``memcore`` logger at INFO) is told so in one line first.

    Raises
    ------
    InvalidArgumentError
        If ``name`` is not one of :data:`EMBEDDERS` or None.
    ModelNotFoundError, ModelChecksumError
        If ``"minilm"`` is asked for and its model cannot be loaded.

    Examples
    --------
    >>> build_embedder("hashing").name
    'hashing-unicode-v1'
    """
    if name == "hashing":
        return embedders.HashingEmbedder(dim=384, mode="unicode")
    if name == "static":
        return embedders.StaticEmbedder().load()
    if name not in (None, "minilm"):
        raise InvalidArgumentError(f"embedder name must be one of {', '.join(EMBEDDERS)}, got "
                                   f"{name!r}")
    _note_model_preparation(notify or logger.info)
    if name == "minilm":
        return embedders.MiniLMEmbedder().load()
    return embedders.default()


def matching_embedder(store: Any, *, notify: Notify | None = None) -> Any:
    """An embedder equal to the one ``store`` was written with (its recorded name and dim).

    Raises
    ------
    EmbedderMismatchError
        If memcore cannot build that embedder by name (the message says what still works).

    Examples
    --------
    >>> from memcore import HashingEmbedder, LongTermMemory
    >>> with LongTermMemory(None, HashingEmbedder(dim=32)) as ltm:
    ...     matching_embedder(ltm).dim
    32
    """
    name, dim = store.embedder_name, store.dim
    candidate = None
    if name.startswith("hashing-"):
        mode = name.split("-")[1]
        if mode in ("unicode", "classic"):
            candidate = embedders.HashingEmbedder(dim=dim, mode=mode)
    elif name.startswith("minilm"):
        _note_model_preparation(notify or logger.info)
        candidate = embedders.MiniLMEmbedder().load()
    elif name.startswith("static-"):
        candidate = embedders.StaticEmbedder().load()
    where = getattr(store, "path", None) or "the store"
    if candidate is None:
        raise EmbedderMismatchError(
            f"{where} was written with embedder {name!r} (dim {dim}), which memcore cannot "
            f"rebuild by name (it rebuilds the minilm, hashing and static embedders); open it from "
            f"Python with that embedder (get, stats, namespaces and export need none)")
    if candidate.name != name or candidate.dim != dim:
        raise EmbedderMismatchError(
            f"{where} was written with embedder {name!r} (dim {dim}); the one this memcore "
            f"builds for that name is {candidate.name!r} (dim {candidate.dim}); open it with "
            f"the embedder it was written with, or reindex it to this one")
    return candidate


def store_embedder(path: Any, *, notify: Notify | None = None) -> Any:
    """The embedder the store directory at ``path`` was written with, rebuilt by
    :func:`matching_embedder` from the name and dim its store header records (no namespace is
    opened; a lost or damaged header falls back to a read-only open, which recovers it or
    says what is wrong).

    Raises
    ------
    StoreNotFoundError
        If there is no store at ``path``.
    EmbedderMismatchError
        If memcore cannot rebuild that embedder by name.

    Examples
    --------
    >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
    >>> path = tempfile.mkdtemp() + "/mem"
    >>> LongTermMemory(path, HashingEmbedder(dim=16)).close()
    >>> store_embedder(path).dim
    16
    """
    try:       # the store header names it: no namespace is opened (a reader opens them all)
        head = storage.read_store_header(os.fspath(path))
    except (OSError, MemcoreError):
        head = None                 # lost, damaged or newer: the full open says what it is
    if head is not None:
        return matching_embedder(_HeaderProbe(os.fspath(path), head["embedder"], head["dim"]),
                                 notify=notify)
    with LongTermMemory.open(path, None, read_only=True) as probe:
        return matching_embedder(probe, notify=notify)


def own_embedder(where: Any, *, create: bool = True, notify: Notify | None = None) -> Any:
    """The embedder of :func:`open_store`'s ``"auto"`` for the store at ``where``: the one an
    existing store was written with (:func:`store_embedder`, :func:`matching_embedder`), else the default
    (:func:`build_embedder`: MiniLM, else hashing) for a new store or a store in RAM (None).

    Parameters
    ----------
    where : str, os.PathLike or None
        A store directory, a ``postgresql://`` URL, or None (a store in RAM).
    create : bool, default True
        Whether a missing store may be created; False raises :class:`StoreNotFoundError`.
    notify : callable(str), optional
        Told of the first MiniLM load on a machine (the ``memcore`` logger at INFO by default).

    Raises
    ------
    StoreNotFoundError
        If there is no store at ``where`` and ``create`` is False.
    EmbedderMismatchError
        If memcore cannot rebuild the store's embedder by name.

    Examples
    --------
    >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory
    >>> path = tempfile.mkdtemp() + "/mem"
    >>> LongTermMemory(path, HashingEmbedder(dim=16)).close()
    >>> own_embedder(path).name
    'hashing-unicode-v1'
    """
    if is_url(where):
        from memcore.stores.postgres import PostgresMemory

        try:
            probe = PostgresMemory(where, None)
        except InvalidArgumentError as err:     # no store in the schema yet
            if not create:
                raise StoreNotFoundError(str(err)) from err
        else:
            with probe:
                return matching_embedder(probe, notify=notify)
    elif where is not None:
        try:
            return store_embedder(where, notify=notify)
        except StoreNotFoundError:
            if not create:
                raise
    return build_embedder(notify=notify)


class _HeaderProbe:
    """What :func:`matching_embedder` reads of a store (its path, embedder name and dim),
    taken from the store header alone."""

    def __init__(self, path: str, embedder_name: str, dim: int):
        self.path, self.embedder_name, self.dim = path, embedder_name, dim


def open_store(where: Any = None, embedder: Any = AUTO, *, read_only: bool = False,
               create: bool = True, lock_timeout: float | None = None,
               notify: Notify | None = None, **options: Any) -> Any:
    """Open (or create) the store at ``where`` with the embedder rule of the module notes.

    Parameters
    ----------
    where : str, os.PathLike or None
        A store directory, a ``postgresql://`` URL, or None (a store in RAM).
    embedder : Embedder, {"auto", "minilm", "hashing"} or None, default "auto"
        ``"auto"``: the store's own embedder (rebuilt from its name and dim), the default
        (MiniLM, else hashing) for a new store. A name builds that embedder; an object is used
        as it is. None: no embedder, for an existing store only.
    read_only : bool, default False
        Open an existing store read-only (no writer lock; never creates). PostgreSQL stores
        have no read-only mode: a server serves readers and writers alike.
    create : bool, default True
        Whether a writable open may create a missing store; False raises
        :class:`StoreNotFoundError` instead.
    lock_timeout : float, optional
        Seconds a store directory waits for its writer lock (the store's default, 1.0, when
        None). PostgreSQL has no writer lock (the server serialises concurrent writers), so
        it does not apply there, as ``read_only``.
    notify : callable(str), optional
        Receives one-line notes: a store being created, the MiniLM model being prepared.
        Default: the ``memcore`` logger at INFO.
    **options
        Keywords of :class:`~memcore.LongTermMemory` or
        :class:`~memcore.stores.postgres.PostgresMemory` (weights, clock, hybrid, threads,
        durability, schema, ...); one the backend does not take raises its TypeError.

    Returns
    -------
    LongTermMemory or PostgresMemory

    Raises
    ------
    StoreNotFoundError
        If there is no store at ``where`` and it may not be created (``read_only``,
        ``create=False`` or no embedder).
    EmbedderMismatchError
        If ``embedder`` differs from the store's, or ``"auto"`` cannot rebuild the store's.
    InvalidArgumentError
        On an unknown embedder name, or a store option the backend rejects.
    StoreLockedError, StoreCorruptedError, FormatVersionError, PostgresError
        As the store's constructor.

    Examples
    --------
    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/mem"
    >>> with open_store(path, "hashing") as store:         # created (a note at INFO)
    ...     _ = store.put("robot", "dock", "the dock is in the hallway")
    >>> with open_store(path, read_only=True) as store:    # its own embedder, rebuilt
    ...     [h.key for h in store.search("robot", "where is the dock?")]
    ['dock']
    """
    notify = notify or logger.info
    if lock_timeout is not None and not is_url(where):
        options["lock_timeout"] = lock_timeout
    if isinstance(embedder, str) and embedder != AUTO:
        embedder = build_embedder(embedder, notify=notify)
    auto = isinstance(embedder, str)
    if is_url(where):
        return _open_postgres(where, embedder, auto, create and not read_only, notify, options)
    if where is None and (read_only or not create):
        raise InvalidArgumentError("read_only and create=False need a path; a store in "
                                   "RAM (where=None) is always new")
    if auto:
        embedder = own_embedder(where, create=create and not read_only, notify=notify)
    if where is None:
        return LongTermMemory(None, embedder, **options)
    if read_only or not create or embedder is None:
        return LongTermMemory.open(where, embedder, read_only=read_only, **options)
    if not store_exists(where):
        storage.layout.claim_store_dir(str(where))  # a foreign directory: its error, no note
        notify(f"no store at {describe(where)}: creating a new one (embedder "
               f"{getattr(embedder, 'name', '?')})")
    return LongTermMemory(where, embedder, **options)


def _open_postgres(url: str, embedder: Any, auto: bool, may_create: bool, notify: Notify,
                   options: dict) -> Any:
    """``open_store`` on a URL. PostgreSQL creates a store whenever it is given an embedder,
    so the schema is first opened without one: a missing store is created only when
    ``may_create`` (and said so), and an existing one is reopened with the embedder."""
    from memcore.stores.postgres import PostgresMemory

    try:
        store = PostgresMemory(url, None, **options)
    except InvalidArgumentError as err:     # no store in the schema (or a bad option)
        if not may_create or embedder is None:
            raise StoreNotFoundError(str(err)) from err
        if auto:
            embedder = build_embedder(notify=notify)
        notify(f"no store at {describe(url)}: creating a new one (embedder {embedder.name})")
        return PostgresMemory(url, embedder, **options)
    if embedder is None:
        return store
    with store:
        if auto:
            embedder = matching_embedder(store, notify=notify)
    return PostgresMemory(url, embedder, **options)
