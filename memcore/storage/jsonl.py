"""The JSON Lines export of a store: portable, bit-exact vectors.

Line 1: ``{"format": "memcore-jsonl", "version": 1, "embedder": name, "dim": dim}``; then one
object per memory: ``namespace`` (list), ``key``, ``text``, ``importance``, ``metadata``,
``created_at``, ``updated_at``, ``last_accessed_at``, ``access_count`` and ``vector`` (base64 of
the little-endian float32 bytes); a memory with a time to live also has ``expires_at`` (Unix
seconds) and ``ttl`` (seconds), a line without them never expires.
"""

from __future__ import annotations

import base64
import errno
import json
import os
from typing import Iterable, Iterator

import numpy as np

from memcore.errors import InvalidArgumentError
from memcore.types import MemoryTier, StoredMemory

__all__ = ["EXPORT_FORMAT", "export_jsonl", "import_jsonl"]

EXPORT_FORMAT = "memcore-jsonl"


def export_jsonl(path: str | os.PathLike, embedder: str, dim: int,
                 rows: Iterable[tuple[StoredMemory, np.ndarray]]) -> int:
    """Write ``(memory, vector)`` pairs to ``path`` (atomically: a temp file, then rename);
    returns how many."""
    n = 0
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "cannot export to a directory; name a file",
                                os.fspath(path))
    tmp = os.fspath(path) + ".tmp"
    try:
        n = _write_export(tmp, embedder, dim, rows)
    except BaseException:
        try:
            os.unlink(tmp)                   # never leave a partial export behind
        except OSError:
            pass
        raise
    os.replace(tmp, os.fspath(path))
    return n


def _write_export(tmp: str, embedder: str, dim: int, rows) -> int:
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"format": EXPORT_FORMAT, "version": 1, "embedder": embedder,
                            "dim": dim}) + "\n")
        for m, vec in rows:
            raw = np.ascontiguousarray(vec, dtype="<f4").tobytes()
            line = {
                "namespace": list(m.namespace), "key": m.key, "text": m.text,
                "importance": m.importance, "metadata": m.metadata,
                "created_at": m.created_at, "updated_at": m.updated_at,
                "last_accessed_at": m.last_accessed_at, "access_count": m.access_count,
                "vector": base64.b64encode(raw).decode("ascii")}
            if m.expires_at is not None:
                line.update(expires_at=m.expires_at, ttl=m.ttl)
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            n += 1
    return n


def _json_line(line: str, path: str, lineno: int) -> dict:
    try:
        obj = json.loads(line)
        problem = None if isinstance(obj, dict) else f"a JSON {type(obj).__name__}"
    except ValueError as err:
        problem = f"not JSON ({err})"
    if problem is not None:
        raise InvalidArgumentError(f"{path} line {lineno} must be a JSON object, got {problem}")
    return obj


def import_jsonl(path: str | os.PathLike, embedder: str, dim: int, batch_size: int,
                 tier: MemoryTier) -> Iterator[tuple[list[StoredMemory], np.ndarray | None]]:
    """Batches of ``(memories, vectors)`` read from an export; ``vectors`` is None when the
    file's embedder (name or dim) differs from ``embedder``/``dim`` (re-embed the texts).

    Raises
    ------
    InvalidArgumentError
        If the file is not a memcore export or a line is malformed (naming the line).
    """
    path = os.fspath(path)
    try:
        yield from _import(path, embedder, dim, batch_size, tier)
    except UnicodeDecodeError as err:
        raise InvalidArgumentError(f"{path} is not a memcore export (not UTF-8 text at byte "
                                   f"{err.start} of a line)") from None


def _import(path: str, embedder: str, dim: int, batch_size: int, tier: MemoryTier):
    with open(path, "r", encoding="utf-8") as f:
        head = _json_line(f.readline(), path, 1)
        if head.get("format") != EXPORT_FORMAT:
            raise InvalidArgumentError(f"{path} line 1 is not a {EXPORT_FORMAT} header: {head!r}")
        if not isinstance(head.get("version"), int) or head["version"] > 1:
            raise InvalidArgumentError(f"{path} has export version {head.get('version')!r}; "
                                       "this memcore reads version 1")
        same = head.get("embedder") == embedder and head.get("dim") == dim
        batch: list[StoredMemory] = []
        vecs: list[np.ndarray] = []
        for lineno, line in enumerate(f, start=2):
            if not line.strip():
                continue
            obj = _json_line(line, path, lineno)
            try:
                batch.append(StoredMemory(
                    namespace=tuple(obj["namespace"]), key=obj["key"], text=obj["text"],
                    importance=obj["importance"], metadata=obj["metadata"],
                    created_at=obj["created_at"], updated_at=obj["updated_at"],
                    last_accessed_at=obj["last_accessed_at"],
                    access_count=obj["access_count"], tier=tier,
                    expires_at=obj.get("expires_at"), ttl=obj.get("ttl")))
                if same:
                    vec = np.frombuffer(base64.b64decode(obj["vector"], validate=True), "<f4")
                    if vec.shape != (dim,):
                        raise InvalidArgumentError(f"vector has {vec.shape[0]} values, "
                                                   f"expected {dim}")
                    vecs.append(vec.astype(np.float32))
            except (KeyError, TypeError, ValueError) as err:
                batch = batch[:len(vecs)] if same else batch
                raise InvalidArgumentError(f"{path} line {lineno} is not a valid memory: "
                                           f"{type(err).__name__}: {err}") from err
            if len(batch) >= batch_size:
                yield batch, (np.stack(vecs) if same else None)
                batch, vecs = [], []
        if batch:
            yield batch, (np.stack(vecs) if same else None)
