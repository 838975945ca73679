"""Smoke tests of the LoCoMo peers (bench/peers.py), their tick benchmark rows
(bench/systems.py) and the LOO selection (bench/loo.py).

The peers run on a slice of one dev conversation with the hashing embedder (seconds); their
tick rows on 60 memories with memcore's int8 MiniLM. A peer whose package is not installed is
skipped with the missing modules and the ``bench`` extra as the reason.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench import datasets
from bench.loo import loo_select, summary


def _slice(shared, n_turns=40, n_questions=6):
    conv = datasets.locomo_conversations(str(shared))[0]
    ids = {t.dia_id for t in conv.turns[:n_turns]}
    qs = tuple(q for q in conv.questions if q.evidence and set(q.evidence) <= ids)[:n_questions]
    return replace(conv, turns=conv.turns[:n_turns], questions=qs)


def _embed():
    from memcore import HashingEmbedder

    emb = HashingEmbedder(dim=384)
    return lambda texts: [v.tolist() for v in emb.encode(list(texts))]


def _check(rankings, conv, k):
    ids = {t.dia_id for t in conv.turns}
    assert len(rankings) == sum(1 for q in conv.questions if q.evidence)
    for r in rankings:
        assert len(r) <= k and len(set(r)) == len(r) and set(r) <= ids


@pytest.mark.data("locomo")
def test_om1_hybrid_reference_ranks_an_identical_turn_first(shared):
    pytest.importorskip("faiss")
    pytest.importorskip("bm25s")
    from bench.peers import om1_hybrid_rankings
    from bench.quality import BM25

    conv = _slice(shared)
    t = conv.turns[7]
    conv = replace(conv, questions=conv.questions + (
        datasets.LocomoQuestion(t.memory_text, (t.dia_id,), 4),))
    texts = [x.memory_text for x in conv.turns]
    embed = _embed()
    docs = np.array(embed(texts), np.float32)
    qs = np.array(embed([q.question for q in conv.questions if q.evidence]), np.float32)
    got = om1_hybrid_rankings(conv, 10, docs, qs, BM25(texts))
    _check(got, conv, 10)
    assert got[-1][0] == t.dia_id


@pytest.mark.data("locomo")
def test_langgraph_and_mem0_rows_run_offline(shared, monkeypatch, tmp_path):
    monkeypatch.setenv("MEM0_TELEMETRY", "False")   # before mem0 is imported: no upload
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))    # nor a ~/.mem0 folder
    pytest.importorskip("langgraph")
    from bench.peers import langgraph_rankings, mem0_rankings

    conv = _slice(shared)
    _check(langgraph_rankings(conv, 5, _embed()), conv, 5)
    pytest.importorskip("mem0")
    pytest.importorskip("langchain")
    _check(mem0_rankings(conv, 5, _embed()), conv, 5)


def _stored(sysobj) -> int:
    if sysobj.name == "langgraph":
        from bench.systems import NAMESPACE

        return len(sysobj.store.search(NAMESPACE, limit=10_000))
    if sysobj.name == "om1-hybrid":
        return len(sysobj.index)
    return sysobj.mem.vector_store.client.count("tick").count


@pytest.mark.data("locomo")
@pytest.mark.parametrize("name", ["langgraph", "om1-hybrid", "mem0"])
def test_peer_tick_rows_recall_and_store(shared, name, monkeypatch, tmp_path):
    """Each LoCoMo peer's tick row: a chunked prefill from given vectors, ticks that time all
    three phases, recall an input identical to a stored memory, and store their pair."""
    from bench.tick import _missing

    missing = _missing(name)
    if missing:
        pytest.skip(f"the {name} tick row needs {', '.join(missing)}: pip install -e '.[bench]'")
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from bench.systems import make_system

    sysobj = make_system(name, 1, str(shared), 0)
    try:
        texts = datasets.tick_memories(60, 0, str(shared))
        vectors = sysobj.embedder.encode(texts)
        for off in (0, 30):
            sysobj.prefill(texts[off:off + 30], vectors[off:off + 30], off)
        sysobj.ready()
        assert _stored(sysobj) == 60
        pairs = datasets.tick_inputs(3, 0, str(shared)) + [(texts[7], "ok")]
        for i, (text, response) in enumerate(pairs):
            e, r, s, hits = sysobj.tick(i, text, response)
            assert e > 0 and r > 0 and s > 0 and 0 <= hits <= 3
        assert hits >= 1  # the last input is a stored memory: cosine 1
        assert _stored(sysobj) == 64
    finally:
        sysobj.close()


def test_loo_picks_on_the_other_conversations():
    # held out c1: b wins on c2+c3 (0.75 vs 0.5) and scores 0 on c1; c2: a tie, the first
    # candidate (a) scores 1; c3: a wins on c1+c2 and scores 0 -> LOO R@10 = 1/3
    rows = lambda r10: [(r10, r10, 1)]  # noqa: E731
    res = {"a": {"c1": rows(1.0), "c2": rows(1.0), "c3": rows(0.0)},
           "b": {"c1": rows(0.0), "c2": rows(0.5), "c3": rows(1.0)}}
    loo = loo_select(res)
    assert loo["chosen"] == {"c1": "b", "c2": "a", "c3": "a"}
    assert loo["R@10"] == pytest.approx(1 / 3)
    assert summary(res)["b"]["R@10"] == pytest.approx(0.5)
