"""Fused recall kernel vs FAISS + NumPy and NumPy-only pipelines (issue 3).

dim 384, n in {1e3, 1e4, 1e5, 1e6}, top_k 10, one query per call:

- ``fused_serial`` / ``fused_parallel``: :func:`memcore.kernels.fused_topk_serial` / ``_parallel``
  (one pass: dot, decay, threshold, alive, heap);
- ``faiss_numpy``: ``faiss.IndexFlatIP.search`` over all rows + NumPy decay + ``argpartition``;
- ``numpy``: ``vectors @ query`` + NumPy decay + ``argpartition``.

Everything but ``fused_parallel`` (numba's default threads, all cores) runs single-threaded (FAISS OpenMP and BLAS pinned to 1 inside
try/finally). ``extra_info`` holds items/s, GB/s scanned, the fraction of the single-core read
bandwidth (measured here, enabled mode only) and recall@k against the NumPy pipeline.

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

from memcore.kernels import fused_topk_parallel, fused_topk_serial
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
    args = (query, vectors, t, imp, alive, NOW, W.half_life, W.w_similarity, W.w_recency,
            W.w_importance, THRESHOLD, *out)
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
