"""Format 3 under faults: what the pack fault campaign (``python -m bench.faults --pack``)
found, each as a test, and a short run of the campaign itself (its long run is slow).

A pack's files are a format-2 namespace directory plus the ``nsid`` side column; damage to
any of them is either repaired from the log, or reported naming the namespaces it affects
(issue 24: "a damaged segment names the namespaces in it"), never served silently wrong.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import pytest

from memcore import HashingEmbedder, LongTermMemory, MemoryItem
from memcore.storage.layout import PACK_DIR
from memcore.stores import long_pack

DIM = 16
T0 = 1_700_000_000.0


@pytest.fixture
def pack(monkeypatch):
    monkeypatch.setattr(long_pack, "ENABLED", True)


def _store(root, **kw):
    return LongTermMemory(root, HashingEmbedder(dim=DIM), clock=lambda: T0, **kw)


def _fill(root, n=6, m=4):
    """``n`` small namespaces ``u0``.. of ``m`` rows each, in the pack; returns the model
    {(ns, key): text}."""
    model = {}
    with _store(root) as s:
        for u in range(n):
            items = [MemoryItem(f"k{j}", f"user {u} note {j} about the door") for j in range(m)]
            s.put_many(f"u{u}", items)
            model.update({(f"u{u}", it.key): it.text for it in items})
    return model


def _served(s, model):
    """The (ns, key) of ``model`` that ``s`` does not serve exactly."""
    return sorted(nk for nk, text in model.items()
                  if (m := s.get(*nk)) is None or m.text != text)


def _pack_file(root, prefix):
    (path,) = glob.glob(os.path.join(root, "ns.0", PACK_DIR, prefix + ".*"))
    return path


@pytest.mark.parametrize("catalog", [True, False])
@pytest.mark.parametrize("damage", ["bitflip", "low-bytes-zeroed"])
def test_a_damaged_namespace_id_never_hides_a_row(tmp_path, pack, damage, catalog):
    """A damaged value of the ``nsid`` side column moved its row into a namespace id of its
    own: the row vanished from its namespace (verify clean, repair lost it). Open checks an
    id the catalog does not name against its row's key and takes the id from the log."""
    root = str(tmp_path / "s")
    model = _fill(root)
    if not catalog:
        for p in glob.glob(os.path.join(root, "catalog.*")):
            os.remove(p)
    ids = np.memmap(_pack_file(root, "nsid"), np.int64, "r+")
    for row in (0, 9):                             # u0/k0 and u2/k1
        ids[row] = ids[row] ^ (1 << 40) if damage == "bitflip" else ids[row] & ~0xFFFF
    ids.flush()
    del ids
    for read_only in (True, False, True):          # the writer fixes the column on disk
        with _store(root, read_only=read_only) as s:
            assert _served(s, model) == []
            assert sorted(s.namespaces()) == sorted((f"u{u}",) for u in range(6))
            assert all(not r["errors"] and not r["bad_rows"] for r in s.verify().values())
    ids = np.memmap(_pack_file(root, "nsid"), np.int64, "r")
    assert ids[0] == long_pack.namespace_id(("u0",)) and ids[9] == long_pack.namespace_id(("u2",))


@pytest.mark.parametrize("damage", ["column", "vector"])
def test_verify_names_the_namespaces_a_damaged_pack_concerns(tmp_path, pack, damage):
    """verify() keyed a damaged pack by its directory (or its reserved namespace) with
    messages naming files and offsets only, and ``damaged`` did not name the namespaces:
    now the pack's entry lists them -- all of them for a shared file (the pack is isolated),
    the namespace of each bad row for a damaged vector."""
    root = str(tmp_path / "s")
    model = _fill(root, n=7)
    if damage == "column":
        path = Path(_pack_file(root, "created_at"))
        raw = bytearray(path.read_bytes())
        raw[8 * 5 + 2] ^= 0x10                     # row 5 (u1/k1): the column fails its CRC
    else:
        path = Path(_pack_file(root, "vectors"))
        raw = bytearray(path.read_bytes())
        raw[9 * DIM * 4 + 3] ^= 0x10               # row 9: u2/k1
    path.write_bytes(bytes(raw))
    with _store(root, read_only=True) as s:
        rep = s.verify()
        (entry,) = [r for r in rep.values() if r["errors"] or r["bad_rows"]]
        if damage == "column":
            assert entry["namespaces"] == sorted((f"u{u}",) for u in range(7))
            assert "pack holds 7 namespaces: ('u0',)" in s.damaged[PACK_DIR]
        else:
            assert entry["namespaces"] == [("u2",)] and entry["bad_rows"] == [9]
            assert _served(s, {nk: t for nk, t in model.items() if nk[0] != "u2"}) == []


# ---------------------------------------------------------------------- the campaign itself

def _campaign(tmp_path, kills, damage, seed):
    from bench import faults
    res = faults.campaign(kills, damage, seed, big_every=0, scratch=str(tmp_path), log=lambda m: None,
                          pack=True)
    dm = res["damage"]
    # a log cut inside its last record reads as a torn write (the documented limit)
    silent = [r for r in dm if r["verdict"] == "silent"
              and not (r["kind"] == "pack:log" and r["damage"] == "torn_last")]
    assert res["ltm"]["failures"] == [] and res["sm"]["lost"] == []
    assert res["ltm"]["verify_dirty"] == res["sm"]["verify_dirty"] == 0
    assert silent == [] and [r for r in dm if r["verdict"] == "crashed"] == []
    assert [r for r in dm if r["unnamed"] or r["resurrected"]] == []
    return res


def test_the_pack_fault_campaign_short(tmp_path):
    res = _campaign(tmp_path, 2, 17, 1)          # 17: one case per file kind of the pack
    assert len({r["kind"] for r in res["damage"]}) == 17


@pytest.mark.slow
def test_the_pack_fault_campaign_long(tmp_path):
    res = _campaign(tmp_path, 150, 200, 24)
    assert res["ltm"]["promotions"] >= 1


@pytest.mark.parametrize("cut", ["inside-last-record", "at-a-record-boundary"])
def test_a_log_cut_inside_a_committed_batch_is_damage(tmp_path, pack, cut):
    """A committed batch's records end before its count (in its first record's pad bytes)
    says: no crash leaves that (the records are written before the commit byte), but open
    cut the log back like a torn write and served the first rows of the batch, silently (the
    campaign's 5 silent cases of 400). Now the writer's open and verify report it (a
    read-only open cuts the batch, as it must when racing the writer's append);
    repair lists what it cannot vouch for."""
    from memcore.errors import StoreCorruptedError
    from memcore.storage.records import FRAME
    root = str(tmp_path / "s")
    model = _fill(root, n=3)
    with _store(root) as s:
        s.put("u1", "late", "after the checkpoint")
        s.put_many("u2", [MemoryItem(f"b{j}", f"last batch {j}") for j in range(3)])
        s._release()                                 # what a SIGKILL leaves
        s._closed = True
    log = _pack_file(root, "log")
    data = Path(log).read_bytes()
    ends, off = [], 0
    while off < len(data):
        off += FRAME.size + FRAME.unpack_from(data, off)[1]
        ends.append(off)
    keep = ends[-2] + 7 if cut == "inside-last-record" else ends[-2]   # b2's record cut
    os.truncate(log, keep)
    for read_only in (True, False):
        with _store(root, read_only=read_only) as s:
            if read_only:        # a reader may be racing the append: it cuts the batch
                assert s.get("u2", "b0") is None
                continue
            rep = s.verify()
            assert any("committed batch" in e for r in rep.values() for e in r["errors"])
            assert rep[next(k for k in rep if rep[k]["errors"])]["namespaces"]
            with pytest.raises(StoreCorruptedError):
                s.get("u2", "b0")
    model.update({("u1", "late"): "after the checkpoint", ("u2", "b0"): "last batch 0",
                  ("u2", "b1"): "last batch 1"})
    with _store(root) as s:
        report = s.repair()
        # the lost records may have replaced or deleted any key: each is served exactly or
        # listed by key (and set aside in the quarantine file), never served stale
        uncertain = {(tuple(r["namespace"]), k) for r in report for k in r["uncertain"]}
        assert {(ns[0], k) for ns, k in uncertain} >= set(_served(s, model))
        assert s.get("u2", "b2") is None and uncertain
