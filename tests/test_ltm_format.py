"""The on-disk format stays readable and convertible.

- A store written by the format-1 code (fixture ``ltm-format-v1``) opens read-only with every
  row and score unchanged, refuses a writer with a message naming ``memcore migrate``, and
  ``migrate`` (library and CLI) turns it into a format-2 store with the same rows and scores,
  atomically (a failure before the commit leaves the format-1 store as it was); with the
  pack on (the default) format 1 and format 2 migrate to format 3, small namespaces packed.
- The same operations today write the bytes of the format-2 fixture, which opens with every
  row and score unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest

from memcore import FormatVersionError, HashingEmbedder, LongTermMemory, storage
from tests.ltm_format_v1 import DIM, FIXTURE, FIXTURES, build, snapshot

V1 = os.path.join(FIXTURE, "store")
V2 = os.path.join(FIXTURES, "ltm-format-v2", "store")
V3 = os.path.join(FIXTURES, "ltm-format-v3", "store")
NOW = 1_700_000_100.0


def _expected(fixture: str) -> dict:
    with open(os.path.join(os.path.dirname(fixture), "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n != "LOCK":
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
    return out


def _snap(store, **kw) -> dict:
    with LongTermMemory.open(store, HashingEmbedder(dim=DIM), clock=lambda: NOW, **kw) as ltm:
        return json.loads(json.dumps(snapshot(ltm)))


def _copy(tmp_path, fixture):
    store = tmp_path / "store"
    shutil.copytree(fixture, store)
    return store


def test_v1_fixture_opens_read_only_with_every_row_and_score(tmp_path, caplog):
    store = _copy(tmp_path, V1)
    before = _files(str(store))
    with caplog.at_level(logging.WARNING, logger="memcore"):
        assert _snap(store, read_only=True) == _expected(V1)
    assert f"memcore migrate {store}" in caplog.text
    assert _files(str(store)) == before                    # nothing written


def test_v1_fixture_refuses_a_writer_naming_migrate(tmp_path):
    store = _copy(tmp_path, V1)
    before = _files(str(store))
    with pytest.raises(FormatVersionError, match=rf"format version 1.*memcore migrate {store}"):
        LongTermMemory(store, HashingEmbedder(dim=DIM))
    assert _files(str(store)) == before


@pytest.mark.parametrize("read_only", [True, False])
def test_migrate_keeps_every_row_and_score(tmp_path, read_only, format2):
    # format 2 by design: format 1 -> a format-2 directory per namespace (the pack off; to
    # format 3: test_migrate_from_format_1_or_2_packs_small_namespaces)
    store = _copy(tmp_path, V1)
    assert LongTermMemory.migrate(store, progress=False) == len(_expected(V1)["rows"])
    assert storage.read_store_header(str(store))["version"] == storage.FORMAT_VERSION
    assert not (store / "ns.0").exists()
    for d in (store / "ns.1").iterdir():
        assert json.loads((d / "header.json").read_text())["version"] == storage.FORMAT_VERSION
    assert _snap(store, read_only=read_only) == _expected(V1)
    assert LongTermMemory.migrate(store, progress=False) == 0     # nothing left to do
    assert _snap(store, read_only=read_only) == _expected(V1)


def test_migrate_is_atomic(tmp_path, monkeypatch):
    store = _copy(tmp_path, V1)
    before = _files(str(store))

    def crash(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(storage.StoreRoot, "commit_epoch", crash)
    with pytest.raises(OSError, match="disk full"):
        LongTermMemory.migrate(store, progress=False)
    assert _files(str(store)) == before                    # the old store is the store
    monkeypatch.undo()
    os.makedirs(store / "ns.1" / "n-junk")                 # a half-written earlier attempt
    assert LongTermMemory.migrate(store, progress=False) == len(_expected(V1)["rows"])
    assert _snap(store) == _expected(V1)


def test_cli_migrate(tmp_path, capsys):
    from memcore.cli import main

    store = _copy(tmp_path, V1)
    assert main(["migrate", str(store), "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"migrated": 4, "store": str(store)}
    assert main(["migrate", str(store), "--quiet"]) == 0
    assert "already is of the current on-disk format" in capsys.readouterr().out
    assert _snap(store) == _expected(V1)
    assert main(["migrate", str(tmp_path / "none"), "--quiet"]) == 1
    assert "no memcore store" in capsys.readouterr().err


def test_cli_migrate_names_the_format_it_wrote(tmp_path, capsys, monkeypatch):
    from memcore.cli import main
    from memcore.stores import long_pack

    monkeypatch.setattr(long_pack, "ENABLED", True)
    store = _copy(tmp_path, V2)
    assert main(["migrate", str(store), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == f"migrated 4 memories of {store} to on-disk format 3"


@pytest.mark.parametrize("read_only", [True, False])
@pytest.mark.parametrize("fixture", ["v1", "v2"])
def test_migrate_from_format_1_or_2_packs_small_namespaces(tmp_path, monkeypatch, read_only,
                                                           fixture):
    """With the pack on (the default), migrate moves every namespace of at most PACK_MAX
    rows into the pack: a format-3 store with the same rows and scores in fewer files."""
    from memcore.stores import long_pack

    monkeypatch.setattr(long_pack, "ENABLED", True)       # whatever MEMCORE_PACK says
    store = _copy(tmp_path, V1 if fixture == "v1" else V2)
    before = _files(str(store))
    want = _expected(V2)
    assert LongTermMemory.migrate(store, progress=False) == len(want["rows"])
    assert storage.read_store_header(str(store))["version"] == storage.layout.PACK_VERSION
    assert not (store / "ns.0").exists()
    assert [d.name for d in (store / "ns.1").iterdir()] == [storage.layout.PACK_DIR]
    assert len(_files(str(store))) < len(before)
    assert _snap(store, read_only=read_only) == want
    assert LongTermMemory.migrate(store, progress=False) == 0     # nothing left to do
    assert _snap(store, read_only=read_only) == want


def test_migrate_to_format_3_is_atomic_and_keeps_large_namespaces_in_directories(
        tmp_path, monkeypatch):
    """A namespace past PACK_MAX keeps a directory of its own; TTLs and access statistics
    move with the rows; a failure before the commit leaves the format-2 store as it was;
    with the pack off migrate leaves a format-2 store alone."""
    from memcore import MemoryItem
    from memcore.stores import long_pack

    store = tmp_path / "store"
    clock = [NOW]
    monkeypatch.setattr(long_pack, "ENABLED", False)
    with LongTermMemory(store, HashingEmbedder(dim=DIM), clock=lambda: clock[0]) as s:
        s.put_many("big", [MemoryItem(f"b{i}", f"big memory {i}") for i in range(300)])
        for n in range(3):
            s.put_many(("u", str(n)), [MemoryItem(f"k{i}", f"user {n} memory {i}", 0.1 * i)
                                       for i in range(5)], ttl=3600.0 if n == 1 else None)
        clock[0] += 10
        assert s.touch(("u", "2"), ["k3"]) == 1                # access statistics
        s.delete(("u", "0"), "k4")

    def state():
        with LongTermMemory.open(store, HashingEmbedder(dim=DIM), clock=lambda: clock[0]) as s:
            return {ns: ({k: s.get(ns, k) for k in s.keys(ns)},
                         [(h.key, h.score) for h in s.search(ns, "memory 3", top_k=4,
                                                             touch=False)])
                    for ns in s.namespaces()}

    want, before = state(), _files(str(store))
    assert LongTermMemory.migrate(store, progress=False) == 0     # the pack off: nothing
    monkeypatch.setattr(long_pack, "ENABLED", True)

    def crash(*a, **k):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(storage.StoreRoot, "commit_epoch", crash)
        with pytest.raises(OSError, match="disk full"):
            LongTermMemory.migrate(store, progress=False)
    assert _files(str(store)) == before                    # the old store is the store
    assert LongTermMemory.migrate(store, progress=False) == 300 + 14
    dirs = sorted(d.name for d in (store / "ns.1").iterdir())
    assert len(dirs) == 2 and storage.layout.PACK_DIR in dirs     # big's, and the pack
    assert len(_files(str(store))) < len(before)
    got = state()
    assert got == want and got[("u", "1")][0]["k0"].expires_at is not None
    assert got[("u", "2")][0]["k3"].access_count == want[("u", "2")][0]["k3"].access_count > 0


@pytest.mark.parametrize("read_only", [True, False])
def test_v2_fixture_opens_with_every_row_and_score(tmp_path, read_only):
    assert _snap(_copy(tmp_path, V2), read_only=read_only) == _expected(V2) == _expected(V1)


def test_same_operations_write_the_same_bytes(tmp_path, format2):
    """The same operations write the fixture's bytes, except that namespace headers now also
    carry the checkpoint files' CRC-32s, and two redundant files were added (issue 15: a
    copy of the store header, each namespace's identity; issue 24: the derived namespace
    catalog ``catalog.<e>.log``), and a batch's first record holds the batch's record count in
    its pad bytes (issue 27; its CRC follows), and each generation's check file
    ``rowcheck.<g>.u8`` covers the fields that change in place (issue 27; headers say
    ``"rowcheck": 1``) -- the fixture predates them and still opens, above."""
    build(str(tmp_path / "store"))
    got, want = _files(str(tmp_path / "store")), _files(V2)
    catalog = got.pop("catalog.0.log").decode()
    assert all(ns in catalog for ns in {n.split("/")[1] for n in want if n.count("/") == 2})
    assert json.loads(got.pop("memcore.copy.json")) == json.loads(want["memcore.json"])
    for name in [n for n in got if n.endswith("/namespace.json")]:
        header = json.loads(got[name.replace("namespace.json", "header.json")])
        assert json.loads(got.pop(name)) == {"namespace": header["namespace"]}
    for name in [n for n in got if "/rowcheck." in n]:
        assert len(got.pop(name)) % 32 == 0 and name.replace("rowcheck", "vectors").replace(
            ".u8", ".f32") in want
    assert got.keys() == want.keys()
    for name in got:
        if name.endswith("/header.json"):
            header = json.loads(got[name])
            assert set(header.pop("crc")) >= {"alive", "keyhash", "keyrow"}
            assert header.pop("rowcheck") == 1
            assert header == json.loads(want[name])
        elif "/log." in name:
            assert _without_batch_counts(got[name]) == want[name], name
        else:
            assert got[name] == want[name], name


def _without_batch_counts(log: bytes) -> bytes:
    """``log`` with every record's pad bytes zeroed (as memcore wrote them before batch
    counts) and its CRC recomputed."""
    import struct
    import zlib

    from memcore.storage.records import BATCH_COUNT_AT, FRAME

    out, off = bytearray(log), 0
    while off < len(out):
        length = FRAME.unpack_from(out, off)[1]
        if any(out[off + BATCH_COUNT_AT:off + BATCH_COUNT_AT + 3]):
            out[off + BATCH_COUNT_AT:off + BATCH_COUNT_AT + 3] = bytes(3)
            struct.pack_into("<I", out, off + 8,
                             zlib.crc32(out[off + FRAME.size:off + FRAME.size + length]))
        off += FRAME.size + length
    return bytes(out)


def test_migrate_keeps_hybrid_rankings(tmp_path):
    from memcore import HybridWeights

    from tests.ltm_format_v1 import QUERIES

    store = _copy(tmp_path, V1)

    def ranked(**kw):
        with LongTermMemory.open(store, HashingEmbedder(dim=DIM), clock=lambda: NOW,
                                 hybrid=HybridWeights.no_model(), **kw) as ltm:
            return [[(h.key, round(h.score, 5)) for h in ltm.search(ns, text, top_k=5,
                                                                    touch=False)]
                    for ns, text in QUERIES]

    before = ranked(read_only=True)                   # format 1: the index built in RAM
    LongTermMemory.migrate(store, progress=False)
    assert ranked(read_only=False) == before          # built from the log, then saved
    assert ranked(read_only=True) == before           # restored from the checkpoint


# ---------------------------------------------------------------------------- format 3 (pack)

@pytest.fixture
def pack(monkeypatch):
    from memcore.stores import long_pack

    monkeypatch.setattr(long_pack, "ENABLED", True)


@pytest.mark.parametrize("read_only", [True, False])
def test_v3_fixture_opens_with_every_row_and_score(tmp_path, read_only):
    """The format-3 fixture (the same operations, every namespace in the pack) serves the
    rows and scores of formats 1 and 2."""
    assert storage.read_store_header(V3)["version"] == 3
    assert _snap(_copy(tmp_path, V3), read_only=read_only) == _expected(V3) == _expected(V1)


def test_v3_same_operations_write_the_same_bytes(tmp_path, pack):
    build(str(tmp_path / "store"))
    got, want = _files(str(tmp_path / "store")), _files(V3)
    assert got.keys() == want.keys()
    for name in got:
        assert got[name] == want[name], name


def test_v3_fixture_refused_by_a_format_2_reader(tmp_path, monkeypatch):
    """A memcore that reads store headers up to version 2 refuses a store with a pack (it
    would take the pack for a namespace)."""
    from memcore.storage import layout

    store = _copy(tmp_path, V3)
    monkeypatch.setattr(layout, "PACK_VERSION", 2)
    with pytest.raises(FormatVersionError, match="version 3"):
        LongTermMemory.open(store, HashingEmbedder(dim=DIM))


def test_v2_fixture_gets_a_pack_for_new_namespaces(tmp_path, pack):
    """A format-2 store opens for writing as it is; with the pack on, a new namespace goes
    to the pack (the header becomes version 3) and the old ones keep their directories."""
    store = _copy(tmp_path, V2)
    assert _snap(store, read_only=False) == _expected(V2)
    with LongTermMemory(store, HashingEmbedder(dim=DIM), clock=lambda: NOW) as ltm:
        ltm.put(("new",), "k", "a new namespace")
    assert storage.read_store_header(str(store))["version"] == 3
    names = sorted(os.listdir(store / "ns.0"))
    assert names == sorted(os.listdir(V2 + "/ns.0") + [storage.layout.PACK_DIR])
    snap = _snap(store)
    assert [r for r in snap["rows"] if r["namespace"] != ["new"]] == _expected(V2)["rows"]
    assert snap["hits"] == _expected(V2)["hits"]
