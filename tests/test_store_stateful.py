"""Each store against a plain-dict model, driven by hypothesis state machines.

The model keeps, per namespace, an ordered dict for the (bounded, FIFO) short tier and a dict
for the long tier; it re-implements eviction, promotion and the ranking formula by brute
force. Every ``get`` compares all fields, every ``search`` is checked against the brute-force
ranking (ties and threshold-boundary rows tolerated), and the namespace listing and counts are
checked after every step.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memcore import (
    DecayWeights,
    HybridWeights,
    LexicalScorer,
    LongTermMemory,
    MemoryItem,
    MemoryTier,
    PromotionPolicy,
    ShortTermMemory,
    TwoTierMemory,
)
from store_helpers import DIM, FakeClock, embedder

EPS = 2e-5
W = DecayWeights(w_similarity=1.0, w_recency=0.3, w_importance=0.2, half_life=50.0)
POLICY = PromotionPolicy(min_importance=0.6, min_access_count=2)

NAMESPACES = [("a",), ("a", "b"), ("a-b",)]
KEYS = ["k1", "k2", "k3", "k4", "k5", "k6"]
WORDS = ["robot", "door", "kitchen", "battery", "garden", "lamp", "dock", "red"]

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
# mostly real queries; sometimes one without semantic signal (must return [])
queries = st.integers(0, 7).flatmap(
    lambda i: texts if i else st.sampled_from(["", "  ", "!!!"]))
importances = st.sampled_from([0.0, 0.2, 0.9, 1.0])
metas = st.sampled_from([{}, {"c": 0}, {"c": 1}, {"c": 1, "d": "x"}])
filters = st.sampled_from([None, None, None, {"c": 1}, {"c": {"$ne": 1}}, {"c": {"$in": [0, 1]}},
                           {"d": {"$eq": "x"}}])
thresholds = st.sampled_from([-1.0, 0.0, 0.3])
dts = st.sampled_from([0.0, 1.0, 7.5, 60.0])
vector_seeds = st.one_of(st.none(), st.integers(0, 2**16))


@dataclass
class Rec:
    text: str
    importance: float
    metadata: dict
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    vector: np.ndarray | None


def matches(meta, flt):
    if not flt:
        return True
    for k, cond in flt.items():
        present, have = k in meta, meta.get(k)
        if isinstance(cond, dict):
            for op, v in cond.items():
                if op == "$eq" and not (present and have == v):
                    return False
                if op == "$ne" and present and have == v:
                    return False
                if op == "$in" and not (present and have in v):
                    return False
        elif not (present and have == cond):
            return False
    return True


class StoreMachine(RuleBasedStateMachine):
    """Subclasses set: build(clock, emb), VECTORS, CAPACITY (None = unbounded), LONG_TIER."""

    VECTORS = True
    CAPACITY: int | None = None
    LONG_TIER = False
    HYBRID = False

    def __init__(self):
        super().__init__()
        self.clock = FakeClock()
        self.emb = embedder()
        self.scorer = LexicalScorer()
        self.store = self.build(self.clock, self.emb)
        self.short: dict[tuple, OrderedDict] = {}
        self.long: dict[tuple, dict] = {}

    # ----------------------------------------------------------------- model helpers
    def vec(self, text, seed):
        if not self.VECTORS:
            return None
        if seed is None:
            v = self.emb.inner.encode([text])[0].astype(np.float64)
        else:
            v = np.random.default_rng(seed).standard_normal(DIM)
        n = np.linalg.norm(v)
        return (v / n).astype(np.float32) if n > 0 else np.zeros(DIM, np.float32)

    def live(self, ns):
        """key -> (Rec, tier) with the short tier winning."""
        out = {k: (r, MemoryTier.LONG) for k, r in self.long.get(ns, {}).items()}
        out.update({k: (r, MemoryTier.SHORT) for k, r in self.short.get(ns, {}).items()})
        return out

    def model_put_batch(self, ns, batch, now):
        sh = self.short.setdefault(ns, OrderedDict())
        for key, text, imp, meta, vec in batch:
            if key in sh:
                old = sh.pop(key)
            elif self.LONG_TIER and key in self.long.get(ns, {}):
                old = self.long[ns].pop(key)
            else:
                old = None
            created, count = (old.created_at, old.access_count) if old else (now, 0)
            sh[key] = Rec(text, imp, dict(meta), created, now, now, count, vec)
        while self.CAPACITY is not None and len(sh) > self.CAPACITY:
            k, r = sh.popitem(last=False)
            if self.LONG_TIER and POLICY.qualifies(r.importance, r.access_count):
                self.long.setdefault(ns, {})[k] = r
        self.prune(ns)

    def prune(self, ns):
        if not self.short.get(ns):
            self.short.pop(ns, None)
        if not self.long.get(ns):
            self.long.pop(ns, None)

    # ----------------------------------------------------------------- rules
    @initialize(rows=st.lists(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KEYS), texts,
                                        importances, metas), min_size=4, max_size=12))
    def seed(self, rows):
        """Start from populated namespaces, so searches rank real candidates."""
        for ns, key, text, imp, meta in rows:
            self.store.put(ns, key, text, importance=imp, metadata=meta)
            self.model_put_batch(ns, [(key, text, imp, meta, self.vec(text, None))], self.clock.t)
            self.clock.advance(1.0)

    @rule(dt=dts)
    def tick(self, dt):
        self.clock.advance(dt)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS), text=texts, imp=importances,
          meta=metas, seed=vector_seeds)
    def put(self, ns, key, text, imp, meta, seed):
        vector = None
        if self.VECTORS and seed is not None:
            vector = np.random.default_rng(seed).standard_normal(DIM)
        m = self.store.put(ns, key, text, importance=imp, metadata=meta, vector=vector)
        self.model_put_batch(ns, [(key, text, imp, meta, self.vec(text, seed))], self.clock.t)
        r, tier = self.live(ns)[key]
        assert (m.key, m.text, m.importance, dict(m.metadata), m.namespace) == (
            key, text, imp, meta, ns)
        assert (m.created_at, m.updated_at, m.access_count) == (
            r.created_at, r.updated_at, r.access_count)

    @rule(ns=st.sampled_from(NAMESPACES),
          batch=st.lists(st.tuples(st.sampled_from(KEYS), texts, importances, metas), min_size=0,
                         max_size=3),
          with_vectors=st.booleans(), seed=st.integers(0, 2**16))
    def put_many(self, ns, batch, with_vectors, seed):
        items = [MemoryItem(k, t, i, m) for k, t, i, m in batch]
        vectors = None
        if self.VECTORS and with_vectors:
            vectors = np.random.default_rng(seed).standard_normal((len(batch), DIM))
        out = self.store.put_many(ns, items, vectors=vectors)
        assert [m.key for m in out] == [it.key for it in items]
        model_batch = []
        for j, (k, t, i, m) in enumerate(batch):
            if vectors is not None:
                v = vectors[j] / np.linalg.norm(vectors[j])
                vec = v.astype(np.float32)
            else:
                vec = self.vec(t, None)
            model_batch.append((k, t, i, m, vec))
        if batch:
            self.model_put_batch(ns, model_batch, self.clock.t)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS))
    def delete(self, ns, key):
        existed = key in self.live(ns)
        assert self.store.delete(ns, key) is existed
        self.short.get(ns, {}).pop(key, None)
        self.long.get(ns, {}).pop(key, None)
        self.prune(ns)

    @rule(ns=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS))
    def get(self, ns, key):
        got = self.store.get(ns, key)
        want = self.live(ns).get(key)
        if want is None:
            assert got is None
            return
        r, tier = want
        assert got is not None
        assert (got.text, got.importance, dict(got.metadata), got.created_at, got.updated_at,
                got.last_accessed_at, got.access_count) == (
            r.text, r.importance, r.metadata, r.created_at, r.updated_at, r.last_accessed_at,
            r.access_count)
        if self.LONG_TIER:
            assert got.tier is tier

    @rule(ns=st.sampled_from(NAMESPACES), query=queries, top_k=st.integers(1, 8),
          threshold=thresholds, flt=filters, touch=st.booleans())
    def search(self, ns, query, top_k, threshold, flt, touch):
        now = self.clock.t
        hits = self.store.search(ns, query, top_k=top_k, threshold=threshold, weights=W,
                                 filter=flt, touch=touch)
        live = self.live(ns)
        if self.VECTORS:
            qv = self.vec(query, None).astype(np.float64)
            signal = bool(query.strip()) and bool(qv.any())
        else:
            signal = bool(query.strip()) and self.scorer.score(query, query) > 0
        if not signal:
            assert hits == []
            return
        cands, sure = {}, set()
        keys = [k for k, (r, _) in live.items() if matches(r.metadata, flt)]
        if self.VECTORS:
            sims = [float(live[k][0].vector.astype(np.float64) @ qv) for k in keys]
        else:
            sims = [float(s) for s in self.scorer.score_many(query, [live[k][0].text for k in keys])]
        for k, sim in zip(keys, sims):
            r = live[k][0]
            if sim < threshold - EPS:
                continue
            rec = 2.0 ** (-max(now - r.last_accessed_at, 0.0) / W.half_life)
            score = W.w_similarity * sim + W.w_recency * rec + W.w_importance * r.importance
            cands[k] = (score, sim, rec)
            if sim >= threshold + EPS:
                sure.add(k)
        got = [h.key for h in hits]
        assert len(set(got)) == len(got)
        if self.HYBRID:
            self.check_hybrid(hits, live, keys, top_k, threshold, touch, now)
            return
        assert min(top_k, len(sure)) <= len(got) <= min(top_k, len(cands))
        for h in hits:
            assert h.key in cands, (h.key, "is not a live, matching candidate")
            score, sim, rec = cands[h.key]
            r, tier = live[h.key]
            assert abs(h.score - score) < EPS and abs(h.similarity - sim) < EPS
            assert abs(h.recency - rec) < 1e-9
            assert (h.text, h.importance, dict(h.metadata)) == (r.text, r.importance, r.metadata)
            if self.LONG_TIER:
                assert h.tier is tier
        scores = [h.score for h in hits]
        assert all(a >= b - EPS for a, b in zip(scores, scores[1:]))
        if len(got) == top_k:
            floor = min(scores)
            for k in sure - set(got):
                assert cands[k][0] <= floor + EPS, (k, "outranks a returned hit")
        elif got:
            assert sure <= set(got)
        if touch:
            for k in got:
                r = live[k][0]
                r.last_accessed_at = now
                r.access_count += 1

    def check_hybrid(self, hits, live, keys, top_k, threshold, touch, now):
        """Hybrid recall's scores are z-scores over the namespace (no brute-force model):
        hits are distinct live matching memories as stored, best first, and with
        ``threshold=-1`` exactly ``min(top_k, matching)`` of them."""
        assert len(hits) <= top_k and {h.key for h in hits} <= set(keys)
        if threshold == -1.0:
            assert len(hits) == min(top_k, len(keys))
        scores = [h.score for h in hits]
        assert all(a >= b - EPS for a, b in zip(scores, scores[1:]))
        for h in hits:
            r, tier = live[h.key]
            assert (h.text, h.importance, dict(h.metadata)) == (r.text, r.importance, r.metadata)
            assert h.similarity >= threshold - EPS and h.tier is tier
            if touch:
                r.last_accessed_at = now
                r.access_count += 1

    @rule(ns=st.sampled_from(NAMESPACES), really=st.integers(0, 3))
    def clear(self, ns, really):
        n = len(self.live(ns))
        if really:  # clear only a quarter of the time, so namespaces fill up
            assert self.store.count(ns) == n
            return
        assert self.store.clear(ns) == n
        self.short.pop(ns, None)
        self.long.pop(ns, None)

    # ----------------------------------------------------------------- invariants
    @invariant()
    def listing_and_counts(self):
        model_ns = sorted(set(self.short) | set(self.long))
        assert self.store.namespaces() == model_ns
        assert self.store.namespaces(("a",)) == [ns for ns in model_ns if ns[0] == "a"]
        for ns in NAMESPACES:
            assert self.store.count(ns) == len(self.live(ns))


class ShortMachine(StoreMachine):
    CAPACITY = 4

    def build(self, clock, emb):
        return ShortTermMemory(capacity=self.CAPACITY, embedder=emb, clock=clock)


class ShortLexicalMachine(StoreMachine):
    CAPACITY = 4
    VECTORS = False

    def build(self, clock, emb):
        return ShortTermMemory(capacity=self.CAPACITY, clock=clock)


class TwoTierMachine(StoreMachine):
    CAPACITY = 3
    LONG_TIER = True

    def build(self, clock, emb):
        short = ShortTermMemory(capacity=self.CAPACITY, embedder=emb, clock=clock)
        long = LongTermMemory(None, emb, clock=clock)
        return TwoTierMemory(short, long, POLICY, hybrid=HybridWeights.similarity())

    @rule()
    def consolidate(self):
        moved = 0
        for ns, sh in list(self.short.items()):
            for k in [k for k, r in sh.items() if POLICY.qualifies(r.importance, r.access_count)]:
                self.long.setdefault(ns, {})[k] = sh.pop(k)
                moved += 1
            self.prune(ns)
        assert self.store.consolidate() == moved


class LongMachine(StoreMachine):
    def build(self, clock, emb):
        return LongTermMemory(None, emb, clock=clock)


class HybridTwoTierMachine(TwoTierMachine):
    """The two tiers with hybrid recall (the default preset for the hashing embedder)."""

    HYBRID = True

    def build(self, clock, emb):
        short = ShortTermMemory(capacity=self.CAPACITY, embedder=emb, clock=clock)
        return TwoTierMemory(short, LongTermMemory(None, emb, clock=clock), POLICY)


class DiskLongMachine(StoreMachine):
    """The on-disk store: saved and reopened, killed and reopened, compacted, and read by a
    read-only view, against the same model."""

    def build(self, clock, emb):
        self.root = tempfile.mkdtemp(prefix="memcore-stateful-")
        return LongTermMemory(self.root, emb, clock=clock)

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule()
    def save_and_reopen(self):
        self.store.close()
        self.store = LongTermMemory(self.root, self.emb, clock=self.clock)

    @rule()
    def kill_and_reopen(self):
        self.store._release()       # what a killed process leaves: no checkpoint, no unmap
        self.store = LongTermMemory(self.root, self.emb, clock=self.clock)

    @rule()
    def compact(self):
        self.store.compact()
        for ns in NAMESPACES:
            assert self.store.stats().get(ns, {"rows": 0})["rows"] == len(self.live(ns))

    @rule(ns=st.sampled_from(NAMESPACES))
    def read_only_view(self, ns):
        with LongTermMemory.open(self.root, self.emb, clock=self.clock) as view:
            assert view.namespaces() == self.store.namespaces()
            assert view.keys(ns) == self.store.keys(ns)
            for key in view.keys(ns):
                assert view.get(ns, key) == self.store.get(ns, key)
                assert view.vector(ns, key).tobytes() == self.store.vector(ns, key).tobytes()
            hits = view.search(ns, "robot door", top_k=3, weights=W, touch=False)
            assert hits == self.store.search(ns, "robot door", top_k=3, weights=W, touch=False)


def tiers(machine, full: settings, quick: settings):
    """The machine's test case for the default run with ``quick`` settings (a few short runs:
    every store still meets the model), and a subclass with the ``full`` settings in the
    ``slow`` tier (CI runs both)."""
    case = machine.TestCase
    case.settings = quick
    name = machine.__name__.replace("Machine", "")
    full_case = type(f"Test{name}StoreFull", (case,),
                     {"settings": full, "pytestmark": [pytest.mark.slow]})
    return case, full_case


MACHINE_SETTINGS = settings(max_examples=40, stateful_step_count=50, deadline=None)
QUICK_SETTINGS = settings(max_examples=8, stateful_step_count=30, deadline=None)
TestShortStore, TestShortStoreFull = tiers(ShortMachine, MACHINE_SETTINGS, QUICK_SETTINGS)
TestShortLexicalStore, TestShortLexicalStoreFull = tiers(ShortLexicalMachine, MACHINE_SETTINGS,
                                                         QUICK_SETTINGS)
TestTwoTierStore, TestTwoTierStoreFull = tiers(TwoTierMachine, MACHINE_SETTINGS, QUICK_SETTINGS)
TestLongStore, TestLongStoreFull = tiers(LongMachine, MACHINE_SETTINGS, QUICK_SETTINGS)
TestHybridTwoTierStore, TestHybridTwoTierStoreFull = tiers(HybridTwoTierMachine,
                                                           MACHINE_SETTINGS, QUICK_SETTINGS)
TestDiskLongStore, TestDiskLongStoreFull = tiers(
    DiskLongMachine, settings(max_examples=15, stateful_step_count=40, deadline=None),
    settings(max_examples=3, stateful_step_count=25, deadline=None))

def test_model_filter_agrees_with_validate():
    from memcore import _validate
    for flt in [None, {"c": 1}, {"c": {"$ne": 1}}, {"c": {"$in": [0, 1]}}, {"d": {"$eq": "x"}}]:
        for meta in [{}, {"c": 0}, {"c": 1}, {"c": 1, "d": "x"}]:
            assert matches(meta, flt) == _validate.matches_filter(meta, flt)


class PostgresLongMachine(StoreMachine):
    """The PostgreSQL backend (a real server, tests/pg_server.py) against the same model."""

    def build(self, clock, emb):
        import pg_server

        return pg_server.store(clock, emb)

    def teardown(self):
        self.store.drop()


class HybridPostgresTwoTierMachine(HybridTwoTierMachine):
    """Hybrid recall over a PostgreSQL long tier (its synchronised replica)."""

    def build(self, clock, emb):
        import pg_server

        self.long_store = pg_server.store(clock, emb)
        short = ShortTermMemory(capacity=self.CAPACITY, embedder=emb, clock=clock)
        return TwoTierMemory(short, self.long_store, POLICY)

    def teardown(self):
        self.long_store.drop()


class HybridPostgresStatelessTwoTierMachine(HybridPostgresTwoTierMachine):
    """Hybrid recall over a PostgreSQL long tier without a replica (``replica=False``: the
    candidates from SQL ranked in process; exact while a namespace holds at most
    ``candidates`` rows, as here)."""

    def build(self, clock, emb):
        import pg_server

        self.long_store = pg_server.store(clock, emb, replica=False)
        short = ShortTermMemory(capacity=self.CAPACITY, embedder=emb, clock=clock)
        return TwoTierMemory(short, self.long_store, POLICY)


PG_SETTINGS = settings(max_examples=8, stateful_step_count=40, deadline=None)
PG_QUICK_SETTINGS = settings(max_examples=2, stateful_step_count=25, deadline=None)
TestPostgresLongStore, TestPostgresLongStoreFull = tiers(PostgresLongMachine, PG_SETTINGS,
                                                         PG_QUICK_SETTINGS)
TestHybridPostgresTwoTierStore, TestHybridPostgresTwoTierStoreFull = tiers(
    HybridPostgresTwoTierMachine, PG_SETTINGS, PG_QUICK_SETTINGS)
TestHybridPostgresStatelessTwoTierStore, TestHybridPostgresStatelessTwoTierStoreFull = tiers(
    HybridPostgresStatelessTwoTierMachine, PG_SETTINGS, PG_QUICK_SETTINGS)
