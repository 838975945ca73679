"""Store latency: put and search p50/p95 per namespace size, put_many throughput.

Per store (ShortTermMemory, LongTermMemory in memory, TwoTierMemory) and n items in one
namespace (1e3, 1e4, 1e5 under ``--benchmark-enable``; 1e3 in smoke mode):

- ``search``: fused ranking (similarity + recency + importance, top_k=10, refreshes the hits)
  with a precomputed 384-d query vector, so store cost is isolated from model cost; compared
  with a single-thread FAISS ``IndexFlatIP`` similarity-only search over the same vectors,
  measured in the same run (``ratio_vs_faiss`` in ``extra_info``). Results are checked exact
  against a NumPy brute force on a few queries.
- ``put``: one new key with the hashing embedder (text -> vector inside the put), and with a
  precomputed vector; the namespace holds n items (for ShortTermMemory, capacity n, so each put
  also evicts: the steady state).
- ``put_many``: items/s for a batch with precomputed vectors.

Figures land in ``benchmark.extra_info`` (printed with ``-s``):
``python -m pytest bench/test_bench_store.py --benchmark-enable -s``.
"""

from __future__ import annotations

import time
from functools import lru_cache

import faiss
import numpy as np
import pytest

from memcore import (
    DecayWeights,
    HashingEmbedder,
    HybridWeights,
    LongTermMemory,
    MemoryItem,
    PromotionPolicy,
    ShortTermMemory,
    TwoTierMemory,
)

DIM = 384
T0 = 1_700_000_000.0
TOP_K = 10
WEIGHTS = DecayWeights()  # fused: similarity + recency + importance
STORES = ["short", "long", "two-tier"]


def pytest_generate_tests(metafunc):
    if "n_items" in metafunc.fixturenames:
        config = metafunc.config  # same rule as the bench_enabled fixture
        enabled = bool(config.getoption("benchmark_enable")
                       or not config.getoption("benchmark_disable"))
        sizes = [1_000, 10_000, 100_000] if enabled else [1_000]
        metafunc.parametrize("n_items", sizes, ids=[f"n={n:.0e}" for n in sizes])


class Clock:
    """Advances 1 ms per call, so recency varies and nothing sleeps."""

    def __init__(self):
        self.t = T0

    def __call__(self):
        self.t += 1e-3
        return self.t


@lru_cache(maxsize=4)
def dataset(n: int):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    items = [MemoryItem(f"k{i}", f"robot memory {i}: door {i % 97} in room {i % 13}",
                        float(rng.uniform()), {"room": i % 13}) for i in range(n)]
    queries = rng.standard_normal((64, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return vectors, items, queries


@lru_cache(maxsize=1)
def hashing() -> HashingEmbedder:
    emb = HashingEmbedder(dim=DIM)
    emb.encode(["warm up the kernels"])
    return emb


def build(kind: str, n: int, clock):
    emb = hashing()
    if kind == "short":
        return ShortTermMemory(capacity=n, embedder=emb, clock=clock, weights=WEIGHTS)
    long = LongTermMemory(None, emb, clock=clock, weights=WEIGHTS)
    if kind == "long":
        return long
    short = ShortTermMemory(capacity=256, embedder=emb, clock=clock, weights=WEIGHTS)
    return TwoTierMemory(short, long, PromotionPolicy(min_importance=0.0), weights=WEIGHTS,
                         hybrid=HybridWeights.similarity())   # the fused-formula path measured here


def filled(kind: str, n: int):
    vectors, items, _ = dataset(n)
    clock = Clock()
    store = build(kind, n, clock)
    for lo in range(0, n, 10_000):
        store.put_many("ns", items[lo:lo + 10_000], vectors=vectors[lo:lo + 10_000])
    return store, clock


def pct(samples_s, q):
    return float(np.percentile(np.asarray(samples_s) * 1e3, q))


def report(benchmark, **info):
    benchmark.extra_info.update(info)
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))


def timed(fn, rounds):
    out = []
    for i in range(rounds):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def faiss_flat_single_thread(vectors, queries, rounds):
    index = faiss.IndexFlatIP(DIM)
    index.add(vectors)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index.search(queries[:1], TOP_K)
        return timed(lambda i: index.search(queries[i % len(queries)][None, :], TOP_K), rounds)
    finally:
        faiss.omp_set_num_threads(before)


def check_exact(store, clock, vectors, items, queries):
    """Store results equal a float64 NumPy brute force of the fused score (ties tolerated)."""
    imp = np.array([it.importance for it in items])
    for q in queries[:3]:
        before = {h.key: h for h in store.search("ns", "q", top_k=len(items), touch=False,
                                                 query_vector=q)}
        hits = store.search("ns", "q", top_k=TOP_K, touch=False, query_vector=q)
        # recency from each hit's own last_accessed_at (lifecycle differs per store and tier)
        rec = np.array([before[it.key].recency for it in items])
        scores = WEIGHTS.w_similarity * (vectors.astype(np.float64) @ q.astype(np.float64)) \
            + WEIGHTS.w_recency * rec + WEIGHTS.w_importance * imp
        kth = np.sort(scores)[-TOP_K]
        assert len(hits) == TOP_K
        for h in hits:
            assert scores[int(h.key[1:])] >= kth - 1e-5
            assert abs(h.score - scores[int(h.key[1:])]) < 1e-5


@pytest.mark.parametrize("kind", STORES)
def test_search_latency(benchmark, kind, n_items, bench_enabled):
    vectors, items, queries = dataset(n_items)
    store, clock = filled(kind, n_items)
    check_exact(store, clock, vectors, items, queries)
    rounds = 200 if bench_enabled else 5
    store.search("ns", "warm", top_k=TOP_K, query_vector=queries[0])
    lat = timed(lambda i: store.search("ns", "q", top_k=TOP_K,
                                       query_vector=queries[i % len(queries)]), rounds)
    base = faiss_flat_single_thread(vectors, queries, rounds)
    p50, p95, f50 = pct(lat, 50), pct(lat, 95), pct(base, 50)
    report(benchmark, store=kind, n=n_items, search_p50_ms=p50, search_p95_ms=p95,
           faiss_flat_1t_p50_ms=f50, faiss_flat_1t_p95_ms=pct(base, 95), ratio_vs_faiss=p50 / f50)
    it = iter(range(10**9))
    benchmark.pedantic(lambda: store.search("ns", "q", top_k=TOP_K,
                                            query_vector=queries[next(it) % len(queries)]),
                       rounds=rounds, iterations=1)


@pytest.mark.parametrize("with_vector", [False, True], ids=["hashing", "vector"])
@pytest.mark.parametrize("kind", STORES)
def test_put_latency(benchmark, kind, n_items, with_vector, bench_enabled):
    vectors, items, queries = dataset(n_items)
    store, clock = filled(kind, n_items)
    rounds = 300 if bench_enabled else 5
    rng = np.random.default_rng(1)
    extra = rng.standard_normal((rounds + 1, DIM)).astype(np.float32)

    def put(i):
        vec = extra[i] if with_vector else None
        store.put("ns", f"new{i}", f"the robot parked at dock {i} near the kitchen",
                  importance=0.5, metadata={"i": i}, vector=vec)

    put(rounds)  # warm up
    lat = timed(put, rounds)
    report(benchmark, store=kind, n=n_items, embed="none" if with_vector else "hashing",
           put_p50_ms=pct(lat, 50), put_p95_ms=pct(lat, 95))
    assert store.get("ns", "new0") is not None or kind == "short"
    it = iter(range(rounds + 2, 10**9))
    benchmark.pedantic(lambda: put(next(it) % rounds), rounds=rounds, iterations=1)


@pytest.mark.parametrize("kind", STORES)
def test_put_many_throughput(benchmark, kind, bench_enabled):
    n = 100_000 if bench_enabled else 2_000
    vectors, items, _ = dataset(n)

    def load():
        store = build(kind, n, Clock())
        t = time.perf_counter()
        store.put_many("ns", items, vectors=vectors)
        return store, time.perf_counter() - t

    store, seconds = load()
    assert store.count("ns") == n
    report(benchmark, store=kind, n=n, put_many_items_per_s=n / seconds)
    benchmark.pedantic(load, rounds=1 if not bench_enabled else 3, iterations=1)
