"""The LangGraph store: MemcoreStore.search vs LangGraph's InMemoryStore.search, same run.

Smoke mode (default) runs at 1,000 items; ``--benchmark-enable`` at 1e4 (the issue's size).
Both stores hold the same items in one namespace, embedded by the same HashingEmbedder
(384 dims), and answer the same queries (limit 10), without and with a metadata filter;
memcore's own ``LongTermMemory.search`` is timed too (the adapter's overhead). Figures land
in ``benchmark.extra_info`` (printed with ``-s``). Needs the langgraph extra (skips without
it, fails under CI=true).
"""

from __future__ import annotations

import time

import numpy as np

from tests.extras import require as require_extra

require_extra("langgraph.store.memory", "langgraph")

from langgraph.store.base import PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from memcore import HashingEmbedder, LongTermMemory  # noqa: E402
from memcore.integrations.langgraph import MemcoreStore  # noqa: E402

DIM = 384
WORDS = "robot dock battery kitchen red door noon dog paint hall lab charger map patrol".split()


def p50(fn, queries) -> float:
    ts = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3)


def test_search_vs_langgraph_in_memory_store(benchmark, bench_enabled):
    n = 10_000 if bench_enabled else 1_000
    emb = HashingEmbedder(dim=DIM)
    rng = np.random.default_rng(0)
    docs = [(f"k{i}", {"text": " ".join(rng.choice(WORDS, 6)) + f" note {i}",
                       "room": ["a", "b", "c"][i % 3]}) for i in range(n)]
    ours = MemcoreStore(LongTermMemory(embedder=emb), index={"fields": ["text"]})
    peer = InMemoryStore(index={"dims": DIM, "fields": ["text"],
                                "embed": lambda texts: emb.encode(list(texts)).tolist()})
    for store in (ours, peer):
        for s in range(0, n, 1000):
            store.batch([PutOp(("u", "ann"), k, v) for k, v in docs[s:s + 1000]])
    queries = [" ".join(rng.choice(WORDS, 3)) for _ in range(20)]
    ours.search(("u",), query=queries[0])                        # warm up the kernels
    flt = {"room": "a"}
    info = {
        "n": n,
        "memcore_direct_p50_ms": p50(lambda q: ours.store.search(("u", "ann"), q, top_k=10,
                                                                  touch=False), queries),
        "memcore_store_p50_ms": p50(lambda q: ours.search(("u",), query=q, limit=10), queries),
        "in_memory_store_p50_ms": p50(lambda q: peer.search(("u",), query=q, limit=10),
                                      queries),
        "memcore_store_filter_p50_ms": p50(lambda q: ours.search(("u",), query=q, limit=10,
                                                                 filter=flt), queries),
        "in_memory_store_filter_p50_ms": p50(lambda q: peer.search(("u",), query=q, limit=10,
                                                                   filter=flt), queries),
    }
    info["memcore_over_in_memory_p50"] = (info["memcore_store_p50_ms"]
                                          / info["in_memory_store_p50_ms"])
    same = [r.key for r in ours.search(("u",), query=queries[1], limit=10)]
    want = [r.key for r in peer.search(("u",), query=queries[1], limit=10)]
    info["top10_overlap_with_peer"] = len(set(same) & set(want)) / 10
    benchmark.extra_info.update(info)
    print(" ".join(f"{k}={v:.4g}" for k, v in info.items()))
    benchmark.pedantic(ours.search, args=(("u",),), kwargs={"query": queries[0], "limit": 10},
                       rounds=10, iterations=1)
