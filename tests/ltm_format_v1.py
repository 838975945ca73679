"""The operations that wrote the format fixtures: ``tests/fixtures/ltm-format-v1/`` (by
LongTermMemory at 04b2bb7), ``ltm-format-v2/`` (the same operations, format 2) and
``ltm-format-v3/`` (the same operations with the pack of small namespaces, format 3).

Run ``python -m tests.ltm_format_v1`` from the repository root to write the fixture of the
current format version, ``python -m tests.ltm_format_v1 3`` for format 3 (only when the
on-disk format changes on purpose, with a new format version); never rewrite an older
version's fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
FIXTURE = os.path.join(FIXTURES, "ltm-format-v1")
DIM = 16
QUERIES = [(("robot", "map"), "where is the charging dock"), (("chat",), "Ann adopted a dog"),
           (("robot", "map"), "red door")]


class Clock:
    """1.7e9, then +1.5 s per call: every timestamp is reproducible."""

    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        self.t += 1.5
        return self.t


def build(path: str) -> None:
    """Write the fixture's store at ``path`` (a missing directory)."""
    from memcore import HashingEmbedder, LongTermMemory, MemoryItem

    clock = Clock()
    with LongTermMemory(path, HashingEmbedder(dim=DIM), clock=clock) as ltm:
        ltm.put(("robot", "map"), "dock", "the charging dock is in the hallway",
                importance=0.9, metadata={"room": "hallway"})
        ltm.put(("robot", "map"), "door", "the red door is locked", importance=0.25)
        ltm.put_many(("chat",), [
            MemoryItem("m1", "Ann adopted a dog named Rex", 0.7, {"speaker": "Ann", "episode": 1}),
            MemoryItem("m2", "Bob moved to Lisbon", 0.4, {"speaker": "Bob", "episode": 1}),
            MemoryItem("m3", "Ann's dog likes the beach ✓", 0.6,
                       {"speaker": "Ann", "episode": 2, "tags": ["dog", "beach"]}),
        ])
        ltm.put(("robot", "map"), "door", "the red door is open now", importance=0.3)
        ltm.delete(("chat",), "m2")
        ltm.put(("robot", "map"), "lamp", "a lamp stands by the window")
        ltm.delete(("robot", "map"), "lamp")
        ltm.search(("robot", "map"), "charging dock", top_k=1)   # refreshes access statistics


def snapshot(ltm) -> dict:
    """Every live row and the QUERIES' results, JSON-ready (vectors as lists of floats)."""
    rows = []
    for ns in ltm.namespaces():
        for key in ltm.keys(ns):
            m = ltm.get(ns, key)
            rows.append({"namespace": list(ns), "key": key, "text": m.text,
                         "importance": m.importance, "metadata": m.metadata,
                         "created_at": m.created_at, "updated_at": m.updated_at,
                         "last_accessed_at": m.last_accessed_at,
                         "access_count": m.access_count,
                         "vector": ltm.vector(ns, key).tolist()})
    hits = []
    for ns, text in QUERIES:
        hits.append([[h.key, h.score, h.similarity, h.recency]
                     for h in ltm.search(ns, text, top_k=5, touch=False)])
    return {"rows": rows, "hits": hits}


def main() -> None:
    from memcore import HashingEmbedder, LongTermMemory
    from memcore.storage import FORMAT_VERSION
    from memcore.stores import long_pack

    version = int(sys.argv[1]) if len(sys.argv) > 1 else FORMAT_VERSION
    long_pack.ENABLED = version >= 3
    fixture = os.path.join(FIXTURES, f"ltm-format-v{version}")
    store = os.path.join(fixture, "store")
    shutil.rmtree(fixture, ignore_errors=True)
    os.makedirs(fixture)
    build(store)
    os.unlink(os.path.join(store, "LOCK"))
    with LongTermMemory.open(store, HashingEmbedder(dim=DIM),
                             clock=lambda: 1_700_000_100.0) as ltm:
        snap = snapshot(ltm)
    with open(os.path.join(fixture, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(snap, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {fixture}", file=sys.stderr)


if __name__ == "__main__":
    main()
