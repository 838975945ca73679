"""SemanticMemory: the tick loop, encode-once, modes, background writer, persistence, prompt."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from memcore import SemanticMemory
from memcore.agent import BackgroundWriteError, MemoryClosedError, format_prompt, human_age
from memcore.demo import DEMO_THRESHOLD, DEMO_TOP_K, ManualClock, load_script, run_script
from memcore.embedders import HashingEmbedder
from memcore.errors import InvalidNamespaceError, InvalidTextError
from memcore.extractors import FactExtractor, pair_key
from memcore.types import MemoryHit, MemoryTier, PromotionPolicy

T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[1]


class CountingEmbedder:
    """Wraps an embedder and records every encode call (optionally failing or gated)."""

    def __init__(self, inner=None, *, fail_on: str | None = None, gate: threading.Event | None = None):
        self.inner = inner or HashingEmbedder(dim=384)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls: list[list[str]] = []
        self.fail_on = fail_on
        self.gate = gate

    def encode(self, texts, *, batch_size: int = 32):
        texts = list(texts)
        self.calls.append(texts)
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError(f"encoder exploded on {self.fail_on!r}")
        return self.inner.encode(texts, batch_size=batch_size)


@pytest.fixture(scope="module")
def hashing():
    return HashingEmbedder(dim=384)


@pytest.fixture
def clock():
    return ManualClock(T0)


def make(embedder, clock, path=None, **kw) -> SemanticMemory:
    return SemanticMemory(path, embedder, clock=clock, **kw)


# ---------------------------------------------------------------- the tick

@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_tick_loop_end_to_end_hashing(hashing, clock, tmp_path, on_disk):
    path = tmp_path / "store" if on_disk else None
    with make(hashing, clock, path) as mem:
        assert mem.retrieve("Where is the kettle?", "kitchen") == []
        assert mem.format_prompt([]) == ""
        mem.store("Where is the kettle? It is in the left cupboard.", "Noted.", "kitchen")
        mem.store("The dog barks at the mailman.", "I will calm the dog.", "kitchen")
        clock.advance(185.0)
        hits = mem.retrieve("Where is the kettle?", "kitchen")
        assert hits and hits[0].text == "Where is the kettle? It is in the left cupboard."
        assert all(h.similarity >= 0.3 for h in hits) and len(hits) <= 3
        prompt = mem.format_prompt(hits)
        lines = prompt.splitlines()
        assert lines[0] == "RELEVANT MEMORIES" and len(lines) == 1 + len(hits)
        assert lines[1] == "- [3 min ago] Where is the kettle? It is in the left cupboard. -> Noted."


def test_a_tick_encodes_once_and_store_reuses_the_retrieved_vector(clock):
    emb = CountingEmbedder()
    with make(emb, clock, warmup=False) as mem:
        mem.store("seed memory about the hallway", "ok", "patrol")
        emb.calls.clear()
        for i in range(5):
            text = f"camera {i} sees the hallway"
            mem.retrieve(text, "patrol")
            mem.store(text, "logging it", "patrol")
        assert emb.calls == [[f"camera {i} sees the hallway"] for i in range(5)]
        # the stored vector is exactly the retrieved one: the memory is its own best match
        hit = mem.retrieve("camera 3 sees the hallway", "patrol", top_k=1)[0]
        assert hit.similarity == pytest.approx(1.0, abs=1e-5)
        # a store without a preceding retrieve of the same text encodes it itself
        emb.calls.clear()
        mem.store("unseen text", "r", "patrol")
        assert emb.calls == [["unseen text"]]


def test_a_tick_naming_a_speaker_encodes_once(clock):
    """Retrieve embeds the input's dense form (a known speaker's name to first person); the
    store of that input reuses the vector instead of embedding the raw text a second time."""
    emb = CountingEmbedder()
    with make(emb, clock, warmup=False) as mem:
        mem.store("I painted a sunrise over the lake", "ok", "chat", metadata={"speaker": "Melanie"})
        text = "When did Melanie paint the sunrise?"
        dense = mem.tiers.dense_query(mem.namespace_of("chat"), text)
        assert dense != text
        emb.calls.clear()
        mem.retrieve(text, "chat")
        [item] = mem.store(text, "in May", "chat")
        assert emb.calls == [[dense]]
        np.testing.assert_array_equal(mem.tiers.vector(mem.namespace_of("chat"), item.key),
                                      HashingEmbedder(dim=384).encode([dense])[0])
        # another mode's retrieve (its own speakers) is not reused for this mode's store
        emb.calls.clear()
        mem.retrieve(text, "chat")
        mem.store(text, "in May", "other")
        assert emb.calls == [[text]]


def test_retrieve_edge_inputs(hashing, clock):
    with make(hashing, clock) as mem:
        mem.store("hello robot", "hi", "chat")
        assert mem.retrieve("", "chat") == [] and mem.retrieve("  \n\t", "chat") == []
        assert mem.retrieve("!!! ???", "chat") == []  # no tokens: all-zero embedding, no signal
        with pytest.raises(InvalidTextError):
            mem.retrieve("bad \ud800", "chat")
        with pytest.raises(ValueError):
            mem.retrieve("hello", "chat", top_k=0)
        for blank in ("", "   ", "\n\t"):
            with pytest.raises(InvalidTextError, match="content"):   # as the stores refuse it
                mem.store(blank, "nothing to remember", "chat")
        assert mem.stats()["modes"]["chat"]["short"] == 1
        with pytest.raises(ValueError, match=r"\[-1, 1\]"):
            mem.retrieve("hello robot", "chat", threshold=1.01)   # a cosine cannot exceed 1
        assert mem.retrieve("hello robot", "chat", threshold=1.0) == []
        assert len(mem.retrieve("hello robot", "chat", threshold=-1.0, top_k=10)) == 1


def test_store_caps_each_side_and_records_truncation(hashing, clock):
    with make(hashing, clock, max_input_chars=20, max_response_chars=8) as mem:
        [item] = mem.store("patrol " * 20, "response " * 5, "patrol", importance=0.9,
                           metadata={"room": "hall"})
        got = mem.tiers.get(("agent", "patrol"), item.key)
        assert len(got.text) == 20 and len(got.metadata["response"]) == 8
        assert got.metadata["truncated"] == ["input", "response"]
        assert got.metadata["input_chars"] == 140 and got.metadata["room"] == "hall"
        assert got.importance == 0.9


def test_same_pair_twice_replaces_itself_unless_keyed(hashing, clock):
    with make(hashing, clock) as mem:
        mem.store("door open", "closing it", "patrol")
        clock.advance(60)
        mem.store("door open", "closing it", "patrol")
        assert mem.stats()["modes"]["patrol"]["short"] == 1
        mem.store("door open", "closing it", "patrol", key="event-2")
        assert mem.stats()["modes"]["patrol"]["short"] == 2


# ---------------------------------------------------------------- modes

ODD_MODES = ["../../etc", "a/b", "CON", "nul.txt", "🤖 patrol", "x" * 300, ".", "\\", "C:"]


def test_modes_are_isolated_and_any_name_is_safe(hashing, clock, tmp_path):
    root = tmp_path / "store"
    with make(hashing, clock, root, consolidate_every=1, policy=PromotionPolicy(min_importance=0.0)) as mem:
        for mode in ODD_MODES:
            mem.store(f"secret of mode {mode}", "ok", mode)
        mem.store("the charger is in the hallway", "ok", "patrol")
        assert mem.retrieve("the charger is in the hallway", "kitchen") == []
        assert mem.retrieve("the charger is in the hallway", "patrol")[0].text == "the charger is in the hallway"
        for mode in ODD_MODES:
            hits = mem.retrieve(f"secret of mode {mode}", mode, top_k=10, threshold=-1)
            assert [h.text for h in hits] == [f"secret of mode {mode}"]
        assert mem.modes() == sorted(ODD_MODES + ["patrol"])
        with pytest.raises(InvalidNamespaceError):
            mem.retrieve("x", "")
        with pytest.raises(InvalidNamespaceError):
            mem.store("x", "y", "bad\x00mode")
        with pytest.raises(InvalidNamespaceError):
            mem.retrieve("x", ("tuple",))  # type: ignore[arg-type]
    outside = [p for p in tmp_path.rglob("*") if root not in p.parents and p != root]
    assert outside == []


def test_clear_mode_and_stats(hashing, clock):
    with make(hashing, clock, consolidate_every=2, policy=PromotionPolicy(min_importance=0.6)) as mem:
        mem.store("a important", "r", "m1", importance=0.9)
        mem.store("b trivial", "r", "m1", importance=0.1)   # 2 stores -> consolidate: a promoted
        mem.store("c other mode", "r", "m2")
        for _ in range(3):
            mem.retrieve("a important", "m1")
        st = mem.stats()
        assert st["modes"] == {"m1": {"short": 1, "long": 1}, "m2": {"short": 1, "long": 0}}
        assert st["tiers"] == {"short": 2, "long": 1}
        assert st["consolidations"] == 1 and st["stored"] == 3 and st["pending"] == 0
        assert st["retrieve"]["count"] == 3 and st["store"]["count"] == 3
        assert 0 < st["retrieve"]["p50_ms"] <= st["retrieve"]["p95_ms"]
        assert mem.clear_mode("m1") == 2
        assert mem.modes() == ["m2"]
        assert mem.retrieve("a important", "m1") == []


def test_consolidate_promotes_by_policy_and_close_consolidates(hashing, clock, tmp_path):
    path = tmp_path / "s"
    with make(hashing, clock, path, consolidate_every=0) as mem:
        mem.store("keep me", "r", "m", importance=0.8)
        mem.store("forget me", "r", "m", importance=0.1)
        assert mem.stats()["tiers"] == {"short": 2, "long": 0}
        assert mem.consolidate() == 1
        assert mem.retrieve("keep me", "m")[0].tier is MemoryTier.LONG
    with make(hashing, clock, path) as mem:     # the unpromoted one is back in the short tier
        hits = mem.retrieve("keep me", "m", threshold=-1, top_k=5)
        assert [(h.text, h.tier) for h in hits] == [("keep me", MemoryTier.LONG),
                                                    ("forget me", MemoryTier.SHORT)]


# ---------------------------------------------------------------- background writer

def test_background_writer_under_concurrent_retrieves(clock):
    emb = CountingEmbedder()
    errors: list[BaseException] = []
    stop = threading.Event()
    with make(emb, clock, short_capacity=1000, consolidate_every=50) as mem:
        mem.store("warm memory", "r", "m")

        def reader():
            try:
                while not stop.is_set():
                    for h in mem.retrieve("memory number", "m", top_k=5, threshold=-1):
                        assert h.text.startswith(("memory number", "warm memory"))
            except BaseException as err:  # surfaced below
                errors.append(err)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        for i in range(300):
            mem.store(f"memory number {i}", f"response {i}", "m", background=True)
        mem.flush()
        stop.set()
        for t in threads:
            t.join()
        assert errors == []
        st = mem.stats()
        assert st["pending"] == 0 and st["stored"] == 301
        assert st["modes"]["m"]["short"] + st["modes"]["m"]["long"] == 301
        for i in range(300):
            got = mem.tiers.get(("agent", "m"), pair_key(f"memory number {i}", f"response {i}"))
            assert got.text == f"memory number {i}" and got.metadata["response"] == f"response {i}"


def test_background_writer_batches_embeds(clock):
    gate = threading.Event()
    emb = CountingEmbedder(gate=gate)
    gate.set()
    with make(emb, clock, warmup=False, batch_size=64) as mem:
        gate.clear()
        mem.store("first", "r", "m", background=True)       # the worker blocks on this encode
        for i in range(20):
            mem.store(f"queued {i}", "r", "m", background=True)
        gate.set()
        mem.flush()
        # 21 background stores, at most 2 encoder calls: what queued while one batch was being
        # embedded goes into the next batch together
        assert len(emb.calls) <= 2
        assert [t for call in emb.calls for t in call] == ["first"] + [f"queued {i}" for i in range(20)]


def test_worker_error_is_raised_on_the_next_call_not_swallowed(clock):
    emb = CountingEmbedder(fail_on="poison")
    mem = make(emb, clock)
    mem.store("poison", "r", "m", background=True)
    with pytest.raises(BackgroundWriteError, match="encoder exploded") as info:
        mem.flush()
    assert isinstance(info.value.__cause__, RuntimeError)
    mem.store("fine", "r", "m")  # reported once, then the memory works again
    assert mem.retrieve("fine", "m")[0].text == "fine"
    mem.store("poison", "r", "m", background=True)
    mem._queue.join()
    with pytest.raises(BackgroundWriteError):
        mem.retrieve("fine", "m")
    mem.store("poison", "r", "m", background=True)
    with pytest.raises(BackgroundWriteError):
        mem.close()
    with pytest.raises(MemoryClosedError):
        mem.retrieve("fine", "m")
    mem.close()  # idempotent


def test_close_drains_the_queue(hashing, clock, tmp_path):
    path = tmp_path / "s"
    mem = make(hashing, clock, path)
    for i in range(50):
        mem.store(f"queued fact {i}", "r", "m", background=True)
    mem.close()
    with make(hashing, clock, path) as again:
        assert again.stats()["modes"]["m"]["long"] == 50


# ---------------------------------------------------------------- extractors in the loop

def test_fact_extractor_in_the_loop_replaces_by_stable_key(hashing, clock):
    with make(hashing, clock, extractors=[FactExtractor()]) as mem:
        mem.store("Hi, my name is Alice.", "Hello Alice!", "chat")
        clock.advance(60)
        mem.store("Sorry, my name is Alicia.", "Got it, Alicia.", "chat")
        fact = mem.tiers.get(("agent", "chat"), "user.name")
        assert fact.text == "The user's name is Alicia." and fact.importance == 0.9
        assert fact.created_at == T0  # replaced, created_at kept


def test_constructor_validation(hashing, clock):
    with pytest.raises(ValueError, match="consolidate_every"):
        make(hashing, clock, short_capacity=10, consolidate_every=11)
    with pytest.raises(ValueError, match="path"):
        make(hashing, clock, durability="fsync")
    with pytest.raises(ValueError):
        make(hashing, clock, top_k=0)
    with pytest.raises(TypeError):
        make(hashing, clock, weights={"w_similarity": 1})
    with pytest.raises(TypeError):
        make(hashing, clock, extractors=[object()])


# ---------------------------------------------------------------- prompt

@pytest.mark.parametrize("seconds, text", [
    (-5, "just now"), (0, "just now"), (4.9, "just now"), (42, "42 s ago"), (185, "3 min ago"),
    (3600 * 5 + 10, "5 h ago"), (86400, "1 day ago"), (86400 * 3, "3 days ago"),
    (86400 * 21, "3 weeks ago"), (86400 * 90, "3 months ago"), (86400 * 800, "2 years ago"),
])
def test_human_age(seconds, text):
    assert human_age(seconds) == text


def test_format_prompt_one_line_per_memory():
    hits = [
        MemoryHit(key="k1", text="multi\nline\ninput", score=1.0, similarity=0.9, recency=1.0,
                  importance=0.5, tier=MemoryTier.SHORT,
                  metadata={"kind": "pair", "response": "an\nanswer"}, created_at=T0 - 120),
        MemoryHit(key="user.name", text="The user's name is Ada.", score=0.8, similarity=0.7,
                  recency=1.0, importance=0.9, tier=MemoryTier.LONG, metadata={"kind": "fact"},
                  created_at=T0 - 86400 * 2),
    ]
    assert format_prompt(hits, now=T0) == (
        "RELEVANT MEMORIES\n"
        "- [2 min ago] multi line input -> an answer\n"
        "- [2 days ago] The user's name is Ada.\n")
    assert format_prompt([], now=T0) == ""


# ---------------------------------------------------------------- persistence across a restart

def _run(code: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(store)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_name_survives_a_process_restart(tmp_path):
    store = tmp_path / "robot"
    first = _run("""
        import sys
        from memcore import SemanticMemory, HashingEmbedder
        with SemanticMemory(sys.argv[1], HashingEmbedder(dim=384)) as mem:
            mem.store("My name is Ada Lovelace.", "Nice to meet you, Ada.", "chat", background=True)
        print("stored")
    """, store)
    assert first.returncode == 0, first.stderr
    second = _run("""
        import sys
        from memcore import SemanticMemory, HashingEmbedder
        with SemanticMemory(sys.argv[1], HashingEmbedder(dim=384)) as mem:
            hits = mem.retrieve("What is my name?", "chat")
            print(hits[0].text if hits else "NOTHING")
            print(mem.retrieve("What is my name?", "kitchen"))
    """, store)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["My name is Ada Lovelace.", "[]"]


# ---------------------------------------------------------------- bundled demo, both embedders

def assert_coherent(summary, script):
    """Every answer rests on that tick's recalled memories; a missing fact gives "unknown"."""
    for tick in summary["transcript"]:
        recalled = " ".join(tick["recalled"]).casefold()
        found = all(fact.casefold() in recalled for fact in tick["needs"])
        if tick["needs"] and not found:
            assert tick["response"] == script["unknown"], tick
        elif tick["needs"]:
            assert tick["response"] != script["unknown"], tick
    assert summary["answered"] == sum(t["response"] != script["unknown"]
                                      for t in summary["transcript"] if t["needs"])


def demo_memory(embedder, clock, path=None):
    return make(embedder, clock, path, extractors=[FactExtractor()], top_k=DEMO_TOP_K,
                threshold=DEMO_THRESHOLD)


def test_bundled_script_replays_with_hashing(hashing, clock):
    script = load_script()
    with demo_memory(hashing, clock) as mem:
        summary = run_script(mem, script, clock)
        assert summary["ticks"] == len(script["ticks"]) == 16
        assert_coherent(summary, script)
        assert summary["questions"] == 10 and summary["answered"] >= 7   # hashing: 7 of 10
        lisbon = next(t for t in summary["transcript"] if t["input"] == "Where do I live again?")
        assert lisbon["response"] == "You live in Lisbon." and lisbon["recalled"]
        hits = mem.retrieve("Where is the kettle?", "kitchen")
        assert any("left cupboard" in h.text for h in hits)
        assert "Alice" in mem.format_prompt(mem.retrieve("What is my name?", "conversation"))
        assert not any("kettle" in h.text for h in mem.retrieve("Where is the kettle?", "patrol"))
        assert np.isfinite(summary["tick_ms"]["p95_ms"])


def test_tick_loop_end_to_end_minilm(clock, tmp_path):
    from memcore.embedders import MiniLMEmbedder

    emb = CountingEmbedder(MiniLMEmbedder())
    script = load_script()
    with demo_memory(emb, clock, tmp_path / "s") as mem:
        summary = run_script(mem, script, clock)
        assert summary["embedder"] == emb.name and emb.name.startswith("minilm")
        assert_coherent(summary, script)
        assert summary["answered"] == summary["questions"] == 10   # the default embedder: all
        emb.calls.clear()
        hits = mem.retrieve("What is my name?", "conversation")
        assert any("Alice" in h.text for h in hits), hits
        mem.store("What is my name?", "Alice.", "conversation")
        assert emb.calls == [["What is my name?"]]  # the tick encoded once
        kettle = mem.retrieve("I need the kettle", "kitchen")
        assert kettle and "kettle" in kettle[0].text


# ---------------------------------------------------------------- hints instead of silence

def test_a_new_store_path_is_logged_at_info(tmp_path, caplog):
    path = tmp_path / "robot-memry"
    with caplog.at_level("INFO", logger="memcore"):
        SemanticMemory(path, HashingEmbedder(dim=64), warmup=False).close()
    created = [r for r in caplog.records if r.name == "memcore" and "creating a new one" in r.message]
    assert len(created) == 1 and created[0].levelname == "INFO" and str(path) in created[0].message
    caplog.clear()
    with caplog.at_level("INFO", logger="memcore"):
        SemanticMemory(path, HashingEmbedder(dim=64), warmup=False).close()   # it exists now
    assert not [r for r in caplog.records if "creating" in r.message]


def test_strict_retrieve_names_the_modes_that_hold_memories():
    from memcore.errors import MemcoreError, UnknownNamespaceError

    with SemanticMemory(embedder=HashingEmbedder(), warmup=False) as mem:
        assert mem.retrieve("anything", mode="chat") == []                 # lenient by default
        with pytest.raises(UnknownNamespaceError, match=r"none yet"):
            mem.retrieve("anything", mode="chat", missing_ok=False)
        mem.store("My name is Ada.", "Hello Ada!", mode="chat")
        mem.store("Battery at 18 percent.", "Docking.", mode="patrol")
        assert mem.retrieve("What is my name?", mode="caht") == []
        with pytest.raises(UnknownNamespaceError) as err:
            mem.retrieve("What is my name?", mode="caht", missing_ok=False)
        assert isinstance(err.value, MemcoreError) and isinstance(err.value, ValueError)
        assert str(err.value) == ("mode 'caht' holds no memories; did you mean 'chat'? (modes "
                                  "with memories: chat, patrol)")
        hits = mem.retrieve("What is my name?", mode="chat", missing_ok=False)
        assert [h.text for h in hits] == ["My name is Ada."]


def test_no_embedder_reopens_a_store_with_its_own(tmp_path):
    path = tmp_path / "mem"
    with SemanticMemory(path, HashingEmbedder(), warmup=False) as mem:
        mem.store("The kettle is in the left cupboard.", "Noted.", "chat", importance=0.9)
        mem.consolidate()
    with SemanticMemory(path, warmup=False) as mem:      # no embedder: the store's own
        assert mem.embedder.name == mem.long.embedder_name == HashingEmbedder().name
        hits = mem.retrieve("where is the kettle?", "chat")
        assert [h.text for h in hits] == ["The kettle is in the left cupboard."]
        mem.store("The mugs are above the sink.", "Noted.", "chat", importance=0.9)  # it writes
