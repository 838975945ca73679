"""What verified reads cost (issue 15): the full scrub (``verify()``), the open-time validation
of the numeric columns, and the vector CRC each returned row gets before it is served.

Smoke mode (default) runs at 2,000 items; ``--benchmark-enable`` at the issue's size, 1e5
items of 384 dims. Figures land in ``benchmark.extra_info`` (printed with ``-s``); the CRC
check per hit is compared in the same run with the search it guards (a ratio, never an
absolute bound).
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from memcore import HashingEmbedder, LongTermMemory, storage
from bench.test_bench_long import DIM, T0, data, filled, n_items, report  # noqa: F401


def _median(fn, rounds=5):
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def test_verify_scrub_cost(benchmark, filled):
    root, v, n, _ = filled
    with LongTermMemory.open(root, HashingEmbedder(dim=DIM)) as s:
        report_ = s.verify()
        assert report_[("bench",)]["errors"] == [] and report_[("bench",)]["bad_rows"] == []
        scrub = _median(s.verify, 3)
        t = s._tables[("bench",)]
        stats = _median(lambda: storage.invalid_stats(t.columns, t.rows))
        crcs = _median(lambda: [zlib.crc32(row) for row in t.columns.vectors[:n]], 3)
        q = v[:32]
        search = _median(lambda: [s.search("bench", "x", query_vector=x, top_k=10, touch=False)
                                  for x in q], 3) / len(q)
        hit = _median(lambda: [t.record(r) for r in range(10)], 20)        # pread + CRC
        crc10 = _median(lambda: [zlib.crc32(t.columns.vectors[r]) for r in range(10)], 20)
        benchmark.pedantic(s.verify, rounds=1, iterations=1)
    per = 1e5 / n
    report(benchmark, n=n, verify_s=scrub, verify_s_per_1e5=scrub * per,
           vector_crcs_s_per_1e5=crcs * per, open_stats_check_ms_per_1e5=stats * per * 1e3,
           search_top10_ms=search * 1e3, record_reads_top10_ms=hit * 1e3,
           crc_top10_us=crc10 * 1e6, crc_share_of_search=crc10 / search)
