"""Where a store's files live and what they are named: headers, lock, epochs, namespace
directories (the only module that spells a file name; see :mod:`memcore.storage`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Sequence

import numpy as np

from memcore.errors import (
    ForeignDirectoryError,
    FormatVersionError,
    MemcoreError,
    StoreCorruptedError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    StorePathError,
    StorePermissionError,
)

FORMAT_VERSION = 2
#: The store header's version of a store that holds a pack (format 3: format 2 plus the
#: shared pack of small namespaces, :mod:`memcore.storage`); its namespaces are format 2.
PACK_VERSION = 3
#: The oldest on-disk format this memcore reads (read-only; ``memcore migrate`` converts it).
OLDEST_VERSION = 1
STORE_FORMAT = "memcore-ltm"
NAMESPACE_FORMAT = "memcore-ltm-namespace"
STORE_HEADER = "memcore.json"
#: A second copy of the store header, written just before it.
STORE_HEADER_COPY = "memcore.copy.json"
NAMESPACE_HEADER = "header.json"
#: Written once when a namespace directory is made: its namespace (what rebuilds a lost
#: or damaged ``header.json``; the directory name's hash checks it).
NAMESPACE_ID = "namespace.json"
LOCK_FILE = "LOCK"
DURABILITY_MODES = ("fsync", "flush", "none")
EPOCH_PREFIX = "ns."          # ns.<epoch>/: the namespaces of one epoch
NAMESPACE_PREFIX = "n-"       # n-<slug>-<hash>/: one namespace
TMP_PREFIX = "tmp-"           # a namespace directory being created
TRASH_PREFIX = "trash-"       # a namespace directory being deleted

#: name, dtype, file suffix of every per-row column (vectors are separate: (capacity, dim)).
COLUMNS = (
    ("created_at", np.float64, "f64"),
    ("updated_at", np.float64, "f64"),
    ("last_accessed_at", np.float64, "f64"),
    ("access_count", np.int64, "i64"),
    ("importance", np.float32, "f32"),
    ("alive", np.bool_, "u8"),
)

#: Format 2: ``alive`` is no column file (RAM, snapshotted at checkpoints); each row's PUT
#: record offset is one.
COLUMNS_V2 = tuple(c for c in COLUMNS if c[0] != "alive") + (("record_offset", np.int64, "i64"),)

#: name, dtype, suffix of the files a format-2 checkpoint writes (``<name>.<g>.c<c>.<suffix>``).
CHECKPOINT_FILES = (
    ("alive", np.bool_, "u8"),          # (rows,) the live flags of the checkpointed rows
    ("keyhash", np.uint64, "u64"),      # (live,) key hashes, ascending
    ("keyrow", np.int64, "i64"),        # (live,) the row of each hash's key
)


# ---------------------------------------------------------------------------------- owned names
#
# The owned-file rule: memcore creates, modifies and deletes only the names below (and a
# directory only once nothing but those is left in it). A user's file in a store directory,
# its epoch directories or its namespace directories is never touched; a non-empty directory
# that is not a store is refused before anything is created in it (:func:`claim_store_dir`).

_NS_DIR = r"n-[a-z0-9_-]{0,40}-[0-9a-f]{32}"          # :func:`namespace_dirname`
_COLUMN_STEMS = "|".join(sorted({c[0] for c in COLUMNS + COLUMNS_V2}
                               | {"vectors", "expiry", "rowcheck", "nsid"}))
_OWNED = {
    # the store's root: headers (and their temp files), the lock, epochs, quarantine files
    # (export files: a temp file, then renamed), the namespace catalog of each epoch
    "root": re.compile(r"(memcore(\.copy)?\.json(\.tmp)?|" + re.escape(LOCK_FILE)
                       + r"|ns\.\d+|quarantine\.\d+\.jsonl(\.tmp)?|catalog\.\d+\.log(\.tmp)?)\Z"),
    # an epoch directory: namespaces, one being created (tmp-...-<pid>) or deleted (trash-)
    "epoch": re.compile(rf"({_NS_DIR}|tmp-{_NS_DIR}-\d+|trash-{_NS_DIR})\Z"),
    # a namespace directory: headers, log, columns (+ TTL column, check file), checkpoint files, the
    # hybrid index's arrays and state, the approximate index and its sidecar
    "namespace": re.compile(
        r"((header|namespace)\.json(\.tmp)?|log\.\d+"
        rf"|({_COLUMN_STEMS})\.\d+\.(f32|f64|i64|u8)"
        r"|(" + "|".join(c[0] for c in CHECKPOINT_FILES) + r")\.\d+\.c\d+\.(u8|u64|i64)"
        r"|hx\d+\.[a-z0-9_]+\.\d+\.i\d+\.[a-z0-9]+"
        r"|ann\.\d+\.faiss(\.json)?(\.tmp)?)\Z"),
}
_INSIDE = {"root": "epoch", "epoch": "namespace"}   # what an owned directory holds


def owned_name(kind: str, name: str) -> bool:
    """Whether ``name`` is one memcore gives an entry of a ``kind`` directory.

    Parameters
    ----------
    kind : {"root", "epoch", "namespace"}
        The store's root, an epoch directory ``ns.<e>/`` or a namespace directory.
    name : str
        An entry's base name.

    Examples
    --------
    >>> owned_name("root", "ns.3"), owned_name("root", "ns.backup")
    (True, False)
    >>> owned_name("namespace", "log.0"), owned_name("namespace", "important.txt")
    (True, False)
    """
    return _OWNED[kind].match(name) is not None


def remove_owned(path: str, kind: str) -> bool:
    """Delete what memcore owns in directory ``path`` (a ``kind`` directory, see
    :func:`owned_name`; owned subdirectories likewise), then ``path`` itself once it is empty.
    Anything else stays, byte for byte; errors are ignored (cleanup retries on the next open).

    Returns
    -------
    bool
        Whether ``path`` is gone.
    """
    if os.path.islink(path):          # never follow a link out of the store
        return False
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for entry in entries:
        if not owned_name(kind, entry):
            continue
        full = os.path.join(path, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                if kind in _INSIDE:
                    remove_owned(full, _INSIDE[kind])
            else:
                os.unlink(full)
        except OSError:
            pass
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def _is_store_header(path: str) -> bool | None:
    """True: a memcore store header (any version); False: a JSON object of something else
    (a user's file that happens to have the name); None: missing or unreadable (a damaged
    header is still memcore's name)."""
    try:
        obj = read_json(path, "store header")
    except (OSError, StoreCorruptedError):
        return None
    return obj.get("format") == STORE_FORMAT


def store_dir_kind(path: str) -> str:
    """What a store path is, for the owned-file rule.

    Returns
    -------
    str
        ``"missing"`` (nothing there), ``"empty"`` (an empty directory), ``"store"`` (it has
        memcore's store header or its copy, or a namespace directory whose name and
        ``namespace.json`` agree: a store whose headers were lost), ``"memcore"`` (every entry
        is a name memcore gives, nothing foreign: a store whose creation was cut short, or a
        damaged header), ``"foreign"`` (anything else) or ``"file"`` (not a directory).

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> store_dir_kind(root)
    'empty'
    >>> open(os.path.join(root, "notes.txt"), "w").close(); store_dir_kind(root)
    'foreign'
    """
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "file"
    if not entries:
        return "empty"
    headers = [_is_store_header(os.path.join(path, h)) for h in (STORE_HEADER, STORE_HEADER_COPY)]
    if any(headers) or any(namespace_identity(os.path.join(path, f"{EPOCH_PREFIX}{e}", n))
                           for e, n in _epoch_namespaces(path)):
        return "store"
    ours = False not in headers and all(owned_name("root", e) for e in entries)
    for entry in entries:
        if ours and entry.startswith(EPOCH_PREFIX):
            try:
                ours = all(owned_name("epoch", n) for n in os.listdir(os.path.join(path, entry)))
            except OSError:
                ours = False
    return "memcore" if ours else "foreign"


def claim_store_dir(path: str) -> None:
    """Check that a writable open may use ``path``: a missing or empty directory, or a
    memcore store (:func:`store_dir_kind`). Creates nothing.

    Raises
    ------
    ForeignDirectoryError
        If ``path`` is a non-empty directory that is not a memcore store (a FileExistsError).
    StorePathError
        If ``path`` is a file.
    """
    kind = store_dir_kind(path)
    if kind == "file":
        raise StorePathError(f"{path} is a file (the store path must be a directory)")
    if kind == "foreign":
        names = sorted(e for e in os.listdir(path)
                       if not owned_name("root", e) or e.startswith(EPOCH_PREFIX))
        raise ForeignDirectoryError(
            f"{path} is a non-empty directory that is not a memcore store (no valid "
            f"{STORE_HEADER}; it holds {', '.join(map(repr, names[:5]))}"
            f"{', ...' if len(names) > 5 else ''}); memcore creates a store only in an empty "
            f"or missing directory and touches nothing else: pass a new path, e.g. "
            f"{os.path.join(path, 'memcore')}")


def _epoch_namespaces(root: str) -> list[tuple[int, str]]:
    """``(epoch, namespace directory name)`` of every ``ns.<e>/n-...`` entry of ``root``
    whose names are memcore's (nothing read but the directory listings)."""
    out = []
    try:
        entries = os.listdir(root)
    except OSError:
        return out
    for entry in entries:
        if entry.startswith(EPOCH_PREFIX) and owned_name("root", entry):
            try:
                names = os.listdir(os.path.join(root, entry))
            except OSError:
                continue
            e = int(entry[len(EPOCH_PREFIX):])
            out.extend((e, n) for n in names
                       if n.startswith(NAMESPACE_PREFIX) and owned_name("epoch", n))
    return out


# ---------------------------------------------------------------------------------- names

def namespace_dirname(ns: Sequence[str]) -> str:
    """Injective, filesystem-safe directory name of a namespace.

    Parameters
    ----------
    ns : tuple of str
        A validated namespace.

    Returns
    -------
    str
        ``"n-<slug>-<hash>"``: ASCII ``[a-z0-9_-]``, at most 80 characters.

    Examples
    --------
    >>> namespace_dirname(("..",))[:5]
    'n-__-'
    """
    blob = json.dumps(list(ns), ensure_ascii=False).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(blob).hexdigest()[:32]
    slug = re.sub(r"[^a-z0-9_-]", "_", ".".join(ns).lower())[:40]
    return f"n-{slug}-{digest}"


#: The reserved namespace of the pack (format 3): one namespace directory holding the rows
#: of many small namespaces under composite keys (``memcore.stores.long_pack``). Its first
#: segment starts with a NUL character, which no user namespace may contain.
PACK_NAMESPACE = ("\x00pack",)
PACK_DIR = namespace_dirname(PACK_NAMESPACE)


def ns_prefix(ns: Sequence[str]) -> str:
    """The composite-key prefix of a namespace: its compact JSON list and a NUL."""
    return json.dumps(list(ns), ensure_ascii=False, separators=(",", ":")) + "\x00"


def namespace_id(ns: Sequence[str]) -> int:
    """The namespace id of ``ns`` in the pack: the first 8 bytes (little-endian, signed) of
    BLAKE2b of its key prefix; never 0 (the ``nsid`` value of an unwritten row)."""
    d = hashlib.blake2b(ns_prefix(ns).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(d.digest(), "little", signed=True) or 1


def pack_key(ns: Sequence[str], key: str) -> str:
    """The composite key of ``key`` of namespace ``ns`` in the pack."""
    return ns_prefix(ns) + key


def split_key(composite: str) -> tuple[tuple, str]:
    """``(namespace, key)`` of a composite pack key.

    Raises
    ------
    StoreCorruptedError
        If it is not one.
    """
    head, sep, key = composite.partition("\x00")
    try:
        ns = json.loads(head) if sep else None
    except ValueError:
        ns = None
    if not isinstance(ns, list) or not ns or not all(isinstance(s, str) for s in ns):
        raise StoreCorruptedError(f"pack key {composite[:80]!r} names no namespace")
    return tuple(ns), key


def namespace_identity(directory: str) -> tuple | None:
    """The namespace a namespace directory belongs to, without its header: from
    ``namespace.json``, else (directories made before it) from the directory's slug when
    that spells the namespace exactly; either is checked against the name's hash. None when
    nothing names it."""
    base = os.path.basename(directory)
    try:
        raw = read_json(os.path.join(directory, NAMESPACE_ID), "namespace identity")
        ns = raw.get("namespace")
        if isinstance(ns, list) and ns and all(isinstance(x, str) and x for x in ns) \
                and namespace_dirname(tuple(ns)) == base:
            return tuple(ns)
    except (OSError, StoreCorruptedError):
        pass
    slug = base[len(NAMESPACE_PREFIX):-33]
    for cand in (tuple(slug.split(".")), (slug,)):
        if all(cand) and namespace_dirname(cand) == base:
            return cand
    return None


def write_namespace_identity(directory: str, ns: Sequence[str], *, durable: bool) -> None:
    """Write ``namespace.json`` into a namespace directory unless it is there already."""
    path = os.path.join(directory, NAMESPACE_ID)
    if not os.path.exists(path):
        atomic_write_json(path, {"namespace": list(ns)}, durable=durable)


# ---------------------------------------------------------------------------------- files

def fsync_path(path: str) -> None:
    """fsync a file, or a directory so a rename or create inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path      # the name callers use for directories


def atomic_write_json(path: str, obj: Any, *, durable: bool = True) -> None:
    """Replace ``path`` by a JSON document atomically (temp, fsync, rename, fsync dir).

    Examples
    --------
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "h.json")
    >>> atomic_write_json(path, {"version": 1}); read_json(path, "header")
    {'version': 1}
    """
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, sort_keys=True)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def read_json(path: str, what: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise StoreCorruptedError(f"{what} {path} is not valid JSON at offset "
                                  f"{getattr(err, 'pos', getattr(err, 'start', 0))}: {err}") from err
    if not isinstance(obj, dict):
        raise StoreCorruptedError(f"{what} {path} must hold a JSON object at offset 0")
    return obj


def check_version(obj: dict, path: str, fmt: str, newest: int = FORMAT_VERSION) -> None:
    if obj.get("format") != fmt:
        raise StoreCorruptedError(
            f"{path} has format {obj.get('format')!r} at offset 0, expected {fmt!r}")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreCorruptedError(f"{path} has no valid format version (got {version!r})")
    if version > newest:
        raise FormatVersionError(
            f"{path} was written by on-disk format version {version}, but this memcore reads "
            f"versions <= {newest}; upgrade memcore to open it")


def read_store_header(root: str) -> dict | None:
    """The store header of ``root`` (validated), or None when the store does not exist yet.

    Raises
    ------
    FormatVersionError
        If the store was written by a newer format version.
    StoreCorruptedError
        If the header is unreadable or lacks a field.
    """
    path = os.path.join(root, STORE_HEADER)
    try:
        obj = read_json(path, "store header")
    except FileNotFoundError:
        return None
    check_version(obj, path, STORE_FORMAT, PACK_VERSION)
    for name, typ in (("embedder", str), ("dim", int), ("epoch", int)):
        if not isinstance(obj.get(name), typ) or isinstance(obj.get(name), bool):
            raise StoreCorruptedError(f"store header {path} lacks a valid {name!r} at offset 0")
    return obj


def write_store_header(root: str, embedder: str, dim: int, epoch: int, *, durable: bool,
                       version: int = FORMAT_VERSION) -> None:
    """Atomically write the store header (the commit point of ``reindex``), after a copy of
    it (:data:`STORE_HEADER_COPY`: what rebuilds a lost or damaged store header; the epoch
    it names is complete before either is written). ``version`` 3 (:data:`PACK_VERSION`)
    once the store holds a pack."""
    head = {"format": STORE_FORMAT, "version": int(version), "embedder": embedder,
            "dim": int(dim), "epoch": int(epoch)}
    atomic_write_json(os.path.join(root, STORE_HEADER_COPY), head, durable=durable)
    atomic_write_json(os.path.join(root, STORE_HEADER), head, durable=durable)


def store_epochs(root: str) -> list[int]:
    """The epochs ``ns.<e>`` directories of ``root`` hold namespaces of, ascending."""
    return sorted({e for e, _ in _epoch_namespaces(root)})


def missing_header_error(root: str) -> StoreCorruptedError:
    return StoreCorruptedError(
        f"{os.path.join(root, STORE_HEADER)} is missing or damaged (offset 0), but {root} holds "
        "namespaces; LongTermMemory(path, embedder, repair=True) (or `memcore repair PATH`) "
        f"rebuilds it from {STORE_HEADER_COPY}, or by checking that the given "
        "embedder reproduces stored vectors")


def _pack_version(root: str, epoch: int) -> int:
    """:data:`PACK_VERSION` when epoch ``epoch`` holds a pack, else :data:`FORMAT_VERSION`."""
    return PACK_VERSION if os.path.isdir(os.path.join(root, f"{EPOCH_PREFIX}{epoch}", PACK_DIR)) \
        else FORMAT_VERSION


def recover_store_header(root: str, embedder: Any, reproduces) -> dict:
    """Rebuild a lost or damaged store header and write it; returns it.

    The copy (:data:`STORE_HEADER_COPY`) is used when valid and its epoch holds the
    namespaces; otherwise (stores written before the copy) the highest epoch holding
    namespaces is named with the given embedder's name and dim, once
    ``reproduces(epoch_dir, embedder)`` confirms that it re-embeds stored texts to their
    recorded vectors bit for bit.

    Raises
    ------
    StoreCorruptedError
        If nothing vouches for a header (no valid copy and no embedder that reproduces).
    """
    epochs = store_epochs(root)
    path = os.path.join(root, STORE_HEADER_COPY)
    try:
        copy = read_json(path, "store header copy")
        check_version(copy, path, STORE_FORMAT, PACK_VERSION)
    except (OSError, StoreCorruptedError):
        copy = {}
    if copy.get("epoch") in epochs and isinstance(copy.get("embedder"), str) \
            and isinstance(copy.get("dim"), int):
        write_store_header(root, copy["embedder"], copy["dim"], copy["epoch"], durable=True,
                           version=max(int(copy.get("version", FORMAT_VERSION)),
                                       _pack_version(root, copy["epoch"])))
        return read_store_header(root)
    if embedder is not None and epochs:
        e = epochs[-1]
        if reproduces(os.path.join(root, f"{EPOCH_PREFIX}{e}"), embedder):
            write_store_header(root, str(embedder.name), int(embedder.dim), e, durable=True,
                               version=_pack_version(root, e))
            return read_store_header(root)
    raise StoreCorruptedError(
        f"{os.path.join(root, STORE_HEADER)} is missing or damaged and cannot be rebuilt: no "
        f"valid {STORE_HEADER_COPY} names an epoch, and no embedder was given that reproduces the "
        "stored vectors; open it with the embedder it was written with and repair=True")



def column_path(directory: str, name: str, generation: int) -> str:
    """``<directory>/<name>.<generation>.<suffix>``: a column file (``vectors``: f32)."""
    suffix = "f32" if name == "vectors" else dict((c[0], c[2]) for c in COLUMNS + COLUMNS_V2)[name]
    return os.path.join(directory, f"{name}.{generation}.{suffix}")


def checkpoint_path(directory: str, name: str, generation: int, checkpoint: int) -> str:
    """``<directory>/<name>.<generation>.c<checkpoint>.<suffix>``: a file of one format-2
    checkpoint (written once, never modified; see :data:`CHECKPOINT_FILES`)."""
    suffix = dict((c[0], c[2]) for c in CHECKPOINT_FILES)[name]
    return os.path.join(directory, f"{name}.{generation}.c{checkpoint}.{suffix}")


def ann_path(directory: str, generation: int) -> str:
    """``<directory>/ann.<generation>.faiss``: the opt-in approximate index (derived state,
    :mod:`memcore.recall.approx`; its sidecar adds ``.json``)."""
    return os.path.join(directory, f"ann.{generation}.faiss")


def log_path(directory: str, generation: int) -> str:
    """``<directory>/log.<generation>``: a namespace's record log."""
    return os.path.join(directory, f"log.{generation}")


class StoreRoot:
    """A store's root directory: header, writer lock and epochs (see the module notes).

    Operating-system errors surface as memcore errors that are also the built-in:
    :class:`StorePathError` (the path is a file), :class:`StorePermissionError`,
    :class:`StoreNotFoundError` (a read-only open of nothing), :class:`StoreIOError`.
    """

    def __init__(self, path: str, header: dict | None, lock: Any):
        self.path = path
        self.header = header
        self.lock = lock
        self.epoch = 0 if header is None else header["epoch"]
        self._next: int | None = None
        self.damage: StoreCorruptedError | None = None   # an unreadable store header

    def adopt(self, header: dict) -> None:
        """Use a store header read again (rebuilt by :func:`recover_store_header`, or
        written by a reindex that raised after its commit point)."""
        self.header, self.epoch, self.damage, self._next = header, header["epoch"], None, None

    @staticmethod
    def require(path: str) -> dict:
        """The header of the store at ``path``.

        Raises
        ------
        StoreNotFoundError
            If there is none.
        """
        with os_errors(path):
            header = read_store_header(path)
        if header is None:
            if store_epochs(path):
                raise missing_header_error(path)
            raise StoreNotFoundError(f"no memcore store at {path} (missing {STORE_HEADER})")
        return header

    @classmethod
    def open(cls, path: str, *, read_only: bool, lock_timeout: float) -> "StoreRoot":
        """Open (creating the directory unless read-only) and lock it for writing.

        Raises
        ------
        StoreLockedError
            If another writer holds the lock for longer than ``lock_timeout`` seconds.
        StoreNotFoundError, StorePathError, StorePermissionError, StoreIOError
        """
        if read_only:
            return cls(path, cls.require(path), None)
        import filelock

        with os_errors(path):
            claim_store_dir(path)          # a foreign directory: refused, nothing created
            os.makedirs(path, exist_ok=True)
            lock = filelock.FileLock(os.path.join(path, LOCK_FILE), timeout=lock_timeout)
            try:
                lock.acquire()
            except filelock.Timeout:
                raise StoreLockedError(
                    f"{path} is locked by another writer (waited {lock_timeout} s); open it "
                    "with LongTermMemory.open(path, read_only=True) to read it") from None
            try:
                try:
                    header, damage = read_store_header(path), None
                except StoreCorruptedError as err:       # repair=True may rebuild it
                    header, damage = None, err
                root = cls(path, header, lock)
                root.damage = damage
                return root
            except BaseException:
                lock.release()
                raise

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @property
    def epoch_dir(self) -> str:
        return os.path.join(self.path, f"{EPOCH_PREFIX}{self.epoch}")

    def create(self, embedder: str, dim: int, *, durable: bool) -> None:
        """Write a new, empty store (epoch 0)."""
        with os_errors(self.path):
            os.makedirs(self.epoch_dir, exist_ok=True)
            write_store_header(self.path, embedder, dim, 0, durable=durable)

    def namespace_dirs(self) -> list[str]:
        """The namespace directories of the current epoch, sorted; a writable open first
        removes other epochs (an interrupted reindex) and half-created or half-deleted
        namespaces -- only the names memcore gives (:func:`remove_owned`).

        Raises
        ------
        StoreCorruptedError
            If the epoch directory the header names is missing.
        """
        edir = self.epoch_dir
        with os_errors(self.path):
            if self.lock is not None:
                os.makedirs(edir, exist_ok=True)
                for entry in os.listdir(self.path):
                    if entry.startswith(EPOCH_PREFIX) and owned_name("root", entry) \
                            and entry != os.path.basename(edir):
                        remove_owned(os.path.join(self.path, entry), "epoch")
            if not os.path.isdir(edir):
                raise StoreCorruptedError(f"{edir} is missing (the store header names epoch "
                                          f"{self.epoch})")
            out = []
            for entry in sorted(os.listdir(edir)):
                full = os.path.join(edir, entry)
                if entry.startswith(NAMESPACE_PREFIX):
                    out.append(full)
                elif self.lock is not None and entry.startswith((TMP_PREFIX, TRASH_PREFIX)) \
                        and owned_name("epoch", entry):
                    remove_owned(full, "namespace")
            return out

    def begin_epoch(self) -> str:
        """An empty directory for the next epoch (``reindex``): the first ``ns.<e>`` after
        the current one that is missing or holds nothing but memcore's leftovers (removed;
        a directory holding a user's file is skipped, never emptied)."""
        self._next = self.epoch + 1
        while not remove_owned(os.path.join(self.path, f"{EPOCH_PREFIX}{self._next}"), "epoch"):
            self._next += 1
        edir = os.path.join(self.path, f"{EPOCH_PREFIX}{self._next}")
        os.makedirs(edir)
        return edir

    def commit_epoch(self, embedder: str, dim: int, version: int | None = None) -> None:
        """Make the next epoch the store: fsync it, then replace the header (commit point);
        ``version``: the store header's (default: this store's, at least format 2)."""
        if version is None:
            version = max(FORMAT_VERSION, (self.header or {}).get("version", FORMAT_VERSION))
        write_store_header(self.path, embedder, dim, self._next, durable=True, version=version)

    def next_committed(self) -> bool:
        """Whether the store header on disk already names the next epoch (its commit
        happened, whatever raised after it)."""
        try:
            head = read_store_header(self.path)
        except (OSError, StoreCorruptedError):
            return False
        return head is not None and self._next is not None and head["epoch"] == self._next

    def abort_epoch(self) -> None:
        remove_owned(os.path.join(self.path, f"{EPOCH_PREFIX}{self._next}"), "epoch")
        self._next = None

    def finish_epoch(self) -> None:
        """After :meth:`commit_epoch` and closing the old files: delete the old epoch."""
        old = self.epoch_dir
        self.epoch, self._next = self._next, None
        remove_owned(old, "epoch")


class os_errors:
    """Context manager: re-raise a raw OSError of the file system as the memcore error that is
    also its built-in (:class:`StorePathError`, :class:`StorePermissionError`,
    :class:`StoreNotFoundError`, else :class:`StoreIOError`), naming ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ, err, tb) -> bool:
        if not isinstance(err, OSError) or isinstance(err, MemcoreError):
            return False
        what = f"{self.path}: {err.strerror or err}"
        if isinstance(err, (FileExistsError, NotADirectoryError)):
            raise StorePathError(f"{what} (the store path must be a directory)") from err
        if isinstance(err, PermissionError):
            raise StorePermissionError(f"{what} (the store needs read and write access; open "
                                       "it with read_only=True to only read it)") from err
        if isinstance(err, FileNotFoundError):
            raise StoreNotFoundError(what) from err
        raise StoreIOError(what) from err
