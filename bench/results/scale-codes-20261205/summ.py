import json, sys, numpy as np, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[(r["workload"], r["phase"], r["tree"])].append(r)
for w in sorted({r["workload"] for r in rows}):
    flat = [r["search"]["p50"] for r in by[(w, "faiss-flat", "s3-codes")]]
    fl99 = [r["search"]["p99"] for r in by[(w, "faiss-flat", "s3-codes")]]
    print(f"\n## {w}: FAISS flat p50 per round {[round(x,1) for x in flat]} (median {np.median(flat):.1f}), p99 median {np.median(fl99):.1f}")
    ing = by[(w, "ingest", "s3-codes")]
    if ing:
        i = ing[0]; print(f"ingest: put_many {i.get('put_many_s',0):.1f} s, index {i.get('index_s',0):.2f} s, close {i.get('close_s',0):.2f} s, peak RSS {i['peak_rss_mb']:.0f} MB")
    for tree in ("base", "s3-codes"):
        m = by[(w, "memcore", tree)]
        if not m: continue
        sp = [r["similarity"]["p50"] for r in m]; s99 = [r["similarity"]["p99"] for r in m]
        hp = [r["hybrid"]["p50"] for r in m]; h99 = [r["hybrid"]["p99"] for r in m]
        rss = [r["peak_rss_mb"] for r in m]
        ratio = [a / b for a, b in zip(sp, flat)]
        loads = [tuple(round(x, 1) for x in r["load_start"]) for r in m]
        print(f"{tree}: sim p50 {[round(x,1) for x in sp]} med {np.median(sp):.1f}, p99 med {np.median(s99):.1f}; sim/flat per round {[round(x,3) for x in ratio]} med {np.median(ratio):.3f}; hybrid p50 {[round(x,1) for x in hp]} med {np.median(hp):.1f} p99 med {np.median(h99):.1f}; hyb/flat med {np.median([a/b for a,b in zip(hp, flat)]):.3f}; peak RSS {[round(x) for x in rss]}; first hybrid s {[round(r['first_hybrid_s'],3) for r in m]}; ids {set(r['similarity_ids_sha1'] for r in m)} {set(r['hybrid_ids_sha1'] for r in m)}; load {loads}")
