"""Stateless hybrid search (``PostgresMemory(replica=False)``) beside the replica path.

``python -m bench.postgres_stateless N [QUERIES]``: loads N LoCoMo-derived turns
(:func:`bench.postgres._corpus`, 384-d hashing vectors) into a local server, then runs
fresh searcher processes alternately (replica, stateless, replica, stateless, ... three
each): RSS before the first search, the first hybrid search's time, p50/p99 of QUERIES hybrid
searches (``HybridWeights.no_model()``, ``touch=False``), RSS after, and the top-10 keys
(agreement of stateless with replica). Prints one JSON line per searcher.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time

import numpy as np

from bench.postgres import DIM, NS, _Clock, _corpus, _load


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _searcher(url, schema, replica, qtexts, qvecs, out):
    from memcore import HashingEmbedder, HybridWeights
    from memcore.stores.postgres import PostgresMemory

    hw = HybridWeights.no_model()
    pg = PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, hybrid=hw,
                        clock=_Clock(1.7e9 + 1e7), replica=replica)
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    pg.search(NS, qtexts[0], top_k=10, touch=False, query_vector=qvecs[0])
    first = time.perf_counter() - t0
    lat, keys = [], []
    for q, v in zip(qtexts, qvecs):
        t0 = time.perf_counter()
        hits = pg.search(NS, q, top_k=10, touch=False, query_vector=v)
        lat.append(time.perf_counter() - t0)
        keys.append([h.key for h in hits])
    out.put({"replica": replica, "rss0_mb": rss0, "rss1_mb": _rss_mb(), "first_s": first,
             "p50_ms": 1e3 * float(np.median(lat)), "p99_ms": 1e3 * float(np.quantile(lat, .99)),
             "keys": keys, "load": os.getloadavg()[0]})
    pg.close()


def main(n: int, queries: int = 200) -> None:
    from bench.datasets import scale_questions
    from memcore import HashingEmbedder
    from memcore.stores.pg_local import LocalServer
    from memcore.stores.postgres import PostgresMemory

    import tempfile
    srv = LocalServer(tempfile.mkdtemp(prefix="memcore-pgst-"))
    srv.start()
    url = srv.url
    emb = HashingEmbedder(dim=DIM)
    texts, vecs, meta = _corpus(n, None)
    schema = f"bench_st{n}"
    clock = _Clock()
    # written by a replica=False store: its writes create the dense moment sums the
    # stateless searchers read (every writer keeps them once they exist)
    with PostgresMemory(url, emb, clock=clock, schema=schema, replica=False) as pg:
        pg.clear(NS)
        t = _load(pg, texts, vecs, meta, clock)
    print(json.dumps({"n": n, "load_s": t}), flush=True)
    qs = scale_questions(queries, data=None)
    qtexts = [q.question if hasattr(q, "question") else str(q) for q in qs]
    qvecs = emb.encode(qtexts)
    ctx = multiprocessing.get_context("spawn")
    res = []
    for replica in (True, False) * 3:
        out = ctx.Queue()
        p = ctx.Process(target=_searcher, args=(url, schema, replica, qtexts, qvecs, out))
        p.start()
        r = out.get()
        p.join()
        res.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "keys"}), flush=True)
    ref = res[0]["keys"]
    for r in res:
        if not r["replica"]:
            same = np.mean([a == b for a, b in zip(ref, r["keys"])])
            r10 = np.mean([len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(ref, r["keys"])])
            print(json.dumps({"stateless_equal_top10": float(same), "overlap@10": float(r10)}))
    srv.stop()




def locomo(candidates: int) -> dict:
    """LoCoMo dev hybrid R@10 (hashing embedder): embedded vs PostgresMemory stateless with
    ``candidates`` per source (a conversation of at most that many turns is read whole)."""
    import tempfile

    from bench.postgres import _locomo
    from memcore.stores.pg_local import LocalServer

    srv = LocalServer(tempfile.mkdtemp(prefix="memcore-pgst-")).start()
    try:
        return _locomo(srv.url, ["memcore-hybrid-hashing"], None,
                       {"postgres": {"replica": False, "candidates": candidates}})
    finally:
        srv.stop()


if __name__ == "__main__":
    if sys.argv[1] == "locomo":
        print(json.dumps(locomo(int(sys.argv[2]))))
    else:
        main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200)
