"""Many namespaces in one disk store (issue 24): namespaces open lazily, at most
OPEN_NAMESPACES at once (an LRU), listed from the catalog (memcore/storage/catalog.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem, StoreCorruptedError, storage
from memcore.stores.long_disk import OPEN_NAMESPACES

REPO = Path(__file__).resolve().parents[1]
DIM = 64


def emb():
    return HashingEmbedder(dim=DIM)


def fill(root, n, m=3, **kw):
    with LongTermMemory(root, emb(), durability="none", **kw) as s:
        for i in range(n):
            s.put_many(("users", f"u{i:04d}", "memories"),
                       [MemoryItem(f"k{j}", f"user {i} memory {j} about topic {j % 3}")
                        for j in range(m)])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def hits(s, ns, q="memory about topic 1"):
    return [(h.key, round(h.score, 6)) for h in s.search(ns, q, top_k=3, touch=False)]


#: Descriptors of the pack (format 3: its log, once, and its column maps), whatever the
#: number of namespaces in it.
PACK_FDS = 14


def catalog_file(root) -> Path:
    return Path(root) / "catalog.0.log"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_300_namespaces_under_a_low_descriptor_limit(tmp_path):
    """Written, reopened and searched in a subprocess whose RLIMIT_NOFILE is 256 (before:
    ~13 descriptors per namespace, so 300 namespaces needed ~3,900)."""
    child = textwrap.dedent("""
        import json, os, resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        from memcore import HashingEmbedder, LongTermMemory, MemoryItem
        root = sys.argv[1]
        with LongTermMemory(root, HashingEmbedder(dim=64)) as s:
            for i in range(300):
                s.put_many(("users", f"u{i:04d}"), [MemoryItem(f"k{j}", f"note {j} of {i}")
                                                    for j in range(4)])
        base = len(os.listdir("/proc/self/fd"))
        s = LongTermMemory(root, HashingEmbedder(dim=64))
        after_open = len(os.listdir("/proc/self/fd")) - base
        found = sum(s.search(("users", f"u{i:04d}"), "note 2", top_k=1)[0].key == "k2"
                    for i in range(300))
        after_search = len(os.listdir("/proc/self/fd")) - base
        out = dict(after_open=after_open, after_search=after_search, found=found,
                   listed=len(s.namespaces()), count=s.count(("users", "u0123")))
        s.close()
        print(json.dumps(out))
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", child, str(tmp_path / "m")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["found"] == 300 and res["listed"] == 300 and res["count"] == 4
    pack = PACK_FDS * (tmp_path / "m" / "ns.0" / storage.layout.PACK_DIR).is_dir()
    assert res["after_open"] <= 4 + pack                          # lock + nothing per namespace
    assert res["after_search"] <= 4 + pack + 12 * OPEN_NAMESPACES


def test_fds_after_open_are_bounded(tmp_path):
    fill(tmp_path / "m", 40)
    base = open_fds()
    pack = PACK_FDS * (tmp_path / "m" / "ns.0" / storage.layout.PACK_DIR).is_dir()
    with LongTermMemory(tmp_path / "m", emb()) as s:
        assert open_fds() - base <= 3 + pack
        for ns in s.namespaces():
            s.get(ns, "k0")
        assert len(s._tables.open_tables()) == (0 if pack else OPEN_NAMESPACES)
        assert open_fds() - base <= 3 + pack + 12 * OPEN_NAMESPACES
    assert open_fds() <= base + 1


def test_lru_eviction_then_reuse_gives_identical_results(tmp_path):
    root = tmp_path / "m"
    fill(root, 3 * OPEN_NAMESPACES)
    names = [("users", f"u{i:04d}", "memories") for i in range(3 * OPEN_NAMESPACES)]
    with LongTermMemory(root, emb()) as s:
        gets = {ns: s.get(ns, "k1").text for ns in names}
        first = {ns: hits(s, ns) for ns in names}
        s.put(names[0], "new", "a memory written after eviction")   # then evicted again
        for ns in names[1:]:
            assert hits(s, ns) == first[ns]
            assert s.get(ns, "k1").text == gets[ns]
        assert s.get(names[0], "new").text == "a memory written after eviction"
        assert s.count(names[0]) == 4
    with LongTermMemory(root, emb(), read_only=True) as s:
        assert all(hits(s, ns) == first[ns] for ns in names[1:])
        assert s.count(names[0]) == 4


def test_writer_and_read_only_reader(tmp_path):
    root = tmp_path / "m"
    fill(root, 2 * OPEN_NAMESPACES)
    w = LongTermMemory(root, emb())
    try:
        w.put(("users", "u0000", "memories"), "w", "written while a reader reads")
        r = LongTermMemory(root, read_only=True)
        try:
            assert len(r.namespaces()) == 2 * OPEN_NAMESPACES        # summaries untrusted
            for i in range(2 * OPEN_NAMESPACES):
                assert r.count(("users", f"u{i:04d}", "memories")) == 3 + (i == 0)
            w.put(("users", "u9999", "memories"), "x", "a new namespace")
            w.flush()
        finally:
            r.close()
    finally:
        w.close()
    with LongTermMemory.open(root) as r:
        assert len(r.namespaces()) == 2 * OPEN_NAMESPACES + 1


@pytest.mark.parametrize("how", ["deleted", "damaged", "truncated"])
def test_catalog_missing_or_damaged_is_rebuilt(tmp_path, how, format2):
    root = tmp_path / "m"
    fill(root, 12)
    with LongTermMemory(root, emb()) as s:
        s.clear(("users", "u0003", "memories"))
        before = s.namespaces()
    cat = catalog_file(root)
    assert cat.exists()
    if how == "deleted":
        cat.unlink()
    elif how == "damaged":
        raw = bytearray(cat.read_bytes())
        raw[len(raw) // 2] ^= 0x20
        cat.write_bytes(bytes(raw))
    else:
        cat.write_bytes(cat.read_bytes()[:-7])
    with LongTermMemory(root, read_only=True) as r:
        assert r.namespaces() == before
    with LongTermMemory(root, emb()) as s:
        assert s.namespaces() == before
    text = cat.read_text()
    assert text.count('"dir"') == 11 and '"clean"' in text.splitlines()[-1]
    with LongTermMemory(root, read_only=True) as r:   # a reader opens every namespace
        assert r.namespaces() == before
    with LongTermMemory(root, emb()) as s:
        assert s.namespaces() == before and not s._tables.open_tables()   # from summaries


def test_damage_found_at_first_use_isolates_only_that_namespace(tmp_path, caplog, format2):
    root = tmp_path / "m"
    fill(root, 10)
    bad_ns = ("users", "u0004", "memories")
    bad = root / "ns.0" / storage.namespace_dirname(bad_ns) / storage.NAMESPACE_HEADER
    bad.write_text("{ not json")
    with LongTermMemory(root, emb()) as s:
        assert not s._tables.damaged                 # nothing opened yet
        assert s.count(("users", "u0001", "memories")) == 3
        with pytest.raises(StoreCorruptedError, match="isolated"):
            s.get(bad_ns, "k0")
        assert "isolated" in caplog.text
        with pytest.raises(StoreCorruptedError):
            s.search(bad_ns, "memory")
        assert list(s.damaged) == [storage.namespace_dirname(bad_ns)]
        assert len(s.namespaces()) == 9
        assert s.count(("users", "u0005", "memories")) == 3
    with LongTermMemory(root, emb()) as s:
        assert list(s.damaged) == [storage.namespace_dirname(bad_ns)]   # damaged() probes
        report = s.repair()
        assert report and not s.damaged
        assert s.count(bad_ns) == 3


def test_namespaces_prefix_and_limit_from_the_catalog(tmp_path):
    root = tmp_path / "m"
    with LongTermMemory(root, emb(), durability="none") as s:
        for a in ("acme", "acme-corp", "beta"):
            for b in ("x", "y", "z"):
                s.put((a, b), "k", f"{a} {b}")
        s.put(("acme", "x", "deep"), "k", "deep")
        s.put(("gone",), "k", "soon cleared")
        s.delete(("gone",), "k")
        want = {p: s.namespaces(p) for p in (None, ("acme",), ("acme", "x"), ("beta",))}
    with LongTermMemory(root, emb(), read_only=True) as r:
        assert {p: r.namespaces(p) for p in want} == want
    with LongTermMemory(root, emb()) as s:            # a writer answers from the catalog
        assert {p: s.namespaces(p) for p in want} == want
        assert not s._tables.open_tables()
    assert want[("acme",)] == [("acme", "x"), ("acme", "x", "deep"), ("acme", "y"), ("acme", "z")]


def test_ttl_sweep_opens_only_namespaces_with_a_ttl(tmp_path, format2):
    t = [1000.0]
    root = tmp_path / "m"
    with LongTermMemory(root, emb(), clock=lambda: t[0]) as s:
        for i in range(2 * OPEN_NAMESPACES):
            s.put(("n", str(i)), "k", "forever")
        s.put(("n", "ttl"), "k", "short lived", ttl=10)
    t[0] = 2000.0
    with LongTermMemory(root, emb(), clock=lambda: t[0]) as s:
        assert s.sweep() == 1
        assert [t_.namespace for t_ in s._tables.open_tables()] == [("n", "ttl")]
        assert len(s.namespaces()) == 2 * OPEN_NAMESPACES


def test_compact_verify_reindex_one_namespace_at_a_time(tmp_path, format2):
    root = tmp_path / "m"
    fill(root, 2 * OPEN_NAMESPACES + 2)
    with LongTermMemory(root, emb()) as s:
        for i in range(2 * OPEN_NAMESPACES + 2):
            s.delete(("users", f"u{i:04d}", "memories"), "k0")
        assert s.compact() == 2 * OPEN_NAMESPACES + 2
        assert len(s._tables.open_tables()) <= OPEN_NAMESPACES
        v = s.verify()
        assert len(v) == 2 * OPEN_NAMESPACES + 2 and all(not x["errors"] for x in v.values())
        assert len(s._tables.open_tables()) <= OPEN_NAMESPACES
        assert s.reindex(HashingEmbedder(dim=32), progress=False) == 2 * (2 * OPEN_NAMESPACES + 2)
        assert len(s._tables.open_tables()) <= OPEN_NAMESPACES
        assert s.count(("users", "u0007", "memories")) == 2
    assert not (root / "catalog.0.log").exists() and (root / "catalog.1.log").exists()
    with LongTermMemory(root, HashingEmbedder(dim=32), read_only=True) as r:
        assert len(r.namespaces()) == 2 * OPEN_NAMESPACES + 2
        assert np.isfinite(r.search(("users", "u0003", "memories"), "topic 1")[0].score)


def test_learning_a_stores_embedder_opens_no_namespace(tmp_path, monkeypatch):
    """open_store / SemanticMemory(path) without an embedder learn it from the store header: a
    read-only open (which opens every namespace) is not needed for that."""
    from memcore import open as opening

    root = tmp_path / "m"
    fill(root, 3)
    monkeypatch.setattr(opening.LongTermMemory, "open", None)     # any use would fail
    assert opening.store_embedder(root).name == emb().name
