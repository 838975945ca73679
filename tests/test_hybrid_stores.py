"""Hybrid recall wired into the stores (issue 9): oracle equality, the similarity contract,
episodes through the store API, persistence, and the defaults of the tiered stores."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import (
    DecayWeights,
    HashingEmbedder,
    HybridWeights,
    LongTermMemory,
    MemoryItem,
    SemanticMemory,
    ShortTermMemory,
    TwoTierMemory,
)
from memcore.recall.index import HybridIndex
from memcore.recall.namespace import episode_speaker
from memcore.recall.score import calibrate
from hybrid_state import assert_same_signals, index_state
from store_helpers import FakeClock

DIM = 64
TURNS = [
    ("Ann", "I adopted a dog last week"), ("Bob", "Nice, what breed is it?"),
    ("Ann", "A beagle, we call him Max"), ("Bob", "I went hiking in the alps in May"),
    ("Ann", "The robot docked at noon"), ("Bob", "My sister paints landscapes"),
    ("Ann", "Max chewed my running shoes"), ("Bob", "The kettle is in the left cupboard"),
    ("Ann", "I am learning to paint with watercolours"), ("Bob", "Battery at 18 percent"),
]
QUESTIONS = ["What did Ann adopt?", "Where did Bob go hiking?", "What breed is Max?",
             "Who paints?", "where is the kettle", "What did Max chew?", "battery level"]


def _emb():
    return HashingEmbedder(dim=DIM)


def _fill(store, ns="conv", start=0, n=len(TURNS)):
    for i in range(start, start + n):
        sp, text = TURNS[i % len(TURNS)]
        store.put(ns, f"d{i}", text, importance=0.1 * (i % 10),
                  metadata={"speaker": sp, "episode": f"s{i // 4}"})


def _oracle(store_rows, vecs, metas, texts, hw, query, emb, decay, now, last, imp, k, created):
    """A HybridIndex built from scratch over the rows in insertion order."""
    idx = HybridIndex(DIM, hw)
    for r, t, v, m in zip(store_rows, texts, vecs, metas):
        ep, sp = episode_speaker(m)
        idx.put(r, t, v, episode=ep, speaker=sp, created_at=created[r])
    prep = idx.prepare(query)
    qv = emb.encode([prep.dense])[0]
    n = idx.n_rows
    res = idx.search(prep, qv, top_k=k, weights=hw, decay=decay, now=now,
                     last_accessed_at=last[:n], importance=imp[:n])
    return res.ids[:res.count].tolist(), res.scores[:res.count]


@pytest.mark.parametrize("weights", [DecayWeights.similarity(), DecayWeights()])
@pytest.mark.parametrize("hw", [HybridWeights.hybrid(), HybridWeights.no_model()],
                         ids=["hybrid", "no_model"])
def test_long_store_hybrid_search_equals_index_oracle(hw, weights):
    clock = FakeClock()
    emb = _emb()
    ltm = LongTermMemory(embedder=emb, clock=clock, hybrid=hw, weights=weights)
    _fill(ltm)
    ltm.search("conv", "warm the index up", touch=False)      # built now, then incremental
    ltm.put("conv", "d2", "A beagle puppy, we call him Max", metadata={"speaker": "Ann",
                                                                      "episode": "s0"})
    ltm.delete("conv", "d5")
    clock.advance(3600.0)
    sp = ltm._tables[("conv",)]
    rows = sorted(sp.keys.values())
    c = sp.columns
    for q in QUESTIONS:
        got = ltm.search("conv", q, top_k=5, touch=False)
        want_rows, want_scores = _oracle(
            rows, c.vectors[rows], [sp.meta(r) for r in rows], [sp.texts[r] for r in rows],
            hw, q, emb, weights, clock(), c.last_accessed_at, c.importance, 5, c.created_at)
        assert [h.key for h in got] == [sp.key_of[r] for r in want_rows]
        # the returned score is the calibrated fused score (memcore.recall.score)
        np.testing.assert_array_equal([h.score for h in got], calibrate(want_scores, hw))


def test_short_store_hybrid_search_equals_index_oracle():
    clock = FakeClock()
    emb = _emb()
    hw = HybridWeights.hybrid()
    stm = ShortTermMemory(capacity=8, embedder=emb, clock=clock, hybrid=hw)
    _fill(stm, n=6)
    stm.search("conv", "warm the index up", touch=False)      # built now, then incremental
    _fill(stm, start=6, n=6)                                   # evicts the oldest 4
    stm.put("conv", "d7", "The kettle moved to the right cupboard",
            metadata={"speaker": "Bob", "episode": "s1"})    # replace: young end
    stm.delete("conv", "d9")
    table = stm._tables[("conv",)]
    rows = list(table.keys.values())
    c = table.columns
    for q in QUESTIONS:
        got = stm.search("conv", q, top_k=4, touch=False)
        want_rows, _ = _oracle(rows, c.vectors[rows], [table.meta(r) for r in rows],
                               [table.texts[r] for r in rows], hw, q, emb,
                               DecayWeights.similarity(), clock(), c.last_accessed_at,
                               c.importance, 4, c.created_at)
        assert [h.key for h in got] == [table.key_of[r] for r in want_rows]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "put", "put", "delete"]),
                          st.integers(0, 11), st.integers(0, 2)), min_size=1, max_size=30),
       st.booleans())
def test_episode_windows_through_the_store_equal_recomputation(ops, build_first):
    """Any put/replace/delete sequence with episodes: the store's incrementally maintained
    index holds the same windows, codes, BM25 signals and moment sums as one built from
    scratch."""
    clock = FakeClock()
    emb = _emb()
    hw = HybridWeights.hybrid()
    ltm = LongTermMemory(embedder=emb, clock=clock, hybrid=hw)
    ltm.put("e", "seed", "seed memory", metadata={"episode": 0})
    if build_first:
        ltm.search("e", "anything", touch=False)
    for op, k, ep in ops:
        if op == "put":
            sp_, text = TURNS[k % len(TURNS)]
            ltm.put("e", f"k{k}", text, metadata={"speaker": sp_, "episode": ep})
        else:
            ltm.delete("e", f"k{k}")
    table = ltm._tables[("e",)]
    if not table.keys:
        return
    got = table.recall_index(hw, DIM, None)
    fresh = HybridIndex(DIM, hw)
    rows = list(table.keys.values())
    texts, vecs = [table.texts[r] for r in rows], table.columns.vectors[rows]
    metas = [table.meta(r) for r in rows]
    fresh.put_many(rows, texts, vecs, [episode_speaker(m) for m in metas],
                   table.columns.created_at[rows])
    assert index_state(got) == index_state(fresh)
    assert_same_signals(got, fresh, hw, ("dog beagle", "paint robot", "kettle cupboard left"),
                        emb.encode(["dog", "robot red", "kettle"]))


def test_similarity_preset_is_pure_cosine_exactly():
    clock = FakeClock()
    emb = _emb()
    plain = LongTermMemory(embedder=emb, clock=clock, weights=DecayWeights.similarity())
    preset = LongTermMemory(embedder=emb, clock=clock, weights=DecayWeights.similarity(),
                            hybrid=HybridWeights.similarity())
    _fill(plain)
    _fill(preset)
    E = emb.encode([t for _, t in TURNS])
    for q in QUESTIONS:
        a = plain.search("conv", q, top_k=10, touch=False)
        b = preset.search("conv", q, top_k=10, touch=False,
                          hybrid=HybridWeights.similarity())
        assert [(h.key, h.score, h.similarity) for h in a] == \
            [(h.key, h.score, h.similarity) for h in b]
        sims = E @ emb.encode([q])[0]
        want = [f"d{i}" for i in np.argsort(-sims, kind="stable")]
        assert [h.key for h in b] == want
        np.testing.assert_array_equal(np.array([h.score for h in b], np.float32),
                                      np.sort(sims)[::-1].astype(np.float32))
    assert ("conv",) in preset._tables and preset._tables[("conv",)].recall is None


def test_similarity_preset_in_two_tier_matches_plain_cosine():
    clock = FakeClock()
    emb = _emb()
    mem = TwoTierMemory(ShortTermMemory(capacity=4, embedder=emb, clock=clock),
                        LongTermMemory(embedder=emb, clock=clock), hybrid=HybridWeights.similarity(),
                        weights=DecayWeights.similarity())
    for i, (_, t) in enumerate(TURNS):
        mem.put("c", f"d{i}", t, importance=0.9)
    E = emb.encode([t for _, t in TURNS])
    for q in QUESTIONS:
        sims = E @ emb.encode([q])[0]
        hits = mem.search("c", q, top_k=len(TURNS), touch=False)
        got = np.array([h.score for h in hits])
        np.testing.assert_allclose(got, np.sort(sims)[::-1], atol=1e-6)


def test_persistence_reopen_gives_the_same_hybrid_results(tmp_path):
    clock = FakeClock()
    emb = _emb()
    hw = HybridWeights.hybrid()
    with LongTermMemory(tmp_path / "m", emb, clock=clock, hybrid=hw) as ltm:
        _fill(ltm, n=8)
        ltm.search("conv", QUESTIONS[0], touch=False)          # index built, then kept current
        _fill(ltm, start=8, n=6)
        ltm.delete("conv", "d3")
        before = [[(h.key, h.score) for h in ltm.search("conv", q, top_k=5, touch=False)]
                  for q in QUESTIONS]
    with LongTermMemory.open(tmp_path / "m", emb, clock=clock, hybrid=hw) as again:
        after = [[(h.key, h.score) for h in again.search("conv", q, top_k=5, touch=False)]
                 for q in QUESTIONS]
    assert after == before
    with LongTermMemory(tmp_path / "m", emb, clock=clock, hybrid=hw) as rw:
        assert rw.compact() == 1
        compacted = [[(h.key, h.score) for h in rw.search("conv", q, top_k=5, touch=False)]
                     for q in QUESTIONS]
    assert compacted == before


def test_episode_context_changes_the_ranking_through_the_store_api():
    """A question answered by the neighbour of the matching turn: context finds it."""
    clock = FakeClock()
    emb = _emb()
    ltm = LongTermMemory(embedder=emb, clock=clock, hybrid=HybridWeights.no_model())
    ltm.put("c", "q", "what breed is your new dog", metadata={"speaker": "Bob", "episode": 1})
    ltm.put("c", "a", "a beagle", metadata={"speaker": "Ann", "episode": 1})
    for i in range(20):
        ltm.put("c", f"x{i}", f"unrelated chatter number {i} about the weather",
                metadata={"speaker": "Bob", "episode": 2 + i // 5})
    keys = [h.key for h in ltm.search("c", "Which dog breed did Ann get?", top_k=2)]
    assert "a" in keys
    alone = LongTermMemory(embedder=emb, clock=clock, hybrid=HybridWeights.no_model())
    alone.put_many("c", [MemoryItem(m.key, m.text, metadata={}) for m in
                         (ltm.get("c", k) for k in ltm.keys("c"))])
    assert "a" not in [h.key for h in alone.search("c", "Which dog breed did Ann get?", top_k=2)]


def test_defaults_two_tier_and_semantic_memory_are_hybrid():
    clock = FakeClock()
    emb = _emb()
    mem = TwoTierMemory(ShortTermMemory(capacity=4, embedder=emb, clock=clock),
                        LongTermMemory(embedder=emb, clock=clock))
    assert mem.hybrid == HybridWeights.no_model()      # hashing: the no-model preset
    with SemanticMemory(embedder=emb, clock=clock, warmup=False) as sm:
        assert sm.hybrid == HybridWeights.no_model()
        assert sm.tiers.hybrid == sm.short.hybrid == sm.long.hybrid == sm.hybrid
    for i, (sp, t) in enumerate(TURNS):
        mem.put("c", f"d{i}", t, importance=0.9, metadata={"speaker": sp, "episode": i // 4})
    assert mem.dense_query("c", "What did Ann adopt?") == "What did I adopt?"
    hits = mem.search("c", "What did Ann adopt?", top_k=3, threshold=-1.0)
    assert hits[0].key == "d0"
    assert {h.tier.value for h in mem.search("c", "battery kettle robot", top_k=10)} == \
        {"short", "long"}


def test_hybrid_arguments_are_validated():
    emb = _emb()
    with pytest.raises(TypeError):
        LongTermMemory(embedder=emb, hybrid=DecayWeights())
    with pytest.raises(ValueError):
        ShortTermMemory(capacity=3, hybrid=HybridWeights())     # no embedder
    ltm = LongTermMemory(embedder=emb)
    ltm.put("c", "k", "text")
    with pytest.raises(TypeError):
        ltm.search("c", "text", hybrid="hybrid")


@pytest.mark.parametrize("hw", [HybridWeights.hybrid(), HybridWeights.no_model()],
                         ids=["hybrid", "no_model"])
def test_two_tier_pools_z_statistics_like_one_store(hw):
    """Without episodes (no cross-tier windows) and BM25 (idf is each tier's own) the two
    tiers rank like one store holding every memory: z statistics are pooled over both."""
    from dataclasses import replace

    hw = replace(hw, lexical=0.0, lexical_context=0.0)
    clock = FakeClock()
    emb = _emb()
    mem = TwoTierMemory(ShortTermMemory(capacity=3, embedder=emb, clock=clock),
                        LongTermMemory(embedder=emb, clock=clock), hybrid=hw)
    one = LongTermMemory(embedder=emb, clock=clock, hybrid=hw)
    for i, (sp, t) in enumerate(TURNS):
        for store in (mem, one):
            store.put("c", f"d{i}", t, importance=0.9, metadata={"speaker": sp})
    assert mem.stats()["short"] and mem.stats()["long"]
    for q in QUESTIONS:
        a = mem.search("c", q, top_k=6, touch=False)
        b = one.search("c", q, top_k=6, touch=False, query_vector=emb.encode(
            [one.prepare("c", q).dense])[0])
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
        sb = [h.score for h in b]
        assert [h.key for h in a] == [h.key for h in b] or np.min(np.abs(np.diff(sb))) < 1e-5


def test_stemmed_bm25_equals_an_index_over_stemmed_text():
    import Stemmer

    from memcore.recall.lexical import LexicalIndex

    st_ = Stemmer.Stemmer("english")
    hw = HybridWeights.hybrid()
    assert hw.stem and not HybridWeights.similarity().stem
    idx = HybridIndex(DIM, hw)
    texts = ["I adopted two dogs", "Running shoes were chewed", "the dog runs daily"]
    for i, t in enumerate(texts):
        idx.put(i, t, np.eye(DIM, dtype=np.float32)[i], speaker="Ann")
    ref = LexicalIndex(hw.k1, hw.b)
    for i, t in enumerate(texts):
        ref.add(i, " ".join(st_.stemWords(f"Ann: {t}".lower().replace(":", " ").split())))
    q = " ".join(st_.stemWords("adopt dog running".split()))
    np.testing.assert_array_equal(idx.lexical.scores(q), ref.scores(q))
    assert idx.lexical.scores("adopt")[0] > 0            # "adopted" and "adopt" meet


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2", None])
def test_threads_validated_once_with_clear_errors(bad):
    from memcore.errors import InvalidArgumentError, MemcoreError

    for make in (lambda: ShortTermMemory(capacity=4, embedder=_emb(), threads=bad),
                 lambda: LongTermMemory(embedder=_emb(), threads=bad),
                 lambda: SemanticMemory(embedder=_emb(), warmup=False, threads=bad),
                 lambda: TwoTierMemory(ShortTermMemory(capacity=4, embedder=_emb()),
                                       LongTermMemory(embedder=_emb()), threads=bad)):
        with pytest.raises(InvalidArgumentError, match="threads") as err:
            make()
        assert isinstance(err.value, (ValueError, MemcoreError))


def test_threads_give_identical_results_and_restore_numba_threads():
    import numba

    clock = FakeClock()
    emb = _emb()
    stores = [LongTermMemory(embedder=emb, clock=clock, hybrid=HybridWeights.no_model(),
                             threads=t) for t in (1, 2)]
    for s in stores:
        _fill(s, n=60)
    before = numba.get_num_threads()
    for q in QUESTIONS:
        for hw in (HybridWeights.no_model(), HybridWeights.similarity()):
            a, b = (s.search("conv", q, top_k=6, touch=False, hybrid=hw) for s in stores)
            assert [(h.key, h.score, h.similarity) for h in a] == \
                [(h.key, h.score, h.similarity) for h in b]
    assert numba.get_num_threads() == before
    assert stores[1].threads == 2 and stores[0].threads == 1
    mem = SemanticMemory(embedder=emb, clock=clock, warmup=False, threads=2)
    assert (mem.threads, mem.short.threads, mem.long.threads, mem.tiers.threads) == (2, 2, 2, 2)
    mem.close()


def test_similarity_preset_from_codes_equals_the_exact_fused_ranking():
    """From SCAN_MIN_ROWS rows the similarity preset is ranked from the int8 codes: the same
    rows and scores as the fused float32 kernel over every vector (float32 near-ties
    tolerated), thresholds and filters included."""
    from memcore.core.rank import SCAN_MIN_ROWS
    from memcore.kernels import reference as ref

    clock = FakeClock()
    emb = _emb()
    ltm = LongTermMemory(embedder=emb, clock=clock)
    n = SCAN_MIN_ROWS + 300
    rng = np.random.default_rng(3)
    words = ["robot", "dock", "battery", "kitchen", "red", "door", "noon", "dog", "paint"]
    items = [MemoryItem(key=f"k{i}", text=" ".join(rng.choice(words, 5)),
                        importance=float(rng.random()), metadata={"even": i % 2 == 0})
             for i in range(n)]
    ltm.put_many("ns", items)
    table = ltm._tables[("ns",)]
    c = table.columns
    for q, thr, flt in (("robot dock", -1.0, None), ("red door at noon", 0.3, None),
                        ("dog", -1.0, {"even": True})):
        hits = ltm.search("ns", q, top_k=10, threshold=thr, filter=flt, touch=False)
        assert table.recall is not None and table.recall.indexes      # ranked from codes
        qv = emb.encode([q])[0]
        alive = table.mask(flt)[:n].copy()
        w = ltm.weights
        ids, sc, si = (np.empty(10, np.int64), np.empty(10, np.float32),
                       np.empty(10, np.float32))
        cnt = ref.fused_topk(qv, c.vectors[:n], w.w_similarity,
                             (c.last_accessed_at[:n], c.importance[:n], clock(), w.half_life,
                              w.w_recency, w.w_importance), alive, thr, (ids, sc, si))
        assert len(hits) == cnt
        got = np.array([h.score for h in hits], np.float32)
        np.testing.assert_allclose(got, sc[:cnt], rtol=0, atol=2e-6)
        for h, i, s in zip(hits, ids[:cnt], sc[:cnt]):
            assert h.key == table.key_of[i] or abs(h.score - s) <= 2e-6


def test_an_index_written_with_int64_arrays_reopens_and_grows_as_written(tmp_path, monkeypatch, format2):
    # Format-2 stores written before the int32 postings hold int64 index arrays: reopened,
    # they keep them (and grow them as int64) and rank exactly like a store written now.
    from memcore.recall import index as hmod
    from memcore.recall import lexical as lmod

    wide = {k: np.int64 for k in ("pdoc", "doc_row", "doc_len", "doc_nterm", "dt_term",
                                  "row_doc", "row_len")}
    clock = FakeClock()
    emb = _emb()
    hw = HybridWeights.hybrid()

    def write(path):
        with LongTermMemory(path, emb, clock=clock, hybrid=hw) as ltm:
            _fill(ltm, n=8)
            ltm.search("conv", QUESTIONS[0], touch=False)
            ltm.delete("conv", "d2")

    with monkeypatch.context() as m:
        m.setattr(lmod, "ARRAYS", {**lmod.ARRAYS, **wide})
        m.setattr(hmod, "ROW_ARRAYS", {**hmod.ROW_ARRAYS, "episode": (np.int64, ())})
        write(tmp_path / "old")
    write(tmp_path / "new")
    got = {}
    for name in ("old", "new"):
        with LongTermMemory(tmp_path / name, emb, clock=clock, hybrid=hw) as ltm:
            _fill(ltm, start=8, n=40)                       # grows every index array
            ltm.delete("conv", "d11")
            got[name] = [[(h.key, h.score) for h in ltm.search("conv", q, top_k=5, touch=False)]
                         for q in QUESTIONS]
    assert got["old"] == got["new"]
    old_files = [f.name for f in (tmp_path / "old").rglob("hx*.lex.pdoc.*")]
    assert old_files and all(n.endswith(".i64") for n in old_files), old_files
    new_files = [f.name for f in (tmp_path / "new").rglob("hx*.lex.pdoc.*")]
    assert new_files and all(n.endswith(".i32") for n in new_files), new_files
