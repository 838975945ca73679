"""Time to live: expired memories are invisible to get/search/count/keys/namespaces, reads
may refresh the time to live, sweep()/compact() reclaim them, and on disk the expiry persists
(a store without the TTL column, e.g. the format-2 fixture, opens with nothing expiring).
Every test runs under an injected clock."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from memcore import (
    HashingEmbedder,
    LongTermMemory,
    MemoryItem,
    PromotionPolicy,
    ShortTermMemory,
    TwoTierMemory,
)
from memcore.errors import InvalidArgumentError, InvalidArgumentTypeError
from store_helpers import STORE_CASES, FakeClock, make_store

FIXTURE = Path(__file__).parent / "fixtures" / "ltm-format-v2" / "store"


def visible(store, ns="r"):
    return sorted(store.keys(ns))


@pytest.fixture(params=STORE_CASES, ids=lambda c: c.id)
def case(request):
    return request.param


def test_expired_memories_are_invisible_everywhere(case):
    clock = FakeClock()
    store = make_store(case, clock)
    store.put("r", "short", "the red door is locked", ttl=10)
    store.put("r", "long", "the red door leads to the dock", ttl=100)
    store.put("r", "keep", "the red door is painted")
    store.put("gone", "k", "a memory that expires", ttl=5)
    m = store.get("r", "short")
    assert m.ttl == 10 and m.expires_at == clock() + 10
    assert store.get("r", "keep").expires_at is None and store.get("r", "keep").ttl is None
    clock.advance(9.999)
    assert visible(store) == ["keep", "long", "short"] and store.count("r") == 3
    clock.advance(0.001)                      # expires_at <= now: expired
    assert store.get("r", "short") is None and ("r", "short") not in store
    assert visible(store) == ["keep", "long"] and store.count("r") == 2
    assert ("gone",) not in store.namespaces() and store.count("gone") == 0
    hits = store.search("r", "red door", top_k=3)
    assert sorted(h.key for h in hits) == ["keep", "long"]     # top_k of what is left
    if case.vectors:
        assert store.vector("r", "short") is None
    assert store.touch("r", ["short", "keep"]) == 1
    assert store.delete("r", "short") is False                # expired: already gone
    clock.advance(100)
    assert visible(store) == ["keep"]


def test_search_masks_expired_inside_ranking_not_after(case):
    clock = FakeClock()
    store = make_store(case, clock)
    for i in range(8):                         # the best matches expire ...
        store.put("r", f"best{i}", "red door robot", ttl=1)
    for i in range(3):                         # ... these remain
        store.put("r", f"other{i}", "red door in the hall")
    clock.advance(2)
    hits = store.search("r", "red door robot", top_k=3)
    assert sorted(h.key for h in hits) == ["other0", "other1", "other2"]


def test_refresh_ttl_on_get_and_search(case):
    clock = FakeClock()
    store = make_store(case, clock)
    store.put("r", "a", "red door", ttl=10)
    store.put("r", "b", "blue door", ttl=10)
    clock.advance(8)
    assert store.get("r", "a").expires_at == clock() + 2                  # default: no refresh
    assert store.get("r", "a", refresh_ttl=True).expires_at == clock() + 10
    hits = store.search("r", "blue door", top_k=1, touch=False, refresh_ttl=True)
    assert [h.key for h in hits] == ["b"]
    assert store.get("r", "b").access_count == 0                           # touch=False kept
    clock.advance(9)
    assert visible(store) == ["a", "b"]
    clock.advance(1)
    assert visible(store) == []


def test_reput_replaces_the_time_to_live(case):
    clock = FakeClock()
    store = make_store(case, clock)
    store.put("r", "k", "red door", ttl=10)
    created = clock()
    clock.advance(5)
    store.put("r", "k", "red door, repainted")             # no ttl: never expires now
    assert store.get("r", "k").expires_at is None and store.get("r", "k").created_at == created
    store.put("r", "k", "red door again", ttl=10)
    clock.advance(10)
    assert store.get("r", "k") is None
    m = store.put("r", "k", "a new red door")               # after expiry: a new memory
    assert m.created_at == clock() and m.access_count == 0


def test_store_default_ttl_and_refresh():
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    stores = [ShortTermMemory(capacity=10, embedder=emb, clock=clock, ttl=60, refresh_ttl=True),
              LongTermMemory(embedder=emb, clock=clock, ttl=60, refresh_ttl=True),
              TwoTierMemory(ShortTermMemory(capacity=2, embedder=emb, clock=clock),
                            LongTermMemory(embedder=emb, clock=clock),
                            PromotionPolicy(min_importance=0.0), ttl=60, refresh_ttl=True)]
    for store in stores:
        store.put_many("r", [MemoryItem("a", "red door"), MemoryItem("b", "blue door"),
                             MemoryItem("c", "green door")])
        store.put("r", "forever", "a door that stays", ttl=math.inf)
        clock.advance(50)
        store.get("r", "a")                                  # refresh_ttl=True by default
        store.search("r", "blue door", top_k=1)
        clock.advance(20)
        assert visible(store) == ["a", "b", "forever"], store
        clock.advance(-70)


def test_two_tier_promotion_keeps_the_expiry():
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    mem = TwoTierMemory(ShortTermMemory(capacity=100, embedder=emb, clock=clock),
                        LongTermMemory(embedder=emb, clock=clock),
                        PromotionPolicy(min_importance=0.5))
    mem.put("r", "k", "the dock is in the hallway", importance=0.9, ttl=30)
    assert mem.consolidate() == 1
    assert mem.long.get("r", "k").expires_at == clock() + 30
    clock.advance(30)
    assert mem.get("r", "k") is None and mem.search("r", "dock") == []


def test_sweep_and_compact_reclaim_expired(tmp_path):
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    for path in (None, tmp_path / "mem"):
        ltm = LongTermMemory(path, emb, clock=clock)
        ltm.put_many("r", [MemoryItem(f"k{i}", f"memory {i}") for i in range(6)], ttl=10)
        ltm.put("r", "stay", "memory that stays")
        clock.advance(10)
        assert ltm.stats()[("r",)] == {"live": 7, "rows": 7}
        assert ltm.compact() == 6                    # swept first, then the rows dropped
        assert ltm.stats()[("r",)] == {"live": 1, "rows": 1} and visible(ltm) == ["stay"]
        assert ltm.sweep() == 0
        ltm.close()
    stm = ShortTermMemory(capacity=10, clock=clock)
    stm.put("r", "a", "red door", ttl=1)
    clock.advance(1)
    assert stm.sweep("r") == 1 and stm.namespaces() == []


def test_expiry_persists_on_disk(tmp_path):
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    root = tmp_path / "mem"
    with LongTermMemory(root, emb, clock=clock) as ltm:
        ltm.put("r", "a", "red door", ttl=10)
        ltm.put("r", "b", "blue door", ttl=100)
        ltm.put("r", "c", "green door")
        ltm.put_many("s", [MemoryItem(f"k{i}", f"memory {i}") for i in range(100)], ttl=50)
    with LongTermMemory(root, emb, clock=clock) as ltm:        # reopened: same expiries
        assert ltm.get("r", "a").expires_at == clock() + 10 and ltm.get("r", "c").ttl is None
        assert ltm.count("s") == 100
        clock.advance(10)
        assert visible(ltm) == ["b", "c"]
        ltm.get("r", "b", refresh_ttl=True)                     # expires at T+110 now
        ltm.put("r", "d", "white door", ttl=5)                  # a write after a checkpoint
    with LongTermMemory.open(root, emb, clock=clock) as view:   # read-only sees the same
        assert view.get("r", "b").expires_at == clock() + 100
        assert view.get("r", "d").expires_at == clock() + 5
        clock.advance(40)
        assert visible(view) == ["b", "c"] and view.count("s") == 0
    with LongTermMemory(root, emb, clock=clock) as ltm:
        assert ltm.compact() == 102                      # a, d and s swept and dropped
        assert visible(ltm) == ["b", "c"] and ltm.get("r", "b").ttl == 100
        ltm.reindex(HashingEmbedder(dim=16), progress=False)
        emb = HashingEmbedder(dim=16)
    with LongTermMemory(root, emb, clock=clock) as ltm:  # compact and reindex kept the ttl
        assert ltm.get("r", "b").expires_at == 1_700_000_000.0 + 110
        clock.advance(60)
        assert visible(ltm) == ["c"]


def test_a_killed_writer_keeps_acknowledged_expiries(tmp_path):
    """Without close(): the TTL column is written like the others, before the log commit."""
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    root = tmp_path / "mem"
    ltm = LongTermMemory(root, emb, clock=clock)
    ltm.put("r", "a", "red door", ttl=10)
    ltm.put_many("r", [MemoryItem(f"k{i}", f"memory {i}") for i in range(70)], ttl=20)
    ltm._space.root.release()                       # the process "dies": no flush, no checkpoint
    with LongTermMemory(root, emb, clock=clock) as again:
        assert again.get("r", "a").expires_at == clock() + 10
        assert again.get("r", "k69").expires_at == clock() + 20


def test_format_2_fixture_opens_and_takes_a_ttl(tmp_path):
    root = tmp_path / "v2"
    shutil.copytree(FIXTURE, root)
    clock = FakeClock(2_000_000_000.0)
    with LongTermMemory.open(root, read_only=True, clock=clock) as view:
        namespaces = view.namespaces()
        before = {ns: view.count(ns) for ns in namespaces}
        assert namespaces and all(before.values())
        assert all(view.get(ns, k).expires_at is None for ns in namespaces for k in view.keys(ns))
    with LongTermMemory(root, read_only=False, clock=clock) as ltm:
        ns = namespaces[0]
        key = ltm.keys(ns)[0]
        vec = ltm.vector(ns, key)
        ltm.put(ns, "new", "a memory with a time to live", vector=vec, ttl=30)
        assert ltm.count(ns) == before[ns] + 1
    clock.advance(30)
    with LongTermMemory.open(root, clock=clock) as view:
        assert {ns: view.count(ns) for ns in namespaces} == before


@pytest.mark.parametrize("ttl", [0, -1, math.nan, "60", True, -math.inf])
def test_bad_ttl_raises_and_changes_nothing(ttl):
    stm = ShortTermMemory(capacity=5, clock=FakeClock())
    with pytest.raises(InvalidArgumentError):
        stm.put("r", "k", "red door", ttl=ttl)
    with pytest.raises(InvalidArgumentError):
        ShortTermMemory(capacity=5, ttl=ttl)
    assert stm.count("r") == 0
    with pytest.raises(InvalidArgumentTypeError):
        ShortTermMemory(capacity=5, refresh_ttl="yes")


def test_expiry_is_checked_against_the_clock_of_each_call():
    clock = FakeClock()
    stm = ShortTermMemory(capacity=5, embedder=HashingEmbedder(dim=16), clock=clock)
    stm.put("r", "k", "red door", ttl=10)
    clock.advance(-5)                          # a clock that goes back: visible again
    assert stm.get("r", "k") is not None
    clock.advance(15)
    assert stm.get("r", "k") is None and stm.search("r", "red door", top_k=1) == []


def test_export_import_keeps_the_time_to_live(tmp_path):
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    src = LongTermMemory(embedder=emb, clock=clock)
    src.put("r", "a", "red door", ttl=10)
    src.put("r", "b", "blue door")
    path = tmp_path / "mem.jsonl"
    assert src.export_jsonl(path) == 2
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [("ttl" in x, "expires_at" in x) for x in lines] == [(True, True), (False, False)]
    dst = LongTermMemory(embedder=emb, clock=clock)
    assert dst.import_jsonl(path) == 2
    assert dst.get("r", "a").expires_at == clock() + 10 and dst.get("r", "b").ttl is None
    clock.advance(10)
    assert visible(dst) == ["b"]


def test_two_tier_never_promotes_an_expired_memory():
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    mem = TwoTierMemory(ShortTermMemory(capacity=2, embedder=emb, clock=clock),
                        LongTermMemory(embedder=emb, clock=clock),
                        PromotionPolicy(min_importance=0.0))
    mem.put("r", "old", "expires soon", ttl=5)
    mem.put("r", "kept", "stays", ttl=50)
    clock.advance(5)
    mem.put("r", "new", "evicts the oldest")          # "old" is evicted, expired: forgotten
    assert mem.long.stats() == {} and mem.stats()["forgotten"] == 1
    mem.put("r", "gone", "expires too", ttl=1)        # evicts "kept": promoted
    clock.advance(1)
    assert mem.consolidate() == 1                      # "new"; "gone" expired: not moved
    assert mem.long.keys("r") == ["kept", "new"] and mem.keys("r") == ["kept", "new"]
    assert mem.long.get("r", "kept").expires_at == clock() - 6 + 50
