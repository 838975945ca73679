"""The vectorised paths of LongTermMemory against the record-by-record ones they replace.

- the log-scan kernels (memcore.kernels.logscan) against their oracles;
- ``scan_log``'s fast path against the exact Python scan, on clean, torn and corrupted logs;
- ``encode_puts``/``copy_puts`` against ``encode_put``, and compaction's copied log against a
  re-encoded one, byte for byte;
- ``put_many``'s bulk validation against the item-by-item path (results and errors).
"""

from __future__ import annotations

import json

import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore import HashingEmbedder, LongTermMemory, MemoryItem, StoreCorruptedError, storage
from memcore.kernels import logscan
from memcore.kernels import reference as ref

DIM = 16
T0 = 1_700_000_000.0


def _log(rng: np.random.Generator, n: int, del_rate: float = 0.2) -> tuple[bytes, int]:
    """A valid log of ``n`` operations (puts, replacements, deletes); returns (bytes, rows)."""
    parts, live, row = [], {}, 0
    for i in range(n):
        key = f"k{rng.integers(0, max(n // 2, 1))}"
        if key in live and rng.random() < del_rate:
            parts.append(storage.encode_delete(live.pop(key), key.encode()))
            continue
        text = "é" * int(rng.integers(0, 4)) + f"text {i}" + "\0" * int(rng.random() < 0.1)
        meta = b"{}" if rng.random() < 0.5 else f'{{"i": {i}}}'.encode()
        parts.append(storage.encode_put(row, key.encode(), text.encode(), meta, T0 + i, T0 + i,
                                        T0 + 2 * i, int(rng.integers(0, 9)),
                                        float(rng.random()), int(rng.integers(0, 2**32))))
        live[key] = row
        row += 1
    return b"".join(parts), row


def _same_replay(a: storage.Replay, b: storage.Replay) -> None:
    assert a.keys == b.keys
    assert list(a.key_of) == list(b.key_of)
    assert list(a.texts) == list(b.texts) and list(a.metadata) == list(b.metadata)
    assert sorted(a.dead) == sorted(b.dead)
    for name in ("created_at", "updated_at", "last_accessed_at", "access_count", "importance",
                 "vector_crc", "record_offset"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
    assert (a.records, a.end, a.rows) == (b.records, b.end, b.rows)


# ------------------------------------------------------------------------ kernels vs oracles

@given(st.binary(max_size=300), st.integers(0, 300), st.integers(0, 300))
def test_crc32_equals_zlib(blob, a, b):
    data = np.frombuffer(blob, np.uint8)
    a, b = sorted((min(a, len(blob)), min(b, len(blob))))
    got = logscan.crc32(data, a, b, logscan.CRC_TABLE)
    assert got == ref.crc32(data, a, b, logscan.CRC_TABLE) == zlib.crc32(blob[a:b])


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), cut=st.floats(0, 1),
       flip=st.none() | st.floats(0, 1))
def test_scan_records_equals_oracle(seed, n, cut, flip):
    rng = np.random.default_rng(seed)
    blob, _ = _log(rng, n)
    blob = blob[: int(len(blob) * cut) if cut < 0.5 else len(blob)]   # torn half the time
    if flip is not None and blob:
        raw = bytearray(blob)
        raw[int(flip * (len(raw) - 1))] ^= 0x5A
        blob = bytes(raw)
    data = np.frombuffer(blob, np.uint8)
    data.setflags(write=False)                                        # read-only accepted
    got_off = np.full(logscan.max_records(len(blob)), -7, np.int64)
    want_off = got_off.copy()
    got = logscan.scan_records(data, 0, logscan.CRC_TABLE, got_off)
    want = ref.scan_records(data, 0, logscan.CRC_TABLE, want_off)
    assert tuple(map(int, got)) == want
    assert np.array_equal(got_off, want_off)


@given(st.binary(max_size=200), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 20)),
                                         max_size=12), st.sampled_from([0, 7, -1]))
def test_gather_segments_equals_oracle(blob, spans, sep):
    data = np.frombuffer(blob, np.uint8)
    spans = [(min(s, len(blob)), min(n, len(blob) - min(s, len(blob)))) for s, n in spans]
    starts = np.array([s for s, _ in spans], np.int64)
    lengths = np.array([n for _, n in spans], np.int64)
    size = int(lengths.sum()) + (max(len(spans) - 1, 0) if sep >= 0 else 0)
    got, want = np.empty(size, np.uint8), np.empty(size, np.uint8)
    assert logscan.gather_segments(data, starts, lengths, sep, got) == \
        ref.gather_segments(data, starts, lengths, sep, want) == size
    assert np.array_equal(got, want)


# ------------------------------------------------------------------------ scan_log fast vs exact

@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), cut=st.floats(0, 1),
       committed=st.floats(0, 1))
def test_fast_scan_equals_exact_scan(seed, n, cut, committed):
    rng = np.random.default_rng(seed)
    blob, _ = _log(rng, n)
    if cut < 0.3:
        blob = blob[: int(len(blob) * (1 - cut))]                      # a torn tail
    commit = int(len(blob) * committed * 0.5)

    def run(fn):
        try:
            return fn(blob, "log.0", commit, False), None
        except StoreCorruptedError as err:
            return None, str(err)

    fast, fast_err = run(lambda d, p, c, s: storage.scan_log(d, p, c))
    exact, exact_err = run(storage.scan_log_exact)
    assert fast_err == exact_err
    if exact is not None:
        _same_replay(fast, exact)


@pytest.mark.parametrize("damage", ["flip_middle", "flip_last", "truncate_inside_checkpoint",
                                    "bad_row", "bad_delete", "bad_utf8"])
def test_fast_scan_reports_damage_like_exact_scan(damage):
    rng = np.random.default_rng(3)
    blob, rows = _log(rng, 30, del_rate=0.0)
    raw = bytearray(blob)
    commit = 0
    if damage == "flip_middle":
        raw[len(raw) // 2] ^= 0xFF
    elif damage == "flip_last":
        raw[-1] ^= 0xFF
    elif damage == "truncate_inside_checkpoint":
        commit = len(raw)
        raw = raw[:-5]
    elif damage == "bad_row":
        raw += storage.encode_put(rows + 3, b"x", b"t", b"{}", T0, T0, T0, 0, 0.5, 0)
        raw += storage.encode_put(rows + 4, b"y", b"t", b"{}", T0, T0, T0, 0, 0.5, 0)
    elif damage == "bad_delete":
        raw += storage.encode_delete(0, b"no-such-key")
    elif damage == "bad_utf8":
        raw += storage.encode_put(rows, b"\xff\xfe", b"t", b"{}", T0, T0, T0, 0, 0.5, 0)
    blob = bytes(raw)
    outcomes = []
    for fn in (lambda: storage.scan_log(blob, "log.0", commit),
               lambda: storage.scan_log_exact(blob, "log.0", commit, False)):
        try:
            outcomes.append(("ok", fn()))
        except StoreCorruptedError as err:
            outcomes.append(("err", str(err)))
    (kind_a, a), (kind_b, b) = outcomes
    assert kind_a == kind_b
    if kind_a == "ok":
        _same_replay(a, b)
    else:
        assert a == b


# ------------------------------------------------------------------------ encoders

@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30), first=st.integers(0, 1000))
def test_encode_puts_equals_encode_put(seed, n, first):
    rng = np.random.default_rng(seed)
    keys = [f"k{i}é".encode() for i in range(n)]
    texts = [("t" * int(rng.integers(0, 50))).encode() for _ in range(n)]
    metas = [b"{}" if rng.random() < 0.5 else b'{"a": [1, 2]}' for _ in range(n)]
    ca, ua, la = (T0 + rng.random(n) * 1e6 for _ in range(3))
    ac = rng.integers(0, 1 << 40, n)
    imp = rng.random(n).tolist()
    crcs = rng.integers(0, 2**32, n).astype(np.uint32)
    blob, offsets = storage.encode_puts(first, keys, texts, metas, ca, ua, la, ac, imp, crcs)
    want = [storage.encode_put(first + i, keys[i], texts[i], metas[i], ca[i], ua[i], la[i],
                               int(ac[i]), imp[i], int(crcs[i])) for i in range(n)]
    assert bytes(blob) == b"".join(want)
    assert offsets.tolist() == np.cumsum([0] + [len(w) for w in want])[:n].tolist()
    pick = np.array(sorted(rng.choice(n, size=n // 2, replace=False)) if n else [], np.int64)
    copied, _ = storage.copy_puts(bytes(blob), offsets[pick], la[pick] + 1, ac[pick] + 2)
    assert bytes(copied) == b"".join(
        storage.encode_put(j, keys[i], texts[i], metas[i], ca[i], ua[i], la[i] + 1,
                           int(ac[i]) + 2, imp[i], int(crcs[i])) for j, i in enumerate(pick))


# ------------------------------------------------------------------------ store level

def _store(path, **kw):
    return LongTermMemory(path, HashingEmbedder(dim=DIM), clock=lambda: T0, **kw)


def test_open_fast_and_exact_agree_on_a_real_store(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    with _store(tmp_path / "m", durability="none") as s:
        s.put_many("ns", [MemoryItem(f"k{i}", f"text {i}", 0.3, {"i": i}) for i in range(300)],
                   vectors=rng.standard_normal((300, DIM)))
        for i in range(0, 300, 7):
            s.delete("ns", f"k{i}")
        s.put("ns", "k3", "replaced", metadata={"nested": {"a": [1]}})
    with LongTermMemory.open(tmp_path / "m") as fast:
        want = {k: (fast.get("ns", k), fast.vector("ns", k).tobytes()) for k in fast.keys("ns")}
    monkeypatch.setattr(storage.log, "_scan_log_fast", lambda *a: None)
    with LongTermMemory.open(tmp_path / "m") as exact:
        got = {k: (exact.get("ns", k), exact.vector("ns", k).tobytes()) for k in exact.keys("ns")}
    assert got == want and len(want) == 300 - len(range(0, 300, 7)) and \
        want["k3"][0].text == "replaced"


def test_compact_copies_records_byte_for_byte(tmp_path, format2):
    # format 2 by design: the records of the namespace directory's log, byte for byte (the pack's
    # own: tests/test_pack.py)
    rng = np.random.default_rng(1)
    with _store(tmp_path / "m") as s:
        s.put_many("ns", [MemoryItem(f"k{i}", f"text {i} ü", 0.25, {"i": i, "s": "x"})
                          for i in range(200)], vectors=rng.standard_normal((200, DIM)))
        for i in range(0, 200, 3):
            s.delete("ns", f"k{i}")
        s.search("ns", "text 5", top_k=4)                      # access statistics change
        sp = s._tables[("ns",)]
        rows = sorted(sp.keys.values())
        c = sp.columns
        metas = [json.dumps(sp.meta(r), ensure_ascii=False).encode() for r in rows]
        recs = [(sp.record(r).key, sp.record(r).text, m, float(c.created_at[r]),
                 float(c.updated_at[r]), float(c.last_accessed_at[r]), int(c.access_count[r]),
                 sp.record(r).importance) for r, m in zip(rows, metas)]
        crcs = storage.vector_crcs(c.vectors[rows])
        want = b"".join(storage.encode_put(i, k.encode(), t.encode(), m, *rest, crcs[i])
                        for i, (k, t, m, *rest) in enumerate(recs))
        before = {k: s.get("ns", k) for k in s.keys("ns")}
        assert s.compact() == 200 - len(rows)
        got = (storage.namespace_dirname(("ns",)), s._tables[("ns",)].files.log_path)
        with open(got[1], "rb") as f:
            assert f.read() == want
        assert {k: s.get("ns", k) for k in s.keys("ns")} == before
        s.put("ns", "after", "still writable")
        assert s.compact() == 0
    with LongTermMemory.open(tmp_path / "m") as r:
        assert {k: r.get("ns", k) for k in before} == before and r.count("ns") == len(rows) + 1


def test_put_many_fast_path_matches_item_by_item(tmp_path):
    class Item(MemoryItem):                                    # a subclass takes the slow path
        pass

    rng = np.random.default_rng(2)
    v = rng.standard_normal((6, DIM))
    metas = [{}, {"a": 1, "b": "x", "c": None, "d": 1.5, "e": True}, {"n": {"deep": [1]}},
             {"t": (1, 2)}, None, {"k": -0.0}]
    items = [MemoryItem(f"k{i}", f"text {i}", [0.0, 1.0, 0.5, 0.25, 0.75, 0.1][i], metas[i])
             for i in range(6)] + [MemoryItem("k0", "again", 0.5)]
    v = np.vstack([v, v[:1]])
    a, b = _store(tmp_path / "a"), _store(tmp_path / "b")
    fast = a.put_many("ns", items, vectors=v)
    slow = b.put_many("ns", [Item(i.key, i.text, i.importance, i.metadata) for i in items],
                      vectors=v)
    assert fast == slow and [m.metadata for m in fast][2:4] == [{"n": {"deep": [1]}},
                                                                 {"t": [1, 2]}]
    assert fast[1].metadata is not metas[1]
    assert all(type(m.importance) is float and type(m.created_at) is float for m in fast)
    for s in (a, b):
        s.close()
    for name in ("a", "b"):
        with open(sorted((tmp_path / name / "ns.0").iterdir())[0] / "log.0", "rb") as f:
            if name == "a":
                log_a = f.read()
            else:
                assert f.read() == log_a
    again = _store(tmp_path / "a")
    assert again.put_many("ns", [MemoryItem("k1", "re", 0.5)], vectors=v[:1])[0].created_at == T0
    again.close()


@pytest.mark.parametrize("bad, error", [
    (MemoryItem("", "t"), "key"), (MemoryItem("a\0b", "t"), "key"),
    (MemoryItem("k", "\ud800"), "text"), (MemoryItem("k", "t", 1.5), "importance"),
    (MemoryItem("k", "t", True), "importance"), (MemoryItem("k", "t", 0.5, {"x": float("nan")}),
                                                 "metadata"),
    (MemoryItem("k", "t", 0.5, {"x": object()}), "metadata"), ("not an item", "MemoryItem")])
def test_put_many_fast_path_raises_like_item_by_item(tmp_path, bad, error):
    s = _store(tmp_path / "m")
    good = [MemoryItem(f"g{i}", "fine", 0.5, {"i": i}) for i in range(3)]
    with pytest.raises((TypeError, ValueError)) as exc:
        s.put_many("ns", good + [bad], vectors=np.ones((4, DIM)))
    assert error in str(exc.value)
    assert s.count("ns") == 0
    s.close()
