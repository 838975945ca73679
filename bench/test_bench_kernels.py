"""Fused recall kernel vs FAISS + NumPy and NumPy-only pipelines (issue 3); hybrid recall from
int8 codes vs today's float32 context-matrix kernel and FAISS (issue 14).

dim 384, n in {1e3, 1e4, 1e5, 1e6}, top_k 10, one query per call:

- ``fused_serial`` / ``fused_parallel``: :func:`memcore.kernels.fused_topk_serial` / ``_parallel``
  (one pass: dot, decay, threshold, alive, heap);
- ``faiss_numpy``: ``faiss.IndexFlatIP.search`` over all rows + NumPy decay + ``argpartition``;
- ``numpy``: ``vectors @ query`` + NumPy decay + ``argpartition``.

Everything but ``fused_parallel`` (numba's default threads, all cores) runs single-threaded (FAISS OpenMP and BLAS pinned to 1 inside
try/finally). ``extra_info`` holds items/s, GB/s scanned, the fraction of the single-core read
bandwidth (measured here, enabled mode only) and recall@k against the NumPy pipeline.

``test_bench_hybrid_recall`` (issue 14), dim 384, n in {1e5, 1e6}, top_k 10, clustered rows
(topics of 200 rows, a shared direction, episodes of 20 consecutive rows, windows +-2), queries
= stored rows plus noise, three sparse signals (two BM25-like on 2% and 6% of rows, a speaker
boost on 5%):

- ``f32_ctx``: today's :func:`memcore.kernels.hybrid.hybrid_topk` over the float32 context
  matrix (z-statistics by full passes), 1 thread;
- ``codes_1t`` / ``codes_2t``: :mod:`memcore.kernels.moments` statistics +
  :func:`memcore.kernels.scan.hybrid_scan_topk_serial` / ``_parallel`` (2 numba threads);
- ``sim_codes_1t`` / ``sim_codes_2t``: the similarity preset (own cosine only) from codes;
- ``faiss_1t`` / ``faiss_2t``: ``faiss.IndexFlatIP.search`` (k = 10), 1 and 2 OpenMP threads.

``extra_info`` holds the rows scored exactly and flagged (candidate fraction), and whether the
codes result equals the exact path (:func:`memcore.kernels.scan.hybrid_exact_topk`). The same
cases as one same-run table with the calling thread's CPU time next to wall time (stable on a
shared machine): ``python -m bench.test_bench_kernels 1e5 1e6``.

Smoke mode (default ``--benchmark-disable``) shrinks n to 2000 so ``pytest`` stays quick but
still runs, and checks, every function. Real numbers::

    NUMBA_CACHE_DIR=/tmp/numba_cache python -m pytest bench/test_bench_kernels.py \\
        --benchmark-enable --benchmark-json=kernels.json
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from functools import lru_cache

import faiss
import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from memcore.kernels import codes as kcodes
from memcore.kernels import fused_topk_parallel, fused_topk_serial
from memcore.kernels import hybrid as khybrid
from memcore.kernels import moments as kmoments
from memcore.kernels import scan as kscan
from memcore.types import DecayWeights

DIM = 384
TOP_K = 10
NOW = 1_700_000_000.0
SIZES = {"1e3": 1_000, "1e4": 10_000, "1e5": 100_000, "1e6": 1_000_000}
SMOKE_N = 2_000
W = DecayWeights()
THRESHOLD = -1.0


@lru_cache(maxsize=1)
def dataset(n: int):
    """Seeded unit vectors (n, DIM) float32, timestamps over 30 days, importance, 95% alive."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    t = NOW - rng.uniform(0, 30 * 86400.0, n)
    imp = rng.random(n, dtype=np.float32)
    alive = rng.random(n) < 0.95
    query = rng.standard_normal(DIM, dtype=np.float32)
    query /= np.linalg.norm(query)
    return query, vectors, t, imp, alive


@contextmanager
def single_thread():
    """FAISS OpenMP and BLAS at 1 thread; restored afterwards."""
    before = faiss.omp_get_max_threads()
    try:
        faiss.omp_set_num_threads(1)
        with threadpool_limits(limits=1):
            yield
    finally:
        faiss.omp_set_num_threads(before)


def _numpy_decay_topk(sims, t, imp, alive, k):
    """NumPy fused score over given (row-aligned) sims and the top-k by argpartition."""
    rec = np.exp2(-np.maximum(NOW - t, 0.0) / W.half_life)
    score = (W.w_similarity * sims + W.w_recency * rec + W.w_importance * imp).astype(np.float32)
    score[~(alive & (sims >= np.float32(THRESHOLD)))] = -np.inf
    k = min(k, score.shape[0])
    part = np.argpartition(-score, k - 1)[:k]
    return part[np.argsort(-score[part], kind="stable")]


def numpy_pipeline(query, vectors, t, imp, alive, k):
    return _numpy_decay_topk(vectors @ query, t, imp, alive, k)


def faiss_pipeline(index, query, t, imp, alive, k):
    n = index.ntotal
    sims, ids = index.search(query[None, :], n)
    top = _numpy_decay_topk(sims[0], t[ids[0]], imp[ids[0]], alive[ids[0]], k)
    return ids[0][top]


@numba.njit(cache=True, fastmath=True)
def _numba_sum(a):
    acc = np.float32(0.0)
    for i in range(a.shape[0]):
        acc += a[i]
    return acc


def _enabled(config) -> bool:
    """pytest-benchmark's own rule: ``--benchmark-enable`` overrides ``--benchmark-disable``."""
    return bool(config.getoption("benchmark_enable")
                or not config.getoption("benchmark_disable"))


@pytest.fixture(scope="session")
def bench_on(request) -> bool:
    """True for real runs (full sizes); False in smoke mode."""
    return _enabled(request.config)


@pytest.fixture(scope="session")
def read_bandwidth(bench_on):
    """Single-core read bandwidth in bytes/s: best of NumPy sum and a vectorised numba sum.

    Over a ~1 GB float32 array in enabled mode (16 MB in smoke mode), median of 5 passes each.
    """
    n = (256 if bench_on else 4) * 1024 * 1024
    a = np.ones(n, np.float32)
    _numba_sum(a[:16])
    best = 0.0
    with single_thread():
        for fn in (np.sum, _numba_sum):
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                fn(a)
                times.append(time.perf_counter() - t0)
            best = max(best, a.nbytes / float(np.median(times)))
    return best


@pytest.mark.parametrize("method", ["fused_serial", "fused_parallel", "faiss_numpy", "numpy"])
@pytest.mark.parametrize("size", list(SIZES))
def test_bench_fused_topk(benchmark, bench_on, read_bandwidth, size, method):
    n = SIZES[size] if bench_on else min(SIZES[size], SMOKE_N)
    query, vectors, t, imp, alive = dataset(n)
    out = (np.empty(TOP_K, np.int64), np.empty(TOP_K, np.float32), np.empty(TOP_K, np.float32))
    args = (query, vectors, W.w_similarity,
            (t, imp, NOW, W.half_life, W.w_recency, W.w_importance), alive, THRESHOLD, out)
    if method == "fused_serial":
        def run():
            fused_topk_serial(*args)
            return out[0].copy()
    elif method == "fused_parallel":
        def run():
            fused_topk_parallel(*args)
            return out[0].copy()
    elif method == "faiss_numpy":
        index = faiss.IndexFlatIP(DIM)
        index.add(vectors)

        def run():
            return faiss_pipeline(index, query, t, imp, alive, TOP_K)
    else:
        def run():
            return numpy_pipeline(query, vectors, t, imp, alive, TOP_K)

    rounds = max(3, min(200, int(2e7 // n))) if bench_on else 1
    if method == "faiss_numpy" and bench_on:
        rounds = max(3, rounds // 10)
    # fused_parallel uses numba's threads (all cores); everything else is pinned to one.
    with single_thread() if method != "fused_parallel" else nullcontext():
        run()                                          # JIT / first-touch warm-up
        got = benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=1)
        want = numpy_pipeline(query, vectors, t, imp, alive, TOP_K)

    # Timing the right thing: every method returns the same top-k (float32 near-ties aside).
    recall = len(set(got.tolist()) & set(want.tolist())) / TOP_K
    assert recall >= 0.9, (method, got, want)
    stats = getattr(benchmark, "stats", None)
    median = stats.stats.median if stats is not None else None
    scanned = n * DIM * 4
    benchmark.extra_info.update(n=n, dim=DIM, top_k=TOP_K, method=method,
                                recall_at_k=recall, bytes_per_query=scanned,
                                read_bandwidth_gbs=read_bandwidth / 1e9)
    if median:
        benchmark.extra_info.update(items_per_s=n / median, gb_per_s=scanned / median / 1e9,
                                    bandwidth_fraction=scanned / median / read_bandwidth)


# ----------------------------------------------------------------------------- hybrid (issue 14)
HYBRID_SIZES = {"1e5": 100_000, "1e6": 1_000_000}
ALPHA = 0.4
EPISODE = 20


@lru_cache(maxsize=1)
def hybrid_dataset(n: int):
    """Clustered unit rows, episode windows (+-2), the float32 context matrix of today's path,
    int8 codes, the context-vector sums S1/S2, three sparse signals and 8 queries."""
    rng = np.random.default_rng(0)
    n_topics = max(10, n // 200)
    centres = rng.standard_normal((n_topics, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    common = rng.standard_normal(DIM).astype(np.float32)
    common /= np.linalg.norm(common)
    topic_of_ep = rng.integers(0, n_topics, n // EPISODE + 1)
    vectors = np.empty((n, DIM), np.float32)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        x = (centres[topic_of_ep[np.arange(a, b) // EPISODE]] + 0.35 * common
             + rng.standard_normal((b - a, DIM), dtype=np.float32) * np.float32(1.1 / np.sqrt(DIM)))
        vectors[a:b] = x / np.linalg.norm(x, axis=1, keepdims=True)
    ep, pos = np.arange(n) // EPISODE, np.arange(n) % EPISODE
    lo = np.maximum(pos - 2, 0)
    cnt = np.minimum(pos + 3, np.minimum(EPISODE, n - ep * EPISODE)) - lo
    win_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(cnt, out=win_ptr[1:])
    win_rows = np.repeat(ep * EPISODE + lo - win_ptr[:-1], cnt) + np.arange(win_ptr[-1])
    ctx = np.empty_like(vectors)                   # today's combined matrix (float32)
    s1, s2 = np.zeros(DIM), np.zeros((DIM, DIM))   # sums of the float64 context vectors
    for a in range(0, n, 50_000):
        b = min(n, a + 50_000)
        acc = np.zeros((b - a, DIM))
        for p in range(5):
            has = cnt[a:b] > p
            acc[has] += vectors[win_rows[win_ptr[a:b][has] + p]]
        c = ALPHA * vectors[a:b].astype(np.float64) + (1 - ALPHA) * acc / cnt[a:b, None]
        ctx[a:b] = c
        s1 += c.sum(axis=0)
        s2 += c.T @ c
    enc = (np.empty((n, DIM), np.int8), np.empty(n, np.float32), np.empty(n, np.float32),
           np.empty(n, np.float32))
    kcodes.encode_rows(vectors, *enc)
    four = (np.empty((n, kcodes.nibble_width(DIM)), np.uint8),
            *(np.empty(n, np.float32) for _ in range(3)))
    kcodes.encode_nibbles(vectors, *four)
    enc = (*enc, *four)               # the first pass reads the 4-bit codes, as a store's does
    sparse = []
    for frac in (0.02, 0.06, 0.05):
        rows = np.flatnonzero(rng.random(n) < frac).astype(np.int64)
        sparse.append((rows, rng.gamma(2.0, 2.0, rows.shape[0]) if frac != 0.05
                       else np.ones(rows.shape[0])))
    queries = []
    for _ in range(8):
        x = vectors[rng.integers(0, n)] + 0.6 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        queries.append((x / np.linalg.norm(x)).astype(np.float32))
    return dict(vectors=vectors, win_start=win_ptr[:-1].copy(), win_len=cnt.astype(np.int64),
                win_rows=win_rows.astype(np.int64), ctx=ctx,
                s1=s1, s2=s2, enc=enc, sparse=sparse, queries=queries,
                t=np.full(n, NOW), imp=np.zeros(n, np.float32), alive=np.ones(n, bool))


HYBRID_W = dict(w_ctx=1.5, w_lex=0.25, w_lex_ctx=0.75, w_speaker=2.0)   # HybridWeights() defaults


def hybrid_arguments(d, query):
    """The codes scan's arguments after (query, codes..., vectors): statistics from the sums
    (dense) and from the sparse scores (lexical), as a store would compute them per query."""
    n = d["vectors"].shape[0]
    mean, var = kmoments.dense_moments(query, d["s1"], d["s2"], n)
    dense = np.array([0.0, 0.0, 0.0, HYBRID_W["w_ctx"], mean, 1 / np.sqrt(var) if var > 0 else 0.0])
    sp_rows = np.concatenate([r for r, _ in d["sparse"]])
    sp_vals = np.concatenate([v for _, v in d["sparse"]])
    sp_ptr = np.zeros(4, np.int64)
    np.cumsum([r.shape[0] for r, _ in d["sparse"]], out=sp_ptr[1:])
    mu, inv = np.zeros(3), np.ones(3)
    for j in range(2):                                   # the two lexical signals: z-scored
        m, v = kmoments.sparse_moments(d["sparse"][j][1], n)
        mu[j], inv[j] = m, (1 / np.sqrt(v) if v > 0 else 0.0)
    sp_w = np.array([HYBRID_W["w_lex"], HYBRID_W["w_lex_ctx"], HYBRID_W["w_speaker"]])
    return ((d["win_start"], d["win_len"], d["win_rows"]), ALPHA, dense,
            (sp_ptr, sp_rows, sp_vals, sp_w, mu, inv), (d["t"], d["imp"], NOW, 3600.0, 0.0, 0.0),
            d["alive"], -np.inf)


def similarity_arguments(d):
    e, z = np.zeros(0, np.int64), np.zeros(0)
    return ((d["win_start"], d["win_len"], d["win_rows"]), 1.0,
            np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]), (np.zeros(1, np.int64), e, z, z, z, z),
            (d["t"], d["imp"], NOW, 3600.0, 0.0, 0.0), d["alive"], -np.inf)


@contextmanager
def numba_threads(k):
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(k, numba.config.NUMBA_NUM_THREADS))
        yield
    finally:
        numba.set_num_threads(before)


HYBRID_METHODS = ["f32_ctx", "codes_1t", "codes_2t", "sim_codes_1t", "sim_codes_2t", "faiss_1t",
                  "faiss_2t"]


@pytest.mark.parametrize("method", HYBRID_METHODS)
@pytest.mark.parametrize("size", list(HYBRID_SIZES))
def test_bench_hybrid_recall(benchmark, bench_on, size, method):
    n = HYBRID_SIZES[size] if bench_on else SMOKE_N
    d = hybrid_dataset(n)
    qs = d["queries"]
    turn = [0]

    def next_query():
        turn[0] = (turn[0] + 1) % len(qs)
        return qs[turn[0]]
    out = (np.empty(TOP_K, np.int64), np.empty(TOP_K, np.float32), np.empty(TOP_K, np.float32))
    stats = np.zeros(4, np.int64)
    work = []
    threads = 2 if method.endswith("2t") else 1
    if method == "f32_ctx":
        lex = np.zeros((2, n))
        for j in range(2):
            lex[j, d["sparse"][j][0]] = d["sparse"][j][1]
        boost = np.zeros(n, np.float32)
        boost[d["sparse"][2][0]] = 1.0
        w_lex = np.array([HYBRID_W["w_lex"], HYBRID_W["w_lex_ctx"]])
        scratch = np.empty(n, np.float32)

        def run():
            khybrid.hybrid_topk(next_query(), d["ctx"], HYBRID_W["w_ctx"],
                                (lex, w_lex, boost, HYBRID_W["w_speaker"]),
                                (d["t"], d["imp"], NOW, 3600.0, 0.0, 0.0), d["alive"], True,
                                -np.inf, scratch, out)
            return out[0].copy()
    elif method.startswith(("codes", "sim_codes")):
        kernel = kscan.hybrid_scan_topk_parallel if threads > 1 else kscan.hybrid_scan_topk_serial
        sim = method.startswith("sim")

        def run():
            q = next_query()
            args = similarity_arguments(d) if sim else hybrid_arguments(d, q)
            kernel(q, d["enc"], d["vectors"], *args, (*out, stats))
            work.append(stats.copy())
            return out[0].copy()
    else:
        index = faiss.IndexFlatIP(DIM)
        index.add(d["vectors"])

        def run():
            return index.search(next_query()[None, :], TOP_K)[1][0]

    rounds = (15 if n <= 100_000 else 7) if bench_on else 1
    before = faiss.omp_get_max_threads()
    try:
        faiss.omp_set_num_threads(threads)
        with threadpool_limits(limits=1), numba_threads(threads):
            run()                                          # JIT / first-touch warm-up
            benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=1)
    finally:
        faiss.omp_set_num_threads(before)
        if method.startswith("faiss"):
            del index
    info = dict(n=n, dim=DIM, top_k=TOP_K, method=method, threads=threads)
    if work:
        w = np.array(work)
        info.update(scored_exactly=float(np.median(w[:, 0])), flagged=float(np.median(w[:, 2])),
                    refined=float(np.median(w[:, 3])),
                    candidate_fraction=float(np.median(w[:, 0])) / n)
        # timing the right thing: the codes result equals the exact path (one query)
        q = qs[0]
        args = similarity_arguments(d) if method.startswith("sim") else hybrid_arguments(d, q)
        got = tuple(np.empty(TOP_K, dt) for dt in (np.int64, np.float32, np.float32))
        want = tuple(np.empty(TOP_K, dt) for dt in (np.int64, np.float32, np.float32))
        kscan.hybrid_scan_topk_serial(q, d["enc"], d["vectors"], *args, (*got, stats))
        kscan.hybrid_exact_topk(q, d["vectors"], *args, want)
        for g, w_ in zip(got, want):
            np.testing.assert_array_equal(g, w_)
        info.update(equals_exact_path=True)
    benchmark.extra_info.update(info)


def hybrid_table(sizes, rounds=9):
    """Same-run medians of every hybrid method: wall and the calling thread's CPU time (ms).

    The CPU column is the stable one on a shared machine: it leaves out the waits for a core
    (for 2 threads it counts the calling thread only).
    """
    rows = []
    for n in sizes:
        hybrid_dataset.cache_clear()
        d = hybrid_dataset(n)
        qs, turn = d["queries"], [0]

        def next_query():
            turn[0] = (turn[0] + 1) % len(qs)
            return qs[turn[0]]
        out = (np.empty(TOP_K, np.int64), np.empty(TOP_K, np.float32), np.empty(TOP_K, np.float32))
        stats = np.zeros(4, np.int64)
        lex = np.zeros((2, n))
        for j in range(2):
            lex[j, d["sparse"][j][0]] = d["sparse"][j][1]
        boost = np.zeros(n, np.float32)
        boost[d["sparse"][2][0]] = 1.0
        scratch = np.empty(n, np.float32)
        index = faiss.IndexFlatIP(DIM)
        index.add(d["vectors"])

        def codes(kernel, sim):
            def run():
                q = next_query()
                args = similarity_arguments(d) if sim else hybrid_arguments(d, q)
                kernel(q, d["enc"], d["vectors"], *args, (*out, stats))
            return run
        cases = [("f32_ctx", 1, lambda: khybrid.hybrid_topk(
                      next_query(), d["ctx"], HYBRID_W["w_ctx"],
                      (lex, np.array([HYBRID_W["w_lex"], HYBRID_W["w_lex_ctx"]]), boost,
                       HYBRID_W["w_speaker"]), (d["t"], d["imp"], NOW, 3600.0, 0.0, 0.0),
                      d["alive"], True, -np.inf, scratch, out)),
                 ("codes", 1, codes(kscan.hybrid_scan_topk_serial, False)),
                 ("codes", 2, codes(kscan.hybrid_scan_topk_parallel, False)),
                 ("sim_codes", 1, codes(kscan.hybrid_scan_topk_serial, True)),
                 ("sim_codes", 2, codes(kscan.hybrid_scan_topk_parallel, True)),
                 ("faiss", 1, lambda: index.search(next_query()[None, :], TOP_K)),
                 ("faiss", 2, lambda: index.search(next_query()[None, :], TOP_K))]
        for name, threads, run in cases:
            before = faiss.omp_get_max_threads()
            try:
                faiss.omp_set_num_threads(threads)
                with threadpool_limits(limits=1), numba_threads(threads):
                    run()
                    wall, cpu = [], []
                    for _ in range(rounds):
                        t0, c0 = time.perf_counter(), time.thread_time()
                        run()
                        cpu.append(time.thread_time() - c0)
                        wall.append(time.perf_counter() - t0)
            finally:
                faiss.omp_set_num_threads(before)
            rows.append((n, name, threads, 1e3 * float(np.median(wall)),
                         1e3 * float(np.median(cpu)), int(stats[0]) if "codes" in name else None))
            print("| %.0e | %s | %d | %.1f | %.1f | %s |" % rows[-1], flush=True)
        del index
    return rows


def test_hybrid_table_runs():
    # the script's table (below) runs as a smoke test, so it cannot rot
    rows = hybrid_table([SMOKE_N], rounds=1)
    assert [(r[1], r[2]) for r in rows] == [("f32_ctx", 1), ("codes", 1), ("codes", 2),
                                            ("sim_codes", 1), ("sim_codes", 2), ("faiss", 1),
                                            ("faiss", 2)]
    assert all(r[3] > 0 and r[4] >= 0 for r in rows)


if __name__ == "__main__":   # python -m bench.test_bench_kernels 1e5 1e6
    import sys

    print("| n | method | threads | wall ms | thread CPU ms | rows scored exactly |")
    hybrid_table([int(float(a)) for a in sys.argv[1:]] or [100_000])
