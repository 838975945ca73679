"""``memcore bench postgres``: the PostgreSQL backend beside the embedded store (issue 16).

Protocol (one run, one machine, a server from :class:`memcore.stores.pg_local.LocalServer` with
``fsync=off``, or ``--url``):

1. **corpus**: :func:`bench.datasets.scale_turns` -- the LoCoMo dev turns, then recombined
   episodes, with ``speaker``/``episode`` metadata -- embedded once with the 384-d hashing
   embedder; queries are LoCoMo dev questions (:func:`bench.datasets.scale_questions`).
2. **load** per n: ``put_many`` in chunks of 1,000 into an on-disk
   :class:`~memcore.LongTermMemory` (durability ``flush``) and into PostgreSQL without the HNSW
   index, then the index is built (``CREATE INDEX``, opening with ``hnsw=True``); the clock
   advances an hour per chunk so recency varies.
3. **put**: ``--puts`` single ``put`` calls of new keys with precomputed vectors (the store's
   cost, not the embedder's), alternating between the stores; median and p99 ms.
4. **search**: ``--queries`` questions, ``top_k=10``, ``touch=False``, query vectors
   precomputed, stores interleaved per query: similarity preset, decay preset (default
   :class:`~memcore.DecayWeights`), hybrid (``HybridWeights.no_model()``); PostgreSQL ranked by
   the exact ORDER BY (``exact_max_rows`` above n) and from HNSW candidates with the bound
   (``exact_max_rows=1``). Agreement = share of queries whose top-10 keys equal the embedded
   store's; same scores = the ten fused scores equal within 1e-5 (ties may swap keys).
5. **writers**: 1, 4 and 8 processes, ``--writer-puts`` each, ``put_many`` batches of 50 with
   precomputed vectors, into one new namespace (HNSW index present); puts/s over the wall time,
   and the count checked.
6. **locomo** (unless ``--skip-locomo``): :func:`bench.quality.locomo_rankings` for the hybrid
   runs with the store built by PostgresMemory instead of LongTermMemory; R@10 beside the
   embedded store's.

Results: ``bench/results/postgres-<UTC>.{json,md}``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

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
    p.add_argument("--locomo-runs", default="memcore-hybrid-hashing,memcore-hybrid",
                   help="bench.quality LoCoMo runs to repeat on PostgreSQL")


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


def _locomo(url, runs, data) -> dict:
    """R@10 of bench.quality's LoCoMo runs with LongTermMemory and with PostgresMemory."""
    from bench import quality
    from bench.datasets import locomo_conversations
    from memcore.stores.postgres import PostgresMemory

    convs = locomo_conversations(data)
    questions = [q for c in convs for q in c.questions if q.evidence]
    emb = quality.Embeddings(1)
    embedded_store = quality._memcore_store
    count = [0]

    def pg_store(kind, weights_name, clock, emb_):
        ltm = embedded_store(kind, weights_name, clock, emb_)
        count[0] += 1
        pg = PostgresMemory(url, ltm.embedder, weights=ltm.weights, clock=clock,
                            hybrid=ltm.hybrid, schema=f"bench_locomo_{count[0]}")
        pg.clear(("locomo",))
        return pg

    out = {}
    for run in runs:
        missing = quality._requires(run)
        if missing:
            out[run] = {"skipped": f"not importable: {', '.join(missing)}"}
            continue
        scores = {"embedded": quality.locomo_scores(quality.locomo_rankings(run, convs, emb),
                                                    questions)["all"]["R@10"]}
        quality._memcore_store = pg_store      # the same run, the store built on PostgreSQL
        try:
            scores["postgres"] = quality.locomo_scores(
                quality.locomo_rankings(run, convs, emb), questions)["all"]["R@10"]
        finally:
            quality._memcore_store = embedded_store
        scores["difference"] = scores["postgres"] - scores["embedded"]
        out[run] = scores
    return out


def run(args: argparse.Namespace) -> int:
    import tempfile

    from bench.datasets import scale_questions
    from memcore import DecayWeights, HashingEmbedder, HybridWeights, LongTermMemory
    from memcore.stores.pg_local import LocalServer
    from memcore.stores.postgres import PostgresMemory

    sizes = [int(s) for s in args.sizes.split(",")]
    writers = [int(w) for w in args.writers.split(",") if w.strip()]
    n_queries, n_puts, per_writer = args.queries, args.puts, args.writer_puts
    if args.quick:
        sizes, n_queries, n_puts, per_writer = [500], 10, 10, 50
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # stop the local server on kill
    server = None
    if args.url:
        url = args.url
    else:
        server = LocalServer(fast=True).start()
        url = server.url
    try:
        versions = server.versions() if server else {}
        emb = HashingEmbedder(dim=DIM)
        texts, vecs, meta = _corpus(max(sizes) + n_puts, args.data)
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
            clock.t = 1.7e9
            schema = f"bench_n{n}"
            with PostgresMemory(url, emb, clock=clock, schema=schema, hnsw=False) as pg0:
                pg0.clear(NS)
                t_pg = _load(pg0, texts[:n], vecs[:n], meta[:n], clock)
            t0 = time.perf_counter()
            exact = PostgresMemory(url, emb, clock=clock, schema=schema, hnsw=True,
                                   exact_max_rows=10 * n + n_puts)
            t_index = time.perf_counter() - t0
            hnsw = PostgresMemory(url, emb, clock=clock, schema=schema, exact_max_rows=1)
            res = {"n": n, "load_s": {"embedded": t_ltm, "postgres": t_pg,
                                      "postgres_hnsw_build": t_index}}
            # single puts, alternating
            lat = {"embedded": [], "postgres": []}
            for i in range(n_puts):
                j = n + i
                for name, store in (("embedded", ltm), ("postgres", exact)):
                    t0 = time.perf_counter()
                    store.put(NS, f"p{j}", texts[j], metadata=meta[j], vector=vecs[j])
                    lat[name].append(time.perf_counter() - t0)
            res["put"] = {k: _ms(v) for k, v in lat.items()}
            # searches, interleaved per query
            res["search"] = {}
            for pname, kw in presets.items():
                stores = {"embedded": ltm, "postgres-exact": exact}
                if pname != "hybrid":
                    stores["postgres-hnsw"] = hnsw
                lat = {k: [] for k in stores}
                agree = {k: 0 for k in stores}
                same_scores = {k: 0 for k in stores}
                for q, v in zip(qtexts, qvecs):
                    if not v.any():
                        continue
                    dense = v
                    if pname == "hybrid":
                        dense = emb.encode([ltm.prepare(NS, q, hybrid=kw["hybrid"]).dense])[0]
                        if not dense.any():
                            continue
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
            res["hnsw_paths"] = dict(hnsw.search_paths)
            rows.append(res)
            ltm.close()
            for s in (exact, hnsw):
                s.close()
            PostgresMemory(url, emb, schema=schema).drop()
            import shutil
            shutil.rmtree(root, ignore_errors=True)
        thr = _throughput(url, writers, per_writer, vecs[:5000], texts[:5000])
        loc = {} if (args.skip_locomo or args.quick) else _locomo(
            url, [r for r in args.locomo_runs.split(",") if r], args.data)
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


def _markdown(p: dict) -> str:
    f = lambda x: f"{x:.2f}"   # noqa: E731
    lines = [f"# memcore bench postgres ({p['env'].get('date', '')})", "",
             f"Server: PostgreSQL {p['env']['server'].get('postgresql', '?')}, pgvector "
             f"{p['env']['server'].get('pgvector', '?')} (local, fsync=off); 384-d hashing "
             f"vectors; medians, same run.", ""]
    for r in p["sizes"]:
        n = r["n"]
        lines += [f"## n = {n}", "",
                  f"Load: embedded {f(r['load_s']['embedded'])} s, PostgreSQL "
                  f"{f(r['load_s']['postgres'])} s + HNSW build "
                  f"{f(r['load_s']['postgres_hnsw_build'])} s.", ""]
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
                  "similarities).", "",
                  f"HNSW-store search paths: {r['hnsw_paths']}", ""]
    lines += [] if not p["writers"] else [
              "## Writer processes (one namespace, put_many of 50, precomputed vectors)", "",
              markdown_table(["writers", "puts", "wall s", "puts/s", "all present"],
                             [[w["writers"], w["puts"], f(w["wall_s"]), f(w["puts_per_s"]),
                               w["count_ok"]] for w in p["writers"]]), ""]
    if p["locomo"]:
        lines += ["## LoCoMo dev R@10", "",
                  markdown_table(["run", "embedded", "postgres", "difference"],
                                 [[k, f"{v['embedded']:.4f}", f"{v['postgres']:.4f}",
                                   f"{v['difference']:+.4f}"] if "embedded" in v else
                                  [k, v.get("skipped", ""), "", ""]
                                  for k, v in p["locomo"].items()]), ""]
    return "\n".join(lines)
