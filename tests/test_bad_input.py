"""Bad input: complex vectors, numbers given as strings, an embedder that returns something
other than vectors, lone surrogates, deep or non-string-keyed metadata, overflowing counts,
bad paths and binary import files. Each is refused with a MemcoreError (and the matching
built-in) that says what was wrong, and nothing is written."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from memcore import _validate
from store_helpers import run_cli
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


# ---------------------------------------------------------------------- keys, metadata, paths, files

def vec(seed):
    return _validate.vector(np.random.default_rng(seed).standard_normal(DIM), DIM)


_cli = run_cli


def test_lone_surrogate_key_and_metadata(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    with pytest.raises(MemcoreError) as e:
        s.put("ns", "k\udc80", "text")
    assert isinstance(e.value, ValueError)
    with pytest.raises(MemcoreError) as e:
        s.put("ns", "k", "text", metadata={"a": "\udc80"})
    assert isinstance(e.value, ValueError)
    s.close()


def test_deep_metadata(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    deep: dict = {}
    cur = deep
    for _ in range(100_000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(MemcoreError) as e:
        s.put("ns", "k", "text", metadata=deep)
    assert isinstance(e.value, ValueError)
    s.close()


def test_put_many_none_and_bad_path(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    with pytest.raises(MemcoreError) as e:
        s.put_many("ns", None)
    assert isinstance(e.value, TypeError)
    s.close()
    with pytest.raises(MemcoreError) as e:
        LongTermMemory(123, HashingEmbedder(dim=DIM))
    assert isinstance(e.value, TypeError)
    with pytest.raises(MemcoreError) as e:
        LongTermMemory("", HashingEmbedder(dim=DIM))
    assert isinstance(e.value, ValueError)


def test_access_count_overflow(tmp_path):
    from memcore import StoredMemory
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    m = s.put("ns", "k", "text")
    bad = StoredMemory(**{**m.__dict__, "access_count": 2 ** 70}) if hasattr(m, "__dict__") \
        else m._replace(access_count=2 ** 70)
    with pytest.raises(MemcoreError) as e:
        s.put_stored([bad], np.stack([vec(1)]))
    assert isinstance(e.value, ValueError)
    s.close()


def test_huge_vector_and_unnormalised_embedder(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    for big in (1e200, -1e-200):            # the norm over/underflows: scaled, never zeros
        s.put("ns", "k", "text", vector=np.full(DIM, big))
        assert np.allclose(s.vector("ns", "k"), np.sign(big) / np.sqrt(DIM))
    s.close()

    class Loud:
        name, dim = "loud", DIM

        def encode(self, texts, *, batch_size=32):
            return np.full((len(texts), DIM), 98.0 / 4, np.float32)

    s = LongTermMemory(tmp_path / "n", Loud())
    s.put("ns", "k", "text")
    hit = s.search("ns", "text", top_k=1)[0]
    assert hit.similarity <= 1.0 + 1e-5
    s.close()


def test_export_to_a_directory_and_import_binary(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    s.put("ns", "k", "text")
    with pytest.raises(MemcoreError) as e:
        s.export_jsonl(tmp_path)
    assert isinstance(e.value, OSError)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") or "tmp" in p.name]
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80")
    with pytest.raises(MemcoreError) as e:
        s.import_jsonl(binary)
    assert isinstance(e.value, ValueError)
    s.close()


def test_metadata_keys_must_be_strings(tmp_path):
    s = LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    for k in (1, None, True):
        with pytest.raises(MemcoreError) as e:
            s.put("ns", "k", "text", metadata={k: 1})
        assert isinstance(e.value, TypeError)
    s.close()


def test_cli_bad_input_is_one_line(tmp_path):
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    code, out, err = _cli("--store", str(tmp_path / "s"), "--embedder", "hashing", "put", "ns",
                          "hello there", "--metadata", deep)
    assert code == 2 and "Traceback" not in err and "too deeply" in err
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x80garbage")
    code, out, err = _cli("--store", str(tmp_path / "s"), "--embedder", "hashing", "import",
                          str(binary))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "not UTF-8" in err
