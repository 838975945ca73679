"""The async API (aput, aput_many, aget, adelete, adelete_many, asearch, abatch): every store has it, it
returns what the sync call returns, and it never blocks the event loop."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem
from memcore.core.store import GetOp, ListNamespacesOp, PutOp, SearchOp
from memcore.errors import InvalidArgumentError
from store_helpers import STORE_CASES, FakeClock, make_store


@pytest.mark.parametrize("case", STORE_CASES, ids=lambda c: c.id)
def test_async_calls_return_what_sync_calls_return(case):
    clock = FakeClock()
    store = make_store(case, clock)

    async def run():
        m = await store.aput("r", "door", "the red door is locked", importance=0.7,
                             metadata={"room": "hall"})
        many = await store.aput_many("r", [MemoryItem("dock", "the dock is in the hallway"),
                                           MemoryItem("dog", "a dog sleeps by the dock")])
        got = await store.aget("r", "door")
        hits = await store.asearch("r", "where is the dock", top_k=2, touch=False)
        batch = await store.abatch([GetOp("r", "dog"), SearchOp("r", "red door", top_k=1),
                                    ListNamespacesOp()])
        gone = await store.adelete("r", "dog")
        return m, many, got, hits, batch, gone

    m, many, got, hits, batch, gone = asyncio.run(run())
    assert m.importance == 0.7 and [x.key for x in many] == ["dock", "dog"]
    assert got.text == store.get("r", "door").text and got.metadata == {"room": "hall"}
    assert [h.key for h in hits] == [h.key for h in store.search("r", "where is the dock",
                                                                  top_k=2, touch=False)]
    assert batch[0].key == "dog" and batch[1][0].key == "door" and batch[2] == [("r",)]
    assert gone is True and store.get("r", "dog") is None
    n_gone = asyncio.run(store.adelete_many("r", ["dock", "dock", "nope"]))
    assert n_gone == 1 and store.get("r", "dock") is None and store.get("r", "door") is not None


def test_async_errors_are_the_sync_errors():
    store = LongTermMemory(embedder=HashingEmbedder(dim=16))
    with pytest.raises(InvalidArgumentError):
        asyncio.run(store.aput("r", "k", "text", importance=2.0))
    with pytest.raises(InvalidArgumentError, match="ambiguous"):
        asyncio.run(store.asearch("r", "text", filter={"room": ["a", "b"]}))
    assert store.count("r") == 0


class GatedEmbedder:
    """An embedder whose encode waits until the event loop opens a gate: it can only finish
    when the call runs off the loop's thread."""

    name, dim = "gated", 16

    def __init__(self):
        self.inner = HashingEmbedder(dim=16)
        self.gate = threading.Event()
        self.threads = set()

    def encode(self, texts, **kw):
        self.threads.add(threading.get_ident())
        if not self.gate.wait(5.0):
            raise RuntimeError("the event loop was blocked while encode ran")
        return self.inner.encode(texts)


@pytest.mark.parametrize("call", ["aput", "asearch", "abatch"])
def test_async_calls_do_not_block_the_event_loop(call):
    emb = GatedEmbedder()
    store = LongTermMemory(embedder=emb, clock=FakeClock())
    emb.gate.set()
    store.put("r", "k", "red door")
    emb.gate.clear()
    emb.threads.clear()

    async def run():
        coro = {"aput": lambda: store.aput("r", "k2", "blue door"),
                "asearch": lambda: store.asearch("r", "red door"),
                "abatch": lambda: store.abatch([PutOp("r", "k3", "green door")])}[call]()
        task = asyncio.create_task(coro)
        await asyncio.sleep(0.01)       # the task starts its call ...
        emb.gate.set()                  # ... and the loop is still free to open the gate
        return await task, threading.get_ident()

    result, loop_thread = asyncio.run(run())
    assert loop_thread not in emb.threads
    assert result is not None and store.count("r") >= 1
    assert np.isfinite(store.vector("r", "k")).all()
