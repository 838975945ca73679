"""Date words in the BM25 document (``HybridWeights.dates``, issue 18): a memory's
``created_at`` day is indexed as words, so a query naming a day, month or year matches what
was stored then; the index structure, persistence and the oracle equalities keep it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import HashingEmbedder, HybridWeights, LongTermMemory, storage
from memcore.errors import MemcoreError
from memcore.recall.index import HybridIndex
from memcore.recall.words import date_words
from store_helpers import FakeClock

DIM = 64
JUNE = dt.datetime(2023, 6, 3, 15, 0, tzinfo=dt.timezone.utc).timestamp()
AUGUST = dt.datetime(2023, 8, 5, 9, 30, tzinfo=dt.timezone.utc).timestamp()


@settings(max_examples=200, deadline=None)
@given(st.integers(-6 * 10**10, 25 * 10**10), st.floats(0.0, 0.999))
def test_date_words_are_the_utc_day(seconds, fraction):
    d = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)   # years 68..9891
    assert date_words([seconds + fraction]) == [f"{d.day} {d.strftime('%B').lower()} {d.year}"]


def test_date_words_of_a_non_finite_time_are_empty():
    assert date_words([float("nan"), float("inf"), JUNE]) == ["", "", "3 june 2023"]
    assert date_words(np.zeros(0)) == []


def _store(tmp_path=None, **hw):
    clock = FakeClock(AUGUST)
    s = LongTermMemory(None if tmp_path is None else tmp_path / "m",
                       HashingEmbedder(dim=DIM), clock=clock, hybrid=HybridWeights(**hw))
    s.put("ns", "aug", "I went hiking with Max", metadata={"speaker": "Ann", "episode": 2})
    clock.t = JUNE                                   # stored later, but happened in June
    s.put("ns", "jun", "I went hiking with Max", metadata={"speaker": "Ann", "episode": 1})
    clock.t = AUGUST + 86400.0
    return s


@pytest.mark.parametrize("query", ["Where did Ann go hiking in June?",
                                   "hiking on 3 June, 2023", "What did Ann do on June 3?"])
def test_a_query_naming_the_day_or_month_finds_what_was_stored_then(query):
    with_dates = [h.key for h in _store().search("ns", query, top_k=2, touch=False)]
    without = [h.key for h in _store(dates=False).search("ns", query, top_k=2, touch=False)]
    assert with_dates == ["jun", "aug"]
    assert without == ["aug", "jun"]                 # same text: ties rank by lower row


def test_dates_are_part_of_the_index_structure():
    assert HybridWeights().structure() == (True, True)
    assert HybridWeights(dates=False).structure() == (True, False)
    assert HybridWeights.similarity().structure() == (False, False)
    for s_ in ((True, True), (True, False), (False, True), (False, False)):
        assert HybridWeights.for_structure(s_).structure() == s_
    s = _store()
    s.search("ns", "hiking in June", touch=False)
    s.search("ns", "hiking in June", touch=False, hybrid=HybridWeights(dates=False))
    assert sorted(s._tables[("ns",)].recall.indexes) == [(True, False), (True, True)]


def test_index_file_prefix_keeps_the_old_structure_names():
    assert storage.mapped.index_prefix((True, False)) == "hx1"      # as written before dates
    assert storage.mapped.index_prefix((False, False)) == "hx0"
    assert storage.mapped.index_prefix((True, True)) == "hx3"
    entry = {"structures": {"0": {}, "1": {}, "2": {}, "3": {}}}
    assert [s for s, _ in storage.index_structures(entry)] == [
        (False, False), (True, False), (False, True), (True, True)]


def test_persisted_dated_index_is_restored_and_equals_a_rebuild(tmp_path, format2):
    # format 2 by design: the dated index's files (hx3.*) of the namespace directory (the pack's
    # own: tests/test_pack.py)
    s = _store(tmp_path)
    want = [(h.key, h.score) for h in s.search("ns", "hiking in June", top_k=2, touch=False)]
    s.close()
    epoch = json.loads((Path(tmp_path / "m") / "memcore.json").read_text())["epoch"]
    ns_dir = sorted((Path(tmp_path / "m") / f"ns.{epoch}").iterdir())[0]
    assert any(p.name.startswith("hx3.") for p in ns_dir.iterdir())
    r = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM), clock=lambda: AUGUST + 86400.0,
                       hybrid=HybridWeights())
    assert (True, True) in r._tables[("ns",)].recall.indexes              # restored, not built
    assert [(h.key, h.score) for h in r.search("ns", "hiking in June", top_k=2,
                                                touch=False)] == want
    r._tables[("ns",)].recall = None
    assert [(h.key, h.score) for h in r.search("ns", "hiking in June", top_k=2,
                                                touch=False)] == want
    r.close()


def test_put_with_created_at_equals_the_column():
    e = np.eye(4, dtype=np.float32)
    times = np.array([JUNE, AUGUST], np.float64)
    a, b = HybridIndex(4), HybridIndex(4, created_at=lambda: times)
    for i, t in enumerate(times.tolist()):
        a.put(i, "went hiking", e[i], episode=1, created_at=t)
    b.put_many([0, 1], ["went hiking"] * 2, e[:2], [(1, None)] * 2)
    for q in ("june", "5 august 2023", "hiking 2023"):
        np.testing.assert_array_equal(a.lexical.scores(q), b.lexical.scores(q))
    june = a.lexical.scores("june")
    assert june[0] > 0 and june[1] == 0
    off = HybridIndex(4, HybridWeights(dates=False), created_at=lambda: times)
    off.put_many([0, 1], ["went hiking"] * 2, e[:2], [(1, None)] * 2)
    assert not off.lexical.scores("june").any()


def test_put_many_refuses_a_created_at_of_another_length():
    idx = HybridIndex(4)
    with pytest.raises(ValueError, match="created_at") as err:
        idx.put_many([0, 1], ["a", "b"], np.eye(4, dtype=np.float32)[:2], [(None, None)] * 2,
                     created_at=[JUNE])
    assert isinstance(err.value, MemcoreError)
    assert len(idx) == 0


def test_hybrid_weights_dates_must_be_a_bool():
    with pytest.raises(ValueError, match="dates"):
        HybridWeights(dates=1)
