"""Hybrid-index upkeep at write time (issue 25, item 1): ingest by ``put_many`` with no
search, the process then killed (SIGKILL: no ``close``), then a fresh process opens the store
and runs its first hybrid search.

Run ``python bench/index_upkeep.py --n 100000 --rounds 2 [--other-root DIR]``: each round runs
the two phases for this checkout and, with ``--other-root`` (a source tree of another commit,
e.g. ``git archive <main> | tar -x -C DIR``), for that one, interleaved; each phase is its own
interpreter. Corpus: ``n`` synthetic robot-log texts (8-14 words from a 3,000-word vocabulary
plus the row number), speaker (6 names) and episode (rows // 20) metadata, hashing 384-d
vectors computed before the timed ``put_many`` calls (``--chunk`` memories each),
``HybridWeights.no_model()`` on the store. Each process first loads the numba kernels on a
three-memory throwaway store (timed apart), so the figures are the store's own. The load
average (``os.getloadavg``) is recorded with every phase.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NS = ("robot",)
QUERIES = ["where did Ann leave the red kettle", "battery level of the dock", "door 4711",
           "what did Bob say about the garden", "lamp in the hallway at night"]


def _texts(n: int, seed: int = 7) -> tuple:
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(3000)] + ["red", "kettle", "door", "dock", "battery",
                                              "garden", "lamp", "hallway", "night", "Ann"]
    speakers = ["Ann", "Bob", "Cleo", "Dev", "Eli", "Fay"]
    texts, metas = [], []
    for i in range(n):
        words = rng.choice(len(vocab), size=int(rng.integers(8, 15)))
        texts.append(" ".join(vocab[j] for j in words) + f" {i}")
        metas.append({"speaker": speakers[i % 6], "episode": i // 20})
    return texts, metas


def _warm(hw) -> float:
    """Load the kernels on a throwaway store; returns seconds."""
    from memcore import HashingEmbedder, LongTermMemory, MemoryItem

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        with LongTermMemory(d, HashingEmbedder(dim=384), hybrid=hw) as s:
            s.put_many(NS, [MemoryItem(key=str(i), text=f"warm text {i}") for i in range(3)])
            s.search(NS, "warm", touch=False)
    return time.perf_counter() - t0


def phase_ingest(root: str, n: int, chunk: int) -> None:
    from memcore import HashingEmbedder, HybridWeights, LongTermMemory, MemoryItem

    hw = HybridWeights.no_model()
    warm = _warm(hw)
    emb = HashingEmbedder(dim=384)
    texts, metas = _texts(n)
    vecs = emb.encode(texts)
    items = [MemoryItem(key=f"m{i}", text=t, metadata=m) for i, (t, m) in
             enumerate(zip(texts, metas))]
    s = LongTermMemory(root, emb, hybrid=hw, durability="flush")
    t0 = time.perf_counter()
    for a in range(0, n, chunk):
        s.put_many(NS, items[a:a + chunk], vectors=vecs[a:a + chunk])
    took = time.perf_counter() - t0
    print(json.dumps({"phase": "ingest", "n": n, "chunk": chunk, "put_many_s": took,
                      "kernel_warmup_s": warm, "load": os.getloadavg()}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)          # no close: what a crash leaves


def phase_search(root: str) -> None:
    import numpy as np

    from memcore import HashingEmbedder, HybridWeights, LongTermMemory

    hw = HybridWeights.no_model()
    warm = _warm(hw)
    t0 = time.perf_counter()
    s = LongTermMemory(root, HashingEmbedder(dim=384), hybrid=hw, read_only=True)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    s.search(NS, QUERIES[0], top_k=10, touch=False)
    first = time.perf_counter() - t0
    lat = []
    for q in QUERIES * 4:
        t0 = time.perf_counter()
        s.search(NS, q, top_k=10, touch=False)
        lat.append(time.perf_counter() - t0)
    s.close()
    print(json.dumps({"phase": "search", "open_s": opened, "first_hybrid_s": first,
                      "p50_ms": float(np.median(lat)) * 1e3, "kernel_warmup_s": warm,
                      "load": os.getloadavg()}), flush=True)


def _run(src: str, args: list) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env,
                         capture_output=True, text=True, timeout=3600)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(lines[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=float, default=1e5)
    p.add_argument("--chunk", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--other-root", default=None, help="source tree of the other commit")
    p.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    n = int(a.n)
    if a.phase == "ingest":
        phase_ingest(a.root, n, a.chunk)
        return 0
    if a.phase == "search":
        phase_search(a.root)
        return 0
    here = str(Path(__file__).resolve().parents[1])
    trees = [("this", here)] + ([("other", a.other_root)] if a.other_root else [])
    results = []
    for r in range(a.rounds):
        for name, src in (trees if r % 2 == 0 else trees[::-1]):
            with tempfile.TemporaryDirectory() as d:
                root = os.path.join(d, "m")
                ing = _run(src, ["--phase", "ingest", "--root", root, "--n", str(n),
                                 "--chunk", str(a.chunk)])
                srch = _run(src, ["--phase", "search", "--root", root])
                row = {"tree": name, "round": r, **{f"ingest_{k}": v for k, v in ing.items()},
                       **{f"search_{k}": v for k, v in srch.items()}}
                results.append(row)
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
