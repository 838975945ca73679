"""The on-disk format stays readable: a store written by the format-v1 code (the fixture) opens
with today's code with every row and score unchanged, and the same operations today write the
same bytes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from memcore import HashingEmbedder, LongTermMemory
from tests.ltm_format_v1 import DIM, FIXTURE, build, snapshot

STORE = os.path.join(FIXTURE, "store")


def _expected() -> dict:
    with open(os.path.join(FIXTURE, "expected.json"), encoding="utf-8") as f:
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


@pytest.mark.parametrize("read_only", [True, False])
def test_fixture_opens_with_every_row_and_score(tmp_path, read_only):
    store = tmp_path / "store"
    shutil.copytree(STORE, store)
    with LongTermMemory.open(store, HashingEmbedder(dim=DIM), read_only=read_only,
                             clock=lambda: 1_700_000_100.0) as ltm:
        got = json.loads(json.dumps(snapshot(ltm)))
    assert got == _expected()


def test_same_operations_write_the_same_bytes(tmp_path):
    build(str(tmp_path / "store"))
    assert _files(str(tmp_path / "store")) == _files(STORE)
