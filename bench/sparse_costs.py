"""Where a hybrid search's sparse time goes, and whether common terms can be pruned (issue 25,
item 2). Reads the scale benchmark's cached corpus (``memcore bench scale --n N --workloads W``
generates it), ingests it into an in-memory :class:`~memcore.LongTermMemory` (hashing 384-d,
``HybridWeights.no_model()``, ``put_many``, 1 thread) and, per LoCoMo question:

- ``profile``: the hybrid search and its parts timed one by one (query terms, own-text BM25,
  window BM25, z statistics, the scan's arguments, the scan with and without the sparse
  signals), the rows holding each signal, how many query terms are common (df > n / 64) and
  so need co-occurrence (cross) terms for exact per-term variance sums;
- ``viability``: for common terms at ``--share`` of the rows, their bound ``G`` (z units) and
  the rows whose partial score (common terms left out) is within ``G`` of the k-th score: the
  rows a MaxScore-style pruned search must score in full;
- ``pruned``: :meth:`HybridIndex.search` with the z statistics given (so the BM25 of every row
  is not needed), unpruned vs pruned at each ``--share`` and ``--pool`` (ABAB rounds), checking
  the results are identical;
- ``search``: one measurement of the whole hybrid search (``store.search``), p50/p99 and the
  ingest time, as a JSON line (run it from two trees, alternating, for an A/B comparison).

``python -m bench.sparse_costs profile --n 1000000 --workload repetitive``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np


def _store(n: int, workload: str, queries: int):
    from bench import scale
    from bench.datasets import scale_questions
    from bench.env import pin_threads
    from memcore.stores.long import LongTermMemory

    pin_threads(1)
    cdir = scale.corpus_dir(n, "hashing", 0, 20_000, workload)
    if not (cdir / "meta.json").exists():
        sys.exit(f"error: no cached corpus at {cdir}; run `memcore bench scale --n {n} "
                 f"--workloads {workload}` first")
    emb, hw = scale._embedder("hashing"), scale._hybrid("hashing")
    questions = scale_questions(queries, 0, None)
    clock = scale._Clock(scale.T0)
    store = LongTermMemory(embedder=emb, hybrid=hw, clock=clock)
    t = time.perf_counter()
    scale._put_chunks(store, scale.Corpus(cdir), n, 50_000, clock)
    ingest = time.perf_counter() - t
    clock.now = scale.T0 + (n // 50_000 + 1) * scale.STEP
    ns = scale.NAMESPACE
    prepared = [store.prepare(ns, q, hybrid=hw) for q in questions]
    qv = np.ascontiguousarray(emb.encode([p.dense for p in prepared]), np.float32)
    idx = store._tables[ns].recall_index(hw, store.dim, store.query_preparer)
    return store, ns, hw, questions, prepared, qv, idx, ingest


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


def profile(a) -> dict:
    from memcore.kernels import scan as ks
    from memcore.recall.index import _NO_SPARSE, _padded

    store, ns, hw, questions, prepared, qv, idx, ingest = _store(a.n, a.workload, a.queries)
    n = idx.n_rows
    live = idx._a("alive")[:n]
    decay = (np.zeros(n), np.zeros(n, np.float32), 0.0, 1.0, 0.0, 0.0)
    r = int(hw.lexical_window)

    def parts(i: int) -> dict:
        p, T = prepared[i], {}
        t0 = time.perf_counter_ns()
        store.search(ns, questions[i], top_k=10, touch=False, query_vector=qv[i], hybrid=hw)
        T["search"] = _ms(t0)
        t0 = time.perf_counter_ns()
        q_terms, q_idf = idx._query_terms(p)
        T["query terms"] = _ms(t0)
        t0 = time.perf_counter_ns()
        own = idx.lexical.sparse_scores(q_terms, q_idf, hw.k1, hw.b)
        T["own-text BM25"] = _ms(t0)
        ws, wl, wr = idx.windows(r)
        t0 = time.perf_counter_ns()
        ctx = idx.lexical.context_scores(q_terms, ws, wl, wr, idx.context_lengths(r),
                                         int(idx._ctx_len[r]), hw.k1, hw.b, r)
        T["window BM25"] = _ms(t0)
        lex = idx.lexical_signals(p, hw)
        t0 = time.perf_counter_ns()
        st = idx.moments(p, qv[i], weights=hw, lexical=lex)
        T["z statistics"] = _ms(t0)
        t0 = time.perf_counter_ns()
        dense, windows, sparse, _ = idx._scan_args(p, hw, st, lex)
        T["scan arguments (speaker rows, concatenation)"] = _ms(t0)
        for name, sp in (("scan", sparse), ("scan without sparse signals", _NO_SPARSE)):
            ids, sc, si = _padded(10)
            t0 = time.perf_counter_ns()
            ks.hybrid_scan_topk(qv[i], idx._codes(n), idx._vectors()[:n], windows,
                                float(hw.alpha), dense, sp, decay, live, -np.inf,
                                (ids, sc, si, np.zeros(4, np.int64)))
            T[name] = _ms(t0)
        df = idx.lexical._a("df")[q_terms]
        T["rows: own-text BM25"] = own[0].shape[0]
        T["rows: window BM25"] = ctx[0].shape[0]
        T["query terms (n)"] = q_terms.shape[0]
        T["common terms, df > n/64 (n)"] = int((df * 64 > idx.n_live).sum())
        return T

    for i in range(min(5, len(prepared))):
        parts(i)
    load = os.getloadavg()
    res = [parts(i) for i in range(len(prepared))]
    med = {k: float(np.median([x[k] for x in res])) for k in res[0]}
    two = sum(x["common terms, df > n/64 (n)"] >= 2 for x in res)
    return {"n": a.n, "workload": a.workload, "ingest_s": ingest, "load": load, "p50": med,
            "queries_with_2_common_terms": two, "queries": len(res)}


def viability(a) -> dict:
    from memcore.kernels import bm25 as kb
    from memcore.kernels import scan as ks
    from memcore.recall.index import LexicalSignals, _padded

    store, ns, hw, questions, prepared, qv, idx, ingest = _store(a.n, a.workload, a.queries)
    n = idx.n_rows
    live = idx._a("alive")[:n]
    decay = (np.zeros(n), np.zeros(n, np.float32), 0.0, 1.0, 0.0, 0.0)
    r = int(hw.lexical_window)
    out = []
    for i, p in enumerate(prepared):
        q_terms, q_idf = idx._query_terms(p)
        lex = idx.lexical_signals(p, hw)
        st = idx.moments(p, qv[i], weights=hw, lexical=lex)
        common = idx.lexical._a("df")[q_terms] >= a.share * idx.n_live
        part = idx._term_signals(q_terms[~common], q_idf[~common], hw)
        inv = [idx._z(st, j, hw)[1] for j in (1, 2)]
        ctx_idf = kb.context_idf(idx.context_df(q_terms, r), idx.n_live)
        g = hw.lexical * inv[0] * q_idf[common].sum() \
            + hw.lexical_context * inv[1] * ctx_idf[common].sum()

        def ranked(sig: LexicalSignals) -> np.ndarray:
            dense, windows, sparse, _ = idx._scan_args(p, hw, st, sig)
            ids, sc, si = _padded(n)
            ks.hybrid_exact_topk(qv[i], idx._vectors()[:n], windows, float(hw.alpha), dense,
                                 sparse, decay, live, -np.inf, (ids, sc, si))
            return sc

        full, partial = ranked(lex), ranked(part)
        out.append({"common": int(common.sum()), "G": float(g),
                    "rows": int((partial >= full[9] - g).sum())})
    rows = [x["rows"] for x in out]
    return {"n": a.n, "workload": a.workload, "share": a.share, "queries": len(out),
            "G_median": float(np.median([x["G"] for x in out])),
            "rows_median": float(np.median(rows)), "rows_p90": float(np.percentile(rows, 90)),
            "common_median": float(np.median([x["common"] for x in out]))}


def pruned(a) -> dict:
    store, ns, hw, questions, prepared, qv, idx, ingest = _store(a.n, a.workload, a.queries)
    stats = [idx.moments(p, qv[i], weights=hw) for i, p in enumerate(prepared)]
    configs = [("unpruned", math.inf, 256)] + [
        (f"share {s} pool {k}", s, k) for s in a.shares for k in a.pools]

    def run(share, pool):
        idx.prune_share, idx.prune_pool = share, pool
        ts, res = [], []
        for i, p in enumerate(prepared):
            t0 = time.perf_counter_ns()
            got = idx.search(p, qv[i], top_k=10, weights=hw, stats=stats[i])
            ts.append(_ms(t0))
            res.append((got.ids.tolist(), got.scores.tobytes()))
        return ts, res

    for _, s, k in configs:
        run(s, k)
    rounds, base = {c[0]: [] for c in configs}, None
    for _ in range(a.rounds):
        for name, s, k in configs:
            load = os.getloadavg()[0]
            ts, res = run(s, k)
            base = res if base is None else base
            rounds[name].append((float(np.median(ts)), float(np.percentile(ts, 99)), load,
                                 res == base))
    return {"n": a.n, "workload": a.workload, "rounds": rounds}


def search(a) -> dict:
    store, ns, hw, questions, prepared, qv, idx, ingest = _store(a.n, a.workload, a.queries)

    def run():
        ts, hits = [], []
        for i, q in enumerate(questions):
            t0 = time.perf_counter_ns()
            h = store.search(ns, q, top_k=10, touch=False, query_vector=qv[i], hybrid=hw)
            ts.append(_ms(t0))
            hits.append([x.key for x in h])
        return ts, hits

    run()
    load = os.getloadavg()
    ts, hits = run()
    import memcore
    return {"n": a.n, "workload": a.workload, "ingest_s": ingest, "p50": float(np.median(ts)),
            "p99": float(np.percentile(ts, 99)), "load": load, "memcore": memcore.__file__,
            "hits": hits}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sparse_costs", description=__doc__)
    p.add_argument("what", choices=("profile", "viability", "pruned", "search"))
    p.add_argument("--n", type=lambda s: int(float(s)), default=100_000)
    p.add_argument("--workload", default="repetitive", choices=("recombined", "repetitive"))
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--share", type=float, default=0.1, help="viability: common-term share")
    p.add_argument("--shares", type=lambda s: [float(x) for x in s.split(",")],
                   default=[0.1, 0.2], help="pruned: common-term shares")
    p.add_argument("--pools", type=lambda s: [int(x) for x in s.split(",")],
                   default=[256, 2048], help="pruned: first candidate pools")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    out = {"profile": profile, "viability": viability, "pruned": pruned, "search": search}[
        a.what](a)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
