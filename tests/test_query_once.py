"""One query is validated, prepared, embedded and BM25-scored once (issue 12).

The real functions are wrapped with counters (module attributes monkeypatched), nothing's
behaviour is replaced: one ``SemanticMemory.retrieve`` with hybrid recall over two non-empty
tiers validates the namespace once, the text once, runs the query preparer once, embeds at most
once and scores BM25 once per tier (shared by the z statistics and the ranking).
"""

from __future__ import annotations

import collections

import pytest

from memcore import MemoryTier, SemanticMemory, _validate
from memcore.recall import index, prep
from store_helpers import FakeClock, embedder

TURNS = [("Ann adopted a beagle puppy called Max", "Lovely!"),
         ("Bob painted the robot red last week", "Nice."),
         ("The kettle is in the left cupboard", "Noted."),
         ("Ann's beagle likes the beach", "Cute."),
         ("Bob moved to Lisbon in May", "Exciting."),
         ("The charging dock is in the hallway", "OK.")]


@pytest.fixture
def counted(monkeypatch):
    counts: collections.Counter = collections.Counter()

    def wrap(owner, name, label):
        real = getattr(owner, name)

        def counting(*args, **kwargs):
            counts[label] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, counting)

    wrap(_validate, "namespace", "namespace")
    wrap(_validate, "text", "text")
    wrap(prep.DefaultQueryPreparer, "__call__", "prepare")
    wrap(index.HybridIndex, "lexical_signals", "bm25")
    return counts


def test_retrieve_resolves_the_query_once(counted):
    emb = embedder()
    mem = SemanticMemory(embedder=emb, clock=FakeClock(), warmup=False, consolidate_every=0)
    for i, (user, reply) in enumerate(TURNS):
        mem.store(user, reply, mode="chat", importance=0.9 if i < 3 else 0.1,
                  metadata={"speaker": "Ann" if "Ann" in user else "Bob", "episode": i // 2})
    mem.consolidate()                                      # the important half goes long
    ns = mem.namespace_of("chat")
    assert mem.short.count(ns) == 3 and mem.long.count(ns) == 3
    assert not mem.tiers.hybrid.is_similarity and mem.tiers.hybrid.normalize
    mem.retrieve("warm up the hybrid indexes", mode="chat")  # built once, then incremental
    counted.clear()
    calls = emb.calls
    hits = mem.retrieve("What did Ann adopt?", mode="chat", threshold=-1.0)
    assert {h.tier for h in hits} == {MemoryTier.SHORT, MemoryTier.LONG}
    assert counted["namespace"] == 1
    assert counted["text"] == 1
    assert counted["prepare"] == 1
    assert emb.calls - calls <= 1
    assert counted["bm25"] == 2                              # once per tier
