"""LongTermMemory crash recovery, corruption handling, repair, the writer lock, fault injection."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, StoreCorruptedError, StoreLockedError
from memcore import _validate, storage
from memcore.stores.long_disk import DiskTable

DIM = 16
T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[1]


def clock():
    return T0


def store(path, **kw):
    return LongTermMemory(path, HashingEmbedder(dim=DIM), clock=clock, **kw)


def ns_dir(root) -> Path:
    return sorted((Path(root) / "ns.0").iterdir())[0]      # closes the scandir iterator


def filled(root, n=10):
    with store(root) as s:
        for i in range(n):
            s.put("ns", f"k{i}", f"text number {i}")
    return ns_dir(root) / "log.0"


def isolated(root, match, ns="ns", **kw):
    """A damaged namespace is isolated: the store opens, and using the namespace raises
    StoreCorruptedError (``match``) naming the damage."""
    with store(root, **kw) as s:
        with pytest.raises(StoreCorruptedError, match=match):
            s.count(ns)
        assert list(s.damaged)


def texts(s):
    return {k: s.get("ns", k).text for k in s.keys("ns")}


def test_torn_tail_is_truncated_to_last_committed_record(tmp_path):
    s = store(tmp_path / "m")
    for i in range(5):
        s.put("ns", f"k{i}", f"text {i}")
    log = ns_dir(tmp_path / "m") / "log.0"
    good = log.stat().st_size
    s._release()                                   # crash: no checkpoint
    partial = storage.encode_put(5, b"k5", b"torn", b"{}", 1.0, 1.0, 1.0, 0, 0.5, 0)
    want = {f"k{i}": f"text {i}" for i in range(5)}
    for j, cut in enumerate((3, 20, len(partial) - 1)):   # short frame, short payload, bad CRC
        with open(log, "r+b") as f:
            f.truncate(good)
            f.seek(good)
            f.write(partial[:cut])
        with store(tmp_path / "m") as r:
            assert texts(r) == want
            r.put("ns", f"after{j}", "after recovery")
            want[f"after{j}"] = "after recovery"
        good = log.stat().st_size
        with store(tmp_path / "m") as r:
            assert texts(r) == want
        s = store(tmp_path / "m")
        s._release()


def _damage_second_record(log) -> int:
    data = bytearray(log.read_bytes())
    frame = storage.FRAME.size
    second = frame + storage.FRAME.unpack_from(data, 0)[1]      # offset of record 2
    data[second + frame + 70] ^= 0xFF                            # flip a byte of its text
    log.write_bytes(bytes(data))
    return second


def test_mid_file_corruption_after_the_checkpoint_names_file_and_offset_then_repair(tmp_path):
    s = store(tmp_path / "m")
    for i in range(10):
        s.put("ns", f"k{i}", f"text number {i}")
    s._release()                                   # crash: every record is in the log tail
    second = _damage_second_record(ns_dir(tmp_path / "m") / "log.0")
    isolated(tmp_path / "m", rf"log\.0 is corrupted at offset {second} ")
    isolated(tmp_path / "m", "corrupted", read_only=True)
    with store(tmp_path / "m", repair=True) as s:
        assert s.repair_report[0]["skipped"] == 1
        # past the checkpoint nothing vouches for k0: the damaged record might have deleted
        # or replaced it, so it is set aside (quarantined), never served as current
        assert s.repair_report[0]["uncertain"] == ["k0"]
        got = texts(s)
    assert got == {f"k{i}": f"text number {i}" for i in range(10) if i > 1}
    (q,) = (tmp_path / "m").glob("quarantine.*.jsonl")
    assert [json.loads(line)["key"] for line in q.read_text().splitlines()[1:]] == ["k0"]
    with store(tmp_path / "m") as s:                   # repaired for good
        assert texts(s) == got


def test_damage_inside_the_checkpoint_is_found_when_read_then_repaired(tmp_path):
    """Open reads the checkpoint, not the checkpointed log: a damaged record there is named
    (file and offset) when it is read, and repair() rewrites the namespace without it."""
    second = _damage_second_record(filled(tmp_path / "m"))
    with store(tmp_path / "m") as s:
        assert s.get("ns", "k0").text == "text number 0"
        with pytest.raises(StoreCorruptedError,
                           match=rf"log\.0 is corrupted at offset {second} .*repair"):
            s.get("ns", "k1")
        with pytest.raises(StoreCorruptedError, match=rf"offset {second} "):
            s.keys("ns")
        assert [r["skipped"] for r in s.repair()] == [1]
        got = texts(s)
    assert got == {f"k{i}": f"text number {i}" for i in range(10) if i != 1}
    with store(tmp_path / "m") as s:
        assert texts(s) == got


def test_corrupted_vector_is_detected_and_dropped_never_misattributed(tmp_path):
    s = store(tmp_path / "m")
    for i in range(6):
        s.put("ns", f"k{i}", f"text number {i}")
    vec = ns_dir(tmp_path / "m") / "vectors.0.f32"
    s._release()                                    # rows past the checkpoint are re-verified
    raw = bytearray(vec.read_bytes())
    raw[3 * DIM * 4 + 5] ^= 0x40
    vec.write_bytes(bytes(raw))
    isolated(tmp_path / "m", rf"vectors\.0\.f32 is corrupted at offset {3 * DIM * 4}")
    with store(tmp_path / "m", repair=True) as r:     # re-embedded: an exact repair
        assert r.repair_report[0]["reembedded"] == 1
        assert sorted(r.keys("ns")) == ["k0", "k1", "k2", "k3", "k4", "k5"]
        emb = HashingEmbedder(dim=DIM)
        for k in r.keys("ns"):
            assert np.array_equal(r.vector("ns", k), emb.encode([r.get("ns", k).text])[0])


def test_repair_on_open_store_finds_later_damage(tmp_path):
    with store(tmp_path / "m") as s:
        for i in range(8):
            s.put("ns", f"k{i}", f"text number {i}")
        s.flush()
        log = ns_dir(tmp_path / "m") / "log.0"
        data = bytearray(log.read_bytes())
        data[-3] ^= 0x01                            # damage inside the checkpoint
        log.write_bytes(bytes(data))
        report = s.repair()
        assert report and report[0]["kept"] == 7
        assert s.repair() == []                     # nothing left to repair
        s.put("ns", "new", "still writable")
    with store(tmp_path / "m") as r:
        assert r.count("ns") == 8


def test_truncated_log_inside_checkpoint_is_corruption(tmp_path):
    log = filled(tmp_path / "m")
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size - 5)
    isolated(tmp_path / "m", "corrupted at offset")


# ---------------------------------------------------------------------------- locking

HOLDER = textwrap.dedent("""
    import sys
    from memcore import HashingEmbedder, LongTermMemory
    s = LongTermMemory(sys.argv[1], HashingEmbedder(dim=16))
    s.put("ns", "a", "held by another process")
    s.flush()
    print("ready", flush=True)
    sys.stdin.read()
    s.close()
""")


def test_second_writer_gets_store_locked_error_and_readers_read(tmp_path):
    root = tmp_path / "m"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match="locked by another writer"):
            store(root, lock_timeout=0.2)
        with LongTermMemory.open(root) as r:
            assert r.get("ns", "a").text == "held by another process"
    finally:
        proc.communicate("", timeout=60)
    with store(root, lock_timeout=0) as s:            # released when the holder exits
        assert s.count("ns") == 1


def test_same_process_second_writer_is_locked_out(tmp_path):
    with store(tmp_path / "m"):
        with pytest.raises(StoreLockedError):
            store(tmp_path / "m", lock_timeout=0)
    store(tmp_path / "m", lock_timeout=0).close()


# ---------------------------------------------------------------------------- fault injection

def _unit_vector_that_renormalising_moves():
    """The vector behind the fault-injection test's old intermittent failure (seed 13, round 28:
    key k14, version 28102): unit-norm already, yet ``put`` renormalising it in float32 moves
    it by one ulp (about 0.14 % of such vectors do). ``put`` now keeps already-unit float32
    vectors as given; either way the store restores what ``put`` stored, bit for bit.
    """
    v = _validate.vector(np.random.default_rng([14, 28102]).standard_normal(DIM), DIM)
    v64 = v.astype(np.float64)
    renormalised = (v64 / np.linalg.norm(v64)).astype(np.float32)
    assert not np.array_equal(renormalised, v)    # keeps this regression test meaningful
    stored = _validate.vector(v, DIM)
    assert np.array_equal(stored, v)               # already-unit float32 vectors are kept as given
    return v, stored


def test_reopen_after_a_kill_restores_the_stored_vector_bit_exact(tmp_path):
    v, stored = _unit_vector_that_renormalising_moves()
    root = tmp_path / "m"
    s = store(root)
    for i in range(5):
        s.put("ns", f"k{i}", f"text number {i}")
    s.delete("ns", "k1")
    s.put("ns", "k14", "k14 v28102", importance=0.02, metadata={"v": 28102}, vector=v)
    assert np.array_equal(s.vector("ns", "k14"), stored)
    s._release()                                   # SIGKILL: no checkpoint
    # the kill of the original failure landed inside compact(): a half-written next
    # generation lies next to the committed one
    d = ns_dir(root)
    (d / "vectors.1.f32").write_bytes(b"\x7f" * 2048)
    (d / "log.1").write_bytes(b"MMCR")
    with store(root) as r:
        assert np.array_equal(r.vector("ns", "k14"), stored)
        assert sorted(p.name for p in d.iterdir() if p.name.startswith(("log", "vec"))) == \
            ["log.0", "vectors.0.f32"]            # the torn generation was removed
        assert r.compact() == 1                    # k1's row
        assert np.array_equal(r.vector("ns", "k14"), stored)
        r.put("ns", "after", "written after the compaction")
        r._release()                               # killed again, after the compaction
    with store(root) as r:
        assert np.array_equal(r.vector("ns", "k14"), stored)
        assert sorted(r.keys("ns")) == ["after", "k0", "k14", "k2", "k3", "k4"]


def test_checkpoint_never_blesses_a_damaged_vector(tmp_path, format2):
    root = tmp_path / "m"
    s = store(root)
    for i in range(5):
        s.put("ns", f"k{i}", f"text number {i}")
    s.flush()                                      # a verified checkpoint: rows 0-4
    for i in range(5, 8):
        s.put("ns", f"k{i}", f"text number {i}")
    s._tables[("ns",)].columns.vectors[6, 0] += 0.5  # a stray write into a committed row
    want = rf"vectors\.0\.f32 is corrupted at offset {6 * DIM * 4}: row 6 "
    with pytest.raises(StoreCorruptedError, match=want + ".*checkpoint was not written"):
        s.flush()
    assert json.loads((ns_dir(root) / "header.json").read_text())["rows"] == 5
    with pytest.raises(StoreCorruptedError, match=want):
        s.close()                                  # closes (and unlocks) all the same
    isolated(root, want)                           # rows past the checkpoint are re-checked
    with LongTermMemory(root, repair=True) as r:      # no embedder to re-embed: dropped
        assert r.repair_report[0]["dropped"] == 1
        assert r.repair_report[0]["uncertain"] == ["k6"]
        assert sorted(r.keys("ns")) == [f"k{i}" for i in range(8) if i != 6]
        emb = HashingEmbedder(dim=DIM)
        for k in r.keys("ns"):
            assert np.array_equal(r.vector("ns", k), emb.encode([r.get("ns", k).text])[0])


def test_compact_verifies_every_live_vector_before_copying_it(tmp_path, format2):
    root = tmp_path / "m"
    with store(root) as s:
        for i in range(6):
            s.put("ns", f"k{i}", f"text number {i}")
        s.put("ns", "k0", "replaced")              # garbage, so compact() has work
        s.flush()
        s._tables[("ns",)].columns.vectors[3, 1] += 0.5   # a checkpointed row: open skips it
        before = sorted(p.name for p in ns_dir(root).iterdir())
        with pytest.raises(StoreCorruptedError,
                           match=rf"vectors\.0\.f32 is corrupted at offset {3 * DIM * 4}: "
                                 r"row 3 .*compact\(\) wrote nothing"):
            s.compact()
        assert sorted(p.name for p in ns_dir(root).iterdir()) == before
        assert s.count("ns") == 6                  # the store is as it was
        report = s.repair()                        # re-embedded from its text: exact
        assert [(r["kept"], r["dropped"], r["reembedded"]) for r in report] == [(6, 0, 1)]
        assert s.compact() == 0
        s.put("ns", "k3", "text number 3")
    with store(root) as r:
        emb = HashingEmbedder(dim=DIM)
        assert sorted(r.keys("ns")) == [f"k{i}" for i in range(6)]
        for k in r.keys("ns"):
            assert np.array_equal(r.vector("ns", k), emb.encode([r.get("ns", k).text])[0])


DRIVER = textwrap.dedent(r"""
    import json, os, random, select, signal, sys, time
    import numpy as np
    from memcore import HybridWeights, LongTermMemory, MemoryItem, _validate

    HYBRID = HybridWeights.no_model()   # the hybrid index is built, persisted at checkpoints,
                                        # restored at open: it must rank as a rebuild

    root, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    DIM, KEYS = 16, 40
    rnd = random.Random(seed)

    def vec(key, ver):
        r = np.random.default_rng([int(key[1:]), ver])
        return _validate.vector(r.standard_normal(DIM), DIM)

    def stored_vec(key, ver):
        # what put() stores for vec(key, ver): it renormalises, and renormalising a float32
        # unit vector can move it by an ulp -- the store must return exactly this
        return _validate.vector(vec(key, ver), DIM)

    def ranked(s):
        return [[(h.key, round(h.score, 4)) for h in
                 s.search("ns", q, query_vector=vec("k1", 7 + j), top_k=8, touch=False)]
                for j, q in enumerate(("k3 v", "k17 v"))]

    def child(w, round_no):
        s = LongTermMemory(root, _Emb(), durability="flush", hybrid=HYBRID)
        os.write(w, b"R\n")
        r = random.Random(seed * 1000 + round_no)
        ver = 100_000 * round_no
        while True:
            ver += 1
            key = f"k{r.randrange(KEYS)}"
            x = r.random()
            op = "D" if x < 0.25 else "M" if x < 0.4 else "P"
            if op == "M":                      # one put_many: one commit, all or nothing
                key = ",".join(f"k{i}" for i in r.sample(range(KEYS), r.randrange(2, 13)))
            os.write(w, f"B {op} {key} {ver}\n".encode())
            if op == "P":
                s.put("ns", key, f"{key} v{ver}", importance=(ver % 100) / 100,
                      metadata={"v": ver}, vector=vec(key, ver))
            elif op == "M":
                keys = key.split(",")
                s.put_many("ns", [MemoryItem(k, f"{k} v{ver}", (ver % 100) / 100, {"v": ver})
                                  for k in keys], vectors=np.stack([vec(k, ver) for k in keys]))
            else:
                s.delete("ns", key)
            os.write(w, b"A\n")
            if ver % 53 == 0:
                s.compact()
            elif ver % 31 == 0:
                s.flush()
            elif ver % 7 == 0:
                ranked(s)                      # builds (or uses) the hybrid index

    class _Emb:
        name, dim = "fault-test", DIM
        def encode(self, texts, *, batch_size=32):
            return np.zeros((len(texts), DIM), np.float32)

    model = {}          # key -> ver of the acknowledged state (None: absent)
    failures, acked_total, restored = [], 0, 0
    for rnd_no in range(1, rounds + 1):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                child(w, rnd_no)
            finally:
                os._exit(1)
        os.close(w)
        lines = b""
        if rnd_no % 5 == 0:         # kill while the child opens and recovers the store
            time.sleep(rnd.uniform(0.0, 0.03))
        else:                       # kill while it writes, however slow the machine
            while b"R\n" not in lines and select.select([r], [], [], 30)[0]:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                lines += chunk
            time.sleep(rnd.uniform(0.01, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            lines += chunk
        os.close(r)
        pending = None
        for line in lines.decode().splitlines():
            if line.startswith("B "):
                _, op, key, ver = line.split()
                pending = (op, key.split(","), int(ver))
            elif line == "A" and pending is not None:
                op, keys, ver = pending
                for key in keys:
                    model[key] = None if op == "D" else ver
                acked_total += 1
                pending = None
        s = LongTermMemory(root, _Emb(), durability="flush", hybrid=HYBRID)
        if s.count("ns"):
            restored += s._tables[("ns",)].recall is not None
            got = ranked(s)                    # the restored index (or one built now)
            s._tables[("ns",)].recall = None
            if got != ranked(s):               # a rebuild from the live rows
                failures.append(f"round {rnd_no}: hybrid ranking {got} != rebuilt "
                                f"{ranked(s)}")
        landed = {}
        for i in range(KEYS):
            key = f"k{i}"
            want = model.get(key)
            allowed = {want}
            if pending is not None and key in pending[1]:
                allowed.add(None if pending[0] == "D" else pending[2])
            m = s.get("ns", key)
            got = None
            if m is not None:
                got = int(m.text.split(" v")[1])
                exact = (m.text == f"{key} v{got}" and m.metadata == {"v": got}
                         and m.importance == (got % 100) / 100
                         and np.array_equal(s.vector("ns", key), stored_vec(key, got)))
                if not exact:
                    failures.append(f"round {rnd_no}: {key} holds inexact data {m!r}")
            if got not in allowed:
                failures.append(f"round {rnd_no}: {key} is {got}, expected one of {allowed}")
            if pending is not None and key in pending[1]:
                landed[key] = got == pending[2]
            model[key] = got
        if pending is not None and pending[0] == "M" and len(set(landed.values())) > 1:
            failures.append(f"round {rnd_no}: an unacknowledged put_many half landed: {landed}")
        s.put("ns", "probe", "the store still accepts writes", vector=vec("k0", 0))
        s.delete("ns", "probe")
        s.close()
    print(json.dumps({"failures": failures, "acked": acked_total, "rounds": rounds,
                      "restored": restored}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("pack", ["0", "1"])
def test_sigkill_fault_injection_never_loses_an_acknowledged_write(tmp_path, pack):
    env = dict(os.environ, PYTHONPATH=str(REPO), MEMCORE_PACK=pack)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "m"), "30", "7"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failures"] == []
    assert result["rounds"] == 30
    assert result["acked"] >= 30 * 5                  # the children really did work
    if pack == "0":           # a namespace directory's saved index (a packed one keeps none)
        assert result["restored"] >= 10               # reopened with a persisted hybrid index


# ---------------------------------------------------------------------- checkpoint CRCs

def _hybrid_store(root, **kw):
    from memcore.recall.weights import HybridWeights
    return store(root, hybrid=HybridWeights.no_model(), **kw)


def _filled_hybrid(root, n=120):
    from memcore.types import MemoryItem
    with _hybrid_store(root) as s:
        s.put_many("ns", [MemoryItem(key=f"k{i}", text=f"robot dock {i % 7} cup {i}")
                          for i in range(n)])
        s.search("ns", "robot cup", top_k=5)              # builds the index: persisted at close
        s.delete("ns", "k3")
        ref = ({k: s.get("ns", k).text for k in s.keys("ns")},
               [(h.key, round(h.score, 5)) for h in s.search("ns", "robot cup 7", top_k=8,
                                                           touch=False)])
    return ref


def _zero(path, at, n=64):
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\0" * n)


@pytest.mark.parametrize("pattern", ["keyhash.*", "keyrow.*", "alive.*", "record_offset.*"])
def test_damaged_checkpoint_file_is_named_then_rebuilt_from_the_log(tmp_path, pattern):
    root = tmp_path / "m"
    ref, _ = _filled_hybrid(root)
    path = sorted(ns_dir(root).glob(pattern))[0]
    _zero(path, 8 if pattern.startswith("alive") else 80)
    isolated(root, path.name.replace(".", r"\."))
    isolated(root, "CRC", read_only=True)
    with store(root, repair=True) as s:
        assert s.repair_report and s.repair_report[0]["kept"] == len(ref)
        assert {k: s.get("ns", k).text for k in s.keys("ns")} == ref
        s.put("ns", "k10", "replaced")                   # never duplicated
        assert s.keys("ns").count("k10") == 1 and s.count("ns") == len(ref)


def test_repair_finds_a_damaged_checkpoint_file_of_an_open_store(tmp_path):
    root = tmp_path / "m"
    ref, _ = _filled_hybrid(root)
    with store(root) as s:
        _zero(sorted(ns_dir(root).glob("keyhash.*"))[0], 80)
        report = s.repair()
        assert len(report) == 1 and report[0]["kept"] == len(ref)
        assert {k: s.get("ns", k).text for k in s.keys("ns")} == ref


# hx3: the default index structure, stemmed BM25 with date words (memcore.storage.mapped)
@pytest.mark.parametrize("pattern,how", [("hx3.lex.bsize.*", "flip"), ("hx3.lex.doc_row.*", "flip"),
                                         ("hx3.lex.df.*", "zero"), ("hx3.state.*", "cut"),
                                         ("hx3.state.*", "flip"), ("hx3.lex.bstart.*", "gone")])
def test_damaged_hybrid_index_file_is_rebuilt_never_a_wrong_ranking(tmp_path, caplog, pattern,
                                                                     how, format2):
    root = tmp_path / "m"
    ref, ranked = _filled_hybrid(root)
    path = sorted(ns_dir(root).glob(pattern))[0]
    if how == "flip":                                   # a single bit: a crash before CRCs
        data = bytearray(path.read_bytes())
        data[min(len(data) - 1, 86)] ^= 0x01
        path.write_bytes(bytes(data))
    elif how == "zero":
        _zero(path, 0, 32)
    elif how == "cut":
        os.truncate(path, path.stat().st_size // 2)
    else:
        path.unlink()
    # the read-only open leaves the files alone; the writer's close checkpoints the rebuilt index
    for kw, warned in (({"read_only": True}, True), ({}, True), ({"repair": True}, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="memcore"), _hybrid_store(root, **kw) as s:
            assert [(h.key, round(h.score, 5)) for h in s.search("ns", "robot cup 7", top_k=8,
                                                                 touch=False)] == ranked
            assert {k: s.get("ns", k).text for k in s.keys("ns")} == ref
            assert s.repair_report == []
        assert (path.name in caplog.text and "rebuilt" in caplog.text) == warned


def test_disk_full_while_growing_a_mapped_file_raises_store_io_error(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()}")
    child = textwrap.dedent("""
        import sys
        from memcore import HashingEmbedder, LongTermMemory, StoreIOError
        from memcore.types import MemoryItem
        s = LongTermMemory(sys.argv[1], HashingEmbedder(dim=256), clock=lambda: 1.7e9)
        acked = 0
        try:
            for b in range(100):
                s.put_many("ns", [MemoryItem(key=f"k{b}-{i}", text="robot dock")
                                  for i in range(100)])
                acked += 100
        except StoreIOError as err:
            print("StoreIOError", acked, err)
        try:
            s.close()      # its checkpoint may find no room left either: the same error
        except StoreIOError as err:
            print("close: StoreIOError", err)
        """)
    try:
        r = subprocess.run([sys.executable, "-c", child, str(mnt / "s")], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]       # -7 would be SIGBUS
        assert r.stdout.startswith("StoreIOError"), r.stdout + r.stderr[-2000:]
        acked = int(r.stdout.split()[1])
        assert acked > 0
        with LongTermMemory(mnt / "s", HashingEmbedder(dim=256), read_only=True) as s:
            assert s.count("ns") >= acked                 # every acknowledged write is there
    finally:
        gc.collect()                                     # drop the read-only store's maps
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_read_only_open_racing_a_compacting_writer_rebuilds_the_replaced_index(tmp_path,
                                                                               monkeypatch):
    root = tmp_path / "m"
    ref, ranked = _filled_hybrid(root)
    writer = textwrap.dedent(f"""
        import sys
        from memcore import HashingEmbedder, LongTermMemory
        from memcore.recall.weights import HybridWeights
        s = LongTermMemory(sys.argv[1], HashingEmbedder(dim={DIM}), clock=lambda: {T0},
                           hybrid=HybridWeights.no_model())
        s.compact()
        s.close()
        """)
    orig = DiskTable.restore_recall

    def compacted_meanwhile(self, *a):         # the writer replaces the checkpoint right here
        subprocess.run([sys.executable, "-c", writer, str(root)], check=True, timeout=120)
        return orig(self, *a)

    monkeypatch.setattr(DiskTable, "restore_recall", compacted_meanwhile)
    with _hybrid_store(root, read_only=True) as s:
        monkeypatch.setattr(DiskTable, "restore_recall", orig)
        assert {k: s.get("ns", k).text for k in s.keys("ns")} == ref
        assert [(h.key, round(h.score, 5)) for h in s.search("ns", "robot cup 7", top_k=8,
                                                             touch=False)] == ranked


def test_a_short_column_file_is_named_in_the_error(tmp_path):
    root = tmp_path / "m"
    filled(root, n=100)
    path = ns_dir(root) / "importance.0.f32"
    os.truncate(path, 10 * 4)
    isolated(root, r"importance\.0\.f32 holds only 10 rows", read_only=True)


def test_truncated_key_index_names_its_files(tmp_path):
    root = tmp_path / "m"
    filled(root, n=30)
    path = sorted(ns_dir(root).glob("keyrow.*"))[0]
    os.truncate(path, path.stat().st_size - 8)
    isolated(root, r"keyrow\.0\.c\d+\.i64")
