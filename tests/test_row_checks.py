"""Issue 27 (D3): the fields that change in place -- ``expiry`` (``refresh_ttl``),
``last_accessed_at`` and ``access_count`` (every touch) -- are covered by each generation's
check file ``rowcheck.<g>.u8`` (memcore.storage.columns.RowChecks).

Before it, damaging those column files was served silently (verify() clean): a TTL gone so
a memory never expired, a flipped bit so a live one vanished, access statistics wrong.
Here every such damage is either restored exactly (a TTL from its verified copy) or reported
by verify() (statistics reset to their records, a TTL whose copy is damaged) and listed by
repair(); a kill between a value and its check never leaves a false report.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem
from memcore.errors import MemcoreError, StoreCorruptedError
from memcore.kernels import logscan
from memcore.kernels import reference as ref
from memcore.storage.columns import CHECK_DTYPE, expiry_crcs, row_crcs, stats_crcs

DIM = 16
T0 = 1_700_000_000.0
N = 40
DAMAGES = ("bitflip", "zero", "truncate", "delete")


class Clock:
    def __init__(self):
        self.t = T0

    def __call__(self):
        return self.t


def _store(root, clock=None, **kw) -> LongTermMemory:
    return LongTermMemory(root, HashingEmbedder(dim=DIM), clock=clock or Clock(), **kw)


def _state(s) -> dict:
    out = {}
    for i in range(N):
        m = s.get("ns", f"k{i}")
        out[f"k{i}"] = None if m is None else (m.expires_at, m.ttl, m.last_accessed_at,
                                               m.access_count)
    return out


def _build(root) -> dict:
    """N keys, the odd ones with a time to live; some touched, some TTLs refreshed, later
    than their records say; returns what every key serves."""
    clock = Clock()
    with _store(root, clock) as s:
        for i in range(N):
            s.put("ns", f"k{i}", f"text {i}", ttl=3600 if i % 2 else None)
        clock.t = T0 + 10
        s.touch("ns", [f"k{i}" for i in range(0, N, 3)])
        clock.t = T0 + 20
        for i in range(1, N, 4):
            s.get("ns", f"k{i}", refresh_ttl=True)
        want = _state(s)
    assert want["k1"][0] == T0 + 20 + 3600 and want["k3"][0] == T0 + 3600
    assert want["k0"][2:] == (T0 + 10, 1)
    return want


def _ns_dir(root) -> str:
    return glob.glob(os.path.join(str(root), "ns.0", "n-*"))[0]


def _damage(path: str, how: str, rng: np.random.Generator) -> None:
    size = os.path.getsize(path)
    used = min(size, N * (32 if "rowcheck" in path else 16 if "expiry" in path else 8))
    if how == "delete":
        os.unlink(path)
        return
    if how == "truncate":
        os.truncate(path, int(rng.integers(0, used)))
        return
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how == "bitflip":
        at = int(rng.integers(0, used))
        data[at] ^= 1 << int(rng.integers(0, 8))
    else:
        at = int(rng.integers(0, used - 8))
        k = 8 + int(rng.integers(0, 16))
        data[at:at + k] = bytes(len(data[at:at + k]))
    with open(path, "wb") as f:
        f.write(data)


def _errors(s) -> list[str]:
    return [e for r in s.verify().values() for e in r["errors"]]


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("column", ["expiry", "last_accessed_at", "access_count", "rowcheck"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_damaged_in_place_fields_are_restored_or_reported_and_repaired(tmp_path, column, how,
                                                                       seed):
    root = tmp_path / "s"
    want = _build(root)
    d = _ns_dir(root)
    path = glob.glob(os.path.join(d, f"{column}.0.*"))[0]
    _damage(path, how, np.random.default_rng(seed))
    for kw in ({"read_only": True}, {}):       # a reader, then a writer
        try:
            with _store(root, **kw) as s:
                got, errors = _state(s), _errors(s)
        except MemcoreError:                     # a column file too short: reported
            continue
        if True:
            # never served wrong while verify() is clean; a TTL never changes at all
            assert got == want or errors, (kw, column, how)
            assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in want.items()}
            if column == "expiry":                 # restored from its verified copy
                assert got == want and not errors
    with _store(root, repair=True) as s:
        report = s.repair()
        got = _state(s)
        assert not _errors(s)
        assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in want.items()}
        listed = {k for r in report for k in r["stats_reset"]}
        assert {k for k in want if got[k] != want[k]} <= listed   # every reset listed by key
    with _store(root, read_only=True) as s:
        assert _state(s) == got and not _errors(s)


def test_ttl_is_never_served_from_a_damaged_column_even_past_the_checkpoint(tmp_path):
    """The cases the fault campaign found silent: expiry zeroed, truncated, deleted or one
    bit flipped, for checkpointed rows and rows written after the checkpoint."""
    root = tmp_path / "s"
    clock = Clock()
    with _store(root, clock, durability="none") as s:
        s.put_many("ns", [MemoryItem(f"c{i}", f"c {i}") for i in range(8)], ttl=600)
        s.flush()                                    # a checkpoint
        for i in range(4):
            s.put("ns", f"p{i}", f"p {i}", ttl=60)   # past the checkpoint
        s.flush()
    d = _ns_dir(root)
    path = os.path.join(d, "expiry.0.f64")
    for how in ("zero", "bitflip", "truncate", "delete"):
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        if how == "zero":
            raw[16 * 9:16 * 10] = bytes(16)
        elif how == "bitflip":
            raw[16 * 2 + 7] ^= 0x08                    # the exponent: long ago or far ahead
        with open(path, "wb") as f:
            f.write(raw)
        if how == "truncate":
            os.truncate(path, 16 * 3)
        elif how == "delete":
            os.unlink(path)
        clock.t = T0 + 100                           # p* expired, c* alive
        with _store(root, clock, read_only=True) as s:
            assert sorted(s.keys("ns")) == sorted(f"c{i}" for i in range(8))
            assert s.get("ns", "c2").expires_at == T0 + 600 and not _errors(s)
        with _store(root, clock) as s:                # the writer restores the column
            assert s.get("ns", "c2").expires_at == T0 + 600 and s.get("ns", "p1") is None
        clock.t = T0


def test_a_torn_touch_or_ttl_refresh_is_completed_without_a_report(tmp_path):
    """A kill between the two values of a touch, or between a TTL's copy and its column: what
    the protocol's order leaves is recognised (stats_next / exp_next), not damage."""
    root = tmp_path / "s"
    want = _build(root)
    d = _ns_dir(root)
    chk = np.memmap(os.path.join(d, "rowcheck.0.u8"), CHECK_DTYPE, mode="r+")
    last = np.memmap(os.path.join(d, "last_accessed_at.0.f64"), np.float64, mode="r+")
    count = np.memmap(os.path.join(d, "access_count.0.i64"), np.int64, mode="r+")
    exp = np.memmap(os.path.join(d, "expiry.0.f64"), np.float64, mode="r+").reshape(-1, 2)
    # row 2: a touch at T0 + 50 killed after last_accessed_at, before access_count
    chk["stats_next"][2] = stats_crcs([T0 + 50], [count[2] + 1])[0]
    last[2] = T0 + 50
    # row 5: a refresh at T0 + 70 killed after the copy, before ``exp`` and the column
    chk["exp_next"][5] = expiry_crcs([T0 + 70 + 3600], [3600.0])[0]
    chk["expires_at"][5] = T0 + 70 + 3600
    # row 7: killed right after exp_next: nothing else written
    chk["exp_next"][7] = expiry_crcs([T0 + 90 + 3600], [3600.0])[0]
    for a in (chk, last, count, exp):
        a.flush()
    del chk, last, count, exp
    want["k2"] = want["k2"][:2] + (T0 + 50, want["k2"][3] + 1)
    want["k5"] = (T0 + 70 + 3600,) + want["k5"][1:]
    for kw in ({"read_only": True}, {}, {"read_only": True}):
        with _store(root, **kw) as s:
            assert _state(s) == want and not _errors(s)


def test_row_crcs_equal_zlib():
    import zlib

    b = np.random.default_rng(3).integers(0, 256, (300, 16)).astype(np.uint8)
    want = np.array([zlib.crc32(r.tobytes()) for r in b], np.uint32)
    assert np.array_equal(row_crcs(b[:, :8], b[:, 8:]), want)          # the kernel
    assert np.array_equal(row_crcs(b[:10, :5], b[:10, 5:]), want[:10])  # zlib per row
    assert np.array_equal(row_crcs(b), want)
    got, oracle = np.empty(300, np.uint32), np.empty(300, np.uint32)
    logscan.crc_rows(b[:, :3].copy(), b[:, 3:].copy(), logscan.CRC_TABLE, got)
    ref.crc_rows(b[:, :3], b[:, 3:], logscan.CRC_TABLE, oracle)
    assert np.array_equal(got, want) and np.array_equal(oracle, want)


_TOUCHER = textwrap.dedent("""
    import sys, time
    from memcore import HashingEmbedder, LongTermMemory
    t = [1.7e9]
    s = LongTermMemory(sys.argv[1], HashingEmbedder(dim=16), clock=lambda: t[0])
    print("ready", flush=True)
    while True:
        t[0] += 1.0
        s.search("ns", "text", top_k=10)                       # touches what it returns
        for i in range(1, 40, 2):
            s.get("ns", f"k{i}", refresh_ttl=True)
""")


@pytest.mark.slow
def test_sigkill_while_touching_and_refreshing_leaves_every_check_intact(tmp_path):
    root = tmp_path / "s"
    _build(root)
    rng = np.random.default_rng(5)
    for _ in range(12):
        with subprocess.Popen([sys.executable, "-c", _TOUCHER, str(root)],
                              stdout=subprocess.PIPE, text=True) as p:
            assert p.stdout.readline().strip() == "ready"
            time.sleep(float(rng.uniform(0.01, 0.3)))
            p.send_signal(signal.SIGKILL)
        with _store(root, read_only=True) as s:
            assert not _errors(s) and len(s.keys("ns")) == N


def test_compaction_never_launders_an_unverified_ttl_and_repair_lists_it(tmp_path):
    root = tmp_path / "s"
    want = _build(root)
    d = _ns_dir(root)
    chk = np.memmap(os.path.join(d, "rowcheck.0.u8"), CHECK_DTYPE, mode="r+")
    chk["exp"][3] ^= 1                     # the copy of k3's TTL fails both its CRCs
    chk["exp_next"][3] ^= 1
    chk.flush()
    del chk
    with _store(root) as s:
        assert _state(s) == want                         # the column's value, unverified
        assert any("cannot be verified" in e for e in _errors(s))
        s.delete("ns", "k38")                            # something to compact
        want["k38"] = None
        with pytest.raises(StoreCorruptedError, match="rowcheck"):
            s.compact()
        assert _state(s) == want
        report = s.repair()
        assert [r["ttl_unverified"] for r in report] == [["k3"]]
        assert _state(s) == want and not _errors(s)
        s.compact()
        assert _state(s) == want and not _errors(s)
