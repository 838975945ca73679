"""Checking and rewriting damaged namespaces: :func:`verify_namespace` (a scrub that changes
nothing), :func:`repair_namespace` (a new generation from every intact record, never
resurrecting), and the checks behind them (see :mod:`memcore.storage`, Recovery)."""

from __future__ import annotations

import json
import os
import zlib

import numpy as np

from memcore.core.rows import MAX_ACCESS_COUNT, encoded
from memcore.errors import StoreCorruptedError
from memcore.storage.checkpoint import crc32_of
from memcore.storage.columns import (CHECK_DTYPE, Columns, check_path, expiry_crcs,
                                     expiry_path, invalid_stats, open_expiry, stats_crcs,
                                     valid_time, write_expiry)
from memcore.storage.generations import NamespaceFiles, close_namespace, remove_stale, write_generation
from memcore.storage.jsonl import export_jsonl
from memcore.storage.layout import (
    NAMESPACE_FORMAT,
    NAMESPACE_HEADER,
    PACK_NAMESPACE,
    STORE_HEADER,
    check_version,
    checkpoint_path,
    column_path,
    log_path,
    namespace_dirname,
    namespace_identity,
    read_json,
    split_key,
)
from memcore.storage.log import first_bad_vector, scan_log
from memcore.storage.recovery import open_namespace, witnessed_cut
from memcore.storage.salvage import lost_rows, quarantine_rows
from memcore.types import MemoryTier, StoredMemory


def _verified_checkpoint(directory: str, h: dict) -> tuple[np.ndarray | None, int]:
    """The live flags of a header's checkpoint when its CRC verifies them (else None), and
    the log bytes the checkpoint covers."""
    ck, rows, crcs = h.get("checkpoint"), h.get("rows"), h.get("crc")
    gen, nbytes = h.get("generation"), h.get("log_bytes")
    if (h.get("version", 0) < 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          for v in (ck, rows, gen, nbytes))
            or not isinstance(crcs, dict) or "alive" not in crcs):
        return None, 0
    try:
        alive = np.fromfile(checkpoint_path(directory, "alive", gen, ck), np.bool_)
    except (OSError, ValueError):
        return None, 0
    if alive.shape[0] != rows or crc32_of(alive) != crcs["alive"]:
        return None, 0
    return alive, nbytes


def repair_namespace(directory: str, dim: int, embed=None) -> dict:
    """Rewrite a namespace as a new generation from every intact record (crash-safe).

    Records with a bad frame, CRC or row rule are skipped; a live key whose vector fails its
    record's CRC (or lies past the end of the vectors file) is re-embedded from its logged
    text when ``embed`` (``texts -> (n, dim) float32``) is given and the result matches the
    record's CRC bit for bit (an exact repair), else dropped -- never served with another
    row's vector. Lifecycle fields come from the records; access statistics and times to
    live from the column files as far as the row checks vouch for them (see
    :mod:`memcore.storage`, Row checks; a header written before the checks: statistics when
    valid -- finite, in range -- and every time to live as it is).

    Repair never resurrects: a damaged record may have been a DEL or a replacing PUT, so a key
    is kept only when something vouches for its last intact record. Rows the last checkpoint
    covers are vouched for by its live flags (when their CRC verifies): a row the checkpoint
    holds dead stays dead, whatever record was lost. Past the checkpoint a key is vouched for
    when its last intact record follows every damaged stretch. A log cut below its
    checkpoint's ``log_bytes`` vouches for nothing at the cut: the records after it (a DEL,
    a replacing PUT, past the checkpoint too) are gone, so every key whose last record lies
    before the cut counts as past a damaged stretch there. Every other key is dropped
    from the store and listed in ``"uncertain"``; when it may still be current (past the
    checkpoint) its last intact version (with its vector) is written to ``quarantine.<n>.jsonl`` in the store's root directory (an
    :meth:`~memcore.LongTermMemory.export_jsonl` file: inspect it, ``import_jsonl`` what is
    still wanted). A row the checkpoint holds live whose record was lost is listed by key
    when the checkpoint's key hash confirms the key its damaged record still holds, and its
    last version is set aside too when its vector matches (:mod:`memcore.storage.salvage`).

    Returns
    -------
    dict
        ``{"namespace": tuple, "kept": live keys kept, "dropped": live keys dropped,
        "skipped": damaged log stretches skipped, "uncertain": sorted keys dropped because
        nothing vouches for them (a damaged record may have deleted or replaced them, or
        their vector is damaged, or their record was lost), "lost_rows": rows the checkpoint
        holds live whose record was lost, "lost_keys": their keys (None where nothing
        confirms one), "quarantine": the path of the quarantine file written, or None,
        "reembedded": damaged vectors re-embedded exactly, "stats_reset": sorted keys kept
        whose access statistics their row check does not vouch for (their record's values
        written), "ttl_unverified": keys kept whose TTL's check copy is damaged (the TTL
        column's value written)}``.

    Raises
    ------
    StoreCorruptedError
        If the namespace header itself is unreadable (nothing names the namespace).
    FormatVersionError
        If the header is of a newer format.

    Examples
    --------
    A namespace of more than ``PACK_MAX`` (256) rows has a directory of its own (a smaller
    one lives in the pack, itself such a directory):

    >>> import tempfile; from memcore import HashingEmbedder, LongTermMemory, MemoryItem
    >>> from memcore.storage.layout import StoreRoot
    >>> root = tempfile.mkdtemp()
    >>> with LongTermMemory(root, HashingEmbedder(dim=8)) as ltm:
    ...     _ = ltm.put_many("ns", [MemoryItem(f"k{i}", "some text") for i in range(300)])
    >>> ns_dir = StoreRoot.open(root, read_only=True, lock_timeout=0).namespace_dirs()[0]
    >>> repair_namespace(ns_dir, 8)    # doctest: +NORMALIZE_WHITESPACE
    {'namespace': ('ns',), 'kept': 300, 'dropped': 0, 'skipped': 0, 'uncertain': [],
     'lost_rows': 0, 'lost_keys': [], 'quarantine': None, 'reembedded': 0,
     'stats_reset': [], 'ttl_unverified': []}
    """
    hpath = os.path.join(directory, NAMESPACE_HEADER)
    try:
        h = read_json(hpath, "namespace header")
        check_version(h, hpath, NAMESPACE_FORMAT)
    except (FileNotFoundError, StoreCorruptedError):
        h = {}
    ns = h.get("namespace")
    ns = tuple(ns) if isinstance(ns, list) and all(isinstance(x, str) for x in ns) else ()
    gen = h.get("generation")
    if ns and isinstance(gen, int) and not isinstance(gen, bool) and gen >= 0 \
            and namespace_dirname(ns) == os.path.basename(directory) and h.get("dim") == dim:
        return _repair(directory, ns, dim, gen, h, embed)
    # the header is lost or damaged: the namespace from namespace.json (or the directory's
    # name), the newest generation's log; every record replayed, nothing checkpointed trusted
    ns = namespace_identity(directory)
    if ns is None:
        raise StoreCorruptedError(f"{hpath} is damaged at offset 0 and nothing else names the "
                                  "namespace of its directory; it cannot be repaired")
    gens = [int(e[4:]) for e in os.listdir(directory) if e.startswith("log.") and e[4:].isdigit()]
    return _repair(directory, ns, dim, max(gens, default=0), {}, embed)


def _repair(directory: str, ns: tuple, dim: int, gen: int, h: dict, embed=None) -> dict:
    lpath = log_path(directory, gen)
    try:
        with open(lpath, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    ck_alive, ck_bytes = _verified_checkpoint(directory, h)
    rep = scan_log(data, lpath, min(ck_bytes, len(data)), salvage=True)
    try:
        have = os.path.getsize(column_path(directory, "vectors", gen)) // (4 * dim)
    except FileNotFoundError:
        have = 0
    vecs = (np.fromfile(column_path(directory, "vectors", gen), dtype=np.float32, count=have * dim)
            .reshape(have, dim) if have else np.zeros((0, dim), np.float32))
    stats = {}
    for name, dtype in (("last_accessed_at", np.float64), ("access_count", np.int64)):
        try:
            stats[name] = np.fromfile(column_path(directory, name, gen), dtype=dtype)
        except (FileNotFoundError, ValueError):
            stats[name] = np.zeros(0, dtype)
    checks = _file_checks(directory, gen, h, stats)
    expiry = open_expiry(directory, gen, read_only=True)
    # the last damaged stretch nothing else vouches across: past the checkpoint, or anywhere
    # when the checkpoint's live flags cannot be verified
    blind = [x for x in rep.damaged if ck_alive is None or x >= ck_bytes]
    if ck_alive is not None and len(data) < ck_bytes:
        blind.append(len(data))       # cut below its checkpoint: what followed is unknown
    elif not h.get("unwitnessed"):
        w = witnessed_cut(directory, gen, max(rep.file_rows, default=-1) + 1, rep.end)
        if w is not None and w >= ck_bytes and w not in rep.damaged:
            blind.append(len(data))   # cut past it, the columns witness: the same
    last_damage = max(blind) if blind else -1
    ck_rows = 0 if ck_alive is None else ck_alive.shape[0]
    keep, uncertain, quarantine = [], [], []
    fixed: dict = {}                      # replay index -> re-embedded vector (exact)
    for key, idx in sorted(rep.keys.items(), key=lambda kv: kv[1]):
        fr = rep.file_rows[idx]
        vec_ok = fr < have and zlib.crc32(vecs[fr].tobytes()) == rep.vector_crc[idx]
        if not vec_ok and embed is not None:
            try:
                v = np.ascontiguousarray(embed([rep.texts[idx]])[0], np.float32)
            except Exception:             # a failing embedder repairs nothing
                v = None
            if v is not None and v.shape == (dim,) and zlib.crc32(v) == rep.vector_crc[idx]:
                fixed[idx] = v
                vec_ok = True
        if fr < ck_rows and not ck_alive[fr]:
            uncertain.append(key)           # certainly not current: deleted or replaced
        elif rep.record_offset[idx] < last_damage:
            uncertain.append(key)           # maybe current: kept aside, not served
            if vec_ok:
                quarantine.append(idx)
        elif not vec_ok:
            uncertain.append(key)
        elif checks is not None and _ttl_of(expiry, checks, fr) is None:
            uncertain.append(key)           # its time to live is lost: kept aside
            quarantine.append(idx)
        else:
            keep.append(idx)
    lost = [] if ck_alive is None else lost_rows(  # keys confirmed by the checkpoint's hashes
        directory, gen, h, data, ck_alive,
        {rep.file_rows[i]: rep.key_of[i] for i in range(rep.rows)}, vecs)
    uncertain += [lr.key for lr in lost if lr.key is not None and lr.key not in uncertain]

    stats_reset: list = []

    def row_of(idx):
        fr = rep.file_rows[idx]
        la, ac = float(rep.last_accessed_at[idx]), int(rep.access_count[idx])
        if checks is not None:      # the column's values only where their check vouches
            got = checks["stats"].get(fr)
            if got is not None:
                la, ac = got
            else:
                stats_reset.append(rep.key_of[idx])       # the record's values: listed
        else:
            if fr < stats["last_accessed_at"].shape[0]:
                got = float(stats["last_accessed_at"][fr])
                if valid_time(got):
                    la = max(la, got)
            if fr < stats["access_count"].shape[0]:
                got = int(stats["access_count"][fr])
                if 0 <= got <= MAX_ACCESS_COUNT:
                    ac = max(ac, got)
        return (rep.key_of[idx], rep.texts[idx], rep.metadata[idx], rep.created_at[idx],
                rep.updated_at[idx], la, ac, rep.importance[idx])

    def vectors_of(idxs):
        if not idxs:
            return np.zeros((0, dim), np.float32)
        return np.stack([fixed[i] if i in fixed else vecs[rep.file_rows[i]] for i in idxs])

    aside, aside_vecs = quarantine_rows(lost)
    qpath = None
    if quarantine or aside:
        qpath = _write_quarantine(
            directory, ns, dim, gen, [row_of(i) for i in quarantine] + aside,
            np.concatenate([vectors_of(quarantine)] + [v[None] for v in aside_vecs]))
    rows = [row_of(i) for i in keep]
    new_vecs = vectors_of(keep)
    ttl_unverified = []
    if checks is None:
        write_expiry(expiry, directory, gen + 1, [rep.file_rows[i] for i in keep])
    else:                                   # every time to live kept, as its check vouches
        ttls = np.zeros((len(keep), 2), np.float64)
        for j, i in enumerate(keep):
            ttls[j], verified = _ttl_of(expiry, checks, rep.file_rows[i])
            if not verified:
                ttl_unverified.append(rep.key_of[i])
        if expiry is not None or ttls.any():
            write_expiry(ttls, directory, gen + 1, range(len(keep)))
    del expiry
    cols, _, _ = write_generation(directory, ns, dim, gen + 1, rows, new_vecs)
    cols.release()
    remove_stale(directory, gen + 1, 0)
    unknown = sum(lr.key is None for lr in lost)
    return {"namespace": ns, "kept": len(keep), "dropped": len(uncertain) + unknown,
            "skipped": rep.skipped, "uncertain": uncertain, "lost_rows": len(lost),
            "lost_keys": [lr.key for lr in lost], "quarantine": qpath,
            "reembedded": len(fixed), "stats_reset": sorted(set(stats_reset)),
            "ttl_unverified": ttl_unverified}


def _file_checks(directory: str, gen: int, h: dict, stats: dict) -> dict | None:
    """Repair's view of a generation's check file (None when its header predates the checks
    or it is missing while the header is lost): ``{"stats": {row: (last_accessed_at,
    access_count)} for rows whose statistics their check vouches for (a torn touch
    completed), "copies": (n, 2) float64 check copies of the TTL, "verified": (n,) bool}``."""
    path = check_path(directory, gen)
    if not (h.get("rowcheck") or (not h and os.path.exists(path))):
        return None
    try:
        a = np.fromfile(path, CHECK_DTYPE)
    except (FileNotFoundError, ValueError):
        a = np.zeros(0, CHECK_DTYPE)
    n = min(a.shape[0], stats["last_accessed_at"].shape[0], stats["access_count"].shape[0])
    last, count = stats["last_accessed_at"][:n], stats["access_count"][:n]
    s = stats_crcs(last, count)
    good = {}
    for rows, c in ((np.flatnonzero((s == a["stats"][:n]) | (s == a["stats_next"][:n])), 0),
                    (np.flatnonzero(stats_crcs(last, count + 1) == a["stats_next"][:n]), 1)):
        for r in rows.tolist():
            good.setdefault(r, (float(last[r]), int(count[r]) + c))
    copies = np.stack([a["expires_at"], a["ttl"]], axis=1) if a.shape[0] else \
        np.zeros((0, 2), np.float64)
    e = expiry_crcs(copies[:, 0], copies[:, 1])
    return {"stats": good, "copies": copies, "verified": (e == a["exp"]) | (e == a["exp_next"])}


def _ttl_of(expiry: np.ndarray | None, checks: dict, row: int):
    """``([expires_at, ttl], verified)`` of a row: its check copy when verified, else its TTL
    column's value (unverified) when that is a valid one, else None (lost)."""
    if row < checks["verified"].shape[0] and checks["verified"][row]:
        return checks["copies"][row].copy(), True
    col = np.zeros(2, np.float64)
    if expiry is not None and row < expiry.shape[0]:
        col = np.array(expiry[row], np.float64)
    exp, ttl = float(col[0]), float(col[1])
    if (exp == 0 and ttl == 0) or (valid_time(exp) and exp > 0 and valid_time(ttl) and ttl > 0):
        return col, False
    return None


def _write_quarantine(directory: str, ns: tuple, dim: int, gen: int, rows: list,
                      vectors: np.ndarray) -> str:
    """Write the memories repair could not vouch for to ``<root>/quarantine.<n>.jsonl`` (an
    export file; ``n`` the first number not taken) and return its path."""

    root = os.path.dirname(os.path.dirname(directory))
    try:
        embedder = read_json(os.path.join(root, STORE_HEADER), "store header").get("embedder")
    except (OSError, StoreCorruptedError):
        embedder = None
    n = 0
    while os.path.exists(path := os.path.join(root, f"quarantine.{n}.jsonl")):
        n += 1
    def owner(key: str) -> tuple:               # the pack's rows: (namespace, key)
        return split_key(key) if ns == PACK_NAMESPACE else (ns, key)

    mems = [(StoredMemory(namespace=owner(k)[0], key=owner(k)[1], text=t,
                          importance=float(imp), metadata=json.loads(meta or b"{}"), created_at=float(ca),
                          updated_at=float(ua), last_accessed_at=float(la),
                          access_count=int(ac), tier=MemoryTier.LONG), vectors[i])
            for i, (k, t, meta, ca, ua, la, ac, imp) in enumerate(rows)]
    export_jsonl(path, str(embedder or "unknown"), dim, mems)
    return path


def bad_rows(vectors: np.ndarray, crcs: np.ndarray) -> list[int]:
    """Every row whose float32 bytes do not have the expected CRC-32 (ascending)."""
    n = vectors.shape[0]
    if n == 0:
        return []
    raw = np.ascontiguousarray(vectors, np.float32).view(np.uint8).reshape(n, -1)
    crc = zlib.crc32
    return [i for i, want in enumerate(np.asarray(crcs, np.uint32).tolist())
            if crc(raw[i]) != want]


def verify_namespace(files: "NamespaceFiles", cols: Columns, rows: int,
                     expiry: np.ndarray | None = None) -> dict:
    """Check every checksum of an open format-2 namespace without changing anything: the
    whole log (frames, CRCs, row rules), each row's ``record_offset`` and live flag against
    the log, every live row's vector against its record's ``vector_crc``, the access
    statistics (finite, in range) and every row's check (access statistics and the TTL
    column ``expiry`` against the check file); what open's check found and could not
    restore exactly (statistics reset, TTLs unverified) is listed too.

    Returns
    -------
    dict
        ``{"rows", "live", "bad_rows": rows whose vector fails its CRC, "errors": messages}``
        -- intact when both lists are empty.
    """
    errors: list[str] = []
    files.flush_pending()
    with open(files.log_path, "rb") as f:
        data = f.read(files.log_bytes)
    try:
        rep = scan_log(data, files.log_path, len(data))
    except StoreCorruptedError as err:
        return {"rows": rows, "live": int(np.count_nonzero(cols.alive[:rows])), "bad_rows": [],
                "errors": [str(err)]}
    if rep.rows != rows:
        errors.append(f"{files.log_path} commits {rep.rows} rows, the namespace holds {rows}")
    n = min(rep.rows, rows)
    offs = np.asarray(rep.record_offset[:n], np.int64)
    wrong = np.flatnonzero(np.asarray(cols.record_offset[:n], np.int64) != offs)
    if wrong.shape[0]:
        errors.append(f"{cols.path('record_offset')} is corrupted at offset "
                      f"{int(wrong[0]) * 8}: row {int(wrong[0])} does not point at its record")
    for name, logged in (("created_at", rep.created_at), ("updated_at", rep.updated_at),
                         ("importance", rep.importance)):
        col = getattr(cols, name)
        wrong = np.flatnonzero(col[:n] != np.asarray(logged[:n], col.dtype))
        if wrong.shape[0]:
            errors.append(f"{cols.path(name)} is corrupted at offset "
                          f"{int(wrong[0]) * col.dtype.itemsize}: row {int(wrong[0])} "
                          f"disagrees with its PUT record ({wrong.shape[0]} row(s))")
    alive = np.ones(rep.rows, np.bool_)
    if len(rep.dead):
        alive[np.asarray(rep.dead, np.int64)] = False
    diff = np.flatnonzero(alive[:n] != cols.alive[:n])
    if diff.shape[0]:
        errors.append(f"the live flags of {files.directory} disagree with its log at row "
                      f"{int(diff[0])}")
    live = np.flatnonzero(alive[:n])
    crcs = np.asarray(rep.vector_crc, np.uint32)[live]
    bad = [int(live[i]) for i in bad_rows(cols.vectors[live], crcs)] if live.shape[0] else []
    if bad:
        errors.append(f"{cols.path('vectors')} is corrupted at offset "
                      f"{bad[0] * cols.dim * 4}: {len(bad)} row(s) fail their records' "
                      f"vector CRC, the first row {bad[0]}")
    stats = invalid_stats(cols, n)
    if stats.shape[0]:
        errors.append(f"{files.directory}: {stats.shape[0]} row(s) hold invalid access "
                      f"statistics or lifecycle fields, the first row {int(stats[0])}")
    errors += _check_errors(files, cols, expiry, n)
    return {"rows": rows, "live": int(live.shape[0]), "bad_rows": bad, "errors": errors}


def _check_errors(files: "NamespaceFiles", cols: Columns, expiry: np.ndarray | None,
                  n: int) -> list[str]:
    """verify()'s messages for the row checks: open's findings (``files.check_report``) and
    what a scan of rows ``[0, n)`` finds now."""
    if files.checks is None:
        return []
    out = []
    rep = files.check_report
    path = files.checks.path
    sc = files.checks.scan(cols, expiry, n)
    reset = sorted(set(rep.reset if rep else []) | set(sc.stats_bad.tolist()))
    unverified = sorted(set(rep.unverified if rep else []) | set(sc.copy_bad.tolist()))
    if reset:
        out.append(f"{path}: the access statistics of {len(reset)} row(s) failed their check "
                   f"and hold their PUT record's values (the first row {reset[0]})")
    if unverified:
        out.append(f"{path} is corrupted at offset {unverified[0] * CHECK_DTYPE.itemsize}: "
                   f"the time to live of {len(unverified)} row(s) cannot be verified (the "
                   f"first row {unverified[0]})")
    if sc.ttl_differs.shape[0]:
        out.append(f"{expiry_path(files.directory, files.generation)}: {sc.ttl_differs.shape[0]} "
                   f"row(s) differ from their verified copy (the first row "
                   f"{int(sc.ttl_differs[0])})")
    return out


def embedder_reproduces(epoch_dir: str, embedder) -> bool:
    """Whether ``embedder`` re-embeds stored texts of an epoch to their records' vectors bit
    for bit (up to 8 texts of its first namespace with rows; one match suffices, as rows
    written with precomputed vectors never match): what vouches for a rebuilt store
    header."""
    for entry in sorted(os.listdir(epoch_dir)):
        hpath = os.path.join(epoch_dir, entry, NAMESPACE_HEADER)
        try:
            h = read_json(hpath, "namespace header")
            lpath = log_path(os.path.join(epoch_dir, entry), h["generation"])
            with open(lpath, "rb") as f:
                data = f.read(1 << 20)
        except (OSError, KeyError, TypeError, StoreCorruptedError):
            continue
        rep = scan_log(data, lpath, 0, salvage=True)
        if not rep.rows:
            continue
        if h.get("dim") != int(embedder.dim):
            return False
        texts = list(rep.texts[:8])
        try:
            vecs = encoded(embedder.encode(texts), len(texts), int(embedder.dim),
                           str(embedder.name))
        except Exception:
            return False
        return any(zlib.crc32(np.ascontiguousarray(v)) == c
                   for v, c in zip(vecs, list(rep.vector_crc[:8])))
    return False


def namespace_intact(directory: str, dim: int, durability: str) -> bool:
    """True when a namespace opens cleanly (its checkpoint files pass their CRCs, every TTL's
    check copy verifies) and every row's vector matches its record."""
    try:
        files, cols, _ = open_namespace(directory, dim, durability, True)
        report = files.check_report
        close_namespace(files, cols)
        if report is not None and (report.unverified or report.reset):
            return False                  # a damaged check: repair lists the keys
        files, cols, rep = open_namespace(directory, dim, durability, False, full=True)
    except StoreCorruptedError:
        return False
    try:
        return first_bad_vector(cols.vectors, rep, 0) is None
    finally:
        close_namespace(files, cols)
