"""One ``delete_many`` of 32 keys vs 32 ``delete`` calls on a disk store ("flush", "fsync"):
one log commit (one write, one fdatasync with "fsync") instead of one per key, and what it
saves SemanticMemory's journal trim at each consolidation.

Both sides alternate in the same run (the ratio is the figure, never an absolute bound);
smoke mode runs 2 rounds, ``--benchmark-enable`` 40. Figures land in ``benchmark.extra_info``
(printed with ``-s``).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem, SemanticMemory
from memcore import agent as _agent
from bench.test_bench_long import report

N = 32


def _alternate(rounds: int, run) -> dict[str, float]:
    """Median seconds of ``run(which, r)`` for "loop" and "batch", alternating their order."""
    ts: dict[str, list[float]] = {"loop": [], "batch": []}
    for r in range(rounds):
        for which in ("loop", "batch") if r % 2 else ("batch", "loop"):
            ts[which].append(run(which, r))
    return {k: float(np.median(v)) for k, v in ts.items()}


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_delete_many_vs_deletes(benchmark, tmp_path, bench_enabled, durability):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=64), durability=durability)
    s.put_many("ns", [MemoryItem(f"base{i}", f"base memory {i}") for i in range(1000)])

    def run(which, r):
        keys = [f"{which}{r}-{i}" for i in range(N)]
        s.put_many("ns", [MemoryItem(k, f"text {k}") for k in keys])
        t0 = time.perf_counter()
        if which == "loop":
            gone = sum(s.delete("ns", k) for k in keys)
        else:
            gone = s.delete_many("ns", keys)
        took = time.perf_counter() - t0
        assert gone == N
        return took

    med = _alternate(40 if bench_enabled else 2, run)
    benchmark.pedantic(run, args=("batch", -1), rounds=1, iterations=1)
    s.close()
    report(benchmark, durability=durability, keys=N, deletes_ms=med["loop"] * 1e3,
           delete_many_ms=med["batch"] * 1e3, ratio=med["loop"] / med["batch"])


def _trim_by_delete(self) -> None:
    """SemanticMemory._trim_journal as it was before delete_many: one delete per key."""
    for jns in self.long.namespaces((_agent.SHORT_JOURNAL,) + self.prefix):
        held = set(self.short.keys(jns[1:]))
        for k in self.long.keys(jns):
            if k not in held:
                self.long.delete(jns, k)


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_journal_trim(benchmark, tmp_path, bench_enabled, durability):
    mem = SemanticMemory(tmp_path / "m", HashingEmbedder(dim=64), consolidate_every=0,
                         durability=durability)
    journal = (_agent.SHORT_JOURNAL,) + mem.prefix
    trims: dict[str, list[float]] = {"loop": [], "batch": []}
    new_trim = type(mem)._trim_journal

    def run(which, r):
        for i in range(N):
            mem.store(f"round {r} {which} sighting {i} of the red door", "noted",
                      mode="patrol", importance=0.9)
        trim = _trim_by_delete if which == "loop" else new_trim

        def timed(self):
            t1 = time.perf_counter()
            trim(self)
            trims[which].append(time.perf_counter() - t1)

        mem._trim_journal = timed.__get__(mem)
        t0 = time.perf_counter()
        mem._consolidate_now()
        took = time.perf_counter() - t0
        assert sum(mem.long.count(j) for j in mem.long.namespaces(journal)) == 0
        return took

    med = _alternate(40 if bench_enabled else 2, run)
    benchmark.pedantic(run, args=("batch", -1), rounds=1, iterations=1)
    mem.close()
    tl, tb = (float(np.median(trims[w][:-1] if w == "batch" else trims[w])) for w in trims)
    report(benchmark, durability=durability, promoted=N, consolidate_loop_ms=med["loop"] * 1e3,
           consolidate_batch_ms=med["batch"] * 1e3, trim_loop_ms=tl * 1e3,
           trim_batch_ms=tb * 1e3, trim_ratio=tl / tb)
