"""LongTermMemory on disk: open, put (per durability), put_many, search vs FAISS, compact, bytes.

Smoke mode (default) runs every benchmark at 2,000 items; ``--benchmark-enable`` runs the
issue's size, 1e5 items of 384 dims. Figures land in ``benchmark.extra_info`` (and are
printed with ``-s``). Search is also compared, in the same run, with a single-thread FAISS
``IndexFlatIP`` similarity-only search and with FAISS candidates + the exact top-k bound
(:func:`bench.ranking.exact_topk`), the alternative search path the store does not take.
"""

from __future__ import annotations

import os
import time

import faiss
import numpy as np
import pytest

from memcore import DecayWeights, HashingEmbedder, LongTermMemory, MemoryItem
from memcore.kernels import fused_topk_parallel, fused_topk_serial, use_parallel
from bench.ranking import exact_topk

DIM = 384
T0 = 1_700_000_000.0


def n_items(bench_enabled: bool) -> int:
    return 100_000 if bench_enabled else 2_000


def data(n: int):
    rng = np.random.default_rng(0)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    items = [MemoryItem(f"k{i}", f"memory {i}: the robot saw door {i % 97} in room {i % 13}",
                        float(rng.uniform()), {"room": i % 13}) for i in range(n)]
    return v, items


def pct(ts, q):
    return float(np.percentile(np.asarray(ts) * 1e3, q))


def report(benchmark, **info):
    benchmark.extra_info.update(info)
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in info.items()))


def disk_bytes(root):
    apparent = allocated = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


@pytest.fixture(scope="module")
def filled(tmp_path_factory, bench_enabled):
    """A closed store with n items in namespace "bench" (put_many with precomputed vectors)."""
    n = n_items(bench_enabled)
    v, items = data(n)
    root = tmp_path_factory.mktemp("long") / "store"
    s = LongTermMemory(root, HashingEmbedder(dim=DIM), clock=lambda: T0)
    t0 = time.perf_counter()
    s.put_many("bench", items, vectors=v)
    put_many_s = time.perf_counter() - t0
    s.close()
    return root, v, n, put_many_s


def test_put_many_throughput(benchmark, filled):
    root, v, n, put_many_s = filled
    report(benchmark, n=n, put_many_items_per_s=n / put_many_s, target=100_000)
    s = LongTermMemory(root, HashingEmbedder(dim=DIM), clock=lambda: T0, durability="none")
    items = [MemoryItem(f"b{i}", f"batch {i}") for i in range(1000)]
    benchmark.pedantic(s.put_many, args=("batch", items), kwargs={"vectors": v[:1000]},
                       rounds=3, iterations=1)
    assert s.count("batch") == 1000
    s.close()


def test_open_time(benchmark, filled):
    root, _, n, _ = filled
    emb = HashingEmbedder(dim=DIM)

    def reopen():
        LongTermMemory(root, emb, clock=lambda: T0).close()

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        s = LongTermMemory.open(root, emb)
        times.append(time.perf_counter() - t0)
        assert s.count("bench") == n
        s.close()
    report(benchmark, n=n, open_s_min=min(times), open_s_median=float(np.median(times)),
           target_s=0.5)
    benchmark.pedantic(reopen, rounds=1, iterations=1)


@pytest.mark.parametrize("durability", ["none", "flush", "fsync"])
def test_put_latency(benchmark, filled, durability):
    root, v, n, _ = filled
    s = LongTermMemory(root, HashingEmbedder(dim=DIM), clock=lambda: T0, durability=durability)
    reps = 200 if durability == "fsync" else 1000
    ts = []
    for i in range(reps):
        t0 = time.perf_counter()
        s.put("bench", f"lat{i}", f"latency probe {i}", vector=v[i])
        ts.append(time.perf_counter() - t0)
    report(benchmark, n=n, durability=durability, put_p50_ms=pct(ts, 50), put_p99_ms=pct(ts, 99),
           target_p50_ms=0.2)
    i = iter(range(10**9))
    benchmark.pedantic(lambda: s.put("bench", f"x{next(i)}", "probe", vector=v[0]),
                       rounds=20, iterations=1)
    for j in range(reps):
        s.delete("bench", f"lat{j}")
    s.close()


def test_search_vs_single_thread_faiss(benchmark, filled):
    root, v, n, _ = filled
    s = LongTermMemory.open(root, HashingEmbedder(dim=DIM), clock=lambda: T0 + 3600)
    rng = np.random.default_rng(1)
    q = v[rng.integers(0, n, 60)] + 0.3 * rng.standard_normal((60, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(DIM)
    index.add(v)
    cols = s._tables[("bench",)].columns
    w = DecayWeights()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        fused, flat, bound, serial, parallel = [], [], [], [], []
        out = (np.empty(10, np.int64), np.empty(10, np.float32), np.empty(10, np.float32))
        args = (cols.vectors[:n], w.w_similarity,
                (cols.last_accessed_at[:n], cols.importance[:n], T0 + 3600, w.half_life,
                 w.w_recency, w.w_importance), cols.alive[:n], -1.0)
        for qi in q:                                  # warm up both
            s.search("bench", "q", query_vector=qi, top_k=10, touch=False)
            index.search(qi[None, :], 10)
        for qi in q:
            t0 = time.perf_counter()
            hits = s.search("bench", "q", query_vector=qi, top_k=10, touch=False)
            fused.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sims, ids = index.search(qi[None, :], 10)
            flat.append(time.perf_counter() - t0)
            t0 = time.perf_counter()

            def cands(m, qi=qi):
                d, i = index.search(qi[None, :], m)
                return i[0], d[0]

            top = exact_topk(cands, n, 10, last_accessed_at=cols.last_accessed_at[:n],
                             importance=cols.importance[:n], alive=cols.alive[:n],
                             now=T0 + 3600, weights=w)
            bound.append(time.perf_counter() - t0)
            assert [h.key for h in hits] == [f"k{r}" for r in top.ids[:top.count]]
        # Both kernel variants, after the store/FAISS loop: parallel worker threads keep
        # spinning after a call and would slow whatever is timed next.
        for kernel, ts in ((fused_topk_serial, serial), (fused_topk_parallel, parallel)):
            for qi in q:
                t0 = time.perf_counter()
                kernel(qi, *args, out)
                ts.append(time.perf_counter() - t0)
    finally:
        faiss.omp_set_num_threads(threads)
    report(benchmark, n=n, fused_p50_ms=pct(fused, 50), fused_p95_ms=pct(fused, 95),
           faiss_flat_p50_ms=pct(flat, 50), faiss_flat_p95_ms=pct(flat, 95),
           faiss_bound_p50_ms=pct(bound, 50), kernel_serial_p50_ms=pct(serial, 50),
           kernel_parallel_p50_ms=pct(parallel, 50),
           store_path="parallel" if use_parallel(n) else "serial",
           fused_over_faiss_p50=pct(fused, 50) / pct(flat, 50), target_ratio=1.3)
    benchmark.pedantic(s.search, args=("bench", "q"),
                       kwargs={"query_vector": q[0], "top_k": 10, "touch": False},
                       rounds=10, iterations=1)
    s.close()


def test_compact_time_and_disk_bytes(benchmark, filled, tmp_path):
    root, v, n, _ = filled
    apparent, allocated = disk_bytes(root)
    s = LongTermMemory(root, HashingEmbedder(dim=DIM), clock=lambda: T0, durability="none")
    live = s.count("bench")
    for i in range(0, n, 10):                          # 10% garbage
        s.delete("bench", f"k{i}")
    t0 = time.perf_counter()
    dropped = s.compact()
    compact_s = time.perf_counter() - t0
    assert dropped >= n // 10 and s.count("bench") == live - len(range(0, n, 10))
    s.close()
    report(benchmark, n=n, compact_s=compact_s, disk_bytes_per_item_apparent=apparent / n,
           disk_bytes_per_item_allocated=allocated / n,
           raw_vector_bytes=DIM * 4)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
