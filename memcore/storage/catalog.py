"""The catalog of a store's namespaces: ``catalog.<e>.log`` in the store root.

It maps each namespace of epoch ``e`` to its directory and keeps a summary of each (live
memories, rows used, whether it has a time-to-live column), so that opening a store and
listing its namespaces open no namespace. It is derived state: every line is checked by its
CRC, the listing of ``ns.<e>/`` is the truth it is reconciled with at every open (a
directory it misses is named by its ``namespace.json``; an entry without a directory is
dropped), and a missing or damaged catalog is rebuilt. Summaries are trusted only when the
catalog's last line is a clean-close marker (a writer appends a ``dirty`` line before its first
change of a session and writes the marker when it closes).

Lines: ``<crc32 of the JSON, 8 hex digits> <JSON>\\n``, one of ``{"catalog": 1, "epoch": e}``
(first), ``{"ns": [...], "dir": name}`` (a namespace), ``{"drop": name}`` (cleared),
``{"dirty": 1}`` and ``{"clean": {name: [live, rows, expiring], ...}}``; format 3 adds
``{"ns": [...], "pack": id}`` (a namespace whose rows are in the pack under namespace id
``id``), ``{"packed": [id, ...], "names": [segments joined by NUL, ...]}`` (a rewrite's one
line naming them all, sorted by namespace: one parse at open; no segment holds a NUL) and ``{"unpack": id}`` (it left the pack: cleared, or moved to its own directory).
The pack's ``nsid`` column is the truth those lines are reconciled with at open.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from typing import Any, Callable, Iterable

from memcore.storage.layout import (
    EPOCH_PREFIX,
    fsync_path,
    namespace_identity,
    owned_name,
)

__all__ = ["CATALOG_PREFIX", "Catalog", "catalog_path"]

logger = logging.getLogger("memcore")

CATALOG_PREFIX = "catalog."


def catalog_path(root: str, epoch: int) -> str:
    """The catalog file of epoch ``epoch`` of the store at ``root``."""
    return os.path.join(root, f"{CATALOG_PREFIX}{epoch}.log")


def _line(obj: Any) -> bytes:
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _parse(data: bytes) -> tuple[list[dict], bool]:
    """The records of a catalog file and whether every line was intact."""
    out = []
    for raw in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        try:
            crc, body = raw.split(b" ", 1)
            if int(crc, 16) != zlib.crc32(body):
                return out, False
            obj = json.loads(body)
            if not isinstance(obj, dict):
                return out, False
        except ValueError:
            return out, False
        out.append(obj)
    return out, bool(out) and data.endswith(b"\n")


class Catalog:
    """The namespaces of one epoch: ``dirs`` (directory name -> namespace tuple) and
    ``summary`` (directory name -> ``[live, rows, expiring]``, only where trusted).

    Parameters
    ----------
    root : str
        Store directory.
    epoch : int
    read_only : bool
        A reader never writes the file.
    durable : bool
        Whether the dirty marker is fsynced (``durability="fsync"``).
    """

    def __init__(self, root: str, epoch: int, read_only: bool, durable: bool):
        self.root, self.epoch, self.read_only, self.durable = root, epoch, read_only, durable
        self.path = catalog_path(root, epoch)
        self.dirs: dict[str, tuple] = {}
        self.summary: dict[str, list] = {}
        self.packed: dict[int, tuple] = {}      # namespace id -> namespace (in the pack)
        self.rebuilt = False
        self._dirty = False

    @classmethod
    def load(cls, root: str, epoch: int, dirnames: Iterable[str], read_only: bool,
             durable: bool) -> tuple["Catalog", list[str]]:
        """The catalog of ``epoch`` reconciled with the namespace directory names
        ``dirnames`` (the listing of ``ns.<epoch>/``); a writer rewrites it when it was
        missing, damaged or out of date, and removes other epochs' catalogs.

        Returns
        -------
        (Catalog, list of str)
            The catalog and the directory names nothing names (neither the catalog nor a
            ``namespace.json``): the caller opens those to learn their namespace.
        """
        cat = cls(root, epoch, read_only, durable)
        try:
            with open(cat.path, "rb") as f:
                records, intact = _parse(f.read())
        except FileNotFoundError:
            records, intact = [], False
        clean = False
        for rec in records[1:] if records and "catalog" in records[0] else []:
            if isinstance(rec.get("packed"), list):      # a rewrite's one line of them all
                ids, names = rec["packed"], rec.get("names")
                if isinstance(names, list) and len(names) == len(ids):
                    for h, name in zip(ids, names):
                        if isinstance(h, int) and isinstance(name, str) and name:
                            cat.packed[h] = tuple(name.split("\x00"))
            elif isinstance(rec.get("pack"), int) and isinstance(rec.get("ns"), list):
                cat.packed[rec["pack"]] = tuple(rec["ns"])
            elif isinstance(rec.get("unpack"), int):
                cat.packed.pop(rec["unpack"], None)
            elif "dir" in rec and isinstance(rec.get("ns"), list):
                cat.dirs[rec["dir"]] = tuple(rec["ns"])
                cat.summary.pop(rec["dir"], None)
                clean = False
            elif "drop" in rec:
                cat.dirs.pop(rec["drop"], None)
                cat.summary.pop(rec["drop"], None)
            elif "dirty" in rec:
                clean = False
            elif isinstance(rec.get("clean"), dict):
                clean = True
                cat.summary = {d: s for d, s in rec["clean"].items()
                               if isinstance(s, list) and len(s) == 3}
        if not (intact and clean):
            cat.summary.clear()
        listed = set(dirnames)
        changed = not intact
        for d in [d for d in cat.dirs if d not in listed]:
            del cat.dirs[d]
            cat.summary.pop(d, None)
            changed = True
        unnamed = []
        edir = os.path.join(root, f"{EPOCH_PREFIX}{epoch}")
        for d in sorted(listed - set(cat.dirs)):
            ns = namespace_identity(os.path.join(edir, d))
            changed = True
            if ns is None:
                unnamed.append(d)
            else:
                cat.dirs[d] = ns
        cat.rebuilt = changed
        if not read_only:
            for entry in os.listdir(root):
                if entry.startswith(CATALOG_PREFIX) and owned_name("root", entry) \
                        and entry != os.path.basename(cat.path):
                    try:
                        os.unlink(os.path.join(root, entry))
                    except FileNotFoundError:
                        pass
            if changed:
                cat.rewrite(clean=intact and clean)
        return cat, unnamed

    # ------------------------------------------------------------------ writes
    def rewrite(self, clean: bool) -> None:
        """Replace the file atomically with the current entries (and, when ``clean``, the
        summaries as a clean-close marker)."""
        if self.read_only:
            return
        parts = [_line({"catalog": 1, "epoch": self.epoch})]
        parts += [_line({"ns": list(ns), "dir": d}) for d, ns in sorted(self.dirs.items())]
        if self.packed:
            pairs = sorted((ns, h) for h, ns in self.packed.items())
            parts.append(_line({"packed": [h for _, h in pairs],
                                "names": ["\x00".join(ns) for ns, _ in pairs]}))
        if clean:
            parts.append(_line({"clean": {d: s for d, s in sorted(self.summary.items())
                                          if d in self.dirs}}))
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(b"".join(parts))
                if self.durable:
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as err:
            self._lost(err)
            return
        self._dirty = not clean

    def _append(self, obj: Any) -> None:
        if self.read_only:
            return
        try:
            with open(self.path, "ab") as f:
                f.write(_line(obj))
        except OSError as err:
            self._lost(err)

    def _lost(self, err: OSError) -> None:
        """A write failed (a full disk): remove the file (it is rebuilt at the next open),
        so that no stale clean marker survives; derived state never fails a store call."""
        logger.warning("the namespace catalog %s could not be written (%s); it is rebuilt "
                       "at the next open", self.path, err)
        for path in (self.path + ".tmp", self.path):
            try:
                os.unlink(path)
            except OSError:
                pass
        self._dirty = True

    def touch(self) -> None:
        """Before a change: mark the summaries untrusted (once per session)."""
        if self._dirty or self.read_only:
            return
        self._append({"dirty": 1})
        if self.durable and os.path.exists(self.path):
            try:
                fsync_path(self.path)
            except OSError as err:
                self._lost(err)
        self._dirty = True

    def add(self, dirname: str, ns: tuple) -> None:
        """A namespace directory was created."""
        self.touch()
        if self.dirs.get(dirname) != ns:
            self.dirs[dirname] = ns
            self._append({"ns": list(ns), "dir": dirname})

    def add_packed(self, nsid: int, ns: tuple) -> None:
        """A namespace got rows in the pack under namespace id ``nsid``."""
        self.touch()
        if self.packed.get(nsid) != ns:
            self.packed[nsid] = ns
            self._append({"ns": list(ns), "pack": int(nsid)})

    def drop_packed(self, nsid: int) -> None:
        """A namespace left the pack (cleared, or moved to its own directory)."""
        self.touch()
        if self.packed.pop(nsid, None) is not None:
            self._append({"unpack": int(nsid)})

    def drop(self, dirname: str) -> None:
        """A namespace directory was removed."""
        self.touch()
        self.summary.pop(dirname, None)
        if self.dirs.pop(dirname, None) is not None:
            self._append({"drop": dirname})

    def note(self, dirname: str, live: int, rows: int, expiring: bool) -> None:
        """The summary of an open namespace (written at the clean close)."""
        self.summary[dirname] = [int(live), int(rows), bool(expiring)]

    def forget(self, dirname: str) -> None:
        """The summary of ``dirname`` is unknown (it changed and is not open)."""
        self.summary.pop(dirname, None)

    def close(self, each: Callable[[], Iterable[tuple[str, int, int, bool]]] | None = None) -> None:
        """Write the clean-close marker (the caller noted every open namespace first)."""
        if each is not None:
            for d, live, rows, exp in each():
                self.note(d, live, rows, exp)
        if not self.read_only and (self._dirty or self.rebuilt):
            self.rewrite(clean=True)
            self.rebuilt = False

