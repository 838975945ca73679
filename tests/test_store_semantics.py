"""Every MemoryStore semantic of issue 4, checked on every store (``store_factory``), then the
behaviour specific to ShortTermMemory (FIFO, lexical mode) and TwoTierMemory (tiers)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from memcore import (
    DecayWeights,
    DimensionMismatchError,
    EmbedderMismatchError,
    HashingEmbedder,
    HybridWeights,
    InvalidArgumentError,
    InvalidNamespaceError,
    InvalidTextError,
    InvalidVectorError,
    LongTermMemory,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    PromotionPolicy,
    ShortTermMemory,
    StoredMemory,
    TwoTierMemory,
    UnknownNamespaceError,
)
from memcore.core.store import MemoryStore
from store_helpers import DIM, STORE_CASES, CountingEmbedder, FakeClock, embedder, make_store

SIM_ONLY = DecayWeights.similarity()


@pytest.fixture(params=STORE_CASES, ids=[c.id for c in STORE_CASES])
def case(request):
    return request.param


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def emb():
    return embedder()


@pytest.fixture
def store(case, clock, emb):
    return make_store(case, clock, emb)


def keys(hits):
    return [h.key for h in hits]


def unit(rng, dim=DIM):
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


WORDS = ["apple", "river", "robot", "kitchen", "battery", "door", "garden", "window", "laser",
         "coffee", "music", "dock", "sensor", "camera", "wheel", "charger", "stairs", "lamp"]


def fill(store, ns, n, start=0, **kw):
    """Put n memories 'k{i}' whose texts share words in a graded way."""
    for i in range(start, start + n):
        store.put(ns, f"k{i}", f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7 + 3) % len(WORDS)]} item{i}",
                  **kw)


# --------------------------------------------------------------------------- protocol basics

def test_implements_protocol(store):
    assert isinstance(store, MemoryStore)


def test_put_get_roundtrip(store, clock):
    m = store.put(("robot", "patrol"), "door", "the red door is locked", importance=0.7,
                  metadata={"room": "hall", "n": [1, 2]})
    assert m.namespace == ("robot", "patrol") and m.key == "door"
    assert m.created_at == m.updated_at == m.last_accessed_at == clock.t
    assert m.access_count == 0
    g = store.get(("robot", "patrol"), "door")
    assert (g.text, g.importance, dict(g.metadata)) == ("the red door is locked", 0.7,
                                                        {"room": "hall", "n": [1, 2]})
    assert store.get(("robot", "patrol"), "nope") is None
    assert store.count(("robot", "patrol")) == 1


def test_str_namespace_equals_one_segment_tuple(store):
    store.put("robot", "a", "hello world")
    assert store.get(("robot",), "a").text == "hello world"
    assert store.count(("robot",)) == 1
    assert store.namespaces() == [("robot",)]


@pytest.mark.parametrize("bad", ["", (), ("a", ""), ("a\x00b",), ("ok", 3), 5, None])
def test_invalid_namespace_rejected_everywhere(store, bad):
    with pytest.raises(InvalidNamespaceError):
        store.put(bad, "k", "text")
    with pytest.raises(InvalidNamespaceError):
        store.get(bad, "k")
    with pytest.raises(InvalidNamespaceError):
        store.search(bad, "text")
    with pytest.raises(InvalidNamespaceError):
        store.count(bad)
    assert store.namespaces() == []


@pytest.mark.parametrize("bad", ["", "a\x00", 3, None])
def test_invalid_key_rejected(store, bad):
    with pytest.raises((InvalidTextError, TypeError)):
        store.put("ns", bad, "text")
    assert store.namespaces() == []


def test_invalid_text_and_importance_rejected(store):
    with pytest.raises(InvalidTextError):
        store.put("ns", "k", b"bytes")
    with pytest.raises(InvalidTextError):
        store.put("ns", "k", "lone \ud800 surrogate")
    for bad in (-0.1, 1.5, float("nan"), "high", True):
        with pytest.raises(ValueError):
            store.put("ns", "k", "text", importance=bad)
    with pytest.raises(ValueError):
        store.put("ns", "k", "text", metadata={"x": float("nan")})
    with pytest.raises(TypeError):
        store.put("ns", "k", "text", metadata=["not", "a", "dict"])
    assert store.count("ns") == 0


# --------------------------------------------------------------------------- namespaces

def test_prefix_listing_matches_whole_segments(store):
    for ns in [("acme",), ("acme", "x"), ("acme", "x", "y"), ("acme-corp",), ("acmex",),
               ("john_doe",), ("john-doe",)]:
        store.put(ns, "k", "some text")
    assert store.namespaces(("acme",)) == [("acme",), ("acme", "x"), ("acme", "x", "y")]
    assert store.namespaces("acme") == store.namespaces(("acme",))
    assert store.namespaces(("acme", "x")) == [("acme", "x"), ("acme", "x", "y")]
    assert store.namespaces("john_doe") == [("john_doe",)]
    assert store.namespaces("john-doe") == [("john-doe",)]
    assert store.namespaces("acm") == []
    assert len(store.namespaces()) == 7 and store.namespaces() == sorted(store.namespaces())


def test_namespaces_are_isolated(store):
    store.put("john_doe", "k1", "my secret is blue whales")
    store.put("john-doe", "k2", "my secret is blue whales")
    store.put(("john_doe", "child"), "k3", "my secret is blue whales")
    assert keys(store.search("john_doe", "blue whales", top_k=10)) == ["k1"]
    assert keys(store.search("john-doe", "blue whales", top_k=10)) == ["k2"]
    assert store.get("john_doe", "k2") is None


def test_namespace_without_items_is_not_listed(store):
    store.put("a", "k", "text here")
    store.delete("a", "k")
    assert store.namespaces() == []
    store.put("b", "k", "text here")
    assert store.clear("b") == 1
    assert store.namespaces() == [] and store.count("b") == 0


def test_strict_lookups_name_the_nearest_namespace(store):
    """``missing_ok=False``: a namespace holding nothing raises UnknownNamespaceError (an
    InvalidNamespaceError, a ValueError) with a did-you-mean; the default stays lenient."""
    store.put("notes", "k", "buy milk on the way home")
    store.put(("agent", "chat"), "c", "the kettle is in the left cupboard")
    assert store.search("note", "milk") == [] and store.get("note", "k") is None
    with pytest.raises(UnknownNamespaceError, match="did you mean 'notes'") as err:
        store.search("note", "milk", missing_ok=False)
    assert isinstance(err.value, ValueError)
    with pytest.raises(UnknownNamespaceError, match="did you mean 'notes'"):
        store.get("note", "k", missing_ok=False)
    with pytest.raises(UnknownNamespaceError, match=r'\["agent", "chat"\]'):
        store.search("chat", "kettle", missing_ok=False)       # a SemanticMemory mode's prefix
    store.delete("notes", "k")                                  # emptied: strict again
    with pytest.raises(UnknownNamespaceError):
        store.get("notes", "k", missing_ok=False)
    assert store.get(("agent", "chat"), "c", missing_ok=False).key == "c"
    assert [h.key for h in store.search(("agent", "chat"), "kettle", missing_ok=False)] == ["c"]


def test_clear_only_that_namespace(store):
    fill(store, ("a",), 3)
    fill(store, ("a", "b"), 2)
    fill(store, ("c",), 1)
    assert store.clear("a") == 3
    assert store.count("a") == 0 and store.count(("a", "b")) == 2 and store.count("c") == 1
    assert store.search("a", "apple river robot", top_k=10) == []
    assert store.clear("never-used") == 0


# --------------------------------------------------------------------------- replace

def test_replace_keeps_created_at_bumps_updated_at(store, clock):
    first = store.put("ns", "k", "apple river robot", importance=0.2, metadata={"v": 1})
    clock.advance(50.0)
    second = store.put("ns", "k", "zebra walrus yak", importance=0.9, metadata={"w": 2})
    assert second.created_at == first.created_at == clock.t - 50.0
    assert second.updated_at == clock.t > first.updated_at
    g = store.get("ns", "k")
    assert (g.text, g.importance, dict(g.metadata)) == ("zebra walrus yak", 0.9, {"w": 2})
    assert g.created_at == first.created_at and g.updated_at == clock.t
    assert store.count("ns") == 1


def test_replaced_text_and_vector_never_match_again(store, case):
    store.put("ns", "k", "apple river robot kitchen")
    store.put("ns", "other", "battery door garden")
    store.put("ns", "k", "zebra walrus yak")
    hits = store.search("ns", "apple river robot kitchen", top_k=5, threshold=0.3)
    assert hits == []
    hits = store.search("ns", "zebra walrus yak", top_k=1)
    assert keys(hits) == ["k"] and hits[0].similarity == pytest.approx(1.0, abs=1e-5)


def test_replace_with_vector_replaces_vector(store, case):
    if not case.vectors:
        pytest.skip("lexical store keeps no vectors (see test_lexical_store_rejects_vectors)")
    rng = np.random.default_rng(1)
    v1, v2 = unit(rng), unit(rng)
    store.put("ns", "k", "same text", vector=v1)
    store.put("ns", "k", "same text", vector=v2)
    hit = store.search("ns", "anything", query_vector=v1, top_k=1)[0]
    assert hit.similarity == pytest.approx(float(v1 @ v2), abs=1e-5)
    hit = store.search("ns", "anything", query_vector=v2, top_k=1)[0]
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)


# --------------------------------------------------------------------------- delete

def test_delete(store):
    store.put("ns", "k", "apple river")
    assert store.delete("ns", "k") is True
    assert store.delete("ns", "k") is False
    assert store.delete("other", "k") is False
    assert store.get("ns", "k") is None
    assert store.search("ns", "apple river") == []


def test_delete_then_search_returns_k_live_items(store):
    fill(store, "ns", 30)
    query = "apple river robot kitchen battery"
    before = store.search("ns", query, top_k=5, touch=False)
    assert len(before) == 5
    for h in before:
        assert store.delete("ns", h.key)
    after = store.search("ns", query, top_k=5, touch=False)
    assert len(after) == 5
    assert not set(keys(after)) & set(keys(before))
    assert all(store.get("ns", k) is not None for k in keys(after))
    assert store.count("ns") == 25


def test_deleted_then_reput_key_is_new(store, clock):
    m1 = store.put("ns", "k", "apple")
    store.delete("ns", "k")
    clock.advance(10)
    m2 = store.put("ns", "k", "river")
    assert m2.created_at == clock.t != m1.created_at
    assert keys(store.search("ns", "river")) == ["k"]


# --------------------------------------------------------------------------- search contract

def test_top_k_larger_than_namespace_returns_all_live(store):
    fill(store, "ns", 7)
    store.delete("ns", "k3")
    hits = store.search("ns", "apple river", top_k=100)
    assert sorted(keys(hits)) == sorted(f"k{i}" for i in range(7) if i != 3)
    assert all(math.isfinite(h.score) for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_threshold_applies_to_similarity(store):
    fill(store, "ns", 12)
    allhits = store.search("ns", "apple robot door", top_k=100, touch=False)
    hits = store.search("ns", "apple robot door", top_k=100, threshold=0.2, touch=False)
    assert keys(hits) == [h.key for h in allhits if h.similarity >= 0.2]
    assert hits and all(h.similarity >= 0.2 for h in hits)


@pytest.mark.parametrize("bad_top_k", [0, -3, 1.5, "3", True, None])
def test_bad_top_k_raises(store, bad_top_k):
    store.put("ns", "k", "text")
    with pytest.raises(ValueError):
        store.search("ns", "text", top_k=bad_top_k)


def test_nan_weights_and_bad_threshold_raise(store):
    store.put("ns", "k", "text")
    with pytest.raises(ValueError):
        DecayWeights(w_recency=float("nan"))
    with pytest.raises(ValueError):
        DecayWeights(half_life=0.0)
    with pytest.raises(TypeError):
        store.search("ns", "text", weights={"w_similarity": 1.0})
    with pytest.raises(ValueError):
        store.search("ns", "text", threshold=float("nan"))


@pytest.mark.parametrize("flt", [{"a": ["x", "y"]}, {"a": {"$regex": "x"}},
                                 {"a": {"$in": 3}}, ["a"]])
def test_unknown_filter_operator_raises(store, flt):
    store.put("ns", "k", "text", metadata={"a": 1})
    with pytest.raises(ValueError):
        store.search("ns", "text", filter=flt)


@pytest.mark.parametrize("q", ["", "   ", "\n\t "])
def test_empty_query_returns_empty(store, q):
    fill(store, "ns", 3)
    assert store.search("ns", q, top_k=3) == []
    assert store.search(MemoryQuery("ns", q)) == []


def test_query_with_no_known_tokens_returns_empty(store):
    fill(store, "ns", 3)
    assert store.search("ns", "!!! ??? ...", top_k=3) == []


def test_query_object_and_keyword_forms_agree(store):
    fill(store, "ns", 10)
    a = store.search("ns", "robot door", top_k=4, threshold=0.1, touch=False)
    b = store.search(MemoryQuery("ns", "robot door", top_k=4, threshold=0.1, touch=False))
    assert a == b and a
    with pytest.raises(TypeError):
        store.search(MemoryQuery("ns", "x"), "y")
    with pytest.raises(TypeError):
        store.search("ns")


def test_filter_applied_before_top_k(store):
    # 20 strong matches without the tag, 6 weak matches with it.
    for i in range(20):
        store.put("ns", f"strong{i}", f"robot door kitchen {i}", metadata={"color": "blue"})
    for i in range(6):
        store.put("ns", f"weak{i}", f"robot lamp {i}", metadata={"color": "red", "n": i})
    hits = store.search("ns", "robot door kitchen", top_k=5, filter={"color": "red"})
    assert len(hits) == 5 and all(h.key.startswith("weak") for h in hits)
    hits = store.search("ns", "robot door kitchen", top_k=50, filter={"n": {"$in": [1, 4, 9]}})
    assert sorted(keys(hits)) == ["weak1", "weak4"]
    hits = store.search("ns", "robot door kitchen", top_k=50, filter={"color": {"$ne": "blue"}})
    assert sorted(keys(hits)) == sorted(f"weak{i}" for i in range(6))
    hits = store.search("ns", "robot door kitchen", top_k=50,
                        filter={"color": "red", "n": {"$ne": 2}})
    assert sorted(keys(hits)) == sorted(f"weak{i}" for i in range(6) if i != 2)
    assert store.search("ns", "robot", top_k=5, filter={"missing": 1}) == []


def test_ne_filter_matches_items_without_the_key(store):
    store.put("ns", "tagged", "robot door", metadata={"c": 1})
    store.put("ns", "untagged", "robot door")
    assert keys(store.search("ns", "robot door", top_k=5, filter={"c": {"$ne": 1}})) == ["untagged"]


def test_ranking_uses_weights_and_clock(store, clock):
    store.put("ns", "old", "robot door kitchen", importance=0.0)
    clock.advance(3600.0)
    store.put("ns", "new", "robot door kitchen", importance=0.0)
    w = DecayWeights(w_similarity=1.0, w_recency=1.0, w_importance=0.0, half_life=3600.0)
    hits = store.search("ns", "robot door kitchen", top_k=2, weights=w, touch=False)
    assert keys(hits) == ["new", "old"]
    assert hits[0].recency == pytest.approx(1.0) and hits[1].recency == pytest.approx(0.5)
    assert hits[1].score == pytest.approx(hits[1].similarity + 0.5, abs=1e-5)
    store.put("ns", "imp", "robot door kitchen", importance=1.0)
    w = DecayWeights(w_similarity=1.0, w_recency=0.0, w_importance=0.5)
    hits = store.search("ns", "robot door kitchen", top_k=3, weights=w, touch=False)
    assert hits[0].key == "imp"
    assert hits[0].score == pytest.approx(hits[0].similarity + 0.5, abs=1e-5)
    # future last_accessed_at counts as age 0
    clock.advance(-7200.0)
    hits = store.search("ns", "robot door kitchen", top_k=3, weights=SIM_ONLY, touch=False)
    assert all(h.recency == 1.0 for h in hits)


def test_hit_fields(store, clock):
    store.put(("a", "b"), "k", "robot door", importance=0.25, metadata={"x": 1})
    h = store.search(("a", "b"), "robot door", top_k=1)[0]
    assert (h.key, h.text, h.importance, dict(h.metadata), h.namespace) == (
        "k", "robot door", 0.25, {"x": 1}, ("a", "b"))
    assert h.tier in (MemoryTier.SHORT, MemoryTier.LONG)
    assert h.created_at == clock.t and -1.0 <= h.similarity <= 1.0 + 1e-6
    h.metadata["x"] = 99  # results are copies
    assert store.get(("a", "b"), "k").metadata == {"x": 1}


# --------------------------------------------------------------------------- touch

def test_search_touches_only_returned(store, clock):
    store.put("ns", "hit", "robot door kitchen")
    store.put("ns", "miss", "zebra walrus yak")
    clock.advance(100.0)
    hits = store.search("ns", "robot door kitchen", top_k=1)
    assert keys(hits) == ["hit"]
    assert hits[0].last_accessed_at == clock.t - 100.0  # the value ranking used
    g = store.get("ns", "hit")
    assert g.last_accessed_at == clock.t and g.access_count == 1
    assert g.updated_at == clock.t - 100.0
    m = store.get("ns", "miss")
    assert m.last_accessed_at == clock.t - 100.0 and m.access_count == 0
    clock.advance(5.0)
    store.search("ns", "robot door kitchen", top_k=1)
    assert store.get("ns", "hit").access_count == 2
    assert store.get("ns", "hit").last_accessed_at == clock.t


def test_touch_false_peeks_and_get_never_touches(store, clock):
    store.put("ns", "k", "robot door")
    clock.advance(10.0)
    store.search("ns", "robot door", touch=False)
    store.search(MemoryQuery("ns", "robot door", touch=False))
    store.get("ns", "k")
    g = store.get("ns", "k")
    assert g.access_count == 0 and g.last_accessed_at == clock.t - 10.0


def test_read_path_deletes_nothing(store, clock):
    fill(store, "ns", 10)
    for _ in range(5):
        clock.advance(10**7)
        store.search("ns", "apple river", top_k=3)
    assert store.count("ns") == 10


def test_replace_keeps_access_count(store, clock):
    store.put("ns", "k", "robot door")
    store.search("ns", "robot door")
    store.search("ns", "robot door")
    clock.advance(1.0)
    m = store.put("ns", "k", "robot door again")
    assert m.access_count == 2 and m.last_accessed_at == clock.t
    assert store.get("ns", "k").access_count == 2


# --------------------------------------------------------------------------- vectors

def test_precomputed_vector_put_and_query(store, case, emb):
    if not case.vectors:
        pytest.skip("lexical store keeps no vectors")
    rng = np.random.default_rng(0)
    vs = [unit(rng) for _ in range(5)]
    for i, v in enumerate(vs):
        store.put("ns", f"v{i}", f"text {i}", vector=v * 3.0)  # normalised on the way in
    calls = emb.calls
    hit = store.search("ns", "whatever words", query_vector=vs[2], top_k=1)[0]
    assert emb.calls == calls  # the query was not encoded
    assert hit.key == "v2" and hit.similarity == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("bad, err", [
    (np.full(DIM, np.nan, np.float32), InvalidVectorError),
    (np.r_[np.ones(DIM - 1), np.inf], InvalidVectorError),
    (np.zeros(DIM), InvalidVectorError),
    (np.ones(DIM + 1), DimensionMismatchError),
    (np.ones((1, DIM)), DimensionMismatchError),
    ("not a vector", InvalidVectorError),
])
def test_bad_vectors_rejected_before_anything_changes(store, case, bad, err):
    if not case.vectors:
        pytest.skip("lexical store keeps no vectors")
    store.put("ns", "k", "original text", importance=0.3)
    with pytest.raises(err):
        store.put("ns", "k", "new text", vector=bad)
    with pytest.raises(err):
        store.put("ns", "fresh", "new text", vector=bad)
    with pytest.raises(err):
        store.search("ns", "original text", query_vector=bad)
    assert store.get("ns", "k").text == "original text" and store.get("ns", "fresh") is None
    assert store.count("ns") == 1


def test_put_many_bad_row_changes_nothing(store, case):
    items = [MemoryItem(f"k{i}", f"text {i}") for i in range(4)]
    if case.vectors:
        vs = np.random.default_rng(0).standard_normal((4, DIM)).astype(np.float32)
        vs[2, 5] = np.nan
        with pytest.raises(InvalidVectorError):
            store.put_many("ns", items, vectors=vs)
        with pytest.raises(DimensionMismatchError):
            store.put_many("ns", items, vectors=vs[:, :-1])
        with pytest.raises(ValueError):
            store.put_many("ns", items, vectors=np.ones((3, DIM)))
    with pytest.raises(ValueError):
        store.put_many("ns", items + [MemoryItem("bad", "x", importance=2.0)])
    with pytest.raises(TypeError):
        store.put_many("ns", items + [("k9", "not an item")])
    assert store.count("ns") == 0 and store.namespaces() == []


def test_lexical_store_rejects_vectors(clock):
    stm = ShortTermMemory(capacity=10, clock=clock)
    with pytest.raises(InvalidVectorError):
        stm.put("ns", "k", "text", vector=np.ones(8))
    with pytest.raises(InvalidVectorError):
        stm.put_many("ns", [MemoryItem("k", "text")], vectors=np.ones((1, 8)))
    stm.put("ns", "k", "text")
    with pytest.raises(InvalidVectorError):
        stm.search("ns", "text", query_vector=np.ones(8))


# --------------------------------------------------------------------------- put_many

def test_put_many_one_embedder_call(store, case, emb):
    items = [MemoryItem(f"k{i}", f"robot {WORDS[i]} number{i}", importance=i / 10,
                        metadata={"i": i}) for i in range(8)]
    calls = emb.calls
    out = store.put_many("ns", items)
    if case.vectors:
        assert emb.calls == calls + 1
    assert [m.key for m in out] == [it.key for it in items]
    assert store.count("ns") == 8
    for it in items:
        g = store.get("ns", it.key)
        assert (g.text, g.importance, dict(g.metadata)) == (it.text, it.importance, it.metadata)
    assert store.put_many("ns", []) == []
    hits = store.search("ns", "robot kitchen number3", top_k=1)
    assert keys(hits) == ["k3"]


def test_put_many_with_vectors_skips_embedder(store, case, emb):
    if not case.vectors:
        pytest.skip("lexical store keeps no vectors")
    vs = np.random.default_rng(3).standard_normal((6, DIM)).astype(np.float32)
    calls = emb.calls
    store.put_many("ns", [MemoryItem(f"k{i}", f"t{i}") for i in range(6)], vectors=vs)
    assert emb.calls == calls
    hit = store.search("ns", "q", query_vector=vs[4], top_k=1)[0]
    assert hit.key == "k4" and hit.similarity == pytest.approx(1.0, abs=1e-5)


def test_put_many_repeated_key_last_wins(store):
    store.put_many("ns", [MemoryItem("k", "first"), MemoryItem("j", "other"),
                          MemoryItem("k", "second")])
    assert store.get("ns", "k").text == "second" and store.count("ns") == 2


# --------------------------------------------------------------------------- threads

def test_concurrent_writers_and_readers(store):
    errors = []
    n_writers, per_writer = 3, 40

    def writer(w):
        try:
            for i in range(per_writer):
                store.put("ns", f"w{w}-{i}", f"robot {WORDS[i % len(WORDS)]} writer{w}")
                if i % 10 == 9:
                    store.delete("ns", f"w{w}-{i - 5}")
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    def reader():
        try:
            for _ in range(60):
                for h in store.search("ns", "robot kitchen", top_k=5):
                    assert h.key.startswith("w")
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.count("ns") == n_writers * (per_writer - per_writer // 10)
    assert len(store.search("ns", "robot", top_k=1000)) == store.count("ns")


# =========================================================================== ShortTermMemory

def test_short_fifo_eviction_and_refresh(clock, emb):
    evicted = []
    stm = ShortTermMemory(capacity=3, embedder=emb, clock=clock,
                          on_evict=lambda ms, vs: evicted.append((keys(ms), vs.shape)))
    for k in "abc":
        stm.put("ns", k, f"text {k}")
    stm.put("ns", "a", "text a again")  # refresh: a becomes youngest
    stm.put("ns", "d", "text d")
    assert stm.keys("ns") == ["c", "a", "d"]
    assert evicted == [(["b"], (1, DIM))]
    assert stm.get("ns", "b") is None
    assert "b" not in keys(stm.search("ns", "text b", top_k=10))
    stm.put("other", "x", "text x")  # capacity is per namespace
    assert stm.count("ns") == 3 and stm.count("other") == 1


def test_short_eviction_handler_failure_aborts_put(clock, emb):
    def refuse(ms, vs):
        raise RuntimeError("long tier unavailable")

    stm = ShortTermMemory(capacity=2, embedder=emb, clock=clock, on_evict=refuse)
    stm.put("ns", "a", "text a")
    stm.put("ns", "b", "text b")
    with pytest.raises(RuntimeError):
        stm.put("ns", "c", "text c")
    assert stm.keys("ns") == ["a", "b"] and stm.get("ns", "c") is None
    stm.put("ns", "a", "replacing never evicts")
    assert stm.keys("ns") == ["b", "a"]


def test_short_put_many_beyond_capacity(clock, emb):
    evicted = []
    stm = ShortTermMemory(capacity=3, embedder=emb, clock=clock,
                          on_evict=lambda ms, vs: evicted.extend(keys(ms)))
    stm.put("ns", "old", "old text")
    stm.put_many("ns", [MemoryItem(f"k{i}", f"text {i}") for i in range(5)])
    assert stm.keys("ns") == ["k2", "k3", "k4"]
    assert evicted == ["old", "k0", "k1"]
    # rows are reused: the arrays never grow beyond capacity
    for i in range(50):
        stm.put("ns", f"z{i}", f"text z{i}")
    table = stm._tables[("ns",)]
    assert table.rows == 3 and int(table.columns.alive.sum()) == 3


def test_short_lexical_default_scorer(clock):
    stm = ShortTermMemory(capacity=10, clock=clock)
    stm.put("ns", "dock", "return to the dock when the battery is low")
    stm.put("ns", "cat", "the cat sat on the mat")
    hits = stm.search("ns", "battery low", top_k=2)
    assert hits[0].key == "dock" and hits[0].similarity > 0
    assert hits[1].key == "cat" and hits[1].similarity == 0.0
    assert stm.search("ns", "battery", threshold=0.1, top_k=5)[0].key == "dock"
    assert len(stm.search("ns", "battery", threshold=0.1, top_k=5)) == 1


def test_short_injected_scorer_is_used(clock):
    class LengthScorer:
        def score_many(self, query, texts):
            return np.array([len(t) / 100 for t in texts], np.float32)

    stm = ShortTermMemory(capacity=10, scorer=LengthScorer(), clock=clock)
    stm.put("ns", "short", "ab")
    stm.put("ns", "long", "abcdefgh")
    hits = stm.search("ns", "anything", top_k=2)
    assert keys(hits) == ["long", "short"] and hits[0].similarity == pytest.approx(0.08)


def test_short_default_weights_are_pure_similarity(clock, emb):
    stm = ShortTermMemory(capacity=10, embedder=emb, clock=clock)
    assert stm.weights == DecayWeights.similarity()
    stm.put("ns", "k", "robot door", importance=1.0)
    h = stm.search("ns", "robot door")[0]
    assert h.score == pytest.approx(h.similarity, abs=1e-6)


@pytest.mark.parametrize("kwargs, err", [
    ({"capacity": 0}, ValueError), ({"capacity": 2.5}, ValueError),
    ({"capacity": True}, ValueError),
    ({"embedder": HashingEmbedder(dim=8), "scorer": object()}, ValueError),
    ({"scorer": object()}, TypeError), ({"embedder": object()}, TypeError),
    ({"clock": 3.0}, TypeError), ({"weights": (1, 0, 0)}, TypeError),
    ({"on_evict": "no"}, TypeError),
])
def test_short_constructor_validation(kwargs, err):
    with pytest.raises(err):
        ShortTermMemory(**{"capacity": 5, **kwargs})


def test_short_put_stored_keeps_lifecycle(clock, emb):
    a = ShortTermMemory(capacity=10, embedder=emb, clock=clock)
    m = a.put("ns", "k", "robot door", importance=0.8)
    a.search("ns", "robot door")
    clock.advance(100)
    m = a.get("ns", "k")
    b = ShortTermMemory(capacity=10, embedder=emb, clock=clock)
    with pytest.raises(InvalidVectorError):
        b.put_stored([m])  # an embedded store needs the vectors
    b.put_stored([m], emb.encode(["robot door"]))
    assert b.get("ns", "k") == m
    with pytest.raises(TypeError):
        b.put_stored(["not stored"], np.ones((1, DIM)))


# =========================================================================== TwoTierMemory

def two_tier(clock, emb, capacity=3, policy=PromotionPolicy(min_importance=0.6,
                                                              min_access_count=2)):
    short = ShortTermMemory(capacity=capacity, embedder=emb, clock=clock, weights=DecayWeights())
    long = LongTermMemory(None, emb, clock=clock, weights=DecayWeights())
    return TwoTierMemory(short, long, policy, hybrid=HybridWeights.similarity()), short, long


def test_tiered_consolidate_promotes_by_policy_keeping_lifecycle(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=10)
    mem.put("ns", "important", "robot door kitchen", importance=0.9)
    mem.put("ns", "used", "garden lamp window", importance=0.1)
    mem.put("ns", "idle", "coffee music", importance=0.1)
    for _ in range(2):
        mem.search("ns", "garden lamp window", top_k=1)
    clock.advance(60)
    before = {k: mem.get("ns", k) for k in ("important", "used")}
    calls = emb.calls
    assert mem.consolidate() == 2
    assert emb.calls == calls  # promoted vectors are not re-embedded
    assert short.keys("ns") == ["idle"]
    for k, m in before.items():
        g = mem.get("ns", k)
        assert g.tier is MemoryTier.LONG
        assert (g.created_at, g.updated_at, g.last_accessed_at, g.access_count, g.text) == (
            m.created_at, m.updated_at, m.last_accessed_at, m.access_count, m.text)
    hit = mem.search("ns", "robot door kitchen", top_k=1)[0]
    assert (hit.key, hit.tier) == ("important", MemoryTier.LONG)
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert mem.consolidate(now=clock.t + 5) == 0
    assert mem.stats()["last_consolidated_at"] == clock.t + 5
    with pytest.raises(ValueError):
        mem.consolidate(now=float("nan"))


def test_tiered_eviction_promotes_qualifying_and_forgets_the_rest(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=2)
    mem.put("ns", "keep", "robot door", importance=0.9)
    mem.put("ns", "drop", "garden lamp", importance=0.1)
    mem.put("ns", "c", "coffee", importance=0.1)
    mem.put("ns", "d", "music", importance=0.1)
    assert mem.get("ns", "keep").tier is MemoryTier.LONG
    assert mem.get("ns", "drop") is None  # forgotten: evicted without qualifying
    assert mem.count("ns") == 3
    st = mem.stats()
    assert st["promoted"] == 1 and st["forgotten"] == 1
    assert st["short"] == {("ns",): 2} and st["long"] == {("ns",): 1}


def test_tiered_short_wins_and_delete_removes_both(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=5)
    long.put("ns", "k", "stale long text about robots")
    short.put("ns", "k", "fresh short text about gardens")
    assert mem.get("ns", "k").text == "fresh short text about gardens"
    assert mem.count("ns") == 1
    assert mem.search("ns", "stale long text about robots", top_k=5, threshold=0.5) == []
    hits = mem.search("ns", "fresh short text about gardens", top_k=5)
    assert keys(hits) == ["k"] and hits[0].tier is MemoryTier.SHORT
    assert mem.delete("ns", "k") is True
    assert short.get("ns", "k") is None and long.get("ns", "k") is None
    assert mem.delete("ns", "k") is False


def test_tiered_shadowed_long_keys_do_not_shrink_results(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=10)
    for i in range(6):
        long.put("ns", f"k{i}", f"robot door kitchen {i}")
        short.put("ns", f"k{i}", f"zebra {i}")  # shadows every strong long match
    for i in range(6, 9):
        long.put("ns", f"k{i}", f"robot lamp {i}")
    hits = mem.search("ns", "robot door kitchen", top_k=3, touch=False)
    assert sorted(keys(hits)) == ["k6", "k7", "k8"]


def test_tiered_put_of_long_key_moves_it_keeping_created_at(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=5)
    first = mem.put("ns", "k", "robot door kitchen", importance=0.9)
    mem.search("ns", "robot door kitchen")
    mem.consolidate()
    assert mem.get("ns", "k").tier is MemoryTier.LONG
    clock.advance(30)
    m = mem.put("ns", "k", "garden lamp window", importance=0.1)
    assert m.created_at == first.created_at and m.access_count == 1 and m.updated_at == clock.t
    assert long.get("ns", "k") is None and mem.get("ns", "k") == m
    assert mem.search("ns", "robot door kitchen", top_k=5, threshold=0.5) == []


def test_tiered_search_encodes_once_and_touches_returned_only(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=10)
    long.put("ns", "L1", "robot door kitchen")
    long.put("ns", "L2", "zebra walrus")
    mem.put("ns", "S1", "robot door lamp")
    mem.put("ns", "S2", "coffee music")
    clock.advance(10)
    calls = emb.calls
    hits = mem.search("ns", "robot door kitchen", top_k=2)
    assert emb.calls == calls + 1
    assert keys(hits) == ["L1", "S1"] and [h.tier for h in hits] == [MemoryTier.LONG,
                                                                       MemoryTier.SHORT]
    assert [mem.get("ns", k).access_count for k in ("L1", "S1", "L2", "S2")] == [1, 1, 0, 0]
    assert mem.get("ns", "L1").last_accessed_at == clock.t
    qv = emb.encode(["robot door kitchen"])[0]
    assert mem.search("ns", "robot door kitchen", top_k=2, query_vector=qv, touch=False) == [
        mem.search("ns", "robot door kitchen", top_k=2, touch=False)][0]
    assert emb.calls == calls + 3  # the search above, encode() here, the text search


def test_tiered_uniform_formula_across_tiers(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=10)
    long.put("ns", "old", "robot door kitchen", importance=1.0)
    clock.advance(3600)
    mem.put("ns", "new", "robot door kitchen", importance=0.0)
    w = DecayWeights(w_similarity=1.0, w_recency=1.0, w_importance=0.0, half_life=3600.0)
    assert keys(mem.search("ns", "robot door kitchen", top_k=2, weights=w)) == ["new", "old"]
    w = DecayWeights(w_similarity=1.0, w_recency=0.0, w_importance=1.0)
    assert keys(mem.search("ns", "robot door kitchen", top_k=2, weights=w)) == ["old", "new"]


def test_tiered_requires_matching_embedders_and_clock(clock):
    e64, e32 = HashingEmbedder(dim=64), HashingEmbedder(dim=32)
    ec = HashingEmbedder(dim=64, mode="classic")
    long = LongTermMemory(None, e64, clock=clock)
    for other in (e32, ec):
        with pytest.raises(EmbedderMismatchError, match="hashing-unicode-v1"):
            TwoTierMemory(ShortTermMemory(capacity=5, embedder=other, clock=clock), long)
    with pytest.raises(EmbedderMismatchError):
        TwoTierMemory(ShortTermMemory(capacity=5, clock=clock), long)
    with pytest.raises(ValueError, match="clock"):
        TwoTierMemory(ShortTermMemory(capacity=5, embedder=e64, clock=FakeClock()), long)
    with pytest.raises(TypeError):
        TwoTierMemory(long, object())
    with pytest.raises(TypeError):
        TwoTierMemory(ShortTermMemory(capacity=5, embedder=e64, clock=clock), long, policy=0.5)


def test_tiered_failing_long_tier_keeps_short_intact(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=2)

    def broken(rows):
        raise OSError("disk full")

    long.write = broken     # the tier protocol's write: how promotions land
    mem.put("ns", "a", "robot", importance=0.9)
    mem.put("ns", "b", "door", importance=0.9)
    with pytest.raises(OSError):
        mem.consolidate()
    with pytest.raises(OSError):
        mem.put("ns", "c", "garden")  # would evict 'a', which must be promoted
    assert short.keys("ns") == ["a", "b"] and mem.get("ns", "c") is None


def test_text_without_content_is_stored_and_never_matches(store, clock):
    store.put("ns", "empty", "!!! ...", importance=0.9)
    store.put("ns", "k", "robot door")
    assert store.get("ns", "empty").text == "!!! ..."
    hits = store.search("ns", "robot door", top_k=5)
    assert hits[0].key == "k"
    assert all(h.similarity == 0.0 for h in hits if h.key == "empty")
    assert store.count("ns") == 2


def test_tiered_moves_text_without_content_between_tiers(clock, emb):
    mem, short, long = two_tier(clock, emb, capacity=1)
    mem.put("ns", "empty", "...", importance=0.9)
    mem.put("ns", "k", "robot door", importance=0.9)  # evicts 'empty': promoted, zero vector
    assert mem.get("ns", "empty").tier is MemoryTier.LONG
    mem.put("ns", "empty", "... !!!", importance=0.9)  # moves it back; evicts 'k' to long
    assert mem.get("ns", "empty").tier is MemoryTier.SHORT and mem.count("ns") == 2
    assert mem.get("ns", "k").tier is MemoryTier.LONG and long.get("ns", "empty") is None


def test_short_batch_that_evicts_a_re_put_key_removes_its_old_version(clock, emb):
    """A batch re-putting old keys past capacity evicts the oldest batch keys, old rows
    included (the pre-core code left the evicted key's old version in the FIFO)."""
    evicted = []
    stm = ShortTermMemory(capacity=2, embedder=emb, clock=clock,
                          on_evict=lambda ms, vs: evicted.extend((m.key, m.text) for m in ms))
    stm.put("ns", "a", "old a")
    stm.put("ns", "b", "old b")
    stm.put_many("ns", [MemoryItem("a", "new a"), MemoryItem("b", "new b"),
                        MemoryItem("c", "new c")])
    assert stm.keys("ns") == ["b", "c"] and stm.count("ns") == 2
    assert stm.get("ns", "a") is None and stm.get("ns", "b").text == "new b"
    assert evicted == [("a", "new a")]
    assert "a" not in [h.key for h in stm.search("ns", "old a", top_k=5)]


class NaNEmbedder:
    """An embedder gone wrong: NaN vectors."""

    name, dim = "hashing-64", DIM

    def encode(self, texts, *, batch_size=4096):
        return np.full((len(texts), DIM), np.nan, np.float32)


@pytest.mark.parametrize("build", [
    lambda e, c: ShortTermMemory(capacity=10, embedder=e, clock=c),
    lambda e, c: LongTermMemory(embedder=e, clock=c),
], ids=["short", "long"])
def test_broken_embedder_output_is_refused_by_every_store(build, clock):
    """Every store checks an embedder's output once (the short tier used to store NaN vectors,
    which surfaced only at promotion); nothing is stored."""
    store = build(NaNEmbedder(), clock)
    with pytest.raises(InvalidVectorError, match="NaN"):
        store.put("ns", "k", "robot door")
    with pytest.raises(InvalidVectorError, match="NaN"):
        store.put_many("ns", [MemoryItem("a", "x y"), MemoryItem("b", "z")])
    assert store.count("ns") == 0


@pytest.mark.parametrize("when", [1.7e9, 1_700_000_000, np.float32(1.7e9), np.float64(1.7e9),
                                  np.int64(1_700_000_000)])
def test_put_stored_takes_any_finite_number_as_a_timestamp(store, case, when):
    m = StoredMemory(("ns",), "k", "robot door", 0.5, {}, when, when, when, 0, MemoryTier.SHORT)
    vecs = np.ones((1, DIM), np.float32) if case.vectors else None
    store.put_stored([m], vecs)
    assert store.get("ns", "k").created_at == float(when)


@pytest.mark.parametrize("when", [True, float("nan"), float("inf"), "1.7e9", None])
def test_put_stored_refuses_bools_and_non_finite_timestamps(store, case, when):
    m = StoredMemory(("ns",), "k", "robot door", 0.5, {}, 1.7e9, when, 1.7e9, 0, MemoryTier.SHORT)
    vecs = np.ones((1, DIM), np.float32) if case.vectors else None
    with pytest.raises(InvalidArgumentError, match="updated_at"):
        store.put_stored([m], vecs)
    assert store.count("ns") == 0
