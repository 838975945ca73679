"""PostgresMemory: the long-term tier in PostgreSQL + pgvector, for fleets sharing one memory.

The contract is :class:`~memcore.LongTermMemory`'s (the API and semantics of
:class:`~memcore.core.store.MemoryStore`, the tier protocol, export/import); many processes on
many hosts may write and search one namespace at once.

Schema (owned by memcore, created by :meth:`PostgresMemory.setup`, ``schema_version`` 3), in
one PostgreSQL schema (default ``memcore``):

- ``memcore_meta(name, value)``: ``schema_version``, ``embedder_name``, ``dim``; checked on
  every open (:class:`~memcore.errors.EmbedderMismatchError`, as for the embedded store).
- ``memcore_namespaces(namespace, live, version, clears)``: one row per namespace, the
  namespace as a JSON array of its segments (reversible, injective). Every transaction that
  puts, deletes, clears or sweeps in a namespace takes this row's lock first, so writers of
  one namespace commit in the order of the sequence numbers they draw (the hybrid replica
  below relies on it). Reads never take it (access statistics below). Statements that lock
  memory rows lock them in key order, so writers and readers never deadlock.
- ``memcore_memories``: one row per memory -- ``namespace`` (the distribution key under
  Citus; the primary key is ``(namespace, key)``), text, importance, metadata (``json``: the JSON text
  as written, so floats stay floats, ``-0.0`` and key order are kept; filters cast it to
  ``jsonb``),
  lifecycle (float8 Unix seconds, access_count), ``seq`` (write order: a put draws a new one,
  as a row of the embedded store's append-only table), ``tseq`` (equal to ``seq``; read by
  nothing since version 3) and ``embedding vector(dim)``, ``expires_at`` and ``ttl``
  (float8, 0: never expires), with a B-tree on ``(namespace, seq)`` (what a hybrid replica
  synchronises new rows from), a partial one on ``(namespace, expires_at)`` of the expiring
  rows and an HNSW index (``vector_ip_ops``) on the embeddings; ``fillfactor`` 70, so an
  access update finds room in its page (a HOT update), and ``toast_tuple_target`` 8160, so
  a row's embedding stays in its page (pgvector stores vectors ``EXTERNAL``: above the
  default 2,032 bytes a row -- 2.1 kB on average at 384-d with the tokens -- it would move
  to the TOAST table). ``tokens`` (``bytea``, since 2026-12-06; added on open): the memory's
  BM25 document as token hashes (:mod:`memcore.stores.pg_terms`), what a stateless searcher
  indexes; NULL in a row written before, whose text the searcher tokenises. Version 1 (no
  time to live) is migrated by ``setup()`` on open (``ALTER TABLE ... ADD COLUMN``, run only
  when the columns are missing); its memories never expire. Version 2 is migrated to 3 the
  same way: metadata
  ``jsonb`` becomes ``json`` (one table rewrite; the key order ``jsonb`` dropped stays lost),
  the ``(namespace, tseq)`` index is dropped.
- ``memcore_deleted(namespace, key, seq)``: the last delete of each deleted key (its sequence
  number), so the hybrid replicas drop deleted rows without reloading; a ``clear`` empties it.
- ``memcore_touches(namespace, key, tseq)`` (version 3): the last in-place change of each
  memory (access statistics, a refreshed expiry) under a new sequence number, with a B-tree on
  ``(namespace, tseq)``: what the hybrid replicas read changed rows from; a ``clear`` empties
  it.

Ranking where the data is (similarity preset, ``HybridWeights.similarity()``): the fused
score ``w_similarity * sim + w_recency * 0.5 ** (age / half_life) + w_importance *
importance`` (``sim`` the inner product of unit vectors) is ordered in SQL, exactly, over the
namespace's rows when it holds at most ``exact_max_rows`` of them. Above that, pgvector's HNSW
index gives the ``C`` nearest candidates (``hnsw.ef_search`` raised to ``C`` for the
transaction: its default of 40 silently caps candidates; iterative index scans in strict order
so a namespace or metadata filter does not starve them), SQL re-ranks them by the fused score,
and they suffice when the ``top_k``-th fused score is at least ``w_similarity * sim_C +
w_recency + w_importance`` (``sim_C`` the lowest candidate similarity: no memory outside the
candidates can score more), or when ``sim_C`` is below the threshold; otherwise ``C``
doubles, up to pgvector's ef_search limit of 1000, then the exact order runs. The bound is exact
over what HNSW returns; HNSW itself is approximate (a true neighbour it misses is missed).
Scores are computed in float8 (the embedded store's kernel in float32): near-ties may order
differently within float32 rounding. Recency is clamped at 2 ** -1000 (PostgreSQL raises
on float underflow), which changes no order.

Hybrid recall (any other :class:`~memcore.HybridWeights`) is **not** computed in SQL: BM25
with episode windows, the episodic context similarity and the per-query z statistics are
computed by the embedded store's code (:mod:`memcore.recall`) over an in-process
replica of the namespace, synchronised before each hybrid query: new rows by ``seq``,
deletions from ``memcore_deleted``, rows changed in place from ``memcore_touches`` above a
safe mark (:class:`_Replica`: those changes commit in any order); a clear reloads the
namespace. Ranking is therefore identical to the
embedded store's (LoCoMo dev R@10 equal: 0.8131 with MiniLM and the hybrid default, 0.7832 with
the hashing embedder; bench/results/postgres-20261202T012021Z), at the cost of holding the
namespace's vectors in the searching process and of transferring them once (its first
hybrid search loads the namespace).

Stateless hybrid recall (``PostgresMemory(..., replica=False)``; not the default, because it
is exact only on small namespaces). Write-time state, kept by every writer in its
transaction whatever its searchers do: ``memcore_postings(namespace, term, key, tf, dl)``
(``tf`` and ``dl`` included in the primary key's index since 2026-12-06, so a term's postings
are read by an index-only scan; a table created before keeps its plain key), memcore's own
BM25 terms of each memory (``"speaker: text"`` and its day's date words,
stemmed, hashed as the hybrid index of the default structure does:
:mod:`memcore.stores.pg_terms`; replaced with the row, deleted before it by deletes and sweeps,
with the namespace's by a clear; no foreign key since 2026-12-06 -- its check locked the
memory row once per posting, ~30 a memory: a bulk put 1,770 -> 2,620 rows/s without the
HNSW index -- and ``setup()`` drops the one of a table made before), the namespace row's
``dl_sum`` (the total length of its documents, beside ``live``, its document count),
``memcore_moments(namespace, alpha, radius, c1, c2)``: the float64 sums of the rows' context
vectors and of their outer products
for the hybrid presets' (alpha, dense_window) and the store's own hybrid weights'
(:mod:`memcore.stores.pg_moments`: O(window) per changed row, from the rows within ``2 r``
places of each change, kept by every writer once they exist; created by one pass over the
namespace by the first write of a ``replica=False`` store; a write rewrites the 1.2 MB row
at dim 384), an index on
``(namespace, metadata->'episode', seq)`` (episode order) and one on the speaker. A store
whose namespaces have no ``dl_sum`` (postings written before the date words) has its postings
rebuilt by :meth:`PostgresMemory.setup` once. A search:

1. candidates in SQL, each source filtered (namespace, expiry, metadata filter): the HNSW
   top-C by the embedding, the own-text BM25 top-C over the query terms' postings with the
   namespace's statistics (each term's df counted from its postings by an index-only scan,
   then its postings read again by one and each document's score summed in one hash
   aggregate, its terms in term order; no copy of the postings is materialised: O(matching
   postings) twice over an index, once through the aggregate; N and avgdl from ``live`` and
   ``dl_sum``; without a filter, expired rows are left out by an anti-join with them, from
   the partial expiry index), the C rows nearest the query among the speakers it names
   (their distances computed where each row is read, only ``(ctid, key, distance)``
   sorted) (C = ``candidates``);
2. each candidate's episode neighbours, ``2 r`` before and after it in episode order (``r =
   max(dense_window, lexical_window)``; one index probe each way, giving the rows'
   ``ctid``), the rows then read by ``ctid`` (a TID scan, no key index probe) and put in
   write order in the process, in one REPEATABLE READ snapshot with ``work_mem`` raised for
   it (the BM25 aggregate holds one entry per matching document), vectors and the moment
   sums in binary, with the rows' stored BM25 tokens;
3. those rows indexed in write order in a per-query
   :class:`~memcore.recall.index.HybridIndex` (:mod:`memcore.stores.pg_pool`: no store around
   it) and the candidates ranked by the candidates kernel
   (:func:`memcore.kernels.candidates.hybrid_rows_topk`: windows, BM25, context similarity,
   speaker boost, decay, the embedded scan's score). The rows within ``r`` of a candidate
   are ranked too (their own windows are whole in the pool): a memory whose context matches
   the query, though no source found it, is found through its matching neighbour (LoCoMo dev
   R@10 0.7705 -> 0.7975 with the hashing embedder, the embedded store's 0.7971; top-10
   overlap with the replica at 2e4 rows 0.73 -> 0.86; the pool ~1,200 -> ~1,900 rows:
   bench/results/postgres-stateless-20261206-neighbours.md); the rows beyond ``r`` are read
   for those windows only (never hits). The pool lives until the thread's next search
   (O(candidates x window)); ``explain=True`` reuses it.

What is exact and what is not: a namespace of at most C rows is read whole and ranked
exactly as the replica (tested). Above C, a candidate's dense signal (own and context
similarity) and its own-text BM25 are the embedded store's, and so are their z statistics:
the dense ones from the moment sums (O(dim^2), no pass) when every row is visible and the
sums of the query's (alpha, radius) are kept, else from one pass in the server (O(rows), a
window average over every row's similarity, as the embedded index passes over the rows of a
filter), the BM25 ones over the visible rows from the query terms' postings (for the
default index structure, ``stem`` and ``dates`` on; another structure ranks with the
statistics of the rows read) -- tested against the embedded store over the whole namespace
(the SQL sums are float8: a document's BM25 score, which only chooses the BM25 candidates,
adds its terms in term order, so documents with the same terms, tf and dl tie exactly and
are cut at the C-th place by key; the z sums add the documents in the aggregate's order; so
they equal the embedded store's within float8 rounding, and documents whose scores differ
only there may be cut at the C-th place otherwise than the embedded store would);
but **the window BM25's df, avgdl and z statistics are those of the rows read, not of the
namespace**, and memories neither candidates nor within ``r`` of one are not considered;
no bound proves the top-k and nothing widens (an approximation, measured in
bench/results/postgres-stateless-20261205.md and -20261206-neighbours.md: top-10 agreement
with the replica and LoCoMo dev R@10). What exactness needs beyond this: the window
documents' df and lengths in SQL (they could be kept with the moment sums' windowed
bookkeeping) and the per-signal bounds to widen C; not built.

Access statistics (``touch``) and ``refresh_ttl``: one statement per call for the keys it
returned, locking only those rows (in key order) and their ``memcore_touches`` rows, never
the namespace row, so reads neither wait for writers of other keys nor hold them up; it
changes no indexed column of ``memcore_memories`` (a HOT update: no HNSW insert, which made a
touching search ~20 ms slower at 5,000 rows before). Concurrent touches of one memory queue
on its row lock, each counted.

Connections: each store keeps up to ``pool_size`` connections and opens a new one in the
calling thread when none is idle and healthy (checked without a round trip), so an
unreachable server is answered within ``connect_timeout`` and the first call after a server
restart reconnects; the password is replaced by ``***`` in every repr, path and message
(:func:`redact`, which splits URLs as libpq does).

Measured agreement with the embedded store (bench/postgres.py, same runs): the exact ORDER BY
returned the same top-10 scores on every query at 1e4 and 1e5; HNSW candidates with the bound
on 98% of queries at 1e4 (postgres-20261202T012759Z) and 76% at 1e5 with the earlier floor of
200 candidates (postgres-20261202T012021Z), on a corpus with many identical vectors (repeated
short turns), which is where HNSW's approximation shows; raise ``exact_max_rows`` where
exactness matters more than latency.

Time to live: a row whose ``expires_at`` (``updated_at + ttl``) is at or before the query's
``now`` (the store's clock) is left out by every read in SQL (``get``, ``search``, ``count``,
``keys``, ``namespaces``; the hybrid replica holds the expiry too); ``refresh_ttl`` moves it
without the namespace lock (access statistics below), ``sweep()``/``compact()`` delete the
expired rows (one transaction
per namespace, recorded in ``memcore_deleted`` for the replicas). The ``live`` counter of
``memcore_namespaces`` counts rows, expired ones included until swept; ``count`` subtracts the
expired rows (from the partial index).

Filters (:func:`memcore._validate.metadata_filter`) are translated to SQL with the embedded
store's semantics: equality is jsonb equality, which is JSON equality (numbers by value, a bool
only equals a bool); ``$gt``.. compare numbers with numbers and strings with strings by code
point (``COLLATE "C"``); nested dict conditions; column conditions on the lifecycle columns and
``$importance`` at float32. One difference: a range compares a metadata number below 1e300 in
magnitude as float8, so an int above 2 ** 53 compares at its float8 rounding (Python compares
it exactly).

Differences from the embedded store (every one known):

- PostgreSQL text cannot hold NUL characters, so a text or metadata string containing
  ``"\\x00"`` raises :class:`~memcore.errors.InvalidTextError`, and so does a filter key or
  string operand with one (the embedded store matches nothing there).
- A range filter compares an int above 2 ** 53 at its float8 rounding (above).
- The SQL ranking (similarity and decay presets) computes in float8, the embedded kernel in
  float32: near-ties may order differently; recency is clamped at 2 ** -1000. Above
  ``exact_max_rows`` the HNSW candidates are approximate (the embedded store is exact unless
  ``approximate=`` is given).
- Hybrid recall holds a replica of the namespace in each searching process (above), or with
  ``replica=False`` ranks SQL candidates (approximate above ``candidates`` rows: the window
  BM25's statistics are those of the rows read).
- A memory written by an older memcore still writing to the store (one that keeps no postings
  or ``dl_sum``) is missing from the stateless search's BM25 and its statistics until it is
  written again (a store opened by this memcore has the rows from before rebuilt once).
- A replaced key keeps ``created_at``/``access_count`` as stored at its commit (concurrent
  writers included); a store migrated from version 2 lost its metadata key order.
- No ``durability``, ``lock_timeout``, ``read_only``, ``repair``, ``approximate`` (the server
  owns durability and concurrency); no ``flush``, ``verify``, ``repair``, ``migrate``,
  ``reindex``, ``open`` or ``approximate_stats``; ``compact`` is ``sweep`` (VACUUM reclaims
  the space); ``drop`` and ``setup`` are its own.
"""

from __future__ import annotations

import json
import re
import threading
from decimal import Decimal
from typing import Any, Iterable, Sequence

import numpy as np

from memcore import _validate, storage
from memcore.core import query as _query
from memcore.core.rows import Rows
from memcore.core.store import MemoryStore, check_embedder, sorted_namespaces
from memcore.core.table import copy_metadata
from memcore.errors import (
    EmbedderMismatchError,
    FormatVersionError,
    InvalidArgumentError,
    InvalidTextError,
    StoreClosedError,
)
from memcore.core.query import ResolvedQuery
from memcore.recall.weights import HybridWeights
from memcore.stores import pg_moments as _moments
from memcore.stores import pg_pool as _pool
from memcore.stores.pg_pool import vector as _np
from memcore.stores import pg_terms as _terms
from memcore.stores.pg_terms import document_tokens, query_terms
from memcore.stores.pg_connect import (
    CONNECT_TIMEOUT,
    InvalidUrlError,
    POOL_WAIT,
    Pool,
    PostgresAuthError,
    PostgresError,
    PostgresExtensionError,
    PostgresUnavailableError,
    check_url,
    connect_error,
    is_postgres_url,
    libpq_timeout,
    psycopg_modules,
    redact,
    schema_of,
    scrub,
)
from memcore.types import (
    Clock,
    DecayWeights,
    MemoryHit,
    MemoryTier,
    Namespace,
    NamespaceLike,
    StoredMemory,
    system_clock,
)

__all__ = ["PostgresMemory", "PostgresError", "PostgresUnavailableError",
           "PostgresAuthError", "PostgresExtensionError", "InvalidUrlError", "is_postgres_url",
           "redact",
           "SCHEMA_VERSION", "EXACT_MAX_ROWS", "MIN_CANDIDATES", "HYBRID_CANDIDATES"]

#: Version of the schema :meth:`PostgresMemory.setup` creates.
SCHEMA_VERSION = 3
#: Up to this many rows a namespace is ranked by the exact fused ORDER BY; above, by HNSW
#: candidates with the exact bound (the issue measured 8.3 ms exact vs 3.0-3.3 ms HNSW at 1e4).
EXACT_MAX_ROWS = 10_000
#: Fewest HNSW candidates a search asks for (``hnsw.ef_search``). On 1e4 LoCoMo-like turns
#: (hashing vectors, many identical): the exact top-10 on 93/100 queries with 200, 98/100 with
#: 400 at the same latency, 99/100 with 800 at 1.7x.
MIN_CANDIDATES = 400
#: Candidates of each source of the stateless hybrid search (``replica=False``): HNSW top-C,
#: BM25 top-C and up to C speaker rows; a namespace of at most this many rows is read whole.
HYBRID_CANDIDATES = 100
#: ``work_mem`` of a stateless hybrid search's transaction: its BM25 hash aggregate holds one
#: entry per document matching a query term (~1.2e5 at 1e6 rows for a speaker name and two
#: words: 12 MB), which spilled to disk batches at the server's default of 4 MB.
_SEARCH_WORK_MEM = "64MB"
#: pgvector's upper limit of ``hnsw.ef_search``.
MAX_CANDIDATES = 1000
#: Recency exponent clamp (``0.5 ** 1000`` is normal float8; PostgreSQL raises on underflow).
_MAX_HALF_LIVES = 1000.0
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _ns_text(ns: Namespace) -> str:
    return json.dumps(list(ns), ensure_ascii=False, separators=(",", ":"))


def _no_nul(value: str, what: str) -> str:
    if "\x00" in value:
        raise InvalidTextError(f"{what} contains a NUL character, which PostgreSQL text cannot "
                               f"hold; remove it (the embedded store accepts it)")
    return value


def _no_nul_json(value: Any) -> Any:
    """``value`` (metadata), after checking that none of its strings or keys holds a NUL
    (PostgreSQL's jsonb, which filters cast to, cannot hold one)."""
    if isinstance(value, str):
        _no_nul(value, "a metadata string")
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_nul_json(k)
            _no_nul_json(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _no_nul_json(v)
    return value


_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


#: ``$importance`` compares at float32 as the embedded store does: the stored float8 rounded to
#: float4 (PostgreSQL raises where the rounding gives 0, so values up to 2 ** -150, which round
#: to 0, are 0 first), the operand rounded in Python (numpy: to 0 or inf, never raising).
_COLUMN_SQL = {"$created_at": "created_at", "$updated_at": "updated_at",
               "$last_accessed_at": "last_accessed_at",
               "$importance": "(CASE WHEN abs(importance) <= '7.006492321624085e-46'::float8 "
                              "THEN 0 ELSE importance END)::float4"}
_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
#: Below this magnitude a jsonb number compares as float8 (exact for every float and for
#: ints up to 2 ** 53); above, as numeric with the operand's exact value (no overflow).
_FLOAT8_MAX = "1e300"


def _param(params: dict, value: Any) -> str:
    """A new named placeholder for ``value`` (added to ``params``); a str with NUL raises
    InvalidTextError (PostgreSQL text cannot hold it)."""
    if isinstance(value, str):
        _no_nul(value, "a filter key or operand")
    name = f"f{len(params)}"
    params[name] = value
    return f"%({name})s"


def _condition_sql(expr: str, cond: Any, params: dict) -> str:
    """SQL true exactly when the jsonb ``expr`` (NULL: the key is absent) satisfies a
    validated condition (:func:`memcore._validate.metadata_filter`, as
    :func:`memcore._validate.matches_filter`): jsonb equality is JSON equality (numbers by
    value, a bool only equals a bool), ``$gt``.. compare numbers with numbers and strings
    with strings by code point (COLLATE "C"), never across types."""
    if _validate.is_operator_dict(cond):
        parts = []
        for op, x in cond.items():
            if op in ("$eq", "$ne"):
                eq = f"coalesce({expr} = {_param(params, _JSON.encode(x))}::jsonb, FALSE)"
                parts.append(eq if op == "$eq" else f"NOT {eq}")
            elif op in ("$in", "$nin"):
                eq = (f"coalesce({expr} = ANY({_param(params, [_JSON.encode(y) for y in x])}"
                      f"::jsonb[]), FALSE)" if x else "FALSE")
                parts.append(eq if op == "$in" else f"NOT {eq}")
            elif isinstance(x, str):
                parts.append(f"CASE WHEN jsonb_typeof({expr}) = 'string' THEN ({expr} #>> '{{}}') "
                             f"COLLATE \"C\" {_RANGE_SQL[op]} {_param(params, x)} ELSE FALSE END")
            else:
                sym = _RANGE_SQL[op]
                parts.append(
                    f"CASE WHEN jsonb_typeof({expr}) <> 'number' THEN FALSE "
                    f"WHEN abs(({expr})::numeric) < {_FLOAT8_MAX} THEN ({expr})::float8 {sym} "
                    f"{_param(params, float(x))}::float8 "
                    f"ELSE ({expr})::numeric {sym} {_param(params, Decimal(float(x)))}::numeric END")
        return "(" + " AND ".join(parts) + ")"
    if isinstance(cond, dict):              # a nested dict: a dict meeting each condition
        parts = [f"coalesce(jsonb_typeof({expr}) = 'object', FALSE)"]
        for k, c in cond.items():
            parts.append(_condition_sql(f"({expr} -> {_param(params, k)}::text)", c, params))
        return "(" + " AND ".join(parts) + ")"
    return f"coalesce({expr} = {_param(params, _JSON.encode(cond))}::jsonb, FALSE)"


def _float32(x: float) -> float:
    """``x`` rounded to float32 (to 0 or inf beyond its range, as numpy does)."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def _filter_sql(flt: dict | None, params: dict) -> str:
    """A SQL condition equal to a validated filter (:func:`memcore._validate.metadata_filter`:
    metadata conditions as :func:`memcore._validate.matches_filter`, column conditions as
    :func:`memcore._validate.column_mask`, ``$importance`` at float4), its operands added to
    ``params`` as named parameters."""
    if not flt:
        return "TRUE"
    parts = []
    for k, cond in flt.items():
        if k not in _COLUMN_SQL:
            parts.append(_condition_sql(f"(metadata::jsonb -> {_param(params, k)}::text)", cond,
                                        params))
            continue
        col = _COLUMN_SQL[k]
        num = _float32 if k == "$importance" else float
        for op, x in (cond.items() if isinstance(cond, dict) else [("$eq", cond)]):
            if op in ("$in", "$nin"):
                sql = (f"{col} = ANY({_param(params, [num(y) for y in x])}::float8[])"
                       if x else "FALSE")
                parts.append(sql if op == "$in" else f"NOT ({sql})")
            else:
                sym = {"$eq": "=", "$ne": "<>", **_RANGE_SQL}[op]
                parts.append(f"{col} {sym} {_param(params, num(x))}::float8")
    return "(" + " AND ".join(parts) + ")"


#: A row's speaker as SQL: the speaker index's expression, spelled the same in every query
#: that should use that index.
_SPEAKER = "((metadata::jsonb) ->> 'speaker')"


def _distinct_speakers(t: str) -> str:
    """``WITH RECURSIVE s(v)``: the distinct ``metadata ->> 'speaker'`` values of namespace
    ``%(ns)s`` in table ``t`` (a loose scan of the speaker index: one probe per distinct
    value, not a pass over the rows), then a NULL row."""
    sp = _SPEAKER
    return (f"WITH RECURSIVE s(v) AS ((SELECT {sp} FROM {t} WHERE namespace = %(ns)s "
            f"AND {sp} IS NOT NULL ORDER BY {sp} LIMIT 1) UNION ALL SELECT (SELECT {sp} "
            f"FROM {t} WHERE namespace = %(ns)s AND {sp} > s.v ORDER BY {sp} LIMIT 1) "
            f"FROM s WHERE s.v IS NOT NULL)")


class _NoEncoder:
    """Name and dim of a store opened without an embedder (its replica never encodes)."""

    def __init__(self, name: str, dim: int):
        self.name, self.dim = name, dim

    def encode(self, texts: Any, **kwargs: Any) -> np.ndarray:
        raise EmbedderMismatchError(
            f"this store was opened without an embedder (recorded: {self.name!r}, dim "
            f"{self.dim}); pass vector=/query_vector= or open it with the embedder")


_COLS = ("key, text, importance, metadata, created_at, updated_at, last_accessed_at, "
         "access_count, expires_at, ttl")
_NCOLS = 10
#: Free space left in each page of ``memcore_memories`` (a row is ~1.7 kB at 384-d), so an
#: access update (no indexed column changed) can be a HOT update: no new entry in any index,
#: the HNSW graph's included (an insert there costs milliseconds).
_FILLFACTOR = 70
#: Storage parameters of ``memcore_memories``: the fill factor, and no TOAST below 8,160
#: bytes a row (pgvector's vectors are stored ``EXTERNAL``: past PostgreSQL's default of
#: 2,032 bytes -- a long text at 384-d -- the embedding would move out of line, read from
#: the TOAST table by every search that reads the row).
_STORAGE = f"fillfactor = {_FILLFACTOR}, toast_tuple_target = 8160"
#: The time-to-live columns of ``memcore_memories`` (schema 2; 0: never expires).
_TTL_COLUMNS = "expires_at float8 NOT NULL DEFAULT 0, ttl float8 NOT NULL DEFAULT 0"
#: SQL true for a row that has not expired at ``%(now)s`` (``expires_at`` 0: never expires).
_VISIBLE = "(expires_at = 0 OR expires_at > %(now)s)"


class PostgresMemory(MemoryStore):
    """Long-term memory in PostgreSQL + pgvector (see the module notes).

    Parameters
    ----------
    url : str
        ``postgresql://user:password@host:port/database`` (libpq URL; any libpq parameter may
        be given as a query string, e.g. ``?sslmode=require``; ``?schema=NAME`` sets
        ``schema``).
    embedder : Embedder, optional
        Required to create the store; checked against the recorded name and dim otherwise.
    weights : DecayWeights, default DecayWeights()
    clock : Clock, default system_clock
    hybrid : HybridWeights, optional
        Default recall of :meth:`search` (similarity preset when None).
    query_preparer : callable, optional
    threads : int, default 1
        numba threads of the hybrid replica's scan.
    schema : str, default "memcore"
        PostgreSQL schema of the tables (lower-case identifier); several stores may share a
        database under different schemas.
    pool_size : int, default 4
        Most connections this store opens (a call waits up to ``POOL_WAIT`` seconds while
        all are busy).
    exact_max_rows : int, default EXACT_MAX_ROWS
        Namespaces up to this size are ranked by the exact ORDER BY; larger by HNSW
        candidates with the exact bound.
    hnsw : bool, default True
        Create the HNSW index when missing and rank large namespaces from it; False creates
        none (an existing one is kept) and every search is exact. It is what writes cost: measured here at 384-d, 4-7 ms per inserted row
        with it, 0.06 ms without (bench/postgres.py).
    connect_timeout : float, default CONNECT_TIMEOUT (5 s)
        Seconds a call waits for an unreachable server before it raises
        :class:`PostgresUnavailableError` (libpq's ``connect_timeout``, whole seconds, at
        least 2). Connections are opened in the calling thread when needed, so the first call
        after a server restart reconnects at once.
    ttl : float, optional
        Default time to live (seconds) of a put without ``ttl=`` (as
        :class:`~memcore.LongTermMemory`); None: memories never expire.
    refresh_ttl : bool, default False
        Default of ``refresh_ttl`` for :meth:`get` and :meth:`search`.
    replica : bool, default True
        Hybrid recall on an in-process replica of the namespace (exact: the embedded store's
        ranking). False: the stateless search (module notes, *Stateless hybrid recall*):
        nothing per namespace is kept in the process; the ranking is exact only while the
        namespace holds at most ``candidates`` rows, approximate above.
    candidates : int, default HYBRID_CANDIDATES
        With ``replica=False``: rows from each candidate source (HNSW, BM25, speakers).

    Notes
    -----
    Every method raises :class:`PostgresUnavailableError` when the server goes away, and a
    write raises :class:`~memcore.errors.InvalidTextError` for a text or metadata string with
    a NUL character (nothing is written). Writers of one namespace are serialised by its row
    lock; writers of different namespaces run in parallel. ``put_many`` stages its batch with
    a binary COPY and writes each memory's BM25 postings (~30 rows a memory) with another:
    ~2,600 rows/s without the HNSW index, ~1,800 rows/s once the namespace keeps moment sums
    (a ``replica=False`` writer), a few hundred with the index (pgvector inserts each row into
    the graph: ~2 ms at 384-d; 10,000 rows in batches of 1,000, 2 shared cores, 2026-12-06); to
    load a large corpus, open with ``hnsw=False``, load, and open again with ``hnsw=True``
    (the index is built once).

    Raises
    ------
    PostgresUnavailableError, PostgresAuthError
        If the server cannot be reached or refuses the credentials (the password is never
        in the message).
    PostgresExtensionError
        If pgvector is not installed on the server (or the role may not create it).
    PostgresError
        If psycopg/pgvector are not installed (``pip install 'memcore-agent[postgres]'``).
    EmbedderMismatchError
        If the schema was written with another embedder name or dim.
    FormatVersionError
        If the schema is of a newer version than this memcore knows.
    InvalidUrlError
        On a malformed URL (libpq cannot parse it, or a port is not a number); a subclass of
        :class:`~memcore.errors.InvalidArgumentError` (so of ``ValueError``).
    InvalidArgumentError
        On a bad schema name, pool size, connect timeout or ttl, or no embedder for a new
        store.

    Examples
    --------
    >>> from memcore import HashingEmbedder
    >>> pg = PostgresMemory("postgresql://memcore@localhost/memcore",
    ...                     HashingEmbedder(dim=64))            # doctest: +SKIP
    >>> _ = pg.put("robot", "dock", "the dock is in the hallway")  # doctest: +SKIP
    >>> [h.key for h in pg.search("robot", "where is the dock?")]  # doctest: +SKIP
    ['dock']
    """

    tier = MemoryTier.LONG
    drop_empty = True

    def __init__(self, url: str, embedder: Any = None, *, weights: DecayWeights = DecayWeights(),
                 clock: Clock = system_clock, hybrid: HybridWeights | None = None,
                 query_preparer: Any = None, threads: int = 1, schema: str = "memcore",
                 pool_size: int = 4, exact_max_rows: int = EXACT_MAX_ROWS, hnsw: bool = True,
                 connect_timeout: float = CONNECT_TIMEOUT, ttl: float | None = None,
                 refresh_ttl: bool = False, replica: bool = True,
                 candidates: int = HYBRID_CANDIDATES):
        self._setup(dim=None, embedder=embedder, clock=clock, weights=weights, hybrid=hybrid,
                    query_preparer=query_preparer, default_weights=weights, threads=threads,
                    ttl=ttl, refresh_ttl=refresh_ttl)
        if not is_postgres_url(url):
            raise InvalidArgumentError(f"url must start with postgresql:// or postgres://, got "
                                       f"{redact(str(url))!r}")
        url, schema = schema_of(url, schema)
        if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
            raise InvalidArgumentError(f"schema must be a lower-case SQL identifier, got {schema!r}")
        for name, value in (("pool_size", pool_size), ("exact_max_rows", exact_max_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if embedder is not None:
            check_embedder(embedder, named=True)
        check_url(url)
        self.url, self.schema = url, schema
        self.path = redact(url)
        self.exact_max_rows = exact_max_rows
        self.hnsw = bool(hnsw)
        #: How searches were ranked: exact ORDER BY, HNSW candidates that sufficed, rounds
        #: that widened (statistics, for the benchmark).
        self.search_paths = {"exact": 0, "hnsw": 0, "widened": 0}
        self.read_only = False
        self._closed = True
        self._pool = None
        self._replicas: dict[Namespace, _Replica] = {}
        self.replica = bool(replica)
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
            raise InvalidArgumentError(f"candidates must be an int >= 1, got {candidates!r}")
        self.candidates = candidates
        self._local = threading.local()     # the last search's candidate pool, this thread
        if (isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float))
                or not connect_timeout > 0):
            raise InvalidArgumentError(f"connect_timeout must be a number of seconds > 0, got "
                                       f"{connect_timeout!r}")
        psycopg, register_vector = psycopg_modules()
        self.psycopg_modules = psycopg
        self.connect_timeout = float(connect_timeout)
        self.setup(connect_timeout=connect_timeout)

        def connect():
            conn = psycopg.connect(url, autocommit=True, application_name="memcore",
                                   connect_timeout=libpq_timeout(connect_timeout))
            register_vector(conn)
            return conn

        self._pool = Pool(connect, pool_size, POOL_WAIT)
        self._closed = False

    # ------------------------------------------------------------------ schema
    def _t(self, name: str) -> str:
        return f'"{self.schema}".{name}'

    def setup(self, *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        """Create (or check) the extension, schema and tables; record and check the embedder.

        Idempotent and safe from many processes at once (one advisory lock per schema).

        Raises
        ------
        PostgresUnavailableError, PostgresAuthError, PostgresExtensionError,
        EmbedderMismatchError, FormatVersionError, InvalidArgumentError
            As for the constructor.
        """
        psycopg = self.psycopg_modules
        try:
            conn = psycopg.connect(self.url, connect_timeout=libpq_timeout(connect_timeout),
                                   application_name="memcore")
        except psycopg.Error as err:
            raise connect_error(err, self.url) from None
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                              [f"memcore-setup:{self.schema}"])
                have = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                                    ).fetchone()
                if have is None:
                    try:
                        with conn.transaction():
                            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except psycopg.Error as err:
                        raise PostgresExtensionError(
                            f"the pgvector extension is not available on {redact(self.url)} "
                            f"({scrub(str(err).strip(), self.url)}); install pgvector on the "
                            f"server (https://github.com/pgvector/pgvector) or ask an "
                            f"administrator to run CREATE EXTENSION vector") from None
                version = conn.execute("SELECT extversion FROM pg_extension "
                                       "WHERE extname = 'vector'").fetchone()[0]
                if tuple(int(x) for x in re.findall(r"\d+", version)[:2]) < (0, 8):
                    raise PostgresExtensionError(
                        f"pgvector {version} on {redact(self.url)} is too old: memcore needs 0.8 "
                        f"or later (iterative HNSW scans); run ALTER EXTENSION vector UPDATE")
                self._create(conn)
        except psycopg.errors.InsufficientPrivilege as err:
            raise PostgresAuthError(f"the role of {redact(self.url)} may not create memcore's "
                                    f"schema: {scrub(str(err).strip(), self.url)}") from None
        except psycopg.Error as err:
            raise PostgresError(f"setting up memcore's schema on {redact(self.url)} failed: "
                                f"{scrub(str(err).strip(), self.url)}") from None
        finally:
            conn.close()

    def _create(self, conn: Any) -> None:
        t = self._t
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"; '      # one round trip
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_meta')} "
                     f"(name text PRIMARY KEY, value text NOT NULL)")
        meta = dict(conn.execute(f"SELECT name, value FROM {t('memcore_meta')}").fetchall())
        emb = self.embedder
        if "dim" in meta:
            version = int(meta.get("schema_version", "1"))
            if version > SCHEMA_VERSION:
                raise FormatVersionError(
                    f"schema {self.schema!r} on {redact(self.url)} is of version {version}; this "
                    f"memcore knows up to {SCHEMA_VERSION}: upgrade memcore")
            name, dim = meta["embedder_name"], int(meta["dim"])
            if emb is not None and (str(emb.name), int(emb.dim)) != (name, dim):
                raise EmbedderMismatchError(
                    f"schema {self.schema!r} on {redact(self.url)} was written with embedder "
                    f"{name!r} (dim {dim}); this store was given {emb.name!r} (dim {emb.dim})")
        else:
            if emb is None:
                raise InvalidArgumentError(
                    f"schema {self.schema!r} on {redact(self.url)} holds no memcore store yet; "
                    f"creating one needs an embedder (it fixes the name and dim of its vectors)")
            name, dim = str(emb.name), int(emb.dim)
            conn.execute(f"INSERT INTO {t('memcore_meta')} VALUES ('schema_version', %s), "
                         f"('embedder_name', %s), ('dim', %s)", [str(SCHEMA_VERSION), name, str(dim)])
        self.embedder_name, self.dim = name, dim
        if self.embedder is None:
            self.embedder = _NoEncoder(name, dim)
        hnsw = (f"CREATE INDEX IF NOT EXISTS memcore_memories_hnsw ON {t('memcore_memories')} "
                f"USING hnsw (embedding vector_ip_ops);" if self.hnsw else "")
        conn.execute(f"CREATE SEQUENCE IF NOT EXISTS {t('memcore_seq')}; "
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_namespaces')} ("
                     f"namespace text PRIMARY KEY, live bigint NOT NULL DEFAULT 0, "
                     f"version bigint NOT NULL DEFAULT 0, clears bigint NOT NULL DEFAULT 0, "
                     f"dl_sum bigint NOT NULL DEFAULT 0); "
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_touches')} (namespace text NOT NULL, "
                     f"key text NOT NULL, tseq bigint NOT NULL, PRIMARY KEY (namespace, key)); "
                     f"CREATE INDEX IF NOT EXISTS memcore_touches_tseq "
                     f"ON {t('memcore_touches')} (namespace, tseq); "
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_deleted')} (namespace text NOT NULL, "
                     f"key text NOT NULL, seq bigint NOT NULL, PRIMARY KEY (namespace, key)); "
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_memories')} ("
                     f"namespace text NOT NULL, key text NOT NULL, text text NOT NULL, "
                     f"importance float8 NOT NULL, metadata json NOT NULL, "
                     f"created_at float8 NOT NULL, updated_at float8 NOT NULL, "
                     f"last_accessed_at float8 NOT NULL, access_count bigint NOT NULL, "
                     f"seq bigint NOT NULL, tseq bigint NOT NULL, "
                     f"embedding vector({dim}) NOT NULL, {_TTL_COLUMNS}, tokens bytea, "
                     f"PRIMARY KEY (namespace, key)) WITH ({_STORAGE}); "
                     f"CREATE INDEX IF NOT EXISTS memcore_memories_seq "
                     f"ON {t('memcore_memories')} (namespace, seq); {hnsw}")
        # the stateless hybrid search's write-time state (kept by every writer, whatever its
        # searchers do): memcore's own BM25 terms of each memory, deleted by every write that
        # deletes or replaces it, and the episode and speaker of each memory indexed
        fresh = conn.execute("SELECT to_regclass(%s) IS NULL",
                             [t("memcore_moments")]).fetchone()[0]
        conn.execute(f"CREATE TABLE IF NOT EXISTS {t('memcore_postings')} ("
                     f"namespace text NOT NULL, term int8 NOT NULL, key text NOT NULL, "
                     f"tf int4 NOT NULL, dl int4 NOT NULL, "
                     # tf and dl in the key's index: a query term's postings by an
                     # index-only scan (a table made before keeps the plain key)
                     f"PRIMARY KEY (namespace, term, key) INCLUDE (tf, dl)); "
                     f"CREATE TABLE IF NOT EXISTS {t('memcore_moments')} ("
                     f"namespace text NOT NULL, alpha float8 NOT NULL, radius int4 NOT NULL, "
                     f"c1 bytea NOT NULL, c2 bytea NOT NULL, PRIMARY KEY (namespace, alpha, radius)); "

                     f"CREATE INDEX IF NOT EXISTS memcore_postings_key "
                     f"ON {t('memcore_postings')} (namespace, key); "
                     f"CREATE INDEX IF NOT EXISTS memcore_memories_episode "
                     f"ON {t('memcore_memories')} (namespace, ((metadata::jsonb) -> 'episode'), "
                     f"seq); "
                     f"CREATE INDEX IF NOT EXISTS memcore_memories_speaker "
                     f"ON {t('memcore_memories')} (namespace, {_SPEAKER})")
        if fresh:      # float64 noise does not compress: no pglz attempt on each rewrite
            conn.execute(f"ALTER TABLE {t('memcore_moments')} ALTER COLUMN c2 "
                         f"SET STORAGE EXTERNAL")       # (only new: it locks out writers)
        # postings written before the date words and the namespaces' dl_sum: rebuilt once
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
                        "table_name = 'memcore_namespaces' AND column_name = 'dl_sum'",
                        [self.schema]).fetchone() is None:
            conn.execute(f"ALTER TABLE {t('memcore_namespaces')} ADD COLUMN "
                         f"dl_sum bigint NOT NULL DEFAULT 0")
            self._rebuild_postings(conn)
        # schema 1 -> 2: a table without the time-to-live columns gains them (ALTER TABLE only
        # then: it locks out readers while it runs); its memories never expire
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
                        "table_name = 'memcore_memories' AND column_name = 'expires_at'",
                        [self.schema]).fetchone() is None:
            conn.execute(f"ALTER TABLE {t('memcore_memories')} ADD COLUMN "
                         + ", ADD COLUMN ".join(_TTL_COLUMNS.split(", ")))
        # schema 2 -> 3: metadata jsonb -> json (the JSON text as written: floats stay floats,
        # -0.0 and key order kept); rewrites the table once, locking it while it runs
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
                        "table_name = 'memcore_memories' AND column_name = 'metadata' AND "
                        "data_type = 'jsonb'", [self.schema]).fetchone() is not None:
            conn.execute(f"ALTER TABLE {t('memcore_memories')} ALTER COLUMN metadata TYPE json "
                         f"USING metadata::json; DROP INDEX IF EXISTS {t('memcore_memories_tseq')}; "
                         f"ALTER TABLE {t('memcore_memories')} SET ({_STORAGE})")
        # postings without the foreign key to their memories (2026-12-06: writers delete them)
        fk = conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) "
                          "AND contype = 'f'", [t("memcore_postings")]).fetchall()
        for (name,) in fk:
            conn.execute(f'ALTER TABLE {t("memcore_postings")} DROP CONSTRAINT "{name}"')
        # each memory's BM25 document's tokens (2026-12-06; a row written before has none: a
        # searcher tokenises its text), and rows kept whole in their pages up to 8 kB
        if conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
                        "table_name = 'memcore_memories' AND column_name = 'tokens'",
                        [self.schema]).fetchone() is None:
            conn.execute(f"ALTER TABLE {t('memcore_memories')} ADD COLUMN tokens bytea, "
                         f"SET ({_STORAGE})")
        conn.execute(f"CREATE INDEX IF NOT EXISTS memcore_memories_expiry "
                     f"ON {t('memcore_memories')} (namespace, expires_at) WHERE expires_at > 0; "
                     f"UPDATE {t('memcore_meta')} SET value = '{SCHEMA_VERSION}' "
                     f"WHERE name = 'schema_version' AND value <> '{SCHEMA_VERSION}'")

    # ------------------------------------------------------------------ plumbing
    def _check_read(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the PostgresMemory at {self.path} is closed")

    _check_write = _check_read

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        if self._pool is not None:
            self._pool.close()
        self._closed = True
        self._replicas = {}

    def __enter__(self) -> "PostgresMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PostgresMemory({getattr(self, 'path', '?')!r}, "       # also half-opened
                f"schema={getattr(self, 'schema', '?')!r}, "
                f"embedder={getattr(self, 'embedder_name', None)!r}, dim={self.dim})")

    def _run(self, fn):
        """``fn(conn)`` in one transaction, its server errors raised as memcore errors."""
        self._check_read()
        psycopg = self.psycopg_modules
        try:
            conn = self._pool.get()
        except psycopg.OperationalError as err:
            raise connect_error(err, self.url) from None
        except TimeoutError as err:
            raise PostgresUnavailableError(f"no connection to {self.path}: {err}") from None
        try:
            with conn.transaction():
                return fn(conn)
        except psycopg.OperationalError as err:
            raise connect_error(err, self.url) from None
        except psycopg.errors.CharacterNotInRepertoire as err:
            raise InvalidTextError(f"PostgreSQL refused a text: {err}") from None
        except psycopg.errors.UntranslatableCharacter as err:
            raise InvalidTextError(f"PostgreSQL refused a text (a NUL character?): {err}") from None
        except psycopg.Error as err:
            raise PostgresError(f"PostgreSQL at {self.path} failed: "
                                f"{scrub(str(err).strip(), self.url)}") from None
        finally:
            self._pool.put(conn)

    def _lock_ns(self, conn: Any, ns: Namespace, *, create: bool, bump: bool = True,
                 clears: int = 0) -> bool:
        """Take the namespace row's lock (creating the row when ``create``); True if it exists."""
        t = self._t("memcore_namespaces")
        if create:
            conn.execute(f"INSERT INTO {t} AS n (namespace, version) VALUES (%s, 1) "
                         f"ON CONFLICT (namespace) DO UPDATE SET version = n.version + 1",
                         [_ns_text(ns)])
            return True
        row = conn.execute(f"UPDATE {t} SET version = version + %s, clears = clears + %s "
                           f"WHERE namespace = %s RETURNING live",
                           [int(bump), clears, _ns_text(ns)]).fetchone()
        return row is not None

    # ------------------------------------------------------------------ writes
    def write(self, rows: Rows) -> list[StoredMemory]:
        """As :meth:`MemoryStore.write`; a replaced key keeps ``created_at`` and
        ``access_count`` as stored in the server at commit (concurrent writers included)."""
        self._check_write()
        if rows.vectors is None:
            rows.vectors = self.embed(rows.texts) if len(rows) else np.zeros((0, self.dim), np.float32)
        if not len(rows):
            return []
        if rows.created_at is None:
            now = _query.now(self.clock)
            m = len(rows)
            rows.created_at = rows.updated_at = rows.last_accessed_at = np.full(m, now)
            rows.access_count = np.zeros(m, np.int64)
            self._upsert(rows, keep=True)
        else:
            self._upsert(rows, keep=False)
        return rows.memories(self.tier, copy_metadata)

    def _apply(self, rows: Rows) -> None:
        self._upsert(rows, keep=False)

    def _upsert(self, rows: Rows, *, keep: bool) -> None:
        """Insert or replace ``rows`` in one transaction: a binary COPY into a temporary
        staging table, then one ``INSERT .. SELECT .. ON CONFLICT`` (rows locked in key order,
        as every statement that locks memories here, so concurrent writers, deleters and
        readers' access updates never deadlock). A key given twice in the batch ends as its
        last occurrence (as a put after a put); sequence numbers follow the batch order.
        ``keep``: a replaced key keeps its stored ``created_at``/``access_count`` (written
        back into ``rows``)."""
        ns = rows.namespace
        texts = [_no_nul(s, "text") for s in rows.texts]
        metas = [_JSON.encode(_no_nul_json(m)) for m in rows.metadata]
        t = self._t("memcore_memories")
        # a replaced key keeps its lifecycle unless it had expired (a put makes a new memory)
        kept = "m.expires_at = 0 OR m.expires_at > excluded.updated_at"
        lifecycle = (f"created_at = CASE WHEN {kept} THEN m.created_at ELSE excluded.created_at "
                     f"END, access_count = CASE WHEN {kept} THEN m.access_count "
                     f"ELSE excluded.access_count END" if keep else
                     "created_at = excluded.created_at, access_count = excluded.access_count")
        cols = ("key, text, importance, metadata, created_at, updated_at, last_accessed_at, "
                "access_count, expires_at, ttl")
        sql = (f"WITH last AS MATERIALIZED (SELECT DISTINCT ON (key) * FROM memcore_in "
               f"ORDER BY key, pos DESC), "
               f"numbered AS MATERIALIZED (SELECT l.*, nextval('{self._t('memcore_seq')}') AS seq "
               f"FROM (SELECT * FROM last ORDER BY pos) l) "
               f"INSERT INTO {t} AS m (namespace, {cols}, seq, tseq, embedding, tokens) "
               f"SELECT %s, key, text, importance, metadata::json, created_at, updated_at, "
               f"last_accessed_at, access_count, expires_at, ttl, seq, seq, embedding, tokens "
               f"FROM numbered ORDER BY key "
               f"ON CONFLICT (namespace, key) DO UPDATE SET text = excluded.text, "
               f"importance = excluded.importance, metadata = excluded.metadata, "
               f"updated_at = excluded.updated_at, last_accessed_at = excluded.last_accessed_at, "
               f"{lifecycle}, expires_at = excluded.expires_at, ttl = excluded.ttl, "
               f"seq = excluded.seq, tseq = excluded.tseq, "
               f"embedding = excluded.embedding, tokens = excluded.tokens "
               f"RETURNING key, created_at, access_count, (xmax = 0) AS inserted")
        nst = _ns_text(ns)
        vecs = np.ascontiguousarray(rows.vectors, np.float32)
        exp = rows.expiry()
        ea, tl = (([0.0] * len(rows),) * 2 if exp is None else
                  (exp[0].tolist(), exp[1].tolist()))
        imp = np.asarray(rows.importance, np.float64).tolist()
        lc = [np.asarray(c, np.float64).tolist()
              for c in (rows.created_at, rows.updated_at, rows.last_accessed_at)]
        ac = np.asarray(rows.access_count, np.int64).tolist()
        metadata = list(rows.metadata)
        # each memory's BM25 document, dated by the created_at given (a replaced key that
        # keeps its stored one is re-dated below)
        toks = document_tokens(texts, metadata, lc[0])

        def run(conn):
            self._lock_ns(conn, ns, create=True)
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS memcore_in (pos int4, key text, "
                         "text text, importance float8, metadata text, created_at float8, "
                         "updated_at float8, last_accessed_at float8, access_count int8, "
                         "expires_at float8, ttl float8, embedding vector, tokens bytea) "
                         "ON COMMIT DELETE ROWS")
            cur = conn.cursor()
            with cur.copy(f"COPY memcore_in (pos, {cols}, embedding, tokens) FROM STDIN "
                          f"WITH (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "text", "float8", "text", "float8", "float8",
                                "float8", "int8", "float8", "float8", "vector", "bytea"])
                for i in range(len(rows)):
                    copy.write_row((i, rows.keys[i], texts[i], imp[i], metas[i], lc[0][i],
                                    lc[1][i], lc[2][i], ac[i], ea[i], tl[i], vecs[i],
                                    _terms.to_bytes(toks[i])))
            last = sorted({k: i for i, k in enumerate(rows.keys)}.values())
            sums = self._sums_before(conn, ns, [rows.keys[i] for i in last],
                                     [rows.metadata[i] for i in last])
            out = {r[0]: r for r in cur.execute(sql, [nst]).fetchall()}
            self._sums_after(conn, ns, sums, [(rows.keys[i], rows.metadata[i], vecs[i])
                                              for i in last])
            keys = [rows.keys[i] for i in last]
            redate = [i for i in last if out[rows.keys[i]][1] != lc[0][i]]
            if redate:               # kept their stored created_at: their date words
                got = document_tokens([texts[i] for i in redate], [metadata[i] for i in redate],
                                      [out[rows.keys[i]][1] for i in redate])
                for i, tk in zip(redate, got):
                    toks[i] = tk
                conn.execute(f"UPDATE {t} AS m SET tokens = v.tokens FROM unnest(%s::text[], "
                             f"%s::bytea[]) AS v(key, tokens) WHERE m.namespace = %s AND "
                             f"m.key = v.key",
                             [[rows.keys[i] for i in redate],
                              [_terms.to_bytes(toks[i]) for i in redate], nst])
            dl = self._write_postings(conn, cur, nst, keys, [toks[i] for i in last])
            added = sum(1 for r in out.values() if r[3])
            conn.execute(f"UPDATE {self._t('memcore_namespaces')} SET live = live + %s, "
                         f"dl_sum = dl_sum + %s WHERE namespace = %s", [added, dl, nst])
            return out

        out = self._run(run)
        if keep:
            rows.created_at = np.asarray([out[k][1] for k in rows.keys], np.float64)
            rows.access_count = np.asarray([out[k][2] for k in rows.keys], np.int64)

    def _write_postings(self, conn: Any, cur: Any, nst: str, keys: list, tokens: list) -> int:
        """Replace the postings of distinct ``keys`` (each memory's document as token hashes,
        :func:`~memcore.stores.pg_terms.document_tokens`) in the writer's transaction; returns
        the change of the namespace's document lengths (the caller adds it to ``dl_sum``)."""
        doc, term, tf, dl = _terms.postings(tokens)
        gone = self._drop_postings(conn, nst, keys)
        with cur.copy(f"COPY {self._t('memcore_postings')} (namespace, term, key, tf, dl) "
                      f"FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int8", "text", "int4", "int4"])
            for d, h, f, n in zip(doc, term, tf, dl):
                copy.write_row((nst, h, keys[d], f, n))
        return sum(dict(zip(doc, dl)).values()) - gone

    def _drop_postings(self, conn: Any, nst: str, keys: list) -> int:
        """Delete the postings of ``keys`` (whose rows go or are replaced); returns their
        documents' total length (for ``dl_sum``)."""
        got = conn.execute(f"DELETE FROM {self._t('memcore_postings')} WHERE namespace = %s "
                           f"AND key = ANY(%s) RETURNING key, dl", [nst, keys]).fetchall()
        return sum(dict(got).values())

    def _rebuild_postings(self, conn: Any, batch: int = 4096) -> None:
        """Every memory's postings and every namespace's ``dl_sum`` from the rows (a store
        written before the date words were postings; run once by :meth:`setup`)."""
        t = self._t
        conn.execute(f"DELETE FROM {t('memcore_postings')}")
        sums: dict = {}
        cur = conn.cursor()
        with conn.cursor(name="memcore_rebuild") as rd:
            rd.execute(f"SELECT namespace, key, text, metadata, created_at "
                       f"FROM {t('memcore_memories')} ORDER BY namespace, key")
            while True:
                got = rd.fetchmany(batch)
                if not got:
                    break
                for nst in dict.fromkeys(r[0] for r in got):
                    part = [r for r in got if r[0] == nst]
                    sums[nst] = sums.get(nst, 0) + self._write_postings(
                        conn, cur, nst, [r[1] for r in part], document_tokens(
                            [r[2] for r in part], [r[3] for r in part], [r[4] for r in part]))
        for nst, dl in sums.items():
            conn.execute(f"UPDATE {t('memcore_namespaces')} SET dl_sum = %s WHERE namespace = %s",
                         [dl, nst])

    def _sums_before(self, conn: Any, ns: Namespace, keys: list, metadata: list) -> tuple:
        """Before a write (namespace lock held): the namespace's dense moment sums
        (:mod:`memcore.stores.pg_moments`) and the rows around what the write changes: the
        rows of ``keys`` (replaced or deleted) that exist, with the rows within ``2 r`` places
        of each in its episode, and the last ``2 r`` rows of each episode of ``metadata``
        (the new rows'). ``(sums, before, removed)``; sums: list of ``[alpha, r, c1, c2]``."""
        nst = _ns_text(ns)
        t = self._t("memcore_memories")
        sums = [[a, r, np.frombuffer(c1, np.float64).copy(),
                 np.frombuffer(c2, np.float64).reshape(self.dim, self.dim).copy()]
                for a, r, c1, c2 in conn.execute(
                    f"SELECT alpha, radius, c1, c2 FROM {self._t('memcore_moments')} "
                    f"WHERE namespace = %s ORDER BY alpha, radius", [nst]).fetchall()]
        if not sums:
            return sums, {}, {}
        r2 = 2 * max(int(x[1]) for x in sums)
        ep = "((metadata::jsonb) -> 'episode')"
        cur = conn.cursor(binary=True)
        p = {"ns": nst, "keys": list(keys), "r2": r2}
        removed = {k: (_moments.episode_of(m), _np(v)) for k, m, v in cur.execute(
            f"SELECT key, metadata, embedding FROM {t} WHERE namespace = %(ns)s "
            f"AND key = ANY(%(keys)s)", p).fetchall()}
        side = (f"SELECT key, seq, metadata, embedding FROM {t} WHERE namespace = %(ns)s AND "
                f"{ep} = c.ep AND seq {{}} c.seq ORDER BY seq {{}} LIMIT {{}}")
        near = cur.execute(
            f"WITH c AS MATERIALIZED (SELECT seq, {ep} AS ep FROM {t} WHERE namespace = %(ns)s "
            f"AND key = ANY(%(keys)s) AND {ep} IS NOT NULL AND {ep} <> 'null'::jsonb) "
            f"SELECT x.* FROM c CROSS JOIN LATERAL (({side.format('<', 'DESC', '%(r2)s')}) "
            f"UNION ALL ({side.format('>=', 'ASC', '%(r2)s + 1')})) x", p).fetchall() \
            if removed else []
        eps = list(dict.fromkeys(json.dumps(m["episode"]) for m in metadata
                                 if _moments.episode_of(m) is not None))
        if eps:
            near += cur.execute(
                f"SELECT x.* FROM unnest(%(eps)s::text[]) AS e(ep) CROSS JOIN LATERAL "
                f"(SELECT key, seq, metadata, embedding FROM {t} WHERE namespace = %(ns)s AND "
                f"{ep} = e.ep::jsonb ORDER BY seq DESC LIMIT %(r2)s) x",
                {**p, "eps": eps}).fetchall()
        before: dict = {}
        for key, seq, meta, vec in sorted({r[0]: r for r in near}.values(), key=lambda r: r[1]):
            before.setdefault(_moments.episode_of(meta), []).append((key, _np(vec)))
        for m in metadata:
            e = _moments.episode_of(m)
            if e is not None:
                before.setdefault(e, [])
        return sums, before, removed

    def _sums_after(self, conn: Any, ns: Namespace, state: tuple, added: list) -> None:
        """After a write: the sums of :meth:`_sums_before` updated for the rows removed and
        ``added`` (``(key, metadata, vector)`` in write order) and stored; a namespace
        without the sums of the store's hybrid weights gets them from one pass over its rows
        (its first write, or the first since they were kept)."""
        sums, before, removed = state
        nst = _ns_text(ns)
        new = [(k, _moments.episode_of(m), np.asarray(v, np.float32)) for k, m, v in added]
        for x in sums:
            c = (x[2], x[3])
            _moments.update(c, float(x[0]), int(x[1]), before, removed, new)
        have = {(float(x[0]), int(x[1])) for x in sums}
        rows = None
        for want in self._sums_keys():
            if want in have:
                continue
            if rows is None:
                rows = [(_moments.episode_of(m), _np(v)) for m, v in conn.cursor(
                    binary=True).execute(f"SELECT metadata, embedding FROM "
                                         f"{self._t('memcore_memories')} WHERE namespace = %s "
                                         f"ORDER BY seq", [nst]).fetchall()]
            sums.append([want[0], want[1], *_moments.from_rows(rows, want[0], want[1],
                                                                 self.dim)])
        for a, r, c1, c2 in sums:
            conn.execute(f"INSERT INTO {self._t('memcore_moments')} AS m VALUES (%s, %s, %s, "
                         f"%s, %s) ON CONFLICT (namespace, alpha, radius) DO UPDATE SET "
                         f"c1 = excluded.c1, c2 = excluded.c2",
                         [nst, float(a), int(r), c1.tobytes(), c2.tobytes()])

    def _sums_keys(self) -> list[tuple[float, int]]:
        """The (alpha, radius) of the moment sums this store's writes create when missing:
        with ``replica=False`` the hybrid presets' (``HybridWeights.hybrid()`` and
        ``no_model()`` share theirs) and the store's own hybrid weights' when they
        z-normalise; none with the replica (its writes keep the sums that exist: every
        writer must, or they go stale)."""
        if self.replica:
            return []
        keys = [_moments.key_of(HybridWeights.hybrid())]
        w = self.hybrid
        if w.normalize and w.dense and _moments.key_of(w) not in keys:
            keys.append(_moments.key_of(w))
        return keys

    def delete_keys(self, namespace: Namespace, keys: Sequence[str]) -> list[str]:
        """As :meth:`MemoryStore.delete_keys` (so :meth:`~MemoryStore.delete` and
        :meth:`~MemoryStore.delete_many`): one transaction, each deleted key recorded in
        ``memcore_deleted`` for the replicas."""
        self._check_write()
        now = _query.now(self.clock)
        nst = _ns_text(namespace)
        t = self._t("memcore_memories")

        def run(conn):
            if not self._lock_ns(conn, namespace, create=False):
                return []
            held = [r[0] for r in conn.execute(
                f"SELECT key FROM {t} WHERE namespace = %(ns)s AND key = ANY(%(keys)s) "
                f"ORDER BY key FOR UPDATE", {"ns": nst, "keys": list(keys)}).fetchall()]
            dl = self._drop_postings(conn, nst, held)
            sums = self._sums_before(conn, namespace, held, [])
            rows = conn.execute(f"DELETE FROM {t} WHERE namespace = %(ns)s AND key = "
                                f"ANY(%(keys)s) RETURNING key, expires_at",
                                {"ns": nst, "keys": held}).fetchall()
            self._sums_after(conn, namespace, sums, [])
            if rows:
                conn.execute(f"INSERT INTO {self._t('memcore_deleted')} AS d "
                             f"SELECT %s, k, nextval('{self._t('memcore_seq')}') "
                             f"FROM unnest(%s::text[]) AS k ON CONFLICT (namespace, key) "
                             f"DO UPDATE SET seq = excluded.seq", [nst, [r[0] for r in rows]])
            conn.execute(f"UPDATE {self._t('memcore_namespaces')} SET live = live - %s, "
                         f"dl_sum = dl_sum - %s WHERE namespace = %s", [len(rows), dl, nst])
            return [k for k, expires_at in rows if not 0 < expires_at <= now]
        return self._run(run)

    def clear(self, namespace: NamespaceLike) -> int:
        """As :meth:`MemoryStore.clear`."""
        self._check_write()
        ns = _validate.namespace(namespace)

        def run(conn):
            if not self._lock_ns(conn, ns, create=False, clears=1):
                return 0
            t = self._t("memcore_memories")
            gone = conn.execute(f"DELETE FROM {t} WHERE namespace = %(ns)s AND key IN (SELECT key "
                                f"FROM {t} WHERE namespace = %(ns)s ORDER BY key FOR UPDATE)",
                                {"ns": _ns_text(ns)}).rowcount
            for table in ("memcore_postings", "memcore_deleted", "memcore_touches",
                          "memcore_moments"):
                conn.execute(f"DELETE FROM {self._t(table)} WHERE namespace = %s", [_ns_text(ns)])
            conn.execute(f"UPDATE {self._t('memcore_namespaces')} SET live = 0, dl_sum = 0 "
                         f"WHERE namespace = %s", [_ns_text(ns)])
            return gone
        return self._run(run)

    def drop(self) -> None:
        """Drop this store's schema and everything in it (tests, teardown). Irreversible."""
        self._check_write()
        self._run(lambda conn: conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
        self.close()

    # ------------------------------------------------------------------ reads
    def _memory(self, ns: Namespace, r: Sequence) -> StoredMemory:
        return StoredMemory(namespace=ns, key=r[0], text=r[1], importance=r[2], metadata=r[3],
                            created_at=r[4], updated_at=r[5], last_accessed_at=r[6],
                            access_count=r[7], tier=self.tier, expires_at=r[8] or None,
                            ttl=r[9] or None)

    def get(self, namespace: NamespaceLike, key: str, *, refresh_ttl: bool | None = None,
            missing_ok: bool = True) -> StoredMemory | None:
        """As :meth:`MemoryStore.get` (``refresh_ttl`` restarts the time to live,
        ``missing_ok=False`` raises on a namespace that holds nothing)."""
        self._check_read()
        ns, key = _validate.namespace(namespace), _validate.key(key)
        if not missing_ok:
            self.require_namespace(ns)
        refresh = self.refresh_ttl if refresh_ttl is None else bool(refresh_ttl)
        p = {"ns": _ns_text(ns), "key": key, "now": _query.now(self.clock)}
        t = self._t("memcore_memories")

        def run(conn):
            if refresh:                  # the row's lock only: never the namespace's
                self._update_in_place(conn, ns, [key], [
                    "expires_at = CASE WHEN m.ttl > 0 THEN %(now)s + m.ttl ELSE 0 END"], p)
            return conn.execute(f"SELECT {_COLS} FROM {t} WHERE namespace = %(ns)s "
                                f"AND key = %(key)s AND {_VISIBLE}", p).fetchone()
        r = self._run(run)
        return None if r is None else self._memory(ns, r)

    def vector(self, namespace: NamespaceLike, key: str) -> np.ndarray | None:
        """As :meth:`MemoryStore.vector`."""
        self._check_read()
        ns, key = _validate.namespace(namespace), _validate.key(key)
        p = {"ns": _ns_text(ns), "key": key, "now": _query.now(self.clock)}
        r = self._run(lambda conn: conn.execute(
            f"SELECT embedding FROM {self._t('memcore_memories')} WHERE namespace = %(ns)s "
            f"AND key = %(key)s AND {_VISIBLE}", p).fetchone())
        return None if r is None else _np(r[0]).copy()

    def key_list(self, namespace: Namespace) -> list[str]:
        """Keys of ``namespace``, oldest write first (tier protocol)."""
        p = {"ns": _ns_text(namespace), "now": _query.now(self.clock)}
        rows = self._run(lambda conn: conn.execute(
            f"SELECT key FROM {self._t('memcore_memories')} WHERE namespace = %(ns)s "
            f"AND {_VISIBLE} ORDER BY seq", p).fetchall())
        return [r[0] for r in rows]

    def _expired_sql(self, ns_expr: str) -> str:
        """SQL: how many rows of the namespace ``ns_expr`` expired at ``%(now)s``."""
        return (f"(SELECT count(*) FROM {self._t('memcore_memories')} e WHERE e.namespace = "
                f"{ns_expr} AND e.expires_at > 0 AND e.expires_at <= %(now)s)")

    def count(self, namespace: NamespaceLike) -> int:
        """As :meth:`MemoryStore.count`."""
        self._check_read()
        ns = _validate.namespace(namespace)
        p = {"ns": _ns_text(ns), "now": _query.now(self.clock)}
        r = self._run(lambda conn: conn.execute(
            f"SELECT n.live - {self._expired_sql('n.namespace')} "
            f"FROM {self._t('memcore_namespaces')} n WHERE n.namespace = %(ns)s", p).fetchone())
        return 0 if r is None else int(r[0])

    def namespaces(self, prefix: NamespaceLike | None = None) -> list[Namespace]:
        """As :meth:`MemoryStore.namespaces`."""
        self._check_read()
        p = {"now": _query.now(self.clock)}
        rows = self._run(lambda conn: conn.execute(
            f"SELECT namespace FROM {self._t('memcore_namespaces')} n "
            f"WHERE n.live > {self._expired_sql('n.namespace')}", p).fetchall())
        return sorted_namespaces([tuple(json.loads(r[0])) for r in rows], prefix)

    def lifecycle(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, tuple[float, int]]:
        """``{key: (created_at, access_count)}`` of the keys present (tier protocol)."""
        p = {"ns": _ns_text(namespace), "keys": list(keys), "now": _query.now(self.clock)}
        rows = self._run(lambda conn: conn.execute(
            f"SELECT key, created_at, access_count FROM {self._t('memcore_memories')} "
            f"WHERE namespace = %(ns)s AND key = ANY(%(keys)s) AND {_VISIBLE}", p).fetchall())
        return {k: (float(c), int(a)) for k, c, a in rows}

    def stats(self) -> dict[Namespace, dict[str, int]]:
        """Per namespace: ``live`` memories (unexpired) and ``rows`` (expired ones included,
        until :meth:`sweep`)."""
        self._check_read()
        p = {"now": _query.now(self.clock)}
        rows = self._run(lambda conn: conn.execute(
            f"SELECT namespace, live - {self._expired_sql('n.namespace')}, live "
            f"FROM {self._t('memcore_namespaces')} n WHERE live > 0", p).fetchall())
        return {tuple(json.loads(n)): {"live": int(c), "rows": int(r)}
                for n, c, r in sorted(rows, key=lambda r: tuple(json.loads(r[0])))}

    def _update_in_place(self, conn: Any, ns: Namespace, keys: list, sets: list,
                         params: dict) -> int:
        """``UPDATE .. SET sets`` the visible rows of ``keys`` (access statistics, expiry) and
        record each in ``memcore_touches`` under a new sequence number, for the hybrid
        replicas; returns how many rows. Rows locked in key order (memories, then touches),
        never the namespace row; no indexed column of ``memcore_memories`` changes (HOT
        updates, no HNSW insert). The transaction id is assigned before the sequence number is
        drawn: what the replicas' safe mark relies on (:class:`_Replica`)."""
        t, tt = self._t("memcore_memories"), self._t("memcore_touches")
        p = {**params, "ns": _ns_text(ns), "keys": keys}
        conn.execute("SELECT pg_current_xact_id()")
        return conn.execute(
            f"WITH u AS (UPDATE {t} AS m SET {', '.join(sets)} FROM (SELECT key FROM {t} "
            f"WHERE namespace = %(ns)s AND key = ANY(%(keys)s) AND {_VISIBLE} ORDER BY key "
            f"FOR UPDATE) AS l WHERE m.namespace = %(ns)s AND m.key = l.key RETURNING m.key) "
            f"INSERT INTO {tt} AS x (namespace, key, tseq) SELECT %(ns)s, key, "
            f"nextval('{self._t('memcore_seq')}') FROM (SELECT key FROM u ORDER BY key) AS k "
            f"ON CONFLICT (namespace, key) DO UPDATE SET tseq = excluded.tseq", p).rowcount

    def _refresh(self, ns: Namespace, keys: Iterable[str], now: float, touch: bool = True,
                 ttl: bool = False) -> int:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return 0
        p = {"ns": _ns_text(ns), "keys": keys, "now": float(now)}
        t = self._t("memcore_memories")
        sets = (["last_accessed_at = %(now)s", "access_count = m.access_count + 1"]
                if touch else [])
        if ttl:
            sets.append("expires_at = CASE WHEN m.ttl > 0 THEN %(now)s + m.ttl ELSE 0 END")
        where = f"WHERE namespace = %(ns)s AND key = ANY(%(keys)s) AND {_VISIBLE}"
        if not sets:
            return self._run(lambda conn: conn.execute(f"SELECT count(*) FROM {t} {where}",
                                                       p).fetchone()[0])
        # one statement for the call's keys, locking only their rows, in key order (as every
        # writer here): reads never take the namespace lock, so they never wait for a writer
        # of other keys nor make one wait
        return self._run(lambda conn: self._update_in_place(conn, ns, keys, sets, p))

    def sweep(self, namespace: NamespaceLike | None = None) -> int:
        """As :meth:`MemoryStore.sweep`: delete the memories whose time to live ran out (one
        transaction per namespace); returns how many."""
        self._check_write()
        only = None if namespace is None else _validate.namespace(namespace)
        p = {"now": _query.now(self.clock)}
        t = self._t("memcore_memories")
        if only is None:
            found = self._run(lambda conn: conn.execute(
                f"SELECT DISTINCT namespace FROM {t} WHERE expires_at > 0 "
                f"AND expires_at <= %(now)s", p).fetchall())
            todo = sorted(tuple(json.loads(r[0])) for r in found)
        else:
            todo = [only]
        swept = 0
        for ns in todo:
            q = {**p, "ns": _ns_text(ns)}

            def run(conn):
                if not self._lock_ns(conn, ns, create=False):
                    return 0
                keys = [r[0] for r in conn.execute(
                    f"SELECT key FROM {t} WHERE namespace = %(ns)s AND expires_at > 0 AND "
                    f"expires_at <= %(now)s ORDER BY key FOR UPDATE", q).fetchall()]
                if keys:
                    dl = self._drop_postings(conn, q["ns"], keys)
                    sums = self._sums_before(conn, ns, keys, [])
                    conn.execute(f"DELETE FROM {t} WHERE namespace = %(ns)s AND key = "
                                 f"ANY(%(keys)s)", {**q, "keys": keys})
                    self._sums_after(conn, ns, sums, [])
                    conn.execute(f"INSERT INTO {self._t('memcore_deleted')} AS d "
                                 f"SELECT %(ns)s, k, nextval('{self._t('memcore_seq')}') "
                                 f"FROM unnest(%(keys)s::text[]) AS k ON CONFLICT (namespace, key) "
                                 f"DO UPDATE SET seq = excluded.seq", {**q, "keys": keys})
                    conn.execute(f"UPDATE {self._t('memcore_namespaces')} SET live = live - "
                                 f"%(n)s, dl_sum = dl_sum - %(dl)s WHERE namespace = %(ns)s",
                                 {**q, "n": len(keys), "dl": dl})
                return len(keys)
            swept += self._run(run)
        return swept

    def compact(self, namespace: NamespaceLike | None = None) -> int:
        """Delete expired memories (:meth:`sweep`; the server's VACUUM reclaims the space);
        returns how many rows were dropped."""
        return self.sweep(namespace)

    def fill_tokens(self, *, batch_size: int = 4096) -> int:
        """Store the BM25 document tokens of the memories written before they were kept
        (``tokens`` NULL: a stateless searcher tokenises and stems those rows' texts each
        time it reads them); returns how many rows got them.

        In key order, ``batch_size`` rows a transaction, each batch's rows locked (in key
        order, as every statement here) so a concurrent write of one of them is not
        undone; safe beside writers and searchers, and resumable.

        Raises
        ------
        InvalidArgumentError
            If ``batch_size`` is not an int >= 1.
        StoreClosedError, PostgresUnavailableError
            As any write.
        """
        self._check_write()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        t = self._t("memcore_memories")
        done, after = 0, ("", "")

        def run(conn):
            got = conn.execute(
                f"SELECT namespace, key, text, metadata, created_at FROM {t} WHERE tokens IS "
                f"NULL AND (namespace, key) > (%s, %s) ORDER BY namespace, key LIMIT %s "
                f"FOR UPDATE", [*after, batch_size]).fetchall()
            if got:
                toks = document_tokens([r[2] for r in got], [r[3] for r in got],
                                       [r[4] for r in got])
                conn.execute(f"UPDATE {t} AS m SET tokens = v.tokens FROM unnest(%s::text[], "
                             f"%s::text[], %s::bytea[]) AS v(namespace, key, tokens) "
                             f"WHERE m.namespace = v.namespace AND m.key = v.key",
                             [[r[0] for r in got], [r[1] for r in got],
                              [_terms.to_bytes(x) for x in toks]])
            return got

        while True:
            got = self._run(run)
            done += len(got)
            if len(got) < batch_size:
                return done
            after = (got[-1][0], got[-1][1])

    # ------------------------------------------------------------------ search
    def signals(self, rq: ResolvedQuery):
        """Hybrid signals from the namespace's synchronised replica, or with ``replica=False``
        of the query's candidate pool (tier protocol)."""
        self._check_read()
        if rq.prepared is None:
            return None
        if not self.replica:
            got = self._candidates(rq)
            return None if got is None else got.signals
        with self._lock:
            return self._replica(rq.namespace).store.signals(rq)

    def explanations(self, rq: ResolvedQuery, hits: Sequence[MemoryHit],
                     stats: Any = None) -> list:
        """Hybrid terms of hits from the synchronised replica or the candidate pool (tier
        protocol)."""
        if rq.prepared is None or not hits:
            return [None] * len(hits)
        if not self.replica:
            got = self._candidates(rq, hits)
            return _pool.explain(got, rq, [h.key for h in hits],
                                 got.signals.moments if stats is None else stats)
        with self._lock:
            return self._replica(rq.namespace).store.explanations(rq, hits, stats)

    def speakers(self, namespace: Namespace, hybrid: HybridWeights) -> list[str]:
        """Speaker names of the namespace's memories (tier protocol), from its replica."""
        if not self.replica:
            return self._speakers_sql(namespace)
        with self._lock:
            return self._replica(namespace).store.speakers(namespace, hybrid)

    def scan(self, rq: ResolvedQuery, sig: Any = None) -> list[MemoryHit]:
        """The ranked hits of a resolved query, nothing refreshed (tier protocol): SQL for the
        similarity preset, the synchronised replica or the candidate pool for hybrid
        weights."""
        self._check_read()
        if rq.prepared is not None:
            if not self.replica:
                got = self._candidates(rq)
                if got is None:
                    return []
                stats = (got.signals.moments if sig is None or sig.moments is None
                         else sig.moments)
                return _pool.rank(got, rq, stats if rq.hybrid.normalize else None, self.tier)
            with self._lock:
                return self._replica(rq.namespace).store.scan(rq, sig)
        return self._run(lambda conn: self._rank(conn, rq))

    def _rank(self, conn: Any, rq: ResolvedQuery) -> list[MemoryHit]:
        ns = _ns_text(rq.namespace)
        live = conn.execute(f"SELECT live FROM {self._t('memcore_namespaces')} WHERE namespace = %s",
                            [ns]).fetchone()
        if live is None or live[0] == 0:
            return []
        w = rq.weights
        neg = min(w.w_similarity, w.w_recency, w.w_importance) < 0
        c = max(4 * rq.top_k, MIN_CANDIDATES)
        while self.hnsw and live[0] > self.exact_max_rows and not neg and c <= MAX_CANDIDATES:
            got = self._ranked(conn, rq, ns, candidates=c)
            if got is not None:
                self.search_paths["hnsw"] += 1
                return got
            self.search_paths["widened"] += 1
            c *= 2
        self.search_paths["exact"] += 1
        return self._ranked(conn, rq, ns, candidates=None)

    def _ranked(self, conn: Any, rq: ResolvedQuery, ns: str, *, candidates: int | None
                ) -> list[MemoryHit] | None:
        """Exact fused top-k (``candidates=None``), or from the HNSW candidates: None when the
        bound says they may miss a better memory. The ranking reads only the numeric columns;
        text and metadata are fetched for the top-k rows alone."""
        w = rq.weights
        p = {"q": rq.vector, "ns": ns, "ws": float(w.w_similarity), "wr": float(w.w_recency),
             "wi": float(w.w_importance), "now": float(rq.now), "hl": float(w.half_life),
             "thr": float(rq.threshold), "k": rq.top_k, "c": candidates}
        where = _filter_sql(rq.filter, p)
        t = self._t("memcore_memories")
        scan = (f"SELECT key, seq, last_accessed_at, importance, "
                f"(-(embedding <#> %(q)s))::float8 AS sim FROM {t} "
                f"WHERE namespace = %(ns)s AND {_VISIBLE} AND {where}")
        if candidates is not None:
            scan += " ORDER BY embedding <#> %(q)s LIMIT %(c)s"
            conn.execute(f"SET LOCAL hnsw.ef_search = {int(candidates)}; "
                         f"SET LOCAL hnsw.iterative_scan = strict_order; "
                         # the candidates from the HNSW index, not a sort of the namespace
                         f"SET LOCAL enable_sort = off; SET LOCAL enable_seqscan = off; "
                         f"SET LOCAL enable_bitmapscan = off")
        sql = (f"WITH c AS MATERIALIZED ({scan}), "
               f"top AS (SELECT key, seq, sim, %(ws)s * sim + %(wr)s * power(0.5, least("
               f"greatest(%(now)s - last_accessed_at, 0) / %(hl)s, {_MAX_HALF_LIVES})) + "
               f"%(wi)s * importance AS score FROM c WHERE sim >= %(thr)s "
               f"ORDER BY score DESC, seq LIMIT %(k)s), "
               f"stats AS (SELECT min(sim) AS sim_c, count(*) AS n_c FROM c) "
               f"SELECT {', '.join('m.' + c.strip() for c in _COLS.split(','))}, top.seq, "
               f"top.sim, top.score, stats.sim_c, stats.n_c FROM stats LEFT JOIN "
               f"(top JOIN {t} m ON m.namespace = %(ns)s AND m.key = top.key) ON TRUE "
               f"ORDER BY top.score DESC, top.seq")
        rows = conn.execute(sql, p).fetchall()
        hits = [r for r in rows if r[0] is not None]
        if candidates is None:
            return self._hits(rq, hits)
        sim_c, n_c = rows[0][-2], rows[0][-1]
        if n_c < candidates:
            return None        # the index ran out (or the namespace is smaller): exact order
        if sim_c < rq.threshold:
            return self._hits(rq, hits)     # no memory outside the candidates qualifies
        bound = w.w_similarity * sim_c + w.w_recency + w.w_importance
        if len(hits) == rq.top_k and hits[-1][_NCOLS + 2] >= bound:
            return self._hits(rq, hits)
        return None

    def _hits(self, rq: ResolvedQuery, rows: list) -> list[MemoryHit]:
        hl = rq.weights.half_life
        return [MemoryHit(key=r[0], text=r[1], score=float(r[_NCOLS + 2]),
                          similarity=float(r[_NCOLS + 1]),
                          recency=0.5 ** (max(rq.now - r[6], 0.0) / hl), importance=r[2],
                          tier=self.tier, metadata=r[3], namespace=rq.namespace,
                          created_at=r[4], last_accessed_at=r[6]) for r in rows]

    # ------------------------------------------------------------------ stateless hybrid
    def _speakers_sql(self, ns: Namespace) -> list[str]:
        """The namespace's speaker names from the speaker index (a loose index scan: one
        probe per distinct speaker, not a pass over the rows)."""
        t = self._t("memcore_memories")
        sp = _SPEAKER
        # the names a row holds as a JSON string: one probe per name (LATERAL ... LIMIT 1:
        # the planner cannot turn it into a semi-join over a pass of the namespace), in the
        # same statement
        sql = (f"{_distinct_speakers(t)} SELECT s.v FROM s CROSS JOIN LATERAL (SELECT 1 FROM "
               f"{t} WHERE namespace = %(ns)s AND {sp} = s.v AND "
               f"jsonb_typeof((metadata::jsonb) -> 'speaker') = 'string' LIMIT 1) x "
               f"WHERE s.v IS NOT NULL ORDER BY s.v")
        got = self._run(lambda conn: conn.execute(sql, {"ns": _ns_text(ns)}).fetchall())
        # a speaker is a non-empty JSON string
        return [r[0] for r in got if r[0].strip()]

    def _candidates(self, rq: ResolvedQuery, hits: Sequence[MemoryHit] = ()
              ) -> "_pool.CandidatePool | None":
        """This query's candidate pool (:mod:`memcore.stores.pg_pool`; O(candidates), kept
        until the thread's next search; None for an empty namespace): the HNSW top-C by the
        embedding, the BM25 top-C over the query terms' postings, the rows of the speakers
        the query names (each filtered in SQL), the episode window neighbours of each, and
        ``hits`` (explanations of an earlier scan). A namespace of at most C rows is read
        whole (then the ranking is the replica's)."""
        local = self._local
        ident = (rq.namespace, rq.vector.tobytes(), rq.prepared, repr(rq.filter), rq.now,
                 rq.hybrid)
        got = getattr(local, "pool", None)
        if got is not None and got[0] == ident and (
                not hits or {h.key for h in hits} <= {r[0] for r in got[1].rows}):
            return got[1]
        local.pool = None

        c = self.candidates
        nst = _ns_text(rq.namespace)
        t = self._t("memcore_memories")
        p = {"ns": nst, "now": float(rq.now), "q": rq.vector, "c": c,
             "hits": [h.key for h in hits]}
        where = _filter_sql(rq.filter, p)
        vis = f"namespace = %(ns)s AND {_VISIBLE} AND {where}"
        p["terms"] = query_terms(rq.prepared.lexical)
        p["spk"] = sorted(rq.prepared.entities)
        w = rq.hybrid
        p["k1"], p["b"] = float(w.k1), float(w.b)

        def run(conn):
            # one snapshot; the memory of its hash tables and the HNSW settings in the same
            # round trip (used above C rows)
            conn.execute(f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; "
                         f"SET LOCAL work_mem = '{_SEARCH_WORK_MEM}'" + (
                f"; SET LOCAL hnsw.ef_search = {min(int(c), MAX_CANDIDATES)}; "
                f"SET LOCAL hnsw.iterative_scan = strict_order" if self.hnsw else ""))
            live = conn.execute(
                f"SELECT live, dl_sum, (SELECT count(*) FROM {t} WHERE namespace = %(ns)s AND "
                f"expires_at > 0 AND expires_at <= %(now)s) FROM "
                f"{self._t('memcore_namespaces')} WHERE namespace = %(ns)s", p).fetchone()
            if live is None or live[0] == 0:
                return []
            expired = live[2]
            visible = live[0] - expired if where == "TRUE" else conn.execute(
                f"SELECT count(*) FROM {t} WHERE {vis}", p).fetchone()[0]
            if w.normalize and w.dense:
                stats[0] = self._dense_stats(conn, rq, p, where, live[0], visible)
            if live[0] <= c:
                return conn.cursor(binary=True).execute(
                    f"SELECT {_COLS}, embedding, seq, TRUE, {_VISIBLE} AND {where}, tokens "
                    f"FROM {t} "
                    f"WHERE namespace = %(ns)s ORDER BY seq", p).fetchall()
            keys = set(p["hits"])
            keys.update(r[0] for r in conn.execute(
                f"SELECT key FROM {t} WHERE {vis} ORDER BY embedding <#> %(q)s LIMIT %(c)s",
                p).fetchall())
            if p["terms"]:
                keys.update(self._bm25_candidates(conn, rq, p, where, live[0], live[1],
                                                  visible, stats, corpus))
            if p["spk"]:        # the named speakers' rows nearest the query
                # lower(speaker) in spk <=> speaker in the distinct values whose lower() is:
                # those from the speaker index (one probe per distinct value), then their
                # rows by the index (a LATERAL probe per value), not a pass over the
                # namespace; materialised, so the order is exact (never the HNSW index's),
                # in table order as a pass reads them (equal distances cut as it cut them),
                # each row's distance computed in the probe (the sort moves no vectors)
                keys.update(r[0] for r in conn.execute(
                    f"{_distinct_speakers(t)}, r AS MATERIALIZED (SELECT x.* FROM s CROSS "
                    f"JOIN LATERAL (SELECT ctid AS at, key, embedding <#> %(q)s AS d FROM {t} "
                    f"WHERE {vis} AND {_SPEAKER} = s.v OFFSET 0) x "
                    f"WHERE lower(s.v) = ANY(%(spk)s) ORDER BY x.at) "
                    f"SELECT key FROM r ORDER BY d LIMIT %(c)s",
                    p).fetchall())
            p["keys"] = sorted(keys)
            ep = "((metadata::jsonb) -> 'episode')"
            # the rows by their ctid (a TID scan: one heap fetch each, no key index probe),
            # put in write order here (the server would sort the rows with their vectors)
            side = (f"CROSS JOIN LATERAL (SELECT at, key, row_number() OVER (ORDER BY seq "
                    f"{{1}}) AS d FROM (SELECT ctid AS at, key, seq FROM {t} WHERE namespace = "
                    f"%(ns)s AND {ep} = c.ep AND seq {{0}} c.seq ORDER BY seq {{1}} "
                    f"LIMIT 2 * %(r)s) y) x "
                    f"WHERE c.ep IS NOT NULL AND c.ep <> 'null'::jsonb")
            return sorted(conn.cursor(binary=True).execute(
                f"WITH c AS MATERIALIZED (SELECT ctid AS at, key, seq, {ep} AS ep FROM {t} "
                f"WHERE namespace = %(ns)s AND key = ANY(%(keys)s)), "
                f"nb AS MATERIALIZED (SELECT at, key, 0::int8 AS d FROM c UNION ALL "
                f"SELECT x.at, x.key, x.d FROM c {side.format('<', 'DESC')} "
                f"UNION ALL SELECT x.at, x.key, x.d FROM c {side.format('>', 'ASC')}) "
                f"SELECT {_COLS}, embedding, seq, key IN (SELECT key FROM nb WHERE d <= %(r)s), "
                f"{_VISIBLE} AND {where}, tokens FROM {t} "
                f"WHERE namespace = %(ns)s AND ctid = ANY(ARRAY(SELECT DISTINCT at FROM nb))",
                p).fetchall(), key=lambda r: r[_NCOLS + 1])

        p["r"] = max(int(w.dense_window), int(w.lexical_window), 0)
        stats: dict = {}           # z statistics of the namespace (rows of the moments)
        corpus: dict = {}          # its BM25 statistics
        rows = self._run(run)
        if not rows:
            return None
        got = _pool.pool(rows, rq, self.dim, self.query_preparer, stats,
                         (corpus["df"], corpus["n"], corpus["avgdl"]) if corpus else None)
        local.pool = (ident, got)
        return got

    def _bm25_candidates(self, conn: Any, rq: ResolvedQuery, p: dict, where: str, live: int,
                         dl_sum: int, visible: int, stats: dict, corpus: dict) -> list[str]:
        """The own-text BM25 top-C of the visible rows over the query terms' postings, with
        the namespace's statistics (df counted from the postings: O(matching postings); N the
        live rows and avgdl ``dl_sum / N``, kept by every writer), as the hybrid index scores
        them. When the query's index structure is the postings' (:data:`pg_terms.STRUCTURE`)
        also puts the lexical z statistics over the visible rows into ``stats[1]`` and the
        terms' df, N and avgdl into ``corpus``."""
        w = rq.hybrid
        t = self._t("memcore_memories")
        if visible == live:
            check = ""
        elif where == "TRUE":       # only expired rows are hidden: an anti-join with them (the
            # partial expiry index, O(expired rows)), not a probe per matching document
            check = (f"WHERE NOT EXISTS (SELECT 1 FROM {t} e WHERE e.namespace = %(ns)s AND "
                     f"e.expires_at > 0 AND e.expires_at <= %(now)s AND e.key = s.key)")
        else:
            check = (f"WHERE EXISTS (SELECT 1 FROM {t} WHERE namespace = %(ns)s AND {_VISIBLE} "
                     f"AND {where} AND key = s.key)")
        pt = self._t("memcore_postings")
        got = conn.execute(
            f"WITH q AS (SELECT u AS term, count(*) AS mult FROM unnest(%(terms)s::int8[]) AS u "
            f"GROUP BY u), "
            f"df AS MATERIALIZED (SELECT q.term, q.mult, d.df FROM q CROSS JOIN LATERAL "
            f"(SELECT count(*) AS df FROM {pt} WHERE namespace = %(ns)s AND term = q.term) d "
            f"WHERE d.df > 0 ORDER BY q.term), "
            f"wt AS MATERIALIZED (SELECT df.term, df.mult * ln(1.0::float8 + (%(n)s::float8 - "
            f"df.df + 0.5) / (df.df + 0.5)) AS idf FROM df ORDER BY df.term), "
            f"s AS (SELECT x.key, sum(wt.idf * x.tf / (x.tf + %(k1)s * (1 - %(b)s + %(b)s * "
            f"x.dl / %(avgdl)s))) AS score FROM wt CROSS JOIN LATERAL (SELECT key, tf, dl "
            f"FROM {pt} WHERE namespace = %(ns)s AND term = wt.term) x GROUP BY x.key), "
            f"v AS MATERIALIZED (SELECT key, score FROM s {check}), "
            f"top AS (SELECT key, score FROM v ORDER BY score DESC, key LIMIT %(c)s) "
            f"SELECT 0, key, score, NULL::float8 FROM top "
            f"UNION ALL SELECT 1, NULL, coalesce(sum(score), 0), coalesce(sum(score * score), 0) "
            f"FROM v UNION ALL SELECT 2, term::text, df::float8, NULL FROM df",
            {**p, "n": float(live), "avgdl": max(dl_sum / live, 1e-300)}).fetchall()
        if w.structure() == _terms.STRUCTURE and dl_sum > 0:
            s1, s2 = next((r[2], r[3]) for r in got if r[0] == 1)
            mean = s1 / visible if visible else 0.0
            stats[1] = (float(visible), mean, max(s2 - visible * mean * mean, 0.0))
            corpus.update(df={int(r[1]) % 2 ** 64: int(r[2]) for r in got if r[0] == 2},
                          n=live, avgdl=dl_sum / live)
        return [r[1] for r in got if r[0] == 0]

    def _dense_stats(self, conn: Any, rq: ResolvedQuery, p: dict, where: str, live: int,
                     visible: int) -> tuple:
        """Count, mean and M2 of the dense signal over the namespace's visible (filtered)
        rows: from the moment sums the writers keep (:mod:`memcore.stores.pg_moments`) when
        every row is visible and the sums of the query's (alpha, radius) are kept, else by
        one pass in the server (:meth:`_dense_moments`), as the embedded index does."""
        if visible == live and where == "TRUE":
            a, r = _moments.key_of(rq.hybrid)
            got = conn.cursor(binary=True).execute(       # 1.2 MB at dim 384: not as hex
                f"SELECT c1, c2 FROM {self._t('memcore_moments')} WHERE namespace = %s AND "
                f"alpha = %s AND radius = %s", [p["ns"], a, r]).fetchone()
            if got is not None:
                sums = (np.frombuffer(got[0], np.float64),
                        np.frombuffer(got[1], np.float64).reshape(self.dim, self.dim))
                return _moments.stats(sums, rq.vector, live)
        return self._dense_moments(conn, rq, p, where)

    def _dense_moments(self, conn: Any, rq: ResolvedQuery, p: dict, where: str) -> tuple:
        """Count, mean and M2 of the dense signal over the namespace's visible (filtered)
        rows, in the server (one pass: O(rows)): the own similarity, or with a window the
        context similarity ``alpha * sim + (1 - alpha) * mean(sim over the window)``, the
        window over every row of the episode in write order (expired rows included, as the
        embedded index holds them until swept)."""
        w = rq.hybrid
        r = 0 if w.alpha == 1.0 or w.dense_window == 0 else int(w.dense_window)
        t = self._t("memcore_memories")
        ep = "((metadata::jsonb) -> 'episode')"
        x = ("sim" if r == 0 else
             f"%(alpha)s * sim + (1 - %(alpha)s) * avg(sim) OVER (PARTITION BY ep, own "
             f"ORDER BY seq ROWS BETWEEN {r} PRECEDING AND {r} FOLLOWING)")
        got = conn.execute(
            f"WITH s AS (SELECT seq, {_VISIBLE} AND {where} AS keep, "
            f"(-(embedding <#> %(q)s))::float8 AS sim, {ep} AS ep, CASE WHEN {ep} IS NULL OR "
            f"{ep} = 'null'::jsonb THEN key END AS own FROM {t} WHERE namespace = %(ns)s), "
            f"x AS (SELECT keep, {x} AS x FROM s) "
            f"SELECT count(*), coalesce(avg(x), 0), coalesce(var_pop(x) * count(*), 0) "
            f"FROM x WHERE keep", {**p, "alpha": float(w.alpha)}).fetchone()
        return float(got[0]), float(got[1]), float(got[2])

    # ------------------------------------------------------------------ hybrid replica
    def _replica(self, ns: Namespace) -> "_Replica":
        """The namespace's in-process replica, synchronised with the server. Lock held."""
        rep = self._replicas.get(ns)
        if rep is None:
            rep = self._replicas[ns] = _Replica(self, ns)
        last = self._run(lambda conn: conn.execute(
            f"SELECT last_value FROM {self._t('memcore_seq')}").fetchone()[0])
        self._run(lambda conn: rep.sync(conn, last))
        return rep

    # ------------------------------------------------------------------ export / import
    def export_jsonl(self, path: Any) -> int:
        """Write every live memory to a JSON Lines file (as
        :meth:`LongTermMemory.export_jsonl`); returns how many.

        Raises
        ------
        OSError
        """
        self._check_read()

        def rows():        # every row, an expired one with its expiry (as the embedded store)
            held = self._run(lambda conn: conn.execute(
                f"SELECT namespace FROM {self._t('memcore_namespaces')} WHERE live > 0").fetchall())
            for ns in sorted(tuple(json.loads(r[0])) for r in held):
                got = self._run(lambda conn: conn.execute(
                    f"SELECT {_COLS}, embedding FROM {self._t('memcore_memories')} "
                    f"WHERE namespace = %s ORDER BY seq", [_ns_text(ns)]).fetchall())
                for r in got:
                    yield self._memory(ns, r), _np(r[_NCOLS])
        return storage.export_jsonl(path, self.embedder_name, self.dim, rows())

    def import_jsonl(self, path: Any, *, batch_size: int = 4096) -> int:
        """Insert (or replace) the memories of an export file (as
        :meth:`LongTermMemory.import_jsonl`); returns how many.

        Raises
        ------
        InvalidArgumentError, EmbedderMismatchError
        """
        self._check_write()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        n = 0
        for mems, vecs in storage.import_jsonl(path, self.embedder_name, self.dim, batch_size,
                                               MemoryTier.LONG):
            self.put_stored(mems, vecs if vecs is not None else self.embed([m.text for m in mems]))
            n += len(mems)
        return n


class _Replica:
    """One namespace mirrored in an in-memory :class:`~memcore.LongTermMemory` for hybrid
    recall, kept current from what was deleted (``memcore_deleted``, by sequence number),
    written (``seq``: writers commit in sequence order under the namespace lock) and changed
    in place since its last synchronisation (``memcore_touches``: access statistics and
    refreshed expiries, written without the namespace lock, so they may commit out of sequence
    order). A ``clear`` reloads it.

    The changed rows are read above a *safe mark*: every sequence number at or below it
    belongs to a transaction that has ended and was read. Each synchronisation first reads
    the sequence's current value ``L`` (outside its snapshot), then takes its snapshot ``S``.
    A transaction that drew a number ``<= L`` had its id before (:meth:`PostgresMemory.
    _update_in_place` assigns it first), so it is visible in ``S`` or in progress in it; once
    every transaction in progress in ``S`` has ended (the next snapshot's ``xmin`` is past
    them), the next synchronisation reads them all and the mark moves to ``L``. Until then
    the mark stays (a long transaction anywhere on the server makes the replicas re-read
    more rows, never miss one)."""

    def __init__(self, owner: PostgresMemory, ns: Namespace):
        from memcore.stores.long import LongTermMemory

        self.owner, self.ns = owner, ns
        self.store = LongTermMemory(None, owner.embedder, weights=owner.weights, clock=owner.clock,
                                    hybrid=owner.hybrid, query_preparer=owner.query_preparer,
                                    threads=owner.threads)
        self.seqs: dict[str, int] = {}      # key -> seq of the row the replica holds
        self.seq = self.dseq = self.mark = 0
        self.clears = -1
        self.pending: tuple[int, list[int]] | None = None   # (L, in progress in S) of the last sync

    def sync(self, conn: Any, last: int) -> None:
        """Synchronise in one REPEATABLE READ snapshot; ``last``: the sequence's value read
        just before this transaction began."""
        o = self.owner
        nst = _ns_text(self.ns)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")   # one snapshot
        xmin, xip = conn.execute("SELECT pg_snapshot_xmin(s)::text::int8, ARRAY(SELECT "
                                 "x::text::int8 FROM pg_snapshot_xip(s) x) "
                                 "FROM pg_current_snapshot() s").fetchone()
        st = conn.execute(f"SELECT clears FROM {o._t('memcore_namespaces')} WHERE namespace = %s",
                          [nst]).fetchone()
        clears = -1 if st is None else int(st[0])
        if clears != self.clears:
            self.store.clear(self.ns)      # first sync or a clear: reload
            self.seqs = {}
            self.seq = self.dseq = self.mark = 0
            self.clears = clears
            self.pending = None
        t = o._t("memcore_memories")
        gone = conn.execute(f"SELECT key, seq FROM {o._t('memcore_deleted')} WHERE namespace = %s "
                            f"AND seq > %s", [nst, self.dseq]).fetchall()
        new = conn.execute(f"SELECT {_COLS}, embedding, seq FROM {t} WHERE namespace = %s "
                           f"AND seq > %s ORDER BY seq", [nst, self.seq]).fetchall()
        touched = [] if not self.seq else conn.execute(
            f"SELECT m.key, m.last_accessed_at, m.access_count, m.expires_at, m.ttl "
            f"FROM {o._t('memcore_touches')} x JOIN {t} m ON m.namespace = x.namespace "
            f"AND m.key = x.key WHERE x.namespace = %s AND x.tseq > %s AND m.seq <= %s",
            [nst, self.mark, self.seq]).fetchall()
        if self.pending is not None and all(x < int(xmin) for x in self.pending[1]):
            self.mark = max(self.mark, self.pending[0])   # all of them read just now
        self.pending = (int(last), [int(x) for x in xip])
        for key, seq in gone:      # a delete older than the row held was followed by a put
            if self.seqs.get(key, seq) < seq:
                self.store.delete(self.ns, key)
                del self.seqs[key]
            self.dseq = max(self.dseq, seq)
        if new:
            mems = [o._memory(self.ns, r) for r in new]
            self.store.put_stored(mems, np.stack([_np(r[_NCOLS]) for r in new]))
            self.seqs.update((r[0], r[_NCOLS + 1]) for r in new)
            self.seq = max(self.seq, new[-1][_NCOLS + 1])
        if touched:
            table = self.store._tables[self.ns]
            cols = table.columns
            for key, last_at, count, expires, ttl in touched:
                row = table.keys.get(key)
                if row is None:
                    continue
                cols.last_accessed_at[row] = last_at
                cols.access_count[row] = count
                if ttl > 0:
                    table.set_expiry(np.asarray([row], np.int64), np.asarray([expires]),
                                     np.asarray([ttl]))
