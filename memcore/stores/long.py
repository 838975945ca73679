"""LongTermMemory: the unbounded long-term tier, in memory or persisted on disk.

Per namespace a ``_Space`` holds column arrays indexed by row -- ``vectors`` (capacity, dim)
float32 unit rows, ``created_at``/``updated_at``/``last_accessed_at`` float64 Unix seconds,
``access_count`` int64, ``importance`` float32, ``alive`` bool -- in RAM (``path=None``) or
memory-mapped from files (see :mod:`memcore.storage` for the format, commit protocol and
recovery), plus a ``key -> row`` dict and the texts. Rows are append-only: a replaced or
deleted key's row is marked dead and reclaimed by :meth:`LongTermMemory.compact`.

Search path (decided by measurement, bench/test_bench_long.py): the fused top-k kernel scans
every row of the namespace once (similarity + decay + importance + alive/filter mask),
straight from the memory maps. On 384-d unit vectors with the default weights it ran at
0.9-1.0x the time of a single-thread FAISS ``IndexFlatIP`` similarity-only search at
1e3, 1e4 and 1e5 rows, while FAISS candidates + the exact top-k bound
(:func:`memcore.ranking.exact_topk`) took 5-6x as long: the recency and importance terms
(up to ``w_recency + w_importance`` = 0.2) keep the bound open for many doublings. So no FAISS
index is kept -- nothing is rebuilt or saved on open, and the vectors are stored once.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import math
import os
import shutil
import threading
import zlib
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from memcore import _validate, storage
from memcore.errors import (
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidVectorError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreCorruptedError,
    StoreLockedError,
)
from memcore.hybrid import HybridWeights, NamespaceRecall
from memcore.query_prep import DefaultQueryPreparer, PreparedQuery, QueryPreparer, identity_preparer
from memcore.stores.base import as_query, sorted_namespaces
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
    system_clock,
)

# The one place this store picks its ranking kernel.
from memcore.kernels import fused_topk  # noqa: E402

__all__ = ["LongTermMemory"]

DEFAULT_DURABILITY = "flush"
EXPORT_FORMAT = "memcore-jsonl"
_EMPTY_META = b"{}"


_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _meta_bytes(meta: Any) -> bytes:
    """Validated metadata as canonical JSON bytes (fast path for the empty dict)."""
    if meta is None or (isinstance(meta, dict) and not meta):
        return _EMPTY_META
    return json.dumps(_validate.metadata(meta), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _flat_meta(meta: Any) -> tuple[bytes, dict] | None:
    """``(_meta_bytes(meta), a fresh copy)`` for a flat dict (str keys, scalar values), with one
    JSON encoding instead of three; None for anything else (the caller takes the exact path).

    For such a dict ``json.loads(json.dumps(d)) == d`` and re-encoding is the identity, so
    the bytes equal :func:`_meta_bytes`' and ``dict(meta)`` equals its parsed copy.
    """
    if type(meta) is not dict:
        return None
    if not meta:
        return _EMPTY_META, {}
    for k, v in meta.items():
        if type(k) is not str or type(v) not in _SCALARS:
            return None
    try:
        return _JSON.encode(meta).encode("utf-8"), dict(meta)
    except (ValueError, UnicodeEncodeError):
        return None


def _stored(ns: Namespace, key: str, text: str, importance: float, metadata: dict,
            created_at: float, updated_at: float, last_accessed_at: float,
            access_count: int) -> StoredMemory:
    """A StoredMemory of already-validated fields, built without the frozen dataclass'
    per-field ``object.__setattr__`` (put_many returns one per item)."""
    m = _new(StoredMemory)
    _setattr(m, "__dict__", {
        "namespace": ns, "key": key, "text": text, "importance": importance,
        "metadata": metadata, "created_at": created_at, "updated_at": updated_at,
        "last_accessed_at": last_accessed_at, "access_count": access_count,
        "tier": MemoryTier.LONG})
    return m


_new = object.__new__
_setattr = object.__setattr__


@contextlib.contextmanager
def _gc_paused(n: int):
    """Pause the cyclic garbage collector while a batch of ``n`` items builds its objects.

    put_many allocates a few container objects per item (metadata copies, the returned
    StoredMemory); at 1e5 items the collections those allocations trigger, each walking the
    whole heap, took as long as the rest of put_many (measured: 20-25k items/s with the
    collector, 50-65k without). Nothing cyclic is created here, so nothing is leaked; the
    collector is re-enabled (if it was enabled) on the way out, exceptions included.
    """
    if n < 4096 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _clean_fast(items: list) -> tuple | None:
    """Validated ``(keys, key_bytes, texts, text_bytes, meta_bytes, metadata copies,
    importances)`` of a batch of plain MemoryItems in bulk, or None when any item needs the
    item-by-item path (which then raises the exact error, or accepts subclasses)."""
    if not all(type(it) is MemoryItem for it in items):
        return None
    keys = [it.key for it in items]
    texts = [it.text for it in items]
    imps = [it.importance for it in items]
    if not (all(type(k) is str for k in keys) and all(type(t) is str and t.strip() for t in texts)
            and all(type(x) is float and 0.0 <= x <= 1.0 for x in imps)):
        return None
    try:
        kb = [k.encode("utf-8") for k in keys]
        tb = [t.encode("utf-8") for t in texts]
    except UnicodeEncodeError:
        return None
    if not all(kb) or b"\0".join(kb).count(b"\0") != len(kb) - 1:
        return None
    flat = []
    for it in items:       # keys, texts and importances are valid: only metadata may raise
        f = _flat_meta(it.metadata)
        if f is None:
            mb = _meta_bytes(it.metadata)
            f = (mb, {} if mb == _EMPTY_META else json.loads(mb))
        flat.append(f)
    mbs, copies = zip(*flat) if flat else ((), ())
    return keys, kb, texts, tb, list(mbs), list(copies), imps


class _Space:
    """One namespace's rows. Not thread-safe by itself: the store's lock guards it."""

    __slots__ = ("ns", "keys", "key_of", "texts", "metas", "imp", "meta_cache", "rows", "cols",
                 "files", "offsets", "recall")

    def __init__(self, ns: Namespace, cols: storage.Columns,
                 files: storage.NamespaceFiles | None):
        self.ns = ns
        self.keys: dict[str, int] = {}
        self.key_of: list[str | None] = []
        self.texts: list[str | None] = []
        self.metas: list[bytes | None] = []
        self.imp: list[float] = []          # exact importance (the float32 column feeds kernels)
        self.meta_cache: dict[int, dict] = {}
        self.rows = 0
        self.cols = cols
        self.files = files
        self.offsets: list[int] = []        # log offset of each row's PUT record (on disk)
        self.recall: NamespaceRecall | None = None   # hybrid indexes, built on first use

    @property
    def live(self) -> int:
        return len(self.keys)

    def meta(self, row: int) -> dict:
        """Parsed metadata of a row, cached (never handed out: callers get fresh copies)."""
        m = self.meta_cache.get(row)
        if m is None:
            m = self.meta_cache[row] = json.loads(self.metas[row])
        return m

    def stored(self, row: int) -> StoredMemory:
        c = self.cols
        return StoredMemory(
            namespace=self.ns, key=self.key_of[row], text=self.texts[row],
            importance=self.imp[row], metadata=json.loads(self.metas[row]),
            created_at=float(c.created_at[row]), updated_at=float(c.updated_at[row]),
            last_accessed_at=float(c.last_accessed_at[row]),
            access_count=int(c.access_count[row]), tier=MemoryTier.LONG)

    def recall_source(self) -> tuple:
        """Live rows in insertion (row) order with texts, vectors and parsed metadata."""
        rows = sorted(self.keys.values())
        return (rows, [self.texts[r] for r in rows],
                np.ascontiguousarray(self.cols.vectors[np.asarray(rows, np.int64)]),
                [json.loads(self.metas[r]) for r in rows])

    def load(self, rep: storage.Replay, read_only: bool) -> None:
        """Adopt a log replay: texts and keys, and the columns derived from the log."""
        n = rep.rows
        self.keys, self.key_of, self.texts, self.metas = rep.keys, rep.key_of, rep.texts, rep.metas
        self.imp = list(rep.importance)
        self.offsets = np.asarray(rep.record_offset, np.int64).tolist()
        for row in rep.dead:
            self.key_of[row] = self.texts[row] = self.metas[row] = None
        self.rows = n
        alive = np.ones(n, np.bool_)
        if rep.dead:
            alive[np.asarray(rep.dead, np.int64)] = False
        derived = {
            "created_at": np.asarray(rep.created_at, np.float64),
            "updated_at": np.asarray(rep.updated_at, np.float64),
            "importance": np.asarray(rep.importance, np.float32),
            "alive": alive,
        }
        c = self.cols
        stats = {
            "last_accessed_at": np.fmax(c.last_accessed_at[:n],
                                        np.asarray(rep.last_accessed_at, np.float64)),
            "access_count": np.maximum(c.access_count[:n],
                                       np.asarray(rep.access_count, np.int64)),
        }
        if not read_only:
            for name, val in {**derived, **stats}.items():
                getattr(c, name)[:n] = val
            return
        # read-only maps cannot be written: keep RAM copies where the files disagree, and
        # always for the access statistics (a read-only search refreshes them in RAM only).
        for name, val in derived.items():
            if not np.array_equal(getattr(c, name)[:n], val):
                setattr(c, name, val)
        for name, val in stats.items():
            setattr(c, name, np.ascontiguousarray(val))


class LongTermMemory:
    """Unbounded long-term memory: namespaced keys with exact fused semantic recall.

    With ``path=None`` the store lives in RAM; with a ``path`` it persists there (format,
    commit protocol and recovery: :mod:`memcore.storage`) and reopening restores every item,
    its vector bit for bit, metadata and lifecycle fields without re-embedding.

    Ranking is the fused score of :class:`~memcore.DecayWeights`
    (``w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance * importance``,
    ``age = now - last_accessed_at`` in seconds), exact over every live row of the namespace.

    Lifecycle: a new key gets ``created_at = updated_at = last_accessed_at = now`` and
    ``access_count = 0``; replacing a key keeps ``created_at`` and ``access_count`` and sets
    ``updated_at = last_accessed_at = now``. ``search`` refreshes what it returns unless
    ``touch=False``; ``get`` never does. Instances are thread-safe (one ``RLock``).

    Durability (``path`` given): ``"flush"`` (default) -- an acknowledged write survives the
    process being killed, at about the cost of one ``write`` syscall; ``"fsync"`` -- it also
    survives power loss, at the cost of two ``fdatasync`` per call; ``"none"`` -- records are
    buffered in the process (1 MiB) until ``flush()``/``close()``: for tests and bulk loads.
    ``put_many``/``put_stored`` commit once per namespace. Access statistics
    (``last_accessed_at``, ``access_count``) refreshed by searches are written to the memory
    maps only: a power loss (not a killed process) may lose the last seconds of them.

    Locking: one writer per path, across processes and within one (``StoreLockedError``
    after ``lock_timeout`` seconds). ``read_only=True`` takes no lock and maps the files
    read-only; it sees the store as of opening. A read-only store's searches refresh access
    statistics in RAM only.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Store directory (created when missing, unless ``read_only``). None keeps the store in
        RAM.
    embedder : Embedder, optional
        Encodes texts. Required to create a store. When None on an existing store, its
        embedder name and dim are taken from the header; then ``put`` needs ``vector=`` and
        ``search`` needs ``query_vector=`` (else :class:`EmbedderMismatchError`).
    weights : DecayWeights, default DecayWeights()
        Default ranking weights.
    clock : Clock, default system_clock
        Returns Unix seconds; every timestamp and recency comes from it.
    durability : {"flush", "fsync", "none"}, default "flush"
    lock_timeout : float, default 1.0
        Seconds to wait for the writer lock; 0 tries once.
    read_only : bool, default False
    repair : bool, default False
        On opening, rewrite damaged namespaces keeping every intact record (see
        :meth:`repair`) instead of raising :class:`StoreCorruptedError`.
    hybrid : HybridWeights, optional
        Default recall of :meth:`search`; ``HybridWeights.similarity()`` (pure cosine, the
        fused formula alone) when None. Other weights rank by hybrid recall
        (:mod:`memcore.hybrid`: BM25 + dense + episodic context from the ``episode`` and
        ``speaker`` metadata). A namespace's hybrid index lives in RAM: it is built from the
        stored texts, vectors and metadata on the first hybrid search after opening (or
        after :meth:`compact`/:meth:`reindex`), then kept current by every write; opening
        stays as fast as without it.
    query_preparer : callable, optional
        ``(text, entities) -> PreparedQuery`` for hybrid recall;
        :class:`~memcore.query_prep.DefaultQueryPreparer` when None.

    Attributes
    ----------
    embedder_name : str
    dim : int
    path : str or None
        Absolute store directory.

    Raises
    ------
    ValueError
        On an unknown durability, a negative or non-finite lock_timeout, ``read_only`` or
        ``repair`` without a path, or no embedder for a new store.
    TypeError
        If weights, hybrid, clock, query_preparer or embedder have the wrong type.
    EmbedderMismatchError
        If the store was written with another embedder (name or dim); the message names both.
    StoreLockedError
        If another writer holds the store for longer than ``lock_timeout``.
    StoreCorruptedError, FormatVersionError
        If the files are damaged beyond a torn tail, or of a newer format version.
    FileNotFoundError
        If ``read_only`` and there is no store at ``path``.

    Examples
    --------
    >>> with LongTermMemory(tmp_path / "mem", HashingEmbedder(dim=64)) as ltm:  # doctest: +SKIP
    ...     _ = ltm.put("robot", "dock", "the charging dock is in the hallway")
    >>> LongTermMemory.open(tmp_path / "mem").count("robot")                   # doctest: +SKIP
    1
    """

    def __init__(self, path: str | os.PathLike | None = None, embedder: Any = None, *,
                 weights: DecayWeights = DecayWeights(), clock: Clock = system_clock,
                 durability: str = DEFAULT_DURABILITY, lock_timeout: float = 1.0,
                 read_only: bool = False, repair: bool = False,
                 hybrid: HybridWeights | None = None,
                 query_preparer: QueryPreparer | None = None):
        if not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {type(weights).__name__}")
        if hybrid is not None and not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        if query_preparer is not None and not callable(query_preparer):
            raise InvalidArgumentTypeError(f"query_preparer must be callable, got {query_preparer!r}")
        if not callable(clock):
            raise InvalidArgumentTypeError(f"clock must be a callable returning Unix seconds, got {clock!r}")
        if durability not in storage.DURABILITY_MODES:
            raise InvalidArgumentError(f"durability must be one of {storage.DURABILITY_MODES}, "
                             f"got {durability!r}")
        try:
            lock_timeout = float(lock_timeout)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(f"lock_timeout must be seconds >= 0, got {lock_timeout!r}") from err
        if not (math.isfinite(lock_timeout) and lock_timeout >= 0):
            raise InvalidArgumentError(f"lock_timeout must be finite seconds >= 0, got {lock_timeout!r}")
        if embedder is not None:
            _check_embedder(embedder)
        self.weights = weights
        self.hybrid = hybrid if hybrid is not None else HybridWeights.similarity()
        self.query_preparer = query_preparer
        self.clock = clock
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.read_only = bool(read_only)
        self.embedder = embedder
        self._lock = threading.RLock()
        self._spaces: dict[Namespace, _Space] = {}
        self._filelock = None
        self._closed = False
        self.repair_report: list[dict] = []
        if path is None:
            if read_only or repair:
                raise InvalidArgumentError("read_only and repair need a path; an in-memory store "
                                 "(path=None) has nothing to open or repair")
            if embedder is None:
                raise InvalidArgumentError("an in-memory LongTermMemory needs an embedder "
                                 "(it fixes the name and dim of its vectors)")
            self.path = None
            self.embedder_name, self.dim = str(embedder.name), int(embedder.dim)
            self._epoch = 0
            return
        self.path = os.path.abspath(os.fspath(path))
        try:
            self._open_disk(bool(repair))
        except BaseException:
            self._release()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, embedder: Any = None, *, read_only: bool = True,
             **kwargs: Any) -> "LongTermMemory":
        """Open an existing store, read-only by default.

        Parameters
        ----------
        path : str or os.PathLike
        embedder : Embedder, optional
            Needed only to encode texts (``put`` without ``vector``, ``search`` without
            ``query_vector``); checked against the store's header.
        read_only : bool, default True
        **kwargs
            Any other :class:`LongTermMemory` keyword (weights, clock, durability, ...).

        Raises
        ------
        FileNotFoundError
            If there is no store at ``path``.
        EmbedderMismatchError, StoreLockedError, StoreCorruptedError, FormatVersionError
            As for the constructor.

        Examples
        --------
        >>> ltm = LongTermMemory.open("memories/")                   # doctest: +SKIP
        >>> ltm.search("robot", "dock", query_vector=q, top_k=3)     # doctest: +SKIP
        """
        root = os.path.abspath(os.fspath(path))
        if storage.read_store_header(root) is None:
            raise FileNotFoundError(f"no memcore store at {root} (missing {storage.STORE_HEADER})")
        return cls(root, embedder, read_only=read_only, **kwargs)

    # ------------------------------------------------------------------ opening / closing

    def _epoch_dir(self, epoch: int | None = None) -> str:
        return os.path.join(self.path, f"ns.{self._epoch if epoch is None else epoch}")

    def _open_disk(self, repair: bool) -> None:
        root = self.path
        if self.read_only:
            header = storage.read_store_header(root)
            if header is None:
                raise FileNotFoundError(
                    f"no memcore store at {root} (missing {storage.STORE_HEADER}); a read-only "
                    "open never creates one")
        else:
            os.makedirs(root, exist_ok=True)
            import filelock

            lock = filelock.FileLock(os.path.join(root, storage.LOCK_FILE),
                                     timeout=self.lock_timeout)
            try:
                lock.acquire()
            except filelock.Timeout:
                raise StoreLockedError(
                    f"{root} is locked by another writer (waited {self.lock_timeout} s); open "
                    "it with LongTermMemory.open(path, read_only=True) to read it") from None
            self._filelock = lock
            header = storage.read_store_header(root)
        emb = self.embedder
        if header is None:
            if emb is None:
                raise InvalidArgumentError(f"{root} holds no store yet; creating one needs an embedder")
            self.embedder_name, self.dim, self._epoch = str(emb.name), int(emb.dim), 0
            os.makedirs(self._epoch_dir(), exist_ok=True)
            storage.write_store_header(root, self.embedder_name, self.dim, 0,
                                       durable=self.durability != "none")
            return
        self.embedder_name, self.dim, self._epoch = header["embedder"], header["dim"], header["epoch"]
        if emb is not None and (str(emb.name) != self.embedder_name or int(emb.dim) != self.dim):
            raise EmbedderMismatchError(
                f"{root} was written with embedder {self.embedder_name!r} (dim {self.dim}), "
                f"but embedder {emb.name!r} (dim {emb.dim}) was given; pass the same embedder, "
                "or open it with that one and call reindex(new_embedder)")
        edir = self._epoch_dir()
        if not self.read_only:
            os.makedirs(edir, exist_ok=True)
            for entry in os.listdir(root):      # leftovers of an interrupted reindex
                if entry.startswith("ns.") and entry != os.path.basename(edir):
                    shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
        if not os.path.isdir(edir):
            raise StoreCorruptedError(f"{edir} is missing (the store header names epoch "
                                      f"{self._epoch})")
        for entry in sorted(os.listdir(edir)):
            full = os.path.join(edir, entry)
            if not entry.startswith("n-"):
                if not self.read_only and (entry.startswith("tmp-") or entry.startswith("trash-")):
                    shutil.rmtree(full, ignore_errors=True)
                continue
            try:
                files, cols, rep = storage.NamespaceFiles.open(
                    full, self.dim, self.durability, self.read_only)
            except StoreCorruptedError:
                if not repair or self.read_only:
                    raise
                self.repair_report.append(storage.repair_namespace(full, self.dim))
                files, cols, rep = storage.NamespaceFiles.open(
                    full, self.dim, self.durability, self.read_only)
            sp = _Space(files.ns, cols, files)
            sp.load(rep, self.read_only)
            self._spaces[files.ns] = sp

    def _release(self) -> None:
        for sp in self._spaces.values():
            if sp.files is not None:
                sp.files.close()
            sp.cols.release()
        self._spaces.clear()
        if self._filelock is not None:
            self._filelock.release()
            self._filelock = None

    def flush(self) -> None:
        """Checkpoint: write buffered records, verify the vectors written since the last
        checkpoint against their records' CRCs, fsync every file, update the headers.

        Raises
        ------
        ValueError
            If the store is closed.
        StoreCorruptedError
            If such a vector no longer matches its record (the message names the vectors file,
            offset and row); that namespace's header keeps its previous checkpoint, and
            :meth:`repair` drops the key.

        Examples
        --------
        >>> ltm.flush()                                              # doctest: +SKIP
        """
        with self._lock:
            self._check_open()
            if self.path is None or self.read_only:
                return
            errors = []
            for sp in self._spaces.values():     # a damaged namespace stops no other one
                try:
                    sp.files.checkpoint(sp.cols, sp.rows, sp.offsets)
                except StoreCorruptedError as err:
                    errors.append(err)
            if errors:
                raise errors[0]

    def close(self) -> None:
        """Checkpoint (see :meth:`flush`), unmap the files and release the writer lock.

        Idempotent. The store cannot be used afterwards.

        Examples
        --------
        >>> ltm.close(); ltm.close()                                  # doctest: +SKIP
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self.path is not None and not self.read_only:
                    self.flush()
            finally:
                self._closed = True
                self._release()

    def __enter__(self) -> "LongTermMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.path is None else repr(self.path)
        return (f"LongTermMemory({where}, embedder={self.embedder_name!r}, dim={self.dim}, "
                f"namespaces={len(self._spaces)}{', read_only' if self.read_only else ''})")

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("this LongTermMemory is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.path} was opened read-only; open it with "
                                     "read_only=False (one writer at a time) to change it")

    def _now(self) -> float:
        now = float(self.clock())
        if not math.isfinite(now):
            raise InvalidArgumentError(f"clock returned {now!r}; it must return finite Unix seconds")
        return now

    def _encode(self, texts: Sequence[str], what: str) -> np.ndarray:
        if self.embedder is None:
            raise EmbedderMismatchError(
                f"this store was opened without an embedder (its vectors come from "
                f"{self.embedder_name!r}, dim {self.dim}); pass {what}=... or open it with "
                "that embedder")
        enc = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        if enc.shape != (len(texts), self.dim):
            raise EmbedderMismatchError(
                f"embedder {self.embedder_name!r} returned shape {enc.shape}, expected "
                f"({len(texts)}, {self.dim})")
        if not np.isfinite(enc).all():
            raise InvalidVectorError(f"embedder {self.embedder_name!r} returned NaN or inf")
        return np.ascontiguousarray(enc)

    def _space(self, ns: Namespace, create: bool) -> _Space | None:
        sp = self._spaces.get(ns)
        if sp is None and create:
            if self.path is None:
                sp = _Space(ns, storage.Columns(self.dim, storage.INITIAL_CAPACITY), None)
            else:
                files, cols = storage.NamespaceFiles.create(self._epoch_dir(), ns, self.dim,
                                                            self.durability)
                sp = _Space(ns, cols, files)
            self._spaces[ns] = sp
        return sp

    def _commit(self, sp: _Space, keys: list[str], texts: list[str], metas: list[bytes],
                imp: list[float], created_at, updated_at, last_accessed_at, access_count,
                vecs: np.ndarray, key_bytes: list[bytes] | None = None,
                text_bytes: list[bytes] | None = None) -> None:
        """Append validated rows to a namespace: columns, then the log (the commit), then RAM.

        Per row: key, text, metadata JSON bytes, exact importance, created_at, updated_at,
        last_accessed_at (float64 Unix seconds) and access_count (int64), in order; optionally
        the UTF-8 keys and texts when the caller has them. Lock held.
        """
        m = len(keys)
        if m == 0:
            return
        n0 = sp.rows
        c = sp.cols
        c.ensure(n0 + m)
        sl = slice(n0, n0 + m)
        c.vectors[sl] = vecs
        c.importance[sl] = imp
        c.created_at[sl] = created_at
        c.updated_at[sl] = updated_at
        c.last_accessed_at[sl] = last_accessed_at
        c.access_count[sl] = access_count
        c.alive[sl] = True
        if sp.files is not None:
            kb = key_bytes if key_bytes is not None else [k.encode("utf-8") for k in keys]
            tb = text_bytes if text_bytes is not None else [t.encode("utf-8") for t in texts]
            base = sp.files.log_bytes
            if m == 1:                               # put(): skip the batch machinery
                blob = storage.encode_put(n0, kb[0], tb[0], metas[0], float(created_at[0]),
                                          float(updated_at[0]), float(last_accessed_at[0]),
                                          int(access_count[0]), imp[0],
                                          zlib.crc32(np.ascontiguousarray(vecs[0], np.float32)))
                offsets = [base]
            else:
                blob, starts = storage.encode_puts(n0, kb, tb, metas, created_at, updated_at,
                                                   last_accessed_at, access_count, imp,
                                                   storage.vector_crcs(vecs))
                offsets = (starts + base).tolist()
            sp.files.append(blob, c)                 # the commit point
            sp.offsets.extend(offsets)
        live = sp.keys
        get = live.get
        if len(set(keys)) == m:                      # no key twice in the batch
            old = [r for r in map(get, keys) if r is not None]
            live.update(zip(keys, range(n0, n0 + m)))
        else:
            old = []
            for i, k in enumerate(keys):
                r = get(k)
                if r is not None:
                    old.append(r)                    # an earlier row, maybe of this batch
                live[k] = n0 + i
        sp.key_of.extend(keys)
        sp.texts.extend(texts)
        sp.metas.extend(metas)
        sp.imp.extend(imp)
        sp.rows = n0 + m
        if old:
            c.alive[np.asarray(old, np.int64)] = False
            key_of, txt, mts = sp.key_of, sp.texts, sp.metas
            for r in old:
                key_of[r] = txt[r] = mts[r] = None
                sp.meta_cache.pop(r, None)
        if sp.recall is not None and sp.recall.indexes:
            for r in old:
                sp.recall.delete(r)
            new = [i for i in range(m) if c.alive[n0 + i]]
            sp.recall.put_many([n0 + i for i in new], [texts[i] for i in new],
                               np.ascontiguousarray(c.vectors[[n0 + i for i in new]]),
                               [json.loads(metas[i]) for i in new])

    # ------------------------------------------------------------------ writes

    def put(self, namespace: NamespaceLike, key: str, text: str, *, importance: float = 0.5,
            metadata: Mapping[str, Any] | None = None, vector: Any = None) -> StoredMemory:
        """Store or replace one memory (one commit).

        Parameters
        ----------
        namespace : str or tuple of str
        key : str
            Non-empty, no NUL.
        text : str
        importance : float, default 0.5
            In [0, 1].
        metadata : dict, optional
            JSON-serialisable; stored as a copy.
        vector : array_like of shape (dim,), optional
            Precomputed embedding of ``text`` (validated, L2-normalised); skips the embedder.

        Returns
        -------
        StoredMemory
            As stored (tier LONG).

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ValueError, TypeError
            On a malformed namespace, key, text, importance or metadata.
        DimensionMismatchError, InvalidVectorError
            If ``vector`` has the wrong dim, holds NaN/inf or is all zeros.
        EmbedderMismatchError
            If there is no vector and the store has no embedder.
        ReadOnlyStoreError
            On a read-only store. Nothing changes when anything raises.

        Examples
        --------
        >>> ltm = LongTermMemory(embedder=HashingEmbedder(dim=64))     # doctest: +SKIP
        >>> ltm.put(("robot", "map"), "dock", "the dock is in the hallway").tier
        <MemoryTier.LONG: 'long'>
        """
        vecs = None if vector is None else _validate.vector(vector, self.dim)[None, :]
        item = MemoryItem(key, text, importance, metadata if metadata is not None else {})
        return self._put_items(namespace, [item], vecs)[0]

    def put_many(self, namespace: NamespaceLike, items: Sequence[MemoryItem], *,
                 vectors: Any = None) -> list[StoredMemory]:
        """Store or replace a batch with one embedder call and one commit.

        A key repeated in the batch ends with its last version.

        Parameters
        ----------
        namespace : str or tuple of str
        items : sequence of MemoryItem
        vectors : array_like of shape (len(items), dim), optional
            Precomputed embeddings (validated, L2-normalised); skips the embedder.

        Returns
        -------
        list of StoredMemory
            One per item, in order.

        Raises
        ------
        TypeError
            If an item is not a MemoryItem.
        ValueError, DimensionMismatchError, InvalidVectorError, EmbedderMismatchError,
        ReadOnlyStoreError
            As for :meth:`put`, or if ``vectors`` has another row count. Nothing changes.

        Examples
        --------
        >>> ltm.put_many("robot", [MemoryItem("a", "left door"), MemoryItem("b", "right door")])
        ...                                                            # doctest: +SKIP
        """
        vecs = None
        items = list(items)
        if vectors is not None:
            vecs = _validate.vectors(vectors, self.dim) if len(items) else \
                np.zeros((0, self.dim), np.float32)
            if vecs.shape[0] != len(items):
                raise InvalidArgumentError(f"vectors has {vecs.shape[0]} rows for {len(items)} items")
        return self._put_items(namespace, items, vecs)

    def _put_items(self, namespace: NamespaceLike, items: list, vecs: np.ndarray | None
                   ) -> list[StoredMemory]:
        self._check_writable()
        ns = _validate.namespace(namespace)
        with _gc_paused(len(items)):
            return self._put_clean(ns, items, vecs)

    def _put_clean(self, ns: Namespace, items: list, vecs: np.ndarray | None
                   ) -> list[StoredMemory]:
        fast = _clean_fast(items)
        if fast is not None:
            keys, kb, texts, tb, mbs, copies, imps = fast
        else:                                        # item by item: exact errors, subclasses
            kb = tb = None
            keys, texts, mbs, imps = [], [], [], []
            for i, it in enumerate(items):
                if not isinstance(it, MemoryItem):
                    raise InvalidArgumentTypeError(f"items[{i}] must be a MemoryItem, got {type(it).__name__}")
                keys.append(_validate.key(it.key))
                texts.append(_validate.memory_text(it.text))
                mbs.append(_meta_bytes(it.metadata))
                imps.append(_validate.importance(it.importance))
            copies = [{} if mb == _EMPTY_META else json.loads(mb) for mb in mbs]
        m = len(keys)
        if vecs is None:
            vecs = self._encode(texts, "vector") if m else np.zeros((0, self.dim), np.float32)
        with self._lock:
            self._check_writable()
            now = self._now()
            if not m:
                return []
            sp = self._spaces.get(ns)
            created = [now] * m
            counts = [0] * m
            get = sp.keys.get if sp is not None else {}.get
            if len(set(keys)) < m or any(r is not None for r in map(get, keys)):
                prior: dict[str, tuple[float, int]] = {}
                for i, k in enumerate(keys):
                    old = prior.get(k)
                    if old is None:
                        row = get(k)
                        if row is not None:
                            old = (float(sp.cols.created_at[row]), int(sp.cols.access_count[row]))
                    created[i], counts[i] = prior[k] = old if old is not None else (now, 0)
            stamp = [now] * m
            sp = self._space(ns, create=True)
            self._commit(sp, keys, texts, mbs, imps, created, stamp, stamp, counts, vecs,
                         kb, tb)
        return list(map(_stored, [ns] * m, keys, texts, imps, copies, created, stamp, stamp,
                        counts))

    def put_stored(self, memories: Sequence[StoredMemory], vectors: Any = None) -> None:
        """Insert or replace memories keeping their lifecycle fields exactly as given.

        The import path of tier moves and :meth:`import_jsonl`: ``created_at``,
        ``updated_at``, ``last_accessed_at`` and ``access_count`` are kept, no embedder runs.
        Memories may span namespaces; each namespace commits once.

        Parameters
        ----------
        memories : sequence of StoredMemory
        vectors : array_like of shape (len(memories), dim), float32
            Their embeddings (rows L2-normalised; an all-zero row, an embedder's vector for a
            text without content, is kept as is).

        Raises
        ------
        TypeError
            If a memory is not a StoredMemory.
        ValueError, InvalidVectorError, DimensionMismatchError
            On invalid fields or vectors (or ``vectors=None``); nothing changes.
        ReadOnlyStoreError

        Examples
        --------
        >>> ltm.put_stored([m], vec[None, :]); ltm.get(m.namespace, m.key).created_at == m.created_at
        ...                                                            # doctest: +SKIP
        True
        """
        self._check_writable()
        memories = list(memories)
        if vectors is None:
            raise InvalidVectorError(f"put_stored needs vectors of shape ({len(memories)}, "
                                     f"{self.dim})")
        vecs = _validate.vectors(vectors, self.dim, allow_zero=True) if memories else \
            np.zeros((0, self.dim), np.float32)
        if memories:   # keep rows that are already unit-norm bit for bit (tier moves, imports)
            raw = np.asarray(vectors, dtype=np.float32).reshape(vecs.shape)
            unit = np.abs(np.linalg.norm(raw.astype(np.float64), axis=1) - 1.0) < 1e-6
            vecs[unit] = raw[unit]
        if vecs.shape[0] != len(memories):
            raise InvalidArgumentError(f"vectors has {vecs.shape[0]} rows for {len(memories)} memories")
        groups: dict[Namespace, list[tuple]] = {}
        rows: dict[Namespace, list[int]] = {}
        for i, m in enumerate(memories):
            if not isinstance(m, StoredMemory):
                raise InvalidArgumentTypeError(f"memories[{i}] must be a StoredMemory, got {type(m).__name__}")
            times = (m.created_at, m.updated_at, m.last_accessed_at)
            if not all(isinstance(t, (int, float, np.floating)) and not isinstance(t, bool)
                       and math.isfinite(t) for t in times):
                raise InvalidArgumentError(f"memories[{i}] ({m.key!r}) has non-finite timestamps {times}")
            if isinstance(m.access_count, bool) or not isinstance(m.access_count, (int, np.integer)) \
                    or m.access_count < 0:
                raise InvalidArgumentError(f"memories[{i}] ({m.key!r}) access_count must be an int >= 0, "
                                 f"got {m.access_count!r}")
            ns = _validate.namespace(m.namespace)
            groups.setdefault(ns, []).append((
                _validate.key(m.key), _validate.text(m.text), _meta_bytes(m.metadata),
                _validate.importance(m.importance), float(m.created_at), float(m.updated_at),
                float(m.last_accessed_at), int(m.access_count)))
            rows.setdefault(ns, []).append(i)
        with self._lock:
            self._check_writable()
            for ns, entries in groups.items():
                k, t, mb, imp, ca, ua, la, ac = (list(col) for col in zip(*entries))
                self._commit(self._space(ns, create=True), k, t, mb, imp,
                             np.asarray(ca, np.float64), np.asarray(ua, np.float64),
                             np.asarray(la, np.float64), np.asarray(ac, np.int64),
                             vecs[rows[ns]])

    def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Remove ``key``; True when it existed. Its vector never matches again.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, ReadOnlyStoreError

        Examples
        --------
        >>> ltm.delete("robot", "missing")                            # doctest: +SKIP
        False
        """
        self._check_writable()
        ns = _validate.namespace(namespace)
        key = _validate.key(key)
        with self._lock:
            self._check_writable()
            sp = self._spaces.get(ns)
            row = sp.keys.get(key) if sp is not None else None
            if row is None:
                return False
            if sp.files is not None:
                sp.files.append(storage.encode_delete(row, key.encode("utf-8")), sp.cols)
            sp.cols.alive[row] = False
            del sp.keys[key]
            sp.key_of[row] = sp.texts[row] = sp.metas[row] = None
            sp.meta_cache.pop(row, None)
            if sp.recall is not None:
                sp.recall.delete(row)
            return True

    def clear(self, namespace: NamespaceLike) -> int:
        """Remove every memory of ``namespace`` (not of namespaces below it); returns how many.

        On disk the namespace directory is renamed away (atomic) and then deleted.

        Raises
        ------
        InvalidNamespaceError, ReadOnlyStoreError

        Examples
        --------
        >>> ltm.clear("robot")                                        # doctest: +SKIP
        0
        """
        self._check_writable()
        ns = _validate.namespace(namespace)
        with self._lock:
            self._check_writable()
            sp = self._spaces.pop(ns, None)
            if sp is None:
                return 0
            self._drop_files(sp)
            return sp.live

    def _drop_files(self, sp: _Space) -> None:
        if sp.files is None:
            return
        sp.files.close()
        sp.cols.release()
        parent = os.path.dirname(sp.files.directory)
        trash = os.path.join(parent, f"trash-{os.path.basename(sp.files.directory)}")
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(sp.files.directory, trash)
        if self.durability != "none":
            storage.fsync_dir(parent)
        shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------------ reads

    def get(self, namespace: NamespaceLike, key: str) -> StoredMemory | None:
        """The memory stored under ``key``, or None. Does not refresh its access fields.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> ltm.get("robot", "missing") is None                       # doctest: +SKIP
        True
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        key = _validate.key(key)
        with self._lock:
            sp = self._spaces.get(ns)
            row = sp.keys.get(key) if sp is not None else None
            return None if row is None else sp.stored(row)

    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None:
        """A copy of the stored vector of ``key``: shape (dim,), float32; None when absent.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> ltm.vector("robot", "dock").shape                         # doctest: +SKIP
        (64,)
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        key = _validate.key(key)
        with self._lock:
            sp = self._spaces.get(ns)
            row = sp.keys.get(key) if sp is not None else None
            return None if row is None else np.array(sp.cols.vectors[row])

    def keys(self, namespace: NamespaceLike) -> list[str]:
        """Live keys of ``namespace`` in insertion (row) order.

        Examples
        --------
        >>> ltm.keys("robot")                                         # doctest: +SKIP
        []
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        with self._lock:
            sp = self._spaces.get(ns)
            return [] if sp is None else sorted(sp.keys, key=sp.keys.__getitem__)

    def _hybrid(self, hybrid: Any) -> HybridWeights:
        if hybrid is None:
            return self.hybrid
        if not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {type(hybrid).__name__}")
        return hybrid

    def _recall_index(self, sp: _Space, hw: HybridWeights):
        if sp.recall is None:
            sp.recall = NamespaceRecall(self.dim, self.query_preparer)
        return sp.recall.index(hw, sp.recall_source)

    def prepare(self, namespace: NamespaceLike, text: str, *,
                hybrid: HybridWeights | None = None) -> PreparedQuery:
        """The query preparer's forms of ``text`` for this namespace (its speakers known).

        With hybrid weights, ``prepared.dense`` is the text whose embedding :meth:`search`
        expects as ``query_vector``; with the similarity preset it is ``text`` itself.
        Builds the namespace's hybrid index if it is missing.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError, TypeError

        Examples
        --------
        >>> ltm.prepare("robot", "where is the dock?").lexical           # doctest: +SKIP
        'dock'
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        text = _validate.text(text)
        hw = self._hybrid(hybrid)
        if hw.is_similarity:
            return identity_preparer(text)
        with self._lock:
            sp = self._spaces.get(ns)
            if sp is None or not sp.keys:
                return (self.query_preparer or DefaultQueryPreparer())(text, ())
            return self._recall_index(sp, hw).prepare(text)

    def _alive_mask(self, sp: _Space, q: MemoryQuery) -> np.ndarray:
        n = sp.rows
        alive = sp.cols.alive[:n]
        if q.filter:
            alive = np.zeros(n, np.bool_)
            match = _validate.matches_filter
            for row in sp.keys.values():
                if match(sp.meta(row), q.filter):
                    alive[row] = True
        return alive

    def _hybrid_moments(self, q: MemoryQuery, qvec: np.ndarray, hw: HybridWeights
                        ) -> np.ndarray:
        """:meth:`HybridIndex.moments` of the namespace for a validated query (zeros when
        empty): for :class:`~memcore.TwoTierMemory`'s pooled statistics. Internal."""
        with self._lock:
            sp = self._spaces.get(q.namespace)
            if sp is None or not sp.keys:
                return np.zeros((3, 3))
            idx = self._recall_index(sp, hw)
            return idx.moments(idx.prepare(q.text), qvec, weights=hw,
                               alive=self._alive_mask(sp, q)[:idx.n_rows])

    def entities(self, namespace: NamespaceLike, *,
                 hybrid: HybridWeights | None = None) -> list[str]:
        """Speaker names of the namespace's memories (hybrid recall's known entities).

        Raises
        ------
        InvalidNamespaceError, TypeError

        Examples
        --------
        >>> ltm.entities("robot")                                        # doctest: +SKIP
        []
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        hw = self._hybrid(hybrid)
        if hw.is_similarity:
            hw = HybridWeights.hybrid()
        with self._lock:
            sp = self._spaces.get(ns)
            if sp is None or not sp.keys:
                return []
            return self._recall_index(sp, hw).entities()

    def search(self, query: MemoryQuery | NamespaceLike, text: str | None = None, *,
               top_k: int = 5, threshold: float = -1.0, weights: DecayWeights | None = None,
               filter: Mapping[str, Any] | None = None, touch: bool = True,
               query_vector: Any = None, hybrid: HybridWeights | None = None
               ) -> list[MemoryHit]:
        """Rank a namespace's live memories for a query by the exact fused score.

        ``score = w_similarity * sim + w_recency * 2 ** (-age / half_life) + w_importance * imp``
        with ``sim`` the cosine similarity and ``age = now - last_accessed_at`` seconds.
        Candidates need ``sim >= threshold`` and must match ``filter`` (applied before top-k).
        Ties rank by lower row (older insertion).

        Parameters
        ----------
        query : MemoryQuery or str or tuple of str
            A query, or the namespace of the form ``search(namespace, text, ...)``.
        text : str, optional
            The query text; empty or whitespace-only returns [] (no semantic signal).
        top_k : int, default 5
            At most this many hits; every qualifying hit when fewer exist (no padding).
        threshold : float, default -1.0
        weights : DecayWeights, optional
            The store's ``weights`` when None.
        filter : dict, optional
            Equality, ``$in``, ``$ne``, ``$eq`` on top-level metadata keys.
        touch : bool, default True
            Refresh ``last_accessed_at = now`` and ``access_count += 1`` of returned memories
            (in RAM only for a read-only store).
        query_vector : array_like of shape (dim,), optional
            Precomputed embedding of the query; the embedder is not called. With hybrid
            weights it should embed ``self.prepare(namespace, text).dense`` (what the store
            encodes itself).
        hybrid : HybridWeights, optional
            The store's ``hybrid`` when None. Anything but the similarity preset ranks by
            hybrid recall (:mod:`memcore.hybrid`): ``score`` is then the fused z-score,
            ``similarity`` the query's cosine with the memory's combined (memory + episode
            context) embedding, which ``threshold`` bounds; ``weights.w_similarity`` scales
            the dense weight.

        Returns
        -------
        list of MemoryHit
            Best first, tier LONG; ``recency``/``last_accessed_at`` are the values ranking
            used (before this search's refresh). An all-zero query embedding returns [].

        Raises
        ------
        ValueError, TypeError
            On a bad top_k, threshold, filter, weights or call form.
        InvalidVectorError, DimensionMismatchError
            On a bad ``query_vector``.
        EmbedderMismatchError
            If the store has no embedder and no ``query_vector`` is given.

        Examples
        --------
        >>> [h.key for h in ltm.search("robot", "where is the dock?", top_k=1)]  # doctest: +SKIP
        ['dock']
        """
        self._check_open()
        q = as_query(query, text, top_k=top_k, threshold=threshold, weights=weights,
                     filter=filter, touch=touch)
        qvec = None
        if query_vector is not None:
            qvec = _validate.vector(query_vector, self.dim, name="query_vector")
        if not q.text.strip():
            return []
        w = q.weights if q.weights is not None else self.weights
        hw = self._hybrid(hybrid)
        prepared = None
        if not hw.is_similarity:
            prepared = self.prepare(q.namespace, q.text, hybrid=hw)
            if w.w_similarity != 1.0:
                hw = replace(hw, dense=hw.dense * w.w_similarity)
        elif hw.dense != 1.0:
            w = replace(w, w_similarity=w.w_similarity * hw.dense)
        if qvec is None:
            qvec = self._encode([q.text if prepared is None else prepared.dense],
                                "query_vector")[0]
            if not qvec.any():
                return []
        with self._lock:
            self._check_open()
            sp = self._spaces.get(q.namespace)
            if sp is None or not sp.keys:
                return []
            now = self._now()
            n = sp.rows
            c = sp.cols
            alive = self._alive_mask(sp, q)
            k = min(q.top_k, sp.live)
            if prepared is None:
                ids = np.empty(k, np.int64)
                scores = np.empty(k, np.float32)
                sims = np.empty(k, np.float32)
                m = int(fused_topk(qvec, c.vectors[:n], c.last_accessed_at[:n],
                                   c.importance[:n], alive, now, w.half_life, w.w_similarity,
                                   w.w_recency, w.w_importance, q.threshold, ids, scores, sims))
            else:
                idx = self._recall_index(sp, hw)
                n = idx.n_rows
                res = idx.search(prepared, qvec, top_k=k, weights=hw, decay=w, now=now,
                                 last_accessed_at=c.last_accessed_at[:n],
                                 importance=c.importance[:n], alive=alive[:n],
                                 threshold=q.threshold)
                ids, scores, sims, m = res.ids, res.scores, res.sims, res.count
            rows = ids[:m]
            hits = []
            for row, score, sim in zip(rows.tolist(), scores[:m].tolist(), sims[:m].tolist()):
                t = float(c.last_accessed_at[row])
                hits.append(MemoryHit(
                    key=sp.key_of[row], text=sp.texts[row], score=score, similarity=sim,
                    recency=0.5 ** (max(now - t, 0.0) / w.half_life),
                    importance=sp.imp[row], tier=MemoryTier.LONG,
                    metadata=json.loads(sp.metas[row]), namespace=q.namespace,
                    created_at=float(c.created_at[row]), last_accessed_at=t))
            if q.touch and m:
                c.last_accessed_at[rows] = now
                c.access_count[rows] += 1
            return hits

    def touch(self, namespace: NamespaceLike, keys: Iterable[str]) -> int:
        """Refresh ``last_accessed_at = now`` and ``access_count += 1`` of the given keys.

        What ``search`` does to the memories it returns, for callers that merge results
        themselves (:class:`~memcore.TwoTierMemory`). Missing keys are ignored.

        Returns
        -------
        int
            How many keys were refreshed.

        Raises
        ------
        InvalidNamespaceError, InvalidTextError

        Examples
        --------
        >>> ltm.touch("robot", ["nothing"])                            # doctest: +SKIP
        0
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        keys = [_validate.key(k) for k in keys]
        with self._lock:
            sp = self._spaces.get(ns)
            if sp is None:
                return 0
            rows = np.array([sp.keys[k] for k in dict.fromkeys(keys) if k in sp.keys], np.int64)
            if rows.shape[0]:
                sp.cols.last_accessed_at[rows] = self._now()
                sp.cols.access_count[rows] += 1
            return int(rows.shape[0])

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        """Sorted namespaces holding at least one memory, under ``prefix`` (whole segments).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> ltm.namespaces(("acme",))                                 # doctest: +SKIP
        []
        """
        self._check_open()
        with self._lock:
            return sorted_namespaces([ns for ns, sp in self._spaces.items() if sp.keys], prefix)

    def count(self, namespace: NamespaceLike) -> int:
        """Number of live memories in ``namespace`` (0 when unknown).

        Raises
        ------
        InvalidNamespaceError

        Examples
        --------
        >>> ltm.count("robot")                                        # doctest: +SKIP
        0
        """
        self._check_open()
        ns = _validate.namespace(namespace)
        with self._lock:
            sp = self._spaces.get(ns)
            return 0 if sp is None else sp.live

    def stats(self) -> dict[Namespace, dict[str, int]]:
        """Per namespace: ``live`` memories and ``rows`` used (live + garbage).

        Examples
        --------
        >>> ltm.stats()                                               # doctest: +SKIP
        {}
        """
        self._check_open()
        with self._lock:
            return {ns: {"live": sp.live, "rows": sp.rows}
                    for ns, sp in sorted(self._spaces.items())}

    # ------------------------------------------------------------------ maintenance

    def _live_rows(self, sp: _Space) -> list[int]:
        return sorted(sp.keys.values())

    def _rebuild(self, sp: _Space, rows: list[int], vecs: np.ndarray, epoch_dir: str | None,
                 generation: int, log: bytes | None = None) -> _Space:
        """A new space holding ``rows`` of ``sp`` (with ``vecs``) as a fresh generation.

        With ``log`` (the namespace's current log, vectors unchanged: compaction) the live
        rows' PUT records are copied and patched (:func:`memcore.storage.copy_puts`) instead
        of re-encoded; the bytes are the same.
        """
        c = sp.cols
        idx = np.asarray(rows, np.int64)
        n = len(rows)
        columns = {name: np.ascontiguousarray(getattr(c, name)[idx]) for name in
                   ("created_at", "updated_at", "last_accessed_at", "access_count")}
        keys = [sp.key_of[r] for r in rows]
        texts = [sp.texts[r] for r in rows]
        metas = [sp.metas[r] for r in rows]
        imp = [sp.imp[r] for r in rows]
        columns["importance"] = imp
        offsets: list[int] = []
        if epoch_dir is None:
            cols = storage.Columns(vecs.shape[1], max(n, 1))
            files = None
            cols.vectors[:n] = vecs
            for name, values in columns.items():
                getattr(cols, name)[:n] = values
            cols.alive[:n] = True
        else:
            directory = os.path.join(epoch_dir, storage.namespace_dirname(sp.ns))
            os.makedirs(directory, exist_ok=True)
            try:
                if log is not None:
                    blob, starts = storage.copy_puts(
                        log, np.asarray(sp.offsets, np.int64)[idx],
                        columns["last_accessed_at"], columns["access_count"])
                else:
                    blob, starts = storage.encode_puts(
                        0, [k.encode("utf-8") for k in keys], [t.encode("utf-8") for t in texts],
                        metas, columns["created_at"], columns["updated_at"],
                        columns["last_accessed_at"], columns["access_count"], imp,
                        storage.vector_crcs(vecs))
                cols, records, log_bytes = storage.write_generation_blob(
                    directory, sp.ns, vecs.shape[1], generation, blob, vecs, columns)
            except BaseException:
                probe = storage.Columns.__new__(storage.Columns)
                probe.dim, probe.directory, probe.generation = vecs.shape[1], directory, generation
                probe.remove_files()
                try:
                    os.unlink(os.path.join(directory, f"log.{generation}"))
                except FileNotFoundError:
                    pass
                raise
            files = storage.NamespaceFiles(directory, sp.ns, vecs.shape[1], generation,
                                           self.durability, False)
            files.records, files.log_bytes = records, log_bytes
            files.checkpoint_rows = n                # write_generation_blob's header
            offsets = starts.tolist()
        new = _Space(sp.ns, cols, files)
        new.keys = dict(zip(keys, range(n)))
        new.key_of, new.texts, new.metas, new.imp = keys, texts, metas, imp
        new.offsets = offsets
        new.rows = n
        return new

    def compact(self, namespace: NamespaceLike | None = None) -> int:
        """Rewrite namespaces keeping only live rows; returns how many dead rows were dropped.

        Crash-safe on disk: the new generation's files are complete and fsynced before the
        header naming them replaces the old one; a crash at any point leaves either the old or
        the new generation, both valid. A namespace left without live rows is removed. Every
        live vector is checked against its record's CRC before it is copied.

        Parameters
        ----------
        namespace : str or tuple of str, optional
            Only this namespace; every namespace when None.

        Raises
        ------
        InvalidNamespaceError, ReadOnlyStoreError
        StoreCorruptedError
            If a live vector does not match its record's CRC (naming the vectors file, offset
            and row); that namespace is left as it was, and :meth:`repair` drops the key.

        Examples
        --------
        >>> ltm.compact()                                             # doctest: +SKIP
        0
        """
        self._check_writable()
        only = None if namespace is None else _validate.namespace(namespace)
        dropped = 0
        with self._lock:
            self._check_writable()
            targets = [only] if only is not None else list(self._spaces)
            for ns in targets:
                sp = self._spaces.get(ns)
                if sp is None:
                    continue
                dead = sp.rows - sp.live
                if not sp.keys:
                    self._drop_files(sp)
                    del self._spaces[ns]
                    dropped += dead
                    continue
                if dead == 0:
                    continue
                rows = self._live_rows(sp)
                vecs = np.ascontiguousarray(sp.cols.vectors[rows])
                if sp.files is None:
                    new = self._rebuild(sp, rows, vecs, None, 0)
                else:
                    sp.files.flush_pending()
                    with open(sp.files.log_path, "rb") as f:
                        log = f.read(sp.files.log_bytes)
                    offsets = np.asarray(sp.offsets, np.int64)[rows]
                    storage.verify_vectors(    # never launder a damaged vector into gen g+1
                        vecs, storage.record_vector_crcs(log, offsets), rows,
                        sp.cols.path("vectors"), offsets, "compact() wrote nothing")
                    new = self._rebuild(sp, rows, vecs, self._epoch_dir(),
                                        sp.files.generation + 1, log)
                    sp.files.close()
                    sp.cols.release()
                    sp.cols.remove_files()
                    try:
                        os.unlink(sp.files.log_path)
                    except FileNotFoundError:
                        pass
                self._spaces[ns] = new
                dropped += dead
        return dropped

    def reindex(self, embedder: Any, *, batch_size: int = 256, progress: bool = True) -> int:
        """Re-embed every text with a new embedder and switch the store to it.

        On disk a complete new epoch (``ns.<e+1>/``) is written and fsynced, then the store
        header naming the new embedder and epoch replaces the old one (the commit point); a
        crash before that leaves the old store intact. Dead rows are dropped on the way.

        Parameters
        ----------
        embedder : Embedder
        batch_size : int, default 256
            Texts per ``encode`` call.
        progress : bool, default True
            Show a tqdm progress bar (on stderr).

        Returns
        -------
        int
            Memories re-embedded.

        Raises
        ------
        TypeError
            If ``embedder`` lacks ``encode``/``name``/``dim``.
        ValueError
            If ``batch_size < 1``.
        EmbedderMismatchError, InvalidVectorError
            If the embedder returns a wrong shape or NaN/inf (nothing changes).
        ReadOnlyStoreError

        Examples
        --------
        >>> ltm.reindex(MiniLMEmbedder(), progress=False)             # doctest: +SKIP
        42
        """
        from tqdm.auto import tqdm

        self._check_writable()
        _check_embedder(embedder)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        name, dim = str(embedder.name), int(embedder.dim)
        with self._lock:
            self._check_writable()
            plan = [(ns, sp, self._live_rows(sp)) for ns, sp in sorted(self._spaces.items())
                    if sp.keys]
            total = sum(len(r) for _, _, r in plan)
            new_vecs = {}
            with tqdm(total=total, desc="reindex", unit="memory", disable=not progress) as bar:
                for ns, sp, rows in plan:
                    texts = [sp.texts[r] for r in rows]
                    parts = []
                    for s in range(0, len(texts), batch_size):
                        enc = np.asarray(embedder.encode(texts[s:s + batch_size]), np.float32)
                        if enc.shape != (len(texts[s:s + batch_size]), dim):
                            raise EmbedderMismatchError(
                                f"embedder {name!r} returned shape {enc.shape}, expected "
                                f"({len(texts[s:s + batch_size])}, {dim})")
                        if not np.isfinite(enc).all():
                            raise InvalidVectorError(f"embedder {name!r} returned NaN or inf")
                        parts.append(enc)
                        bar.update(enc.shape[0])
                    new_vecs[ns] = np.ascontiguousarray(np.concatenate(parts))
            new_epoch = self._epoch + 1
            edir = None if self.path is None else self._epoch_dir(new_epoch)
            if edir is not None:
                shutil.rmtree(edir, ignore_errors=True)
                os.makedirs(edir)
            spaces = {}
            try:
                for ns, sp, rows in plan:
                    spaces[ns] = self._rebuild(sp, rows, new_vecs[ns], edir, 0)
                if edir is not None:
                    storage.fsync_dir(edir)
                    storage.write_store_header(self.path, name, dim, new_epoch, durable=True)
            except BaseException:
                for new in spaces.values():
                    if new.files is not None:
                        new.files.close()
                    new.cols.release()
                if edir is not None:
                    shutil.rmtree(edir, ignore_errors=True)
                raise
            old_dir = None if self.path is None else self._epoch_dir()
            for sp in self._spaces.values():
                if sp.files is not None:
                    sp.files.close()
                sp.cols.release()
            self._spaces = spaces
            self._epoch = new_epoch
            self.embedder, self.embedder_name, self.dim = embedder, name, dim
            if old_dir is not None:
                shutil.rmtree(old_dir, ignore_errors=True)
            return total

    def repair(self) -> list[dict]:
        """Re-verify every file on disk and rewrite damaged namespaces from intact records.

        Each namespace's log is re-scanned and every live row's vector checked against its
        record's CRC. A damaged namespace is rewritten as a new generation (crash-safe, as
        :meth:`compact`): records with a bad frame or CRC are skipped, a key whose vector fails
        its CRC is dropped (never served with another row's vector). Opening with
        ``repair=True`` does the same for namespaces that fail to open.

        Returns
        -------
        list of dict
            One ``{"namespace", "kept", "dropped", "skipped"}`` per rewritten namespace.

        Raises
        ------
        ReadOnlyStoreError
            On a read-only store, or an in-memory one (nothing to repair: ValueError).

        Examples
        --------
        >>> ltm.repair()                                              # doctest: +SKIP
        []
        """
        self._check_writable()
        if self.path is None:
            raise InvalidArgumentError("an in-memory LongTermMemory has no files to repair")
        report = []
        with self._lock:
            self._check_writable()
            for sp in self._spaces.values():
                try:
                    sp.files.checkpoint(sp.cols, sp.rows, sp.offsets)
                except StoreCorruptedError:
                    pass        # its header keeps the last good checkpoint: reopened below
            for ns in list(self._spaces):
                sp = self._spaces[ns]
                directory = sp.files.directory
                try:
                    files, cols, rep = storage.NamespaceFiles.open(
                        directory, self.dim, self.durability, False)
                    bad = storage._first_bad_vector(cols.vectors, rep, 0)
                    files.close()
                    cols.release()
                    if bad is None:
                        continue
                except StoreCorruptedError:
                    pass
                sp.files.close()
                sp.cols.release()
                del self._spaces[ns]
                report.append(storage.repair_namespace(directory, self.dim))
                files, cols, rep = storage.NamespaceFiles.open(
                    directory, self.dim, self.durability, False)
                new = _Space(files.ns, cols, files)
                new.load(rep, False)
                self._spaces[ns] = new
        return report

    # ------------------------------------------------------------------ export / import

    def export_jsonl(self, path: str | os.PathLike) -> int:
        """Write every live memory to a JSON Lines file; returns how many.

        Line 1: ``{"format": "memcore-jsonl", "version": 1, "embedder": name, "dim": dim}``;
        then one object per memory: ``namespace`` (list), ``key``, ``text``, ``importance``,
        ``metadata``, ``created_at``, ``updated_at``, ``last_accessed_at``, ``access_count``
        and ``vector`` (base64 of the little-endian float32 bytes: bit-exact).

        Raises
        ------
        OSError
            If the file cannot be written.

        Examples
        --------
        >>> ltm.export_jsonl(tmp_path / "mem.jsonl")                  # doctest: +SKIP
        3
        """
        self._check_open()
        n = 0
        tmp = os.fspath(path) + ".tmp"
        with self._lock, open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"format": EXPORT_FORMAT, "version": 1,
                                "embedder": self.embedder_name, "dim": self.dim}) + "\n")
            for ns, sp in sorted(self._spaces.items()):
                c = sp.cols
                for row in self._live_rows(sp):
                    m = sp.stored(row)
                    vec = np.ascontiguousarray(c.vectors[row], dtype="<f4").tobytes()
                    f.write(json.dumps({
                        "namespace": list(ns), "key": m.key, "text": m.text,
                        "importance": m.importance, "metadata": m.metadata,
                        "created_at": m.created_at, "updated_at": m.updated_at,
                        "last_accessed_at": m.last_accessed_at, "access_count": m.access_count,
                        "vector": base64.b64encode(vec).decode("ascii")},
                        ensure_ascii=False) + "\n")
                    n += 1
        os.replace(tmp, os.fspath(path))
        return n

    def import_jsonl(self, path: str | os.PathLike, *, batch_size: int = 4096) -> int:
        """Insert (or replace) the memories of a :meth:`export_jsonl` file; returns how many.

        Lifecycle fields are kept. Vectors are used bit for bit when the file's embedder name
        and dim equal this store's; otherwise the texts are re-embedded with this store's
        embedder (moving memories to a store with another embedder).

        Parameters
        ----------
        path : str or os.PathLike
        batch_size : int, default 4096
            Memories per commit.

        Raises
        ------
        ValueError
            If the file is not a memcore export or a line is malformed (naming the line).
        EmbedderMismatchError
            If re-embedding is needed and the store has no embedder.
        ReadOnlyStoreError

        Examples
        --------
        >>> LongTermMemory(embedder=emb).import_jsonl(tmp_path / "mem.jsonl")  # doctest: +SKIP
        3
        """
        self._check_writable()
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        path = os.fspath(path)
        n = 0
        with open(path, "r", encoding="utf-8") as f:
            head = _json_line(f.readline(), path, 1)
            if head.get("format") != EXPORT_FORMAT:
                raise InvalidArgumentError(f"{path} line 1 is not a {EXPORT_FORMAT} header: {head!r}")
            if not isinstance(head.get("version"), int) or head["version"] > 1:
                raise InvalidArgumentError(f"{path} has export version {head.get('version')!r}; this "
                                 "memcore reads version 1")
            same = head.get("embedder") == self.embedder_name and head.get("dim") == self.dim
            batch: list[StoredMemory] = []
            vecs: list[np.ndarray] = []

            def commit() -> None:
                if not batch:
                    return
                if same:
                    v = np.stack(vecs)
                else:
                    v = self._encode([m.text for m in batch], "vectors in the export")
                self.put_stored(batch, v)
                batch.clear()
                vecs.clear()

            for lineno, line in enumerate(f, start=2):
                if not line.strip():
                    continue
                obj = _json_line(line, path, lineno)
                try:
                    mem = StoredMemory(
                        namespace=tuple(obj["namespace"]), key=obj["key"], text=obj["text"],
                        importance=obj["importance"], metadata=obj["metadata"],
                        created_at=obj["created_at"], updated_at=obj["updated_at"],
                        last_accessed_at=obj["last_accessed_at"],
                        access_count=obj["access_count"], tier=MemoryTier.LONG)
                    if same:
                        raw = base64.b64decode(obj["vector"], validate=True)
                        vec = np.frombuffer(raw, dtype="<f4")
                        if vec.shape != (self.dim,):
                            raise InvalidArgumentError(f"vector has {vec.shape[0]} values, expected "
                                             f"{self.dim}")
                        vecs.append(vec.astype(np.float32))
                except (KeyError, TypeError, ValueError) as err:
                    raise InvalidArgumentError(f"{path} line {lineno} is not a valid memory: "
                                     f"{type(err).__name__}: {err}") from err
                batch.append(mem)
                if len(batch) >= batch_size:
                    commit()
                n += 1
            commit()
        return n


def _json_line(line: str, path: str, lineno: int) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as err:
        raise InvalidArgumentError(f"{path} line {lineno} is not JSON: {err}") from err
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{path} line {lineno} must be a JSON object")
    return obj


def _check_embedder(embedder: Any) -> None:
    dim = getattr(embedder, "dim", None)
    if (not callable(getattr(embedder, "encode", None)) or not isinstance(dim, (int, np.integer))
            or isinstance(dim, bool) or dim < 1 or not isinstance(getattr(embedder, "name", None), str)):
        raise InvalidArgumentTypeError(f"embedder must have encode(), a str name and an int dim >= 1, got "
                        f"{type(embedder).__name__}")
