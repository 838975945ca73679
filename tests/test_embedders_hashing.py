"""HashingEmbedder's API contract: shapes, dtypes, norms, batching, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore import _text
from memcore.embedders import Embedder, HashingEmbedder
from memcore.errors import InvalidTextError

MODES = ["unicode", "classic"]


@pytest.mark.parametrize("mode", MODES)
def test_protocol_name_and_dim(mode):
    emb = HashingEmbedder(dim=128, mode=mode)
    assert isinstance(emb, Embedder)
    assert emb.name == f"hashing-{mode}-v1"
    assert emb.dim == 128
    assert HashingEmbedder().mode == "unicode"


@pytest.mark.parametrize("mode", MODES)
def test_encode_empty_keeps_shape_and_dtype(mode):
    out = HashingEmbedder(dim=64, mode=mode).encode([])
    assert out.shape == (0, 64) and out.dtype == np.float32


@given(st.lists(st.text(max_size=30), max_size=12), st.sampled_from(MODES))
def test_rows_are_unit_or_zero_float32_c_contiguous(texts, mode):
    out = HashingEmbedder(dim=32, mode=mode).encode(texts)
    assert out.shape == (len(texts), 32) and out.dtype == np.float32
    assert out.flags.c_contiguous
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    assert np.all((np.abs(norms - 1) < 1e-6) | (norms == 0))


@pytest.mark.parametrize("mode", MODES)
def test_no_token_texts_give_zero_rows(mode):
    out = HashingEmbedder(mode=mode).encode(["", "   ", "!!! ...", "🍕🐈", "Robot arm"])
    assert not out[:4].any()
    assert abs(float(np.linalg.norm(out[4])) - 1) < 1e-6


@given(st.lists(st.text(max_size=20), min_size=1, max_size=20), st.integers(1, 7),
       st.sampled_from(MODES))
def test_batch_size_and_parallel_do_not_change_results(texts, batch_size, mode):
    emb = HashingEmbedder(mode=mode, parallel=False)
    want = emb.encode(texts)
    np.testing.assert_array_equal(emb.encode(texts, batch_size=batch_size), want)
    np.testing.assert_array_equal(HashingEmbedder(mode=mode, parallel=True).encode(texts), want)
    np.testing.assert_array_equal(
        np.stack([emb.encode([t])[0] for t in texts]), want)


def test_auto_parallel_large_batch_matches_serial():
    texts = [f"memory {i} of robot {i % 7} 東京{i}" for i in range(_text.PARALLEL_MIN_TEXTS + 3)]
    for mode in MODES:
        np.testing.assert_array_equal(HashingEmbedder(mode=mode).encode(texts),
                                      HashingEmbedder(mode=mode, parallel=False).encode(texts))


def test_similar_texts_are_closer():
    v = HashingEmbedder().encode(["the robot docked to charge its battery",
                                  "Robot battery charging at the dock",
                                  "my favourite pizza has olives"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_unicode_mode_folds_case_width_and_compatibility():
    v = HashingEmbedder().encode(["STRASSE ＡＢＣ file", "straße abc ﬁle"])
    np.testing.assert_array_equal(v[0], v[1])


def test_classic_mode_ignores_non_ascii_letters():
    v = HashingEmbedder(mode="classic").encode(["über café", "ber caf"])
    np.testing.assert_array_equal(v[0], v[1])


def test_load_returns_self():
    emb = HashingEmbedder(dim=16)
    assert emb.load() is emb
    assert "dim=16" in repr(emb)


@pytest.mark.parametrize("kwargs", [dict(dim=0), dict(dim=2.5), dict(dim=True),
                                    dict(mode="ascii"), dict(parallel="yes")])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        HashingEmbedder(**kwargs)


@pytest.mark.parametrize("bad", ["a str", b"bytes", ["ok", 3], ["ok", None], 5])
def test_bad_texts(bad):
    with pytest.raises(InvalidTextError):
        HashingEmbedder().encode(bad)


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True])
def test_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        HashingEmbedder().encode(["x"], batch_size=batch_size)


def test_accepts_tuples_and_generators():
    emb = HashingEmbedder()
    want = emb.encode(["a b", "c d"])
    np.testing.assert_array_equal(emb.encode(("a b", "c d")), want)
    np.testing.assert_array_equal(emb.encode(t for t in ["a b", "c d"]), want)
