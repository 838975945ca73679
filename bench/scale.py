"""``memcore bench scale``: one namespace of 1e5..1e7 memories, memcore beside FAISS (issues
14 and 25).

Two workloads (``--workloads``), run back to back per n, and ``--repeat`` rounds of all of
them (interleaved: round 1 of every workload and n, then round 2, ...):

- **recombined**: :func:`bench.datasets.scale_turns` -- the LoCoMo dev turns, then
  recombined synthetic episodes (mostly distinct texts);
- **repetitive**: :func:`bench.datasets.repetitive_turns` -- the LoCoMo dev turns repeated
  with a ``" #<repeat>"`` suffix (the way a robot's observations repeat; ~n / 5,900 copies of
  each turn), each repeat of a session an episode of its own.

Protocol (per workload and n, every phase in its own subprocess so its peak RSS is its own):

1. **corpus** (cached): the workload's turns with ``speaker``/``episode`` metadata, a seeded
   importance per memory and precomputed vectors (hashing embedder, or MiniLM for a subset
   tiled with seeded jitter, ``--vectors minilm``), kept as ``.npy`` memmaps under
   ``bench/results/cache/scale/`` so reruns skip generation.
2. **ingest**: ``put_many`` of the precomputed vectors + texts + metadata into a new
   :class:`~memcore.LongTermMemory` on disk, one namespace, ``--chunk`` memories per call, the
   store's clock advancing one hour per call (so recency varies); then the first hybrid search
   in the same process (what put_many left to build: the hybrid index); then ``close``.
   Ingest rate = n / (put_many + index + close). Disk = allocated bytes of the store folder
   (``du``) / n.
3. **memcore**: the store's files are fsynced and evicted from the page cache
   (``posix_fadvise(DONTNEED)``, no root needed), then a fresh process opens it (cold open),
   runs the first hybrid search (the index build), then ``--queries``
   LoCoMo questions with the hybrid preset (``HybridWeights.no_model()`` for hashing vectors,
   ``hybrid()`` for MiniLM) and with the similarity preset, ``top_k=10``, ``touch=False``, query
   vectors precomputed (as for FAISS). Peak RSS covers open + first search + every search.
   Each memcore process first loads the numba kernels on a throwaway 3-memory store (timed
   apart as ``kernel_warmup_s``), so open and first-search times are the store's own.
4. **open-warm**: three more fresh processes open the (now cached) store and close it; the
   median is reported.
5. **faiss-flat**: ``IndexFlatIP`` over the same vectors; each query's top candidates are
   re-ranked in NumPy by memcore's fused decay score (similarity + recency + importance,
   :class:`~memcore.DecayWeights` defaults), widening the candidate list until the result is
   provably exact -- the same ranking as memcore's similarity preset, which the run checks.
   Exact similarity top-10 from chunked NumPy brute force gives recall@10.
6. **hnsw** (unless ``--skip-hnsw``): ``IndexHNSWFlat`` (M=32, inner product), built once per
   corpus and cached on disk; efSearch 64 and 128, recall@10 against exact similarity.
7. **fresh first search** (``--fresh-first``, default ``clean,unclean``): per writer exit, a
   new store, a process that only ingests (the same ``put_many`` calls, no search), then
   either ``close()`` and a normal exit (*clean*) or SIGKILL to itself right after the last
   ``put_many`` returned (*unclean*: no close, no atexit); its page cache is evicted; then a
   fresh process opens the store and times its first hybrid search (no search before in any
   process), then a second one; after a clean exit, another fresh process does the same with
   the store's files in the page cache (a process restart rather than a reboot).

Ratios memcore / FAISS flat are of the same run. Results: ``bench/results/scale-<UTC>.{json,md,
png}``. ``--plan`` prints the estimated RAM, disk and time per n and refuses what will not fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.env import environment, repo_root, thread_env
from bench.tick import _rss_mb

__all__ = ["add_arguments", "run", "plan", "corpus_dir", "agreement"]

NAMESPACE = ("bench", "scale")
TOP_K = 10
DIM = 384
#: The store's clock: put_many call i happens at T0 + i * STEP; queries at the end + 60 s.
T0 = 1_700_000_000.0
STEP = 3600.0
HNSW_M = 32
HNSW_EFS = (64, 128)
#: Fresh processes timing a warm open (the median is reported; a loaded 2-core machine is noisy).
WARM_OPENS = 3

#: Per-memory costs for ``--plan``, measured on the 2-core machine (load average ~4) at commit
#: 04b2bb7, the store before the issue-14 rewrite: 1e6 memories, hashing vectors
#: (bench/results/scale-20261201T213036Z.json), rounded up. Update them from a new run's JSON
#: when the store changes; ``--force`` runs past the estimate.
COST = {
    "store_disk_bytes": 1_900,        # du(store) / n: 1,820 measured
    "memcore_rss_bytes": 13_700,      # peak RSS of the ingest process (13.7 GB; searching: 12.1)
    "memcore_rss_base": 400e6,
    "text_bytes": 130,                # UTF-8 bytes of a turn + offsets, in the cache
    "generate_s": 35e-6,              # corpus + hashing vectors, per memory
    "ingest_s": 180e-6,               # put_many + index + close, per memory
    "first_search_s": 80e-6,          # hybrid index build on the first search, per memory
    "search_s": 3.3e-7 + 2.3e-7 + 3.5e-7,  # hybrid + similarity + flat, per memory and query
    "hnsw_build_s": 540e-6,           # single-threaded, per memory
    "hnsw_bytes": DIM * 4 + 2 * HNSW_M * 4 + 60,
}


# --- the parent --------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", default=None,
                   help="comma-separated store sizes, e.g. 1e5,1e6 (default 1e5,1e6; --quick 1e3)")
    p.add_argument("--queries", type=int, default=None,
                   help="LoCoMo questions timed per preset and peer (default 200; --quick 20)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for numba, BLAS and FAISS in every process (default 1)")
    p.add_argument("--skip-hnsw", action="store_true", help="no IndexHNSWFlat rows")
    p.add_argument("--approximate", action="store_true",
                   help="also measure memcore's opt-in approximate path (ApproximateSearch "
                        "defaults): index build, p50/p99, recall@10 against the exact decay ranking")
    p.add_argument("--rebuild-hnsw", action="store_true",
                   help="build the HNSW index even if a cached one exists")
    p.add_argument("--vectors", choices=("hashing", "minilm"), default="hashing",
                   help="hashing: HashingEmbedder(dim=384) of every text, HybridWeights.no_model(); "
                        "minilm: the default MiniLM variant for the first --embed-limit texts "
                        "(embedding cache), seeded jitter of those rows beyond, "
                        "HybridWeights.hybrid() (default hashing)")
    p.add_argument("--embed-limit", type=int, default=20_000,
                   help="--vectors minilm: texts embedded by the model (default 20000)")
    p.add_argument("--chunk", type=int, default=50_000,
                   help="memories per put_many call (default 50000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", default="recombined,repetitive",
                   help="comma-separated data sets: recombined (LoCoMo turns, then recombined "
                        "episodes), repetitive (LoCoMo turns repeated with a suffix) "
                        "(default both)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every workload and n, interleaved; the report gives each "
                        "round and the medians (default 1)")
    p.add_argument("--fresh-first", default="clean,unclean",
                   help="writer exits after which a fresh process times its first hybrid "
                        "search following a bulk put_many: clean, unclean (SIGKILL), both "
                        "comma-separated, or none (default clean,unclean)")
    p.add_argument("--plan", action="store_true",
                   help="print the estimated RAM, disk and time per n and exit")
    p.add_argument("--force", action="store_true",
                   help="run even an n the plan says will not fit in RAM or on disk")
    p.add_argument("--keep-store", action="store_true",
                   help="keep the memcore store under the cache after the run")


def parse_sizes(text: str) -> list:
    """``"1e5,1e6"`` -> ``[100000, 1000000]``.

    Raises
    ------
    ValueError
        If an entry is not a positive integer.
    """
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        value = float(part)
        if not (math.isfinite(value) and value >= 1 and value == int(value)):
            raise ValueError(f"--n entries must be positive integers, got {part!r}")
        out.append(int(value))
    if not out:
        raise ValueError(f"--n names no size: {text!r}")
    return out


def cache_root() -> Path:
    from bench.datasets import cache_dir

    path = cache_dir() / "scale"
    path.mkdir(parents=True, exist_ok=True)
    return path


WORKLOADS = ("recombined", "repetitive")
EXITS = ("clean", "unclean")


def corpus_dir(n: int, vectors: str, seed: int, embed_limit: int,
               workload: str = "recombined") -> Path:
    """Where the corpus of size ``n`` is cached (one folder per workload, n, vectors kind and
    seed; the recombined workload keeps its folder names of before issue 25)."""
    tag = f"{vectors}-{DIM}" + (f"-e{embed_limit}" if vectors == "minilm" else "")
    prefix = "" if workload == "recombined" else f"{workload}-"
    return cache_root() / f"{prefix}{tag}-s{seed}-n{n}"


def parse_choices(text: str, allowed: tuple, what: str) -> list:
    """``"a,b"`` -> ``["a", "b"]``, each in ``allowed`` (``"none"`` -> ``[]``).

    Raises
    ------
    ValueError
        If an entry is not allowed.
    """
    out = [x.strip() for x in text.split(",") if x.strip()]
    if out == ["none"]:
        return []
    bad = [x for x in out if x not in allowed]
    if bad or len(set(out)) != len(out):
        raise ValueError(f"{what} must be distinct names from {', '.join(allowed)}, got {text!r}")
    return out


def plan(n: int, queries: int, hnsw: bool, *, mem_available: float | None = None,
         disk_free: float | None = None, corpus_cached: bool = False) -> dict:
    """Estimated peak RAM, disk and time of one n (from :data:`COST`) and whether it fits.

    Parameters
    ----------
    n : int
    queries : int
    hnsw : bool
    mem_available, disk_free : float, optional
        Bytes; psutil's available memory and the free space of the cache's disk when None.
    corpus_cached : bool
        The corpus is already cached (no generation time or new disk for it).

    Returns
    -------
    dict
        ``vectors_bytes``, ``cache_bytes``, ``store_bytes``, ``disk_bytes`` (new), per-phase
        ``rss_bytes`` and their max ``peak_rss_bytes``, ``time_s``, and ``fits`` with
        ``reasons`` when it does not.
    """
    vectors = n * DIM * 4
    cache = vectors + n * (COST["text_bytes"] + 8 + 4 + 4)
    store = n * COST["store_disk_bytes"]
    hnsw_bytes = n * COST["hnsw_bytes"] if hnsw else 0
    disk = store + (0 if corpus_cached else cache) + hnsw_bytes
    rss = {"generate": 3 * n * COST["text_bytes"] + 300e6,   # texts as Python strings
           "ingest": COST["memcore_rss_base"] + n * COST["memcore_rss_bytes"],
           "memcore": COST["memcore_rss_base"] + n * COST["memcore_rss_bytes"],
           "faiss-flat": 300e6 + vectors + n * 24,
           "hnsw": (300e6 + hnsw_bytes) if hnsw else 0}
    seconds = ((0 if corpus_cached else n * COST["generate_s"]) + n * COST["ingest_s"]
               + n * COST["first_search_s"] + n * queries * COST["search_s"]
               + (n * COST["hnsw_build_s"] if hnsw else 0))
    if mem_available is None or disk_free is None:
        import psutil

        mem_available = psutil.virtual_memory().available if mem_available is None else mem_available
        disk_free = shutil.disk_usage(cache_root()).free if disk_free is None else disk_free
    peak = max(rss.values())
    reasons = []
    if peak > 0.9 * mem_available:
        worst = max(rss, key=rss.get)
        reasons.append(f"peak RSS ~{peak / 1e9:.1f} GB ({worst}) > 90% of the "
                       f"{mem_available / 1e9:.1f} GB available")
    if disk > 0.9 * disk_free:
        reasons.append(f"disk ~{disk / 1e9:.1f} GB > 90% of the {disk_free / 1e9:.1f} GB free")
    return {"n": n, "vectors_bytes": vectors, "cache_bytes": cache, "store_bytes": store,
            "hnsw_bytes": hnsw_bytes, "disk_bytes": disk, "rss_bytes": rss,
            "peak_rss_bytes": peak, "time_s": seconds, "fits": not reasons, "reasons": reasons}


def plan_markdown(plans: list) -> str:
    from bench.report import markdown_table

    rows = [[f"{p['n']:,}", f"{p['vectors_bytes'] / 1e9:.2f}", f"{p['disk_bytes'] / 1e9:.2f}",
             f"{p['peak_rss_bytes'] / 1e9:.1f}", f"{p['time_s'] / 60:.1f}",
             "yes" if p["fits"] else "NO: " + "; ".join(p["reasons"])] for p in plans]
    return markdown_table(["n", "vectors GB", "new disk GB", "peak RSS GB", "time min", "fits"],
                          rows)


def _run_worker(phase: str, args: list, threads: int, killed_ok: bool = False) -> dict:
    env = thread_env(threads)
    env["PYTHONPATH"] = os.pathsep.join([str(repo_root()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.scale", "--worker", phase,
                               "--result", str(out), "--threads", str(threads), *args],
                              cwd=repo_root(), env=env)
        killed = killed_ok and proc.returncode == -9
        if (proc.returncode != 0 and not killed) or out.stat().st_size == 0:
            raise RuntimeError(f"scale worker {phase} failed (exit {proc.returncode}); see stderr")
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


def evict_page_cache(path: Path) -> int:
    """fsync every file under ``path`` and drop its pages from the page cache (best effort:
    ``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no root); returns the files touched."""
    done = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return done


def du_bytes(path: Path) -> tuple:
    """``(allocated, apparent)`` bytes of every file under ``path`` (``du`` and ``du -b``)."""
    alloc = apparent = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            alloc += st.st_blocks * 512
            apparent += st.st_size
    return alloc, apparent


def agreement(memcore_ids: np.ndarray, flat_ids: np.ndarray, flat_scores: np.ndarray,
              vectors: np.ndarray, qvecs: np.ndarray, bonus: np.ndarray, tol: float = 1e-4) -> float:
    """Fraction of queries whose memcore top-k equals the exact FAISS-flat + decay top-k, ties
    tolerated: a row in one list and not the other must score within ``tol`` of the k-th.

    Parameters
    ----------
    memcore_ids, flat_ids : ndarray of shape (n_queries, k), int64, -1 padded
    flat_scores : ndarray of shape (n_queries, k), float64
    vectors : ndarray of shape (n, dim), float32
    qvecs : ndarray of shape (n_queries, dim), float32
    bonus : ndarray of shape (n,), float64
        Each row's recency + importance terms at query time.
    """
    ok = 0
    for q in range(memcore_ids.shape[0]):
        m = [int(i) for i in memcore_ids[q] if i >= 0]
        f = [int(i) for i in flat_ids[q] if i >= 0]
        if len(m) != len(f):
            continue
        kth = float(flat_scores[q, len(f) - 1]) if f else 0.0
        diff = set(m).symmetric_difference(f)
        fused = {i: float(vectors[i] @ qvecs[q]) + float(bonus[i]) for i in diff}
        if all(abs(fused[i] - kth) <= tol for i in diff):
            ok += 1
    return ok / max(memcore_ids.shape[0], 1)


def bonus_terms(n: int, chunk: int, importance: np.ndarray) -> tuple:
    """``(bonus, now)``: each row's recency + importance terms under the DecayWeights defaults,
    with row ``i`` written at ``T0 + (i // chunk) * STEP`` and the queries at ``now``."""
    from memcore.types import DecayWeights

    w = DecayWeights()
    calls = max(math.ceil(n / chunk), 1)
    now = T0 + calls * STEP + 60.0
    last = T0 + (np.arange(n) // chunk) * STEP
    bonus = (w.w_recency * np.exp2(-(now - last) / w.half_life)
             + w.w_importance * importance[:n].astype(np.float64))
    return bonus, now


def run(args: argparse.Namespace) -> int:
    """Parent: plan, then per n: corpus, ingest, memcore, open-warm, FAISS flat, HNSW; report."""
    from bench.report import default_out_dir, write_run

    try:
        sizes = parse_sizes(args.n or ("1e3" if args.quick else "1e5,1e6"))
        workloads = parse_choices(args.workloads, WORKLOADS, "--workloads")
        exits = parse_choices(args.fresh_first, EXITS, "--fresh-first")
        if not workloads:
            raise ValueError("--workloads names no workload")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    queries = args.queries or (20 if args.quick else 200)
    if queries < 1 or args.chunk < 1 or args.threads < 1 or args.repeat < 1:
        print("error: --queries, --chunk, --threads and --repeat must be >= 1", file=sys.stderr)
        return 2
    plans = [plan(n, queries, not args.skip_hnsw,
                  corpus_cached=all((corpus_dir(n, args.vectors, args.seed, args.embed_limit, w)
                                     / "meta.json").exists() for w in workloads))
             for n in sizes]
    for p in plans:     # every workload and round, with the fresh-first writers' ingests
        p["time_s"] = len(workloads) * args.repeat * (
            p["time_s"] + len(exits) * p["n"] * (COST["ingest_s"] + COST["first_search_s"]))
    print(plan_markdown(plans), file=sys.stderr)
    if args.plan:
        return 0
    refused = [p for p in plans if not p["fits"]]
    if refused and not args.force:
        for p in refused:
            print(f"error: n={p['n']:,} will not fit: {'; '.join(p['reasons'])} "
                  "(--force runs it anyway)", file=sys.stderr)
        return 1
    env = environment(args.threads)   # at the start: the commit and load the run began with
    data = ["--data", str(args.data)] if args.data else []
    common = ["--vectors", args.vectors, "--seed", str(args.seed), "--chunk", str(args.chunk),
              "--embed-limit", str(args.embed_limit), "--queries", str(queries), *data]
    results, notes = [], []
    for run_i in range(args.repeat):
        for n in sizes:
            for workload in workloads:
                try:
                    r = _run_n(n, args, common, notes, workload, exits)
                    r["round"] = run_i
                    results.append(r)
                except RuntimeError as err:
                    notes.append(f"{workload} n={n} round {run_i}: {err}")
                    print(f"warning: {notes[-1]}", file=sys.stderr)
    if not results:
        print("error: no n completed; nothing written", file=sys.stderr)
        return 1
    payload = {"suite": "scale", "env": env, "queries": queries,
               "top_k": TOP_K, "vectors": args.vectors, "chunk": args.chunk, "seed": args.seed,
               "hybrid_preset": "no_model" if args.vectors == "hashing" else "hybrid",
               "workloads": workloads, "repeat": args.repeat, "fresh_first_exits": exits,
               "quick": bool(args.quick), "protocol": __doc__.split("Protocol", 1)[1].strip(),
               "plan": plans, "notes": notes, "results": results}
    md = markdown(payload)
    files = write_run(args.out or default_out_dir(), "scale", payload, md,
                      plot=lambda path: plot(results, path))
    print(md)
    print(f"\nwrote {', '.join(str(f) for f in files.values())}", file=sys.stderr)
    return 0


def _fresh_first(n: int, base: list, store: Path, exit_: str, threads: int,
                 keep: bool) -> dict:
    """Ingest-only writer (exit ``exit_``), page cache evicted, then a fresh process's first
    hybrid search (protocol step 7)."""
    path = store.with_name(f"{store.name}-{exit_}")
    shutil.rmtree(path, ignore_errors=True)
    args = [*base, "--store", str(path), "--exit", exit_]
    try:
        print(f"n={n:,}: bulk put_many, writer exits {exit_}", file=sys.stderr)
        ingest = _run_worker("bulk-ingest", args, threads, killed_ok=exit_ == "unclean")
        evict_page_cache(path)
        first = _run_worker("fresh-first", args, threads)
        if exit_ == "clean":       # again, files now in the page cache (a process restart)
            first["warm"] = _run_worker("fresh-first", args, threads)
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
    return {"ingest": ingest, **first}


def _run_n(n: int, args, common: list, notes: list, workload: str = "recombined",
           exits: tuple = ()) -> dict:
    cdir = corpus_dir(n, args.vectors, args.seed, args.embed_limit, workload)
    base = ["--n", str(n), "--corpus", str(cdir), "--workload", workload, *common]
    load = os.getloadavg()
    t = time.perf_counter()
    if not (cdir / "meta.json").exists():
        print(f"{workload} n={n:,}: generating the corpus into {cdir}", file=sys.stderr)
        _run_worker("corpus", base, args.threads)
    corpus_s = time.perf_counter() - t
    store = cache_root() / "stores" / f"{cdir.name}-store"
    if store.exists():
        shutil.rmtree(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    base += ["--store", str(store)]
    try:
        print(f"n={n:,}: ingest", file=sys.stderr)
        ingest = _run_worker("ingest", base, args.threads)
        alloc, apparent = du_bytes(store)
        ingest.update(disk_bytes=alloc, disk_apparent_bytes=apparent,
                      disk_bytes_per_memory=alloc / n)
        evicted = evict_page_cache(store)
        print(f"n={n:,}: memcore searches (cold open)", file=sys.stderr)
        mem = _run_worker("memcore", base, args.threads)
        mem["evicted_files"] = evicted
        opens = [_run_worker("open-warm", base, args.threads) for _ in range(WARM_OPENS)]
        warm = dict(opens[0])
        warm["open_s"] = float(np.median([o["open_s"] for o in opens]))
        warm["open_s_each"] = [o["open_s"] for o in opens]
        warm["peak_rss_mb"] = max(o["peak_rss_mb"] for o in opens)
        fresh = {e: _fresh_first(n, base, store, e, args.threads, args.keep_store)
                 for e in exits}
        approx = None
        if getattr(args, "approximate", False):
            print(f"n={n:,}: memcore approximate path (index build + searches)", file=sys.stderr)
            approx = _run_worker("approximate", base, args.threads)
    finally:
        if not args.keep_store:
            shutil.rmtree(store, ignore_errors=True)
    print(f"n={n:,}: FAISS flat", file=sys.stderr)
    flat = _run_worker("faiss-flat", base, args.threads)
    hnsw = None
    if not args.skip_hnsw:
        print(f"n={n:,}: FAISS HNSW (build ~{n * COST['hnsw_build_s'] / 60:.0f} min unless cached)",
              file=sys.stderr)
        hnsw = _run_worker("hnsw", base + (["--rebuild-hnsw"] if args.rebuild_hnsw else []),
                           args.threads)
    # memcore's similarity preset vs the exact FAISS flat + decay ranking, same data
    vecs = np.load(cdir / "vectors.npy", mmap_mode="r")
    importance = np.load(cdir / "importance.npy", mmap_mode="r")
    bonus, _ = bonus_terms(n, args.chunk, importance)
    qv = np.asarray(flat.pop("query_vectors"), np.float32)
    flat_decay_ids = [list(r) for r in flat["decay_ids"]]
    mem_hybrid_ids = mem.pop("hybrid_ids")
    agree = agreement(np.asarray(mem.pop("similarity_ids")), np.asarray(flat.pop("decay_ids")),
                      np.asarray(flat.pop("decay_scores")), vecs, qv, bonus)
    gt, gt_sims = np.asarray(flat.pop("exact_ids")), np.asarray(flat.pop("exact_sims"))
    if hnsw is not None:
        for ef in hnsw["ef"].values():
            ef["recall_at_10"] = recall_at(np.asarray(ef.pop("ids")), gt, gt_sims, vecs, qv)
    flat["recall_at_10"] = recall_at(np.asarray(flat.pop("flat_ids")), gt, gt_sims, vecs, qv)
    flat_p50 = flat["search"]["p50"]
    ratios = {"hybrid_p50_over_flat": mem["hybrid"]["p50"] / flat_p50,
              "hybrid_p99_over_flat": mem["hybrid"]["p99"] / flat["search"]["p99"],
              "similarity_p50_over_flat": mem["similarity"]["p50"] / flat_p50,
              "similarity_p99_over_flat": mem["similarity"]["p99"] / flat["search"]["p99"],
              "rss_over_flat": mem["peak_rss_mb"] / flat["peak_rss_mb"]}
    if approx is not None:
        def overlap(found, exact):
            return float(np.mean([len(set(f) & set(e) - {-1}) / max(len(set(e) - {-1}), 1)
                                  for f, e in zip(found, exact)]))

        approx["recall_at_10_vs_exact"] = overlap(approx.pop("ids"), flat_decay_ids)
        approx["hybrid_recall_at_10_vs_exact"] = overlap(approx.pop("hybrid_ids"),
                                                         mem_hybrid_ids)
        approx["p50_over_flat"] = approx["search"]["p50"] / flat["search"]["p50"]
        approx["hybrid_p50_over_exact"] = approx["hybrid"]["p50"] / mem["hybrid"]["p50"]
    if agree < 1.0:
        notes.append(f"n={n}: memcore's similarity preset matched exact FAISS flat + decay on "
                     f"{agree:.3f} of the queries (expected 1.000)")
    return {"n": n, "workload": workload, "load_at_start": list(load),
            "load_at_end": list(os.getloadavg()), "fresh_first": fresh,
            "corpus": {"dir": cdir.name, "generate_s": corpus_s,
                               **json.loads((cdir / "meta.json").read_text())},
            "ingest": ingest, "memcore": mem, "open_warm": warm, "faiss_flat": flat,
            "hnsw": hnsw, "approximate": approx, "similarity_vs_flat_agreement": agree,
            "ratios": ratios}


def recall_at(found: np.ndarray, exact: np.ndarray, exact_sims: np.ndarray,
              vectors: np.ndarray, qvecs: np.ndarray, tol: float = 1e-6) -> float:
    """Recall@k against exact similarity search, ties tolerated: a returned row counts when it
    is in the exact top-k or its similarity is within ``tol`` of the exact k-th (rows with equal
    vectors are interchangeable). -1 padding is ignored.

    Parameters
    ----------
    found, exact : ndarray of shape (n_queries, k), int64
    exact_sims : ndarray of shape (n_queries, k), float32
    vectors : ndarray of shape (n, dim), float32
    qvecs : ndarray of shape (n_queries, dim), float32

    Returns
    -------
    float in [0, 1]: hits / exact rows over all queries.
    """
    hits = total = 0
    for q, (f, e) in enumerate(zip(found, exact)):
        es = {int(i) for i in e if i >= 0}
        kth = float(exact_sims[q][len(es) - 1]) if es else 0.0
        for i in {int(i) for i in f if i >= 0}:
            hits += i in es or float(vectors[i] @ qvecs[q]) >= kth - tol
        total += len(es)
    return min(hits / max(total, 1), 1.0)


def markdown(payload: dict) -> str:
    from bench.report import env_markdown, fmt, markdown_table

    def pp(d):
        return f"{fmt(d['p50'])} / {fmt(d['p99'])}" if d else "—"

    lat, res, fresh = [], [], []
    for r in sorted(payload["results"], key=_order):
        m, f, h, ing = r["memcore"], r["faiss_flat"], r["hnsw"], r["ingest"]
        hn = [f"{pp(h['ef'][str(ef)]['search'])} ({h['ef'][str(ef)]['recall_at_10']:.2f})"
              if h else "—" for ef in HNSW_EFS]
        who = [r.get("workload", "recombined"), str(r.get("round", 0) + 1)]
        for e, x in (r.get("fresh_first") or {}).items():
            fresh.append([*who, f"{r['n']:,}", e, fmt(x["ingest"]["put_many_s"], 1),
                          fmt(x["ingest"]["close_s"], 2) if x["ingest"]["close_s"] is not None
                          else "killed", fmt(x["open_s"], 3), fmt(x["first_hybrid_s"], 3),
                          fmt(x["warm"]["first_hybrid_s"], 3) if x.get("warm") else "—",
                          fmt(1e3 * x["second_hybrid_s"]), f"{x['peak_rss_mb']:,.0f}",
                          _load(r)])
        lat.append([*who, f"{r['n']:,}", fmt(m["open_s"], 3), fmt(r["open_warm"]["open_s"], 3),
                    fmt(m["first_hybrid_s"]), pp(m["hybrid"]), pp(m["similarity"]),
                    pp(f["search"]), *hn, fmt(r["ratios"]["hybrid_p50_over_flat"]),
                    fmt(r["ratios"]["similarity_p50_over_flat"]),
                    fmt(r["similarity_vs_flat_agreement"], 3)])
        total = ing["put_many_s"] + ing["index_s"] + ing["close_s"]
        res.append([*who, f"{r['n']:,}", fmt(ing["put_many_s"], 1), fmt(ing["index_s"], 1),
                    f"{r['n'] / total:,.0f}", f"{ing['disk_bytes_per_memory']:,.0f}",
                    f"{m['peak_rss_mb']:,.0f}", f"{ing['peak_rss_mb']:,.0f}",
                    f"{f['peak_rss_mb']:,.0f}", fmt(f["build_s"], 1),
                    f"{h['peak_rss_mb']:,.0f}" if h else "—",
                    (fmt(h["build_s"], 0) + (" (cached)" if h["build_cached"] else "")) if h else "—"])
    preset = payload["hybrid_preset"]
    approx = [[f"{r['n']:,}", a["factory"], fmt(a["build_and_first_search_s"], 1),
               fmt(a["reopen_and_first_search_s"], 2), pp(a["search"]),
               pp(r["faiss_flat"]["search"]), fmt(a["p50_over_flat"]),
               f"{a['recall_at_10_vs_exact']:.3f}",
               f"{a['stats']['closed']}/{a['stats']['searches']}", pp(a["hybrid"]),
               pp(r["memcore"]["hybrid"]), f"{a['hybrid_recall_at_10_vs_exact']:.3f}",
               f"{a['peak_rss_mb']:,.0f}"]
              for r in sorted(payload["results"], key=lambda r: r["n"])
              if (a := r.get("approximate"))]
    parts = [f"# Scale benchmark: one namespace, {payload['vectors']} vectors, top_k={payload['top_k']}, "
             f"{payload['queries']} LoCoMo questions per row (latencies p50 / p99 in ms)", "",
             *_summary(payload), "## Every round", "",
             markdown_table(["workload", "round", "n", "open cold s", "open warm s",
                             "first hybrid s",
                             f"hybrid ({preset})", "similarity", "FAISS flat + decay",
                             "HNSW ef64 (R@10)", "HNSW ef128 (R@10)", "hybrid / flat p50",
                             "similarity / flat p50", "similarity = flat"], lat), "",
             markdown_table(["workload", "round", "n", "put_many s", "index s", "ingest /s",
                             "disk B/mem",
                             "memcore peak RSS MB", "ingest peak RSS MB", "flat peak RSS MB",
                             "flat build s", "HNSW peak RSS MB", "HNSW build s"], res), "",
             "- open cold: a fresh process after fsync + posix_fadvise(DONTNEED) of every store "
             f"file; open warm: the median of {WARM_OPENS} more fresh processes right after "
             "(files in the page cache).",
             "- first hybrid: the first search after the cold open (the hybrid index build). Every "
             "process first loads memcore's numba kernels on a 3-memory throwaway store "
             "(`kernel_warmup_s` in the JSON), so open and first search time the store only.",
             "- memcore peak RSS: open + first search + every timed search, one process. "
             "ingest /s: n / (put_many + index + close).",
             "- FAISS flat + decay: IndexFlatIP candidates re-ranked in NumPy by the fused decay "
             "score until provably exact; `similarity = flat`: share of queries where memcore's "
             "similarity preset returns the same top-10 (ties tolerated).",
             f"- HNSW: IndexHNSWFlat M={HNSW_M}, recall@10 against exact similarity.", ""]
    if fresh:
        parts += ["## First hybrid search in a fresh process after a bulk put_many", "",
                  markdown_table(["workload", "round", "n", "writer exit", "put_many s",
                                  "close s", "open s", "first hybrid s",
                                  "first hybrid s, warm page cache", "second hybrid ms",
                                  "peak RSS MB", "load 1/5/15"], fresh), "",
                  "- The writer only calls put_many (no search in any process before the timed "
                  "one); clean: close() then exit; unclean: SIGKILL to itself after the last "
                  "put_many returned. The store's page cache is evicted before the fresh "
                  "process opens it; after a clean exit a second fresh process then opens it "
                  "with its files in the page cache (a process restart, not a reboot): its "
                  "first hybrid search is the warm column.", ""]
    if approx:
        parts += ["## memcore's opt-in approximate path", "",
                  markdown_table(["n", "index", "build + first search s",
                                  "reopen + first search s", "similarity p50 / p99 ms",
                                  "FAISS flat + decay", "p50 / flat", "recall@10 vs exact",
                                  "bound closed", f"hybrid ({preset}) p50 / p99",
                                  "exact hybrid", "hybrid recall@10 vs exact",
                                  "peak RSS MB"], approx), "",
                  "- recall@10 vs exact: share of the exact fused decay top-10 (FAISS flat + "
                  "decay, widened until provably exact) that the approximate path returns; "
                  "bound closed: searches whose k-th score reached the candidates' bound "
                  "(memcore.recall.approx); hybrid recall@10: share of the exact hybrid top-10 "
                  "(memcore's exact scan, same run) returned (no bound is claimed for hybrid).", ""]
    for note in payload["notes"]:
        parts.append(f"- note: {note}")
    parts += ["", env_markdown(payload["env"])]
    return "\n".join(parts)


def _order(r: dict) -> tuple:
    return (r["n"], WORKLOADS.index(r.get("workload", "recombined")), r.get("round", 0))


def _load(r: dict) -> str:
    load = r.get("load_at_start")
    return "/".join(f"{x:.1f}" for x in load) if load else "—"


def summary_rows(results: list) -> list:
    """Medians over the rounds of each (n, workload): one dict per pair, sorted by n then
    workload, with the figures issue 25 sets targets for (ms, s, MB)."""
    groups: dict = {}
    for r in results:
        groups.setdefault((r["n"], r.get("workload", "recombined")), []).append(r)
    out = []
    for (n, w), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], WORKLOADS.index(kv[0][1]))):
        def med(get):
            vals = [v for v in (get(r) for r in rs) if v is not None]
            return float(np.median(vals)) if vals else None

        def fresh(e, warm=False):
            def get(r):
                x = (r.get("fresh_first") or {}).get(e, {})
                return (x.get("warm") or {}).get("first_hybrid_s") if warm else \
                    x.get("first_hybrid_s")
            return get

        ing = lambda r: r["ingest"]["put_many_s"] + r["ingest"]["index_s"] + r["ingest"]["close_s"]
        out.append({
            "n": n, "workload": w, "rounds": len(rs),
            "hybrid_p50": med(lambda r: r["memcore"]["hybrid"]["p50"]),
            "hybrid_p99": med(lambda r: r["memcore"]["hybrid"]["p99"]),
            "similarity_p50": med(lambda r: r["memcore"]["similarity"]["p50"]),
            "flat_p50": med(lambda r: r["faiss_flat"]["search"]["p50"]),
            "similarity_over_flat": med(lambda r: r["ratios"]["similarity_p50_over_flat"]),
            "ingest_s": med(ing),
            "bulk_put_many_s": med(lambda r: next(iter(
                (x["ingest"]["put_many_s"] for x in (r.get("fresh_first") or {}).values())),
                None)),
            "open_cold_s": med(lambda r: r["memcore"]["open_s"]),
            "open_warm_s": med(lambda r: r["open_warm"]["open_s"]),
            "first_fresh_clean_s": med(fresh("clean")),
            "first_fresh_clean_warm_s": med(fresh("clean", warm=True)),
            "first_fresh_unclean_s": med(fresh("unclean")),
            "peak_rss_mb": med(lambda r: r["memcore"]["peak_rss_mb"]),
            "ingest_peak_rss_mb": med(lambda r: r["ingest"]["peak_rss_mb"]),
            "loads": [_load(r) for r in sorted(rs, key=_order)]})
    return out


def _summary(payload: dict) -> list:
    from bench.report import fmt, markdown_table

    rows = summary_rows(payload["results"])
    if not rows:
        return []

    def f(x, d=2):
        return "—" if x is None else fmt(x, d)

    table = [[f"{r['n']:,}", r["workload"], str(r["rounds"]),
              f"{f(r['hybrid_p50'])} / {f(r['hybrid_p99'])}", f(r["similarity_p50"]),
              f(r["flat_p50"]), f(r["similarity_over_flat"]), f(r["ingest_s"], 1),
              f(r["bulk_put_many_s"], 1), f(r["open_cold_s"], 3), f(r["open_warm_s"], 3),
              f(r["first_fresh_clean_s"], 3), f(r["first_fresh_clean_warm_s"], 3),
              f(r["first_fresh_unclean_s"], 3),
              f"{r['peak_rss_mb']:,.0f}", "; ".join(r["loads"])] for r in rows]
    return ["## Both workloads side by side (medians over the rounds)", "",
            markdown_table(["n", "workload", "rounds", "hybrid p50 / p99 ms",
                            "similarity p50 ms", "FAISS flat p50 ms", "similarity / flat",
                            "ingest s", "bulk put_many s", "open cold s", "open warm s",
                            "first hybrid, fresh process, clean exit s",
                            "same, warm page cache s",
                            "first hybrid, fresh process, unclean exit s",
                            "search peak RSS MB", "load 1/5/15 at each round's start"],
                           table), "",
            "- ingest s: put_many + first search (index) + close in one process (protocol step "
            "2); bulk put_many s: the put_many calls of step 7's writer (no search).", ""]


def plot(results: list, path: Path) -> None:
    import matplotlib.pyplot as plt

    rs = sorted((r for r in results if r.get("round", 0) == 0), key=_order)   # round 1
    ns = sorted({r["n"] for r in rs})
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    series = []
    for w in WORKLOADS:
        tag = f" ({w})" if len({r.get("workload", "recombined") for r in rs}) > 1 else ""
        series += [(f"memcore hybrid{tag}", w, lambda r: r["memcore"]["hybrid"]),
                   (f"memcore similarity{tag}", w, lambda r: r["memcore"]["similarity"]),
                   (f"FAISS flat + decay{tag}", w, lambda r: r["faiss_flat"]["search"])]
        series += [(f"FAISS HNSW ef{ef}{tag}", w, lambda r, ef=ef: r["hnsw"]["ef"][str(ef)]
                    ["search"] if r["hnsw"] else None) for ef in HNSW_EFS]
    for label, w, get in series:
        pts = [(r["n"], get(r)) for r in rs if r.get("workload", "recombined") == w and get(r)]
        if not pts:
            continue
        line, = ax.plot([p[0] for p in pts], [p[1]["p50"] for p in pts], marker="o",
                        label=f"{label} p50")
        ax.plot([p[0] for p in pts], [p[1]["p99"] for p in pts], marker="x", ls="--",
                color=line.get_color(), alpha=0.6)
    ax.axhline(20, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("memories in the namespace (n)")
    ax.set_ylabel("search latency, ms (solid p50, dashed p99)")
    ax.set_title(f"search latency vs n (top_k={TOP_K}, 1 namespace)")
    ax.set_xticks(ns)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the workers ---------------------------------------------------------------------------

def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Corpus:
    """A cached corpus: texts (UTF-8 blob + offsets), speakers, episodes, importance, vectors."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.meta = json.loads((folder / "meta.json").read_text())
        self.n = int(self.meta["n"])
        self.offsets = np.load(folder / "offsets.npy")
        self.blob = np.load(folder / "texts.npy", mmap_mode="r")
        self.speaker_ids = np.load(folder / "speakers.npy")
        self.speaker_names = self.meta["speakers"]
        self.episodes = np.load(folder / "episodes.npy")
        self.importance = np.load(folder / "importance.npy")
        self.vectors = np.load(folder / "vectors.npy", mmap_mode="r")

    def texts(self, start: int, stop: int) -> list:
        raw = bytes(self.blob[self.offsets[start]:self.offsets[stop]])
        off = self.offsets[start:stop + 1] - self.offsets[start]
        return [raw[off[i]:off[i + 1]].decode("utf-8") for i in range(stop - start)]

    def items(self, start: int, stop: int) -> list:
        from memcore.types import MemoryItem

        names = self.speaker_names
        return [MemoryItem(key=f"m{i}", text=t, importance=float(self.importance[i]),
                           metadata={"speaker": names[self.speaker_ids[i]],
                                     "episode": int(self.episodes[i])})
                for i, t in zip(range(start, stop), self.texts(start, stop))]


def write_corpus(folder: Path, n: int, vectors: str, seed: int, embed_limit: int, data,
                 workload: str = "recombined") -> None:
    """Generate and cache the corpus of size ``n`` (written to a temporary folder, then
    renamed, so an interrupted run leaves nothing half-written)."""
    from bench.datasets import cached_encode, repetitive_turns, scale_turns, variant_vectors

    t0 = time.perf_counter()
    turns = repetitive_turns(n, data) if workload == "repetitive" else scale_turns(n, seed, data)
    texts = list(turns.texts)
    if vectors == "hashing":
        from memcore.embedders import HashingEmbedder

        emb = HashingEmbedder(dim=DIM)
        vecs = [emb.encode(texts[s:s + 50_000]) for s in range(0, n, 50_000)]
        # a turn without content for the hashing embedder (only emoji or punctuation) is
        # stored as "speaker: text", as the LoCoMo harness does
        empty = [s + int(i) for s, v in zip(range(0, n, 50_000), vecs)
                 for i in np.flatnonzero(~v.any(axis=1))]
        for i in empty:
            texts[i] = f"{turns.speakers[i]}: {texts[i]}"
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    np.save(tmp / "texts.npy", np.frombuffer(b"".join(encoded), np.uint8))
    np.save(tmp / "offsets.npy", offsets)
    names = sorted(set(turns.speakers))
    index = {s: i for i, s in enumerate(names)}
    np.save(tmp / "speakers.npy", np.array([index[s] for s in turns.speakers], np.int16))
    np.save(tmp / "episodes.npy", turns.episodes)
    np.save(tmp / "importance.npy",
            np.random.default_rng([seed, 15]).random(n).astype(np.float32))
    out = np.lib.format.open_memmap(tmp / "vectors.npy", mode="w+", dtype=np.float32,
                                    shape=(n, DIM))
    step = 50_000
    how = "HashingEmbedder(dim=384) of every text"
    if vectors == "hashing":
        for s, v in zip(range(0, n, step), vecs):
            out[s:s + step] = v
        for i in empty:
            out[i] = emb.encode([texts[i]])[0]
        del vecs
    else:
        from bench.systems import make_encoder

        name, encode = make_encoder("minilm-default")
        m = min(n, embed_limit)
        base = cached_encode(name, encode, texts[:m], desc=f"embed {name}")
        out[:m] = base
        for s in range(m, n, step):
            out[s:min(s + step, n)] = variant_vectors(base, s, min(s + step, n), seed)
        how = (f"{name} of the first {m} texts (embedding cache); row i >= {m} is row i mod {m} "
               "plus seeded Gaussian jitter (expected cosine 0.9), renormalised")
    out.flush()
    del out
    distinct = len(set(texts))
    meta = {"n": n, "dim": DIM, "vectors": vectors, "vectors_how": how, "seed": seed,
            "speakers": names, "episodes": int(np.unique(turns.episodes).size),
            "distinct_texts": distinct, "mean_text_bytes": float(offsets[-1] / max(n, 1)),
            "generated_s": time.perf_counter() - t0,
            "prefixed_with_speaker": len(empty) if vectors == "hashing" else 0,
            "workload": workload,
            "texts_how": ("bench.datasets.repetitive_turns: LoCoMo dev turns repeated with a "
                          "' #<repeat>' suffix" if workload == "repetitive" else
                          "bench.datasets.scale_turns: LoCoMo dev turns, then recombined "
                          "episodes")}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _embedder(vectors: str):
    if vectors == "hashing":
        from memcore.embedders import HashingEmbedder

        return HashingEmbedder(dim=DIM)
    from memcore.embedders import MiniLMEmbedder

    return MiniLMEmbedder(intra_op_num_threads=1).load()


def _hybrid(vectors: str):
    from memcore.recall.weights import HybridWeights

    return HybridWeights.no_model() if vectors == "hashing" else HybridWeights.hybrid()


def warm_kernels(emb, hw) -> float:
    """Load memcore's numba kernels (compiled, or from the on-disk cache) on a throwaway
    on-disk store of three memories: put_many, reopen, search with both presets. Returns the
    seconds it took, reported apart so open and first-search times measure the store only."""
    import tempfile

    from memcore.recall.weights import HybridWeights
    from memcore.stores.long import LongTermMemory
    from memcore.types import MemoryItem

    t = time.perf_counter()
    texts = ["the charging dock is in the hallway", "I adopted a dog last week",
             "we went hiking in the mountains"]
    items = [MemoryItem(key=str(i), text=x, metadata={"speaker": "Ann", "episode": 1})
             for i, x in enumerate(texts)]
    with tempfile.TemporaryDirectory(prefix="memcore-scale-warm-") as tmp:
        with LongTermMemory(tmp, emb, hybrid=hw) as ltm:
            ltm.put_many(NAMESPACE, items, vectors=emb.encode(texts))
        with LongTermMemory(tmp, emb, hybrid=hw) as ltm:
            for preset in (hw, HybridWeights.similarity()):
                ltm.search(NAMESPACE, "where is the dock?", top_k=2, touch=False, hybrid=preset)
    return time.perf_counter() - t


class _Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _hit_ids(hits: list) -> list:
    """Row ids (keys are ``m<row>``) of each query's hits, padded with -1 to TOP_K."""
    ids = np.full((len(hits), TOP_K), -1, np.int64)
    for q, hs in enumerate(hits):
        ids[q, :len(hs)] = [int(h.key[1:]) for h in hs]
    return ids.tolist()


def _timed_presets(store, emb, hw, questions: list) -> tuple:
    """Every question searched with the hybrid preset ``hw`` (the store's prepared dense form,
    embedded up front) and then with the similarity preset (the question embedded up front):
    ``(hybrid hits, hybrid ns, similarity hits, similarity ns)``."""
    from memcore.recall.weights import HybridWeights

    prepare = getattr(store, "prepare", None)
    dense = [prepare(NAMESPACE, q, hybrid=hw).dense if prepare else q for q in questions]
    qh = np.ascontiguousarray(emb.encode(dense), np.float32)
    qs = np.ascontiguousarray(emb.encode(questions), np.float32)
    sim = HybridWeights.similarity()
    hyb, hyb_ns = _search_ns(lambda i: store.search(NAMESPACE, questions[i], top_k=TOP_K,
                                                    touch=False, query_vector=qh[i], hybrid=hw),
                             range(len(questions)))
    hits, sim_ns = _search_ns(lambda i: store.search(NAMESPACE, questions[i], top_k=TOP_K,
                                                     touch=False, query_vector=qs[i], hybrid=sim),
                              range(len(questions)))
    return hyb, hyb_ns, hits, sim_ns


def _search_ns(fn, items) -> tuple:
    out, ns = [], []
    for it in items:
        t = time.perf_counter_ns()
        r = fn(it)
        ns.append(time.perf_counter_ns() - t)
        out.append(r)
    return out, ns


def worker(a: argparse.Namespace) -> dict:
    from bench.datasets import scale_questions
    from bench.env import pin_threads
    from bench.metrics import percentiles

    phase = a.worker
    if phase == "corpus":
        write_corpus(a.corpus, a.n, a.vectors, a.seed, a.embed_limit, a.data, a.workload)
        return {"ok": True}
    corpus = Corpus(a.corpus)
    n = a.n
    if corpus.n != n:
        raise RuntimeError(f"corpus {a.corpus} holds {corpus.n} memories, expected {n}")
    questions = scale_questions(a.queries, a.seed, a.data)
    calls = max(math.ceil(n / a.chunk), 1)
    now = T0 + calls * STEP + 60.0
    if phase == "approximate":
        from memcore.recall.approx import ApproximateSearch
        from memcore.recall.weights import HybridWeights
        from memcore.stores.long import LongTermMemory

        emb = _embedder(a.vectors)
        hw = _hybrid(a.vectors)
        pinned = pin_threads(a.threads)
        cfg = ApproximateSearch(min_rows=1)
        sim = HybridWeights.similarity()
        store = LongTermMemory(a.store, emb, clock=_Clock(now), approximate=cfg, hybrid=hw,
                               threads=a.threads)
        q0 = np.ascontiguousarray(emb.encode(questions[:1]), np.float32)[0]
        t = time.perf_counter()
        store.search(NAMESPACE, questions[0], top_k=TOP_K, touch=False, query_vector=q0,
                     hybrid=sim)
        build_s = time.perf_counter() - t
        hyb, hyb_ns, hits, ns = _timed_presets(store, emb, hw, questions)
        stats = store.approximate_stats(NAMESPACE)
        t = time.perf_counter()
        store.close()          # saves the index
        save_s = time.perf_counter() - t
        t = time.perf_counter()
        store = LongTermMemory(a.store, emb, clock=_Clock(now), approximate=cfg, hybrid=hw,
                               threads=a.threads)
        store.search(NAMESPACE, questions[0], top_k=TOP_K, touch=False, query_vector=q0,
                     hybrid=sim)
        reopen_first_s = time.perf_counter() - t
        store.close()
        return {"factory": stats["factory"], "settings": dataclasses.asdict(cfg),
                "build_and_first_search_s": build_s, "save_s": save_s,
                "reopen_and_first_search_s": reopen_first_s, "search": percentiles(ns),
                "hybrid": percentiles(hyb_ns), "stats": stats, "ids": _hit_ids(hits),
                "hybrid_ids": _hit_ids(hyb), "peak_rss_mb": _peak_rss_mb(), "threads": pinned}
    if phase in ("bulk-ingest", "fresh-first"):
        return _bulk_phase(a, corpus, questions, now)
    if phase in ("ingest", "memcore", "open-warm"):
        from memcore.recall.weights import HybridWeights
        from memcore.stores.long import LongTermMemory

        emb = _embedder(a.vectors)
        hw = _hybrid(a.vectors)
        clock = _Clock(T0)
        pinned = pin_threads(a.threads)
        warm_s = warm_kernels(emb, hw)
        rss0 = _rss_mb()
        if phase == "ingest":
            store = LongTermMemory(a.store, emb, hybrid=hw, clock=clock, threads=a.threads)
            put_s, _ = _put_chunks(store, corpus, n, a.chunk, clock)
            clock.now = now
            t = time.perf_counter()
            store.search(NAMESPACE, questions[0], top_k=TOP_K, touch=False)
            index_s = time.perf_counter() - t
            count = store.count(NAMESPACE)
            t = time.perf_counter()
            store.close()
            close_s = time.perf_counter() - t
            return {"count": count, "put_many_s": put_s, "index_s": index_s, "close_s": close_s,
                    "put_many_calls": calls, "rate_per_s": n / (put_s + index_s + close_s),
                    "kernel_warmup_s": warm_s,
                    "peak_rss_mb": _peak_rss_mb(), "threads": pinned}
        clock.now = now
        t = time.perf_counter()
        store = LongTermMemory(a.store, emb, hybrid=hw, clock=clock, threads=a.threads)
        open_s = time.perf_counter() - t
        rss_open = _rss_mb()
        if phase == "open-warm":
            count = store.count(NAMESPACE)
            store.close()
            return {"open_s": open_s, "count": count, "rss_after_open_mb": rss_open,
                    "kernel_warmup_s": warm_s,
                    "peak_rss_mb": _peak_rss_mb()}
        t = time.perf_counter()
        store.search(NAMESPACE, questions[0], top_k=TOP_K, touch=False)
        first_s = time.perf_counter() - t
        rss_first = _rss_mb()
        hyb_hits, hyb_ns, hits, sim_ns = _timed_presets(store, emb, hw, questions)
        count = store.count(NAMESPACE)
        store.close()
        return {"count": count, "open_s": open_s, "first_hybrid_s": first_s,
                "kernel_warmup_s": warm_s,
                "hybrid": percentiles(hyb_ns), "similarity": percentiles(sim_ns),
                "searches": 1 + 2 * len(questions), "rss_before_open_mb": rss0,
                "rss_after_open_mb": rss_open, "rss_after_first_search_mb": rss_first,
                "rss_end_mb": _rss_mb(), "peak_rss_mb": _peak_rss_mb(),
                "similarity_ids": _hit_ids(hits), "hybrid_ids": _hit_ids(hyb_hits),
                "threads": pinned,
                "query_vectors": "precomputed (hybrid: the store's prepared dense form)"}
    import faiss

    emb = _embedder(a.vectors)
    pinned = pin_threads(a.threads)
    faiss.omp_set_num_threads(a.threads)
    qs = np.ascontiguousarray(emb.encode(questions), np.float32)
    if phase == "faiss-flat":
        from memcore.types import DecayWeights

        w = DecayWeights()
        t = time.perf_counter()
        index = faiss.IndexFlatIP(DIM)
        for s in range(0, n, 100_000):
            index.add(np.ascontiguousarray(corpus.vectors[s:s + 100_000]))
        build_s = time.perf_counter() - t
        imp = corpus.importance.astype(np.float64)
        last = T0 + (np.arange(n) // a.chunk) * STEP
        max_bonus = w.w_recency + w.w_importance * float(imp.max(initial=0.0))
        k = min(TOP_K, n)

        def flat_decay(q):
            c = min(4 * TOP_K, n)
            while True:
                sims, ids = index.search(q[None, :], c)
                sims, ids = sims[0].astype(np.float64), ids[0]
                fused = (sims + w.w_recency * np.exp2(-(now - last[ids]) / w.half_life)
                         + w.w_importance * imp[ids])
                order = np.argsort(-fused, kind="stable")[:k]
                if c >= n or sims[-1] + max_bonus < fused[order[-1]]:
                    return ids[order], fused[order]
                c = min(4 * c, n)

        res, ns = _search_ns(flat_decay, qs)
        raw = index.search(qs, TOP_K)[1]
        exact = np.full((len(qs), TOP_K), -1, np.int64)
        best = np.full((len(qs), TOP_K), -np.inf, np.float32)
        for s in range(0, n, 100_000):  # exact similarity top-10 by NumPy brute force
            block = qs @ np.asarray(corpus.vectors[s:s + 100_000]).T
            cand_s = np.concatenate([best, block], axis=1)
            cand_i = np.concatenate([exact, np.broadcast_to(np.arange(s, s + block.shape[1]),
                                                            block.shape)], axis=1)
            top = np.argsort(-cand_s, axis=1, kind="stable")[:, :TOP_K]
            best = np.take_along_axis(cand_s, top, 1)
            exact = np.take_along_axis(cand_i, top, 1)
        exact[~np.isfinite(best)] = -1
        return {"build_s": build_s, "search": percentiles(ns), "peak_rss_mb": _peak_rss_mb(),
                "threads": pinned, "decay_ids": [r[0].tolist() for r in res],
                "decay_scores": [r[1].tolist() for r in res], "flat_ids": raw.tolist(),
                "exact_ids": exact.tolist(), "exact_sims": np.where(
                    np.isfinite(best), best, 0.0).tolist(), "query_vectors": qs.tolist(),
                "how": "IndexFlatIP top 4k candidates, widened until provably exact, re-ranked "
                       "in NumPy by memcore's fused decay score"}
    if phase == "hnsw":
        path = a.corpus / f"hnsw-M{HNSW_M}.faiss"
        info_path = path.with_suffix(".json")
        cached = path.exists() and info_path.exists() and not a.rebuild_hnsw
        if cached:
            index = faiss.read_index(str(path))
            info = json.loads(info_path.read_text())
        else:
            t = time.perf_counter()
            index = faiss.IndexHNSWFlat(DIM, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            for s in range(0, n, 100_000):
                index.add(np.ascontiguousarray(corpus.vectors[s:s + 100_000]))
            info = {"build_s": time.perf_counter() - t, "threads": a.threads,
                    "efConstruction": int(index.hnsw.efConstruction),
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            faiss.write_index(index, str(path))
            info_path.write_text(json.dumps(info))
        out = {"build_s": info["build_s"], "build_cached": cached, "build_info": info,
               "M": HNSW_M, "ef": {}}
        for ef in HNSW_EFS:
            index.hnsw.efSearch = ef
            res, ns = _search_ns(lambda q: index.search(q[None, :], TOP_K)[1][0], qs)
            out["ef"][str(ef)] = {"search": percentiles(ns), "ids": [r.tolist() for r in res]}
        out["peak_rss_mb"] = _peak_rss_mb()
        out["threads"] = pinned
        return out
    raise ValueError(f"unknown worker phase {phase!r}")


def _put_chunks(store, corpus: Corpus, n: int, chunk: int, clock: _Clock) -> tuple:
    """``put_many`` of the corpus in ``chunk``-memory calls, the clock one STEP per call;
    returns ``(seconds inside put_many, calls)``."""
    put_s, calls = 0.0, 0
    for c, s in enumerate(range(0, n, chunk)):
        e = min(s + chunk, n)
        items = corpus.items(s, e)
        vecs = np.ascontiguousarray(corpus.vectors[s:e])
        clock.now = T0 + c * STEP
        t = time.perf_counter()
        store.put_many(NAMESPACE, items, vectors=vecs)
        put_s += time.perf_counter() - t
        calls += 1
        del items, vecs
    return put_s, calls


def _bulk_phase(a: argparse.Namespace, corpus: Corpus, questions: list, now: float) -> dict:
    """``bulk-ingest``: put_many only, then close + exit, or (``--exit unclean``) the result
    written and SIGKILL to itself. ``fresh-first``: open, first hybrid search, a second one."""
    import signal

    from bench.env import pin_threads
    from memcore.stores.long import LongTermMemory

    emb = _embedder(a.vectors)
    hw = _hybrid(a.vectors)
    pinned = pin_threads(a.threads)
    warm_s = warm_kernels(emb, hw)
    if a.worker == "bulk-ingest":
        clock = _Clock(T0)
        store = LongTermMemory(a.store, emb, hybrid=hw, clock=clock, threads=a.threads)
        put_s, calls = _put_chunks(store, corpus, a.n, a.chunk, clock)
        out = {"put_many_s": put_s, "put_many_calls": calls, "exit": a.exit,
               "kernel_warmup_s": warm_s, "peak_rss_mb": _peak_rss_mb(), "threads": pinned}
        if a.exit == "unclean":
            out["close_s"] = None
            a.result.write_text(json.dumps(out))
            os.kill(os.getpid(), signal.SIGKILL)
        t = time.perf_counter()
        store.close()
        out["close_s"] = time.perf_counter() - t
        return out
    t = time.perf_counter()
    store = LongTermMemory(a.store, emb, hybrid=hw, clock=_Clock(now), threads=a.threads)
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    store.search(NAMESPACE, questions[0], top_k=TOP_K, touch=False)
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    store.search(NAMESPACE, questions[1 % len(questions)], top_k=TOP_K, touch=False)
    second_s = time.perf_counter() - t
    count = store.count(NAMESPACE)
    store.close()
    return {"open_s": open_s, "first_hybrid_s": first_s, "second_hybrid_s": second_s,
            "count": count, "kernel_warmup_s": warm_s, "peak_rss_mb": _peak_rss_mb(),
            "threads": pinned, "exit": a.exit}


def _worker_main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description="scale benchmark worker")
    p.add_argument("--worker", required=True,
                   choices=("corpus", "ingest", "memcore", "open-warm", "approximate",
                            "faiss-flat", "hnsw", "bulk-ingest", "fresh-first"))
    p.add_argument("--workload", choices=WORKLOADS, default="recombined")
    p.add_argument("--exit", choices=EXITS, default="clean")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--store", type=Path)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--vectors", default="hashing")
    p.add_argument("--embed-limit", type=int, default=20_000)
    p.add_argument("--chunk", type=int, default=50_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None)
    p.add_argument("--rebuild-hnsw", action="store_true")
    a = p.parse_args(argv)
    out = worker(a)
    a.result.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
