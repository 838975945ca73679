"""The hybrid index is part of every write: a store with hybrid weights keeps it current in
put/put_many/deletes, a writer saves an index it built at once, and a process killed after a
bulk put_many (no search ever run) leaves an index the next process restores -- never
rebuilds -- and that ranks exactly as one rebuilt from the rows. Real processes killed with
SIGKILL, real files; no mocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memcore import HashingEmbedder, HybridWeights, LongTermMemory, MemoryItem, storage

DIM = 16
T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[1]
HW = HybridWeights.no_model()
NS = ("robot", "log")
QUERIES = ["where is the red door", "Ann charged the battery", "kettle in the kitchen",
           "what did Bob see in the hallway", "door 17"]
WORDS = ["red door", "kitchen kettle", "charging dock", "hallway lamp", "battery level",
         "blue chair", "garden hose"]


def clock():
    return T0


def open_store(root, **kw):
    return LongTermMemory(root, HashingEmbedder(dim=DIM), clock=clock, **kw)


def items(lo, hi, tag=""):
    """Memories ``k<lo>``..``k<hi-1>`` with speaker/episode metadata (what the index reads)."""
    return [MemoryItem(key=f"k{i}", text=f"{['Ann', 'Bob'][i % 2]} saw the "
                       f"{WORDS[i % len(WORDS)]} {i} {tag}".strip(),
                       importance=(i % 10) / 10,
                       metadata={"speaker": ["Ann", "Bob"][i % 2], "episode": i // 6})
            for i in range(lo, hi)]


def ranked(store):
    return [[(h.key, h.score) for h in store.search(NS, q, top_k=8, touch=False)]
            for q in QUERIES]


def saved_structures(root) -> set:
    """The index structures the namespace header's last checkpoint names (read from disk)."""
    ns_dir = next((Path(root) / "ns.0").iterdir())
    with open(ns_dir / storage.NAMESPACE_HEADER) as f:
        entry = json.load(f).get("index")
    return {s for s, _ in storage.index_structures(entry)}


def check_restored_like_rebuilt(root, live: set):
    """Open ``root`` read-only (a fresh store object): its hybrid index is restored at open,
    before any search, holds exactly the live rows and ranks exactly as the index rebuilt
    from the rows (keys and scores)."""
    assert HW.structure() in saved_structures(root)
    with open_store(root, hybrid=HW, read_only=True) as s:
        t = s._tables[NS]
        assert HW.structure() in t.recall.indexes          # restored: nothing to build
        assert len(t.recall.indexes[HW.structure()]) == t.live == len(live)
        assert set(t.keys) == live
        restored = ranked(s)
        t.recall.clear()                                    # the next search rebuilds
        rebuilt = ranked(s)
        assert HW.structure() in t.recall.indexes
    assert restored == rebuilt
    assert any(restored)


def run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=300)


PUT_MANY_THEN_KILL = """
    import os, signal, sys
    from memcore import HashingEmbedder, HybridWeights, LongTermMemory
    from tests.test_index_upkeep import NS, T0, clock, items
    root, n, deletes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    s = LongTermMemory(root, HashingEmbedder(dim=16), clock=clock,
                       hybrid=HybridWeights.no_model())
    s.put_many(NS, items(0, n))
    if deletes:
        s.delete_many(NS, [f"k{i}" for i in range(0, n, 7)])
        s.put_many(NS, items(3, 9, tag="again"))              # replaced keys
        s.put(NS, "k1", "Ann put the kettle by the red door",
              metadata={"speaker": "Ann", "episode": 0})
    print("acknowledged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("deletes", [0, 1])
def test_a_bulk_put_many_killed_before_any_search_leaves_an_index_the_next_process_restores(
        tmp_path, deletes):
    root = tmp_path / "m"
    n = 400
    out = run_child(PUT_MANY_THEN_KILL, str(root), str(n), str(deletes))
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    assert "acknowledged" in out.stdout
    live = {f"k{i}" for i in range(n)}
    if deletes:
        live -= {f"k{i}" for i in range(0, n, 7)}
        live |= {f"k{i}" for i in range(3, 9)} | {"k1"}
    check_restored_like_rebuilt(root, live)
    with open_store(root, hybrid=HW, read_only=True) as s:
        if deletes:
            assert s.get(NS, "k3").text.endswith("again")
            assert s.get(NS, "k1").text == "Ann put the kettle by the red door"
            assert s.get(NS, "k14") is None


KILL_ROUNDS = """
    import json, os, random, sys
    from memcore import HashingEmbedder, HybridWeights, LongTermMemory
    from tests.kill_driver import killed_round
    from tests.test_index_upkeep import NS, clock, items
    root, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def child(w):
        s = LongTermMemory(root, HashingEmbedder(dim=16), clock=clock,
                           hybrid=HybridWeights.no_model())
        lo = s.stats()[NS]["rows"] if NS in s.stats() else 0
        os.write(w, b"R\\n")
        while True:                # batches of new keys; every third key of the batch dies
            s.put_many(NS, items(lo, lo + 40))
            s.delete_many(NS, [f"k{i}" for i in range(lo, lo + 40, 3)])
            os.write(w, f"A {lo}\\n".encode())
            lo += 40                                  # rows used: one per new key

    rnd = random.Random(seed)
    acked = []
    for _ in range(rounds):
        out = killed_round(child, rnd.uniform(0.05, 0.6))
        acked += [int(x.split()[1]) for x in out.decode().splitlines() if x.startswith("A ")]
    print(json.dumps(sorted(set(acked))))
"""


def test_sigkill_rounds_lose_no_acknowledged_write_and_the_index_ranks_like_a_rebuild(tmp_path,
                                                                                      format2):
    # format 2 by design: the saved index is read from the namespace directory's header, and
    # stats()['rows'] counts rows used (a promotion out of the pack compacts) (the pack's own:
    # tests/test_pack.py)
    root = tmp_path / "m"
    out = run_child(KILL_ROUNDS, str(root), "4", "25")
    assert out.returncode == 0, out.stderr[-3000:]
    acked = json.loads(out.stdout.strip().splitlines()[-1])
    assert acked, "no batch was acknowledged"
    with open_store(root, hybrid=HW, read_only=True) as s:
        live = set(s._tables[NS].keys)
    for lo in acked:                       # every acknowledged batch, its deletes included
        want = {f"k{i}" for i in range(lo, lo + 40)} - {f"k{i}" for i in range(lo, lo + 40, 3)}
        assert want <= live
        assert not {f"k{i}" for i in range(lo, lo + 40, 3)} & live
    check_restored_like_rebuilt(root, live)


def test_puts_and_deletes_keep_the_saved_index_consistent_across_checkpoints(tmp_path, format2):
    # format 2 by design: the saved index is read from the namespace directory's header (the pack's
    # own: tests/test_pack.py)
    root = tmp_path / "m"
    with open_store(root, hybrid=HW) as s:
        s.put_many(NS, items(0, 120))
        assert HW.structure() in saved_structures(root)       # saved with the first write
        for i in range(120, 130):
            s.put(NS, f"k{i}", f"Bob moved the blue chair {i}",
                  metadata={"speaker": "Bob", "episode": 99})
        s.delete_many(NS, [f"k{i}" for i in range(0, 120, 5)])
        s.flush()                                              # a checkpoint after deletes
        s.delete(NS, "k1")                                     # and a tail past it
        s.put(NS, "k2", "Ann replaced the red door", metadata={"speaker": "Ann"})
        live = set(s._tables[NS].keys)
        before = ranked(s)
        s._release()                                           # what a SIGKILL leaves
        s._closed = True
    check_restored_like_rebuilt(root, live)
    with open_store(root, hybrid=HW, read_only=True) as s:
        assert ranked(s) == before


def test_an_index_built_by_a_search_is_saved_by_a_writer_kept_in_ram_by_a_reader(tmp_path,
                                                                                 format2):
    # format 2 by design: the saved index is read from the namespace directory's header (the pack's
    # own: tests/test_pack.py)
    root = tmp_path / "m"
    with open_store(root) as s:   # no hybrid
        s.put_many(NS, items(0, 200))
        assert s._tables[NS].recall is None                   # similarity: nothing built
    assert saved_structures(root) == set()
    with open_store(root, hybrid=HW, read_only=True) as r:
        assert r._tables[NS].recall is None
        ranked(r)                                              # built in RAM only
        assert HW.structure() in r._tables[NS].recall.indexes
    assert saved_structures(root) == set()
    with open_store(root) as w:
        w.search(NS, QUERIES[0], hybrid=HW, touch=False)
        assert HW.structure() in saved_structures(root)       # saved at once, not at close
        w._release()
        w._closed = True
    check_restored_like_rebuilt(root, set(f"k{i}" for i in range(200)))


def test_warmup_builds_and_saves_missing_indexes_with_the_cli(tmp_path, format2):
    # format 2 by design: the saved index is read from the namespace directory's header (the pack's
    # own: tests/test_pack.py)
    root = tmp_path / "m"
    with open_store(root) as s:
        s.put_many(NS, items(0, 150))
        s.put_many(("other",), items(0, 10))
    out = subprocess.run([sys.executable, "-m", "memcore", "warmup", str(root), "--json"],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == {"indexed": 160, "store": str(root)}
    check_restored_like_rebuilt(root, set(f"k{i}" for i in range(150)))
    with open_store(root) as s:
        assert s.warmup(HW, progress=False) == 0


def test_an_in_memory_store_with_hybrid_weights_indexes_at_write_time():
    s = LongTermMemory(embedder=HashingEmbedder(dim=DIM), clock=clock, hybrid=HW)
    s.put_many(NS, items(0, 90))
    s.delete_many(NS, ["k4", "k5"])
    t = s._tables[NS]
    assert len(t.recall.indexes[HW.structure()]) == 88        # built and kept by the writes
    kept = ranked(s)
    t.recall.clear()
    assert ranked(s) == kept


def test_semantic_memory_indexes_its_long_tier_at_write_time_but_not_its_journal(tmp_path):
    from memcore import SemanticMemory
    from memcore.agent import SHORT_JOURNAL

    mem = SemanticMemory(path=tmp_path / "m", embedder=HashingEmbedder(dim=DIM), warmup=False,
                         consolidate_every=4)
    for i in range(10):
        mem.store(f"the red kettle {i} is in room {i % 3}", f"noted {i}", "chat")
    mem.flush()
    ns = mem.namespace_of("chat")
    long = mem.long._tables
    assert HW.structure() == mem.hybrid.structure()
    assert mem.hybrid.structure() in long[ns].recall.indexes     # promoted: kept at write
    assert long[(SHORT_JOURNAL,) + ns].recall is None            # journal: never searched
    mem.close()
