"""Search filters: operators on metadata and lifecycle columns, as a mask inside ranking.

The property test compares every store's ``search(..., filter=...)`` with a brute-force oracle
written independently here: filter each live memory by the documented rules, score it with the
fused formula in float64, sort. A filter is never a post-filter: ``top_k`` matching memories
come back whenever that many exist.
"""

from __future__ import annotations

import math
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memcore import DecayWeights, HashingEmbedder, LongTermMemory, MemoryItem, ShortTermMemory
from memcore.errors import InvalidArgumentError, MemcoreError
from store_helpers import STORE_CASES, FakeClock, make_store

W = DecayWeights(w_similarity=1.0, w_recency=0.3, w_importance=0.2, half_life=50.0)
WORDS = ["red", "door", "dock", "robot", "kitchen", "battery", "dog", "noon"]


# ------------------------------------------------------------------ the oracle

def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _eq(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(_eq(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b)
                and all(_eq(a[k], b[k]) for k in a))
    return a == b


def _cmp(have, op, x):
    if not ((_num(have) and _num(x)) or (isinstance(have, str) and isinstance(x, str))):
        return False
    return {"$gt": have > x, "$gte": have >= x, "$lt": have < x, "$lte": have <= x}[op]


def oracle_match(value, present, cond):
    if isinstance(cond, dict) and cond and all(k.startswith("$") for k in cond):
        for op, x in cond.items():
            if op == "$eq":
                ok = present and _eq(value, x)
            elif op == "$ne":
                ok = not (present and _eq(value, x))
            elif op == "$in":
                ok = present and any(_eq(value, y) for y in x)
            elif op == "$nin":
                ok = not (present and any(_eq(value, y) for y in x))
            else:
                ok = present and _cmp(value, op, x)
            if not ok:
                return False
        return True
    if isinstance(cond, dict):
        return present and isinstance(value, dict) and all(
            oracle_match(value.get(k), k in value, c) for k, c in cond.items())
    return present and _eq(value, cond)


def oracle_matches(memory, flt):
    for k, cond in (flt or {}).items():
        if k.startswith("$"):
            v = getattr(memory, k[1:])
            if k == "$importance":
                v, cond = float(np.float32(v)), _f32(cond)
            if not oracle_match(v, True, cond):
                return False
        elif not oracle_match(memory.metadata.get(k), k in memory.metadata, cond):
            return False
    return True


def _f32(cond):
    if isinstance(cond, dict):
        return {op: ([float(np.float32(y)) for y in x] if isinstance(x, list)
                     else float(np.float32(x))) for op, x in cond.items()}
    return float(np.float32(cond))


def oracle_rank(store, emb, ns, text, flt, now):
    """{key: score} of every live memory of ``ns`` matching ``flt`` (float64 fused score)."""
    q = emb.encode([text])[0].astype(np.float64)
    out = {}
    for key in store.keys(ns):
        m = store.get(ns, key)
        if not oracle_matches(m, flt):
            continue
        sim = float(store.vector(ns, key).astype(np.float64) @ q)
        age = max(now - m.last_accessed_at, 0.0)
        out[key] = (W.w_similarity * sim + W.w_recency * 0.5 ** (age / W.half_life)
                    + W.w_importance * float(np.float32(m.importance)))
    return out


def check_against_oracle(hits, want, top_k, tol=2e-5):
    assert len(hits) == min(top_k, len(want)), (len(hits), top_k, len(want))
    scores = [h.score for h in hits]
    assert all(a >= b - 1e-7 for a, b in zip(scores, scores[1:]))
    for h in hits:
        assert h.key in want, f"{h.key} does not match the filter"
        assert abs(h.score - want[h.key]) <= tol
    if hits:
        returned = {h.key for h in hits}
        last = hits[-1].score
        for key, s in want.items():
            assert key in returned or s <= last + tol, (key, s, last)


# ------------------------------------------------------------------ strategies

scalars = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 2.5, -1.5]),
                    st.sampled_from(["a", "b", "2026-01-01", "2026-06-30"]), st.booleans(),
                    st.none())
values = st.one_of(scalars, st.lists(st.integers(0, 2), max_size=2),
                   st.fixed_dictionaries({"floor": st.integers(0, 2)}))
metadatas = st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3)
ops = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"])


@st.composite
def conditions(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(scalars)
    if kind == 1:
        return {"floor": draw(st.one_of(st.integers(0, 2), st.fixed_dictionaries(
            {"$gte": st.integers(0, 2)})))}
    conds = {}
    for op in draw(st.lists(ops, min_size=1, max_size=2, unique=True)):
        if op in ("$in", "$nin"):
            conds[op] = draw(st.lists(values, max_size=3))
        elif op in ("$eq", "$ne"):
            conds[op] = draw(values)
        else:
            conds[op] = draw(st.one_of(st.integers(-3, 3), st.sampled_from(["a", "2026-03-01"])))
    return conds


@st.composite
def column_conditions(draw, lo, hi):
    conds = {}
    for op in draw(st.lists(st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$ne"]),
                            min_size=1, max_size=2, unique=True)):
        conds[op] = draw(st.floats(lo, hi))
    return conds


@st.composite
def filters(draw, t0, t1):
    flt = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), conditions(), max_size=2))
    if draw(st.booleans()):
        flt["$created_at"] = draw(column_conditions(t0 - 1, t1 + 1))
    if draw(st.integers(0, 3)) == 0:
        flt["$importance"] = draw(st.one_of(column_conditions(0.0, 1.0),
                                            st.sampled_from([0.0, 0.5, 1.0])))
    return flt


CASES = [c for c in STORE_CASES if c.vectors] + ["disk"]
PG_CASES = [c for c in STORE_CASES if c.id == "postgres"]


def pg_slow(cases):
    """``cases`` with the PostgreSQL one in the slow tier (a fresh schema per example is the
    cost); each property below runs it with a few examples in the default run as well."""
    return [pytest.param(c, marks=pytest.mark.slow) if c in PG_CASES else c for c in cases]


def case_id(c):
    return c if isinstance(c, str) else c.id


@pytest.mark.parametrize("case", pg_slow(CASES), ids=case_id)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_filtered_search_matches_brute_force_oracle(case, data):
    n = data.draw(st.integers(0, 24), label="n")
    metas = data.draw(st.lists(metadatas, min_size=n, max_size=n), label="metadata")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    tmp = None
    if case == "disk":
        tmp = tempfile.TemporaryDirectory()
        store = LongTermMemory(tmp.name, emb, clock=clock, weights=W, durability="none")
    else:
        store = make_store(case, clock, emb)
    try:
        t0 = clock()
        for i, meta in enumerate(metas):
            clock.advance(float(rng.choice([0.0, 1.0, 7.5])))
            store.put("ns", f"k{i}", " ".join(rng.choice(WORDS, 3)),
                      importance=float(rng.choice([0.0, 0.5, 1.0, rng.random()])),
                      metadata=meta)
        if n and data.draw(st.booleans()):
            store.delete("ns", f"k{int(rng.integers(0, n))}")
        clock.advance(10.0)
        flt = data.draw(filters(t0, clock()), label="filter")
        text = " ".join(rng.choice(WORDS, 2))
        top_k = data.draw(st.integers(1, 8), label="top_k")
        for _ in range(2):     # the second pass reuses a disk table's cached filter mask
            want = oracle_rank(store, emb, "ns", text, flt, clock())
            hits = store.search("ns", text, top_k=top_k, filter=flt, weights=W, touch=False)
            check_against_oracle(hits, want, top_k)
    finally:
        if tmp is not None:
            store.close()
            tmp.cleanup()


@pytest.mark.parametrize("case", PG_CASES, ids=case_id)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_filtered_search_matches_brute_force_oracle_quick(case, data):
    """The PostgreSQL case of the property above with 8 examples (60 in the slow tier)."""
    test_filtered_search_matches_brute_force_oracle.hypothesis.inner_test(case, data)


def test_filter_is_a_mask_inside_ranking_on_the_codes_path():
    """From SCAN_MIN_ROWS rows the similarity preset ranks from int8 codes: the filter and the
    time range still mask inside the scan (top_k matches come back, as the oracle ranks)."""
    from memcore.core.rank import SCAN_MIN_ROWS

    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    ltm = LongTermMemory(embedder=emb, clock=clock, weights=W)
    rng = np.random.default_rng(7)
    n = SCAN_MIN_ROWS + 100
    items = [MemoryItem(f"k{i}", " ".join(rng.choice(WORDS, 4)), float(rng.random()),
                        {"room": ["kitchen", "hall", "lab"][i % 3], "n": i}) for i in range(n)]
    for start in range(0, n, 500):
        ltm.put_many("ns", items[start:start + 500])
        clock.advance(100.0)
    t0 = 1_700_000_000.0
    for flt in ({"room": "lab"}, {"n": {"$gte": 1000, "$lt": 1010}},
                {"room": {"$nin": ["lab", "hall"]}, "$created_at": {"$gte": t0 + 200}},
                {"$created_at": {"$lt": t0 + 100}}):
        want = oracle_rank(ltm, emb, "ns", "red dock robot", flt, clock())
        hits = ltm.search("ns", "red dock robot", top_k=7, filter=flt, touch=False)
        check_against_oracle(hits, want, 7, tol=3e-5)


def test_filter_never_returns_fewer_than_top_k_matches():
    stm = ShortTermMemory(capacity=100, embedder=HashingEmbedder(dim=32))
    for i in range(40):   # the best matches of the text are all filtered out
        stm.put("r", f"a{i}", "red door robot", metadata={"keep": False})
    for i in range(5):
        stm.put("r", f"b{i}", "battery at noon", metadata={"keep": True})
    hits = stm.search("r", "red door robot", top_k=5, filter={"keep": True})
    assert sorted(h.key for h in hits) == [f"b{i}" for i in range(5)]


def test_time_range_filter_on_created_at():
    clock = FakeClock(1000.0)
    ltm = LongTermMemory(embedder=HashingEmbedder(dim=32), clock=clock)
    for day in range(5):
        ltm.put("log", f"d{day}", f"robot patrol report day {day}")
        clock.advance(86_400.0)
    today = {"$created_at": {"$gte": 1000.0 + 3 * 86_400, "$lt": 1000.0 + 4 * 86_400}}
    assert [h.key for h in ltm.search("log", "patrol report", top_k=5, filter=today)] == ["d3"]
    # re-putting a key keeps created_at: it still belongs to its day
    ltm.put("log", "d1", "robot patrol report day 1, corrected")
    day1 = {"$created_at": {"$gte": 1000.0 + 86_400, "$lt": 1000.0 + 2 * 86_400}}
    assert [h.key for h in ltm.search("log", "patrol", top_k=5, filter=day1)] == ["d1"]
    assert [h.key for h in ltm.search("log", "patrol", top_k=5,
                                      filter={"$updated_at": {"$gt": clock() - 1}})] == ["d1"]


@pytest.mark.parametrize("flt, match", [
    ({"room": ["a", "b"]}, "list value is ambiguous"),
    ({"room": {"$in": "a"}}, "needs a list"),
    ({"room": {"$gt": True}}, "finite number or a str"),
    ({"room": {"$gt": [1]}}, "finite number or a str"),
    ({"room": {"$regex": "a"}}, "unknown filter operator"),
    ({"room": {"$eq": "a", "floor": 1}}, "mixes operators"),
    ({"$room": "a"}, "unknown filter key"),
    ({"$created_at": "today"}, "finite numbers"),
    ({"$created_at": {"$gte": math.nan}}, "finite number"),
    ({"$created_at": {"floor": 1}}, "column takes"),
    ({"room": {"$eq": float("inf")}}, "must be JSON"),
    ({"room": {"$eq": object()}}, "must be JSON"),
    ({1: "a"}, "keys must be str"),
    (["room"], "must be a dict"),
])
def test_malformed_filters_raise(flt, match):
    stm = ShortTermMemory(capacity=5, embedder=HashingEmbedder(dim=16))
    stm.put("r", "k", "red door", metadata={"room": "a"})
    with pytest.raises(InvalidArgumentError, match=match) as err:
        stm.search("r", "red door", filter=flt)
    assert isinstance(err.value, (MemcoreError, ValueError))


def test_filter_semantics_spot_checks():
    stm = ShortTermMemory(capacity=20, embedder=HashingEmbedder(dim=16))
    metas = {"n1": {"n": 1}, "n2": {"n": 2.0}, "t": {"n": True}, "s": {"n": "2"},
             "none": {}, "nested": {"pos": {"floor": 2, "room": "lab"}}, "list": {"n": [1, 2]}}
    for key, meta in metas.items():
        stm.put("r", key, f"memory {key}", metadata=meta)

    def keys(flt):
        return sorted(h.key for h in stm.search("r", "memory", top_k=20, filter=flt))

    assert keys({"n": 1}) == ["n1"]                           # True is not 1
    assert keys({"n": True}) == ["t"]
    assert keys({"n": {"$gte": 1}}) == ["n1", "n2"]           # numbers only
    assert keys({"n": {"$gt": "1"}}) == ["s"]                 # str with str
    assert keys({"n": {"$ne": 1}}) == ["list", "n2", "nested", "none", "s", "t"]
    assert keys({"n": {"$nin": [1, 2]}}) == ["list", "nested", "none", "s", "t"]
    assert keys({"n": {"$in": [2, "x"]}}) == ["n2"]
    assert keys({"n": {"$eq": [1, 2]}}) == ["list"]
    assert keys({"pos": {"floor": {"$gte": 2}}}) == ["nested"]
    assert keys({"pos": {"floor": 3}}) == []


@settings(max_examples=300, deadline=None)
@given(meta=metadatas, flt=st.dictionaries(st.sampled_from(["a", "b", "c"]), conditions(),
                                           max_size=3))
def test_compiled_predicate_equals_the_matcher_and_the_oracle(meta, flt):
    from memcore import _validate

    flt = _validate.metadata_filter(flt)
    want = all(oracle_match(meta.get(k), k in meta, c) for k, c in flt.items())
    assert _validate.matches_filter(meta, flt) == want
    assert _validate.filter_predicate(flt)(meta) == want


@pytest.mark.parametrize("case", pg_slow([c for c in STORE_CASES if c.vectors]), ids=case_id)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_kept_filter_masks_follow_writes_deletes_and_evictions(case, data):
    """A filter's mask is kept and updated by every write and removal: after any sequence of
    puts (replacing keys, evicting, reusing rows) and deletes, a repeated filtered search
    still ranks what the oracle ranks."""
    clock = FakeClock()
    emb = HashingEmbedder(dim=32)
    store = make_store(case, clock, emb)
    if hasattr(store, "capacity"):
        store.capacity = 6                   # evictions and reused rows
    flts = [{"a": {"$gte": 0}}, {"b": "a"}, {"c": {"$ne": 1}, "a": {"$lt": 2}}]
    for step in range(data.draw(st.integers(5, 30), label="steps")):
        key = f"k{data.draw(st.integers(0, 9), label='key')}"
        if data.draw(st.integers(0, 3), label="op") == 0:
            store.delete("ns", key)
        else:
            store.put("ns", key, " ".join(data.draw(st.lists(st.sampled_from(WORDS), min_size=1,
                                                             max_size=3), label="text")),
                      metadata=data.draw(metadatas, label="meta"))
        clock.advance(1.0)
        for flt in flts:
            want = oracle_rank(store, emb, "ns", "red door dock", flt, clock())
            hits = store.search("ns", "red door dock", top_k=4, filter=flt, weights=W,
                                touch=False)
            check_against_oracle(hits, want, 4)


@pytest.mark.parametrize("case", PG_CASES, ids=case_id)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_kept_filter_masks_follow_writes_deletes_and_evictions_quick(case, data):
    """The PostgreSQL case of the property above with 4 examples (25 in the slow tier)."""
    test_kept_filter_masks_follow_writes_deletes_and_evictions.hypothesis.inner_test(case, data)
