"""The owned-file rule: memcore creates, modifies and deletes only names it owns.

A store path is accepted when it is missing, an empty directory, or a memcore store (its
header, or only names memcore gives); any other directory is refused with
:class:`ForeignDirectoryError` before a single file is created. Inside a store, cleanup
(open, reindex, compact, clear, repair) removes only the names memcore writes: a user's file
among them survives byte for byte.
"""

from __future__ import annotations

import os

import pytest

from memcore import (
    ForeignDirectoryError,
    HashingEmbedder,
    LongTermMemory,
    MemcoreError,
    SemanticMemory,
)
from memcore.storage.layout import owned_name, store_dir_kind

EMB = HashingEmbedder(dim=16)


def snapshot(root) -> dict:
    """Every path under ``root`` (relative) -> its bytes (None for a directory)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(d, name), root)] = None
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                out[os.path.relpath(os.path.join(d, name), root)] = f.read()
    return out


def user_files(root, files: dict) -> dict:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


def assert_survive(root, files: dict) -> None:
    for rel, data in files.items():
        with open(os.path.join(root, rel), "rb") as f:
            assert f.read() == data, rel


FOREIGN = {
    "notes only": {"notes.txt": b"my notes\n"},
    "a memcore.json.tmp of the user's": {"memcore.json.tmp": b"draft\n", "a.txt": b"a"},
    "an unrelated ns.0/": {"ns.0/f": b"mine"},
    "an unrelated memcore.json": {"memcore.json": b'{"name": "my config"}'},
    "a subdirectory": {"photos/cat.jpg": b"\xff\xd8\xff"},
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
@pytest.mark.parametrize("opener", ["long", "semantic", "long read-only"])
def test_a_foreign_directory_is_refused_before_anything_is_created(tmp_path, case, opener):
    root = tmp_path / "d"
    user_files(root, FOREIGN[case])
    before = snapshot(root)
    with pytest.raises(MemcoreError) as err:
        if opener == "long":
            LongTermMemory(root, EMB)
        elif opener == "semantic":
            SemanticMemory(root, EMB)
        else:
            LongTermMemory.open(root)
    if opener != "long read-only":
        assert isinstance(err.value, ForeignDirectoryError)
        assert isinstance(err.value, FileExistsError)
        assert str(root) in str(err.value) and "not a memcore store" in str(err.value)
    assert snapshot(root) == before
    assert store_dir_kind(str(root)) == "foreign"


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_missing_or_empty_directory_becomes_a_store(tmp_path, make):
    root = tmp_path / "d"
    if make == "empty":
        root.mkdir()
    assert store_dir_kind(str(root)) == make
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("ns", "k", "some text")
    assert store_dir_kind(str(root)) == "store"
    with LongTermMemory(root, EMB) as ltm:
        assert ltm.get("ns", "k").text == "some text"


def test_a_half_created_store_opens(tmp_path):
    """A creation killed after the lock file (or an empty epoch directory) holds only names
    memcore gives: it is memcore's, and the next open finishes it."""
    root = tmp_path / "d"
    (root / "ns.0").mkdir(parents=True)
    (root / "LOCK").write_bytes(b"")
    (root / "memcore.json.tmp").write_bytes(b'{"form')
    assert store_dir_kind(str(root)) == "memcore"
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("ns", "k", "text")
    assert store_dir_kind(str(root)) == "store"


USER = {
    "notes.txt": b"the store's own notes\n",
    "ns.1/important.txt": b"do not delete\n",
    "ns.backup/old.bin": b"\x00\x01",
    "ns.0/readme.txt": b"what this store is\n",
}


def test_open_reindex_compact_clear_keep_a_users_files_in_a_store(tmp_path):
    root = tmp_path / "d"
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("a", "k1", "first text")
        ltm.put("b", "k2", "second text")
    user_files(root, USER)
    with LongTermMemory(root, EMB) as ltm:             # open removes other epochs: not these
        assert_survive(root, USER)
        ltm.put("a", "k1", "first text, replaced")
        ltm.compact()
        assert_survive(root, USER)
        new = HashingEmbedder(dim=32)
        ltm.reindex(new, progress=False)
        assert_survive(root, USER)
        assert ltm.get("a", "k1").text == "first text, replaced"
        ltm.clear("b")
        assert_survive(root, USER)
    with LongTermMemory(root, new) as ltm:
        assert ltm.get("a", "k1").text == "first text, replaced"
        assert ltm.get("b", "k2") is None
        ltm.reindex(EMB, progress=False)
        assert ltm.get("a", "k1").text == "first text, replaced"
    assert_survive(root, USER)


def test_a_users_file_inside_a_namespace_directory_survives_compact_and_repair(tmp_path):
    root = tmp_path / "d"
    with LongTermMemory(root, EMB) as ltm:
        for i in range(5):
            ltm.put("a", f"k{i}", f"text {i}")
        ltm.put("a", "k0", "text 0 again")
    (ns_dir,) = (root / "ns.0").iterdir()
    mine = user_files(ns_dir, {"mine.txt": b"kept\n", "sub/x": b"y"})
    with LongTermMemory(root, EMB) as ltm:
        ltm.compact("a")
        assert_survive(ns_dir, mine)
        ltm.repair()
        assert_survive(ns_dir, mine)
        assert ltm.count("a") == 5


def test_every_file_memcore_writes_has_an_owned_name(tmp_path):
    """The grammar :func:`owned_name` knows covers every file a busy store writes (a name it
    missed would be left behind by cleanup, never deleted)."""
    root = tmp_path / "d"
    with LongTermMemory(root, EMB, durability="flush") as ltm:
        for i in range(40):
            ltm.put(("a", "b"), f"k{i}", f"text number {i} on 2024-05-0{i % 9 + 1}", ttl=3600)
        ltm.search(("a", "b"), "text number 3", top_k=3)
        ltm.flush()
        ltm.delete(("a", "b"), "k1")
        ltm.compact()
    seen = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        kind = {0: "root", 1: "epoch", 2: "namespace"}[0 if rel == "." else rel.count(os.sep) + 1]
        for name in dirs + files:
            assert owned_name(kind, name), (kind, name)
            seen.add((kind, name.split(".")[0]))
    assert {("root", "memcore"), ("root", "LOCK"), ("root", "ns"), ("namespace", "log"),
            ("namespace", "expiry"), ("namespace", "keyhash")} <= seen
    assert not owned_name("root", "ns.backup") and not owned_name("epoch", "notes.txt")
    assert not owned_name("namespace", "mine.txt") and not owned_name("root", "ns.1x")
