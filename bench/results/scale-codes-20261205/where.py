"""Where the time of a 1e6 similarity and hybrid search goes (new tree), in one process."""
import sys, time, numpy as np, numba
tree = sys.argv[1]; store_path = sys.argv[2]
sys.path.insert(0, tree)
from memcore.stores.long import LongTermMemory
from memcore.embedders import HashingEmbedder
from memcore.recall.weights import HybridWeights
from memcore.kernels import scan as ks
sys.path.insert(1, "/work/wt/s3-codes")
from bench.datasets import scale_questions
from bench.scale import _Clock, T0, STEP, NAMESPACE, _hybrid
emb = HashingEmbedder(dim=384)
now = T0 + 20 * STEP + 60.0
hw = _hybrid("hashing")
store = LongTermMemory(store_path, emb, clock=_Clock(now), hybrid=hw, threads=1)
qs = scale_questions(60, 0)
Q = np.ascontiguousarray(emb.encode(qs), np.float32)
sim = HybridWeights.similarity()
for i in range(3):
    store.search(NAMESPACE, qs[i], top_k=10, touch=False, query_vector=Q[i], hybrid=sim)
    store.search(NAMESPACE, qs[i], top_k=10, touch=False, query_vector=Q[i], hybrid=hw)
table = store._tables[NAMESPACE]
idx = table.recall_index(HybridWeights.hybrid(), 384, None)
n = idx.n_rows
codes = idx._codes(n)
four = len(codes) == 8
print("index rows", n, "4-bit codes", four)
# timers around the kernel pieces (monkeypatched wrappers)
T = {"sim_total": [], "sim_kernel": [], "hyb_total": [], "hyb_kernel": [], "hyb_lexical": [], "hyb_moments": []}
orig_scan = ks.hybrid_scan_topk
cur = [None]
def timed_scan(*a, **k):
    t = time.perf_counter(); r = orig_scan(*a, **k); T[cur[0] + "_kernel"].append(time.perf_counter() - t); return r
ks.hybrid_scan_topk = timed_scan
from memcore.recall import index as ix
ix._ks.hybrid_scan_topk = timed_scan
orig_lex = ix.HybridIndex.lexical_signals
def timed_lex(self, *a, **k):
    t = time.perf_counter(); r = orig_lex(self, *a, **k); T["hyb_lexical"].append(time.perf_counter() - t); return r
ix.HybridIndex.lexical_signals = timed_lex
orig_mom = ix.HybridIndex.moments
def timed_mom(self, *a, **k):
    t = time.perf_counter(); r = orig_mom(self, *a, **k); T["hyb_moments"].append(time.perf_counter() - t); return r
ix.HybridIndex.moments = timed_mom
hq = [store.prepare(NAMESPACE, q, hybrid=hw).dense for q in qs]
QH = np.ascontiguousarray(emb.encode(hq), np.float32)
for i in range(60):
    cur[0] = "sim"
    t = time.perf_counter(); store.search(NAMESPACE, qs[i], top_k=10, touch=False, query_vector=Q[i], hybrid=sim); T["sim_total"].append(time.perf_counter() - t)
    cur[0] = "hyb"
    t = time.perf_counter(); store.search(NAMESPACE, qs[i], top_k=10, touch=False, query_vector=QH[i], hybrid=hw); T["hyb_total"].append(time.perf_counter() - t)
# the first pass alone (similarity query vectors), and the tightening count
@numba.njit
def first_pass(q, codes, alive):
    n = alive.shape[0]
    w = codes[4].shape[1] if codes[4].shape[0] else 0
    qc, hi, nb, seeds = ks._setup(q, n, w, 10)
    s_ids, s_keys, s_tmp, s_sizes = seeds
    for b in range(nb):
        s_sizes[b] = ks._pass_codes(qc, codes, alive, b * n // nb, (b + 1) * n // nb, hi, s_ids[b], s_keys[b], s_tmp[b])
    return hi
alive = idx._a("alive")[:n]
c8only = (*codes[:4], *ks.NO_NIBBLES)
P = {"pass4": [], "pass8": []}
for i in range(20):
    for nm, cc in (("pass4", codes), ("pass8", c8only)):
        t = time.perf_counter(); first_pass(Q[i], cc, alive); P[nm].append(time.perf_counter() - t)
med = lambda v: round(float(np.median(v[2:])) * 1e3, 2)
print({k: med(v) for k, v in T.items() if v}, {k: med(v) for k, v in P.items()})
import os; print("load", os.getloadavg())
