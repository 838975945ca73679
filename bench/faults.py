"""Fault campaign for issue 27: SIGKILL rounds on LongTermMemory and SemanticMemory, and
seeded byte damage to every file kind of a store, each case classified.

``python -m bench.faults --kills 300 --damage 400 --seed 1 --out bench/results/faults-D.md``
(also ``memcore bench faults ...``). Deterministic by seed (kill moments aside: a SIGKILL
lands where the child happens to be).

Damage classification, per case (one file of a closed store damaged one way):

* **detected**: open raised, ``damaged`` said so, ``verify()`` listed an error or bad row,
  or a read raised :class:`memcore.errors.MemcoreError` (a WARNING logged on open is
  recorded in the case but is no report);
* **harmless**: nothing reported and every get/search/vector exactly as expected;
* **crashed**: open or a read raised an exception that is no MemcoreError;
* **silent**: nothing reported and some result wrong or missing (the failure issue 27 counts).

After each case ``repair()`` runs on a writer; a deleted or replaced key served with its old
value afterwards is counted as *resurrected*; an acknowledged key neither served exactly nor
listed by repair is counted as *lost*.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from memcore import (HashingEmbedder, HybridWeights, LongTermMemory, MemoryItem,  # noqa: E402
                     SemanticMemory)
from memcore import _validate  # noqa: E402
from memcore.errors import MemcoreError  # noqa: E402
from memcore.storage.layout import PACK_DIR  # noqa: E402
from memcore.stores import long_pack  # noqa: E402
from tests.kill_driver import killed_round, semantic_memory_stores  # noqa: E402  (one SIGKILL driver for tests and bench)

DIM = 16
T0 = 1_700_000_000.0
DAMAGES = ("bitflip", "zero", "truncate", "delete", "torn_last")


def clock() -> float:
    """A fixed clock: TTLs never lapse during a campaign, so every difference is damage."""
    return T0


def vec(seed: int) -> np.ndarray:
    """The (DIM,) float32 unit vector of ``seed``."""
    return _validate.vector(np.random.default_rng(seed).standard_normal(DIM), DIM)


_EMB = HashingEmbedder(dim=DIM)


def _ltm(root, **kw) -> LongTermMemory:
    return LongTermMemory(root, HashingEmbedder(dim=DIM), clock=clock, **kw)


# ------------------------------------------------------------------------------ expected state

#: The damage source's namespace whose model holds a sample of its keys (every other
#: namespace of a model is served with exactly the model's keys).
SAMPLED = "grown"


def _expect(s, model: dict, deleted: set, skip=()) -> list[str]:
    """What ``s`` serves wrong: every (ns, key) of ``model`` exactly (text, metadata,
    importance, expiry, vector bits, found by its own vector), every deleted key absent, no
    key a namespace of ``model`` does not hold (but :data:`SAMPLED`'s)."""
    bad = []
    want: dict = {ns: set() for ns, _ in [*model, *deleted]}
    for ns, key in model:
        want[ns].add(key)
    for ns, keys in sorted(want.items()):
        extra = set(s.keys(ns)) - keys - {k for n, k in skip if n == ns}
        if extra and ns != SAMPLED:
            bad.append(f"{ns}: serves keys never written or deleted: {sorted(extra)[:5]}")
    for (ns, key), (text, imp, meta, vseed, ttl) in sorted(model.items()):
        if (ns, key) in skip:
            continue
        m = s.get(ns, key)
        if m is None:
            bad.append(f"{ns}/{key}: missing")
            continue
        want_exp = None if ttl is None else T0 + ttl
        if (m.text != text or m.updated_at != T0 or m.last_accessed_at != T0 or (m.metadata or None) != (meta or None) or np.float32(m.importance) != np.float32(imp)
                or m.created_at != T0 or m.expires_at != want_exp):
            bad.append(f"{ns}/{key}: got {m.text!r} imp={m.importance} meta={m.metadata} "
                       f"created={m.created_at} expires={m.expires_at}; want {text!r} imp={imp} "
                       f"meta={meta} expires={want_exp}")
            continue
        v = s.vector(ns, key)
        # after a reindex (vseed None) the row holds the embedder's vector of its text; that
        # can be all zeros (signed hashing at DIM=16 cancels, e.g. 'r91 op16 k26 chair lamp
        # keys'): then bits are checked but search by it is not
        want_v = _EMB.encode([text])[0] if vseed is None else vec(vseed)
        if v is None or not np.array_equal(v, want_v) or (vseed is not None
                                                          and not np.any(want_v)):
            bad.append(f"{ns}/{key}: vector bits differ")
            continue
        if not np.any(want_v):
            continue
        hits = s.search(ns, text, query_vector=want_v, top_k=1, touch=False)
        if vseed is None and hits and hits[0].key != key:     # an equal embedding may tie
            hits = [h for h in s.search(ns, text, query_vector=want_v, top_k=60,
                                        touch=False) if h.key == key] or hits
        if not hits or hits[0].key != key or np.float32(hits[0].importance) != np.float32(imp) \
                or hits[0].created_at != T0:
            got = hits[0] if hits else None
            bad.append(f"{ns}/{key}: search by its vector gave "
                       f"{None if got is None else (got.key, got.importance, got.created_at)}")
    for ns, key in sorted(deleted):
        if (ns, key) in skip:                  # a pending put/put_many may have re-added it
            continue
        if (ns, key) not in model and s.get(ns, key) is not None:
            bad.append(f"{ns}/{key}: deleted but served")
    return bad


def _report_errors(report: dict) -> list[str]:
    out = []
    for ns, r in report.items():
        if r.get("errors") or r.get("bad_rows"):
            out.append(f"{ns}: errors={r.get('errors')} bad_rows={r.get('bad_rows')}"
                       + (f" namespaces={r['namespaces']}" if "namespaces" in r else ""))
    return out


# ------------------------------------------------------------------------------ SIGKILL rounds

_WORDS = ("kettle", "dock", "keys", "garden", "window", "lamp", "chair", "book", "door", "cup")


def _words(a: int, b: int) -> str:
    """Two words for a text (a reindex embeds texts: digits alone would embed to zeros)."""
    return f"{_WORDS[b % 10]} {_WORDS[(a * 7 + b * 3) % 10]} {_WORDS[(a + b // 10) % 10]}"

def _child_store(root: str, w: int):
    """A kill child's writer, warmed (one put), after telling the parent it is ready; and
    its ``say`` (one JSON line per op to the pipe ``w``)."""
    s = _ltm(root, durability="flush")
    say = lambda obj: os.write(w, (json.dumps(obj) + "\n").encode())  # noqa: E731
    s.put("warm", "k", "warm-up", vector=vec(0))
    os.write(w, b"R\n")
    return s, say


def _put_op(s, say, rnd, ns: str, key: str, r_no: int, i: int, vs: int) -> None:
    """One random put (TTL, metadata, importance), reported before it is made."""
    ttl = rnd.choice([None, None, 1e6])
    meta = {"r": r_no, "i": i}
    imp = round(rnd.random(), 3)
    text = f"r{r_no} op{i} {_words(r_no, i)}"
    say({"op": "put", "ns": ns, "key": key, "text": text, "imp": imp,
         "meta": meta, "v": vs, "ttl": ttl})
    s.put(ns, key, text, importance=imp, metadata=meta, vector=vec(vs), ttl=ttl)


def _many_op(s, say, rnd, ns: str, keys: list, r_no: int, i: int, vs: int) -> None:
    """One put_many of ``keys`` (vectors ``vs + 1``...), reported before it is made."""
    ttl = rnd.choice([None, 5e5])
    items = [[k, f"r{r_no} op{i} {k} {_words(r_no, i + j)}", 0.5, None, vs + 1 + j, ttl]
             for j, k in enumerate(keys)]
    say({"op": "many", "ns": ns, "items": items})
    s.put_many(ns, [MemoryItem(k, t, importance=p) for k, t, p, *_ in items],
               vectors=np.stack([vec(it[4]) for it in items]), ttl=ttl)


def _ltm_child(root: str, r_no: int, seed: int, big: bool):
    def child(w):
        do_big = big
        s, say = _child_store(root, w)
        rnd = random.Random(seed * 7919 + r_no)
        i = 0
        while True:
            i += 1
            x = rnd.random()
            key = f"k{rnd.randrange(60)}"
            ns = "ns"
            if do_big:
                n = 65_600
                say({"op": "many", "ns": "big", "items": [[f"b{j}", f"b{j}", 0.5, None,
                                                           j % 97, None] for j in (0, n - 1)],
                     "n": n, "base": f"r{r_no}"})
                vs = np.stack([vec(j % 97) for j in range(97)])[np.arange(n) % 97]
                s.put_many("big", [MemoryItem(f"b{j}", f"r{r_no} b{j}") for j in range(n)],
                           vectors=vs)
                say({"op": "A"})
                do_big = False
                continue
            vs = (r_no * 100_000 + i) * 100          # distinct from every other op's
            if x < 0.4:
                _put_op(s, say, rnd, ns, key, r_no, i, vs)
            elif x < 0.6:
                keys = sorted({f"k{rnd.randrange(60)}" for _ in range(rnd.randrange(2, 12))})
                _many_op(s, say, rnd, ns, keys, r_no, i, vs)
            elif x < 0.75:
                say({"op": "del", "ns": ns, "key": key})
                s.delete(ns, key)
            elif x < 0.85:
                say({"op": "touch"})
                s.touch(ns, [key])
            elif x < 0.92:
                say({"op": "compact"})
                s.compact()
            elif x < 0.97:
                say({"op": "clear", "ns": "big"})
                s.clear("big")
            else:
                say({"op": "reindex"})
                s.reindex(HashingEmbedder(dim=DIM), progress=False)
            say({"op": "A"})
    return child


def _pack_child(root: str, r_no: int, seed: int, big: bool):
    """The pack's SIGKILL child (``--pack``): many small namespaces ``u0``..``u11`` (puts,
    put_many, deletes, clear, TTL, touch), namespace ``grow`` filled 60 rows a time past
    :data:`~memcore.stores.long_pack.PACK_MAX` (promotion) and cleared now and then,
    compaction of the pack and a rare reindex; every op reported as :func:`_ltm_child`
    reports it (``big`` is ignored: the pack's batches are small)."""
    def child(w):
        s, say = _child_store(root, w)
        rnd = random.Random(seed * 7919 + r_no)
        i = 0
        while True:
            i += 1
            x = rnd.random()
            ns = f"u{rnd.randrange(12)}"
            key = f"k{rnd.randrange(20)}"
            vs = (r_no * 100_000 + i) * 100          # distinct from every other op's
            if x < 0.35:
                _put_op(s, say, rnd, ns, key, r_no, i, vs)
            elif x < 0.52 or 0.67 <= x < 0.74:
                grow = x >= 0.67
                if grow:                 # the next 60 rows: the 5th batch crosses PACK_MAX
                    ns, at = "grow", len(s.keys("grow")) // 60 % 6 * 60
                    keys = [f"g{at + j}" for j in range(60)]
                else:
                    keys = sorted({f"k{rnd.randrange(20)}" for _ in range(rnd.randrange(2, 12))})
                _many_op(s, say, rnd, ns, keys, r_no, i, vs)
            elif x < 0.62:
                say({"op": "del", "ns": ns, "key": key})
                s.delete(ns, key)
            elif x < 0.67:
                say({"op": "touch"})
                s.touch(ns, [key])
            elif x < 0.8:
                ns = "grow" if rnd.random() < 0.1 else ns
                say({"op": "clear", "ns": ns})
                s.clear(ns)
            elif x < 0.81:                              # slow: many kills land here
                say({"op": "compact"})
                s.compact()
            elif x < 0.997:
                say({"op": "get", "ns": ns, "key": key})   # a TTL refresh on a read
                s.get(ns, key)
            else:
                say({"op": "reindex"})
                s.reindex(HashingEmbedder(dim=DIM), progress=False)
            say({"op": "A"})
    return child


def _apply(model, deleted, op, big):
    """Apply one acknowledged op to the expected state."""
    k = op["op"]
    if k == "put":
        model[(op["ns"], op["key"])] = (op["text"], op["imp"], op["meta"], op["v"], op["ttl"])
        deleted.discard((op["ns"], op["key"]))
    elif k == "many" and op["ns"] == "big":
        big["n"], big["base"] = op["n"], op["base"]
    elif k == "many":
        for key, text, imp, meta, vs, ttl in op["items"]:
            model[(op["ns"], key)] = (text, imp, meta, vs, ttl)
            deleted.discard((op["ns"], key))
    elif k == "del":
        if model.pop((op["ns"], op["key"]), None) is not None:
            deleted.add((op["ns"], op["key"]))
    elif k == "clear" and op["ns"] == "big":
        big["n"] = 0
    elif k == "clear":
        for nk in [nk for nk in model if nk[0] == op["ns"]]:
            del model[nk]
            deleted.add(nk)
    elif k == "reindex":                  # every vector is now the embedder's
        for key, row in model.items():
            model[key] = row[:3] + (None,) + row[4:]


def _check_big(s, big, pending) -> list[str]:
    """The 65,600-row batch: all or nothing (a sample of keys and the count)."""
    st = s.stats().get(("big",), {})
    live = st.get("live", st.get("count", 0)) if isinstance(st, dict) else 0
    allowed = {big["n"]}
    if pending and pending.get("ns") == "big":
        allowed |= {0, pending.get("n", 0)}
    if live not in allowed:
        return [f"big: {live} rows live, expected one of {sorted(allowed)} (half a batch?)"]
    return []


def ltm_kill_rounds(root: str, rounds: int, seed: int, big_every: int, log,
                    child_of=_ltm_child, label: str = "LTM") -> dict:
    """``rounds`` SIGKILL rounds of ``child_of(root, r_no, seed, big)`` (:func:`_ltm_child`,
    or :func:`_pack_child` for the pack), each followed by a reader's and a writer's check
    of every acknowledged write and a ``verify()``; the op in flight may have landed or
    not, whole."""
    rnd = random.Random(seed)
    model, deleted, big = {}, set(), {"n": 0, "base": None}
    was_grown = False
    acked = failures = promotions = 0
    fails, verify_dirty, times, killed_in = [], 0, [], defaultdict(int)
    for r_no in range(1, rounds + 1):
        t0 = time.perf_counter()
        isbig = big_every > 0 and r_no % big_every == 0
        out = killed_round(child_of(root, r_no, seed, isbig),
                           rnd.uniform(0.5, 1.5) if isbig else rnd.uniform(0.0, 0.15))
        pending = None
        # whole lines only: a kill inside a report longer than a pipe's atomic write
        # leaves part of it (its op had not begun)
        for line in out.decode().split("\n")[:-1]:
            if line == "R":
                continue
            op = json.loads(line)
            if op["op"] == "A":
                if pending:
                    _apply(model, deleted, pending, big)
                    acked += 1
                pending = None
            else:
                pending = op
        killed_in[pending["op"] if pending else "between ops"] += 1
        skip = set()
        if pending and pending["op"] in ("put", "del"):
            skip.add((pending["ns"], pending["key"]))
        if pending and pending["op"] == "many" and pending["ns"] != "big":
            skip |= {(pending["ns"], it[0]) for it in pending["items"]}
        if pending and pending["op"] == "clear" and pending["ns"] != "big":
            skip |= {nk for nk in model if nk[0] == pending["ns"]}
        if pending and pending["op"] == "reindex":    # killed mid-reindex: done or not, whole
            with _ltm(root, read_only=True) as s:
                done = any(vs is not None and not np.array_equal(s.vector(ns, k), vec(vs))
                           for (ns, k), (_, _, _, vs, _) in model.items())
            if done:
                _apply(model, deleted, pending, big)
        bad = []
        for ro in (True, False):
            with _ltm(root, read_only=ro) as s:
                bad += [f"{'ro' if ro else 'rw'} {b}" for b in _expect(s, model, deleted, skip)]
                bad += _check_big(s, big, pending)
                if not ro:
                    grown = ("grow",) in s._space.tables.dirs     # has a directory
                    promotions += grown and not was_grown
                    was_grown = grown
                    errs = _report_errors(s.verify())
                    verify_dirty += bool(errs)
                    bad += errs
                    # the pending op resolved either way: adopt what the store says
                    if pending and pending["op"] == "many" and pending["ns"] != "big":
                        got = [s.get(pending["ns"], it[0]) for it in pending["items"]]
                        done = [g is not None and g.text == it[1]
                                for g, it in zip(got, pending["items"])]
                        if any(done) and not all(done):
                            bad.append(f"half batch: {sum(done)}/{len(done)} rows")
                        if all(done):
                            _apply(model, deleted, pending, big)
                    elif pending and pending["op"] == "put":
                        m = s.get(pending["ns"], pending["key"])
                        if m is not None and m.text == pending["text"]:
                            _apply(model, deleted, pending, big)
                    elif pending and pending["op"] == "del":
                        if s.get(pending["ns"], pending["key"]) is None:
                            _apply(model, deleted, pending, big)
                    elif pending and pending["op"] == "clear" and pending["ns"] != "big":
                        had = [nk for nk in model if nk[0] == pending["ns"]]
                        gone = [s.get(*nk) is None for nk in had]
                        if any(gone) and not all(gone):
                            bad.append(f"half clear: {sum(gone)}/{len(gone)} rows gone")
                        if all(gone):
                            _apply(model, deleted, pending, big)
                    elif pending and pending["op"] in ("many", "clear"):   # of "big"
                        st = s.stats().get(("big",), {})
                        big["n"] = st.get("live", 0) if isinstance(st, dict) else 0
        if bad:
            failures += 1
            fails.append(f"{label} round {r_no}: " + "; ".join(bad[:3]))
        times.append(time.perf_counter() - t0)
        if r_no % 25 == 0:
            log(f"{label} kill round {r_no}/{rounds}: acked {acked}, failing rounds {failures}")
    return {"rounds": rounds, "acked": acked, "failing_rounds": failures, "failures": fails,
            "verify_dirty": verify_dirty, "times": times, "live": len(model),
            "killed_in": dict(killed_in), "promotions": promotions}


def _sm(root):
    return SemanticMemory(root, HashingEmbedder(dim=64), warmup=False, consolidate_every=8,
                          short_capacity=50_000)


def sm_kill_rounds(root: str, rounds: int, seed: int, log) -> dict:
    rnd = random.Random(seed + 1)

    def child_of(r_no):
        def child(w):
            mem = _sm(root)
            mem.store(f"round {r_no} warm-up", "noted", mode="warm")
            os.write(w, b"R\n")
            semantic_memory_stores(mem, w, r_no)
        return child

    acked, lost, times, verify_dirty = {}, [], [], 0
    for r_no in range(1, rounds + 1):
        t0 = time.perf_counter()
        out = killed_round(child_of(r_no), rnd.uniform(0.0, 0.3))
        queued = []
        for line in out.decode().splitlines():
            if line.startswith("A "):
                acked[line[2:]] = r_no
            elif line.startswith("Q "):
                queued.append(line[2:])
            elif line == "F":
                acked.update({k: r_no for k in queued})
                queued = []
        mem = _sm(root)
        ns = ("agent", "patrol")
        try:
            for key in sorted(acked):
                if mem.short.get(ns, key) is None and mem.long.get(ns, key) is None:
                    lost.append(f"SM round {r_no}: {key} (acknowledged in round {acked[key]})")
            verify_dirty += bool(_report_errors(mem.long.verify()))
        finally:
            mem.close()
        times.append(time.perf_counter() - t0)
        if r_no % 25 == 0:
            log(f"SM kill round {r_no}/{rounds}: acked {len(acked)}, lost {len(lost)}")
    return {"rounds": rounds, "acked": len(acked), "lost": lost, "times": times,
            "verify_dirty": verify_dirty}


# ------------------------------------------------------------------------------ damage cases

def file_kind(name: str) -> str:
    """The kind of a store file, from its path or owned name (memcore.storage.layout); a
    file of the pack (format 3) is ``pack:<kind>``."""
    if PACK_DIR + "/" in name:
        return "pack:" + file_kind(Path(name).name)
    name = Path(name).name
    m = re.match(r"(memcore\.copy\.json|memcore\.json|LOCK|header\.json|namespace\.json|log)\b",
                 name)
    if m:
        return m.group(1)
    m = re.match(r"([a-z_]+)\.\d+\.c\d+\.", name)
    if m:
        return f"checkpoint:{m.group(1)}"
    if name.startswith("hx"):                    # the hybrid index's persisted state
        return ("hybrid:state" if name.endswith(".npz") else
                "hybrid:lexical arrays" if ".lex." in name else "hybrid:arrays")
    if name.startswith("ann."):
        return "ann" + ("-sidecar" if name.endswith(".json") else "")
    return name.split(".")[0]


def _small_namespaces(s, model: dict, deleted: set, late: bool) -> None:
    """The pack's share of :func:`build_source`: small namespaces ``u0``..``u7`` (TTLs,
    metadata), one cleared, and :data:`SAMPLED` moved to its own directory by a put_many across
    :data:`~memcore.stores.long_pack.PACK_MAX` (every 16th row checked); ``late``: what comes after the
    checkpoint (puts, a delete, a clear, a new namespace, a batch)."""
    def put_many(ns, keys, tag, ttl=None, every=1):
        seeds = [zlib.crc32(f"{ns}/{k}/{tag}".encode()) % 10**6 + 1000 for k in keys]
        s.put_many(ns, [MemoryItem(k, f"{tag} {ns} {k} {_words(len(ns), i)}",
                                   importance=0.25, metadata={"u": ns})
                        for i, k in enumerate(keys)],
                   vectors=np.stack([vec(v) for v in seeds]), ttl=ttl)
        for i, (k, v) in enumerate(zip(keys, seeds)):
            if i % every == 0:                  # (every: a sample is checked)
                model[(ns, k)] = (f"{tag} {ns} {k} {_words(len(ns), i)}", 0.25, {"u": ns}, v,
                                  ttl)
            deleted.discard((ns, k))

    def clear(ns):
        s.clear(ns)
        for nk in [nk for nk in model if nk[0] == ns]:
            del model[nk]
            deleted.add(nk)

    if not late:
        for u in range(8):
            put_many(f"u{u}", [f"k{j}" for j in range(5)], "packed", 7200.0 if u % 3 == 0 else None)
        put_many("gone", ["a", "b", "c"], "cleared")
        clear("gone")
        put_many(SAMPLED, [f"g{j}" for j in range(long_pack.PACK_MAX - 6)], "growing", every=16)
        put_many(SAMPLED, [f"h{j}" for j in range(10)], "promoted")
        s.compact()       # the promoted rows dropped: damage lands on live rows, mostly
        return
    put_many("u1", ["k1", "n1"], "late", 900.0)
    s.put("u2", "k0", "late replacement in u2", importance=0.6, vector=vec(4242))
    model[("u2", "k0")] = ("late replacement in u2", 0.6, None, 4242, None)
    s.delete("u3", "k0")
    model.pop(("u3", "k0"))
    deleted.add(("u3", "k0"))
    clear("u4")
    put_many("late", ["x", "y"], "new namespace")
    put_many("u5", [f"k{j}" for j in range(3, 8)], "last batch")


def build_source(root: str, pack: bool = False) -> tuple[dict, set]:
    """A store with checkpointed rows and post-checkpoint records (puts, TTLs, a delete, a
    replacement, a batch), left as a SIGKILL leaves it; ``pack``: with the pack on and many
    small namespaces (:func:`_small_namespaces`), else format-2 namespace directories (the
    pack off whatever ``MEMCORE_PACK`` says). Returns (model, deleted)."""
    model, deleted = {}, set()
    long_pack.ENABLED, was = pack, long_pack.ENABLED
    try:
        _build_source(root, model, deleted, pack)
    finally:
        long_pack.ENABLED = was
    return model, deleted


def _build_source(root: str, model: dict, deleted: set, pack: bool) -> None:
    with _ltm(root, hybrid=HybridWeights()) as s:
        if pack:
            _small_namespaces(s, model, deleted, late=False)
        items = [MemoryItem(f"c{i}", f"checkpointed memory {i}", importance=0.1 + i / 50,
                            metadata={"i": i}) for i in range(24)]
        s.put_many("ns", items, vectors=np.stack([vec(i) for i in range(24)]), ttl=None)
        for it, i in zip(items, range(24)):
            model[("ns", it.key)] = (it.text, it.importance, {"i": i}, i, None)
        for i in range(24, 30):
            s.put("ns", f"c{i}", f"ttl memory {i}", importance=0.7, metadata={"i": i},
                  vector=vec(i), ttl=3600.0)
            model[("ns", f"c{i}")] = (f"ttl memory {i}", 0.7, {"i": i}, i, 3600.0)
        s.delete("ns", "c3")
        model.pop(("ns", "c3"))
        deleted.add(("ns", "c3"))
        s.put("other", "o", "another namespace", vector=vec(99))
        model[("other", "o")] = ("another namespace", 0.5, None, 99, None)
    s = _ltm(root, hybrid=HybridWeights())  # post-checkpoint records, never checkpointed
    for i in range(30, 36):
        s.put("ns", f"p{i}", f"after the checkpoint {i}", importance=0.9, metadata={"p": i},
              vector=vec(i), ttl=600.0 if i % 2 else None)
        model[("ns", f"p{i}")] = (f"after the checkpoint {i}", 0.9, {"p": i}, i,
                                 600.0 if i % 2 else None)
    s.put("ns", "c5", "replaced after the checkpoint", importance=0.3, vector=vec(205))
    model[("ns", "c5")] = ("replaced after the checkpoint", 0.3, None, 205, None)
    s.delete("ns", "c7")
    model.pop(("ns", "c7"))
    deleted.add(("ns", "c7"))
    if pack:
        _small_namespaces(s, model, deleted, late=True)
    s.put_many("ns", [MemoryItem(f"q{i}", f"last batch {i}") for i in range(3)],
               vectors=np.stack([vec(300 + i) for i in range(3)]))
    for i in range(3):
        model[("ns", f"q{i}")] = (f"last batch {i}", 0.5, None, 300 + i, None)
    s._release()                           # what a SIGKILL leaves: no final checkpoint
    s._closed = True


def _damage(path: Path, kind: str, rng: np.random.Generator) -> str:
    raw = path.read_bytes()
    n = len(raw)
    if kind == "delete":
        path.unlink()
        return "deleted"
    if n == 0:
        return "empty file (untouched)"
    nz = np.flatnonzero(np.frombuffer(raw, np.uint8))
    used = int(nz[-1]) + 1 if len(nz) else n     # offsets land in the bytes in use, not padding
    if kind == "bitflip":
        at = int(rng.integers(0, used))
        b = bytearray(raw)
        b[at] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(b))
        return f"bit flip at {at}/{n}"
    if kind == "zero":
        at = int(rng.integers(0, used))
        ln = int(rng.integers(1, min(16, n - at) + 1))
        b = bytearray(raw)
        b[at:at + ln] = bytes(ln)
        path.write_bytes(bytes(b))
        return f"zeroed [{at}, {at + ln})/{n}"
    if kind == "truncate":
        at = int(rng.integers(0, used))
        path.write_bytes(raw[:at])
        return f"truncated to {at}/{n}"
    # torn_last: the last few bytes of the file cut (a torn final record / write)
    cut = int(rng.integers(1, min(32, n) + 1))
    path.write_bytes(raw[:n - cut])
    return f"last {cut} bytes cut ({n} -> {n - cut})"


class _Warnings(logging.Handler):
    """What memcore logs at WARNING or above (a repair on open is a report too)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record):
        self.seen.append(record.getMessage()[:200])


def damage_case(src: str, work: str, rel: str, kind: str, rng, model, deleted) -> dict:
    """Copy ``src`` to ``work``, damage its file ``rel`` one way, classify (:func:`classify`).
    Only damage to a file of the pack must name the namespaces it affects (issue 24; a
    format-2 namespace is reported by its directory)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    what = _damage(Path(work) / rel, kind, rng)
    res = {"file": rel, "kind": file_kind(rel), "damage": kind, "what": what,
           **classify(work, model, deleted)}
    if not res["kind"].startswith("pack:"):
        res["unnamed"] = []
    return res


def classify(work: str, model: dict, deleted: set) -> dict:
    """Open the store at ``work`` (reader, then writer), verify, read every key of ``model``
    and ``deleted``; then repair. Returns verdict ("detected", "harmless" or "silent"), what
    was reported and served wrong, the namespaces affected (served wrong or raised) that no
    report named (``unnamed``: open's error, ``damaged`` and ``verify()``'s entries with
    errors are the reports that name), what repair listed, lost and resurrected."""
    reported, wrong, affected, naming = [], [], set(), []
    logger = logging.getLogger("memcore")
    seen = _Warnings()
    logger.addHandler(seen)
    old, logger.propagate = logger.propagate, False
    try:
        for ro in (True, False):          # a reader, then a writer (which recovers the tail)
            _open_and_read(work, model, deleted, reported, wrong, ro, affected, naming)
    finally:
        logger.removeHandler(seen)
    # a WARNING logged on open is recorded, but only open/verify/reads count as reporting
    if any(r.startswith("CRASH") for r in reported):
        verdict = "crashed"              # an exception that is no MemcoreError
    elif reported:
        verdict = "detected"
    elif wrong:
        verdict = "silent"
    else:
        verdict = "harmless"
    quiet = _Warnings()
    logger.addHandler(quiet)
    try:
        listed, lost, resurrected, repair_err = _repair_and_check(work, model, deleted)
    finally:
        logger.removeHandler(quiet)
        logger.propagate = old
    text = "\n".join(naming)
    unnamed = sorted(ns for ns in affected if repr(ns) not in text and json.dumps(ns) not in text)
    return {"verdict": verdict, "unnamed": unnamed if verdict == "detected" else [],
            "wrong": wrong[:4], "n_wrong": len(wrong),
            "reported": reported[:2], "logged": seen.seen[:2], "repair_listed": len(listed), "lost": lost,
            "resurrected": resurrected, "repair_error": repair_err}


def _open_and_read(work, model, deleted, reported, wrong, read_only, affected, naming):
    """Open, verify, read every key, one namespace at a time: what was reported into
    ``reported`` (and the reports that can name namespaces, whole, into ``naming``), what
    was served wrong into ``wrong``, the namespaces served wrong or raising into
    ``affected``."""
    try:
        with _ltm(work, read_only=read_only, hybrid=HybridWeights()) as s:
            if s.damaged:
                reported.append(f"damaged {s.damaged}")
                naming.append(repr(s.damaged))
            errs = _report_errors(s.verify())
            reported += errs
            naming += errs
            for ns in sorted({nk[0] for nk in model} | {nk[0] for nk in deleted}):
                try:
                    got = _expect(s, {nk: v for nk, v in model.items() if nk[0] == ns},
                                  {nk for nk in deleted if nk[0] == ns})
                except MemcoreError as e:
                    reported.append(f"read raised {type(e).__name__}: {str(e)[:200]}")
                    affected.add(ns)
                    continue
                wrong += [f"{'reader' if read_only else 'writer'}: {w}" for w in got]
                if got:
                    affected.add(ns)
    except MemcoreError as e:
        reported.append(f"open raised {type(e).__name__}: {str(e)[:200]}")
        naming.append(str(e))
    except Exception as e:               # noqa: BLE001 - not a MemcoreError: a crash
        reported.append(f"CRASH {type(e).__name__}: {str(e)[:200]}")


def _repair_and_check(work, model, deleted):
    """repair() on a writer; then what is lost (not served, not listed) and resurrected."""
    listed, lost, resurrected, repair_err = [], [], [], None
    try:
        with _ltm(work, repair=True, hybrid=HybridWeights()) as s:
            listed = s.repair() or []
            rep = json.dumps(listed, default=str) + json.dumps(s.repair_report, default=str)
            for (ns, key), (text, *_rest) in model.items():
                try:
                    m = s.get(ns, key)
                except MemcoreError:
                    m = None
                if (m is None or m.text != text) and key not in rep:
                    lost.append(f"{ns}/{key}")
            for ns, key in deleted:
                if s.get(ns, key) is not None:
                    resurrected.append(f"{ns}/{key} (deleted)")
            m = s.get("ns", "c5")              # replaced after the checkpoint
            if m is not None and m.text != model[("ns", "c5")][0]:
                resurrected.append("ns/c5 (replaced) old value")
    except MemcoreError as e:
        repair_err = f"{type(e).__name__}: {str(e)[:150]}"
    except Exception as e:               # noqa: BLE001 - not a MemcoreError: a crash
        repair_err = f"CRASH {type(e).__name__}: {str(e)[:150]}"
    return listed, lost, resurrected, repair_err


def damage_cases(base: str, cases: int, seed: int, log,
                 pack: bool = False) -> tuple[list[dict], list[str]]:
    """``cases`` damage cases of the store :func:`build_source` writes, every file kind in
    turn (``pack``: the pack's files and the catalog only)."""
    rng = np.random.default_rng(seed)
    src = os.path.join(base, "src")
    model, deleted = build_source(src, pack)
    by_kind = defaultdict(list)
    for p in sorted(Path(src).rglob("*")):
        rel = str(p.relative_to(src))
        if pack and not (file_kind(rel).startswith("pack:") or rel.startswith("catalog.")):
            continue
        if p.is_file() and p.name != "LOCK":
            by_kind[file_kind(str(p.relative_to(src)))].append(str(p.relative_to(src)))
    kinds = sorted(by_kind)
    files = [f for k in kinds for f in by_kind[k]]
    out = []
    work = os.path.join(base, "case")
    for c in range(cases):
        # every file kind in turn, each damage in turn per kind; a seeded file of that kind
        group = by_kind[kinds[c % len(kinds)]]
        rel = group[int(rng.integers(0, len(group)))]
        kind = DAMAGES[(c // len(kinds)) % len(DAMAGES)]
        out.append(damage_case(src, work, rel, kind, rng, model, deleted))
        if (c + 1) % 50 == 0:
            log(f"damage case {c + 1}/{cases}: silent so far "
                f"{sum(r['verdict'] == 'silent' for r in out)}")
    return out, files


# ------------------------------------------------------------------------------ report

def render(res: dict) -> str:
    lt, sm, dm = res["ltm"], res["sm"], res["damage"]
    med = lambda xs: float(np.median(xs)) if xs else 0.0  # noqa: E731
    lines = [f"# Fault campaign {res['date']} (seed {res['seed']})", "",
             f"Code: `{res['commit']}`. Command: `{res['command']}`. Wall {res['wall']:.0f} s; "
             f"load (uptime) before: {res['load_before']}; after: {res['load_after']}.", "",
             "## SIGKILL rounds", "",
             "| store | rounds | acknowledged writes | lost / wrong | verify() dirty | "
             "median s/round |", "|---|---|---|---|---|---|",
             f"| LongTermMemory{' (pack)' if res.get('pack') else ''} | {lt['rounds']} | {lt['acked']} | {lt['failing_rounds']} rounds "
             f"| {lt['verify_dirty']} | {med(lt['times']):.3f} |",
             f"| SemanticMemory{' (pack)' if res.get('pack') else ''} | {sm['rounds']} | {sm['acked']} | {len(sm['lost'])} keys | "
             f"{sm['verify_dirty']} | {med(sm['times']):.3f} |", ""]
    for f in (lt["failures"] + sm["lost"])[:30]:
        lines.append(f"- {f}")
    lines += ["", "LongTermMemory kills landed in: " + ", ".join(
        f"{k} {v}" for k, v in sorted(lt["killed_in"].items(), key=lambda kv: -kv[1]))
        + (f"; namespace `grow` promoted to its own directory {lt['promotions']} times"
           if res.get("pack") else "") + "."]
    lines += ["", "## Damage cases", "",
              f"{len(dm)} cases over {len(res['files'])} files; median "
              f"{med(res['damage_times']):.3f} s/case.", "",
              "| file kind | damage | cases | detected | harmless | silent | crashed (no "
              "MemcoreError) | lost acknowledged after repair | resurrected after repair | "
              "detected, an affected namespace unnamed |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    agg = defaultdict(lambda: [0, 0, 0, 0, 0, 0, 0, 0])
    for r in dm:
        a = agg[(r["kind"], r["damage"])]
        a[0] += 1
        a[1 + ("detected", "harmless", "silent", "crashed").index(r["verdict"])] += 1
        a[5] += len(r["lost"])
        a[6] += len(r["resurrected"])
        a[7] += bool(r["unnamed"])
    tot = [0] * 8
    for (k, d), a in sorted(agg.items()):
        lines.append(f"| {k} | {d} | " + " | ".join(map(str, a)) + " |")
        tot = [x + y for x, y in zip(tot, a)]
    lines.append("| **all** | | " + " | ".join(f"**{x}**" for x in tot) + " |")
    silent = [r for r in dm if r["verdict"] == "silent"]
    lines += ["", f"## Silent cases ({len(silent)}: verify() clean, some result wrong)", ""]
    for r in silent:
        lines.append(f"- `{r['file']}` {r['what']}: {r['n_wrong']} wrong; "
                     f"{'; '.join(r['wrong'][:2])}; repair listed {r['repair_listed']}"
                     f"{'; lost ' + ', '.join(r['lost'][:5]) if r['lost'] else ''}"
                     f"{'; RESURRECTED ' + ', '.join(r['resurrected']) if r['resurrected'] else ''}")
    crashed = [r for r in dm if r["verdict"] == "crashed"]
    lines += ["", f"## Crashed cases ({len(crashed)}: an exception that is no MemcoreError)", ""]
    for r in crashed:
        lines.append(f"- `{r['file']}` {r['what']}: {r['reported'][0][:200]}")
    unnamed = [r for r in dm if r["unnamed"]]
    lines += ["", f"## Detected cases whose reports name no affected namespace "
              f"({len(unnamed)})", ""]
    for r in unnamed[:30]:
        lines.append(f"- `{r['file']}` {r['what']}: unnamed {r['unnamed'][:5]}; "
                     f"{r['reported'][0][:200] if r['reported'] else ''}")
    other = [r for r in dm if r["verdict"] not in ("silent", "crashed") and (r["lost"] or r["resurrected"]
                                                           or r["repair_error"])]
    lines += ["", f"## Non-silent cases where repair lost, resurrected or failed ({len(other)})",
              ""]
    for r in other[:60]:
        lines.append(f"- `{r['file']}` {r['what']} ({r['verdict']}): lost {r['lost'][:5]} "
                     f"resurrected {r['resurrected']} repair error {r['repair_error']}")
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kills", type=int, default=300, help="SIGKILL rounds (LTM 3/4, SM 1/4)")
    p.add_argument("--damage", type=int, default=400, help="damage cases")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--big-every", type=int, default=100,
                   help="every Nth LTM round puts a 65,600-row batch (0: never)")
    p.add_argument("--dir", default=None, help="scratch directory (default a temp dir)")
    p.add_argument("--pack", action="store_true",
                   help="format 3: the pack of small namespaces on; kill rounds write many "
                        "small namespaces, damage hits the pack's files and the catalog")


def campaign(kills: int, damage: int, seed: int, big_every: int = 100, scratch=None,
             log=print, pack: bool = False) -> dict:
    """The whole campaign; ``pack``: with the pack of small namespaces on (format 3) --
    the LongTermMemory rounds run :func:`_pack_child`, the SemanticMemory rounds write to
    the pack, and the damage cases hit the pack's files and the catalog; without it, the
    format-2 namespace directories (the pack off, whatever ``MEMCORE_PACK`` says)."""
    base = tempfile.mkdtemp(prefix="faults-", dir=scratch)
    was = long_pack.ENABLED
    long_pack.ENABLED = pack                        # the forked children inherit it
    try:
        t0 = time.perf_counter()
        n_sm = kills // 4
        lt = ltm_kill_rounds(os.path.join(base, "ltm"), kills - n_sm, seed, big_every, log,
                             *((_pack_child, "LTM pack") if pack else ()))
        sm = sm_kill_rounds(os.path.join(base, "sm"), n_sm, seed, log)
        t1 = time.perf_counter()
        dm, files = damage_cases(os.path.join(base, "dmg"), damage, seed, log, pack)
        dt = (time.perf_counter() - t1) / max(damage, 1)
        return {"ltm": lt, "sm": sm, "damage": dm, "files": files, "pack": pack,
                "damage_times": [dt], "wall": time.perf_counter() - t0, "seed": seed}
    finally:
        long_pack.ENABLED = was
        shutil.rmtree(base, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    import datetime
    import subprocess
    if args.quick:
        args.kills, args.damage, args.big_every = min(args.kills, 8), min(args.damage, 40), 0
    load0 = os.getloadavg()
    res = campaign(args.kills, args.damage, args.seed, args.big_every, args.dir,
                   log=lambda m: print(m, file=sys.stderr, flush=True), pack=args.pack)
    res["load_before"] = " ".join(f"{x:.2f}" for x in load0)
    res["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    res["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        res["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        res["commit"] = "?"
    res["command"] = (f"python -m bench.faults --kills {args.kills} --damage {args.damage} "
                      f"--seed {args.seed} --big-every {args.big_every}"
                      f"{' --pack' if args.pack else ''}")
    text = render(res)
    out = args.out or str(REPO / "bench" / "results" /
                          f"faults-{time.strftime('%Y%m%d', time.gmtime())}.md")
    if os.path.isdir(out):
        out = os.path.join(out, f"faults-{time.strftime('%Y%m%d', time.gmtime())}.md")
    Path(out).write_text(text)
    print(text)
    silent = sum(r["verdict"] in ("silent", "crashed") or bool(r["unnamed"])
                 for r in res["damage"])
    bad = res["ltm"]["failing_rounds"] + len(res["sm"]["lost"]) + silent
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None, help="the markdown report's path")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
