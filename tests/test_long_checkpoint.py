"""Format 2: checkpointed open, the persisted key index, the log tail, crashes around a
checkpoint (see memcore.storage)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore import HashingEmbedder, LongTermMemory, MemoryItem, StoreCorruptedError, storage
from memcore.storage import checkpoint as ckpt
from memcore.storage import generations, recovery

DIM = 16
T0 = 1_700_000_000.0


def store(path, **kw):
    return LongTermMemory(path, HashingEmbedder(dim=DIM), clock=lambda: T0, **kw)


def ns_dir(root) -> Path:
    epoch = json.loads((Path(root) / "memcore.json").read_text())["epoch"]
    return sorted((Path(root) / f"ns.{epoch}").iterdir())[0]


def header(root) -> dict:
    return json.loads((ns_dir(root) / "header.json").read_text())


def state(s, ns="ns") -> dict:
    """Every live memory (all fields, vector bytes) and a few searches' results."""
    out = {k: (s.get(ns, k), s.vector(ns, k).tobytes()) for k in s.keys(ns)}
    hits = [[(h.key, h.score) for h in s.search(ns, q, top_k=5, touch=False)]
            for q in ("text number 3", "replaced memory", "filtered")]
    flt = [h.key for h in s.search(ns, "text", top_k=50, touch=False, filter={"odd": True})]
    return {"rows": out, "hits": hits, "filtered": flt, "count": s.count(ns)}


def workload(s, n=40, seed=0):
    rng = np.random.default_rng(seed)
    s.put_many("ns", [MemoryItem(f"k{i}", f"text number {i}", 0.5, {"odd": bool(i % 2)})
                      for i in range(n)])
    for i in rng.choice(n, n // 4, replace=False).tolist():
        s.delete("ns", f"k{i}")
    for i in rng.choice(n, n // 4, replace=False).tolist():
        s.put("ns", f"k{i}", f"replaced memory {i}", metadata={"odd": bool(i % 2)})


def test_open_replays_only_the_tail_and_equals_the_live_store(tmp_path):
    s = store(tmp_path / "m")
    workload(s)
    s.flush()
    h = header(tmp_path / "m")
    assert h["version"] == storage.FORMAT_VERSION and h["live"] == s.count("ns")
    s.put("ns", "tail1", "written after the checkpoint")
    s.delete("ns", "k1")
    s.put("ns", "k2", "replaced memory after the checkpoint")
    want = state(s)
    s._release()                                       # killed: no checkpoint
    assert header(tmp_path / "m") == h
    with LongTermMemory.open(tmp_path / "m", HashingEmbedder(dim=DIM), clock=lambda: T0) as r:
        assert state(r) == want
    with store(tmp_path / "m") as r:
        assert state(r) == want
    with store(tmp_path / "m") as r:                   # after the close's checkpoint
        assert header(tmp_path / "m")["rows"] > h["rows"]
        assert state(r) == want


def test_key_lookup_survives_hash_collisions(tmp_path, monkeypatch):
    """Every key hashes alike: lookups are confirmed by the record's key, never a neighbour's."""
    monkeypatch.setattr(ckpt, "key_hashes",
                        lambda keys: np.full(len(keys), 7, np.uint64))
    monkeypatch.setattr(generations, "key_hashes", ckpt.key_hashes)
    with store(tmp_path / "m") as s:
        workload(s, n=30)
        want = state(s)
    with store(tmp_path / "m") as s:
        assert state(s) == want
        assert s.get("ns", "absent") is None and "absent" not in s._tables[("ns",)].keys
        s.put("ns", "k0", "replaced after reopening", metadata={"odd": False})
        s.delete("ns", "k3")
        assert s.get("ns", "k0").text == "replaced after reopening" and s.get("ns", "k3") is None
        want = state(s)
    with store(tmp_path / "m") as s:
        assert state(s) == want


def test_automatic_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(generations, "CHECKPOINT_ROWS", 10)
    s = store(tmp_path / "m")
    for i in range(25):
        s.put("ns", f"k{i}", f"text number {i}", metadata={"odd": bool(i % 2)})
    assert header(tmp_path / "m")["rows"] == 20          # checkpoints at 10 and 20 rows
    names = sorted(p.name for p in ns_dir(tmp_path / "m").iterdir() if ".c" in p.name)
    assert names == ["alive.0.c2.u8", "keyhash.0.c2.u64", "keyrow.0.c2.i64"]
    want = state(s)
    monkeypatch.setattr(generations, "CHECKPOINT_BYTES", 150)
    s.delete("ns", "k21")                                # past 150 log bytes: a checkpoint
    assert header(tmp_path / "m")["rows"] == 25
    want = state(s)
    s._release()
    with store(tmp_path / "m") as r:
        assert state(r) == want


@pytest.mark.parametrize("fail_at", ["checkpoint_files", "header"])
def test_crash_inside_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch, fail_at):
    s = store(tmp_path / "m")
    workload(s)
    s.flush()
    before = header(tmp_path / "m")
    s.put("ns", "late", "written after the first checkpoint")
    s.delete("ns", "k5")
    want = state(s)

    def crash(*a, **k):
        raise KeyboardInterrupt("killed")              # stands for SIGKILL mid-checkpoint

    if fail_at == "header":
        real = generations.write_checkpoint_files
        monkeypatch.setattr(generations, "write_checkpoint_files",
                            lambda *a, **k: (real(*a, **k), crash()))
    else:
        monkeypatch.setattr(generations, "write_checkpoint_files", crash)
    with pytest.raises(KeyboardInterrupt):
        s.flush()
    s._release()
    monkeypatch.undo()
    assert header(tmp_path / "m") == before
    with store(tmp_path / "m") as r:
        assert state(r) == want
        assert sorted(p.name for p in ns_dir(tmp_path / "m").iterdir() if ".c" in p.name) == \
            [f"{n}.0.c{before['checkpoint']}.{x}" for n, x in
             (("alive", "u8"), ("keyhash", "u64"), ("keyrow", "i64"))]


def test_none_durability_buffered_records_are_read_back(tmp_path):
    with store(tmp_path / "m", durability="none") as s:
        s.put("ns", "a", "buffered text", metadata={"x": 1})
        assert s.get("ns", "a").metadata == {"x": 1}      # read from the buffer's bytes
        assert [h.key for h in s.search("ns", "buffered text")] == ["a"]
    with store(tmp_path / "m") as s:
        assert s.get("ns", "a").text == "buffered text"


def test_a_damaged_checkpoint_file_is_named_and_repaired_from_the_log(tmp_path):
    with store(tmp_path / "m") as s:
        workload(s)
        want = state(s)
    h = header(tmp_path / "m")
    alive = ns_dir(tmp_path / "m") / f"alive.0.c{h['checkpoint']}.u8"
    alive.write_bytes(alive.read_bytes()[:-1])
    with store(tmp_path / "m") as s:       # isolated: the store opens, the namespace raises
        with pytest.raises(StoreCorruptedError, match=r"alive\.0\.c\d+\.u8 has"):
            s.count("ns")
    with store(tmp_path / "m", repair=True) as s:
        assert state(s) == want


# ---------------------------------------------------------------------------- hybrid index

TURNS = ["I adopted a dog named Rex", "Rex loves the beach", "Bob moved to Lisbon",
         "the charging dock is in the hallway", "Ann paints on weekends", "the red door is locked"]


def hybrid_store(path, **kw):
    from memcore import HybridWeights

    return store(path, hybrid=HybridWeights.no_model(), **kw)


def hybrid_writes(s, start, n, seed):
    rng = np.random.default_rng(seed)
    s.put_many("ns", [MemoryItem(f"h{i}", f"{TURNS[i % len(TURNS)]} {i}", 0.5,
                                 {"speaker": ["Ann", "Bob"][i % 2], "episode": i // 4})
                      for i in range(start, start + n)])
    for i in rng.choice(start + n, 3, replace=False).tolist():
        s.delete("ns", f"h{i}")
    for i in rng.choice(start + n, 3, replace=False).tolist():
        s.put("ns", f"h{i}", f"replaced: {TURNS[(i + 1) % len(TURNS)]}",
              metadata={"speaker": "Ann", "episode": i // 4})


def hybrid_results(s) -> list:
    return [[(h.key, round(h.score, 4)) for h in s.search("ns", q, top_k=6, touch=False)]
            for q in ("where is the dog Rex", "who moved to Lisbon", "Ann paints", "door")]


def rebuilt_results(s) -> list:
    s._tables[("ns",)].recall = None                 # next search builds from the live rows
    return hybrid_results(s)


def test_hybrid_index_restored_at_open_plus_tail_equals_a_rebuild(tmp_path, format2):
    # format 2 by design: the saved index is read from the namespace directory's header (the pack's
    # own: tests/test_pack.py)
    s = hybrid_store(tmp_path / "m")
    hybrid_writes(s, 0, 40, 1)
    hybrid_results(s)                                 # builds the index
    s.flush()                                         # persists it
    assert "index" in header(tmp_path / "m")
    hybrid_writes(s, 40, 12, 2)                       # the log tail
    want = hybrid_results(s)
    s._release()                                      # killed
    with hybrid_store(tmp_path / "m") as r:
        t = r._tables[("ns",)]
        assert t.recall is not None and t.recall.indexes   # restored, not built on search
        assert hybrid_results(r) == want
        assert rebuilt_results(r) == want
    with hybrid_store(tmp_path / "m") as r:           # the close wrote the rebuilt index
        assert hybrid_results(r) == want
    with LongTermMemory.open(tmp_path / "m", HashingEmbedder(dim=DIM), clock=lambda: T0,
                             hybrid=r.hybrid) as ro:
        assert hybrid_results(ro) == want


@pytest.mark.parametrize("fail_at", ["index", "header"])
def test_crash_while_writing_the_index_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                     fail_at,
                                                                     format2):
    # format 2 by design: the namespace directory's header and index files, crashed while written
    # (the pack's own: tests/test_pack.py)
    from memcore.storage import mapped

    s = hybrid_store(tmp_path / "m")
    hybrid_writes(s, 0, 30, 3)
    hybrid_results(s)
    s.flush()
    before = header(tmp_path / "m")
    hybrid_writes(s, 30, 10, 4)
    want = hybrid_results(s)

    def crash(*a, **k):
        raise KeyboardInterrupt("killed")

    if fail_at == "index":
        monkeypatch.setattr(generations, "write_index", crash)
    else:
        real = mapped.write_index
        monkeypatch.setattr(generations, "write_index", lambda *a, **k: real(*a, **k))
        monkeypatch.setattr(generations, "_write_ns_header", crash)
    with pytest.raises(KeyboardInterrupt):
        s.flush()
    s._release()
    monkeypatch.undo()
    assert header(tmp_path / "m") == before
    with hybrid_store(tmp_path / "m") as r:
        assert hybrid_results(r) == want
        assert rebuilt_results(r) == want


def test_mapped_arrays_keep_the_files_as_written(tmp_path):
    from memcore.arrays import Arrays, RamArrays
    from memcore.storage import MappedArrays, read_index, write_index

    ram = RamArrays()
    ram.alloc("win", (4, 3), np.int32)[:] = np.arange(12).reshape(4, 3)
    ram.alloc("flag", (5,), np.bool_)[2] = True
    ram.alloc("neg", (1 << 16,), np.float64)[1] = -0.0    # capacity beyond row 1: a hole
    manifest = write_index(str(tmp_path), 0, 1, (True,), ram, {"n": np.int64(3)}, durable=True)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["hx1.flag.0.i1.u8", "hx1.neg.0.i1.f64", "hx1.state.0.i1.npz",
                     "hx1.win.0.i1.i32"]
    neg = tmp_path / "hx1.neg.0.i1.f64"
    assert neg.stat().st_size == 8 << 16 and neg.stat().st_blocks * 512 < 8 << 16
    arrays, state = read_index(str(tmp_path), 0, 1, (True,), manifest)
    assert isinstance(arrays, Arrays) and isinstance(arrays, MappedArrays)
    assert int(state["n"]) == 3 and sorted(arrays.names()) == ["flag", "neg", "win"]
    assert np.signbit(arrays.get("neg")[1]) and not arrays.get("neg")[2:].any()
    win = arrays.get("win")
    assert win.dtype == np.int32 and np.array_equal(win, np.arange(12).reshape(4, 3))
    win[0, 0] = 99                                    # private: the file keeps its bytes
    grown = arrays.grow("win", 5)
    assert grown.shape == (16, 3) and grown[0, 0] == 99 and not grown[4:].any()
    again, _ = read_index(str(tmp_path), 0, 1, (True,), manifest)
    assert again.get("win")[0, 0] == 0 and bool(again.get("flag")[2])
    (tmp_path / "hx1.win.0.i1.i32").write_bytes(b"\0" * 4)
    with pytest.raises(StoreCorruptedError, match=r"hx1\.win\.0\.i1\.i32 has 4 bytes"):
        read_index(str(tmp_path), 0, 1, (True,), manifest)


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(0, 3000), width=st.integers(1, 4),
       dtype=st.sampled_from([np.int8, np.uint8, np.bool_, np.int32, np.float32, np.float64]),
       set_rows=st.lists(st.integers(0, 2999), max_size=4), negative_zero=st.booleans(),
       step=st.sampled_from([1, 7, 4 << 20]))
def test_used_rows_is_the_last_row_holding_a_set_byte(rows, width, dtype, set_rows,
                                                     negative_zero, step):
    """write_index's extent of the written rows: tested block by block from the end (any
    block size), equal to a whole-array pass; -0.0 is a set bit pattern."""
    from memcore.storage import mapped

    a = np.zeros((rows, width), dtype)
    for r in set_rows:
        if r < rows:
            a[r, r % width] = 1
    if negative_zero and rows and dtype in (np.float32, np.float64):
        a[rows // 2, 0] = -0.0

    def whole_pass(arr):
        if arr.size == 0:
            return 0
        raw = arr.reshape(arr.shape[0], -1).view(np.dtype(f"u{arr.dtype.itemsize}"))
        nz = np.flatnonzero(raw.any(axis=1))
        return int(nz[-1]) + 1 if nz.shape[0] else 0

    old = mapped._USED_BLOCK_BYTES
    mapped._USED_BLOCK_BYTES = step
    try:
        assert mapped._used_rows(a) == whole_pass(a)
        assert mapped._used_rows(a.reshape(-1)) == whole_pass(a.reshape(-1))
    finally:
        mapped._USED_BLOCK_BYTES = old


def test_compact_and_reindex_rebuild_and_persist_the_index(tmp_path, format2):
    # format 2 by design: the saved index is read from the namespace directory's header (the pack's
    # own: tests/test_pack.py)
    with hybrid_store(tmp_path / "m") as s:
        hybrid_writes(s, 0, 40, 5)
        want = hybrid_results(s)
        assert s.compact() > 0
        assert "index" in header(tmp_path / "m")
        assert hybrid_results(s) == want
        s.reindex(HashingEmbedder(dim=DIM), progress=False)
        assert "index" in header(tmp_path / "m")
        assert hybrid_results(s) == want           # the same embedder: the same ranking
    with hybrid_store(tmp_path / "m") as r:
        assert r._tables[("ns",)].recall is not None and hybrid_results(r) == want


def test_filter_masks_follow_every_write(tmp_path):
    """A cached filter mask is updated by puts, replacements (also within one batch) and
    deletes: filtered results equal an in-memory store's after each step."""
    disk_s, ram = store(tmp_path / "m"), LongTermMemory(embedder=HashingEmbedder(dim=DIM),
                                                       clock=lambda: T0)
    flt = {"odd": True}

    def same():
        q = dict(top_k=100, touch=False, filter=flt)
        assert [h.key for h in disk_s.search("ns", "text", **q)] == \
            [h.key for h in ram.search("ns", "text", **q)]

    for s in (disk_s, ram):
        workload(s, n=30)
    same()
    for s in (disk_s, ram):
        s.put_many("ns", [MemoryItem("n1", "text new", 0.5, {"odd": True}),
                          MemoryItem("n1", "text new again", 0.5, {"odd": True}),
                          MemoryItem("k1", "text flipped", 0.5, {"odd": False})])
        s.delete("ns", "k3")
        s.put("ns", "k4", "text now odd", metadata={"odd": True})
    same()
    for s in (disk_s, ram):
        s.put_many("ns", [MemoryItem(f"b{i}", f"text bulk {i}", 0.5, {"odd": bool(i % 2)})
                          for i in range(200)])       # the columns grow past the mask
    same()
    disk_s.close()


def test_index_built_in_chunks_ranks_as_one_batch(tmp_path, monkeypatch):
    from memcore.stores import long_disk as table

    with hybrid_store(tmp_path / "a") as s:
        hybrid_writes(s, 0, 60, 7)
        want = hybrid_results(s)
    monkeypatch.setattr(table, "BUILD_CHUNK", 7)
    with hybrid_store(tmp_path / "a") as s:
        assert rebuilt_results(s) == want


def test_a_reader_racing_the_writers_checkpoint_reads_the_newer_one(tmp_path, monkeypatch):
    w = store(tmp_path / "m")
    workload(w)
    w.flush()
    w.put("ns", "late", "after the first checkpoint")
    real = recovery.load_checkpoint_files
    calls = []

    def racing(*a, **k):
        if not calls:
            calls.append(1)
            w.flush()                      # the writer replaces the checkpoint just now
        return real(*a, **k)

    monkeypatch.setattr(recovery, "load_checkpoint_files", racing)
    with LongTermMemory.open(tmp_path / "m", HashingEmbedder(dim=DIM), clock=lambda: T0) as r:
        monkeypatch.undo()
        assert r.get("ns", "late").text == "after the first checkpoint"
        w.put("ns", "k0", "replaced so that compaction has work")
        assert w.compact() > 0             # the writer deletes the log the reader reads
        assert r.get("ns", "late").text == "after the first checkpoint"
        assert state(r) != {}
    w.close()
