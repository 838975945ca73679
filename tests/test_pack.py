"""Format 3: the pack of small namespaces (memcore.stores.long_pack).

Every namespace below :data:`~memcore.stores.long_pack.PACK_MAX` rows lives in one shared
format-2 namespace directory; these tests check that it serves exactly what format 2 serves
(same operations, same results and scores), bounds files and descriptors by a constant,
promotes a growing namespace to its own directory crash-safely, compacts, isolates damage
naming its namespaces, and serves read-only readers beside a writer.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from memcore import (HashingEmbedder, HybridWeights, LongTermMemory, MemoryItem,
                     StoreCorruptedError, storage)
from memcore.stores import long_disk, long_pack

DIM = 32


class Clock:
    """+0.5 s per call while writing (``step``); fixed while the views are read (a store
    may read the clock a different number of times to answer the same call)."""

    def __init__(self) -> None:
        self.t, self.step = 1_700_000_000.0, 0.5

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.fixture
def pack(monkeypatch):
    monkeypatch.setattr(long_pack, "ENABLED", True)


def _emb():
    return HashingEmbedder(dim=DIM)


def _ops(ltm, n=12):
    """A mix of writes: put_many per namespace, replaces, deletes, metadata, TTL."""
    for i in range(n):
        ns = ("users", f"u{i}", "memories")
        ltm.put_many(ns, [MemoryItem(f"k{j}", f"user {i} note {j} about thing {j % 3}",
                                     0.1 + 0.05 * j, {"j": j, "speaker": f"s{j % 2}"})
                          for j in range(6)])
        ltm.put(ns, "k1", f"user {i} replaced note about thing 1")
        ltm.delete(ns, "k2")
        if i % 3 == 0:
            ltm.put(ns, "short", "expires soon", ttl=5.0)
    ltm.clear(("users", "u5", "memories"))


@pytest.mark.parametrize("hybrid", [False, True])
def test_the_pack_serves_what_format_2_serves(tmp_path, monkeypatch, hybrid):
    kw = {"hybrid": HybridWeights.no_model()} if hybrid else {}
    views = {}
    for on in (False, True):
        monkeypatch.setattr(long_pack, "ENABLED", on)
        clock = Clock()
        root = tmp_path / f"pack{on}"
        with LongTermMemory(root, _emb(), clock=clock, **kw) as ltm:
            _ops(ltm)
            clock.step = 0.0
            first = _view_plain(ltm)
        clock.t += 10                           # the TTL of "short" ran out
        with LongTermMemory(root, _emb(), clock=clock, **kw) as ltm:
            views[on] = (first, _view_plain(ltm), ltm.sweep(), _view_plain(ltm))
        with LongTermMemory.open(root, _emb(), clock=clock, **kw) as r:
            views[on] += (_view_plain(r),)
    assert views[True] == views[False]
    assert sorted(os.listdir(tmp_path / "packTrue" / "ns.0")) == [storage.layout.PACK_DIR]


def _view_plain(ltm, n=12):
    out = {"namespaces": ltm.namespaces()}
    for i in range(n):
        ns = ("users", f"u{i}", "memories")
        ms = [ltm.get(ns, k) for k in ("k0", "k1", "k3", "short")]
        out[ns] = {
            "keys": sorted(ltm.keys(ns)),
            "get": [None if m is None else (m.text, m.importance, m.metadata, m.created_at,
                                            m.updated_at, m.expires_at) for m in ms],
            "hits": [(h.key, round(h.score, 6)) for h in ltm.search(
                ns, "note about thing 1", top_k=4, touch=False)],
            "filtered": [h.key for h in ltm.search(ns, "note", top_k=4, touch=False,
                                                   filter={"j": {"$gte": 3}})],
            "count": ltm.count(ns),
        }
    return out


def test_files_and_descriptors_do_not_grow_with_namespaces(tmp_path, pack):
    root = tmp_path / "m"
    with LongTermMemory(root, _emb()) as ltm:
        for i in range(300):
            ltm.put_many(("u", str(i)), [MemoryItem(f"k{j}", f"text {i} {j}") for j in range(3)])
    files = sum(len(fs) for _, _, fs in os.walk(root))
    assert files < 30
    fd0 = len(os.listdir("/proc/self/fd"))
    with LongTermMemory.open(root, _emb()) as r:              # a reader opens the pack only
        assert len(r.namespaces()) == 300
        for i in range(0, 300, 7):
            assert r.get(("u", str(i)), "k1").text == f"text {i} 1"
        assert len(os.listdir("/proc/self/fd")) - fd0 <= 16
    assert storage.read_store_header(str(root))["version"] == 3


def test_a_growing_namespace_moves_to_its_own_directory(tmp_path, pack, monkeypatch):
    monkeypatch.setattr(long_pack, "PACK_MAX", 20)
    root = tmp_path / "m"
    with LongTermMemory(root, _emb()) as ltm:
        ltm.put("small", "a", "stays in the pack")
        for j in range(25):
            ltm.put("big", f"k{j}", f"memory number {j}", metadata={"j": j})
        assert ltm.count("big") == 25
        hits = [(h.key, h.score) for h in ltm.search("big", "memory number 7", top_k=3)]
        assert hits[0][0] == "k7"
    dirs = sorted(os.listdir(root / "ns.0"))
    assert storage.namespace_dirname(("big",)) in dirs and storage.layout.PACK_DIR in dirs
    with LongTermMemory(root, _emb()) as ltm:
        assert ltm.count("big") == 25 and ltm.get("small", "a").text == "stays in the pack"
        assert isinstance(ltm._tables.get(("big",)), long_disk.DiskTable)
        assert ltm.get("big", "k24").metadata == {"j": 24}
        assert ltm.compact() == 0                     # the moved rows are no garbage
        assert ltm._space.pack.table.rows == 1


@pytest.mark.parametrize("cut", ["before_commit", "after_commit"])
def test_a_promotion_cut_short_keeps_every_row_once(tmp_path, pack, monkeypatch, cut):
    monkeypatch.setattr(long_pack, "PACK_MAX", 5)
    root = tmp_path / "m"
    ltm = LongTermMemory(root, _emb())
    for j in range(5):
        ltm.put("ns", f"k{j}", f"text {j}")
    if cut == "before_commit":        # the directory was created, its batch never committed
        append = long_disk.DiskTable.append

        def killed(self, batch):
            if self.namespace != storage.layout.PACK_NAMESPACE:
                raise OSError("killed")
            append(self, batch)

        monkeypatch.setattr(long_disk.DiskTable, "append", killed)
    else:                             # the batch committed, the pack rows not yet tombstoned
        monkeypatch.setattr(long_pack.Pack, "remove",
                            lambda self, keys: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(Exception, match="killed"):
        ltm.put("ns", "k5", "text 5")
    ltm._release()                                # the process dies here
    monkeypatch.undo()
    monkeypatch.setattr(long_pack, "ENABLED", True)
    with LongTermMemory(root, _emb()) as ltm:          # the move came before the write
        assert sorted(ltm.keys("ns")) == [f"k{j}" for j in range(5)]
        in_dir = storage.namespace_dirname(("ns",)) in os.listdir(root / "ns.0")
        assert in_dir == (cut == "after_commit")        # an empty directory loses
        assert ltm._space.pack.table.live == (0 if in_dir else 5)
        assert [h.key for h in ltm.search("ns", "text 3", top_k=6)].count("k3") == 1
        ltm.delete("ns", "k3")
        ltm.put("ns", "k5", "text 5")
    with LongTermMemory(root, _emb()) as ltm:
        assert sorted(ltm.keys("ns")) == ["k0", "k1", "k2", "k4", "k5"]
        assert isinstance(ltm._tables.get(("ns",)), long_disk.DiskTable) == in_dir
        assert ltm._space.pack.table.live == (0 if in_dir else 5)
        assert ltm.verify()


def test_a_bulk_load_goes_straight_to_a_directory(tmp_path, pack, monkeypatch):
    monkeypatch.setattr(long_pack, "PACK_MAX", 8)
    with LongTermMemory(tmp_path / "m", _emb()) as ltm:
        ltm.put_many("bulk", [MemoryItem(f"k{j}", f"t {j}") for j in range(9)])
        ltm.put_many("small", [MemoryItem(f"k{j}", f"t {j}") for j in range(4)])
        ltm.put_many("small", [MemoryItem(f"x{j}", f"t {j}") for j in range(5)])
        assert ltm._space.pack.table.rows == 4           # "bulk" never entered the pack
        assert ltm.count("bulk") == 9 and ltm.count("small") == 9
        assert ltm._space.pack.table.live == 0           # "small" moved before its write


def test_compact_reclaims_the_pack_and_keeps_every_row(tmp_path, pack):
    root = tmp_path / "m"
    with LongTermMemory(root, _emb()) as ltm:
        for i in range(10):
            ltm.put_many(("u", str(i)), [MemoryItem(f"k{j}", f"t {i} {j}") for j in range(4)])
            ltm.put(("u", str(i)), "k0", f"t {i} new")
            ltm.delete(("u", str(i)), "k3")
        ltm.clear(("u", "9"))
        before = {ns: sorted((k, ltm.get(ns, k).text) for k in ltm.keys(ns))
                  for ns in ltm.namespaces()}
        assert ltm.compact() == 9 * 2                   # a cleared namespace's rows: no count
        assert ltm._space.pack.table.rows == 9 * 3
        after = {ns: sorted((k, ltm.get(ns, k).text) for k in ltm.keys(ns))
                 for ns in ltm.namespaces()}
        assert after == before
    with LongTermMemory(root, _emb()) as ltm:
        assert {ns: sorted((k, ltm.get(ns, k).text) for k in ltm.keys(ns))
                for ns in ltm.namespaces()} == before


def test_a_reader_beside_a_writer_keeps_its_snapshot(tmp_path, pack):
    root = tmp_path / "m"
    w = LongTermMemory(root, _emb())
    w.put_many("a", [MemoryItem("k", "first")])
    w.flush()
    r = LongTermMemory.open(root, _emb())
    w.put("a", "k", "second")
    w.put("b", "k", "new namespace")
    w.compact()
    assert r.get("a", "k").text == "first" and r.namespaces() == [("a",)]
    r.close()
    w.close()
    with LongTermMemory.open(root, _emb()) as r:
        assert r.get("a", "k").text == "second" and r.namespaces() == [("a",), ("b",)]


def test_a_damaged_pack_names_its_namespaces_and_the_others_serve(tmp_path, pack,
                                                                   monkeypatch):
    root = tmp_path / "m"
    monkeypatch.setattr(long_pack, "PACK_MAX", 5)
    with LongTermMemory(root, _emb()) as ltm:
        for j in range(8):
            ltm.put("big", f"k{j}", f"own directory {j}")
        ltm.put("small", "a", "in the pack")
        ltm.put("tiny", "b", "in the pack too")
    hdr = root / "ns.0" / storage.layout.PACK_DIR / "header.json"
    hdr.write_text(hdr.read_text().replace('"checkpoint"', '"checkpoint_"'))
    with LongTermMemory(root, _emb()) as ltm:
        assert ltm.get("big", "k3").text == "own directory 3"
        with pytest.raises(StoreCorruptedError, match=r"pack holds 2 namespaces.*'small'"):
            ltm.get("small", "a")
        assert storage.layout.PACK_DIR in ltm.damaged
        ltm.repair()
        assert ltm.get("small", "a").text == "in the pack"
        assert ltm.get("tiny", "b").text == "in the pack too"


def test_a_damaged_pack_vector_is_never_served(tmp_path, pack):
    root = tmp_path / "m"
    with LongTermMemory(root, _emb()) as ltm:
        for i in range(3):
            ltm.put_many(("u", str(i)), [MemoryItem(f"k{j}", f"t {i} {j}") for j in range(3)])
    vec = root / "ns.0" / storage.layout.PACK_DIR / "vectors.0.f32"
    raw = bytearray(vec.read_bytes())
    raw[4 * DIM * 4 + 3] ^= 0x10                     # row 4: namespace u1, k1
    vec.write_bytes(bytes(raw))
    with LongTermMemory(root, _emb()) as ltm:
        assert ltm.get(("u", "0"), "k1").text == "t 0 1"
        with pytest.raises(StoreCorruptedError, match="vectors.0.f32"):
            ltm.get(("u", "1"), "k1")
        ltm.repair()
        assert sorted(ltm.keys(("u", "1"))) == ["k0", "k1", "k2"]   # re-embedded exactly
        assert np.array_equal(ltm.vector(("u", "1"), "k1"), _emb().encode(["t 1 1"])[0])


def test_export_import_round_trip(tmp_path, pack):
    with LongTermMemory(tmp_path / "a", _emb()) as ltm:
        _ops(ltm, n=4)
        n = ltm.export_jsonl(tmp_path / "x.jsonl")
        want = {ns: sorted(ltm.keys(ns)) for ns in ltm.namespaces()}
    with LongTermMemory(tmp_path / "b", _emb()) as ltm:
        assert ltm.import_jsonl(tmp_path / "x.jsonl") == n
        assert {ns: sorted(ltm.keys(ns)) for ns in ltm.namespaces()} == want


def test_namespace_ids_and_composite_keys():
    ns = ("users", "ü\x01", "m")
    assert long_pack.split_key(long_pack.pack_key(ns, "k\x00ey")) == (ns, "k\x00ey")
    assert long_pack.namespace_id(ns) == long_pack.namespace_id(list(ns)) != 0
    with pytest.raises(StoreCorruptedError):
        long_pack.split_key("no namespace")
