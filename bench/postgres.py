"""``memcore bench postgres``: the PostgreSQL backend beside the embedded store (issue 16).

Protocol (one run, one machine, a server from :class:`memcore.stores.pg_local.LocalServer` with
``fsync=off``, or ``--url``):

1. **corpus**: :func:`bench.datasets.scale_turns` -- the LoCoMo dev turns, then recombined
   episodes, with ``speaker``/``episode`` metadata -- embedded once with the 384-d hashing
   embedder; queries are LoCoMo dev questions (:func:`bench.datasets.scale_questions`).
2. **load** per n: ``put_many`` in chunks of 1,000 into an on-disk
   :class:`~memcore.LongTermMemory` (durability ``flush``) and into PostgreSQL without the HNSW
   index (the binary COPY path) by a ``replica=False`` store (its writes create the moment
   sums the stateless search reads; every later writer keeps them), then the index is built
   (``CREATE INDEX``, opening with ``hnsw=True``, ``maintenance_work_mem`` =
   ``--index-memory``); the clock advances an hour per chunk so recency varies. Reported:
   load s, rows/s, build s, rows/s with the build.
3. **put**: ``--puts`` single ``put`` calls of new keys with precomputed vectors (the store's
   cost, not the embedder's), alternating between the stores; median and p99 ms.
4. **search**: ``--queries`` questions, ``top_k=10``, ``touch=False``, query vectors
   precomputed, stores interleaved per query: similarity preset, decay preset (default
   :class:`~memcore.DecayWeights`), hybrid (``HybridWeights.no_model()``); PostgreSQL ranked by
   the exact ORDER BY (``exact_max_rows`` above n) and from HNSW candidates with the bound
   (``exact_max_rows=1``); in the hybrid preset ``postgres-exact`` is the replica path and,
   with ``--stateless``, ``postgres-stateless`` the stateless one (``replica=False``).
   Agreement = share of queries whose top-10 keys equal the embedded store's; same scores =
   the ten fused scores equal within 1e-5 (ties may swap keys).
5. **batch**: one ``put_many`` of ``--batch`` new rows into the loaded namespace with the
   HNSW index live (a ``replica=False`` store); rows/s.
6. **fleet** (largest n): ``--fleet`` searcher and writer processes on the namespace for
   ``--fleet-seconds`` (replica searchers, stateless ones with ``--stateless``), pg_locks
   sampled for lock waits of reads and writes; searches/s, puts/s, each searcher's first
   search and RSS.
7. **fresh searcher** (``--stateless``): a spawned process's ``--fresh-searches`` stateless
   hybrid searches: the first one's time, RSS before it, after it and after the last.
8. **writers**: 1, 4 and 8 processes, ``--writer-puts`` each, ``put_many`` batches of 50 with
   precomputed vectors, into one new namespace (HNSW index present); puts/s over the wall time,
   and the count checked.
9. **locomo** (unless ``--skip-locomo``): :func:`bench.quality.locomo_rankings` for the hybrid
   runs with the store built by PostgresMemory instead of LongTermMemory (and by a
   ``replica=False`` one with ``--stateless``); R@10 beside the embedded store's.

The 1-minute load average is recorded after each phase (the machine may be shared).

**Reuse** (``--reuse``, with ``--server-dir DIR`` or ``--url``): a 1e6 load takes long, so
each size's schema (``bench_n<n>``) is kept at the end, its load's figures recorded in it
(``memcore_bench_load``), and a later invocation skips the load and the index build when the
record is of n rows and the namespace holds exactly the loaded rows once the rows earlier
runs added (puts, batch, fleet writes: keys other than ``m<i>``) are deleted; a run deletes
its own at its end too. The report then carries the recorded load figures and when they were
measured. For example::

    memcore bench postgres --sizes 1000000 --stateless --reuse --server-dir /work/pgdata-1e6

Results: ``bench/results/postgres-<UTC>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
from urllib.parse import quote

import numpy as np

from bench.env import environment
from bench.report import default_out_dir, markdown_table, write_run

__all__ = ["add_arguments", "run"]

DIM = 384
NS = ("bench", "pg")
CHUNK = 1000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default="10000", help="comma-separated n (default 10000)")
    p.add_argument("--puts", type=int, default=200, help="single puts timed per store")
    p.add_argument("--queries", type=int, default=200, help="questions per preset")
    p.add_argument("--writers", default="1,4,8", help="writer process counts ('' skips)")
    p.add_argument("--writer-puts", type=int, default=2000, help="puts per writer process")
    p.add_argument("--url", default=None, help="a server of your own (default: a local one)")
    p.add_argument("--skip-locomo", action="store_true", help="skip the LoCoMo R@10 runs")
    p.add_argument("--fleet", default="8,4",
                   help="searcher,writer processes on the largest size's namespace ('' skips)")
    p.add_argument("--fleet-seconds", type=float, default=20.0, help="how long the fleet runs")
    p.add_argument("--fleet-searches", type=int, default=1000,
                   help="hybrid searches per searcher process at most (RSS after them)")
    p.add_argument("--locomo-runs", default="memcore-hybrid-hashing,memcore-hybrid",
                   help="bench.quality LoCoMo runs to repeat on PostgreSQL")
    p.add_argument("--presets", default="similarity,decay,hybrid",
                   help="search presets timed (at 1e6 the exact ORDER BY of similarity and "
                        "decay takes seconds a query: --presets hybrid)")
    p.add_argument("--stateless", action="store_true",
                   help="also the stateless hybrid path (PostgresMemory(replica=False)): a "
                        "postgres-stateless row in the hybrid search, the fleet's searchers "
                        "stateless, a fresh searcher's --fresh-searches (first search, RSS) "
                        "and the LoCoMo R@10 with it")
    p.add_argument("--fresh-searches", type=int, default=1000,
                   help="with --stateless: hybrid searches of one fresh searcher process "
                        "(RSS before its first, after it and after the last)")
    p.add_argument("--batch", type=int, default=5000,
                   help="rows of one put_many into the loaded namespace, HNSW index live")
    p.add_argument("--index-memory", default="2GB",
                   help="maintenance_work_mem of the HNSW index build (pgvector builds in "
                        "memory while the graph fits)")
    p.add_argument("--server-dir", default=None,
                   help="the local server's directory, kept (default: a temporary one)")
    p.add_argument("--reuse", action="store_true",
                   help="keep each size's loaded schema at the end and skip the load (and the "
                        "index build) when it already holds the n loaded rows; the load "
                        "figures reported are the recorded ones. Rows a run adds are deleted "
                        "at its end. With --server-dir (or --url) a second invocation reuses "
                        "the first one's load")


def _ms(xs: list) -> dict:
    a = np.asarray(xs) * 1e3
    return {"median_ms": float(np.median(a)), "p99_ms": float(np.percentile(a, 99))}


class _Clock:
    def __init__(self, t: float = 1.7e9):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _corpus(n: int, data):
    from bench.datasets import scale_turns
    from memcore import HashingEmbedder

    turns = scale_turns(n + n // 20 + 100, data=data)
    vecs = HashingEmbedder(dim=DIM).encode(turns.texts)
    keep = np.flatnonzero(vecs.any(axis=1))[:n]   # turns without a hashed token have no vector
    meta = [{"speaker": turns.speakers[i], "episode": int(turns.episodes[i])} for i in keep]
    return [turns.texts[i] for i in keep], np.ascontiguousarray(vecs[keep]), meta


def _load(store, texts, vecs, meta, clock, start=0) -> float:
    from memcore import MemoryItem

    t0 = time.perf_counter()
    for s in range(0, len(texts), CHUNK):
        e = min(s + CHUNK, len(texts))
        store.put_many(NS, [MemoryItem(f"m{start + i}", texts[i], 0.5, meta[i])
                            for i in range(s, e)], vectors=vecs[s:e])
        clock.t += 3600.0
    return time.perf_counter() - t0


def _loadavg() -> float:
    """The 1-minute load average: the machine may be shared, so timings carry it."""
    return os.getloadavg()[0]


def _with_setting(url: str, name: str, value: str) -> str:
    """``url`` whose sessions start with the server setting ``name = value`` (libpq's
    ``options``)."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-c {name}={value}')}"


#: The table (in the loaded schema, so dropped with it) where ``--reuse`` keeps the figures
#: of the load that filled the schema.
_LOAD_RECORD = "memcore_bench_load"


def _restore(pg) -> int:
    """Delete every memory of ``NS`` that the load did not write (keys other than
    ``m<i>``: puts, batches and fleet writes of a run, perhaps an interrupted one); returns
    how many."""
    extra = [k for k in pg.keys(NS) if not re.fullmatch(r"m\d+", k)]
    return pg.delete_many(NS, extra) if extra else 0


def _checkpoint(url: str) -> None:
    """A CHECKPOINT: what is committed survives the local server's immediate stop (its
    ``synchronous_commit=off`` may otherwise lose the last commits) and a restart replays
    nothing."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _ingest(url, emb, schema, texts, vecs, meta, reuse: bool, index_memory: str) -> dict:
    """Load ``texts`` into ``schema`` (``NS``) as ``_load`` does, by a ``replica=False``
    store (its writes keep the moment sums stateless searchers read) without the HNSW index,
    then build the index (``maintenance_work_mem = index_memory``); the times and load
    averages. With ``reuse``, a schema whose recorded load wrote these rows (and that holds
    them and nothing else, after :func:`_restore`) is kept and its record returned instead,
    and a new load is recorded."""
    import psycopg

    from memcore.stores.postgres import PostgresMemory

    n = len(texts)
    table = f'"{schema}".{_LOAD_RECORD}'
    if reuse:
        with PostgresMemory(url, emb, schema=schema, replica=False) as pg:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] and \
                    conn.execute(f"SELECT figures FROM {table}").fetchone()
            record = json.loads(row[0]) if row else None
            if record is not None and record["rows"] == n:
                removed = _restore(pg)
                if pg.count(NS) == n:
                    return {**record, "reused": True, "removed_before": removed}
    PostgresMemory(url, emb, schema=schema).drop()      # a fresh schema: no index yet
    clock = _Clock()
    with PostgresMemory(url, emb, clock=clock, schema=schema, hnsw=False, replica=False) as pg:
        t_load = _load(pg, texts, vecs, meta, clock)
    load_after = _loadavg()
    t0 = time.perf_counter()
    PostgresMemory(_with_setting(url, "maintenance_work_mem", index_memory), emb,
                   schema=schema, hnsw=True).close()
    t_index = time.perf_counter() - t0
    record = {"rows": n, "load_s": t_load, "index_s": t_index, "index_memory": index_memory,
              "loadavg_after_load": load_after, "loadavg_after_index": _loadavg(),
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"postgres load n={n}: {json.dumps(record)}", file=sys.stderr, flush=True)
    if reuse:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (figures text)")
            conn.execute(f"INSERT INTO {table} VALUES (%s)", (json.dumps(record),))
        _checkpoint(url)
    return {**record, "reused": False, "removed_before": 0}


def _writer(url, schema, w, n, vecs, texts):
    from memcore import HashingEmbedder, MemoryItem
    from memcore.stores.postgres import PostgresMemory

    with PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, pool_size=1) as pg:
        for s in range(0, n, 50):
            e = min(s + 50, n)
            pg.put_many("writers", [MemoryItem(f"w{w}-{i}", texts[i % len(texts)])
                                    for i in range(s, e)],
                        vectors=vecs[[i % len(vecs) for i in range(s, e)]])


def _throughput(url, counts, per_writer, vecs, texts) -> list:
    from memcore import HashingEmbedder
    from memcore.stores.postgres import PostgresMemory

    ctx = multiprocessing.get_context("fork")
    out = []
    for w in counts:
        schema = f"bench_writers_{w}"
        pg = PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema)
        pg.clear("writers")
        procs = [ctx.Process(target=_writer, args=(url, schema, i, per_writer, vecs, texts))
                 for i in range(w)]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        wall = time.perf_counter() - t0
        count = pg.count("writers")
        out.append({"writers": w, "puts": w * per_writer, "wall_s": wall,
                    "puts_per_s": w * per_writer / wall, "count_ok": count == w * per_writer,
                    "exitcodes": [p.exitcode for p in procs]})
        pg.drop()
    return out


def _rss_mb() -> float:
    """This process's resident set size (MB, /proc/self/status VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _searcher(url, schema, replica, qtexts, qvecs, searches, seconds, ready, go, out):
    """One searcher process: a fresh store (``replica``: the hybrid path) and its first
    hybrid search (timed, before the fleet starts: a fresh searcher joining a running fleet),
    then hybrid searches that touch (reads write access statistics) for ``seconds`` after
    ``go``, ``searches`` at most; RSS before the first search, after it, at the end."""
    from memcore import DecayWeights, HashingEmbedder, HybridWeights
    from memcore.stores.postgres import PostgresMemory

    with PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, pool_size=1,
                        weights=DecayWeights(), hybrid=HybridWeights.no_model(),
                        replica=replica) as pg:
        rss0 = _rss_mb()
        t0 = time.perf_counter()
        pg.search(NS, qtexts[-1], top_k=10, query_vector=qvecs[-1])
        first = time.perf_counter() - t0
        rss1 = _rss_mb()
        ready.put(True)
        go.wait()
        deadline = time.time() + seconds
        lat = []
        while len(lat) < searches and time.time() < deadline:
            i = len(lat)
            t0 = time.perf_counter()
            pg.search(NS, qtexts[i % len(qtexts)], top_k=10, query_vector=qvecs[i % len(qvecs)])
            lat.append(time.perf_counter() - t0)
        out.put({"first_s": first, "searches": len(lat), "rss_before_mb": rss0,
                 "rss_first_mb": rss1, "rss_end_mb": _rss_mb(), "lat": lat})


def _fleet_writer(url, schema, replica, w, vecs, texts, seconds, ready, go, out):
    from memcore import HashingEmbedder, MemoryItem
    from memcore.stores.postgres import PostgresMemory

    n = 0
    with PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, pool_size=1,
                        replica=replica) as pg:
        ready.put(True)
        go.wait()
        deadline = time.time() + seconds
        while n == 0 or time.time() < deadline:
            idx = [(n + j) % len(texts) for j in range(50)]
            pg.put_many(NS, [MemoryItem(f"fleet{w}-{n + j}", texts[i]) for j, i in enumerate(idx)],
                        vectors=vecs[idx])
            n += 50
    out.put({"puts": n})


#: pg_locks sampled for waiting locks, with what the waiting backend runs (a read: SELECT or
#: the access UPDATE of memories; a write: anything else memcore sends).
_LOCK_SAMPLE = ("SELECT a.query, l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a "
                "ON a.pid = l.pid WHERE NOT l.granted AND a.application_name = 'memcore'")


def _is_read(query: str) -> bool:
    q = " ".join(query.split())
    return q.startswith("SELECT") or (q.startswith("UPDATE") and "AS m SET last_accessed_at" in q)


def _fleet(url, schema, searchers, writers, seconds, searches, qtexts, qvecs, vecs, texts, *,
           replica=True):
    """``searchers`` hybrid searcher and ``writers`` writer processes on one namespace for
    ``seconds`` (``replica``: the stores' hybrid path); pg_locks sampled every 20 ms for lock
    waits, split into reads and writes."""
    import psycopg

    # spawned, not forked: each searcher is a fresh interpreter (its first search is a fresh
    # searcher's), and numba's OpenMP layer in this process forbids forked children's kernels
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    # all start together once every process has imported memcore and opened its store; the
    # searchers' first search happens while the writers write
    procs = [ctx.Process(target=_searcher, args=(url, schema, replica, qtexts, qvecs, searches,
                                                 seconds, ready, go, out))
             for _ in range(searchers)]
    procs += [ctx.Process(target=_fleet_writer, args=(url, schema, replica, w, vecs, texts,
                                                      seconds, ready, go, out))
              for w in range(writers)]
    waits = {"samples": 0, "read_waits": 0, "write_waits": 0, "read_examples": []}
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    go.set()
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while any(p.is_alive() for p in procs):
            for query, locktype, mode in conn.execute(_LOCK_SAMPLE).fetchall():
                if _is_read(query):
                    waits["read_waits"] += 1
                    if len(waits["read_examples"]) < 3:
                        waits["read_examples"].append(f"{locktype}/{mode}: {query[:120]}")
                else:
                    waits["write_waits"] += 1
            waits["samples"] += 1
            time.sleep(0.02)
            if time.perf_counter() - t0 > seconds + 600:
                break
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    wall = time.perf_counter() - t0
    srch = [g for g in got if "searches" in g]
    lat = [x for g in srch for x in g["lat"]]
    return {"searchers": searchers, "writers": writers, "replica": replica, "wall_s": wall,
            "searches": sum(g["searches"] for g in srch),
            "searches_per_s": sum(g["searches"] for g in srch) / wall,
            "puts": sum(g.get("puts", 0) for g in got),
            "puts_per_s": sum(g.get("puts", 0) for g in got) / wall,
            "search_ms": _ms(lat) if lat else {},
            "first_search_s": [g["first_s"] for g in srch],
            "rss_mb": [[g["rss_before_mb"], g["rss_first_mb"], g["rss_end_mb"], g["searches"]]
                       for g in srch],
            "lock_waits": waits, "exitcodes": [p.exitcode for p in procs]}


def _fresh_searcher(url, schema, now, qtexts, qvecs, searches, out):
    """A fresh process's first ``searches`` stateless hybrid searches (``touch=False``,
    queries in turn): the first one's time, RSS before it, after it and after the last."""
    from memcore import DecayWeights, HashingEmbedder, HybridWeights
    from memcore.stores.postgres import PostgresMemory

    with PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, pool_size=1,
                        weights=DecayWeights(), hybrid=HybridWeights.no_model(),
                        clock=_Clock(now), replica=False) as pg:
        rss0 = _rss_mb()
        lat = []
        for i in range(searches):
            t0 = time.perf_counter()
            pg.search(NS, qtexts[i % len(qtexts)], top_k=10, touch=False,
                      query_vector=qvecs[i % len(qvecs)])
            lat.append(time.perf_counter() - t0)
            if i == 0:
                rss1 = _rss_mb()
            if (i + 1) % 100 == 0:      # progress in the log, should the run be cut short
                print(f"fresh searcher: {i + 1} searches, RSS {_rss_mb():.0f} MB, median "
                      f"{1e3 * np.median(lat):.0f} ms", file=sys.stderr, flush=True)
        out.put({"searches": searches, "first_s": lat[0], "rss_before_mb": rss0,
                 "rss_first_mb": rss1, "rss_last_mb": _rss_mb(),
                 "rss_growth_mb": _rss_mb() - rss1, "search_ms": _ms(lat[1:] or lat),
                 "loadavg": _loadavg()})


def _fresh(url, schema, now, qtexts, qvecs, searches) -> dict:
    """:func:`_fresh_searcher` in a spawned process (a fresh interpreter)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_fresh_searcher, args=(url, schema, now, qtexts, qvecs, searches, out))
    p.start()
    got = out.get(timeout=3600)
    p.join(60)
    return {**got, "exitcode": p.exitcode}


def _locomo(url, runs, data, paths: dict) -> dict:
    """R@10 of bench.quality's LoCoMo runs with LongTermMemory and with PostgresMemory, once
    per entry of ``paths`` (name -> more of its arguments, e.g. ``{"replica": False,
    "candidates": 100}``)."""
    from bench import quality
    from bench.datasets import locomo_conversations
    from memcore.stores.postgres import PostgresMemory

    convs = locomo_conversations(data)
    questions = [q for c in convs for q in c.questions if q.evidence]
    emb = quality.Embeddings(1)
    embedded_store = quality._memcore_store
    count = [0]

    def pg_store(pg_kw):
        def make(kind, weights_name, clock, emb_):
            ltm = embedded_store(kind, weights_name, clock, emb_)
            count[0] += 1
            pg = PostgresMemory(url, ltm.embedder, weights=ltm.weights, clock=clock,
                                hybrid=ltm.hybrid, schema=f"bench_locomo_{count[0]}",
                                **pg_kw)
            pg.clear(("locomo",))
            return pg
        return make

    out = {}
    for run in runs:
        missing = quality._requires(run)
        if missing:
            out[run] = {"skipped": f"not importable: {', '.join(missing)}"}
            continue
        scores = {"embedded": quality.locomo_scores(quality.locomo_rankings(run, convs, emb),
                                                    questions)["all"]["R@10"]}
        for name, pg_kw in paths.items():
            quality._memcore_store = pg_store(pg_kw)  # the same run, the store on PostgreSQL
            try:
                scores[name] = quality.locomo_scores(
                    quality.locomo_rankings(run, convs, emb), questions)["all"]["R@10"]
            finally:
                quality._memcore_store = embedded_store
            scores[f"{name} difference"] = scores[name] - scores["embedded"]
        out[run] = scores
    return out


def run(args: argparse.Namespace) -> int:
    import tempfile

    from bench.datasets import scale_questions
    from memcore import (DecayWeights, HashingEmbedder, HybridWeights, LongTermMemory,
                         MemoryItem)
    from memcore.stores.pg_local import LocalServer
    from memcore.stores.postgres import PostgresMemory

    sizes = [int(s) for s in args.sizes.split(",")]
    writers = [int(w) for w in args.writers.split(",") if w.strip()]
    n_queries, n_puts, per_writer = args.queries, args.puts, args.writer_puts
    fleet = [int(x) for x in args.fleet.split(",")] if args.fleet.strip() else []
    n_batch, n_fresh = args.batch, args.fresh_searches
    chosen = args.presets.split(",")
    if not set(chosen) <= {"similarity", "decay", "hybrid"} or (
            args.stateless and "hybrid" not in chosen):
        raise ValueError(f"--presets takes similarity, decay and hybrid (hybrid with "
                         f"--stateless), got {args.presets!r}")
    if args.quick:
        sizes, n_queries, n_puts, per_writer, n_batch, n_fresh = [500], 10, 10, 50, 100, 20
        fleet = [2, 1] if fleet else []
        args.fleet_seconds, args.fleet_searches = 2.0, 20
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop the local server on kill
    server = None
    if args.url:
        url = args.url
    else:
        server = LocalServer(args.server_dir, fast=True).start()
        url = server.url
    try:
        versions = server.versions() if server else {}
        emb = HashingEmbedder(dim=DIM)
        texts, vecs, meta = _corpus(max(sizes) + n_puts + n_batch, args.data)
        qs = scale_questions(n_queries, data=args.data)
        qtexts = [q.question if hasattr(q, "question") else str(q) for q in qs]
        qvecs = emb.encode(qtexts)
        presets = {"similarity": dict(weights=DecayWeights.similarity(),
                                      hybrid=HybridWeights.similarity()),
                   "decay": dict(weights=DecayWeights(), hybrid=HybridWeights.similarity()),
                   "hybrid": dict(weights=DecayWeights(), hybrid=HybridWeights.no_model())}
        rows = []
        for n in sizes:
            clock = _Clock()
            root = tempfile.mkdtemp(prefix="memcore-bench-pg-")
            ltm = LongTermMemory(root, emb, clock=clock)
            t_ltm = _load(ltm, texts[:n], vecs[:n], meta[:n], clock)
            load_ltm = _loadavg()
            schema = f"bench_n{n}"
            ingest = _ingest(url, emb, schema, texts[:n], vecs[:n], meta[:n], args.reuse,
                             args.index_memory)
            exact = PostgresMemory(url, emb, clock=clock, schema=schema,
                                   exact_max_rows=10 * n + n_puts)
            hnsw = PostgresMemory(url, emb, clock=clock, schema=schema, exact_max_rows=1)
            stateless = PostgresMemory(url, emb, clock=clock, schema=schema, replica=False)
            res = {"n": n, "load_s": {"embedded": t_ltm, "postgres": ingest["load_s"],
                                      "postgres_hnsw_build": ingest["index_s"]},
                   "ingest": {**ingest, "embedded_loadavg_after_load": load_ltm},
                   "loadavg": {}}
            # single puts, alternating
            lat = {"embedded": [], "postgres": []}
            for i in range(n_puts):
                j = n + i
                for name, store in (("embedded", ltm), ("postgres", exact)):
                    t0 = time.perf_counter()
                    store.put(NS, f"p{j}", texts[j], metadata=meta[j], vector=vecs[j])
                    lat[name].append(time.perf_counter() - t0)
            res["put"] = {k: _ms(v) for k, v in lat.items()}
            res["loadavg"]["put"] = _loadavg()
            # searches, interleaved per query
            res["search"] = {}
            hq = [(q, emb.encode([ltm.prepare(NS, q, hybrid=presets["hybrid"]["hybrid"]
                                              ).dense])[0]) for q in qtexts]
            hq = [(q, v) for q, v in hq if v.any()]
            for pname in chosen:
                kw = presets[pname]
                stores = {"embedded": ltm, "postgres-exact": exact}
                if pname != "hybrid":
                    stores["postgres-hnsw"] = hnsw
                elif args.stateless:
                    stores["postgres-stateless"] = stateless
                lat = {k: [] for k in stores}
                agree = {k: 0 for k in stores}
                same_scores = {k: 0 for k in stores}
                pairs = hq if pname == "hybrid" else [(q, v) for q, v in zip(qtexts, qvecs)
                                                      if v.any()]
                for q, dense in pairs:
                    got, scores = {}, {}
                    for name, store in stores.items():
                        t0 = time.perf_counter()
                        hits = store.search(NS, q, top_k=10, touch=False, query_vector=dense, **kw)
                        lat[name].append(time.perf_counter() - t0)
                        got[name] = [h.key for h in hits]
                        scores[name] = np.asarray([h.score for h in hits])
                    for name in stores:
                        agree[name] += got[name] == got["embedded"]
                        same_scores[name] += (len(scores[name]) == len(scores["embedded"]) and
                                              np.allclose(scores[name], scores["embedded"],
                                                          atol=1e-5, rtol=0))
                res["search"][pname] = {
                    name: {**_ms(lat[name]), "same_top10": agree[name] / max(len(lat[name]), 1),
                           "same_scores": same_scores[name] / max(len(lat[name]), 1)}
                    for name in stores}
                res["loadavg"][f"search {pname}"] = _loadavg()
            res["hnsw_paths"] = dict(hnsw.search_paths)
            # one put_many into the loaded namespace, the HNSW index live
            if n_batch:
                j = n + n_puts
                batch = [MemoryItem(f"b{i}", texts[i], 0.5, meta[i])
                         for i in range(j, j + n_batch)]
                t0 = time.perf_counter()
                stateless.put_many(NS, batch, vectors=vecs[j:j + n_batch])
                wall = time.perf_counter() - t0
                res["ingest"]["batch"] = {"rows": n_batch, "wall_s": wall,
                                          "rows_per_s": n_batch / wall, "loadavg": _loadavg()}
            hq_texts, hq_vecs = [q for q, _ in hq], np.stack([v for _, v in hq])
            if fleet and n == max(sizes):
                res["fleet"] = _fleet(url, schema, fleet[0], fleet[1], args.fleet_seconds,
                                      args.fleet_searches, hq_texts, hq_vecs, vecs[:5000],
                                      texts[:5000], replica=not args.stateless)
                res["loadavg"]["fleet"] = _loadavg()
            if args.stateless and n_fresh:
                res["fresh_searcher"] = _fresh(url, schema, clock.t, hq_texts, hq_vecs, n_fresh)
            rows.append(res)
            ltm.close()
            for s in (exact, hnsw):
                s.close()
            if args.reuse:
                res["removed_after"] = _restore(stateless)
                stateless.close()
                _checkpoint(url)
            else:
                stateless.drop()
            import shutil
            shutil.rmtree(root, ignore_errors=True)
        thr = _throughput(url, writers, per_writer, vecs[:5000], texts[:5000])
        loc = {} if (args.skip_locomo or args.quick) else _locomo(
            url, [r for r in args.locomo_runs.split(",") if r], args.data,
            {"postgres": {}, **({"postgres-stateless": {"replica": False}}
                                if args.stateless else {})})
    finally:
        if server is not None:
            server.stop()
    payload = {"suite": "postgres", "env": {**environment(1), "server": versions},
               "quick": bool(args.quick), "sizes": rows, "writers": thr, "locomo": loc}
    md = _markdown(payload)
    files = write_run(args.out or default_out_dir(), "postgres", payload, md)
    print(md)
    print(f"\nwrote {', '.join(str(f) for f in files.values())}", file=sys.stderr)
    return 0


def _ingest_markdown(r: dict) -> str:
    """One size's ingest figures: the loads, the index build, a put_many with it live."""
    g = r["ingest"]
    n, t_ltm, t_pg, t_index = g["rows"], r["load_s"]["embedded"], g["load_s"], g["index_s"]
    rows = [["embedded (LongTermMemory, flush)", f"{t_ltm:.2f}", "", f"{n / t_ltm:,.0f}", "",
             f"{g['embedded_loadavg_after_load']:.1f}"],
            ["PostgreSQL put_many, no HNSW (COPY), then CREATE INDEX", f"{t_pg:.2f}",
             f"{t_index:.2f}", f"{n / t_pg:,.0f}", f"{n / (t_pg + t_index):,.0f}",
             f"{g['loadavg_after_load']:.1f} / {g['loadavg_after_index']:.1f}"]]
    b = g.get("batch")
    if b:
        rows.append([f"PostgreSQL put_many of {b['rows']} into the loaded namespace, HNSW live",
                     f"{b['wall_s']:.2f}", "", f"{b['rows_per_s']:,.0f}", "",
                     f"{b['loadavg']:.1f}"])
    reused = (f" The PostgreSQL load is the one recorded at {g['at']} (--reuse; "
              f"{g['removed_before']} rows of earlier runs deleted first)." if g["reused"] else "")
    return (markdown_table(["ingest, chunks of 1,000, precomputed vectors", "load s",
                            "index build s", "rows/s", "rows/s with the build", "load avg"],
                           rows) +
            f"\n\nThe PostgreSQL writer is a replica=False store (it keeps the moment sums "
            f"the stateless search reads); index build with maintenance_work_mem = "
            f"{g['index_memory']}.{reused}")


def _targets_markdown(r: dict) -> str:
    """One size's stateless figures beside the issue's targets (P3)."""
    st, fr, fl = r["search"]["hybrid"]["postgres-stateless"], r["fresh_searcher"], r.get("fleet")
    copy = r["ingest"]["rows"] / r["ingest"]["load_s"]
    rows = [["hybrid search p50 (stateless)", "<= 50 ms", f"{st['median_ms']:.1f} ms"],
            ["RSS growth, 1st to last search of a fresh searcher", "<= 100 MB",
             f"{fr['rss_growth_mb']:+.1f} MB ({fr['searches']} searches)"],
            ["first hybrid search, fresh searcher", "<= 1 s", f"{fr['first_s']:.2f} s" + (
                f" (fleet's, under load: max {max(fl['first_search_s']):.2f} s)" if fl else "")],
            ["bulk put_many (COPY, no HNSW), embedding excluded", ">= 10,000 rows/s",
             f"{copy:,.0f} rows/s"]]
    if fl and not fl["replica"]:
        rows.append([f"lock waits on reads, {fl['searchers']} searchers + {fl['writers']} "
                     f"writers", "none", f"{fl['lock_waits']['read_waits']} in "
                     f"{fl['lock_waits']['samples']} pg_locks samples"])
    return markdown_table([f"target (P3), n = {r['n']}", "target", "measured"], rows)


def _markdown(p: dict) -> str:
    f = lambda x: f"{x:.2f}"   # noqa: E731
    lines = [f"# memcore bench postgres ({p['env'].get('date', '')})", "",
             f"Server: PostgreSQL {p['env']['server'].get('postgresql', '?')}, pgvector "
             f"{p['env']['server'].get('pgvector', '?')} (local, fsync=off); 384-d hashing "
             f"vectors; medians, same run.", ""]
    date = p["env"].get("date", "")
    for r in p["sizes"]:
        n = r["n"]
        lines += [f"## n = {n} ({date})", "", _ingest_markdown(r), ""]
        body = [["put", "embedded", f(r["put"]["embedded"]["median_ms"]),
                 f(r["put"]["embedded"]["p99_ms"]), "", ""],
                ["put", "postgres", f(r["put"]["postgres"]["median_ms"]),
                 f(r["put"]["postgres"]["p99_ms"]),
                 f(r["put"]["postgres"]["median_ms"] / r["put"]["embedded"]["median_ms"]), ""]]
        for pname, stores in r["search"].items():
            base = stores["embedded"]["median_ms"]
            for name, s in stores.items():
                body.append([f"search {pname}", name, f(s["median_ms"]), f(s["p99_ms"]),
                             f(s["median_ms"] / base), f"{s['same_top10']:.3f}",
                             f"{s['same_scores']:.3f}"])
        lines += [markdown_table(["op", "store", "median ms", "p99 ms", "x embedded",
                                  "same top-10 keys", "same top-10 scores"],
                                 [row + [""] if len(row) == 6 else row for row in body]), "",
                  "Same top-10 keys: the ten keys in the same order as the embedded store's; "
                  "same scores: the ten scores equal within 1e-5 (a tie at the tenth place "
                  "may be broken by another key: the hashing embedder gives many equal "
                  "similarities). In the hybrid preset postgres-exact is the replica path "
                  "(replica=True) and postgres-stateless the stateless one (replica=False).", "",
                  f"HNSW-store search paths: {r['hnsw_paths']}; load average after each "
                  f"phase: {', '.join(f'{k} {v:.1f}' for k, v in r['loadavg'].items())}.", ""]
        fl = r.get("fleet")
        if fl:
            rss = fl["rss_mb"]
            lines += [f"### Fleet: {fl['searchers']} hybrid searcher "
                      f"({'replica' if fl['replica'] else 'stateless'}) + {fl['writers']} "
                      f"writer processes, one namespace, {f(fl['wall_s'])} s ({date})", "",
                      markdown_table(
                          ["searches/s", "search p50 ms", "search p99 ms", "puts/s",
                           "first search s (max)", "RSS MB before / after 1st / at end (max)",
                           "lock waits sampled: reads / writes (samples)"],
                          [[f(fl["searches_per_s"]), f(fl["search_ms"].get("median_ms", 0)),
                            f(fl["search_ms"].get("p99_ms", 0)), f(fl["puts_per_s"]),
                            f(max(fl["first_search_s"])),
                            f"{max(x[0] for x in rss):.0f} / {max(x[1] for x in rss):.0f} / "
                            f"{max(x[2] for x in rss):.0f} ({min(x[3] for x in rss)} searches)",
                            f"{fl['lock_waits']['read_waits']} / {fl['lock_waits']['write_waits']}"
                            f" ({fl['lock_waits']['samples']})"]]), ""]
        fr = r.get("fresh_searcher")
        if fr:
            lines += [f"### A fresh stateless searcher process: {fr['searches']} hybrid "
                      f"searches, touch=False ({date})", "",
                      markdown_table(
                          ["first search s", "p50 ms (2nd on)", "p99 ms", "RSS MB before 1st",
                           "after 1st", f"after {fr['searches']}th", "growth MB 1st to last",
                           "load avg"],
                          [[f(fr["first_s"]), f(fr["search_ms"]["median_ms"]),
                            f(fr["search_ms"]["p99_ms"]), f"{fr['rss_before_mb']:.0f}",
                            f"{fr['rss_first_mb']:.0f}", f"{fr['rss_last_mb']:.0f}",
                            f"{fr['rss_growth_mb']:+.1f}", f"{fr['loadavg']:.1f}"]]), "",
                      _targets_markdown(r), ""]
    lines += [] if not p["writers"] else [
              "## Writer processes (one namespace, put_many of 50, precomputed vectors)", "",
              markdown_table(["writers", "puts", "wall s", "puts/s", "all present"],
                             [[w["writers"], w["puts"], f(w["wall_s"]), f(w["puts_per_s"]),
                               w["count_ok"]] for w in p["writers"]]), ""]
    if p["locomo"]:
        paths = sorted({k for v in p["locomo"].values() for k in v
                        if k not in ("embedded", "skipped") and not k.endswith("difference")})
        lines += [f"## LoCoMo dev R@10 ({date})", "",
                  markdown_table(["run", "embedded"] + [h for k in paths
                                                        for h in (k, f"{k} difference")],
                                 [[k, f"{v['embedded']:.4f}"] +
                                  [x for q in paths for x in (f"{v[q]:.4f}",
                                                              f"{v[f'{q} difference']:+.4f}")]
                                  if "embedded" in v else
                                  [k, v.get("skipped", "")] + [""] * 2 * len(paths)
                                  for k, v in p["locomo"].items()]), ""]
    return "\n".join(lines)
