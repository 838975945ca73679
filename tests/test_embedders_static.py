"""StaticEmbedder: the protocol's shape, dtype and unit rows, odd input, its package data, and
its place among embedders (agreement with MiniLM, stores that refuse another embedder)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MiniLMEmbedder
from memcore.embedders import Embedder, StaticEmbedder
from memcore.embedders.onnx import MAX_TEXT_CHARS
from memcore.errors import (EmbedderMismatchError, InvalidArgumentError, InvalidTextError,
                            ModelChecksumError)
from memcore.models import manifest, resource
from memcore.models.variants import CALIBRATION_TEXTS, SELF_CHECK_TEXTS

TEXTS = ["The battery is at 15 percent and dropping.", "ok", "Where did I leave my keys?",
         "Alice: Did you finish the report? Bob: Not yet, I was at the hospital with my dad."]


@pytest.fixture(scope="module")
def emb() -> StaticEmbedder:
    return StaticEmbedder().load()


def _unit_or_zero(out: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    assert np.all(np.isclose(norms, 1.0, atol=1e-5) | (norms == 0.0))
    return norms


def test_protocol_name_and_dim(emb):
    assert isinstance(emb, Embedder)
    man = manifest("static-minilm-l6-v2")
    assert emb.name == man["name"] and emb.name.startswith("static-minilm-l6-v2-")
    assert emb.dim == man["dim"] == 256
    assert emb.load() is emb


def test_rows_are_unit_float32_c_contiguous(emb):
    out = emb.encode(TEXTS)
    assert out.shape == (len(TEXTS), emb.dim) and out.dtype == np.float32
    assert out.flags.c_contiguous
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_empty_input_keeps_shape_and_dtype(emb):
    out = emb.encode([])
    assert out.shape == (0, emb.dim) and out.dtype == np.float32


@pytest.mark.parametrize("text", ["", "   \n\t", "\x00", "🤖🔋"],
                         ids=["empty", "space", "nul", "emoji"])
def test_texts_without_known_word_pieces_give_zero_rows(emb, text):
    out = emb.encode([text, "robot"])
    assert not out[0].any()
    assert np.isclose(np.linalg.norm(out[1]), 1.0, atol=1e-5)


def test_odd_unicode_gives_finite_unit_rows(emb):
    texts = ["Résumé, naïve café, façade — ligatures ﬁ", "東京の天気は晴れです",
             "Grüße aus München ☀️", "e\u0301\u0301\u0301 combining", "ＦＵＬＬＷＩＤＴＨ",
             "a\x00b\x07c", "مرحبا بالعالم", "\U0001F600 smile"]
    out = emb.encode(texts)
    assert np.isfinite(out).all()
    assert (_unit_or_zero(out) > 0).all()
    # NFKC first: full-width letters and ligatures find their word pieces
    folded = emb.encode(["ＦＵＬＬＷＩＤＴＨ ﬁle", "FULLWIDTH file"])
    np.testing.assert_allclose(folded[0], folded[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad", ["a str, not a list", [1], [b"bytes"], ["lone \ud800"]])
def test_bad_texts(emb, bad):
    with pytest.raises(InvalidTextError):
        emb.encode(bad)


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True, "8"])
def test_bad_batch_size(emb, batch_size):
    with pytest.raises(InvalidArgumentError):
        emb.encode(TEXTS, batch_size=batch_size)


def test_huge_text_is_cut_to_its_first_characters(emb):
    head = "The robot charged its battery in the kitchen. " * (MAX_TEXT_CHARS // 46 + 1)
    huge = head[:MAX_TEXT_CHARS] + "zebra giraffe volcano " * 50_000     # about 1.1 MB
    out = emb.encode([huge, head[:MAX_TEXT_CHARS]])
    assert np.isclose(np.linalg.norm(out[0]), 1.0, atol=1e-5)
    assert np.array_equal(out[0], out[1])


def test_deterministic_and_independent_of_batching(emb):
    texts = list(CALIBRATION_TEXTS)
    one = np.vstack([emb.encode([t]) for t in texts])
    for batch_size in (1, 7, 256):
        got = emb.encode(texts, batch_size=batch_size)
        np.testing.assert_allclose(got, one, rtol=0, atol=2e-6)
    assert np.array_equal(emb.encode(texts), emb.encode(texts))
    assert np.array_equal(StaticEmbedder().encode(texts[:5]), emb.encode(texts[:5]))


def test_tokenizer_is_minilms(emb):
    man = manifest("static-minilm-l6-v2")
    assert man["tokenizer_sha256"] == manifest(man["tokenizer_model"])["tokenizer_sha256"]
    # the table has a row for every word piece of that tokenizer
    vocab = json.loads(resource(man["tokenizer_model"], "tokenizer.json").read_text("utf-8"))
    assert len(vocab["model"]["vocab"]) == man["vocab_size"]


def test_damaged_vectors_are_refused(tmp_path):
    folder = tmp_path / "static"
    folder.mkdir()
    man = manifest("static-minilm-l6-v2")
    (folder / "manifest.json").write_text(json.dumps(man), "utf-8")
    with resource("static-minilm-l6-v2", man["file"]).open("rb") as src, \
            open(folder / man["file"], "wb") as dst:
        shutil.copyfileobj(src, dst)
    data = bytearray((folder / man["file"]).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / man["file"]).write_bytes(bytes(data))
    with pytest.raises(ModelChecksumError):
        StaticEmbedder(folder).encode(["hello"])


def test_agrees_with_minilm_on_which_texts_are_alike(emb):
    """The static vectors live in another space, so agreement is compared on what retrieval
    uses: the cosines between texts. Over the variant self-check and calibration texts (57
    texts, 1,596 pairs) the Pearson correlation of the static and MiniLM pairwise cosines
    measured 0.534 (2026-12-04; the hashing embedder's: 0.227)."""
    texts = [t for t in SELF_CHECK_TEXTS + CALIBRATION_TEXTS if t]
    upper = np.triu_indices(len(texts), k=1)
    minilm = MiniLMEmbedder().encode(texts)
    reference = (minilm @ minilm.T)[upper]

    def agreement(embedder) -> float:
        vectors = embedder.encode(texts)
        return float(np.corrcoef((vectors @ vectors.T)[upper], reference)[0, 1])

    static = agreement(emb)
    assert static >= 0.45
    assert static >= agreement(HashingEmbedder(dim=384)) + 0.2


def test_paraphrase_is_closer_than_unrelated(emb):
    v = emb.encode(["When did Melanie paint the sunrise?",
                    "Melanie painted a sunrise over the lake in 2022.",
                    "The lidar timed out after 250 ms; restarting the driver."])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_store_written_by_it_refuses_another_embedder(tmp_path, emb):
    path = tmp_path / "ltm"
    with LongTermMemory(path, emb) as store:
        store.put("ns", "k", "The spare key is under the blue pot.")
    for other in (HashingEmbedder(dim=emb.dim), MiniLMEmbedder()):
        with pytest.raises(EmbedderMismatchError):
            LongTermMemory(path, other)
    with LongTermMemory(path, StaticEmbedder()) as store:
        assert store.embedder_name == emb.name
        assert store.search("ns", "where is the key", top_k=1)[0].key == "k"


def test_cli_embedder_static(tmp_path, capsys):
    from memcore.cli import main

    store = str(tmp_path / "cli")
    assert main(["--store", store, "--embedder", "static", "put", "notes",
                 "The spare key is under the blue pot."]) == 0
    assert main(["--json", "--store", store, "search", "notes", "where is the key"]) == 0
    assert "blue pot" in capsys.readouterr().out
    assert main(["--store", store, "--embedder", "hashing", "search", "notes", "key"]) != 0
