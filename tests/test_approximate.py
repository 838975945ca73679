"""The opt-in approximate path (memcore.recall.approx): FAISS candidates, exact re-rank, the bound.

Scores and similarities of what it returns are the exact path's; what it may miss is measured in
the scale benchmark (``memcore bench scale --approximate``), here only bounded on easy data.
"""

import numpy as np
import pytest

faiss = pytest.importorskip("faiss", reason='needs faiss: pip install -e ".[test]"')

from memcore import (ApproximateSearch, DecayWeights, InvalidArgumentError,  # noqa: E402
                     LongTermMemory, MemoryItem)
from memcore.recall.approx import AnnIndex  # noqa: E402

DIM = 32
WEIGHTS = DecayWeights(w_similarity=1.0, w_recency=0.1, w_importance=0.1, half_life=3600.0)


class Clock:
    def __init__(self):
        self.t = 1_000_000.0

    def __call__(self):
        return self.t


def _vectors(n, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _fill(store, vecs, ns="robot"):
    rng = np.random.default_rng(1)
    items = [MemoryItem(f"k{i}", f"memory {i}", float(rng.random()),
                        {"room": "kitchen" if i % 3 == 0 else "hall"}) for i in range(len(vecs))]
    store.put_many(ns, items, vectors=vecs)


def _pair(tmp_path, n, cfg, vecs=None, **kw):
    clock = Clock()
    exact = LongTermMemory(None, _Dim(), weights=WEIGHTS, clock=clock)
    approx = LongTermMemory(tmp_path / "s", _Dim(), weights=WEIGHTS, clock=clock,
                            approximate=cfg, **kw)
    vecs = _vectors(n) if vecs is None else vecs
    for s in (exact, approx):
        _fill(s, vecs)
    return exact, approx, clock


class _Dim:
    name, dim = "test-dim32", DIM

    def encode(self, texts):
        return _vectors(len(texts), seed=len(texts))


def _same(got, want):
    """Same keys in the same order, scores and similarities equal to float32 rounding."""
    assert [k for k, _, _ in got] == [k for k, _, _ in want]
    np.testing.assert_allclose([x[1:] for x in got], [x[1:] for x in want], rtol=0, atol=1e-6)
    return True


def _search(store, q, **kw):
    return [(h.key, h.score, h.similarity) for h in
            store.search("robot", "q", query_vector=q, top_k=10, touch=False, **kw)]


def test_exhaustive_candidates_equal_the_exact_path(tmp_path):
    # a flat index returns every row in order: the bound closes and the result is the exact one
    cfg = ApproximateSearch(min_rows=1, factory="Flat", candidates=16, max_candidates=4096)
    exact, approx, _ = _pair(tmp_path, 600, cfg)
    for q in _vectors(20, seed=7):
        assert _same(_search(approx, q), _search(exact, q))
        assert _same(_search(approx, q, filter={"room": "kitchen"}),
                     _search(exact, q, filter={"room": "kitchen"}))
    st = approx.approximate_stats("robot")
    assert st["searches"] == 40 and st["closed"] == 40 and st["open"] == 0


def _clustered(n, seed=0):
    """Rows near 40 topics (embeddings cluster by topic; uniform random data has no structure
    for an inverted file to use)."""
    rng = np.random.default_rng(seed)
    centers = _vectors(40, seed=99)
    v = centers[rng.integers(0, 40, n)] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_ivf_recall_and_exact_scores(tmp_path):
    cfg = ApproximateSearch(min_rows=1, candidates=64, nprobe=8)
    exact, approx, _ = _pair(tmp_path, 3000, cfg, vecs=_clustered(3000))
    found = 0
    for q in _clustered(30, seed=11):
        want, got = _search(exact, q), _search(approx, q)
        truth = {k: (s, sim) for k, s, sim in want}
        found += sum(k in truth for k, _, _ in got)
        for k, s, sim in got:          # every returned score is the exact path's for that key
            ref = exact.search("robot", "q", query_vector=q, top_k=3000, touch=False)
            row = next(h for h in ref if h.key == k)
            assert (s, sim) == pytest.approx((row.score, row.similarity))
            break
    assert found / 300 >= 0.9      # IVF at nprobe 8 of 64 lists on clustered data


def test_below_min_rows_is_exact_and_unrecorded(tmp_path):
    cfg = ApproximateSearch(min_rows=10_000)
    exact, approx, _ = _pair(tmp_path, 200, cfg)
    q = _vectors(1, seed=3)[0]
    assert _same(_search(approx, q), _search(exact, q))
    assert approx.approximate_stats("robot") is None


def test_saved_index_is_reused_and_extended_and_rebuilt_when_damaged(tmp_path):
    cfg = ApproximateSearch(min_rows=1, factory="Flat", candidates=8, max_candidates=4096)
    exact, approx, clock = _pair(tmp_path, 300, cfg)
    q = _vectors(1, seed=5)[0]
    _search(approx, q)
    approx.close()
    files = sorted(p.name for p in (tmp_path / "s").rglob("ann.*"))
    assert files and all(f.startswith("ann.") for f in files)
    more = _vectors(50, seed=9)
    new = [MemoryItem(f"n{i}", "x") for i in range(len(more))]
    exact.put_many("robot", new, vectors=more)
    with LongTermMemory(tmp_path / "s", approximate=cfg, weights=WEIGHTS, clock=clock) as s:
        s.put_many("robot", new, vectors=more)
        assert _same(_search(s, q), _search(exact, q))
    index = next((tmp_path / "s").rglob("ann.*.faiss"))
    raw = bytearray(index.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    index.write_bytes(bytes(raw))
    with LongTermMemory(tmp_path / "s", approximate=cfg, weights=WEIGHTS, clock=clock) as s:
        assert _same(_search(s, q), _search(exact, q))   # rebuilt, one warning


def test_compaction_renumbers_rows_and_the_index_follows(tmp_path):
    cfg = ApproximateSearch(min_rows=1, factory="Flat", candidates=8, max_candidates=4096)
    exact, approx, _ = _pair(tmp_path, 400, cfg)
    q = _vectors(1, seed=2)[0]
    _search(approx, q)
    for i in range(0, 400, 2):
        exact.delete("robot", f"k{i}")
        approx.delete("robot", f"k{i}")
    approx.compact()
    assert _same(_search(approx, q), _search(exact, q))


def test_hybrid_with_every_row_a_candidate_equals_the_exact_path(tmp_path):
    from memcore import HashingEmbedder, HybridWeights
    cfg = ApproximateSearch(min_rows=1, factory="Flat", candidates=4096, max_candidates=4096)
    emb = HashingEmbedder(dim=64)
    rooms = ["kitchen", "hall", "lab"]
    items = [MemoryItem(f"k{i}", f"the kettle is in the {rooms[i % 3]} number {i}", 0.5,
                        {"speaker": "Ann" if i % 2 else "Bob", "episode": f"e{i // 7}"})
             for i in range(300)]
    h = HybridWeights.no_model()
    clock = Clock()          # one time for both stores: recency is part of the score
    with LongTermMemory(tmp_path / "h", emb, approximate=cfg, hybrid=h, clock=clock) as s, \
            LongTermMemory(tmp_path / "e", emb, hybrid=h, clock=clock) as e:
        for store in (s, e):
            store.put_many("robot", items)
        for q in ("where is the kettle", "Ann in the lab", "hall 17"):
            got = [(x.key, x.score, x.similarity) for x in s.search("robot", q, top_k=10)]
            want = [(x.key, x.score, x.similarity) for x in e.search("robot", q, top_k=10)]
            assert _same(got, want)
        assert s.approximate_stats("robot")["hybrid"] == 3


def test_hybrid_candidates_recall(tmp_path):
    from memcore import HashingEmbedder, HybridWeights
    cfg = ApproximateSearch(min_rows=1, candidates=64, nprobe=8)
    emb = HashingEmbedder(dim=64)
    words = "kettle door lamp robot charger window table chair cup book".split()
    rng = np.random.default_rng(4)
    items = [MemoryItem(f"k{i}", " ".join(rng.choice(words, 4)) + f" {i}", 0.5,
                        {"episode": f"e{i // 5}"}) for i in range(3000)]
    h = HybridWeights.no_model()
    clock = Clock()          # one time for both stores: recency is part of the score
    with LongTermMemory(tmp_path / "h", emb, approximate=cfg, hybrid=h, clock=clock) as s, \
            LongTermMemory(tmp_path / "e", emb, hybrid=h, clock=clock) as e:
        for store in (s, e):
            store.put_many("robot", items)
        found = total = 0
        for q in ("kettle near the door", "lamp and charger", "book on the table"):
            want = {x.key: (x.score, x.similarity) for x in e.search("robot", q, top_k=10)}
            for x in s.search("robot", q, top_k=10):
                if x.key in want:     # a returned memory carries the exact path's score
                    assert (x.score, x.similarity) == pytest.approx(want[x.key], abs=1e-6)
                    found += 1
            total += len(want)
        assert found / total >= 0.5


@pytest.mark.parametrize("bad", [dict(candidates=0), dict(min_rows=-1), dict(nprobe=True),
                                 dict(candidates=100, max_candidates=10), dict(factory="")])
def test_bad_settings_raise(bad):
    with pytest.raises(InvalidArgumentError):
        ApproximateSearch(**bad)


def test_bad_factory_raises_on_build():
    with pytest.raises(InvalidArgumentError, match="index_factory"):
        AnnIndex.build(_vectors(100), 100, ApproximateSearch(factory="NoSuchIndex"))
