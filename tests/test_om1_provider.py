"""The OM1 drop-in: OM1's SemanticMemoryProvider interface over SemanticMemory.

Mirrors what OM1's own provider tests check (tests/providers/test_semantic_memory_provider.py
in OpenMind/OM1: defaults, singleton, disabled no-ops, store/retrieve, threshold, truncation,
top_k, mode isolation, clear_mode, errors logged not raised) plus what memcore adds: lazy
loading, thread-safe singleton, user ids, persistence across a restart, the config keys.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from memcore import HashingEmbedder
from memcore.errors import InvalidArgumentError, InvalidNamespaceError
from memcore.integrations.om1 import MAX_TEXT_LENGTH, SemanticMemoryProvider


@pytest.fixture(autouse=True)
def fresh():
    SemanticMemoryProvider.reset()
    yield
    SemanticMemoryProvider.reset()


@pytest.fixture
def provider(tmp_path):
    p = SemanticMemoryProvider()
    p.configure(enabled=True, path=tmp_path / "om1", embedder=HashingEmbedder())
    return p


def test_defaults_disabled_and_nothing_loaded():
    p = SemanticMemoryProvider()
    assert (p.enabled, p.top_k, p.similarity_threshold, p.user_id) == (False, 3, 0.3, None)
    p.store("input", "response", "default", 1)
    assert p.retrieve("query", "default") == [] and p.clear_mode("default") == 0
    assert p.memories_section("query", "default") == ""
    assert p._memory is None          # lazy: no model, no store until enabled
    p.configure(enabled=False, top_k=5, similarity_threshold=0.5)
    assert (p.enabled, p.top_k, p.similarity_threshold) == (False, 5, 0.5) and p._memory is None


def test_one_instance_per_process_even_under_threads():
    seen = []
    barrier = threading.Barrier(8)

    def make():
        barrier.wait()
        seen.append(SemanticMemoryProvider())

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(p) for p in seen}) == 1 and seen[0] is SemanticMemoryProvider()


def test_store_then_retrieve_om1_documents(provider):
    provider.store("I see a person waving", "I waved back", "test_mode", 1)
    provider.flush()
    assert provider.retrieve("person waving", "test_mode") == [
        "Input: I see a person waving | Response: I waved back"]
    # the section OM1's Fuser builds from these documents
    assert provider.memories_section("person waving", "test_mode") == (
        "\nRELEVANT MEMORIES:\n1. Input: I see a person waving | Response: I waved back\n")
    assert provider.memories_section("   ", "test_mode") == ""
    assert provider.retrieve("person waving", "empty_mode") == []


def test_threshold_top_k_and_truncation(provider):
    for i in range(5):
        provider.store(f"the red door number {i} is open", f"close door {i}", "doors", i)
    provider.store("x" * 5000, "y" * 5000, "long", 9)
    provider.flush()
    assert len(provider.retrieve("red door open", "doors")) == 3          # top_k = 3
    assert len(provider.retrieve("red door open", "doors", top_k=2)) == 2
    provider.configure(enabled=True, top_k=10, similarity_threshold=0.99,
                       path=provider.path, embedder=provider._embedder)
    assert provider.retrieve("unrelated volcano", "doors") == []
    provider.configure(enabled=True, similarity_threshold=0.0, path=provider.path)
    [doc] = provider.retrieve("x" * 5000, "long")
    text, response = doc.removeprefix("Input: ").split(" | Response: ")
    assert len(text) <= MAX_TEXT_LENGTH and len(response) <= MAX_TEXT_LENGTH   # each side capped
    assert text.startswith("x" * (MAX_TEXT_LENGTH - 1)) and response.startswith("y" * 999)


def test_modes_are_isolated_and_clear_mode(provider):
    provider.store("mode_a data", "mode_a action", "mode_a", 1)
    provider.store("mode_b data", "mode_b action", "mode_b", 2)
    provider.flush()
    assert ["mode_a" in d for d in provider.retrieve("data", "mode_a")] == [True]
    assert ["mode_b" in d for d in provider.retrieve("data", "mode_b")] == [True]
    assert provider.clear_mode("mode_a") == 1
    assert provider.retrieve("data", "mode_a") == []
    assert len(provider.retrieve("data", "mode_b")) == 1


def test_user_ids_key_memories_by_user(provider):
    provider.store("the shared charging dock is in the hall", "ok", "home", 1)
    provider.set_user("alice")
    provider.store("alice drinks coffee at nine", "noted", "home", 2)
    provider.flush()
    assert provider.retrieve("coffee at nine", "home") == [
        "Input: alice drinks coffee at nine | Response: noted"]
    provider.store("bob likes tea", "noted", "home", 3)
    provider.set_user("bob")                 # drains alice's queue into alice's namespace
    assert provider.retrieve("coffee at nine", "home") == []
    provider.set_user("alice")
    assert len(provider.retrieve("coffee at nine", "home")) == 1
    assert len(provider.retrieve("likes tea", "home")) == 1
    assert provider.retrieve("charging dock hall", "home") == []   # the shared ones are apart
    provider.set_user(None)
    assert len(provider.retrieve("charging dock hall", "home")) == 1
    with pytest.raises(InvalidNamespaceError):
        provider.set_user("")


def test_memories_survive_a_restart(tmp_path):
    p = SemanticMemoryProvider()
    p.configure(enabled=True, path=tmp_path / "om1", embedder=HashingEmbedder(),
                user_id="alice")
    p.store("the kettle is in the left cupboard", "noted", "kitchen", 7)
    p.store("the kettle is in the left cupboard", "noted", "kitchen", 7)   # same pair: one memory
    SemanticMemoryProvider.reset()           # the process ends: queue drained, store closed
    q = SemanticMemoryProvider()
    assert q is not p and not q.enabled
    q.configure_from(SimpleNamespace(semantic_memory_enabled=True, semantic_memory_top_k=2,
                                     semantic_memory_threshold=0.2,
                                     semantic_memory_path=str(tmp_path / "om1"),
                                     semantic_memory_user_id="alice"))
    # no embedder given: the store's own (hashing) is rebuilt, not the default MiniLM
    assert (q.top_k, q.similarity_threshold, q.user_id) == (2, 0.2, "alice")
    assert q.retrieve("where is the kettle", "kitchen") == [
        "Input: the kettle is in the left cupboard | Response: noted"]


def test_bad_configuration_raises_and_changes_nothing(provider):
    with pytest.raises(InvalidArgumentError):
        provider.configure(enabled=True, top_k=0)
    with pytest.raises(InvalidArgumentError):
        provider.configure(enabled=True, similarity_threshold=2.0)
    with pytest.raises(TypeError):
        provider.configure(enabled="yes")
    assert (provider.enabled, provider.top_k, provider.similarity_threshold) == (True, 3, 0.3)


def test_failures_are_logged_not_raised(tmp_path, caplog):
    p = SemanticMemoryProvider()
    (tmp_path / "a-file").write_text("not a directory")
    p.configure(enabled=True, path=tmp_path / "a-file", embedder=HashingEmbedder())
    assert not p.enabled and "cannot open" in caplog.text     # disabled, as OM1 does
    p.configure(enabled=True, path=tmp_path / "ok", embedder=HashingEmbedder())
    caplog.clear()
    assert p.retrieve("query", "") == [] and "failed to retrieve" in caplog.text
    p.store("input", "response", "bad\x00mode", 1)
    assert "failed to store" in caplog.text
    p.store("   ", "response", "mode", 1)                   # blank input: skipped quietly
    p.flush()
    assert p.retrieve("input", "mode") == []


# OM1's provider as of OpenMind/OM1 db1898dd (src/providers/semantic_memory_provider.py):
# method -> its parameters after self, with their defaults (inspect.Parameter.empty: none).
_EMPTY = object()
OM1_INTERFACE = {
    "configure": [("enabled", False), ("top_k", 3), ("similarity_threshold", 0.3)],
    "store": [("sensory_input", _EMPTY), ("action_response", _EMPTY), ("mode", _EMPTY),
              ("tick", _EMPTY)],
    "retrieve": [("query", _EMPTY), ("mode", _EMPTY), ("top_k", None)],
    "clear_mode": [("mode", _EMPTY)],
}


@pytest.mark.parametrize("method", sorted(OM1_INTERFACE))
def test_signatures_accept_every_om1_call(method):
    """Every call OM1 makes (positional or by keyword) binds to the same parameters here;
    memcore's extra parameters come after OM1's and all have defaults."""
    import inspect

    params = list(inspect.signature(getattr(SemanticMemoryProvider, method)).parameters.values())[1:]
    ours = params[:len(OM1_INTERFACE[method])]
    for (name, default), p in zip(OM1_INTERFACE[method], ours):
        assert p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD,), (method, p)
        if default is not _EMPTY:
            assert p.default == default, (method, name, p.default)
    assert all(p.default is not p.empty for p in params[len(ours):]), method
