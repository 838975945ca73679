"""LexicalScorer: term-frequency cosine under the shared Unicode tokenisation."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_golden_hashing import unicode_tokens

from memcore.embedders import LexicalScorer, SemanticScorer
from memcore.errors import InvalidTextError


def tf_cosine_reference(a: str, b: str) -> float:
    ta, tb = Counter(unicode_tokens(a)), Counter(unicode_tokens(b))
    na = math.sqrt(sum(v * v for v in ta.values()))
    nb = math.sqrt(sum(v * v for v in tb.values()))
    if not na or not nb:
        return 0.0
    return sum(v * tb[k] for k, v in ta.items()) / (na * nb)


def test_is_a_semantic_scorer():
    assert isinstance(LexicalScorer(), SemanticScorer)
    assert LexicalScorer.name == "lexical-tf-cosine-v1"


def test_known_values():
    s = LexicalScorer()
    assert s.score("red apple", "Apple, RED!") == 1.0
    assert s.score("red apple", "green pear") == 0.0
    assert s.score("", "") == 0.0
    assert s.score("the cat sat", "the cat") == pytest.approx(2 / math.sqrt(6), abs=1e-7)
    # 4 bigrams (東京 京タ タワ ワー) vs 3 (東京 京の の夜), one shared
    assert s.score("東京タワー", "東京の夜") == pytest.approx(1 / math.sqrt(4 * 3), abs=1e-7)


@given(st.text(max_size=40), st.lists(st.text(max_size=40), max_size=6))
def test_matches_reference_and_is_symmetric(query, texts):
    s = LexicalScorer()
    got = s.score_many(query, texts)
    assert got.shape == (len(texts),) and got.dtype == np.float32
    want = np.array([tf_cosine_reference(query, t) for t in texts], np.float32)
    np.testing.assert_allclose(got, want, atol=1e-6)
    for t, g in zip(texts, got):
        assert s.score(t, query) == pytest.approx(float(g), abs=1e-6)
        assert 0.0 <= g <= 1.0 + 1e-6


def test_large_batch_uses_parallel_path_consistently():
    s = LexicalScorer()
    texts = [f"robot {i} saw a red door" for i in range(1500)]
    got = s.score_many("red door robot", texts)
    np.testing.assert_array_equal(got, np.full(1500, got[0]))
    assert got[0] == pytest.approx(tf_cosine_reference("red door robot", texts[0]), abs=1e-6)


def test_errors():
    s = LexicalScorer()
    with pytest.raises(InvalidTextError, match="surrogate"):
        s.score("ok", "\ud800")
    with pytest.raises(InvalidTextError):
        s.score(3, "x")
    with pytest.raises(InvalidTextError):
        s.score_many("q", "not a list")
    with pytest.raises(InvalidTextError, match=r"texts\[1\]"):
        s.score_many("q", ["fine", "\udc80"])
    assert s.score_many("q", []).shape == (0,)
