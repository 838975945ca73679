"""Hypothesis strategies for memcore's arrays and ranking problems, and a top-k checker.

Arrays are generated from a drawn seed with NumPy (fast, any size) while hypothesis draws the
shapes, weights and the *kind* of data, so shrinking still reaches small shapes and simple
kinds. Two kinds of vectors:

- ``"dyadic"``: entries in {-1, -1/2, -1/4, 0, 1/4, 1/2, 1} / 4, so every dot product is exact in
  float32 *and* float64 (kernel and oracle similarities agree bit for bit) and ties are common;
- ``"unit"``: Gaussian rows normalised to unit length (the production case; sims within 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "RankingProblem",
    "vectors_for",
    "timestamps_for",
    "importance_for",
    "ranking_problems",
    "weights_tuples",
    "NOW",
    "score_tolerance",
    "SIM_EPS",
    "band_threshold",
    "assert_topk_matches",
]

#: A fixed "now" (Unix seconds) for generated problems.
NOW = 1_700_000_000.0

_DYADIC = np.array([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0], np.float32) / 4


def vectors_for(rng: np.random.Generator, n: int, dim: int, kind: str) -> np.ndarray:
    """(n, dim) float32 C-contiguous rows of the given kind (see module docstring)."""
    if kind == "dyadic":
        out = _DYADIC[rng.integers(0, _DYADIC.size, size=(n, dim))]
        if n > 1:  # duplicate some rows so exact ties between rows are frequent
            dup = rng.random(n) < 0.2
            out[dup] = out[rng.integers(0, n, size=int(dup.sum()))]
        return np.ascontiguousarray(out, np.float32)
    x = rng.standard_normal((n, dim))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(x, np.float32)


def timestamps_for(rng: np.random.Generator, n: int, now: float, half_life: float) -> np.ndarray:
    """(n,) float64 Unix seconds mixing ages 0, exactly half_life, random, and the future."""
    choice = rng.integers(0, 5, size=n)
    ages = np.select(
        [choice == 0, choice == 1, choice == 2, choice == 3],
        [np.zeros(n), np.full(n, half_life), rng.uniform(0, 10 * half_life, n),
         -rng.uniform(0, half_life, n)],                     # in the future: age counts as 0
        rng.integers(0, 4, size=n) * half_life)              # whole half-lives: ties
    return np.ascontiguousarray(now - ages, np.float64)


def importance_for(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) float32 in [0, 1], with many exact 0, 0.5 and 1 values."""
    imp = rng.random(n).astype(np.float32)
    pick = rng.random(n)
    imp[pick < 0.3] = np.float32(0.5)
    imp[pick < 0.15] = np.float32(0.0)
    imp[pick > 0.85] = np.float32(1.0)
    return imp


#: (w_sim, w_rec, w_imp) from "pure similarity" to "recency only", including exact zeros.
weights_tuples = st.tuples(
    st.sampled_from([0.0, 0.25, 1.0, 2.0]) | st.floats(0.0, 5.0),
    st.sampled_from([0.0, 0.1, 1.0]) | st.floats(0.0, 5.0),
    st.sampled_from([0.0, 0.1, 1.0]) | st.floats(0.0, 5.0),
)


@dataclass
class RankingProblem:
    """One fused top-k problem: arrays in the kernels' dtypes plus the scalars."""

    queries: np.ndarray           # (n_queries, dim) float32
    vectors: np.ndarray           # (n, dim) float32
    last_accessed_at: np.ndarray  # (n,) float64
    importance: np.ndarray        # (n,) float32
    alive: np.ndarray             # (n,) bool
    now: float
    half_life: float
    w_sim: float
    w_rec: float
    w_imp: float
    threshold: float
    k: int
    kind: str

    @property
    def query(self) -> np.ndarray:
        """The first query, (dim,) float32 C-contiguous."""
        return self.queries[0]

    def columns(self):
        """(vectors, last_accessed_at, importance, alive, now, half_life, w_sim, w_rec, w_imp,
        threshold): the kernels' arguments after the query."""
        return (self.vectors, self.last_accessed_at, self.importance, self.alive, self.now,
                self.half_life, self.w_sim, self.w_rec, self.w_imp, self.threshold)


@st.composite
def ranking_problems(draw, max_n=300, max_dim=12, max_queries=3, kinds=("dyadic", "unit")):
    """A :class:`RankingProblem` with n in [0, max_n], k in [0, n + 3] and varied weights.

    The threshold is -inf, a random value, or (for dyadic data) exactly some row's similarity,
    so the ``sim >= threshold`` boundary is exercised.
    """
    n = draw(st.integers(0, max_n))
    dim = draw(st.integers(1, max_dim))
    n_queries = draw(st.integers(1, max_queries))
    kind = draw(st.sampled_from(kinds))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    half_life = draw(st.sampled_from([1.0, 3600.0, 497817.262749819]) | st.floats(1e-3, 1e9))
    w_sim, w_rec, w_imp = draw(weights_tuples)
    vectors = vectors_for(rng, n, dim, kind)
    if n and draw(st.booleans()):       # queries equal to stored rows: sim exactly |row|^2
        queries = vectors[rng.integers(0, n, size=n_queries)].copy()
    else:
        queries = vectors_for(rng, n_queries, dim, kind)
    alive = rng.random(n) >= draw(st.sampled_from([0.0, 0.3, 0.9]))
    thr_kind = draw(st.sampled_from(["none", "random", "row"]))
    threshold = -np.inf
    if thr_kind == "random":
        threshold = draw(st.floats(-1.0, 1.0))
    elif thr_kind == "row" and n and kind == "dyadic":
        threshold = float(vectors[rng.integers(0, n)] @ queries[0])
    k = draw(st.integers(0, n + 3))
    return RankingProblem(
        queries=np.ascontiguousarray(queries, np.float32), vectors=vectors,
        last_accessed_at=timestamps_for(rng, n, NOW, half_life),
        importance=importance_for(rng, n), alive=alive, now=NOW, half_life=half_life,
        w_sim=w_sim, w_rec=w_rec, w_imp=w_imp, threshold=threshold, k=k, kind=kind)


def score_tolerance(w_sim: float, w_rec: float, w_imp: float) -> float:
    """Absolute tolerance between kernel and oracle float32 scores.

    Covers the float32-vs-float64 similarity (1e-5 per unit of w_sim) plus a float32 rounding
    step of the score.
    """
    return 1e-5 * (1.0 + w_sim + w_rec + w_imp)


#: Similarity band around the threshold in which membership may differ between a kernel and
#: an oracle for non-dyadic data (float32 vs float64 dot products), as in the stateful tests.
SIM_EPS = 2e-5


def band_threshold(threshold: float, exact_sims: bool = False) -> float:
    """The threshold to compute the checker's ``full`` oracle ranking with: ``threshold`` for
    exact (dyadic) sims, else lowered by :data:`SIM_EPS` so rows in the band are known."""
    return threshold if exact_sims else threshold - SIM_EPS


def assert_topk_matches(got, ref, full, tol, exact_sims=False, threshold=-np.inf):
    """Check a kernel's top-k against the oracle's, with near-ties tolerated.

    In the style of FAISS ``check_ref_knn_with_draws``: the score sequences agree within
    ``tol``; every returned id is a candidate whose oracle score (from ``full``, the oracle's
    ranking of *all* candidates) agrees within ``tol``; an id the oracle did not return must tie
    the oracle's k-th score within ``tol``. The kernel's own output must be exactly ordered
    (score desc, ties by lower id), distinct, finite, and padded with -1 / -inf / -inf.

    Unless ``exact_sims``, rows whose oracle similarity lies within :data:`SIM_EPS` of the
    threshold are optional (the kernel's float32 sim may land on either side, e.g. a query
    equal to a stored row at threshold 1.0): then only the bounds of the stateful tests are
    required: ``min(k, sure) <= count <= min(k, candidates)``, and a sure row left out scores
    at most the kernel's k-th score (within ``tol``).

    Parameters
    ----------
    got, ref : tuple (ids, scores, sims, count)
        Kernel and oracle outputs for the same k.
    full : tuple (ids, scores, sims, count)
        Oracle output with k >= number of candidates, at threshold
        ``band_threshold(threshold, exact_sims)``.
    tol : float
    exact_sims : bool
        Require the kernel's sims to equal the oracle's exactly (dyadic data).
    threshold : float, default -inf
        The similarity threshold of the problem.
    """
    g_ids, g_scores, g_sims, g_count = got
    r_ids, r_scores, r_sims, r_count = ref
    f_ids, f_scores, f_sims, f_count = full
    c = int(g_count)
    k = g_ids.shape[0]
    assert (g_ids[c:] == -1).all() and np.isneginf(g_scores[c:]).all()
    assert np.isneginf(g_sims[c:]).all()
    assert np.isfinite(g_scores[:c]).all() and np.isfinite(g_sims[:c]).all()
    assert len(set(g_ids[:c].tolist())) == c, "duplicate ids"
    assert (g_sims[:c] >= np.float32(threshold)).all(), "a returned sim is below the threshold"
    for j in range(1, c):
        assert g_scores[j] < g_scores[j - 1] or (
            g_scores[j] == g_scores[j - 1] and g_ids[j] > g_ids[j - 1]), (j, g_ids, g_scores)
    score_of = dict(zip(f_ids[:f_count].tolist(), f_scores[:f_count].tolist()))
    sim_of = dict(zip(f_ids[:f_count].tolist(), f_sims[:f_count].tolist()))
    eps = 0.0 if exact_sims else SIM_EPS
    thr = float(np.float32(threshold))
    sure = {i for i, s in sim_of.items() if s >= thr + eps}
    banded = len(sure) < len(sim_of)
    returned = set(g_ids[:c].tolist())
    for i, s, sim in zip(g_ids[:c].tolist(), g_scores[:c].tolist(), g_sims[:c].tolist()):
        assert i in score_of, f"row {i} is not a candidate (dead or below threshold)"
        assert abs(s - score_of[i]) <= tol, (i, s, score_of[i])
        if exact_sims:
            assert sim == sim_of[i], (i, sim, sim_of[i])
        else:
            assert abs(sim - sim_of[i]) <= 1e-5, (i, sim, sim_of[i])
    if banded:      # rows at the threshold are optional: the stateful tests' bounds
        assert min(k, len(sure)) <= c <= min(k, len(sim_of)), (c, len(sure), len(sim_of))
        if c == k and c:
            for i in sure - returned:
                assert score_of[i] <= g_scores[c - 1] + tol, (i, "outranks a returned row")
        elif c < k:
            assert sure <= returned
        return
    assert g_count == r_count, (g_count, r_count)
    np.testing.assert_allclose(g_scores[:c], r_scores[:c], rtol=0, atol=tol)
    returned_by_ref = set(r_ids[:c].tolist())
    for i in returned - returned_by_ref:
        assert score_of[i] >= r_scores[c - 1] - tol, f"row {i} is not a near-tie of the k-th"


# ----------------------------------------------------------------------------- hybrid problems
def episode_windows(episode_of: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR episode windows as hybrid recall builds them: rows of one episode in row order,
    row ``i``'s window the members within ``radius`` positions of it (itself included); a row
    with episode -1 is its own window. Returns (win_start (n,) int64, win_len (n,) int64,
    win_rows int32): the dtypes the store passes, so the kernel tests compile no signature of
    their own (int64 window rows: test_kernels_scan.py::test_int64_window_rows_rank_as_int32)."""
    n = episode_of.shape[0]
    members: dict = {}
    for i, e in enumerate(episode_of.tolist()):
        members.setdefault(e if e >= 0 else ("own", i), []).append(i)
    wins = [None] * n
    for rows in members.values():
        for p, i in enumerate(rows):
            wins[i] = rows[max(0, p - radius):p + radius + 1]
    size = np.array([len(w) for w in wins], np.int64)
    start = np.zeros(n, np.int64)
    start[1:] = np.cumsum(size)[:-1]
    flat = np.array([j for w in wins for j in w], np.int32)
    return start, size, flat


@dataclass
class HybridProblem:
    """Arguments of :func:`memcore.kernels.scan.hybrid_exact_topk` (and the codes scan)."""

    query: np.ndarray
    vectors: np.ndarray
    win_start: np.ndarray
    win_len: np.ndarray
    win_rows: np.ndarray
    alpha: float
    dense: np.ndarray
    sp_ptr: np.ndarray
    sp_rows: np.ndarray
    sp_vals: np.ndarray
    sp_w: np.ndarray
    sp_mu: np.ndarray
    sp_inv: np.ndarray
    last_accessed_at: np.ndarray
    importance: np.ndarray
    alive: np.ndarray
    now: float
    half_life: float
    w_rec: float
    w_imp: float
    threshold: float
    k: int
    kind: str

    def after_vectors(self):
        """Every argument after ``vectors`` up to ``threshold``, in kernel order (windows,
        sparse signals and decay as the kernels' tuples)."""
        return ((self.win_start, self.win_len, self.win_rows), self.alpha, self.dense,
                (self.sp_ptr, self.sp_rows, self.sp_vals, self.sp_w, self.sp_mu, self.sp_inv),
                (self.last_accessed_at, self.importance, self.now, self.half_life, self.w_rec,
                 self.w_imp), self.alive, self.threshold)


@st.composite
def hybrid_problems(draw, max_n=300, max_dim=24, kinds=("dyadic", "unit", "clustered")):
    """A :class:`HybridProblem`: episodes and windows, z-statistics, sparse signals (sorted
    rows, repeated values), decay, thresholds at a row's exact similarity, k in [0, n + 3]."""
    from memcore.kernels.reference import exact_sims

    n = draw(st.integers(0, max_n))
    dim = draw(st.integers(1, max_dim))
    kind = draw(st.sampled_from(kinds))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "clustered":
        centres = vectors_for(rng, max(1, n // 20), dim, "unit")
        x = centres[rng.integers(0, centres.shape[0], n)] + 0.3 * rng.standard_normal((n, dim))
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        vectors = np.ascontiguousarray(x, np.float32)
    else:
        vectors = vectors_for(rng, n, dim, kind)
    if n and draw(st.booleans()):
        query = vectors[rng.integers(0, n)].copy()
    else:
        query = vectors_for(rng, 1, dim, "dyadic" if kind == "dyadic" else "unit")[0]
    if draw(st.booleans()):                                  # a zero row (deleted-like)
        if n:
            vectors[rng.integers(0, n)] = 0.0
    n_ep = draw(st.integers(1, max(1, n // 3 + 1)))
    episode_of = rng.integers(-1, n_ep, n)
    win_start, win_len, win_rows = episode_windows(episode_of, draw(st.sampled_from([0, 1, 2, 3])))
    alpha = draw(st.sampled_from([0.0, 0.4, 1.0]) | st.floats(0.0, 1.0))
    weights = st.sampled_from([0.0, 0.5, 1.0, 1.5]) | st.floats(0.0, 4.0)
    stats = st.sampled_from([0.0, 0.1]) | st.floats(-1.0, 1.0)
    invs = st.sampled_from([0.0, 1.0, 10.0]) | st.floats(0.0, 50.0)
    dense = np.array([draw(weights), draw(stats), draw(invs),
                      draw(weights), draw(stats), draw(invs)], np.float64)
    n_sp = draw(st.integers(0, 3))
    ptr = [0]
    rows, vals = [], []
    for _ in range(n_sp):
        r = np.flatnonzero(rng.random(n) < draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])))
        v = rng.choice([0.5, 1.0, 2.0], r.shape[0]) if draw(st.booleans()) \
            else rng.uniform(0, 8, r.shape[0])
        rows.append(r)
        vals.append(v)
        ptr.append(ptr[-1] + r.shape[0])
    sp_ptr = np.array(ptr, np.int64)
    sp_rows = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    sp_vals = np.concatenate(vals).astype(np.float64) if vals else np.zeros(0)
    sp_w = np.array([draw(weights) for _ in range(n_sp)], np.float64)
    sp_mu = np.array([draw(st.floats(0.0, 3.0)) for _ in range(n_sp)], np.float64)
    sp_inv = np.array([draw(invs) for _ in range(n_sp)], np.float64)
    half_life = draw(st.sampled_from([1.0, 3600.0]) | st.floats(1e-3, 1e9))
    w_rec = draw(st.sampled_from([0.0, 0.0, 0.1, 1.0]))
    w_imp = draw(st.sampled_from([0.0, 0.1, 1.0]))
    alive = rng.random(n) >= draw(st.sampled_from([0.0, 0.3, 0.9]))
    thr_kind = draw(st.sampled_from(["none", "random", "row"]))
    threshold = -np.inf
    if thr_kind == "random":
        threshold = draw(st.floats(-1.0, 1.0))
    elif thr_kind == "row" and n:
        threshold = float(exact_sims(query, vectors)[rng.integers(0, n)])
    return HybridProblem(
        query=np.ascontiguousarray(query, np.float32), vectors=vectors, win_start=win_start,
        win_len=win_len, win_rows=win_rows, alpha=alpha, dense=dense, sp_ptr=sp_ptr, sp_rows=sp_rows,
        sp_vals=sp_vals, sp_w=sp_w, sp_mu=sp_mu, sp_inv=sp_inv,
        last_accessed_at=timestamps_for(rng, n, NOW, half_life),
        importance=importance_for(rng, n), alive=alive, now=NOW, half_life=half_life,
        w_rec=w_rec, w_imp=w_imp, threshold=threshold, k=draw(st.integers(0, n + 3)), kind=kind)
