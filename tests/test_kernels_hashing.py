"""memcore.kernels.hashing against its pure-Python oracles in memcore.kernels.reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memcore import _text
from memcore.kernels import hashing as K
from memcore.kernels import reference as R

TEXTS = st.lists(st.text(max_size=40), max_size=8)
# Arbitrary bytes, biased towards UTF-8 lead/continuation bytes and ASCII letters.
BYTES = st.lists(
    st.one_of(st.integers(0, 255), st.sampled_from([0x41, 0x61, 0x20, 0x80, 0xBF, 0xC3, 0xE3,
                                                     0xED, 0xF0, 0xF4, 0xCC, 0x81])),
    max_size=60)


def _pack(texts):
    data, offsets = _text.pack_utf8(texts)
    return data, offsets


def _split(raw: list[int], cuts: list[int]):
    data = np.array(raw, np.uint8)
    bounds = sorted({0, len(raw), *[c % (len(raw) + 1) for c in cuts]})
    return data, np.array(bounds, np.int64)


def _readonly(*arrays):
    for a in arrays:
        a.setflags(write=False)
    return arrays


def _unicode_hashes(kernel, data, offsets, table):
    hashes = np.zeros(data.shape[0], np.uint64)
    counts = np.full(offsets.shape[0] - 1, -7, np.int64)
    kernel(data, offsets, table, hashes, counts)
    return hashes, counts


def _assert_same_hashes(got, want, offsets):
    (gh, gc), (wh, wc) = got, want
    assert gc.dtype == wc.dtype == np.int64 and gh.dtype == wh.dtype == np.uint64
    np.testing.assert_array_equal(gc, wc)
    for i in range(offsets.shape[0] - 1):
        s = offsets[i]
        np.testing.assert_array_equal(gh[s:s + gc[i]], wh[s:s + wc[i]])


@pytest.mark.parametrize("token", [b"", b"a", b"hi", b"hello", "東京".encode()])
def test_fnv1a32_and_token_hash_match_oracle(token):
    data = np.frombuffer(token, np.uint8)
    assert K.fnv1a32(data, 0, len(token)) == R.fnv1a32(data, 0, len(token))
    assert K.token_hash(data, 0, len(token)) == R.token_hash(data, 0, len(token))


def test_fnv1a32_known_values():
    # Published FNV-1a 32 test vectors.
    for s, h in [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)]:
        assert int(K.fnv1a32(np.frombuffer(s, np.uint8), 0, len(s))) == h


@given(TEXTS, st.sampled_from([1, 7, 384]))
def test_hash_embed_classic_matches_oracle(texts, dim):
    data, offsets = _pack(texts)
    got = np.full((len(texts), dim), np.nan, np.float32)
    got_par = np.full((len(texts), dim), np.nan, np.float32)
    want = np.full((len(texts), dim), np.nan, np.float32)
    data_before, offsets_before = data.copy(), offsets.copy()
    K.hash_embed_classic(data, offsets, got)
    K.hash_embed_classic_parallel(data, offsets, got_par)
    R.hash_embed_classic(data, offsets, want)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_par, want)
    np.testing.assert_array_equal(data, data_before)
    np.testing.assert_array_equal(offsets, offsets_before)


@given(BYTES, st.lists(st.integers(0, 60), max_size=4))
def test_hash_embed_classic_arbitrary_bytes(raw, cuts):
    data, offsets = _split(raw, cuts)
    got = np.empty((offsets.shape[0] - 1, 16), np.float32)
    want = np.empty_like(got)
    K.hash_embed_classic(*_readonly(data, offsets), got)
    R.hash_embed_classic(data, offsets, want)
    np.testing.assert_array_equal(got, want)


@given(TEXTS)
def test_unicode_token_hashes_matches_oracle(texts):
    table = _text.char_class_table()
    data, offsets = _pack([_text.normalize(t) for t in texts])
    want = _unicode_hashes(R.unicode_token_hashes, data, offsets, table)
    _assert_same_hashes(_unicode_hashes(K.unicode_token_hashes, data, offsets, table), want, offsets)
    _assert_same_hashes(_unicode_hashes(K.unicode_token_hashes_parallel, data, offsets, table),
                        want, offsets)


@given(BYTES, st.lists(st.integers(0, 60), max_size=4))
def test_unicode_token_hashes_arbitrary_bytes(raw, cuts):
    # Invalid, truncated and overlong UTF-8 must separate tokens exactly like U+FFFD does.
    data, offsets = _split(raw, cuts)
    table = _text.char_class_table()
    want = _unicode_hashes(R.unicode_token_hashes, data, offsets, table)
    _assert_same_hashes(_unicode_hashes(K.unicode_token_hashes, *_readonly(data, offsets), table),
                        want, offsets)


def test_unicode_token_hashes_short_table_treats_rest_as_separators():
    table = np.zeros(128, np.uint8)
    table[ord("a"):ord("z") + 1] = K.WORD
    data, offsets = _pack(["ab\u00e9cd", "x"])
    got = _unicode_hashes(K.unicode_token_hashes, data, offsets, table)
    want = _unicode_hashes(R.unicode_token_hashes, data, offsets, table)
    _assert_same_hashes(got, want, offsets)
    assert got[1].tolist() == [2, 1]


@given(st.lists(st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([1, 2, 2**63 + 1]),
                         max_size=12), max_size=6),
       st.sampled_from([1, 5, 384]))
def test_embed_token_hashes_matches_oracle(token_lists, dim):
    counts = np.array([len(t) for t in token_lists], np.int64)
    offsets = np.zeros(len(token_lists) + 1, np.int64)
    offsets[1:] = np.cumsum(counts + 2)          # slack after each text must be ignored
    hashes = np.full(int(offsets[-1]), 2**63 + 3, np.uint64)
    for i, toks in enumerate(token_lists):
        hashes[offsets[i]:offsets[i] + len(toks)] = np.array(toks, np.uint64)
    hashes_before = hashes.copy()
    want = np.empty((len(token_lists), dim), np.float32)
    R.embed_token_hashes(hashes, offsets, counts, want)
    for kernel in (K.embed_token_hashes, K.embed_token_hashes_parallel):
        got = np.full_like(want, np.nan)
        kernel(*_readonly(hashes.copy(), offsets.copy(), counts.copy()), got)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(hashes, hashes_before)


@given(st.lists(st.integers(0, 5), max_size=10),
       st.lists(st.lists(st.integers(0, 5), max_size=10), max_size=5))
def test_tf_cosine_matches_oracle(query, docs):
    q = np.array(query, np.uint64) * np.uint64(2**61)   # large values: unsigned ordering
    counts = np.array([len(d) for d in docs], np.int64)
    offsets = np.zeros(len(docs) + 1, np.int64)
    offsets[1:] = np.cumsum(counts + 1)
    hashes = np.full(int(offsets[-1]), 4, np.uint64)
    for i, d in enumerate(docs):
        hashes[offsets[i]:offsets[i] + len(d)] = np.array(d, np.uint64) * np.uint64(2**61)
    q_before, hashes_before = q.copy(), hashes.copy()
    got = np.full(len(docs), np.nan, np.float32)
    want = np.full(len(docs), np.nan, np.float32)
    K.tf_cosine(*_readonly(q, hashes), offsets, counts, got)
    R.tf_cosine(q, hashes, offsets, counts, want)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(q, q_before)
    np.testing.assert_array_equal(hashes, hashes_before)
    assert ((got >= 0) & (got <= 1.0000001)).all()


def test_classic_kernel_rows_are_unit_or_zero():
    data, offsets = _pack(["Hello world", "", "a b c", "!!", "ab ab ab cd"])
    out = np.empty((5, 384), np.float32)
    K.hash_embed_classic(data, offsets, out)
    norms = np.linalg.norm(out, axis=1)
    np.testing.assert_allclose(norms, [1, 0, 0, 0, 1], atol=1e-6)


@given(st.lists(st.sampled_from(["ab", "cd", "ef", "x", "東京", "gh"]), min_size=50, max_size=400),
       st.sampled_from([1, 2, 3]))
def test_many_tokens_few_buckets(tokens, dim):
    # Buckets that cancel to 0 and fill again must be listed once (scratch stays in bounds).
    texts = [" ".join(tokens), " ".join(tokens[::-1]) + " ab"]
    data, offsets = _pack([_text.normalize(t) for t in texts])
    want = np.empty((2, dim), np.float32)
    R.hash_embed_classic(data, offsets, want)
    for kernel in (K.hash_embed_classic, K.hash_embed_classic_parallel):
        got = np.full_like(want, np.nan)
        kernel(data, offsets, got)
        np.testing.assert_array_equal(got, want)
    table = _text.char_class_table()
    hashes, counts = _unicode_hashes(K.unicode_token_hashes, data, offsets, table)
    R.embed_token_hashes(hashes, offsets, counts, want)
    for kernel in (K.embed_token_hashes, K.embed_token_hashes_parallel):
        got = np.full_like(want, np.nan)
        kernel(hashes, offsets, counts, got)
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# Division-free modulo, packing, ASCII table and the cached class table
# --------------------------------------------------------------------------------------------

@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=50),
       st.one_of(st.integers(1, 5000), st.integers(1, 2**32 - 1)))
@example(hs=[1, 2**32 - 1], dim=3)
@example(hs=[1, 2**32 - 1], dim=2)
def test_bucket_mod_matches_remainder(hs, dim):
    # Bucket of a token of hash h is _mod(h, magic, dim) == h % dim (Lemire's remainder);
    # embed_token_hashes goes through it, so compare with the oracle at odd dims.
    hashes = np.array(hs, np.uint64)
    if dim <= 5000:
        got = np.empty((1, dim), np.float32)
        want = np.empty_like(got)
        offsets, counts = np.array([0, len(hs)]), np.array([len(hs)])
        K.embed_token_hashes(hashes, offsets, counts, got)
        R.embed_token_hashes(hashes, offsets, counts, want)
        np.testing.assert_array_equal(got, want)
    # The magic is a uint64 (as inside the kernels). Passed as a Python int, numba typed it
    # int64 or uint64 by value, and once an int64 specialisation existed a magic >= 2**63
    # (dim 2) failed dispatch with OverflowError: the test failed or passed depending on the
    # order hypothesis drew dims in (and on what the numba cache held).
    magic = np.uint64(K._mod_magic(dim))
    assert [int(K._mod(np.uint64(h), magic, np.int64(dim))) for h in hs] == [h % dim for h in hs]


@given(st.lists(st.text(max_size=12), max_size=12))
def test_pack_matches_per_text_encoding(texts):
    texts = [t for t in texts if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]
    data, offsets, is_ascii = _text.pack(texts)
    parts = [t.encode("utf-8") for t in texts]
    assert data.tobytes() == b"".join(parts)
    assert offsets.tolist() == np.concatenate([[0], np.cumsum([len(p) for p in parts])]).tolist()
    assert is_ascii == all(t.isascii() for t in texts)


def test_ascii_class_table_is_the_head_of_the_full_table():
    table = _text.ascii_class_table()
    assert table.shape == (128,) and table.dtype == np.uint8 and not table.flags.writeable
    np.testing.assert_array_equal(table, _text.char_class_table()[:128])


def test_class_table_cache_round_trip_and_bad_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCORE_CACHE_DIR", str(tmp_path))
    path = _text._table_cache_path()
    assert path.parent == tmp_path
    built = _text._build_table(0x110000)
    np.testing.assert_array_equal(built, _text.char_class_table())
    _text._save_table(path, built)
    loaded = _text._load_table(path)
    assert loaded is not None and not loaded.flags.writeable
    np.testing.assert_array_equal(loaded, built)
    runs = np.load(path)
    # A wrong class, a moved boundary, a wrong dtype, a truncated file: all rejected.
    for bad in (runs + np.array([0, 1], np.int32) * (np.arange(len(runs))[:, None] == 5),
                runs + np.array([1, 0], np.int32) * (np.arange(len(runs))[:, None] == 9),
                runs.astype(np.int64)):
        np.save(path, bad)
        assert _text._load_table(path) is None
    path.write_bytes(path.read_bytes()[:100])
    assert _text._load_table(path) is None
    assert _text._load_table(tmp_path / "missing.npy") is None
