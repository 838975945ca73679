"""delete_many: a loop of delete in one call (one log commit on disk), on every store."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memcore import (
    HashingEmbedder,
    InvalidArgumentTypeError,
    InvalidNamespaceError,
    InvalidTextError,
    LongTermMemory,
    MemcoreError,
    MemoryItem,
    ReadOnlyStoreError,
    storage,
)
from store_helpers import STORE_CASES, FakeClock, make_store
from test_disk_faults import _run_injected

DIM = 16
KEYS = [f"k{i}" for i in range(12)]


def disk(path, clock=None, **kw):
    return LongTermMemory(path, HashingEmbedder(dim=DIM), clock=clock or FakeClock(), **kw)


def ns_dir(root) -> Path:
    return sorted((Path(root) / "ns.0").iterdir())[0]


def fill(s, clock, present, expiring):
    """Put ``present`` keys into "ns" (those in ``expiring`` with a 10 s ttl) and one key of
    another namespace; then let the ttl run out."""
    s.put_many("ns", [MemoryItem(k, f"memory {k}") for k in sorted(present - expiring)])
    if present & expiring:
        s.put_many("ns", [MemoryItem(k, f"memory {k}") for k in sorted(present & expiring)],
                   ttl=10.0)
    s.put("other", "k0", "another namespace")
    clock.advance(20.0)


def state(s):
    return {ns: sorted(s.keys(ns)) for ns in ("ns", "other")}


# ---------------------------------------------------------------------- every store

@pytest.fixture(params=[c for c in STORE_CASES], ids=lambda c: c.id)
def case(request):
    return request.param


def test_semantics_equal_a_loop_of_delete(case):
    clock = FakeClock()
    a, b = make_store(case, clock), make_store(case, clock)
    present, expiring = set(KEYS[:8]), {"k1", "k5"}
    fill(a, clock, present, expiring)
    fill(b, clock, present, expiring)
    batch = ["k0", "k1", "k0", "k3", "missing", "k5", "k7"]
    want = sum(b.delete("ns", k) for k in batch)
    assert a.delete_many("ns", batch) == want == 3          # k1, k5 expired; k0 once
    assert state(a) == state(b)
    assert a.get("ns", "k2").text == "memory k2" and a.count("other") == 1
    assert a.delete_many("ns", iter(["k2", "k2"])) == 1 and a.delete_many("ns", []) == 0
    assert a.delete_many(("nowhere", "x"), ["k0"]) == 0
    assert not {h.key for h in a.search("ns", "memory k3", top_k=8)} & set(batch)


def test_bad_input_deletes_nothing(case):
    clock = FakeClock()
    s = make_store(case, clock)
    fill(s, clock, set(KEYS[:4]), set())
    before = state(s)
    for keys, err in ((["k0", ""], InvalidTextError), (["k0", "a\x00b"], InvalidTextError),
                      (["k0", 5], InvalidTextError), ("k0", InvalidArgumentTypeError),
                      (b"k0", InvalidArgumentTypeError), (None, InvalidArgumentTypeError),
                      (7, InvalidArgumentTypeError)):
        with pytest.raises(err) as info:
            s.delete_many("ns", keys)
        assert isinstance(info.value, MemcoreError)
        assert isinstance(info.value, TypeError if err is InvalidArgumentTypeError else ValueError)
    with pytest.raises(InvalidNamespaceError):
        s.delete_many("", ["k0"])
    assert state(s) == before


# ---------------------------------------------------------------------- property: vs a loop

@settings(max_examples=40, deadline=None)
@given(present=st.sets(st.sampled_from(KEYS)), expiring=st.sets(st.sampled_from(KEYS)),
       batch=st.lists(st.sampled_from(KEYS + ["absent"]), max_size=20),
       where=st.sampled_from(["short", "long", "two-tier", "disk"]))
def test_property_delete_many_is_a_loop_of_delete(present, expiring, batch, where):
    tmp = tempfile.mkdtemp(prefix="delmany-")
    try:
        clock = FakeClock()
        if where == "disk":
            a, b = disk(tmp + "/a", clock), disk(tmp + "/b", clock)
        else:
            c = next(c for c in STORE_CASES if c.id == where)
            a, b = make_store(c, clock), make_store(c, clock)
        fill(a, clock, present, expiring)
        fill(b, clock, present, expiring)
        want = sum(b.delete("ns", k) for k in batch)
        assert a.delete_many("ns", batch) == want
        assert state(a) == state(b)
        if where == "disk":
            a.close()
            b.close()
            with disk(tmp + "/a", clock, read_only=True) as ra, \
                    disk(tmp + "/b", clock, read_only=True) as rb:
                assert state(ra) == state(rb) == {"ns": sorted(present - expiring - set(batch)),
                                                  "other": ["k0"]}
    finally:
        shutil.rmtree(tmp)


# ---------------------------------------------------------------------- disk

@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_reopen_after_delete_many(tmp_path, durability):
    clock = FakeClock()
    with disk(tmp_path / "m", clock, durability=durability) as s:
        fill(s, clock, set(KEYS), {"k11"})
        assert s.delete_many("ns", KEYS[:6] + ["k11"]) == 6
    with disk(tmp_path / "m", clock) as s:
        assert sorted(s.keys("ns")) == sorted(KEYS[6:11])
        assert all(s.get("ns", k).text == f"memory {k}" for k in KEYS[6:11])
        assert all(s.get("ns", k) is None for k in KEYS[:6])
        assert s.count("other") == 1
        s.put("ns", "k0", "back again")                 # a deleted key can come back
    with disk(tmp_path / "m", clock, read_only=True) as s:
        assert s.get("ns", "k0").text == "back again" and s.count("ns") == 6


def test_read_only_raises_and_deletes_nothing(tmp_path):
    clock = FakeClock()
    with disk(tmp_path / "m", clock) as s:
        fill(s, clock, set(KEYS[:3]), set())
    with disk(tmp_path / "m", clock, read_only=True) as r:
        with pytest.raises(ReadOnlyStoreError):
            r.delete_many("ns", ["k0"])
        with pytest.raises(ReadOnlyStoreError):
            r.delete_many("nowhere", ["k0"])
        assert sorted(r.keys("ns")) == KEYS[:3]


def test_one_commit_and_checkpoint_due(tmp_path, format2):
    # format 2 by design: the DEL records in the namespace directory's log, byte for byte (the
    # pack's own: tests/test_pack.py)
    """The batch is one append of DEL records after the log's previous end; a batch that
    brings the log past the checkpoint interval writes a checkpoint, as delete does."""
    with disk(tmp_path / "m") as s:
        s.put_many("ns", [MemoryItem(k, f"memory {k}") for k in KEYS])
        files = s._tables[("ns",)].files
        l0, r0 = files.log_bytes, files.records
        assert s.delete_many("ns", KEYS[:5]) == 5
        log = (ns_dir(tmp_path / "m") / "log.0").read_bytes()
        want = bytearray(b"".join(storage.records.encode_delete(int(s_row), k.encode())
                                  for s_row, k in zip(range(5), KEYS[:5])))
        storage.records.mark_batch(want, 5)         # the batch's count in its first record
        want[0] = storage.records.MAGIC & 0xFF      # committed
        assert log[l0:] == want and files.records == r0 + 5
        t = s._tables[("ns",)]
        files.checkpoint_log_bytes -= storage.checkpoint.CHECKPOINT_BYTES     # make it due
        assert files.checkpoint_due(t.rows)
        s.delete_many("ns", ["k5"])
        assert not files.checkpoint_due(t.rows) and files.checkpoint_log_bytes == files.log_bytes


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_torn_batch_is_cut_whole_never_a_prefix(tmp_path, durability):
    """What a kill inside delete_many leaves -- the DEL records with the first one's commit
    byte unwritten, cut anywhere in the batch -- opens with none of the batch deleted."""
    src = tmp_path / "src"
    clock = FakeClock()
    with disk(src, clock, durability=durability) as s:
        fill(s, clock, set(KEYS), set())
    s = disk(src, clock, durability=durability)
    log = ns_dir(src) / "log.0"
    l0 = log.stat().st_size
    assert s.delete_many("ns", KEYS[:8]) == 8
    s._release()                                        # a SIGKILL: no close, no checkpoint
    s._closed = True
    full = log.read_bytes()
    assert len(full) > l0 + 8 * 12 and full[l0] == storage.records.MAGIC & 0xFF
    for cut in sorted({l0 + 1, l0 + 12, l0 + 20, len(full) - 1, len(full),
                       *range(l0 + 1, len(full), 11)}):
        root = tmp_path / f"c{cut}"
        shutil.copytree(src, root)
        (ns_dir(root) / "log.0").write_bytes(full[:l0] + b"\0" + full[l0 + 1:cut])
        with disk(root, clock, read_only=True) as r:
            assert sorted(r.keys("ns")) == sorted(KEYS), cut           # none, never a prefix
        with disk(root, clock) as w:                                   # the writer cuts it
            assert w.delete_many("ns", ["k11"]) == 1
        with disk(root, clock, read_only=True) as r:
            assert sorted(r.keys("ns")) == sorted(KEYS[:11])
        shutil.rmtree(root)
    with disk(src, clock, read_only=True) as r:                        # committed: all
        assert sorted(r.keys("ns")) == sorted(KEYS[8:])


def test_an_exception_at_any_step_is_all_or_nothing(tmp_path):
    """An exception at every line of a disk delete_many leaves the store (the same object,
    and reopened) with the whole batch deleted or none of it."""
    clock = FakeClock()
    s = disk(tmp_path / "m", clock)
    batch = KEYS[:6]
    step = 1
    while True:
        s.put_many("ns", [MemoryItem(k, f"memory {k}") for k in KEYS])
        done, _ = _run_injected(lambda: s.delete_many("ns", batch), step)
        here = {k: s.get("ns", k) is not None for k in batch}
        assert len(set(here.values())) == 1, (step, here)
        assert all(s.get("ns", k).text == f"memory {k}" for k in KEYS[6:])
        s.put("ns", "probe", f"probe {step}")             # the store still takes writes
        s.flush()
        with disk(tmp_path / "m", clock, read_only=True) as r:
            assert {k: r.get("ns", k) is not None for k in batch} == here, step
            assert r.get("ns", "probe").text == f"probe {step}"
        if done:
            assert not any(here.values())
            break
        step += 2
    s.close()
    assert step > 10


@pytest.mark.parametrize("op", ["delete_many", "sweep"])
def test_an_os_error_raises_store_io_error_and_deletes_nothing(tmp_path, op, format2):
    # format 2 by design: the namespace directory's log descriptor made read-only (the pack's own:
    # tests/test_pack.py)
    """A failing log write (the log's fd made read-only underneath the store) is a
    StoreIOError (a MemcoreError and an OSError) for delete_many and a disk sweep alike,
    and the reopened store still holds every key."""
    from memcore import StoreIOError

    clock = FakeClock()
    with disk(tmp_path / "m", clock) as s:
        fill(s, clock, set(KEYS), set(KEYS[:4]))
    s = disk(tmp_path / "m", clock)
    files = s._tables[("ns",)].files
    ro = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(ro, files._fd)
        with pytest.raises(StoreIOError) as info:
            s.delete_many("ns", KEYS[:6]) if op == "delete_many" else s.sweep()
        assert isinstance(info.value, OSError)
    finally:
        os.close(ro)
        s._release()                                # the store is as a killed process left it
        s._closed = True
    with disk(tmp_path / "m", clock, read_only=True) as r:
        assert sorted(r.keys("ns")) == sorted(KEYS[4:])
        assert r.count("ns") == 8
        assert r.stats()[("ns",)]["live"] == 12     # the expired ones: not swept either
