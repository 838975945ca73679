"""Faults on disk: byte damage in every file kind, exceptions at every step of a write,
SIGKILLs, a full disk and readers during compaction -- real files and real processes, no mock
of the store. Each reads back what was acknowledged, or is told what was lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memcore import (
    HashingEmbedder,
    LongTermMemory,
    MemoryItem,
    StoreCorruptedError,
    StoreIOError,
)
from memcore import _validate, storage
from store_helpers import never_committed, run_cli

DIM = 16
T0 = 1_700_000_000.0
REPO = Path(__file__).resolve().parents[1]


def clock():
    return T0


def store(path, **kw):
    return LongTermMemory(path, HashingEmbedder(dim=DIM), clock=clock, **kw)


def ns_dir(root, i=0) -> Path:
    return sorted((Path(root) / "ns.0").iterdir())[i]


def vec(seed):
    return _validate.vector(np.random.default_rng(seed).standard_normal(DIM), DIM)


def killed(s):
    """Drop a store's files and lock without a checkpoint: what a SIGKILL leaves."""
    s._release()
    s._closed = True


# ---------------------------------------------------------------------- verified reads

def _three(root):
    with store(root) as s:
        for i, (k, t) in enumerate((("dock", "the charging dock is in the hallway"),
                                    ("kettle", "the kettle is in the kitchen"),
                                    ("keys", "the keys are on the shelf"))):
            s.put("ns", k, t, vector=vec(i))


def test_a_damaged_checkpointed_vector_is_never_served(tmp_path, format2):
    # format 2 by design: damage at a row's offset in the namespace directory's vectors file (the
    # pack's own: tests/test_pack.py)
    root = tmp_path / "m"
    _three(root)
    vpath = ns_dir(root) / "vectors.0.f32"
    raw = bytearray(vpath.read_bytes())
    raw[0:DIM * 4] = raw[DIM * 4:2 * DIM * 4]          # row 1's vector over row 0
    vpath.write_bytes(bytes(raw))
    s = store(root, read_only=True)
    try:
        with pytest.raises(StoreCorruptedError, match=r"vectors\.0\.f32.*row 0"):
            s.search("ns", "where is the kettle", query_vector=vec(1), top_k=1)
        with pytest.raises(StoreCorruptedError, match="row 0"):
            s.get("ns", "dock")
        assert s.get("ns", "kettle").text == "the kettle is in the kitchen"
        report = s.verify()
        assert report[("ns",)]["bad_rows"] == [0]
    finally:
        s.close()


# ---------------------------------------------------------------------- repair never resurrects

def _damage_record_at(log: Path, offset: int) -> None:
    raw = bytearray(log.read_bytes())
    raw[offset + storage.FRAME.size + 1] ^= 0xFF       # a payload byte: the CRC fails
    log.write_bytes(bytes(raw))


def _offsets(log: Path) -> list[int]:
    rep = storage.scan_log(log.read_bytes(), str(log), 0)
    out, off = [], 0
    data = log.read_bytes()
    while off < len(data):
        out.append(off)
        off += storage.FRAME.size + storage.FRAME.unpack_from(data, off)[1]
    assert len(out) == rep.records
    return out


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed", "tail"])
@pytest.mark.parametrize("case", ["delete", "replace"])
def test_repair_never_resurrects_deleted_or_replaced_data(tmp_path, case, checkpointed):
    root = tmp_path / "m"
    s = store(root)
    s.put("ns", "a", "first neighbour")
    s.put("ns", "secret", "the old secret")
    if case == "delete":
        s.delete("ns", "secret")
    else:
        s.put("ns", "secret", "the new secret")
    s.put("ns", "z", "last neighbour")
    s.close() if checkpointed else killed(s)
    log = ns_dir(root) / "log.0"
    _damage_record_at(log, _offsets(log)[2])            # the DEL or the replacing PUT
    if not checkpointed:
        with store(root) as s, pytest.raises(StoreCorruptedError):
            s.count("ns")                               # isolated until repaired
        with store(root, repair=True) as s:
            report = s.repair_report
            got = s.get("ns", "secret")
            assert s.get("ns", "z").text == "last neighbour"
    else:
        with store(root) as s:
            report = s.repair()
            got = s.get("ns", "secret")
            assert s.get("ns", "z").text == "last neighbour"
            assert s.get("ns", "a").text == "first neighbour"     # the checkpoint vouches
    assert got is None                                  # never the old value as current
    (rep,) = report
    if checkpointed:        # the checkpoint's live flags say the old row was dead
        assert rep["uncertain"] == ["secret"]
        assert rep["lost_rows"] == (case == "replace")  # the new version's row is lost
    else:                   # nothing vouches for what was written before the damage
        assert rep["uncertain"] == ["a", "secret"]
    quarantined = [json.loads(line) for q in sorted(root.glob("quarantine.*.jsonl"))
                   for line in q.read_text().splitlines()[1:]]
    # what may still be current is kept aside; what the checkpoint knows dead is not
    assert (("secret", "the old secret") in {(m["key"], m["text"]) for m in quarantined}) \
        == (not checkpointed)
    with store(root) as s:                              # and it stays repaired
        assert s.get("ns", "secret") is None


# ---------------------------------------------------------------------- exception safety

class _Injected(BaseException):
    pass


def _inject_at(step: int):
    """A tracer raising _Injected at the ``step``-th line executed inside memcore."""
    pkg = str(REPO / "memcore")
    count = [0]

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(pkg):
            return None
        if event == "line":
            count[0] += 1
            if count[0] == step:
                raise _Injected(step)
        return tracer

    return tracer, count


def _run_injected(fn, step):
    tracer, count = _inject_at(step)
    sys.settrace(tracer)
    try:
        fn()
        return True, count[0]
    except _Injected:
        return False, count[0]
    finally:
        sys.settrace(None)


def _exception_rounds(root, op, stride=1, limit=None):
    """Inject one exception at every ``stride``-th line of ``op``; after each, the same store
    takes a probe write, and the store reopens (no repair) with every acknowledged write and
    the interrupted one either wholly there or wholly absent. Returns rounds run."""
    s = store(root, durability="flush")
    s.put("ns", "base", "the base memory", vector=vec(0))
    acked = {"base": "the base memory"}
    step, rounds = 1, 0
    while limit is None or rounds < limit:
        ver = f"v{step}"
        done, seen = _run_injected(lambda: op(s, ver), step)
        rounds += 1
        keys = {"put": ["k"], "put_many": ["m0", "m1", "m2"], "delete": ["base"],
                "compact": ["k"], "reindex": ["k"]}[op.__name__]
        if not done:
            probe = f"probe {step}"
            s.put("ns", "probe", probe, vector=vec(step + 1))
            acked["probe"] = probe
        for k in keys:                  # the interrupted write is all or nothing
            m = s.get("ns", k)
            acked[k] = None if m is None else m.text
        if done:
            break
        if op.__name__ == "put_many":
            states = {acked[k] is not None and acked[k].endswith(ver) for k in keys}
            assert len(states) == 1, (step, acked)
        if op.__name__ == "delete" and acked["base"] is None:
            s.put("ns", "base", "the base memory", vector=vec(0))
            acked["base"] = "the base memory"
        step += stride
    s.close()
    with store(root, read_only=True) as r:
        for k, text in acked.items():
            got = r.get("ns", k)
            assert (None if got is None else got.text) == text, (k, step)
    return rounds


def put(s, ver):
    s.put("ns", "k", f"value {ver}", vector=vec(7))


def put_many(s, ver):
    s.put_many("ns", [MemoryItem(f"m{i}", f"item {i} {ver}") for i in range(3)],
               vectors=np.stack([vec(10 + i) for i in range(3)]))


def delete(s, ver):
    s.delete("ns", "base")


# a traceback of the injected exception can keep a file object of an interrupted frame alive
# until the collector runs; its ResourceWarning is not the store's
_UNRAISABLE = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@_UNRAISABLE
@pytest.mark.parametrize("op", [put, put_many, delete])
def test_an_exception_at_any_step_of_a_write_leaves_one_consistent_store(tmp_path, op):
    assert _exception_rounds(tmp_path / "m", op, stride=3) > 5


@_UNRAISABLE
def test_an_exception_while_creating_a_namespace_leaves_it_usable(tmp_path):
    _namespace_rounds(tmp_path / "m", 83)


def _namespace_rounds(root, stride):
    s = store(root, durability="none")
    step = 1
    while True:
        done, _ = _run_injected(lambda: s.put(("new", str(step)), "k", "text",
                                              vector=vec(1)), step)
        s.put(("new", str(step)), "k", "text again", vector=vec(1))
        assert s.get(("new", str(step)), "k").text == "text again"
        if done:
            break
        step += stride
    s.close()
    with store(root, read_only=True) as r:
        assert all(r.get(ns, "k").text == "text again" for ns in r.namespaces())
    return step // stride


# ---------------------------------------------------------------------- headers

@pytest.mark.parametrize("copy", [True, False], ids=["epoch-copy", "re-embedded"])
@pytest.mark.parametrize("damage", ["lost", "garbage"])
def test_a_lost_store_header_is_detected_never_an_empty_store(tmp_path, damage, copy):
    root = tmp_path / "m"
    with store(root) as s:
        s.put("ns", "dock", "the charging dock is in the hallway")
        s.put("ns", "kettle", "the kettle is in the kitchen", vector=vec(1))
    if damage == "lost":
        (root / "memcore.json").unlink()
    else:
        (root / "memcore.json").write_bytes(b'{"format": "memc\x00')
    if not copy:                               # a store written before the copies
        (root / "memcore.copy.json").unlink()
    for kw in ({}, {"read_only": True}):
        with pytest.raises(StoreCorruptedError, match="memcore.json"):
            store(root, **kw)

    class Other:                  # another embedder of the same dim: never re-created wrongly
        name, dim = "other", DIM

        def encode(self, texts, *, batch_size=32):
            return np.stack([vec(len(t)) for t in texts])

    if not copy:
        for emb in (None, Other()):
            with pytest.raises(StoreCorruptedError, match="cannot be rebuilt"):
                LongTermMemory(root, emb, repair=True)
    with store(root, repair=True) as s:
        assert s.count("ns") == 2 and s.embedder_name == HashingEmbedder(dim=DIM).name
        assert s.get("ns", "kettle").text == "the kettle is in the kitchen"
    with store(root, read_only=True) as s:
        assert s.count("ns") == 2


@pytest.mark.parametrize("damage", ["header-garbage", "header-lost", "log-record",
                                    "header-and-identity"])
def test_a_damaged_namespace_is_isolated_and_repaired(tmp_path, damage, format2):
    # format 2 by design: damage to one namespace directory's files, the others serving (the pack's
    # own: tests/test_pack.py)
    root = tmp_path / "m"
    s = store(root)
    s.put("a", "k", "alpha text")
    s.put("a", "k2", "alpha two")
    s.put("b", "k", "beta text")
    s.close() if damage != "log-record" else killed(s)    # log-record: all in the tail
    bad = ns_dir(root, 0)
    if damage.startswith("header"):
        if damage == "header-lost":
            (bad / "header.json").unlink()
        else:
            (bad / "header.json").write_bytes(b"{\x00garbage")
        if damage == "header-and-identity":
            (bad / "namespace.json").unlink()      # the slug "a" still names it exactly
    else:
        _damage_record_at(bad / "log.0", 0)        # one bad record, a valid one after it
    for kw in ({"read_only": True}, {}):
        with store(root, **kw) as r:               # the other namespace opens and serves
            assert r.get("b", "k").text == "beta text"
            assert list(r.damaged) == [bad.name]       # (damaged probes: namespaces open lazily)
            assert r.namespaces() == [("b",)]
            with pytest.raises(StoreCorruptedError, match="isolated"):
                r.get("a", "k")
            if not kw:
                with pytest.raises(StoreCorruptedError, match="isolated"):
                    r.put("a", "k3", "never written over the damage")
                r.put("b", "k2", "still writable")
            assert r.verify()[bad.name]["errors"]
    with store(root) as s:
        (rep,) = s.repair()
        assert s.get("a", "k2").text == "alpha two"
        assert s.damaged == {}
        if damage.startswith("header"):
            assert s.get("a", "k").text == "alpha text" and rep["uncertain"] == []
    with store(root, read_only=True) as r:
        assert r.namespaces() == [("a",), ("b",)] and not r.damaged


# ---------------------------------------------------------------------- access statistics

def test_damaged_access_statistics_are_validated_on_open(tmp_path):
    root = tmp_path / "m"
    _three(root)
    d = ns_dir(root)
    la = np.memmap(d / "last_accessed_at.0.f64", np.float64, "r+")
    ac = np.memmap(d / "access_count.0.i64", np.int64, "r+")
    la[0], ac[0] = 2.6e57, 8_600_000_000
    la.flush(); ac.flush()
    del la, ac
    with store(root) as s:
        m = s.get("ns", "dock")
        assert m.last_accessed_at == T0 and m.access_count == 0


def _damage_rounds(tmp_path, rounds, seed):
    """Random byte damage to the vectors file of a closed store: every read either raises
    StoreCorruptedError or returns the right memory with its vector bit for bit; verify()
    names every damaged live row. Returns (hits checked, reads served wrong, damages missed):
    a run whose every search raised would check nothing, and the callers fail on that."""
    rng = np.random.default_rng(seed)
    src = tmp_path / "src"
    with store(src) as s:
        s.put_many("ns", [MemoryItem(f"k{i}", f"memory number {i}") for i in range(30)],
                   vectors=np.stack([vec(100 + i) for i in range(30)]))
    checked = wrong = missed = 0
    for r in range(rounds):
        root = tmp_path / f"r{r}"
        shutil.copytree(src, root)
        vpath = ns_dir(root) / "vectors.0.f32"
        raw = bytearray(vpath.read_bytes())
        if r % 2:                                      # one row's bytes over another's
            a, b = rng.choice(30, 2, replace=False)
            raw[a * DIM * 4:(a + 1) * DIM * 4] = raw[b * DIM * 4:(b + 1) * DIM * 4]
            damaged = {int(a)}
        else:                                          # one random byte of a live row
            at = int(rng.integers(0, 30 * DIM * 4))
            raw[at] ^= int(rng.integers(1, 256))
            damaged = {at // (DIM * 4)}
        vpath.write_bytes(bytes(raw))
        with store(root, read_only=True) as s:
            missed += set(s.verify()[("ns",)]["bad_rows"]) != damaged
            for i in range(30):
                try:
                    hits = s.search("ns", "x", query_vector=vec(100 + i), top_k=3, touch=False)
                    for h in hits:
                        j = int(h.key[1:])
                        checked += 1
                        wrong += h.text != f"memory number {j}" or \
                            not np.array_equal(s.vector("ns", h.key), vec(100 + j))
                except StoreCorruptedError:
                    pass
        shutil.rmtree(root)
    return checked, wrong, missed


def test_random_vector_damage_is_never_served(tmp_path, format2):
    # format 2 by design: damage at a row's offset in the namespace directory's vectors file (the
    # pack's own: tests/test_pack.py)
    checked, wrong, missed = _damage_rounds(tmp_path, 10, 1)
    assert (wrong, missed) == (0, 0) and checked >= 10 * 29   # each round serves the intact rows


@pytest.mark.slow
def test_random_vector_damage_is_never_served_long(tmp_path, format2):
    # format 2 by design: damage at a row's offset in the namespace directory's vectors file (the
    # pack's own: tests/test_pack.py)
    checked, wrong, missed = _damage_rounds(tmp_path, 200, 2)
    assert (wrong, missed) == (0, 0) and checked >= 200 * 29


def test_repair_restores_a_damaged_vector_exactly_by_re_embedding(tmp_path):
    emb = HashingEmbedder(dim=DIM)
    for with_embedder in (True, False):
        root = tmp_path / str(with_embedder)
        with store(root) as s:
            for i in range(4):
                s.put("ns", f"k{i}", f"memory number {i}")
        vpath = ns_dir(root) / "vectors.0.f32"
        raw = bytearray(vpath.read_bytes())
        raw[2 * DIM * 4 + 3] ^= 0x10
        vpath.write_bytes(bytes(raw))
        with (store(root) if with_embedder else LongTermMemory(root)) as s:
            (rep,) = s.repair()
            if with_embedder:           # the logged text re-embedded matches the record's CRC
                assert (rep["reembedded"], rep["uncertain"], rep["kept"]) == (1, [], 4)
                assert np.array_equal(s.vector("ns", "k2"), emb.encode(["memory number 2"])[0])
            else:                       # nothing to re-embed with: dropped and listed
                assert (rep["reembedded"], rep["uncertain"], rep["kept"]) == (0, ["k2"], 3)


# ---------------------------------------------------------------------- put_many under SIGKILL

BATCH_DRIVER = textwrap.dedent(r"""
    import glob, json, os, random, sys, time
    import numpy as np
    from memcore import LongTermMemory, MemoryItem, storage
    from tests.kill_driver import killed_round
    root, rounds, n, size, seed = sys.argv[1], *map(int, sys.argv[2:6])

    class Emb:
        name, dim = "batch-test", 16
        def encode(self, texts, *, batch_size=32):
            return np.ones((len(texts), 16), np.float32) / 4

    def version(s, i):
        m = s.get("b", f"k{i}")
        return int(m.text.split()[0]) if m is not None else 0

    def child(w):
        s = LongTermMemory(root, Emb(), durability="flush")
        vecs = np.ones((n, 16), np.float32) / 4
        ver = version(s, 0)
        os.write(w, b"R\n")
        pad = "x" * size
        while True:
            ver += 1
            items = [MemoryItem(f"k{i}", f"{ver} {pad}") for i in range(n)]
            os.write(w, f"B {ver}\n".encode())
            t0 = time.perf_counter()
            s.put_many("b", items, vectors=vecs)
            os.write(w, f"A {ver} {time.perf_counter() - t0}\n".encode())

    rnd = random.Random(seed)
    model, lost, mixed, acked_total, torn = 0, 0, 0, 0, 0
    took = max(0.3, n * size / 20e6)          # a first guess of a put_many's seconds
    for _ in range(rounds):
        # inside the put_many: its write comes last
        out = killed_round(child, rnd.uniform(0.5, 1.05) * took, ready=b"B ")
        lines = out.decode().splitlines()
        acked = [int(x.split()[1]) for x in lines if x.startswith("A ")]
        took = max([float(x.split()[2]) for x in lines if x.startswith("A ")] or [took])
        began = [int(x.split()[1]) for x in lines if x.startswith("B ")]
        acked_total += len(acked)
        want = acked[-1] if acked else model
        for log in glob.glob(os.path.join(root, "ns.*", "n-*", "log.*")):
            with open(log, "rb") as f:
                data = f.read()
            torn += storage.scan_log(data, log, 0).end < len(data)   # killed mid-write
        with LongTermMemory(root, read_only=True) as s:
            got = {version(s, i) for i in range(n)}
        mixed += len(got) > 1
        lost += max(got) < want
        model = max(got)
        assert got <= {want} | set(began[-1:]), (got, want, began[-1:])
    print(json.dumps({"rounds": rounds, "lost": lost, "mixed": mixed, "acked": acked_total,
                      "torn": torn}))
""")


def _batch_rounds(tmp_path, rounds, n, size, seed):
    """SIGKILL a process writing put_many batches of ``n`` items (``size`` bytes of text
    each) at a random moment, ``rounds`` times; every reopen must show every key at one
    version: the last acknowledged batch or the one in flight, never a mix. Returns the
    driver's counts (rounds, acknowledged batches, batches lost, mixed batches)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", BATCH_DRIVER, str(tmp_path / "m"), str(rounds),
                          str(n), str(size), str(seed)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_put_many_is_all_or_nothing_under_sigkill(tmp_path):
    res = _batch_rounds(tmp_path, 2, 2000, 2000, 5)
    assert (res["lost"], res["mixed"]) == (0, 0)


@pytest.mark.slow
def test_put_many_is_all_or_nothing_under_sigkill_long(tmp_path):
    res = _batch_rounds(tmp_path, 16, 600, 64_000, 6)     # 38 MB batches: mostly the write
    print(res)
    assert (res["lost"], res["mixed"]) == (0, 0)


def test_an_uncommitted_batch_is_cut_whole_at_every_length(tmp_path):
    """What a kill inside put_many leaves -- the batch's records with the first one's commit
    byte unwritten, cut anywhere -- opens as if the batch never began (no repair)."""
    src = tmp_path / "src"
    with store(src) as s:
        s.put("ns", "a", "committed before")
    s = store(src)
    log = ns_dir(src) / "log.0"
    l0 = log.stat().st_size
    s.put_many("ns", [MemoryItem(f"m{i}", f"batch item {i}") for i in range(4)])
    killed(s)
    full = log.read_bytes()
    assert full[l0] == storage.records.MAGIC & 0xFF              # committed: the byte is set
    for cut in sorted({l0 + 1, l0 + 13, l0 + 90, len(full) - 1, len(full),
                       *range(l0 + 1, len(full), 97)}):
        root = tmp_path / f"c{cut}"
        shutil.copytree(src, root)
        (ns_dir(root) / "log.0").write_bytes(full[:l0] + b"\0" + full[l0 + 1:cut])
        never_committed(ns_dir(root), l0)                          # nor got their offsets
        with store(root, read_only=True) as r:
            assert r.keys("ns") == ["a"], cut
        with store(root) as w:                                     # the writer cuts it
            assert w.keys("ns") == ["a"]
            w.put("ns", "b", "after")
        assert (ns_dir(root) / "log.0").read_bytes()[:l0] == full[:l0]
        with store(root, read_only=True) as r:
            assert sorted(r.keys("ns")) == ["a", "b"]


# ---------------------------------------------------------------------- readers during compact

RACE_WRITER = textwrap.dedent(r"""
    import sys, time
    from memcore import HashingEmbedder, LongTermMemory, MemoryItem
    root, seconds = sys.argv[1], float(sys.argv[2])
    s = LongTermMemory(root, HashingEmbedder(dim=16))
    print("R", flush=True)
    end, i = time.time() + seconds, 0
    while time.time() < end:
        i += 1
        for ns in ("a", "b"):
            s.put_many(ns, [MemoryItem(f"k{j}", f"text {j} round {i}") for j in range(40)])
        s.compact()
        if i % 3 == 0:
            s.reindex(HashingEmbedder(dim=16), progress=False)
    s.close()
""")


def _reader_rounds(tmp_path, seconds):
    """Open a store read-only again and again while another process compacts and reindexes
    it; returns (opens, false corruption errors)."""
    import time

    root = tmp_path / "m"
    with store(root) as s:
        for ns in ("a", "b"):
            s.put_many(ns, [MemoryItem(f"k{j}", f"text {j} round 0") for j in range(40)])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", RACE_WRITER, str(root), str(seconds)],
                            stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline().strip() == "R"
    opens, errors = 0, []
    try:
        while proc.poll() is None:
            try:
                with LongTermMemory(root, read_only=True) as r:
                    for ns in ("a", "b"):
                        assert r.count(ns) == 40
                        assert r.get(ns, "k7").text.startswith("text 7 round")
                opens += 1
            except StoreCorruptedError as err:
                errors.append(str(err))
                opens += 1
            time.sleep(0.001)
    finally:
        proc.wait(timeout=120)
        proc.stdout.close()
    return opens, errors


def test_readers_never_see_false_corruption_during_compact_and_reindex(tmp_path):
    opens, errors = _reader_rounds(tmp_path, 1.5)
    assert errors == [] and opens > 3


@pytest.mark.slow
def test_readers_never_see_false_corruption_long(tmp_path):
    opens, errors = _reader_rounds(tmp_path, 30)
    print(opens)
    assert opens > 100 and errors == []


# ---------------------------------------------------------------------- disk full

FULL_CHILD = textwrap.dedent(r"""
    import json, sys
    from memcore import HashingEmbedder, LongTermMemory, MemcoreError, MemoryItem
    root, seed = sys.argv[1], int(sys.argv[2])
    import random
    rnd = random.Random(seed)
    s = LongTermMemory(root, HashingEmbedder(dim=64), clock=lambda: 1.7e9)
    acked, errors, i = {}, [], 0
    while len(errors) < 25:
        i += 1
        try:
            x = rnd.random()
            if x < 0.5:
                k, t = f"k{rnd.randrange(400)}", f"text {i} " + "pad " * rnd.randrange(200)
                s.put("ns", k, t)
                acked[k] = t
            elif x < 0.9:
                batch = {f"k{rnd.randrange(400)}": f"batch {i} {j} " + "pad " * 100
                         for j in range(rnd.randrange(2, 40))}
                s.put_many("ns", [MemoryItem(k, t) for k, t in batch.items()])
                acked.update(batch)
            else:
                k = f"k{rnd.randrange(400)}"
                if s.delete("ns", k):
                    acked[k] = None
        except MemcoreError as err:
            if not isinstance(err, OSError):
                raise
            errors.append(type(err).__name__)
    try:
        s.close()
    except MemcoreError as err:
        errors.append("close " + type(err).__name__)
    print(json.dumps({"acked": acked, "errors": errors, "ops": i}))
""")


def _disk_full_rounds(tmp_path, rounds, size="4m"):
    """Fill a small tmpfs with a store (puts, put_many, deletes) until 25 writes failed;
    every failure must be a MemcoreError that is an OSError (never SIGBUS), the store must
    reopen on the still-full disk without repair holding every acknowledged write, and take
    writes once space returns. Returns (rounds, acknowledged writes lost)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()}")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    lost = 0
    try:
        for r in range(rounds):
            root = mnt / f"s{r}"
            filler = mnt / "filler"
            filler.write_bytes(b"\0" * (128 << 10))      # space to give back afterwards
            out = subprocess.run([sys.executable, "-c", FULL_CHILD, str(root), str(r)],
                                 capture_output=True, text=True, env=env, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]   # -7 would be SIGBUS
            res = json.loads(out.stdout.strip().splitlines()[-1])
            assert res["errors"] and set(res["errors"]) <= {"StoreIOError", "close StoreIOError"}
            s = LongTermMemory(root, HashingEmbedder(dim=64))           # still full
            assert not s.damaged and not s.repair_report
            for k, t in res["acked"].items():
                got = s.get("ns", k)
                lost += (None if got is None else got.text) != t
            try:
                s.close()                 # its checkpoint may not fit: nothing is lost
            except StoreIOError:
                pass
            filler.unlink()                              # space returns
            with LongTermMemory(root, HashingEmbedder(dim=64)) as s:
                s.put("ns", "after", "written once space returned")
            with LongTermMemory(root, read_only=True) as s:
                assert s.get("ns", "after").text == "written once space returned"
                assert s.verify()[("ns",)]["errors"] == []
            shutil.rmtree(root)
    finally:
        import gc
        gc.collect()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    return rounds, lost


def test_disk_full_raises_store_io_error_and_loses_nothing(tmp_path):
    assert _disk_full_rounds(tmp_path, 1, "1m")[1] == 0


@pytest.mark.slow
def test_disk_full_long(tmp_path):
    assert _disk_full_rounds(tmp_path, 8)[1] == 0


# ---------------------------------------------------------------------- CLI verify / repair

_cli = run_cli


def test_cli_verify_and_repair(tmp_path, caplog, format2):
    # format 2 by design: damage at a row's offset in the namespace directory's vectors file (the
    # pack's own: tests/test_pack.py)
    root = tmp_path / "m"
    with store(root) as s:
        for i in range(4):
            s.put("ns", f"k{i}", f"memory number {i}")
        s.put("other", "k", "another namespace")
    code, out, _ = _cli("verify", str(root))
    assert code == 0 and out.splitlines()[-1].endswith("2 of 2 namespaces intact")
    vpath = ns_dir(root) / "vectors.0.f32"
    raw = bytearray(vpath.read_bytes())
    raw[DIM * 4 + 1] ^= 0x08                       # row 1's vector
    vpath.write_bytes(bytes(raw))
    code, out, _ = _cli("verify", str(root), "--json")
    res = json.loads(out)
    assert code == 1 and not res["ok"]
    assert [n["bad_rows"] for n in res["namespaces"]] == [[1], []]
    code, out, _ = _cli("--embedder", "hashing", "repair", str(root))   # re-embeds exactly
    assert code == 0 and "re-embedded 1" in out, out
    code, out, _ = _cli("verify", str(root))
    assert code == 0
    (root / "memcore.json").unlink()
    code, out, err = _cli("verify", str(root))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "memcore.json" in err
    code, out, _ = _cli("repair", str(root))
    assert code == 0 and "store header rebuilt" in out


# ---------------------------------------------------------------------- SIGKILL: namespaces, clear, reindex

NS_DRIVER = textwrap.dedent(r"""
    import json, os, random, sys
    from memcore import HashingEmbedder, LongTermMemory
    from tests.kill_driver import killed_round
    root, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def child(w, r_no):
        s = LongTermMemory(root, HashingEmbedder(dim=16), durability="flush")
        os.write(w, b"R\n")
        rnd = random.Random(seed * 1000 + r_no)
        i = 0
        while True:
            i += 1
            x = rnd.random()
            ns = f"n{rnd.randrange(30)}"
            if x < 0.6:
                text = f"round {r_no} op {i}"
                os.write(w, f"B put {ns} {text}\n".encode())
                s.put(("t", ns), "k", text)              # often a new namespace
            elif x < 0.85:
                os.write(w, f"B clear {ns} -\n".encode())
                s.clear(("t", ns))
            else:
                os.write(w, b"B reindex - -\n")
                s.reindex(HashingEmbedder(dim=16), progress=False)
            os.write(w, b"A\n")

    rnd = random.Random(seed)
    model, failures, acked = {}, [], 0
    for r_no in range(1, rounds + 1):
        out = killed_round(lambda w: child(w, r_no), rnd.uniform(0.0, 0.25))
        pending = None
        for line in out.decode().splitlines():
            if line.startswith("B "):
                _, op, ns, text = line.split(" ", 3)
                pending = (op, ns, text)
            elif line == "A" and pending:
                op, ns, text = pending
                if op == "put":
                    model[ns] = text
                elif op == "clear":
                    model.pop(ns, None)
                acked += 1
                pending = None
        with LongTermMemory(root, HashingEmbedder(dim=16)) as s:
            if s.damaged or s.repair_report:
                failures.append(f"round {r_no}: damaged {s.damaged} {s.repair_report}")
            for i in range(30):
                ns = f"n{i}"
                m = s.get(("t", ns), "k")
                got = None if m is None else m.text
                allowed = {model.get(ns)}
                if pending and pending[1] == ns:
                    allowed.add(pending[2] if pending[0] == "put" else None)
                if got not in allowed:
                    failures.append(f"round {r_no}: {ns} is {got!r}, expected one of {allowed}")
                if got is None:
                    model.pop(ns, None)
                else:
                    model[ns] = got
            s.put(("t", "probe"), "k", "the store still accepts writes")
            s.clear(("t", "probe"))
    print(json.dumps({"rounds": rounds, "acked": acked, "failures": failures}))
""")


def _namespace_kill_rounds(tmp_path, rounds, seed):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", NS_DRIVER, str(tmp_path / "m"), str(rounds),
                          str(seed)], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sigkill_during_namespace_creation_clear_and_reindex(tmp_path):
    res = _namespace_kill_rounds(tmp_path, 40, 11)
    print(res)
    assert res["failures"] == [] and res["acked"] > 40


@_UNRAISABLE
@pytest.mark.slow
@pytest.mark.parametrize("op", [put, put_many, delete])
def test_an_exception_at_every_step_of_a_write(tmp_path, op):
    assert _exception_rounds(tmp_path / "m", op, stride=1) > 20


def compact(s, ver):
    s.put("ns", "k", f"value {ver}", vector=vec(7))      # garbage for compact to drop
    s.compact()


def reindex(s, ver):
    s.reindex(HashingEmbedder(dim=DIM), progress=False)


@_UNRAISABLE
@pytest.mark.slow
@pytest.mark.parametrize("op", [compact, reindex])
def test_an_exception_at_every_step_of_compact_and_reindex(tmp_path, op):
    assert _exception_rounds(tmp_path / "m", op, stride=3) > 20


@_UNRAISABLE
@pytest.mark.slow
def test_an_exception_at_every_step_of_namespace_creation(tmp_path):
    assert _namespace_rounds(tmp_path / "m", 1) > 50


# ---------------------------------------------------------------------- the agent layer

AGENT_DRIVER = textwrap.dedent(r"""
    import json, os, random, sys
    from memcore import HashingEmbedder, SemanticMemory
    from tests.kill_driver import killed_round, semantic_memory_stores
    root, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def child(w, r_no):
        mem = SemanticMemory(root, HashingEmbedder(dim=64), consolidate_every=8,
                             short_capacity=50_000)              # nothing evicted
        mem.store(f"round {r_no} warm-up", "noted", mode="warm")    # compiled before R
        os.write(w, b"R\n")
        semantic_memory_stores(mem, w, r_no)

    rnd = random.Random(seed)
    acked, lost = set(), []
    for r_no in range(1, rounds + 1):
        out = killed_round(lambda w: child(w, r_no), rnd.uniform(0.0, 0.3))
        queued = []
        for line in out.decode().splitlines():
            if line.startswith("A "):
                acked.add(line[2:])
            elif line.startswith("Q "):
                queued.append(line[2:])
            elif line == "F":                 # flush returned: every queued store is durable
                acked.update(queued)
                queued = []
        mem = SemanticMemory(root, HashingEmbedder(dim=64), warmup=False, consolidate_every=8,
                             short_capacity=50_000)
        ns = ("agent", "patrol")
        for key in sorted(acked):
            if mem.short.get(ns, key) is None and mem.long.get(ns, key) is None:
                lost.append(key)
        mem.close()
    print(json.dumps({"rounds": rounds, "acked": len(acked), "lost": len(lost),
                      "first_lost": lost[:5]}))
""")


def _agent_rounds(tmp_path, rounds, seed):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", AGENT_DRIVER, str(tmp_path / "m"), str(rounds),
                          str(seed)], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow     # ~60 s of SemanticMemory subprocesses killed: the slow tier (CI runs it)
def test_semantic_memory_store_is_durable_on_return_and_after_flush(tmp_path):
    res = _agent_rounds(tmp_path, 3, 21)
    assert res["lost"] == 0 and res["acked"] > 3


@pytest.mark.slow
def test_semantic_memory_store_is_durable_long(tmp_path):
    res = _agent_rounds(tmp_path, 40, 22)
    print(res)
    assert res["lost"] == 0 and res["acked"] > 100


@pytest.mark.parametrize("damage", ["dtype", "zip", "truncated"])
def test_a_damaged_index_state_file_is_store_corrupted_never_a_raw_error(tmp_path, damage):
    """Bytes of an index's .npz state damaged so numpy's reader fails in ways other than
    ValueError/OSError (a '|i9' dtype is a TypeError, a broken zip a BadZipFile): the reader
    raises StoreCorruptedError, as for any damaged store file (found by the fault campaign)."""
    from memcore.arrays import RamArrays
    from memcore.errors import StoreCorruptedError
    from memcore.storage.mapped import _state_path, index_prefix, read_index, write_index

    structure = (False, False)
    manifest = write_index(str(tmp_path), 0, 1, structure, RamArrays(),
                           {"n": np.arange(3, dtype=np.int64)}, durable=False)
    path = _state_path(str(tmp_path), index_prefix(structure), 0, 1)
    raw = Path(path).read_bytes()
    if damage == "dtype":           # the stored array's header names a dtype numpy refuses
        raw = raw.replace(b"'<i8'", b"'|i9'")
    elif damage == "zip":           # the zip's central directory signature gone
        at = raw.rfind(b"PK\x05\x06")
        raw = raw[:at] + b"\0\0\0\0" + raw[at + 4:]
    else:
        raw = raw[: len(raw) // 2]
    Path(path).write_bytes(raw)
    with pytest.raises(StoreCorruptedError, match="not a readable .npz"):
        read_index(str(tmp_path), 0, 1, structure, manifest)
