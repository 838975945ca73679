"""LangGraph's own store tests, ported to run against :class:`MemcoreStore`.

Source: langchain-ai/langgraph, libs/checkpoint/tests/test_store.py (InMemoryStore's tests) and
tests/embed_test_utils.py, at commit f09cfe8ff. Each ported test keeps LangGraph's calls and
assertions; ``InMemoryStore(...)`` becomes ``MemcoreStore(<memcore store>)`` with
LangGraph's ``CharacterEmbeddings`` ported as a memcore embedder (name, dim, encode). Async
tests run under ``asyncio.run`` (no pytest-asyncio). Every ported test runs against an
in-RAM LongTermMemory, a disk LongTermMemory, a ShortTermMemory and a TwoTierMemory.

Ported (as written):
  test_list_namespaces_basic, test_list_namespaces_with_wildcards,
  test_list_namespaces_pagination, test_list_namespaces_max_depth,
  test_list_namespaces_no_conditions, test_list_namespaces_empty_store,
  test_cannot_put_empty_namespace (incl. its MockAsyncBatchedStore half, over MemcoreStore),
  test_async_batch_store_resilience, test_vector_insert_with_auto_embedding (+ async),
  test_vector_update_with_embedding (+ async), test_vector_search_with_filters (+ async),
  test_async_batched_vector_search_concurrent, test_vector_search_pagination (+ async),
  test_non_ascii.
Ported with a change:
  test_async_batch_store_deduplication -- mocker.spy(InMemoryStore, "batch") (pytest-mock)
    replaced by a recording wrapper around MemcoreStore.batch; same assertions.
  test_vector_store_initialization -- the embedder is the memcore store's, so the test checks
    index_config's dims/fields and that ``index={"embed": ...}`` is refused with a clear error.
  test_embed_with_path -- the operation-level fields (``index=[...]``), an unindexed field
    not being embedded, and ``index=False`` giving ``score=None`` are ported. Not applicable:
    the assertions that rely on one vector per field with max pooling ("doc2.key3 and
    doc1.key1 both would have the highest score", equal scores for a shared field): memcore
    keeps one vector per item, the text of its fields joined (module notes of
    memcore.integrations.langgraph); the ported asserts check that ranking instead.
Not applicable (they test LangGraph's own code, not a store):
  test_get_text_at_path (LangGraph's JSON-path helper), test_async_batch_store and
  test_async_batch_store_handles_cancellation (AsyncBatchedBaseStore over a mock store that
  returns fixed Items; no store is involved).
Added here (memcore behaviour the reference store lacks): TTL (supports_ttl, minutes,
refresh_ttl, sweep), created_at kept on update, datetimes, filter operators $ne/$lt/$in,
persistence across reopen, and a LangGraph graph compiled with ``store=`` that puts and
searches (examples/langgraph_agent.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import runpy
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extras import require as require_extra

require_extra("langgraph.store.base", "langgraph")

from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    Op,
    PutOp,
    Result,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore  # noqa: E402

from memcore import (  # noqa: E402
    HashingEmbedder,
    LongTermMemory,
    PromotionPolicy,
    ShortTermMemory,
    TwoTierMemory,
)
from memcore.errors import InvalidArgumentError  # noqa: E402
from memcore.integrations.langgraph import MemcoreStore  # noqa: E402
from store_helpers import FakeClock  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langgraph_agent.py"


class CharacterEmbeddings:
    """LangGraph's test embedder (character frequencies through random projections), as a
    memcore embedder."""

    def __init__(self, dims: int = 50, seed: int = 42):
        self._rng = random.Random(seed)
        self.dims = self.dim = dims
        self.name = f"character-embeddings-{dims}"
        self._char_projections: defaultdict[str, list[float]] = defaultdict(
            lambda: [self._rng.gauss(0, 1 / math.sqrt(self.dims)) for _ in range(self.dims)])

    def _embed_one(self, text: str) -> list[float]:
        counts = Counter(text)
        total = sum(counts.values())
        if total == 0:
            return [0.0] * self.dims
        embedding = [0.0] * self.dims
        for char, count in counts.items():
            weight = count / total
            char_proj = self._char_projections[char]
            for i, proj in enumerate(char_proj):
                embedding[i] += weight * proj
        norm = math.sqrt(sum(x * x for x in embedding))
        if norm > 0:
            embedding = [x / norm for x in embedding]
        return embedding

    def encode(self, texts, **kw) -> np.ndarray:
        return np.asarray([self._embed_one(t) for t in texts], np.float32).reshape(
            len(texts), self.dims)


BACKENDS = ["long", "long-disk", "short", "two-tier"]


def memcore_store(kind: str, embedder: Any, tmp: Path, clock: Any = None) -> Any:
    clock = clock or FakeClock()
    if kind == "long":
        return LongTermMemory(embedder=embedder, clock=clock)
    if kind == "long-disk":
        return LongTermMemory(tmp / "mem", embedder, clock=clock, durability="none")
    if kind == "short":
        return ShortTermMemory(capacity=10_000, embedder=embedder, clock=clock)
    return TwoTierMemory(ShortTermMemory(capacity=3, embedder=embedder, clock=clock),
                         LongTermMemory(embedder=embedder, clock=clock),
                         PromotionPolicy(min_importance=0.0))


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """Builds MemcoreStore(s) over the parametrised memcore store (closed afterwards)."""
    made = []

    def build(embedder: Any = None, **kwargs: Any) -> MemcoreStore:
        mem = memcore_store(request.param, embedder or HashingEmbedder(dim=64),
                            tmp_path / str(len(made)))
        made.append(mem)
        return MemcoreStore(mem, **kwargs)

    yield build
    for mem in made:
        getattr(mem, "close", lambda: None)()


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)


class MockAsyncBatchedStore(AsyncBatchedBaseStore):
    """LangGraph's test double: its async batching in front of a (here: memcore) store."""

    def __init__(self, store: MemcoreStore) -> None:
        super().__init__()
        self._store = store

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._store.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self._store.batch(ops)


# ------------------------------------------------------------------ list_namespaces

def test_list_namespaces_basic(backend) -> None:
    store = backend()

    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]

    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})

    result = store.list_namespaces(prefix=("a", "b"))
    expected = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert sorted(result) == sorted(expected)

    result = store.list_namespaces(suffix=("f",))
    expected = [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert sorted(result) == sorted(expected)

    result = store.list_namespaces(prefix=("a",), suffix=("f",))
    expected = [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(result) == sorted(expected)

    # Test max_depth
    result = store.list_namespaces(prefix=("a", "b"), max_depth=3)
    expected = [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert sorted(result) == sorted(expected)

    # Test limit and offset
    result = store.list_namespaces(prefix=("a", "b"), limit=2)
    expected = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
    ]
    assert result == expected

    result = store.list_namespaces(prefix=("a", "b"), offset=2)
    expected = [
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert result == expected

    result = store.list_namespaces(prefix=("a", "*", "f"))
    expected = [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(result) == sorted(expected)

    result = store.list_namespaces(suffix=("*", "f"))
    expected = [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert sorted(result) == sorted(expected)

    result = store.list_namespaces(prefix=("nonexistent",))
    assert result == []

    result = store.list_namespaces(prefix=("users", "123"))
    expected = [("users", "123")]
    assert result == expected


def test_list_namespaces_with_wildcards(backend) -> None:
    store = backend()

    namespaces = [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
        ("admin", "users", "789"),
        ("guests", "123"),
        ("guests", "456", "preferences"),
    ]

    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})

    result = store.list_namespaces(prefix=("users", "*"))
    expected = [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert sorted(result) == sorted(expected)

    result = store.list_namespaces(suffix=("*", "preferences"))
    expected = [
        ("guests", "456", "preferences"),
    ]
    assert result == expected

    result = store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings"))

    assert result == []

    store.put(
        namespace=("admin", "users", "settings", "789"),
        key="foo",
        value={"data": "some_val"},
    )
    # (LangGraph's test builds this expectation without asserting it; asserted here)
    expected = [
        ("admin", "users", "settings", "789"),
    ]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "789")) == [
        ("admin", "users", "789"), *expected]


def test_list_namespaces_pagination(backend) -> None:
    store = backend()

    for i in range(20):
        ns = ("namespace", f"sub_{i:02d}")
        store.put(namespace=ns, key=f"id_{i:02d}", value={"data": f"value_{i:02d}"})

    result = store.list_namespaces(prefix=("namespace",), limit=5, offset=0)
    expected = [("namespace", f"sub_{i:02d}") for i in range(5)]
    assert result == expected

    result = store.list_namespaces(prefix=("namespace",), limit=5, offset=5)
    expected = [("namespace", f"sub_{i:02d}") for i in range(5, 10)]
    assert result == expected

    result = store.list_namespaces(prefix=("namespace",), limit=5, offset=15)
    expected = [("namespace", f"sub_{i:02d}") for i in range(15, 20)]
    assert result == expected


def test_list_namespaces_max_depth(backend) -> None:
    store = backend()

    namespaces = [
        ("a", "b", "c", "d"),
        ("a", "b", "c", "e"),
        ("a", "b", "f"),
        ("a", "g"),
        ("h", "i", "j", "k"),
    ]

    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})

    result = store.list_namespaces(max_depth=2)
    expected = [
        ("a", "b"),
        ("a", "g"),
        ("h", "i"),
    ]
    assert sorted(result) == sorted(expected)


def test_list_namespaces_no_conditions(backend) -> None:
    store = backend()

    namespaces = [
        ("a", "b"),
        ("c", "d"),
        ("e", "f", "g"),
    ]

    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})

    result = store.list_namespaces()
    expected = namespaces
    assert sorted(result) == sorted(expected)


def test_list_namespaces_empty_store(backend) -> None:
    store = backend()

    result = store.list_namespaces()
    assert result == []


# ------------------------------------------------------------------ namespaces, async batching

def test_cannot_put_empty_namespace(backend) -> None:
    asyncio.run(_cannot_put_empty_namespace(backend))


async def _cannot_put_empty_namespace(backend) -> None:
    store = backend()
    doc = {"foo": "bar"}

    with pytest.raises(InvalidNamespaceError):
        store.put((), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await store.aput((), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        store.put(("the", "thing.about"), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await store.aput(("the", "thing.about"), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        store.put(("some", "fun", ""), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await store.aput(("some", "fun", ""), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await store.aput(("langgraph", "foo"), "bar", doc)

    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "foo"), "bar", doc)

    await store.aput(("foo", "langgraph", "foo"), "bar", doc)
    assert (await store.aget(("foo", "langgraph", "foo"), "bar")).value == doc
    assert (await store.asearch(("foo", "langgraph", "foo"), query="bar"))[
        0
    ].value == doc
    await store.adelete(("foo", "langgraph", "foo"), "bar")
    assert (await store.aget(("foo", "langgraph", "foo"), "bar")) is None
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
    assert store.search(("foo", "langgraph", "foo"), query="bar")[0].value == doc
    store.delete(("foo", "langgraph", "foo"), "bar")
    assert store.get(("foo", "langgraph", "foo"), "bar") is None

    # Do the same but go past the public put api
    await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
    assert (await store.asearch(("langgraph", "foo")))[0].value == doc
    await store.adelete(("langgraph", "foo"), "bar")
    assert (await store.aget(("langgraph", "foo"), "bar")) is None
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc
    assert store.search(("langgraph", "foo"))[0].value == doc
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None

    async_store = MockAsyncBatchedStore(backend())
    doc = {"foo": "bar"}

    with pytest.raises(InvalidNamespaceError):
        await async_store.aput((), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await async_store.aput(("the", "thing.about"), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await async_store.aput(("some", "fun", ""), "foo", doc)

    with pytest.raises(InvalidNamespaceError):
        await async_store.aput(("langgraph", "foo"), "bar", doc)

    await async_store.aput(("foo", "langgraph", "foo"), "bar", doc)
    val = await async_store.aget(("foo", "langgraph", "foo"), "bar")
    assert val is not None
    assert val.value == doc
    assert (await async_store.asearch(("foo", "langgraph", "foo")))[0].value == doc
    assert (await async_store.asearch(("foo", "langgraph", "foo"), query="bar"))[
        0
    ].value == doc
    await async_store.adelete(("foo", "langgraph", "foo"), "bar")
    assert (await async_store.aget(("foo", "langgraph", "foo"), "bar")) is None

    await async_store.abatch([PutOp(("valid", "namespace"), "key", doc)])
    val = await async_store.aget(("valid", "namespace"), "key")
    assert val is not None
    assert val.value == doc
    assert (await async_store.asearch(("valid", "namespace")))[0].value == doc
    await async_store.adelete(("valid", "namespace"), "key")
    assert (await async_store.aget(("valid", "namespace"), "key")) is None


def test_async_batch_store_resilience(backend) -> None:
    asyncio.run(_async_batch_store_resilience(backend))


async def _async_batch_store_resilience(backend) -> None:
    """Test that AsyncBatchedBaseStore recovers gracefully from task cancellation."""
    doc = {"foo": "bar"}
    async_store = MockAsyncBatchedStore(backend())

    await async_store.aput(("foo", "langgraph", "foo"), "bar", doc)

    # Store the original task reference
    original_task = async_store._task
    assert original_task is not None
    assert not original_task.done()

    # Cancel the background task
    original_task.cancel()
    await asyncio.sleep(0.01)
    assert original_task.cancelled()

    # Perform a new operation - this should trigger _ensure_task() to create a new task
    result = await async_store.asearch(("foo", "langgraph", "foo"))
    assert len(result) > 0
    assert result[0].value == doc

    # Verify a new task was created
    new_task = async_store._task
    assert new_task is not None
    assert new_task is not original_task
    assert not new_task.done()

    # Test that operations continue to work with the new task
    doc2 = {"baz": "qux"}
    await async_store.aput(("test", "namespace"), "key", doc2)
    result2 = await async_store.aget(("test", "namespace"), "key")
    assert result2 is not None
    assert result2.value == doc2


class RecordingStore(MemcoreStore):
    """Records the operations of every batch call (for mocker.spy(InMemoryStore, "batch"))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[list] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self.calls.append(ops)
        return super().batch(ops)


def test_async_batch_store_deduplication(tmp_path) -> None:
    asyncio.run(_async_batch_store_deduplication(tmp_path))


async def _async_batch_store_deduplication(tmp_path) -> None:
    inner = RecordingStore(LongTermMemory(embedder=HashingEmbedder(dim=64)))
    store = MockAsyncBatchedStore(inner)

    same_doc = {"value": "same"}
    diff_doc = {"value": "different"}
    await asyncio.gather(
        store.aput(namespace=("test",), key="same", value=same_doc),
        store.aput(namespace=("test",), key="different", value=diff_doc),
    )
    inner.calls.clear()

    results = await asyncio.gather(
        store.aget(namespace=("test",), key="same"),
        store.aget(namespace=("test",), key="same"),
        store.aget(namespace=("test",), key="different"),
    )

    assert len(results) == 3
    assert results[0] == results[1]
    assert results[0] != results[2]
    assert results[0].value == same_doc  # type: ignore
    assert results[2].value == diff_doc  # type: ignore
    assert len(inner.calls) == 1
    ops = inner.calls[0]
    assert len(ops) == 2
    assert GetOp(("test",), "same", refresh_ttl=True) in ops
    assert GetOp(("test",), "different", refresh_ttl=True) in ops

    inner.calls.clear()

    doc1 = {"value": 1}
    doc2 = {"value": 2}
    results = await asyncio.gather(
        store.aput(namespace=("test",), key="key", value=doc1),
        store.aput(namespace=("test",), key="key", value=doc2),
    )
    assert len(inner.calls) == 1
    ops = inner.calls[0]
    assert len(ops) == 1
    assert ops[0] == PutOp(("test",), "key", doc2)
    assert len(results) == 2
    assert all(result is None for result in results)

    result = await store.aget(namespace=("test",), key="key")
    assert result is not None
    assert result.value == doc2

    inner.calls.clear()

    results = await asyncio.gather(
        store.asearch(("test",), filter={"value": 2}),
        store.asearch(("test",), filter={"value": 2}),
    )
    assert len(inner.calls) == 1
    ops = inner.calls[0]
    assert len(ops) == 1
    assert len(results) == 2
    assert results[0] == results[1]
    assert len(results[0]) == 1
    assert results[0][0].value == doc2


# ------------------------------------------------------------------ vector search

def test_vector_store_initialization(backend, fake_embeddings) -> None:
    """Test store initialization with embedding config."""
    store = backend(fake_embeddings, index={"dims": fake_embeddings.dims, "fields": ["text"]})
    assert store.index_config is not None
    assert store.index_config["dims"] == fake_embeddings.dims
    assert store.store.embedder is fake_embeddings
    with pytest.raises(InvalidArgumentError, match="embed"):
        MemcoreStore(store.store, index={"dims": 500, "embed": fake_embeddings})
    with pytest.raises(InvalidArgumentError, match="dim=500"):
        MemcoreStore(store.store, index={"dims": 64})


VECTOR_DOCS = [
    ("doc1", {"text": "short text"}),
    ("doc2", {"text": "longer text document"}),
    ("doc3", {"text": "longest text document here"}),
    ("doc4", {"description": "text in description field"}),
    ("doc5", {"content": "text in content field"}),
    ("doc6", {"body": "text in body field"}),
]


def test_vector_insert_with_auto_embedding(backend, fake_embeddings) -> None:
    """Test inserting items that get auto-embedded."""
    store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
    for key, value in VECTOR_DOCS:
        store.put(("test",), key, value)

    results = store.search(("test",), query="long text")
    assert len(results) > 0

    doc_order = [r.key for r in results]
    assert "doc2" in doc_order
    assert "doc3" in doc_order


def test_async_vector_insert_with_auto_embedding(backend, fake_embeddings) -> None:
    async def run():
        store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
        for key, value in VECTOR_DOCS:
            await store.aput(("test",), key, value)
        results = await store.asearch(("test",), query="long text")
        assert len(results) > 0
        doc_order = [r.key for r in results]
        assert "doc2" in doc_order
        assert "doc3" in doc_order

    asyncio.run(run())


def test_vector_update_with_embedding(backend, fake_embeddings) -> None:
    """Test that updating items properly updates their embeddings."""
    store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})

    results_initial = store.search(("test",), query="Zany Xerxes")
    assert len(results_initial) > 0
    assert results_initial[0].key == "doc1"
    initial_score = results_initial[0].score
    assert initial_score is not None

    store.put(("test",), "doc1", {"text": "new text about dogs"})

    results_after = store.search(("test",), query="Zany Xerxes")
    after_score = next((r.score for r in results_after if r.key == "doc1"), 0.0)
    assert after_score is not None
    assert after_score < initial_score

    results_new = store.search(("test",), query="new text about dogs")
    for r in results_new:
        if r.key == "doc1":
            assert r.score > after_score

    # Don't index this one
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    results_new = store.search(("test",), query="new text about dogs", limit=3)
    assert not any(r.key == "doc4" for r in results_new)


def test_async_vector_update_with_embedding(backend, fake_embeddings) -> None:
    async def run():
        store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
        await store.aput(("test",), "doc1", {"text": "zany zebra Xerxes"})
        await store.aput(("test",), "doc2", {"text": "something about dogs"})
        await store.aput(("test",), "doc3", {"text": "text about birds"})

        results_initial = await store.asearch(("test",), query="Zany Xerxes")
        assert len(results_initial) > 0
        assert results_initial[0].key == "doc1"
        initial_score = results_initial[0].score

        await store.aput(("test",), "doc1", {"text": "new text about dogs"})

        results_after = await store.asearch(("test",), query="Zany Xerxes")
        after_score = next((r.score for r in results_after if r.key == "doc1"), 0.0)
        assert after_score is not None
        assert after_score < initial_score

        results_new = await store.asearch(("test",), query="new text about dogs")
        for r in results_new:
            if r.key == "doc1":
                assert r.score is not None
                assert r.score > after_score

        # Don't index this one
        await store.aput(("test",), "doc4", {"text": "new text about dogs"}, index=False)
        results_new = await store.asearch(("test",), query="new text about dogs", limit=3)
        assert not any(r.key == "doc4" for r in results_new)

    asyncio.run(run())


FILTER_DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


def test_vector_search_with_filters(backend, fake_embeddings) -> None:
    """Test combining vector search with filters."""
    inmem_store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
    for key, value in FILTER_DOCS:
        inmem_store.put(("test",), key, value)

    results = inmem_store.search(("test",), query="apple", filter={"color": "red"})
    assert len(results) == 2
    assert results[0].key == "doc1"

    results = inmem_store.search(("test",), query="car", filter={"color": "red"})
    assert len(results) == 2
    assert results[0].key == "doc2"

    results = inmem_store.search(
        ("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}
    )
    assert len(results) == 3
    assert results[0].key == "doc4"

    # Multiple filters
    results = inmem_store.search(
        ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
    )
    assert len(results) == 1
    assert results[0].key == "doc3"


def test_async_vector_search_with_filters(backend, fake_embeddings) -> None:
    async def run():
        store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
        for key, value in FILTER_DOCS:
            await store.aput(("test",), key, value)

        results = await store.asearch(("test",), query="apple", filter={"color": "red"})
        assert len(results) == 2
        assert results[0].key == "doc1"

        results = await store.asearch(("test",), query="car", filter={"color": "red"})
        assert len(results) == 2
        assert results[0].key == "doc2"

        results = await store.asearch(
            ("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}
        )
        assert len(results) == 3
        assert results[0].key == "doc4"

        results = await store.asearch(
            ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
        )
        assert len(results) == 1
        assert results[0].key == "doc3"

    asyncio.run(run())


def test_async_batched_vector_search_concurrent(backend, fake_embeddings) -> None:
    asyncio.run(_async_batched_vector_search_concurrent(backend, fake_embeddings))


async def _async_batched_vector_search_concurrent(backend, fake_embeddings) -> None:
    """Test concurrent vector search operations using async batched store."""
    store = MockAsyncBatchedStore(
        backend(fake_embeddings, index={"dims": fake_embeddings.dims}))

    colors = ["red", "blue", "green", "yellow", "purple"]
    items = ["apple", "car", "house", "book", "phone"]
    scores = [3.0, 3.5, 4.0, 4.5, 5.0]

    docs = []
    for i in range(50):
        color = colors[i % len(colors)]
        item = items[i % len(items)]
        score = scores[i % len(scores)]
        docs.append(
            (
                f"doc{i}",
                {"text": f"{color} {item}", "color": color, "score": score, "index": i},
            )
        )
    coros = [
        *[store.aput(("test",), key, value) for key, value in docs],
        *[store.adelete(("test",), key) for key, value in docs],
        *[store.aput(("test",), key, value) for key, value in docs],
    ]
    await asyncio.gather(*coros)

    # Prepare multiple search queries with different filters
    search_queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}),
        ("car", {"color": "blue"}),
        ("house", {"color": "green"}),
        ("phone", {"score": {"$gt": 4.99}}),
        ("book", {"score": {"$lte": 3.5}}),
        ("apple", {"score": {"$gte": 3.0}, "color": "red"}),
        ("car", {"score": {"$lt": 5.1}, "color": "blue"}),
        ("house", {"index": {"$gt": 25}}),
        ("phone", {"index": {"$lte": 10}}),
    ]

    all_results = await asyncio.gather(
        *[
            store.asearch(("test",), query=query, filter=filter_)
            for query, filter_ in search_queries
        ]
    )

    for results, (query, filter_) in zip(all_results, search_queries, strict=False):
        assert len(results) > 0, f"No results for query '{query}' with filter {filter_}"

        for result in results:
            if "color" in filter_:
                assert result.value["color"] == filter_["color"]

            if "score" in filter_:
                score = result.value["score"]
                for op, value in filter_["score"].items():
                    if op == "$gt":
                        assert score > value
                    elif op == "$gte":
                        assert score >= value
                    elif op == "$lt":
                        assert score < value
                    elif op == "$lte":
                        assert score <= value

            if "index" in filter_:
                index = result.value["index"]
                for op, value in filter_["index"].items():
                    if op == "$gt":
                        assert index > value
                    elif op == "$gte":
                        assert index >= value
                    elif op == "$lt":
                        assert index < value
                    elif op == "$lte":
                        assert index <= value


def test_vector_search_pagination(backend, fake_embeddings) -> None:
    """Test pagination with vector search."""
    store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})

    results_page1 = store.search(("test",), query="test", limit=2)
    results_page2 = store.search(("test",), query="test", limit=2, offset=2)

    assert len(results_page1) == 2
    assert len(results_page2) == 2
    assert results_page1[0].key != results_page2[0].key

    all_results = store.search(("test",), query="test", limit=10)
    assert len(all_results) == 5


def test_async_vector_search_pagination(backend, fake_embeddings) -> None:
    async def run():
        store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
        for i in range(5):
            await store.aput(("test",), f"doc{i}", {"text": f"test document number {i}"})

        results_page1 = await store.asearch(("test",), query="test", limit=2)
        results_page2 = await store.asearch(("test",), query="test", limit=2, offset=2)

        assert len(results_page1) == 2
        assert len(results_page2) == 2
        assert results_page1[0].key != results_page2[0].key

        all_results = await store.asearch(("test",), query="test", limit=10)
        assert len(all_results) == 5

    asyncio.run(run())


def test_embed_with_path(backend, fake_embeddings) -> None:
    asyncio.run(_embed_with_path(backend, fake_embeddings))


async def _embed_with_path(backend, fake_embeddings) -> None:
    # Test store-level field configuration
    store = backend(fake_embeddings, index={
        "dims": fake_embeddings.dims,
        # Key 2 isn't included. Don't index it.
        "fields": ["key0", "key1", "key3"],
    })
    # Omit key0 - check it doesn't raise an error
    doc1 = {"key1": "xxx", "key2": "yyy", "key3": "zzz"}
    doc2 = {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"}
    await store.aput(("test",), "doc1", doc1)
    await store.aput(("test",), "doc2", doc2)

    results = await store.asearch(("test",), query="xxx")
    assert len(results) == 2
    assert results[0].key != results[1].key
    ascore = results[0].score
    assert ascore is not None and results[1].score is not None
    # one vector per item (the fields' texts joined): memcore's score is the cosine with it
    for r, doc in zip(results, (doc1, doc2) if results[0].key == "doc1" else (doc2, doc1)):
        text = "\n".join(doc[k] for k in ("key0", "key1", "key3") if k in doc)
        want = float(fake_embeddings.encode([text])[0] @ fake_embeddings.encode(["xxx"])[0])
        assert r.score == pytest.approx(want, abs=1e-5)

    results = await store.asearch(("test",), query="uuu")
    assert len(results) == 2
    assert results[0].key != results[1].key
    assert results[0].key == "doc2"
    assert results[0].score is not None and results[0].score > results[1].score

    # Un-indexed - will have low results for both (key2 is not embedded)
    results = await store.asearch(("test",), query="www")
    assert len(results) == 2
    doc2_www = float(fake_embeddings.encode(["uuu\nvvv\nwww\nxxx"])[0]
                     @ fake_embeddings.encode(["www"])[0])
    assert all(r.score < doc2_www for r in results)

    # Test operation-level field configuration
    store_no_defaults = backend(fake_embeddings, index={
        "dims": fake_embeddings.dims,
        "fields": ["key17"],
    })

    doc3 = {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}
    doc4 = {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}

    await store_no_defaults.aput(("test",), "doc3", doc3, index=["key0", "key1"])
    await store_no_defaults.aput(("test",), "doc4", doc4, index=["key1", "key3"])

    results = await store_no_defaults.asearch(("test",), query="aaa")
    assert len(results) == 2
    assert results[0].key == "doc3"
    assert results[0].score is not None and results[0].score > results[1].score

    results = await store_no_defaults.asearch(("test",), query="ggg")
    assert len(results) == 2
    assert results[0].key == "doc4"
    assert results[0].score is not None and results[0].score > results[1].score

    results = await store_no_defaults.asearch(("test",), query="ccc")
    assert len(results) == 2
    assert all(r.score < ascore for r in results)

    doc5 = {"key0": "hhh", "key1": "iii"}
    await store_no_defaults.aput(("test",), "doc5", doc5, index=False)

    results = await store_no_defaults.asearch(("test",), query="hhh")
    assert len(results) == 3
    doc5_result = next(r for r in results if r.key == "doc5")
    assert doc5_result.score is None

    # an item whose fields hold no text is stored unindexed too (listed, never ranked)
    await store_no_defaults.aput(("test",), "doc6", {"other": "hhh"})
    results = await store_no_defaults.asearch(("test",), query="hhh", limit=10)
    assert [r.score is None for r in results] == [False, False, True, True]


def test_non_ascii(backend, fake_embeddings) -> None:
    """Test support for non-ascii characters"""
    store = backend(fake_embeddings, index={"dims": fake_embeddings.dims})
    store.put(("user_123", "memories"), "1", {"text": "这是中文"})  # Chinese
    store.put(("user_123", "memories"), "2", {"text": "これは日本語です"})  # Japanese
    store.put(("user_123", "memories"), "3", {"text": "이건 한국어야"})  # Korean
    store.put(("user_123", "memories"), "4", {"text": "Это русский"})  # Russian
    store.put(("user_123", "memories"), "5", {"text": "यह रूसी है"})  # Hindi

    result1 = store.search(("user_123", "memories"), query="这是中文")
    result2 = store.search(("user_123", "memories"), query="これは日本語です")
    result3 = store.search(("user_123", "memories"), query="이건 한국어야")
    result4 = store.search(("user_123", "memories"), query="Это русский")
    result5 = store.search(("user_123", "memories"), query="यह रूसी है")

    assert result1[0].key == "1"
    assert result2[0].key == "2"
    assert result3[0].key == "3"
    assert result4[0].key == "4"
    assert result5[0].key == "5"


# ------------------------------------------------------------------ beyond the reference store

def test_ttl_minutes_refresh_and_sweep(tmp_path) -> None:
    clock = FakeClock()
    mem = LongTermMemory(tmp_path / "mem", HashingEmbedder(dim=64), clock=clock)
    store = MemcoreStore(mem, ttl={"default_ttl": 10, "refresh_on_read": True})
    assert store.supports_ttl
    store.put(("u",), "a", {"text": "red door"})                  # 10 minutes by default
    store.put(("u",), "b", {"text": "blue door"}, ttl=1)
    store.put(("u",), "c", {"text": "green door"}, ttl=None)      # never
    assert mem.get("u", "a").ttl == 600 and mem.get("u", "b").ttl == 60
    clock.advance(59)
    assert store.get(("u",), "b") is not None                    # read: refreshed to +60 s
    clock.advance(59)
    assert store.get(("u",), "b", refresh_ttl=False) is not None
    clock.advance(1)
    assert store.get(("u",), "b") is None
    assert [i.key for i in store.search(("u",), query="door", limit=10)] != []
    clock.advance(599)
    assert sorted(i.key for i in store.search(("u",))) == ["a", "c"]   # a: refreshed by search
    clock.advance(600)
    assert [i.key for i in store.search(("u",))] == ["c"]
    assert store.list_namespaces() == [("u",)]
    assert store.sweep_ttl() == 2 and mem.stats()[("u",)]["live"] == 1
    mem.close()


def test_sweeper_thread_runs_and_stops() -> None:
    clock = FakeClock()
    mem = ShortTermMemory(capacity=10, clock=clock)
    store = MemcoreStore(mem, ttl={"sweep_interval_minutes": 0.001})    # 60 ms
    store.put(("u",), "a", {"text": "red door"}, ttl=1)
    clock.advance(60)
    for _ in range(200):
        if mem.stats() == {}:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert mem.stats() == {}
    assert store.stop_ttl_sweeper(timeout=5.0)


def test_items_keep_created_at_and_are_datetimes(backend) -> None:
    store = backend()
    store.put(("u",), "k", {"text": "first"})
    first = store.get(("u",), "k")
    store.put(("u",), "k", {"text": "second"})
    second = store.get(("u",), "k")
    assert isinstance(second.created_at, datetime) and second.created_at.tzinfo == timezone.utc
    assert second.created_at == first.created_at and second.value == {"text": "second"}


def test_filter_operators_and_bad_filters(backend) -> None:
    store = backend()
    for i in range(6):
        store.put(("u",), f"k{i}", {"text": f"note {i}", "n": i, "tags": ["a", "b"][: i % 3]})
    keys = lambda **kw: sorted(i.key for i in store.search(("u",), limit=10, **kw))  # noqa: E731
    assert keys(filter={"n": {"$ne": 2}}) == ["k0", "k1", "k3", "k4", "k5"]
    assert keys(filter={"n": {"$lt": 2}}) == ["k0", "k1"]
    assert keys(filter={"n": {"$in": [1, 5]}}) == ["k1", "k5"]
    assert keys(filter={"tags": ["a"]}) == ["k1", "k4"]          # a list: that exact list
    assert keys(query="note", filter={"n": {"$gte": 4}}) == ["k4", "k5"]
    with pytest.raises(InvalidArgumentError):
        store.search(("u",), filter={"n": {"$regex": "1"}})


def test_persists_across_reopen(tmp_path) -> None:
    emb = HashingEmbedder(dim=64)
    with LongTermMemory(tmp_path / "mem", emb) as mem:
        MemcoreStore(mem).put(("users", "ann"), "pref", {"text": "likes green tea"})
    with LongTermMemory.open(tmp_path / "mem", emb) as mem:
        store = MemcoreStore(mem)
        assert store.get(("users", "ann"), "pref").value == {"text": "likes green tea"}
        assert store.search(("users",), query="tea")[0].key == "pref"


def test_unindexed_puts_never_call_the_embedder() -> None:
    class Counting(HashingEmbedder):
        calls = 0

        def encode(self, texts, **kw):
            Counting.calls += 1
            return super().encode(texts, **kw)

    store = MemcoreStore(LongTermMemory(embedder=Counting(dim=32)))
    store.put(("u",), "k", {"text": "red door"}, index=False)
    store.put(("u",), "j", {"n": 1, "nested": {"x": [1, 2]}}, index=False)
    assert Counting.calls == 0
    assert json.loads(json.dumps(store.get(("u",), "j").value)) == {"n": 1, "nested": {"x": [1, 2]}}


def test_example_graph_puts_and_searches(tmp_path) -> None:
    """A LangGraph graph compiled with store=MemcoreStore(...): a node puts memories and
    another searches them (examples/langgraph_agent.py)."""
    require_extra("langgraph.graph", "langgraph")
    example = runpy.run_path(str(EXAMPLE))
    answer = example["main"](str(tmp_path / "mem"))
    assert "green tea" in answer


def test_a_bad_put_in_a_batch_writes_nothing(backend) -> None:
    store = backend()
    with pytest.raises(InvalidArgumentError):
        store.batch([PutOp(("u",), "a", {"text": "red door"}),
                     PutOp(("v",), "b", {"text": "blue door", "bad": float("nan")})])
    assert store.list_namespaces() == [] and store.search(("u",), limit=0) == []
