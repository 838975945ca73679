"""One large namespace with the pack of small namespaces on and off (format 3 is the default).

``python -m bench.one_namespace --rows 100000 --rounds 3 --out FILE.md``: one namespace of
``rows`` memories (hashing embedder, 384-d, ``put_many`` in batches of 1000) written to a new
store with ``MEMCORE_PACK=1`` (the default) and ``MEMCORE_PACK=0``, each run in its own
subprocess, interleaved ABAB (``--alternate``: ABBA): ingest s (the writer, close included), open s (a new process's
``LongTermMemory(path, embedder)``), the first search ms (kernels loaded from numba's cache),
search p50/p99 ms over ``queries`` searches (top 5, ``touch=False``), the process CPU
seconds of the ingest and mean CPU ms of a search (less sensitive to the load), the store
header's
version and the namespace directories written, and the 1-minute load average before each
run. Medians per system. A first write of more than ``PACK_MAX`` rows never enters the pack,
so both should write the same files: this checks that nothing else changed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SYSTEMS = {"pack-on": "1", "pack-off": "0"}

CHILD = r"""
import json, os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
load = os.getloadavg()[0]
from memcore import HashingEmbedder, LongTermMemory, MemoryItem
emb = HashingEmbedder(dim=384)
texts = [f"memory {i} about topic {i % 97} and item {i % 13}" for i in range(n)]
t0, c0 = time.perf_counter(), time.process_time()
with LongTermMemory(root, emb) as s:
    for b in range(0, n, 1000):
        s.put_many("big", [MemoryItem(f"k{i}", texts[i]) for i in range(b, min(n, b + 1000))])
ingest, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"ingest_s": ingest, "ingest_cpu_s": cpu, "load": load}))
"""

READ = r"""
import json, os, random, sys, time
root, queries = sys.argv[1], int(sys.argv[2])
from memcore import HashingEmbedder, LongTermMemory
emb = HashingEmbedder(dim=384)
emb.encode(["warm the embedder"])
t0 = time.perf_counter()
s = LongTermMemory(root, emb)
opened = time.perf_counter() - t0
rng = random.Random(0)
t0 = time.perf_counter()
s.search("big", "topic 1 item 2", top_k=5, touch=False)
first = time.perf_counter() - t0
lat, c0 = [], time.process_time()
for _ in range(queries):
    q = f"topic {rng.randrange(97)} item {rng.randrange(13)}"
    t0 = time.perf_counter()
    s.search("big", q, top_k=5, touch=False)
    lat.append(time.perf_counter() - t0)
cpu = (time.process_time() - c0) / queries
s.close()
lat.sort()
head = json.load(open(os.path.join(root, "memcore.json")))
dirs = sorted(os.listdir(os.path.join(root, f"ns.{head['epoch']}")))
print(json.dumps({"open_s": opened, "first_search_ms": first * 1e3,
                  "p50_ms": lat[len(lat) // 2] * 1e3, "search_cpu_ms": cpu * 1e3,
                  "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
                  "version": head["version"], "dirs": dirs}))
"""


def run_one(pack: str, rows: int, queries: int) -> dict:
    """One run in fresh subprocesses (a writer, then a reader-writer) with ``MEMCORE_PACK``
    set to ``pack``; returns the figures (see the module docstring)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo, MEMCORE_PACK=pack)
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "s")
        out = {}
        for code, args in ((CHILD, [root, str(rows)]),
                           (READ, [root, str(queries)])):
            got = subprocess.run([sys.executable, "-c", code, *args], env=env,
                                 capture_output=True, text=True, check=True)
            out.update(json.loads(got.stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--out", default=None, help="write the markdown table here too")
    p.add_argument("--alternate", action="store_true",
                   help="ABBA: every second round runs the systems in reverse order")
    a = p.parse_args(argv)
    runs: dict = {name: [] for name in SYSTEMS}
    lines = ["| round | system | load (1 min) | ingest s | ingest CPU s | open s | "
             "first search ms | search p50 ms | p99 ms | search CPU ms | header version | "
             "directories |", "|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|"]
    for r in range(a.rounds):
        order = list(SYSTEMS.items())
        for name, pack in (order if r % 2 == 0 or not a.alternate else order[::-1]):
            got = run_one(pack, a.rows, a.queries)
            runs[name].append(got)
            lines.append(f"| {r + 1} | {name} | {got['load']:.2f} | {got['ingest_s']:.2f} | "
                         f"{got['ingest_cpu_s']:.2f} | {got['open_s']:.4f} | "
                         f"{got['first_search_ms']:.1f} | {got['p50_ms']:.3f} | "
                         f"{got['p99_ms']:.3f} | {got['search_cpu_ms']:.3f} | "
                         f"{got['version']} | "
                         f"{', '.join(d[:12] for d in got['dirs'])} |")
            print(lines[-1], flush=True)
    keys = ("ingest_s", "ingest_cpu_s", "open_s", "first_search_ms", "p50_ms", "p99_ms",
            "search_cpu_ms")
    lines += ["", "| system | " + " | ".join(keys) + " |", "|:--|" + "--:|" * len(keys)]
    for name, rs in runs.items():
        med = [statistics.median(x[k] for x in rs) for k in keys]
        lines.append(f"| {name} (median of {len(rs)}) | "
                     + " | ".join(f"{v:.4g}" for v in med) + " |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
