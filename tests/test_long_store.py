"""LongTermMemory: persistence round trips, namespace path safety, embedder checks, maintenance.

The protocol semantics shared by every store live in test_store_semantics.py; here is what is
specific to the long tier and its on-disk format.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from memcore import (
    DecayWeights,
    EmbedderMismatchError,
    HashingEmbedder,
    InvalidNamespaceError,
    LongTermMemory,
    MemoryItem,
    MemoryTier,
    ReadOnlyStoreError,
    StoreClosedError,
)
from memcore import _validate, storage

DIM = 32
T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def emb(dim: int = DIM) -> HashingEmbedder:
    return HashingEmbedder(dim=dim)


def unit(rng, n, dim=DIM):
    return _validate.vectors(rng.standard_normal((n, dim)), dim)


def open_store(path, clock=None, **kw):
    return LongTermMemory(path, emb(), clock=clock or Clock(), **kw)


def snapshot(store):
    """Every live memory with its vector bytes, for exact comparisons."""
    out = {}
    for ns in store.namespaces():
        for key in store.keys(ns):
            out[(ns, key)] = (store.get(ns, key), store.vector(ns, key).tobytes())
    return out


# ---------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("durability", ["flush", "fsync", "none"])
def test_reopen_restores_everything_bit_exact(tmp_path, durability):
    rng = np.random.default_rng(0)
    clock = Clock()
    with open_store(tmp_path / "m", clock, durability=durability) as s:
        vecs = unit(rng, 200)
        s.put_many(("robot", "map"), [MemoryItem(f"k{i}", f"text {i} é 😀", i / 200,
                                                 {"i": i, "tag": ["a", i % 3]})
                                      for i in range(200)], vectors=vecs)
        clock.t += 10
        s.put("robot", "door", "the red door", importance=0.9, metadata={"room": "hall"})
        s.put(("robot", "map"), "k3", "replaced text", vector=vecs[0])   # replace keeps created_at
        assert s.delete(("robot", "map"), "k4")
        clock.t += 5
        s.search(("robot", "map"), "text", query_vector=vecs[7], top_k=3)  # touches
        before = snapshot(s)
    with LongTermMemory.open(tmp_path / "m", emb()) as r:
        after = snapshot(r)
    assert after == before
    m = after[(("robot", "map"), "k3")][0]
    assert m.created_at == T0 and m.updated_at == T0 + 10 and m.text == "replaced text"
    assert (("robot", "map"), "k4") not in after
    assert any(v[0].access_count == 1 and v[0].last_accessed_at == T0 + 15
               for v in after.values())


def test_reopen_after_unclean_exit_keeps_acknowledged_writes(tmp_path):
    s = open_store(tmp_path / "m")
    s.put("ns", "a", "alpha")
    s.put("ns", "b", "beta")
    s.delete("ns", "a")
    before = snapshot(s)
    s._release()                    # no checkpoint: like a killed process (files stay as written)
    with open_store(tmp_path / "m") as r:
        assert snapshot(r) == before


def test_in_memory_store_needs_no_path_and_matches_disk(tmp_path):
    rng = np.random.default_rng(1)
    vecs = unit(rng, 50)
    items = [MemoryItem(f"k{i}", f"t{i}", 0.5) for i in range(50)]
    mem = LongTermMemory(None, emb(), clock=Clock())
    disk = open_store(tmp_path / "m")
    for s in (mem, disk):
        s.put_many("ns", items, vectors=vecs)
        s.delete("ns", "k1")
    q = vecs[3]
    a = mem.search("ns", "q", query_vector=q, top_k=10)
    b = disk.search("ns", "q", query_vector=q, top_k=10)
    assert [(h.key, h.score) for h in a] == [(h.key, h.score) for h in b]
    assert a[0].tier is MemoryTier.LONG and a[0].key == "k3"
    disk.close()


def test_search_is_exact_fused_ranking(tmp_path):
    rng = np.random.default_rng(2)
    clock = Clock()
    s = open_store(tmp_path / "m", clock)
    vecs = unit(rng, 300)
    imp = rng.uniform(0, 1, 300)
    for i in range(300):
        clock.t = T0 + rng.uniform(0, 1e6)
        s.put("ns", f"k{i}", f"t{i}", importance=float(imp[i]), vector=vecs[i])
    for i in range(0, 300, 7):
        s.delete("ns", f"k{i}")
    clock.t = T0 + 2e6
    w = DecayWeights(w_recency=0.5, w_importance=0.3, half_life=3e5)
    q = unit(rng, 1)[0]
    hits = s.search("ns", "q", query_vector=q, top_k=20, weights=w, touch=False)
    brute = []
    for key in s.keys("ns"):
        m = s.get("ns", key)
        sim = float(np.dot(s.vector("ns", key).astype(np.float64), q))
        rec = 0.5 ** ((clock.t - m.last_accessed_at) / w.half_life)
        brute.append((w.w_similarity * sim + w.w_recency * rec + w.w_importance * m.importance,
                      key))
    brute.sort(reverse=True)
    assert [h.key for h in hits] == [k for _, k in brute[:20]]
    np.testing.assert_allclose([h.score for h in hits], [sc for sc, _ in brute[:20]], atol=1e-5)
    s.close()


def test_filter_and_touch_and_put_stored_keeps_lifecycle(tmp_path):
    clock = Clock()
    s = open_store(tmp_path / "m", clock)
    for i in range(20):
        s.put("ns", f"k{i}", f"door number {i}", metadata={"floor": i % 2})
    hits = s.search("ns", "door", top_k=5, filter={"floor": 1})
    assert len(hits) == 5 and all(h.metadata["floor"] == 1 for h in hits)
    assert all(s.get("ns", h.key).access_count == 1 for h in hits)
    src = s.get("ns", "k0")
    other = LongTermMemory(None, emb(), clock=clock)
    other.put_stored([src], s.vector("ns", "k0")[None, :])
    got = other.get("ns", "k0")
    assert (got.created_at, got.updated_at, got.last_accessed_at, got.access_count) == \
        (src.created_at, src.updated_at, src.last_accessed_at, src.access_count)
    assert np.array_equal(other.vector("ns", "k0"), s.vector("ns", "k0"))
    s.close()


# ---------------------------------------------------------------------------- namespaces on disk

NASTY = ["..", "/", "\\", "CON", "a" * 300, "😀 emoji", "../../etc", "x/../../y", ".", "nul",
         "A", "a", "COM1.txt", " "]


def test_namespace_names_never_escape_the_root(tmp_path, format2):
    root = tmp_path / "store"
    with open_store(root) as s:
        for i, seg in enumerate(NASTY):
            s.put((seg,), "k", f"text {i}")
            s.put(("p", seg), "k", f"nested {i}")
    before = set(p for p in tmp_path.rglob("*"))
    assert all(str(p).startswith(str(root)) for p in before)
    names = os.listdir(root / "ns.0")
    assert len(names) == 2 * len(NASTY)                      # injective ("A" vs "a" too)
    assert all(len(n) <= 80 and n.startswith("n-") and n.isascii() for n in names)
    with open_store(root) as r:
        for i, seg in enumerate(NASTY):
            assert r.get((seg,), "k").text == f"text {i}"
            assert r.get(("p", seg), "k").text == f"nested {i}"
        assert len(r.namespaces(("p",))) == len(NASTY)
    with pytest.raises(InvalidNamespaceError):
        open_store(root / "other").put(("a\x00b",), "k", "t")


def test_dirname_is_injective_on_lookalikes():
    names = {storage.namespace_dirname(ns) for ns in
             [("a.b",), ("a", "b"), ("a_b",), ("A.B",), ("a/b",), ("a\\b",)]}
    assert len(names) == 6


# ---------------------------------------------------------------------------- header checks

def test_embedder_mismatch_names_both(tmp_path):
    open_store(tmp_path / "m").close()
    with pytest.raises(EmbedderMismatchError, match=r"hashing-unicode-v1.*dim 32.*dim 16"):
        LongTermMemory(tmp_path / "m", HashingEmbedder(dim=16))
    with pytest.raises(EmbedderMismatchError, match="classic"):
        LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM, mode="classic"))


def test_store_without_embedder_takes_header_and_needs_vectors(tmp_path):
    rng = np.random.default_rng(3)
    v = unit(rng, 2)
    with open_store(tmp_path / "m") as s:
        s.put("ns", "a", "alpha", vector=v[0])
    with LongTermMemory(tmp_path / "m", clock=Clock()) as s:
        assert (s.embedder_name, s.dim) == ("hashing-unicode-v1", DIM)
        with pytest.raises(EmbedderMismatchError, match="query_vector"):
            s.search("ns", "alpha")
        with pytest.raises(EmbedderMismatchError, match="vector"):
            s.put("ns", "b", "beta")
        s.put("ns", "b", "beta", vector=v[1])
        assert [h.key for h in s.search("ns", "x", query_vector=v[1], top_k=1)] == ["b"]
    with pytest.raises(ValueError, match="embedder"):
        LongTermMemory(tmp_path / "new")


@pytest.mark.parametrize("which", ["store", "namespace"])
def test_newer_format_version_is_refused(tmp_path, which):
    from memcore import FormatVersionError

    with open_store(tmp_path / "m") as s:
        s.put("ns", "a", "alpha")
    path = tmp_path / "m" / storage.STORE_HEADER
    if which == "namespace":
        path = sorted((tmp_path / "m" / "ns.0").iterdir())[0] / storage.NAMESPACE_HEADER
    h = json.loads(path.read_text())
    newest = storage.layout.PACK_VERSION if which == "store" else storage.FORMAT_VERSION
    h["version"] = newest + 1            # a store header reads up to 3 (format 3: the pack)
    path.write_text(json.dumps(h))
    if which == "store":
        with pytest.raises(FormatVersionError, match=f"version {newest + 1}"):
            open_store(tmp_path / "m")
        with pytest.raises(FormatVersionError):
            LongTermMemory.open(tmp_path / "m")
        return
    # a writer opens a namespace's files on its first use (tests/test_many_namespaces.py);
    # a reader opens them all at open
    with open_store(tmp_path / "m") as s, \
            pytest.raises(FormatVersionError, match=f"version {storage.FORMAT_VERSION + 1}"):
        s.get("ns", "a")
    with pytest.raises(FormatVersionError):
        with LongTermMemory.open(tmp_path / "m") as s:
            s.get("ns", "a")
    with pytest.raises(FormatVersionError):
        with LongTermMemory(tmp_path / "m", read_only=True) as s:
            s.get("ns", "a")


def test_read_only_open_refuses_writes_and_refreshes_in_ram(tmp_path):
    rng = np.random.default_rng(4)
    v = unit(rng, 1)
    with open_store(tmp_path / "m") as s:
        s.put("ns", "a", "alpha", vector=v[0])
    r = LongTermMemory.open(tmp_path / "m", emb(), clock=Clock(T0 + 1))
    for call in (lambda: r.put("ns", "b", "x"), lambda: r.delete("ns", "a"),
                 lambda: r.clear("ns"), lambda: r.compact(), lambda: r.repair()):
        with pytest.raises(ReadOnlyStoreError):
            call()
    assert r.search("ns", "alpha", query_vector=v[0])[0].key == "a"
    assert r.get("ns", "a").access_count == 1
    assert not r._tables[("ns",)].columns.vectors.flags.writeable
    r.close()
    with LongTermMemory.open(tmp_path / "m") as r2:
        assert r2.get("ns", "a").access_count == 0            # nothing was written
    with pytest.raises(FileNotFoundError):
        LongTermMemory.open(tmp_path / "missing")


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="durability"):
        LongTermMemory(None, emb(), durability="sometimes")
    with pytest.raises(ValueError, match="lock_timeout"):
        LongTermMemory(None, emb(), lock_timeout=-1)
    with pytest.raises(ValueError, match="path"):
        LongTermMemory(None, emb(), read_only=True)
    with pytest.raises(TypeError, match="weights"):
        LongTermMemory(None, emb(), weights={"w": 1})
    with pytest.raises(TypeError, match="embedder"):
        LongTermMemory(None, object())
    s = open_store(tmp_path / "m")
    s.close()
    with pytest.raises(StoreClosedError, match="closed"):
        s.get("ns", "a")


# ---------------------------------------------------------------------------- maintenance

def test_compact_drops_garbage_and_survives_reopen(tmp_path):
    with open_store(tmp_path / "m") as s:
        for i in range(100):
            s.put("ns", f"k{i % 10}", f"version {i}")
        s.put("gone", "x", "y")
        s.delete("gone", "x")
        before = snapshot(s)
        assert s.stats()[("ns",)] == {"live": 10, "rows": 100}
        assert s.compact() == 91
        assert s.stats() == {("ns",): {"live": 10, "rows": 10}}
        assert snapshot(s) == before
        s.put("ns", "new", "after compaction")
        before = snapshot(s)
    with open_store(tmp_path / "m") as r:
        assert snapshot(r) == before
    ns_dir = sorted((tmp_path / "m" / "ns.0").iterdir())[0]
    assert sorted(p.name for p in ns_dir.iterdir() if p.name.startswith("log")) == ["log.1"]


def test_compact_crash_before_commit_keeps_old_generation(tmp_path, monkeypatch):
    with open_store(tmp_path / "m") as s:
        for i in range(50):
            s.put("ns", f"k{i % 5}", f"version {i}")
        before = snapshot(s)
        real = storage.generations._write_ns_header

        def crash(directory, ns, dim, generation, *a, **kw):
            if generation == 1:
                raise OSError("simulated crash before the header is replaced")
            return real(directory, ns, dim, generation, *a, **kw)

        monkeypatch.setattr(storage.generations, "_write_ns_header", crash)
        with pytest.raises(OSError, match="simulated"):
            s.compact()
        monkeypatch.setattr(storage.generations, "_write_ns_header", real)
        assert snapshot(s) == before                      # the open store is unchanged
        s.put("ns", "after", "still writable")
        before = snapshot(s)
    with open_store(tmp_path / "m") as r:
        assert snapshot(r) == before


def test_compact_crash_after_commit_uses_new_generation(tmp_path, monkeypatch):
    with open_store(tmp_path / "m") as s:
        for i in range(50):
            s.put("ns", f"k{i % 5}", f"version {i}")
        before = snapshot(s)
        monkeypatch.setattr(storage.Columns, "remove_files",
                            lambda self: (_ for _ in ()).throw(OSError("crash after commit")))
        with pytest.raises(OSError, match="after commit"):
            s.compact()
        s._release()                                     # the process dies here
    monkeypatch.undo()
    with open_store(tmp_path / "m") as r:
        assert snapshot(r) == before
        assert r.stats()[("ns",)]["rows"] == 5
    ns_dir = sorted((tmp_path / "m" / "ns.0").iterdir())[0]
    assert not any(p.name.endswith(".0.f32") or p.name == "log.0" for p in ns_dir.iterdir())


def test_reindex_reembeds_and_switches_embedder(tmp_path, capsys):
    with open_store(tmp_path / "m") as s:
        s.put("ns", "a", "the red door is locked")
        s.put("ns", "b", "the dock is in the hallway")
        s.put("ns", "c", "garbage")
        s.delete("ns", "c")
        created = s.get("ns", "a").created_at
        new = HashingEmbedder(dim=48, mode="classic")
        assert s.reindex(new) == 2
        assert "reindex" in capsys.readouterr().err          # the progress bar
        assert (s.embedder_name, s.dim) == (new.name, 48)
        assert np.array_equal(s.vector("ns", "a"), new.encode(["the red door is locked"])[0])
        assert s.search("ns", "dock hallway", top_k=1)[0].key == "b"
    with pytest.raises(EmbedderMismatchError):
        open_store(tmp_path / "m")
    with LongTermMemory(tmp_path / "m", new) as r:
        assert r.get("ns", "a").created_at == created and r.count("ns") == 2
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.name.startswith("ns.")) == ["ns.1"]


def test_reindex_failure_changes_nothing(tmp_path):
    class Broken:
        name, dim = "broken", 8

        def encode(self, texts, *, batch_size=32):
            return np.full((len(texts), 8), np.nan, np.float32)

    with open_store(tmp_path / "m") as s:
        s.put("ns", "a", "alpha")
        before = snapshot(s)
        with pytest.raises(Exception, match="NaN"):
            s.reindex(Broken(), progress=False)
        assert snapshot(s) == before and s.embedder_name == "hashing-unicode-v1"
    with open_store(tmp_path / "m") as r:
        assert snapshot(r) == before


def test_export_import_jsonl_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    clock = Clock()
    with open_store(tmp_path / "m", clock) as s:
        s.put_many(("a", "b"), [MemoryItem(f"k{i}", f"text {i} ü", 0.25, {"n": i})
                                for i in range(30)], vectors=unit(rng, 30))
        s.put("other", "x", "door")
        s.search(("a", "b"), "q", query_vector=unit(rng, 1)[0])
        assert s.export_jsonl(tmp_path / "m.jsonl") == 31
        before = snapshot(s)
    dst = LongTermMemory(tmp_path / "copy", emb(), clock=Clock(T0 + 99))
    assert dst.import_jsonl(tmp_path / "m.jsonl") == 31
    assert snapshot(dst) == before
    dst.close()
    other = LongTermMemory(None, HashingEmbedder(dim=16), clock=clock)   # another embedder
    assert other.import_jsonl(tmp_path / "m.jsonl") == 31
    assert other.get("other", "x").text == "door" and other.dim == 16
    bad = tmp_path / "bad.jsonl"
    bad.write_text((tmp_path / "m.jsonl").read_text().splitlines()[0] + "\n{\"key\": 1}\n")
    with pytest.raises(ValueError, match="line 2"):
        other.import_jsonl(bad)


def test_store_path_that_is_a_file_raises_store_path_error(tmp_path):
    from memcore import StorePathError

    path = tmp_path / "not-a-dir"
    path.write_text("x")
    with pytest.raises(StorePathError) as info:
        LongTermMemory(path, HashingEmbedder(dim=DIM))
    assert isinstance(info.value, FileExistsError) and str(path) in str(info.value)
    with pytest.raises(StorePathError):
        LongTermMemory(path / "below", HashingEmbedder(dim=DIM))   # NotADirectoryError


def test_missing_store_opened_read_only_raises_store_not_found(tmp_path):
    from memcore import StoreNotFoundError

    with pytest.raises(StoreNotFoundError) as info:
        LongTermMemory.open(tmp_path / "nothing")
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize("raw, want", [
    (PermissionError(13, "Permission denied"), "StorePermissionError"),
    (OSError(28, "No space left on device"), "StoreIOError"),
])
def test_os_errors_of_a_store_become_memcore_errors(tmp_path, monkeypatch, raw, want):
    """A read-only directory (the lock file cannot be created) or a full disk: the raw
    OSError from the file system surfaces as a memcore error that is also the built-in.
    (Made by failing os.makedirs: the tests run as root, whom chmod does not stop.)"""
    import memcore

    def fail(*a, **kw):
        raise raw

    monkeypatch.setattr(storage.layout.os, "makedirs", fail)
    with pytest.raises(getattr(memcore, want)) as info:
        LongTermMemory(tmp_path / "m", HashingEmbedder(dim=DIM))
    assert isinstance(info.value, type(raw)) and isinstance(info.value, memcore.MemcoreError)


@pytest.mark.parametrize("durability", ["flush", "none"])
def test_a_failed_log_write_leaves_no_torn_record(tmp_path, monkeypatch, durability):
    """Disk full in the middle of a commit: the put raises StoreIOError and changes nothing,
    the partial record is cut off, and later writes and a reopen are intact (before, the
    torn record sat in front of the next one: damage in the middle of the log)."""
    from memcore import StoreIOError

    real = os.write

    def torn(fd, data):
        real(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    with open_store(tmp_path / "m", durability=durability) as s:
        s.put("ns", "a", "alpha")
        s.flush()
        monkeypatch.setattr(os, "write", torn)
        with pytest.raises(StoreIOError, match="No space left"):
            if durability == "none":
                s.put_many("ns", [MemoryItem("b", "beta " + "x" * (1 << 20))])  # 1 MiB: written
            else:
                s.put("ns", "b", "beta")
        monkeypatch.setattr(os, "write", real)
        assert s.get("ns", "b") is None and s.keys("ns") == ["a"]
        s.put("ns", "c", "gamma")
    with open_store(tmp_path / "m") as r:
        assert r.keys("ns") == ["a", "c"] and r.get("ns", "c").text == "gamma"
