"""Repair lists by key every memory it cannot vouch for, also one whose record was lost.

A damaged record of a row the checkpoint holds live used to vanish silently from
``memcore repair`` ("dropped 0"; only ``--json`` said ``lost_rows: 1``, without the key, and
no quarantine file was written). Now its key is confirmed by the checkpoint's key hash, it is
counted and listed (the CLI prints it), and its last version is set aside in
``quarantine.<n>.jsonl`` when its vector still matches.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from memcore import HashingEmbedder, LongTermMemory
from store_helpers import run_cli

EMB = HashingEmbedder(dim=16)


def make(root, puts):
    """Write ``puts`` ((key, text) pairs) and close (a checkpoint covers them)."""
    with LongTermMemory(root, EMB) as ltm:
        for key, text in puts:
            ltm.put("ns", key, text)
        return {k: ltm.vector("ns", k) for k, _ in puts}


def flip(root, needle: bytes, at: int, bit: int = 0xFF) -> None:
    """XOR a byte ``at`` bytes into the last occurrence of ``needle`` in the log."""
    (log,) = root.glob("ns.0/*/log.0")
    raw = bytearray(log.read_bytes())
    i = raw.rfind(needle)
    assert i >= 0
    raw[i + at] ^= bit
    log.write_bytes(bytes(raw))


def quarantined(root) -> list[dict]:
    out = []
    for q in sorted(root.glob("quarantine.*.jsonl")):
        out += [json.loads(line) for line in q.read_text().splitlines()[1:]]
    return out


def cli(*argv) -> tuple[int, str]:
    code, out, _ = run_cli(*argv)
    return code, out


PUTS = [("key0", "the dock is in the hallway"), ("key1", "the charger is under the desk"),
        ("key2", "the red mug belongs to Ana")]


def test_a_lost_record_is_listed_by_key_and_set_aside(tmp_path):
    root = tmp_path / "m"
    vecs = make(root, PUTS)
    flip(root, b"the charger", 6)                 # one byte of key1's text
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
        assert ltm.keys("ns") == ["key0", "key2"]   # never served from a damaged record
    assert (r["kept"], r["dropped"], r["lost_rows"]) == (2, 1, 1)
    assert r["uncertain"] == ["key1"] and r["lost_keys"] == ["key1"]
    (q,) = quarantined(root)
    assert r["quarantine"] == str(root / "quarantine.0.jsonl")
    assert q["namespace"] == ["ns"] and q["key"] == "key1"
    assert q["text"] == "the ch\ufffdrger is under the desk"     # the damage stays visible
    got = np.frombuffer(base64.b64decode(q["vector"]), "<f4")
    assert np.array_equal(got, vecs["key1"])


def test_the_cli_prints_what_it_could_not_vouch_for(tmp_path):
    root = tmp_path / "m"
    make(root, PUTS)
    flip(root, b"the charger", 6)
    code, out = cli("repair", str(root))
    assert code == 0
    assert "dropped 1" in out and "'key1'" in out, out
    assert str(root / "quarantine.0.jsonl") in out, out


def test_a_damaged_key_is_reported_as_an_unknown_key_never_guessed(tmp_path):
    root = tmp_path / "m"
    make(root, PUTS)
    flip(root, b"key1the charger", 2, 0x01)       # key1 -> kez1: no longer its hash
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
    assert r["lost_keys"] == [None] and r["dropped"] == 1 and r["uncertain"] == []
    assert r["quarantine"] is None and not quarantined(root)
    code, out = cli("repair", str(root))              # already repaired: nothing to do
    assert code == 0


def test_a_damaged_key_length_still_names_the_key(tmp_path):
    root = tmp_path / "m"
    make(root, PUTS)
    # the PUT's key_len field: the 4 bytes 12 before the key (key_len, text_len, meta_len)
    flip(root, b"key1the charger", -12, 0x04)
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
    assert r["lost_keys"] == ["key1"] and r["uncertain"] == ["key1"]
    assert not quarantined(root)                  # its fields do not add up: only listed


def test_a_lost_old_version_with_a_later_intact_one_is_not_lost(tmp_path):
    root = tmp_path / "m"
    make(root, PUTS)
    with LongTermMemory(root, EMB) as ltm:
        ltm.put("ns", "key1", "the charger moved to the shelf")
    flip(root, b"the charger is", 6)              # the old, replaced version
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
        assert ltm.get("ns", "key1").text == "the charger moved to the shelf"
    assert r["lost_rows"] == 0 and r["uncertain"] == [] and r["kept"] == 3


def test_the_lost_current_version_is_set_aside_and_the_old_never_served(tmp_path):
    root = tmp_path / "m"
    make(root, PUTS + [("key1", "the charger moved to the shelf")])
    flip(root, b"the charger moved", 6)           # the current version (its old row is dead)
    with LongTermMemory(root, EMB) as ltm:
        (r,) = ltm.repair()
        assert ltm.get("ns", "key1") is None      # the replaced version never comes back
    assert r["uncertain"] == ["key1"] and r["lost_keys"] == ["key1"] and r["dropped"] == 1
    assert [q["text"] for q in quarantined(root)] == ["the ch\ufffdrger moved to the shelf"]
