"""memcore.open: the one store factory (path, URL or RAM + the embedder rule) the command line,
the MCP server, the OM1 provider and SemanticMemory open their stores with."""

from __future__ import annotations

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory
from memcore import open as factory
from memcore.embedders import CallableEmbedder
from memcore.errors import EmbedderMismatchError, InvalidArgumentError, StoreNotFoundError
from memcore.open import build_embedder, matching_embedder, open_store, store_embedder


def test_auto_rebuilds_the_store_embedder_and_creates_only_with_a_note(tmp_path):
    path = tmp_path / "mem"
    notes: list[str] = []
    with open_store(path, HashingEmbedder(dim=48), notify=notes.append) as store:
        store.put("robot", "dock", "the charging dock is in the hallway")
    assert notes == [f"no store at {path}: creating a new one (embedder hashing-unicode-v1)"]
    with open_store(path, notify=notes.append) as store:             # "auto": its own embedder
        assert (store.embedder.name, store.embedder.dim) == ("hashing-unicode-v1", 48)
        assert [h.key for h in store.search("robot", "where is the dock?")] == ["dock"]
    with open_store(path, read_only=True) as store:
        assert store.read_only and store.count("robot") == 1
    assert len(notes) == 1                                          # no note for an existing one


def test_missing_stores_are_created_only_when_allowed(tmp_path):
    missing = tmp_path / "nope"
    for kwargs in ({"read_only": True}, {"create": False}, {"embedder": None}):
        with pytest.raises(StoreNotFoundError, match="no memcore store"):
            open_store(missing, **{"embedder": "hashing", **kwargs})
    assert not missing.exists()
    with pytest.raises(InvalidArgumentError, match="RAM"):
        open_store(None, "hashing", read_only=True)
    with open_store(None, "hashing") as ram:
        assert ram.path is None and ram.embedder_name == "hashing-unicode-v1"


def test_no_embedder_opens_as_is_and_a_given_one_is_checked(tmp_path):
    path = tmp_path / "mem"
    with open_store(path, "hashing") as store:
        store.put("n", "k", "a red door")
        vec = store.vector("n", "k")
    with open_store(path, None, read_only=True) as bare:
        assert [h.key for h in bare.search("n", "door", query_vector=vec)] == ["k"]
    with pytest.raises(EmbedderMismatchError, match="hashing-unicode-v1"):
        open_store(path, HashingEmbedder(dim=16), read_only=True)
    with pytest.raises(InvalidArgumentError, match="minilm, hashing"):
        build_embedder("bert")


def test_a_store_of_an_unknown_embedder_is_named_not_guessed(tmp_path):
    custom = CallableEmbedder(lambda texts: np.ones((len(texts), 8), np.float32), dim=8,
                              name="my-model-v1")
    path = tmp_path / "mem"
    LongTermMemory(path, custom).close()
    with LongTermMemory.open(path) as store, pytest.raises(EmbedderMismatchError) as err:
        matching_embedder(store)
    assert "'my-model-v1'" in str(err.value) and "cannot rebuild" in str(err.value)
    with pytest.raises(EmbedderMismatchError, match="my-model-v1"):
        store_embedder(path)
    with pytest.raises(StoreNotFoundError):
        store_embedder(tmp_path / "none")


def test_the_first_minilm_preparation_is_announced_once(tmp_path, monkeypatch):
    from memcore.models import variants

    monkeypatch.setenv(variants.CACHE_DIR_ENV, str(tmp_path / "cache"))   # nothing built here
    monkeypatch.setattr(factory, "_noted_model", False)
    notes: list[str] = []
    factory._note_model_preparation(notes.append)
    factory._note_model_preparation(notes.append)
    assert len(notes) == 1 and "preparing the MiniLM model" in notes[0] and "15 s" in notes[0]
    assert str(tmp_path / "cache") in notes[0]
    assert not (tmp_path / "cache").exists()                       # announced, not built here


def test_describe_never_shows_a_password():
    assert factory.describe("postgresql://ann:s3cret@db:5432/mem") == "postgresql://ann:***@db:5432/mem"
    assert factory.describe(None) == "<in memory>"


def test_a_postgres_url_follows_the_same_rule():
    import pg_server

    url = f"{pg_server.url()}?schema={pg_server.new_schema()}"
    with pytest.raises(StoreNotFoundError, match="holds no memcore store"):
        open_store(url, "hashing", read_only=True)               # reads never create
    with pytest.raises(StoreNotFoundError):
        open_store(url, None)
    notes: list[str] = []
    with open_store(url, "hashing", notify=notes.append, lock_timeout=1.0) as pg:
        pg.put("robot", "dock", "the charging dock is in the hallway")
    assert len(notes) == 1 and notes[0].startswith("no store at postgresql://")
    assert "creating a new one (embedder hashing-unicode-v1)" in notes[0]
    with open_store(url, notify=notes.append) as pg:             # its own embedder, rebuilt
        assert pg.embedder.name == "hashing-unicode-v1"
        assert [h.key for h in pg.search("robot", "where is the dock?")] == ["dock"]
    with pytest.raises(EmbedderMismatchError):
        open_store(url, HashingEmbedder(dim=16))
    assert len(notes) == 1
