"""The log after the last checkpoint cannot be cut silently (issue 27, items 1, 2 and 4).

A record after the checkpoint whose first byte was zeroed used to look like an uncommitted
``put_many`` batch (its magic pending) and the log was cut there: every later record lost,
``verify()`` clean. A full-length last record with a bad CRC (a flipped bit) used to be
taken for a torn write and dropped. And ``repair()`` dropped every time to live of a
namespace it rewrote.
"""

from __future__ import annotations

import shutil
import warnings

import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem
from memcore.storage.records import FRAME, MAGIC
from store_helpers import never_committed

EMB = HashingEmbedder(dim=16)
N = 6


def crashed_store(tmp_path, batch: bool = False):
    """A store with a checkpoint (k0, k1), then N puts after it, copied while open (a crash:
    no checkpoint covers them). Returns the copy's root and the offsets of the tail records."""
    src, root = tmp_path / "src", tmp_path / "m"
    with LongTermMemory(src, EMB) as ltm:
        ltm.put("ns", "k0", "checkpointed zero")
        ltm.put("ns", "k1", "checkpointed one")
    with LongTermMemory(src, EMB) as ltm:
        if batch:
            for half in (range(N // 2), range(N // 2, N)):      # two batches
                ltm.put_many("ns", [MemoryItem(f"t{i}", f"tail memory {i}") for i in half])
        else:
            for i in range(N):
                ltm.put("ns", f"t{i}", f"tail memory {i}")
        shutil.copytree(src, root)
    (log,) = root.glob("ns.0/*/log.0")
    raw = log.read_bytes()
    offs, off = [], 0
    while off < len(raw):
        offs.append(off)
        off += FRAME.size + FRAME.unpack_from(raw, off)[1]
    return root, log, offs[-N:]


def damaged(root) -> bool:
    """Whether the store reports damage: open isolates the namespace or verify() errs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with LongTermMemory(root, EMB) as ltm:
            if ltm.damaged:
                return True
            return any(r["errors"] or r["bad_rows"] for r in ltm.verify().values())


def repaired(root):
    """Repair the store's one damaged namespace: its report and the keys of ``ns`` served
    after (verify then clean)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with LongTermMemory(root, EMB) as ltm:
            (report,) = ltm.repair()
            keys = set(ltm.keys("ns"))
            assert not any(r["errors"] for r in ltm.verify().values())
    return report, keys


@pytest.mark.parametrize("batch", [False, True], ids=["puts", "put_many"])
@pytest.mark.parametrize("which", [0, 2, N - 1], ids=["first", "middle", "last"])
def test_a_zeroed_first_byte_after_the_checkpoint_is_damage(tmp_path, which, batch):
    root, log, offs = crashed_store(tmp_path, batch)
    raw = bytearray(log.read_bytes())
    assert raw[offs[which]] == MAGIC & 0xFF
    raw[offs[which]] = 0
    log.write_bytes(bytes(raw))
    assert damaged(root)
    with LongTermMemory(root, EMB, repair=True) as ltm:
        keys = set(ltm.keys("ns"))
        assert not any(r["errors"] for r in ltm.verify().values())
    # the record is intact but for its first byte, and records after it show it committed:
    # repair restores it, and every record after it
    assert keys == {"k0", "k1"} | {f"t{i}" for i in range(N)}


def test_a_flipped_bit_in_the_last_byte_is_damage(tmp_path):
    root, log, _ = crashed_store(tmp_path)
    raw = bytearray(log.read_bytes())
    raw[-1] ^= 0x01
    log.write_bytes(bytes(raw))
    assert damaged(root)


@pytest.mark.parametrize("cut", ["short", "zeros"])
def test_a_torn_tail_is_still_recovered_silently(tmp_path, cut):
    root, log, offs = crashed_store(tmp_path)
    raw = bytearray(log.read_bytes())
    if cut == "short":
        raw = raw[:-1]
    else:
        raw[offs[-1] + FRAME.size + 20:] = bytes(len(raw) - offs[-1] - FRAME.size - 20)
    log.write_bytes(bytes(raw))
    never_committed(log.parent, offs[-1])              # a torn write never got its offset
    assert not damaged(root)
    with LongTermMemory(root, EMB) as ltm:
        assert set(ltm.keys("ns")) == {"k0", "k1"} | {f"t{i}" for i in range(N - 1)}


def test_an_uncommitted_batch_is_still_cut(tmp_path):
    """(Zeroing the first byte of the *last* batch's first record leaves what a crash before
    its commit byte leaves: that batch is cut, as an uncommitted one.)"""
    root, log, offs = crashed_store(tmp_path, batch=True)
    raw = bytearray(log.read_bytes())
    raw[offs[N // 2]] = 0                          # the last batch's commit byte never written
    log.write_bytes(bytes(raw[:offs[-1] + 30]))    # and the batch's last record torn
    never_committed(log.parent, offs[N // 2])          # nor did its rows get their offsets
    assert not damaged(root)
    with LongTermMemory(root, EMB) as ltm:
        assert set(ltm.keys("ns")) == {"k0", "k1"} | {f"t{i}" for i in range(N // 2)}


@pytest.mark.parametrize("cut", ["inside_a_member", "at_a_member", "inside_the_head"])
def test_a_committed_batch_cut_short_is_damage(tmp_path, cut):
    """A log cut inside the last committed ``put_many`` (inside or between its records, or
    inside its first record once its batch count is in the file) used to be cut back like a
    torn write: part of an acknowledged batch served, the rest silently gone. A batch commits
    after all its records are written, so no crash leaves a committed head without them:
    the writer's open reports it, repair lists what it cannot vouch for; a reader cuts it like
    an uncommitted batch (what it would see racing the writer's append)."""
    root, log, offs = crashed_store(tmp_path, batch=True)
    head = offs[N // 2]
    raw = log.read_bytes()
    end = {"inside_a_member": offs[-1] + 30, "at_a_member": offs[-1],
           "inside_the_head": head + FRAME.size + 8}[cut]
    log.write_bytes(raw[:end])
    with LongTermMemory.open(root, EMB, read_only=True) as reader:
        assert set(reader.keys("ns")) == {"k0", "k1"} | {f"t{i}" for i in range(N // 2)}
    assert damaged(root)
    report, keys = repaired(root)
    # a missing record may have replaced or deleted any key: nothing it could have touched
    # is served as current; each is listed by key and set aside in the quarantine file
    assert not keys & {f"t{i}" for i in range(N // 2, N)}
    assert keys | set(report["uncertain"]) >= {"k0", "k1"} | {f"t{i}" for i in range(N // 2)}
    assert report["quarantine"] is not None


def test_repair_keeps_every_time_to_live(tmp_path):
    root = tmp_path / "m"
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("ns", "a", "first", ttl=3600)
        ltm.put("ns", "b", "second")
        ltm.put("ns", "c", "third", ttl=60)
        before = {k: ltm.get("ns", k).expires_at for k in "abc"}
    (log,) = root.glob("ns.0/*/log.0")
    raw = bytearray(log.read_bytes())
    raw[raw.rfind(b"second") + 2] ^= 0xFF          # b's record damaged: repair rewrites
    log.write_bytes(bytes(raw))
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
        assert r["kept"] == 2
        after = {k: ltm.get("ns", k).expires_at for k in "ac"}
    assert after == {"a": before["a"], "c": before["c"]} and None not in after.values()


def test_repair_of_a_log_cut_below_its_checkpoint_vouches_for_nothing_after_the_cut(tmp_path):
    """Records after the cut are gone, a DEL or a replacing PUT among them: every key the
    checkpoint held live is listed uncertain and set aside, none served."""
    import json

    from store_helpers import run_cli

    src, root = tmp_path / "src", tmp_path / "m"
    with LongTermMemory(src, EMB) as ltm:
        for k in "abc":
            ltm.put("ns", k, f"memory {k}")
    (log,) = src.glob("ns.0/*/log.0")
    cut = log.stat().st_size
    with LongTermMemory(src, EMB) as ltm:
        ltm.put("ns", "d", "memory d")             # checkpointed at close
    with LongTermMemory(src, EMB) as ltm:
        ltm.delete("ns", "b")                      # after the last checkpoint
        ltm.put("ns", "c", "memory c, replaced")
        shutil.copytree(src, root)                 # a crash
    (log,) = root.glob("ns.0/*/log.0")
    with open(log, "r+b") as f:
        f.truncate(cut)
    shutil.copytree(root, tmp_path / "m2")
    code, out, _ = run_cli("repair", str(tmp_path / "m2"))       # the human output lists them
    assert code == 0 and "'b'" in out and "'c'" in out, out
    code, out, _ = run_cli("repair", str(root), "--json")
    assert code == 0, out
    (r,) = json.loads(out)["repaired"]
    assert {"b", "c"} <= set(r["uncertain"])
    with LongTermMemory(root, EMB) as ltm:
        served = {k: ltm.get("ns", k).text for k in ltm.keys("ns")}
    assert "b" not in served and served.get("c") != "memory c"
    quarantined = [json.loads(line)["key"] for q in root.glob("quarantine.*.jsonl")
                   for line in q.read_text().splitlines()[1:]]
    assert {"b", "c"} <= set(quarantined)
    code, out, _ = run_cli("repair", str(root))    # nothing left to repair: a clean store
    assert code == 0


@pytest.mark.parametrize("name", ["importance", "created_at", "updated_at"])
def test_a_damaged_numeric_column_is_found_and_repaired(tmp_path, name):
    """Issue 27 item 3: the columns the log implies are covered by the checkpoint's CRCs
    (open) and compared with the log (verify); repair rebuilds them from the log."""
    root = tmp_path / "m"
    with LongTermMemory(root, EMB) as ltm:
        for k in "abc":
            ltm.put("ns", k, f"memory {k}", importance=0.75)
        want = {k: getattr(ltm.get("ns", k), name) for k in "abc"}
    (col,) = root.glob(f"ns.0/*/{name}.0.*")
    raw = bytearray(col.read_bytes())
    size = 4 if name == "importance" else 8
    raw[size:2 * size] = bytes(size)                 # row 1: 0.0, a valid value
    col.write_bytes(bytes(raw))
    assert damaged(root)
    with LongTermMemory(root, EMB, repair=True) as ltm:
        assert {k: getattr(ltm.get("ns", k), name) for k in "abc"} == want
        assert not any(r["errors"] for r in ltm.verify().values())


def test_verify_compares_the_numeric_columns_with_the_log(tmp_path):
    root = tmp_path / "m"
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("ns", "a", "memory a", importance=0.75)
        (col,) = root.glob("ns.0/*/importance.0.*")
        with open(col, "r+b") as f:                  # under the open store's shared map
            f.write(bytes(4))
        (r,) = ltm.verify().values()
        assert any("importance" in e for e in r["errors"]), r


@pytest.mark.parametrize("pack", [True, False], ids=["pack", "directory"])
@pytest.mark.parametrize("cut", ["at_a_record", "inside_the_last_record", "two_records"])
def test_a_log_cut_the_columns_witness_is_damage(tmp_path, monkeypatch, pack, cut):
    """A log cut exactly between records, or inside its last single record, used to read as
    a torn write: the last acknowledged puts silently gone (the campaign's one silent class
    left). A row's ``record_offset`` is written only after its record is in the log, so the
    row past the log's end, with its offset and created_at set, witnesses a committed
    record: the writer's open reports it, repair sets aside and lists what it cannot vouch
    for, and never serves the lost put's key."""
    from memcore.stores import long_pack
    monkeypatch.setattr(long_pack, "ENABLED", pack)
    root, log, offs = crashed_store(tmp_path)
    raw = log.read_bytes()
    end = {"at_a_record": offs[-1], "inside_the_last_record": offs[-1] + 30,
           "two_records": offs[-2]}[cut]
    log.write_bytes(raw[:end])
    with LongTermMemory.open(root, EMB, read_only=True) as reader:      # a reader may race
        assert "t1" in reader.keys("ns")                               # the append: no check
    assert damaged(root)
    report, keys = repaired(root)
    assert f"t{N - 1}" not in keys
    assert keys | set(report["uncertain"]) >= {"k0", "k1"} | {f"t{i}" for i in range(N - 2)}
    assert report["quarantine"] is not None


def test_no_false_alarm_after_a_crash_under_durability_none(tmp_path):
    """``durability="none"`` buffers records whose rows' offsets are already in the column: a
    crash loses them, which that mode allows. The header's ``unwitnessed`` mark keeps that
    from reading as damage; a writing-through writer's checkpoint arms the witness again."""
    src, root = tmp_path / "src", tmp_path / "m"
    with LongTermMemory(src, EMB) as ltm:
        ltm.put("ns", "k0", "checkpointed zero")
    with LongTermMemory(src, EMB, durability="none") as ltm:
        for i in range(4):
            ltm.put("ns", f"b{i}", f"buffered {i}")
        shutil.copytree(src, root)                      # killed: the buffer never written
    assert not damaged(root)
    with LongTermMemory(root, EMB) as ltm:
        assert ltm.keys("ns") == ["k0"]
        ltm.put("ns", "k1", "written through")          # then a clean close: checkpoint
    again = tmp_path / "again"
    with LongTermMemory(root, EMB) as ltm:
        for i in range(3):
            ltm.put("ns", f"t{i}", f"tail {i}")
        shutil.copytree(root, again)
    (log,) = again.glob("ns.0/*/log.*")
    raw = log.read_bytes()
    log.write_bytes(raw[:raw.rfind(b"tail 2") - 60])     # cut inside t2's record
    assert damaged(again)


def test_one_damaged_column_past_the_rows_is_no_false_alarm(tmp_path):
    """The witness needs two files to agree: a damaged ``record_offset`` past the rows in
    use (unused bytes) alone reads as nothing."""
    import numpy as np
    root, log, offs = crashed_store(tmp_path)
    (path,) = log.parent.glob("record_offset.*.i64")
    col = np.memmap(path, np.int64, "r+")
    rows = int(np.count_nonzero(col)) + 1                # row 0's offset is 0
    col[rows] = offs[-1] + 1000
    col.flush()
    del col
    assert not damaged(root)
