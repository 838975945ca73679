"""CallableEmbedder and SentenceTransformerEmbedder: output checked, normalised, name recorded."""

from __future__ import annotations

import numpy as np
import pytest

from memcore import LongTermMemory
from memcore.embedders import CallableEmbedder, SentenceTransformerEmbedder
from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTextError,
    InvalidVectorError,
    MissingDependencyError,
    MemcoreError,
)
from tests.extras import require


def letters(texts):
    """26-d letter counts as nested float64 lists: unnormalised, what a user writes first."""
    out = []
    for text in texts:
        row = [0.0] * 26
        for ch in text.lower():
            if "a" <= ch <= "z":
                row[ord(ch) - 97] += 1.0
        out.append(row)
    return out


def test_output_is_unit_float32_and_zero_rows_stay_zero():
    emb = CallableEmbedder(letters, dim=26, name="letters-v1")
    vecs = emb.encode(["abc", "aab", "123"])
    assert vecs.dtype == np.float32 and vecs.shape == (3, 26) and vecs.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vecs[:2], axis=1), 1.0, atol=1e-6)
    want = np.array(letters(["aab"])[0]) / np.sqrt(5.0)
    np.testing.assert_allclose(vecs[1], want, atol=1e-6)
    assert not vecs[2].any()   # no letters: all zeros, as the protocol allows


def test_empty_input_keeps_shape_and_never_calls_the_function():
    calls = []
    emb = CallableEmbedder(lambda t: calls.append(t) or letters(t), dim=26, name="letters-v1")
    out = emb.encode([])
    assert out.shape == (0, 26) and out.dtype == np.float32 and calls == []


def test_batches_are_at_most_batch_size():
    sizes = []
    emb = CallableEmbedder(lambda t: sizes.append(len(t)) or letters(t), dim=26, name="l")
    texts = [f"text {i}" for i in range(10)]
    out = emb.encode(texts, batch_size=4)
    assert sizes == [4, 4, 2]
    np.testing.assert_array_equal(out, CallableEmbedder(letters, 26, "l").encode(texts))


@pytest.mark.parametrize("bad, error, needle", [
    (lambda t: [[1.0] * 25 for _ in t], DimensionMismatchError, "(2, 25)"),
    (lambda t: [[1.0] * 26], DimensionMismatchError, "for 2 texts"),      # one row for two
    (lambda t: np.ones(26 * len(t)), DimensionMismatchError, "expected (2, 26)"),
    (lambda t: [["x"] * 26 for _ in t], InvalidVectorError, "dtype"),
    (lambda t: None, DimensionMismatchError, "shape ()"),
])
def test_malformed_output_raises_naming_the_embedder(bad, error, needle):
    with pytest.raises(error) as info:
        CallableEmbedder(bad, dim=26, name="broken-v1").encode(["ab", "cd"])
    assert needle in str(info.value) and "broken-v1" in str(info.value)
    assert isinstance(info.value, MemcoreError) and isinstance(info.value, ValueError)


def test_nan_output_names_the_text():
    def nan_for_b(texts):
        return [[np.nan] * 26 if "b" in t else [1.0] * 26 for t in texts]

    with pytest.raises(InvalidVectorError, match=r"NaN or inf for text 1 \('bee'\)"):
        CallableEmbedder(nan_for_b, dim=26, name="nan-v1").encode(["aa", "bee"])


def test_bad_arguments():
    with pytest.raises(InvalidArgumentTypeError):
        CallableEmbedder("not callable", 26, "x")
    with pytest.raises(InvalidArgumentError):
        CallableEmbedder(letters, 0, "x")
    with pytest.raises(InvalidArgumentError):
        CallableEmbedder(letters, True, "x")
    with pytest.raises(InvalidArgumentError):
        CallableEmbedder(letters, 26, "  ")
    with pytest.raises(InvalidArgumentTypeError):
        CallableEmbedder(letters, 26, None)
    emb = CallableEmbedder(letters, 26, "x")
    with pytest.raises(InvalidTextError, match="wrap it in a list"):
        emb.encode("abc")
    with pytest.raises(InvalidTextError, match=r"texts\[1\]"):
        emb.encode(["abc", 3])
    with pytest.raises(InvalidArgumentError):
        emb.encode(["abc"], batch_size=0)


def test_store_records_the_name_and_refuses_another(tmp_path):
    emb = CallableEmbedder(letters, dim=26, name="letters-v1")
    with LongTermMemory(tmp_path / "ltm", embedder=emb) as store:
        store.put("ns", "mug", "the blue mug is on the shelf")
        store.put("ns", "battery", "battery low")
        assert store.search("ns", "where is the blue mug", top_k=1)[0].key == "mug"
    with LongTermMemory.open(tmp_path / "ltm") as store:
        assert (store.embedder_name, store.dim) == ("letters-v1", 26)
    other = CallableEmbedder(letters, dim=26, name="letters-v2")
    with pytest.raises(EmbedderMismatchError):
        LongTermMemory(tmp_path / "ltm", embedder=other)


# ------------------------------------------------------------------ sentence-transformers

def _tiny_model(st):
    """A real SentenceTransformer built offline: word embeddings over a 6-word vocabulary plus
    mean pooling (no download; the weights are seeded)."""
    import torch

    from sentence_transformers import SentenceTransformer
    try:   # sentence-transformers >= 6; `sentence_transformers.models` before
        from sentence_transformers.sentence_transformer import modules as models
        from sentence_transformers.sentence_transformer.modules.tokenizer import WhitespaceTokenizer
    except ImportError:
        from sentence_transformers import models
        from sentence_transformers.models.tokenizer import WhitespaceTokenizer

    vocab = ["kettle", "cupboard", "left", "battery", "dock", "low"]
    weights = np.random.default_rng(0).normal(size=(len(vocab), 8)).astype(np.float32)
    words = models.WordEmbeddings(WhitespaceTokenizer(vocab), torch.from_numpy(weights),
                                  update_embeddings=False)
    pooling = models.Pooling(8, pooling_mode="mean")
    return SentenceTransformer(modules=[words, pooling], device="cpu"), vocab, weights


def test_sentence_transformer_object_is_wrapped_and_recorded(tmp_path):
    st = require("sentence_transformers", "sentence-transformers")
    model, vocab, weights = _tiny_model(st)
    with pytest.raises(InvalidArgumentError, match="name="):
        SentenceTransformerEmbedder(model)           # a hand-built model records no name
    emb = SentenceTransformerEmbedder(model, name="tiny-words-v1")
    assert (emb.name, emb.dim) == ("tiny-words-v1", 8)
    vecs = emb.encode(["kettle left", "battery low dock"])
    want = weights[[0, 2]].mean(axis=0)
    np.testing.assert_allclose(vecs[0], want / np.linalg.norm(want), atol=1e-5)
    assert emb.encode([]).shape == (0, 8)
    with LongTermMemory(tmp_path / "ltm", embedder=emb) as store:
        store.put("kitchen", "kettle", "kettle left cupboard")
        store.put("kitchen", "battery", "battery low dock")
        assert store.search("kitchen", "kettle cupboard", top_k=1)[0].key == "kettle"
    with LongTermMemory.open(tmp_path / "ltm") as store:
        assert store.embedder_name == "tiny-words-v1"
    with pytest.raises(InvalidArgumentError, match="device"):
        SentenceTransformerEmbedder(model, name="x", device="cpu")
    with pytest.raises(InvalidArgumentError, match="float32"):
        SentenceTransformerEmbedder(model, name="x", precision="int8")


def test_model_without_encode_is_refused():
    with pytest.raises(InvalidArgumentTypeError, match="SentenceTransformer"):
        SentenceTransformerEmbedder(object(), name="x")


def test_missing_sentence_transformers_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)   # import raises ImportError
    with pytest.raises(MissingDependencyError, match=r"memcore-agent\[sentence-transformers\]") as err:
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert isinstance(err.value, ImportError)
    assert "pip install -e '.[sentence-transformers]'" in str(err.value)
