"""ABAB driver: per workload, one store (ingested by the new tree), then rounds of
memcore-worker processes alternating base/new, FAISS flat interleaved; writes JSON lines."""
import json, os, subprocess, sys, time, tempfile
CACHE = "/work/wt/s3-codes-cache"
TREES = {"main": "/tmp/s3/base", "codes": "/work/wt/s3-codes"}
N = int(float(sys.argv[1])); WORKLOADS = sys.argv[2].split(","); ROUNDS = int(sys.argv[3])
OUT = sys.argv[4]
def worker(tree, phase, workload, store, extra=()):
    pre = "" if workload == "recombined" else f"{workload}-"
    corpus = f"{CACHE}/scale/{pre}hashing-384-s0-n{N}"
    env = dict(os.environ, PYTHONPATH=tree, MEMCORE_BENCH_CACHE=CACHE, OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               NUMBA_CACHE_DIR=f"/tmp/s3/nc-{os.path.basename(tree)}")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        res = f.name
    load = os.getloadavg()
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "bench.scale", "--worker", phase, "--result", res,
                        "--threads", "1", "--n", str(N), "--corpus", corpus, "--store", store,
                        "--workload", workload, "--queries", "200", *extra], cwd=tree, env=env)
    if p.returncode:
        raise SystemExit(f"{phase} failed in {tree}")
    r = json.load(open(res)); os.unlink(res)
    import hashlib
    for k in ("similarity_ids", "hybrid_ids"):
        if k in r:
            r[k + "_sha1"] = hashlib.sha1(json.dumps(r[k]).encode()).hexdigest()[:12]
    for k in ("similarity_ids", "hybrid_ids", "decay_ids", "decay_scores", "flat_ids", "exact_ids", "exact_sims", "query_vectors"):
        r.pop(k, None) if k != "query_vectors" or phase != "faiss-flat" else r.pop(k, None)
    return {"phase": phase, "tree": os.path.basename(tree), "workload": workload, "n": N,
            "load_start": load, "load_end": os.getloadavg(), "wall_s": time.time() - t, **r}
with open(OUT, "a") as out:
    def emit(r):
        out.write(json.dumps(r) + "\n"); out.flush()
        print(r["phase"], r["tree"], r["workload"], {k: r[k] for k in ("similarity", "hybrid", "search", "peak_rss_mb", "open_s") if k in r}, "load", [round(x, 2) for x in r["load_start"]], flush=True)
    for w in WORKLOADS:
        store = f"{CACHE}/ab/store-{w}-{N}"
        subprocess.run(["rm", "-rf", store])
        emit(worker(TREES["codes"], "ingest", w, store))
        for r in range(ROUNDS):
            order = ("main", "codes") if r % 2 == 0 else ("codes", "main")
            for name in order:
                emit(worker(TREES[name], "memcore", w, store))
            emit(worker(TREES["codes"], "faiss-flat", w, store))
