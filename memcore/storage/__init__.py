"""The on-disk format of :class:`~memcore.LongTermMemory`: files, records, commits, recovery.

Everything a store persists lives under its root directory; no namespace string ever becomes
a path by itself.

Modules
-------
- :mod:`~memcore.storage.layout`: file names, headers, the store root (lock, epochs).
- :mod:`~memcore.storage.records`: the record layout (encode, copy, vector CRCs).
- :mod:`~memcore.storage.log`: scanning a whole log (replay, salvage).
- :mod:`~memcore.storage.checkpoint`: checkpoint files, the key index, reading the log tail.
- :mod:`~memcore.storage.columns`: the memory-mapped column files and their value checks.
- :mod:`~memcore.storage.generations`: a generation's files and the commit protocol
  (commits, checkpoints, writing and retiring generations).
- :mod:`~memcore.storage.recovery`: opening a namespace (recovery from checkpoint and tail).
- :mod:`~memcore.storage.repair`: verify (a scrub) and repair (a new generation from every
  intact record).
- :mod:`~memcore.storage.mapped`: the hybrid index files; :mod:`~memcore.storage.jsonl`:
  export and import.
- :mod:`~memcore.storage.catalog`: the namespace catalog (which namespaces an epoch holds,
  and a summary of each), so that opening a store opens no namespace.

Files
-----
::

    <root>/
      memcore.json              store header (JSON): {"format": "memcore-ltm", "version": 2
                                (3 with a pack, see Format 3),
                                "embedder": name, "dim": dim, "epoch": e}
      memcore.copy.json         a copy of memcore.json, written just before it (rebuilds a
                                lost or damaged store header: ``repair=True``)
      LOCK                      the single-writer lock (filelock / fcntl.flock); never read
      catalog.<e>.log           derived: the namespaces of epoch e, one CRC-checked JSON line
                                each (directory name, namespace), and at a clean close a
                                summary line {dir: [live, rows, has_ttl]}; reconciled with
                                the listing of ns.<e>/ at every open, rebuilt from each
                                namespace.json when missing or damaged (storage.catalog)
      ns.<e>/                   the namespaces of epoch e (``reindex``/``migrate`` write e+1)
        n-<slug>-<hash>/        one namespace; hash = first 32 hex digits of sha256 of the
                                namespace as a JSON list, slug = up to 40 chars of [a-z0-9_-]
          header.json           namespace header (JSON), see below
          namespace.json        {"namespace": [...]}, written once with the directory: names
                                the namespace when header.json is lost or damaged
          log.<g>               append-only record log of generation g
          vectors.<g>.f32       (capacity, dim) float32 memory map, row-major, unit rows
          created_at.<g>.f64    (capacity,) float64 Unix seconds
          updated_at.<g>.f64    (capacity,) float64 Unix seconds
          last_accessed_at.<g>.f64  (capacity,) float64 Unix seconds
          access_count.<g>.i64  (capacity,) int64
          importance.<g>.f32    (capacity,) float32 in [0, 1]
          record_offset.<g>.i64 (capacity,) int64: log offset of each row's PUT record
          expiry.<g>.f64        (capacity, 2) float64 [expires_at, ttl] (0: never), only in a
                                namespace that ever had a time to live (storage.columns;
                                written before the commit like the columns; absent: none)
          rowcheck.<g>.u8       (capacity,) 32-byte rows: the checks of the fields that change
                                in place, and a second copy of each row's [expires_at, ttl]
                                (see Row checks)
          alive.<g>.c<c>.u8     (rows,) uint8 (bool): live flags at checkpoint c
          keyhash.<g>.c<c>.u64  (live,) uint64, ascending: key index at checkpoint c
          keyrow.<g>.c<c>.i64   (live,) int64: the row of each key hash
          hx<s>.<name>.<g>.i<c>.<dtype>  one array of the hybrid index of structure s
                                (bit 0: stemmed BM25, bit 1: date words) as of checkpoint c
          hx<s>.state.<g>.i<c>.npz       that index's small state (counters, sums, speakers)

The directory name is injective (the hash covers the exact namespace; the header stores the
namespace and open checks the two agree), lower-case (safe on case-insensitive file systems),
ASCII, at most 80 characters, and starts with ``n-`` (so "CON", "..", "" and friends are never a
name). All arrays are little-endian; column files grow by doubling their capacity
(``posix_fallocate``, so a full disk raises ENOSPC, never SIGBUS, then a new memory map);
rows are append-only: a replaced or deleted key's row is only marked dead and stays garbage
until ``compact()`` writes a new generation.
Checkpoint files (``*.c<c>.*``) are written once under a new name and never modified; the
previous checkpoint's files are deleted after the header names the new one.

Namespace header: ``{"format": "memcore-ltm-namespace", "version": 2, "namespace": [...],
"dim": dim, "generation": g, "records": r, "log_bytes": b, "rows": n, "checkpoint": c,
"live": l, "crc": {"alive": .., "keyhash": .., "keyrow": .., "record_offset": ..},
"rowcheck": 1}`` -- a
*verified checkpoint*: the first ``b`` bytes of the log (``r`` records), the
first ``n`` rows of every column file and the files of checkpoint ``c`` (live flags of rows
``< n``, the ``l`` live keys' hashes and rows) were fsynced before the header was written, and
each of the first ``n`` vectors was checked against its PUT record's ``vector_crc`` (the rows
written since the previous checkpoint at every checkpoint; every live row when compaction
writes a generation). ``"crc"`` holds the CRC-32 (zlib) of each checkpoint file's bytes and of
the first ``n`` rows of ``record_offset``, ``created_at``, ``updated_at`` and ``importance``
(the columns the log implies, :data:`~memcore.storage.columns.CHECKED_COLUMNS`; access
statistics and ``expiry`` change in place and are covered by the row checks instead);
open verifies them (a mismatch ->
:class:`StoreCorruptedError` naming the file; ``repair`` rebuilds the namespace from its log).
Headers written before checksums lack the entry and are not verified (before row checks,
``"rowcheck"``: open writes the check file from the values as they are, and the next header
says so). Headers are replaced
atomically: write ``header.json.tmp``, fsync, rename over ``header.json``, fsync the directory.

Row checks
----------
``last_accessed_at`` and ``access_count`` change with every touch and ``expiry`` with
``refresh_ttl``, without a log record, so no checkpoint CRC can cover them. Each row's 32 bytes
in ``rowcheck.<g>.u8`` (:data:`~memcore.storage.columns.CHECK_DTYPE`) do: ``stats`` and
``stats_next``, CRC-32s of the row's ``last_accessed_at`` and ``access_count`` bytes;
``expires_at``, ``ttl``, a second copy of the row's TTL column; ``exp`` and ``exp_next``,
CRC-32s of that copy. New rows are stamped before their commit; a touch writes ``stats_next``
(the new values' CRC), then ``last_accessed_at``, then ``access_count``, then ``stats``; a TTL
refresh writes ``exp_next``, then the copy, then ``exp``, then the TTL column
(:class:`~memcore.storage.columns.RowChecks`). So a process killed at any point leaves each row
verified by one of its two CRCs -- or, for a touch killed between its two values, by
``stats_next`` once ``access_count + 1`` is assumed, which open then completes -- never a
false alarm. Open (every row, one vectorised CRC pass over 32 bytes a row: ~4 ms per 1e5
rows) and ``verify()`` check them:

- A TTL column value that differs from its verified copy (a flipped bit, zeroed, truncated
  or deleted column file) is restored from the copy (one warning): a damaged expiry never
  makes a live memory expire or an expired one live.
- A copy that fails both its CRCs (a damaged check file) leaves the TTL column's value served,
  unverified: ``verify()`` reports the rows and ``repair()`` keeps the value and lists the
  key (``"ttl_unverified"``); a key whose TTL column value is invalid too is set aside.
- Access statistics that fail their check take their PUT record's values (what the log
  vouches for: the statistics as of the put, or of the compaction that copied the record).
  When the record's values are what the check holds (a column damaged before any touch) the
  values are exact and nothing is reported; otherwise the touches since are lost:
  ``verify()`` reports the rows (every open does, until ``repair()`` or a touch rewrites the
  check) and ``repair()`` lists the keys (``"stats_reset"``).

Compaction, repair and migrate write the new generation's check file from the rows they
write, fsynced before its header. Memcore before row checks ignores the file (and rewrites
headers without ``"rowcheck"``, so the next open stamps the rows again); a process of such a
version that touches rows and is killed before its next checkpoint leaves checks that fail,
reported as above.

Hybrid index: each hybrid index the namespace has built (:class:`memcore.recall.index.HybridIndex`:
postings, document lengths, episode windows, speakers, int8 codes, moment sums) is written at
every checkpoint that changes it, its arrays (whole capacity; the zero rows past the last
non-zero one are a hole) and ``small_state()``; the header's ``"index"`` entry
``{"checkpoint": c, "structures": {s: {name: [dtype, shape]}}, "crc": {file name: CRC-32}}``
names them, and exists only for the header's own checkpoint ``c``. The index is derived state:
a file that fails its CRC, is missing (a read-only open racing a writer that replaced the
checkpoint) or cannot be read logs one warning (INFO for the race) and the index is rebuilt
from the log on its first hybrid search -- never a wrong ranking. Open restores each index with
``HybridIndex.restore`` over private copy-on-write maps of its files
(:class:`~memcore.storage.mapped.MappedArrays`: the files never change after they are written)
and applies the log tail's PUT and DEL records to it in log order, so it is current before the
first search. ``compact()`` and ``reindex()`` build the indexes a namespace had for the new
rows and checkpoint them. A store with hybrid weights keeps the index current on every write
(a write that finds it missing builds it first) and a writer checkpoints an index as soon as one
exists that no checkpoint names; a namespace still without an entry (a store written without
hybrid weights, or by an older memcore) builds it from the log on its first hybrid search or
write, or ahead of time with ``memcore warmup``.

Key index: the key hash is the first 8 bytes (little-endian) of BLAKE2b of the key's UTF-8
bytes. A key's row is found in a dict of the keys written since the checkpoint, else by
binary search of ``keyhash`` -- a match counts only while its row is alive, and only once the
key of the row's PUT record (read at ``record_offset``) equals the key, so a hash collision
never returns another key's row.

Record layout (little-endian)
-----------------------------
Every record is a 12-byte frame ``magic u32 = 0x5243_4D4D ("MMCR"), length u32, crc32 u32``
followed by ``length`` payload bytes; the CRC-32 (zlib) covers the payload.

- PUT (``op = 1``), 64 fixed bytes then the variable parts::

      op u8, pad 3 (a batch's count, see Commit protocol), row u32, created_at f64,
      updated_at f64, last_accessed_at f64,
      access_count i64, importance f64, vector_crc u32, key_len u32, text_len u32,
      meta_len u32, key utf-8, text utf-8, metadata JSON utf-8

  ``row`` must equal the number of PUT records before it (rows are append-only), and
  ``vector_crc`` is the CRC-32 of the row's ``dim * 4`` vector bytes, so a key can never come
  back with another row's vector. A PUT of a key that already has a row kills that row.
- DEL (``op = 2``): ``op u8, pad 3, row u32, key_len u32, key utf-8``; ``row`` must be the key's
  live row.

The log is the source of truth for which rows exist, their keys, texts, metadata,
``created_at``, ``updated_at``, ``importance`` and ``alive``; the columns and checkpoint files
hold what it implies as of the checkpoint, and open re-derives the rows after it from the log
tail. Keys, texts and metadata are never held in RAM for a whole namespace: they are read from
a row's PUT record (one ``pread``, CRC checked; a damaged record raises
:class:`StoreCorruptedError` naming the log and offset) for the rows a call returns.
``last_accessed_at`` and ``access_count`` are refreshed in the memory maps only (no log
record per search; covered by the row checks); for the log tail's rows open takes the larger
of the mapped value and the PUT record's value. ``alive`` lives in RAM and reaches disk only
in checkpoint files, written
after the log they summarise was fsynced, so no live flag on disk ever runs ahead of its log
record.

Commit protocol
---------------
A write (``put``, ``put_many``, ``put_stored``, ``delete``, ``delete_many``) first writes
vectors and columns of *new* rows into the memory maps (never touching a committed row's
vector), then appends its records to the log with one ``write`` -- the commit point.
``put_many`` commits once (as do ``delete_many`` and a namespace's ``sweep``, their DEL
records one batch): a batch of several records is written with its first record's magic
pending (first byte 0, :data:`~memcore.storage.records.PENDING_MAGIC`) and the batch's
record count in its 3 pad bytes (u24; :func:`~memcore.storage.records.mark_batch`; every
other record has 0 there), then committed by writing that one byte (``"fsync"``: after
syncing the records). A process killed mid-batch leaves an intact pending record followed by
some of the batch: recovery cuts the log there like a torn tail, so the batch is all or
nothing (a single record is atomic by its CRC). Format 2 is unchanged: every reader ignores
the pad bytes, so memcore before the batch count reads these logs as before (and a log it
wrote, without counts, opens here; only a pending record of its own that a crash left is
then reported as damage, see Recovery).

- ``durability="flush"`` (default): the records are written to the OS before the call returns.
  An acknowledged write survives the process being killed (the memory maps and the log share
  the page cache), not a power loss.
- ``"fsync"``: additionally ``fdatasync`` the vectors file before, and the log after, the
  append: an acknowledged write survives power loss (two syncs per call).
- ``"none"``: records are buffered in the process and written at 1 MiB, ``flush()``,
  ``close()``, a checkpoint or a read of a buffered record; a crash loses the buffered writes
  (tests, bulk loads).

Compaction first checks every live vector against its PUT record's ``vector_crc`` (a mismatch
-> :class:`StoreCorruptedError` naming the vectors file, byte offset and row; nothing is
written, the old generation stays the store and ``repair()`` drops that key), then copies each
live row's PUT record byte for byte, patching only its row, ``last_accessed_at`` and
``access_count`` (and so the frame CRC): the result is what re-encoding would write. The
``vector_crc`` is never recomputed from the vectors file, so a damaged vector cannot be
laundered into a consistent row. The new generation is written with its checkpoint 0 (every
row live) and fsynced before the header naming it replaces the old one.

A checkpoint (``close()``, ``flush()``, compaction, and automatically after a write once
:data:`CHECKPOINT_ROWS` rows or :data:`CHECKPOINT_BYTES` log bytes accumulated since the last
one) checks the vectors of the rows written since the last checkpoint against their records'
``vector_crc`` (a mismatch -> :class:`StoreCorruptedError` as above; the header is not
advanced, so the next open finds the row again), fsyncs the log and every column file, writes
and fsyncs the files of checkpoint ``c + 1`` (live flags; the key index: the previous one's
entries whose rows are still alive merged with the keys written since, sorted by hash), then
replaces the header and deletes checkpoint ``c``'s files. A crash at any point leaves either
the old header with its intact files, or the new one with its.

Recovery (on open)
------------------
1. Header: an unknown format or a missing field -> :class:`StoreCorruptedError`; a version
   newer than :data:`FORMAT_VERSION` -> :class:`FormatVersionError` (never a misread).
2. The checkpoint's live flags are read (``rows`` bytes) and its key index memory-mapped;
   nothing else proportional to the number of rows is read.
3. Only the log after ``log_bytes`` is scanned record by record (frames and CRCs by the numba
   kernel :func:`memcore.kernels.logscan.scan_records`, fixed fields and keys decoded
   column-wise). At the first bad record at offset ``x``: if any valid record follows it, the
   damage is in the middle of the file -> :class:`StoreCorruptedError` naming the file and
   ``x``; a log shorter than ``log_bytes`` -> the same (truncated). An intact record with
   the pending magic past ``log_bytes`` and a batch count ``c >= 2``, followed by at most
   ``c - 1`` intact records and nothing valid after them, is an uncommitted batch: cut
   there. A pending record without a count, or followed by more records than its batch
   holds, is damage (a zeroed first byte: its records committed; ``repair`` restores it).
   A whole record (frame and length intact, inside the file) with a bad CRC and a non-zero
   last byte is damage too (a flipped bit: a torn write is short, or ends in zeros).
   Otherwise it is a torn tail (a write cut short by a crash) and the log is truncated to
   ``x``, the end of the last committed record (read-only opens just ignore it). A
   CRC-valid record that breaks the row rules is corruption. A *committed* batch head
   (its magic set, a batch count ``c >= 2``) followed by fewer than ``c - 1`` intact records,
   or cut short itself past its count's bytes, is damage too: a batch's records are all
   written before its commit byte, so no crash leaves one
   (:func:`~memcore.storage.log.short_batch`; a read-only open cuts it like an uncommitted
   batch, as it would see racing the writer's append). (Zeroing the first byte of the
   *last* batch's first record leaves what a crash before its commit byte leaves: that batch
   is cut.) A log shortened inside its last single record, within the first 16 bytes of
   its last batch, or exactly at a record boundary reads like a crash that tore that write;
   the columns witness it (:func:`~memcore.storage.recovery.witnessed_cut`): a row's
   ``record_offset`` is written only after its record commits, its ``created_at`` before,
   so both set for the row past the log's last row mean a committed PUT was lost -> the
   writer's open raises (a reader, which may race the append, does not check). Under
   ``durability="none"`` a crash loses buffered records whose offsets were already written,
   so such a writer first marks the header ``"unwitnessed": 1``; the next writer that
   writes through zeroes ``record_offset`` past its rows and its checkpoint drops the mark.
   What no check sees: a cut that removes only DEL records (no row witnesses a delete),
   one inside a ``"none"`` writer's window, or a column file damaged together with the log.
4. Every row of the tail (rows ``n`` and up) is checked against its record's ``vector_crc``;
   a mismatch -> :class:`StoreCorruptedError` naming the vectors file, byte offset and row.
   (Rows below ``n`` were verified and fsynced, and rows are append-only: nothing writes a
   committed row's vector again; ``repair()`` checks all.) The tail rows' columns are
   rewritten from their records, then its PUT and DEL records are applied in order to the
   live flags and the key index.
5. Files of other generations, checkpoints or epochs and half-created or half-deleted
   namespace directories (``tmp-*``, ``trash-*``) are removed.

Isolation: a namespace that fails to open (any :class:`StoreCorruptedError`: a damaged
header, record, checkpoint or vector) is kept out of the store with one warning; the other
namespaces open and serve, and any call on the damaged one raises the error
(``LongTermMemory.damaged``; ``repair()`` rewrites it, from ``namespace.json`` and its log
when its header is gone). A lost or damaged store header is never an empty store: open
raises, and ``repair=True`` rebuilds it from ``memcore.copy.json`` (or, for stores written
before the copy, from the given embedder once it re-embeds stored texts bit for bit).

A read-only open (no lock; a writer may be working) that finds the checkpoint files its
header named already replaced reads the header again; it maps the files and holds the log
open, so it keeps seeing the store as of opening even after the writer compacts it.

Damage inside the checkpointed part of the log is found when a record is read (named with
its file and offset) or by ``repair()``, which re-scans every log and re-checks every vector.

Verified reads: every row a call returns (search hits, ``get``, ``vector``, exports) is
read from its PUT record, and its vector is checked against the record's ``vector_crc``
first (:meth:`NamespaceFiles.verified_put`: one CRC-32 of ``dim * 4`` bytes, ~0.6 us per
384-d row) -- a damaged vector raises :class:`StoreCorruptedError` naming the vectors file,
offset and row, never a wrong memory. ``LongTermMemory.verify()`` (``memcore verify``)
scrubs everything without changing it: the whole log, record offsets and live flags against
it, every live vector, the numeric columns and the row checks; open validates the numeric
columns (timestamps finite within 1e11 s, ``access_count`` in [0, 2**32], importance in
[0, 1]) and restores a damaged value from its record, and checks every row (Row checks).
The hybrid index files (codes included) are
covered by the header's CRCs. ``repair()`` re-embeds a damaged vector's logged text when
the store has its embedder and keeps it only when the result matches the CRC bit for bit.

Repair never resurrects: a key is kept only when something vouches for its last intact
record -- the checkpoint's CRC-verified live flags for checkpointed rows, else its record
following every damaged stretch of the log (a log cut below its checkpoint counts as damaged
at the cut: the records after it are unknown); the others are dropped and listed (report
``"uncertain"``, and the CLI's human output), and what may still be current is set aside in
``quarantine.<n>.jsonl``.

Exceptions: every commit step (write, delete, checkpoint, clear, compaction, reindex) marks
its namespace (or, for reindex, the store) stale until it finished; any exception in
between -- ``KeyboardInterrupt``, ``MemoryError``, a failed write -- leaves the mark, and the
next call reloads the namespace from its files, which hold the whole commit or none of it.

:func:`repair_namespace` rewrites a namespace as a new generation from every intact record:
records with a bad frame or CRC are skipped (the scan resynchronises on the next magic), a
PUT whose vector fails its CRC is dropped, and the rest is replayed as usual. Compaction and
repair are crash-safe: the new generation's files are complete and fsynced before the header
that names them replaces the old one; until then the old generation is the store.

Format 3: the pack of small namespaces
--------------------------------------
Format 3 is format 2 plus one shared namespace directory, the *pack*, that holds the rows of
many small namespaces (one per user, as agent frameworks keep them): a namespace's cost is
its rows, not ~13 files, 4 KB blocks and fsyncs of its own. The store header says
``"version": 3`` once the store holds a pack (written before the pack is created); a
format-2 store opens, reads and writes as before, and gets a pack (and version 3) when a new
namespace of at most ``PACK_MAX`` rows is written. The pack is on by default
(``memcore.stores.long_pack.ENABLED``; the environment variable ``MEMCORE_PACK=0`` turns it
off: new namespaces then get directories of their own, format 2, and a store that already
has a pack still serves it). A first write of more than ``PACK_MAX`` rows (a bulk load)
creates a directory at once, so a store of a few large namespaces stays format 2 and
creates no pack. A memcore that reads only version 2 refuses a version-3 store (it would
take the pack for a namespace). Files::

      ns.<e>/n-_pack-<hash>/    the pack: a format-2 namespace directory of the reserved
                                namespace ["\u0000pack"] (no user namespace may hold a NUL),
                                every file above, plus
        nsid.<g>.i64            (capacity,) int64: each row's namespace id, a side column
                                like ``expiry`` (written before the log commit, fsynced at
                                checkpoints, carried by compaction); 0: not written
      catalog.<e>.log           also {"ns": [...], "pack": id} (a namespace in the pack)
                                and {"unpack": id} (cleared, or moved to a directory)

Pack records are format-2 PUT and DEL records whose key is composite: the namespace as
compact JSON (``json.dumps(ns, ensure_ascii=False, separators=(",", ":"))``), a NUL, the
key (:func:`~memcore.storage.layout.pack_key`, :func:`~memcore.storage.layout.split_key`).
The namespace id is the first 8 bytes (little-endian, signed; never 0) of BLAKE2b of that
JSON and its NUL (:func:`~memcore.storage.layout.namespace_id`); the log implies it, so
``verify``/``repair`` need nothing new, and a pack generation without ``nsid`` (a repaired
one) gets it from its keys at open. Open reads the live flags and ``nsid`` (one argsort:
``id -> rows``, each namespace's live count) and reads no record; the catalog names the ids
(a missing or damaged catalog: one record per unnamed id names it); an id with no live row
is no namespace. A namespace's first use gathers its rows (O(its rows), never O(pack rows)):
records decoded and CRC checked, each key's namespace checked (an id collision only costs a
record read), each vector checked against its record's ``vector_crc``; a damaged record or
vector is left out and raises for its key (as a format-2 read does). The copy ranks with
the in-memory code path, is kept in an LRU bounded by rows, and every write commits to the
pack first (one log append per ``put_many``: no file created, no fsync under
``durability="flush"``); access statistics and TTL refreshes are written through.
``clear`` writes DEL records of the namespace's keys (one batch); ``compact()`` compacts the
pack like any namespace (the rows of cleared or moved namespaces are not counted).

Promotion: a namespace past :data:`~memcore.stores.long_pack.PACK_MAX` live rows moves to a
directory of its own (format 2, as today: large namespaces never share): the directory is
created empty (atomically, ``tmp-*`` then renamed), its rows are committed there as one batch,
then their pack rows get DEL records (one batch). Open settles a move cut short: when a
namespace has both, a directory that holds rows wins (the pack's rows are deleted), an
empty one loses (removed). Damage: a pack that fails to open is isolated like a namespace
(``damaged`` names its directory); each of its namespaces raises the error, which names
them; namespaces with directories open and serve; ``repair()`` rewrites the pack from its
intact records and reports per namespace (quarantine lines carry namespace and key).
``verify()`` reports an intact pack as its namespaces (``rows`` = ``live``), a damaged one
under its reserved namespace.
``memcore migrate PATH`` (:meth:`LongTermMemory.migrate`) turns a format-2 store (or a
format-1 one) with namespaces of at most ``PACK_MAX`` live rows into format 3 as the 1 -> 2
migration does: every live row written into a new epoch (the small namespaces into its pack,
the others as directories), then the store header naming it and version 3 (the commit
point); until then the old store is the store.

Format 1 (older stores)
-----------------------
Format 1 had no checkpoint files or ``record_offset`` column (``alive.<g>.u8`` was a column
map), and open replayed the whole log into RAM (keys, texts and metadata as Python objects).
Such a store opens read-only, served as it is (a warning names ``memcore migrate PATH``); a
writer gets :class:`FormatVersionError` with the same hint. ``memcore migrate PATH``
(:meth:`LongTermMemory.migrate`) writes every namespace's live rows as format 2 into a new
epoch and then replaces the store header (the commit point): until then the format-1 store is
the store.
"""

from memcore.storage.checkpoint import (  # noqa: F401
    CHECKPOINT_BYTES,
    CHECKPOINT_ROWS,
    KeyIndex,
    PutRecord,
    key_hashes,
)
from memcore.storage.columns import (  # noqa: F401
    INITIAL_CAPACITY,
    Columns,
    expiry_path,
    invalid_stats,
)
from memcore.storage.generations import (  # noqa: F401
    NamespaceFiles,
    close_namespace,
    drop_namespace,
    new_key_index,
    retire_generation,
    write_generation,
    write_namespace,
)
from memcore.storage.recovery import OpenState, adopt_replay, open_namespace  # noqa: F401
from memcore.storage.repair import (  # noqa: F401
    bad_rows,
    embedder_reproduces,
    namespace_intact,
    repair_namespace,
    verify_namespace,
)
from memcore.storage.mapped import (  # noqa: F401
    MappedArrays,
    read_index,
    structures as index_structures,
    write_index,
)
from memcore.storage.jsonl import EXPORT_FORMAT, export_jsonl, import_jsonl  # noqa: F401
from memcore.storage.layout import (  # noqa: F401
    DURABILITY_MODES,
    FORMAT_VERSION,
    LOCK_FILE,
    NAMESPACE_HEADER,
    STORE_HEADER,
    StoreRoot,
    ann_path,
    atomic_write_json,
    os_errors,
    fsync_dir,
    namespace_dirname,
    namespace_id,
    pack_key,
    read_store_header,
    split_key,
    recover_store_header,
    missing_header_error,
    store_epochs,
    write_store_header,
)
from memcore.storage.log import Replay, first_bad_vector, scan_log, scan_log_exact  # noqa: F401
from memcore.storage.records import (  # noqa: F401
    FRAME,
    copy_puts,
    encode_delete,
    encode_put,
    encode_puts,
    first_bad_row,
    record_vector_crcs,
    vector_crcs,
    verify_vectors,
)
