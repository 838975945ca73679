"""Bad input found by a breaker run (issue 27): complex vectors, numbers given as strings and
an embedder that returns something other than vectors. Each is refused with a MemcoreError
that says what was wrong, and nothing is written."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from memcore import (
    HashingEmbedder,
    InvalidArgumentError,
    InvalidVectorError,
    LongTermMemory,
    MemcoreError,
    MemoryItem,
    SemanticMemory,
    ShortTermMemory,
)

DIM = 8
EMB = HashingEmbedder(dim=DIM)


@pytest.fixture(params=["short", "long"])
def store(request, tmp_path):
    s = ShortTermMemory(embedder=EMB) if request.param == "short" else LongTermMemory(tmp_path / "m", EMB)
    yield s
    getattr(s, "close", lambda: None)()


@pytest.fixture(autouse=True)
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a silently dropped imaginary part warns
        yield


COMPLEX = np.full(DIM, 0.5 + 0.5j)


def test_a_complex_vector_is_refused(store):
    with pytest.raises(InvalidVectorError, match="complex"):
        store.put("ns", "k", "text", vector=COMPLEX)
    with pytest.raises(InvalidVectorError, match="complex"):
        store.put_many("ns", [MemoryItem("k", "text")], vectors=COMPLEX[None, :])
    store.put("ns", "k2", "other text")
    with pytest.raises(InvalidVectorError, match="complex"):
        store.search("ns", "text", query_vector=COMPLEX)
    assert store.keys("ns") == ["k2"]


@pytest.mark.parametrize("vec", [np.full(DIM, "0.5"), ["0.5"] * DIM,
                                 np.array([0.5] * (DIM - 1) + ["0.5"], dtype=object)])
def test_a_vector_of_strings_is_refused(store, vec):
    with pytest.raises(InvalidVectorError, match="str"):
        store.put("ns", "k", "text", vector=vec)
    assert store.count("ns") == 0


@pytest.mark.parametrize("bad", ["0.5", b"0.5", "1"])
def test_a_number_given_as_a_string_is_refused_like_top_k(store, bad):
    with pytest.raises(InvalidArgumentError, match="importance"):
        store.put("ns", "k", "text", importance=bad)
    with pytest.raises(InvalidArgumentError, match="importance"):
        store.put_many("ns", [MemoryItem("k", "text", importance=bad)])
    store.put("ns", "k2", "other text")
    with pytest.raises(InvalidArgumentError, match="threshold"):
        store.search("ns", "text", threshold=bad)
    with pytest.raises(InvalidArgumentError, match="top_k"):
        store.search("ns", "text", top_k=bad)
    assert store.keys("ns") == ["k2"]


@pytest.mark.parametrize("good", [0.5, 1, np.float32(0.25), np.int64(0), Fraction(1, 4)])
def test_real_numbers_of_any_kind_are_accepted(store, good):
    assert store.put("ns", "k", "text", importance=good).importance == float(good)


def test_semantic_memory_refuses_a_string_importance(tmp_path):
    with SemanticMemory(tmp_path / "m", EMB) as mem:
        with pytest.raises(InvalidArgumentError, match="importance"):
            mem.store("the dock is in the hallway", "ok", "chat", importance="0.5")
        with pytest.raises(InvalidArgumentError, match="threshold"):
            SemanticMemory(embedder=EMB, threshold="0.3")


class Broken:
    """An embedder that returns ``out`` for any texts."""

    dim = DIM

    def __init__(self, out):
        self.out = out
        self.name = "broken-v1"

    def encode(self, texts, *, batch_size=32):
        return self.out


@pytest.mark.parametrize("out, what", [
    ("oops", "str"),
    (None, "NoneType"),
    (["a vector"], "str"),
    ([[0.1] * DIM, [0.2] * 3], "ragged|list"),
    (np.full((1, DIM), 1 + 1j), "complex"),
    ({"vectors": 1}, "dict"),
])
@pytest.mark.parametrize("kind", ["short", "long"])
def test_an_embedder_returning_no_vectors_names_itself_and_what_it_returned(tmp_path, out,
                                                                           what, kind):
    emb = Broken(out)
    s = ShortTermMemory(embedder=emb) if kind == "short" else LongTermMemory(tmp_path / "m", emb)
    with pytest.raises(MemcoreError, match=f"broken-v1.*({what})") as err:
        s.put("ns", "k", "some text")
    assert isinstance(err.value, ValueError)
    with pytest.raises(MemcoreError, match="broken-v1"):
        s.search("ns", "some text")
    assert s.count("ns") == 0
    getattr(s, "close", lambda: None)()
