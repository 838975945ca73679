"""Embedder speed: MiniLM tick latency and batch throughput; hashing throughput vs pure Python.

Smoke mode (default, ``--benchmark-disable``) runs each once on a handful of texts. Real numbers:
``python -m pytest bench/test_bench_embedders.py --benchmark-enable``; throughput lands in
``extra_info["texts_per_s"]`` (from the median round), the hashing speed-up over a pure-Python
implementation of the classic recipe in ``extra_info["speedup_vs_pure_python"]``.
"""

from __future__ import annotations

import re
import statistics
import time

import numba
import numpy as np
import pytest

from bench.datasets import locomo_turns
from memcore.embedders import HashingEmbedder, MiniLMEmbedder

#: A tick-sized text: 30 word pieces including [CLS] and [SEP].
TICK_TEXT = ("The robot saw that the kitchen door was open again, so it reminded Maria to buy "
             "fresh milk, eggs and bread at the store tomorrow.")


@pytest.fixture
def full_run(benchmark) -> bool:
    """True under ``--benchmark-enable`` (pytest-benchmark's own view of the two flags)."""
    return benchmark.enabled


def _texts_per_s(benchmark, n_texts: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None and stats.stats.median > 0:
        benchmark.extra_info["texts_per_s"] = round(n_texts / stats.stats.median)
    benchmark.extra_info["n_texts"] = n_texts


_NON_TOKEN_CHARS = re.compile(r"[^a-z0-9 ]")


def pure_python_classic(texts, dim=384):
    """The classic hashing recipe in plain, idiomatic Python: the baseline the kernel is compared to.

    The bucket sums live in a dict (a text touches ~20 of the dim buckets), as a Python
    programmer would write it; a dense ``[0.0] * dim`` list per text is ~2.4x slower, all of
    it spent on the untouched buckets, and would flatter the kernel.
    """
    out = np.zeros((len(texts), dim), np.float32)
    for i, text in enumerate(texts):
        acc = {}
        for tok in _NON_TOKEN_CHARS.sub(" ", text.lower()).split():
            if len(tok) < 2:
                continue
            h = 2166136261
            for ch in tok:
                h = ((h ^ ord(ch)) * 16777619) & 0xFFFFFFFF
            j = h % dim
            acc[j] = acc.get(j, 0.0) + (1.0 if ord(tok[0]) % 2 == 0 else -1.0)
        norm = sum(x * x for x in acc.values()) ** 0.5
        if norm:
            row = out[i]
            for j, x in acc.items():
                row[j] = x / norm
    return out


def _median_seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# --------------------------------------------------------------------------------------------
# MiniLM
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[1, 2], ids=lambda n: f"threads={n}")
def minilm(request):
    # The packaged int8 model with the text cache off: these numbers are the model's own, the
    # baseline the faster variants are measured against.
    return MiniLMEmbedder(intra_op_num_threads=request.param, variant="packaged",
                          cache_size=0).load()


def test_minilm_tick_latency(benchmark, minilm, full_run):
    minilm.encode([TICK_TEXT])     # warm-up
    benchmark.extra_info["word_pieces"] = len(minilm._tokenizer.encode(TICK_TEXT).ids)
    benchmark.extra_info["intra_op_num_threads"] = minilm.intra_op_num_threads
    out = benchmark.pedantic(minilm.encode, args=([TICK_TEXT],),
                             rounds=300 if full_run else 1,
                             warmup_rounds=5 if full_run else 0)
    assert out.shape == (1, 384)


@pytest.mark.data("locomo")
@pytest.mark.parametrize("batch_size", [32])
def test_minilm_throughput_locomo(benchmark, minilm, full_run, batch_size):
    texts = locomo_turns()[:1024 if full_run else 16]
    minilm.encode(texts[:batch_size], batch_size=batch_size)
    benchmark.extra_info["intra_op_num_threads"] = minilm.intra_op_num_threads
    out = benchmark.pedantic(minilm.encode, args=(texts,), kwargs={"batch_size": batch_size},
                             rounds=3 if full_run else 1)
    assert out.shape == (len(texts), 384)
    _texts_per_s(benchmark, len(texts))


# --------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------

@pytest.mark.data("locomo")
@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "parallel"])
@pytest.mark.parametrize("mode", ["classic", "unicode"])
def test_hashing_throughput_locomo(benchmark, full_run, mode, parallel):
    turns = locomo_turns()
    texts = turns * 10 if full_run else turns[:200]       # 34k texts when enabled
    emb = HashingEmbedder(mode=mode, parallel=parallel).load()
    benchmark.extra_info.update(mode=mode, parallel=parallel,
                                numba_threads=numba.get_num_threads())
    out = benchmark.pedantic(emb.encode, args=(texts,), kwargs={"batch_size": len(texts)},
                             rounds=15 if full_run else 1, warmup_rounds=1)
    assert out.shape == (len(texts), 384)
    _texts_per_s(benchmark, len(texts))
    if mode == "classic":
        # The pure-Python baseline, timed in the same run on the same texts.
        base_texts = turns if full_run else turns[:50]
        np.testing.assert_array_equal(pure_python_classic(base_texts[:50]), out[:50])
        py_s = _median_seconds(lambda: pure_python_classic(base_texts), 3 if full_run else 1)
        py_rate = len(base_texts) / py_s
        benchmark.extra_info["pure_python_texts_per_s"] = round(py_rate)
        if "texts_per_s" in benchmark.extra_info:
            benchmark.extra_info["speedup_vs_pure_python"] = round(
                benchmark.extra_info["texts_per_s"] / py_rate, 1)


def test_hashing_tick_latency(benchmark, full_run):
    emb = HashingEmbedder().load()
    out = benchmark.pedantic(emb.encode, args=([TICK_TEXT],),
                             rounds=2000 if full_run else 1, warmup_rounds=10)
    assert out.shape == (1, 384)
