"""Hybrid top-k from int8 codes (memcore.kernels.scan): equals the exact path exactly, and the
exact path equals its NumPy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import codes, scan
from memcore.kernels import reference as ref
from strategies import NOW, assert_topk_matches, episode_windows, hybrid_problems, vectors_for

SCANS = {"serial": scan.hybrid_scan_topk_serial, "parallel": scan.hybrid_scan_topk_parallel}


def _out(k):
    return (np.full(k, 7, np.int64), np.full(k, 7, np.float32), np.full(k, 7, np.float32))


def _encoded(v, nibbles=False):
    """The scan's ``codes``: int8 codes, and with ``nibbles`` the 4-bit codes (the first pass
    reads those), else none."""
    n, dim = v.shape
    out = (np.empty((n, dim), np.int8), np.empty(n, np.float32), np.empty(n, np.float32),
           np.empty(n, np.float32))
    codes.encode_rows(v, *out)
    if not nibbles:
        return (*out, *scan.NO_NIBBLES)
    four = (np.empty((n, codes.nibble_width(dim)), np.uint8),
            *(np.empty(n, np.float32) for _ in range(3)))
    codes.encode_nibbles(v, *four)
    return (*out, *four)


def _exact(fn, p, k=None):
    out = _out(p.k if k is None else k)
    count = fn(p.query, p.vectors, *p.after_vectors(), out)
    return (*out, int(count))


def _scan(fn, p, enc=None):
    out = _out(p.k)
    stats = np.full(2, -5, np.int64)
    count = fn(p.query, enc or _encoded(p.vectors), p.vectors, *p.after_vectors(), (*out, stats))
    return (*out, int(count)), stats


@pytest.mark.parametrize("nibbles", [False, True], ids=["int8", "4bit"])
@pytest.mark.parametrize("name", list(SCANS))
@given(p=hybrid_problems())
def test_scan_equals_the_exact_path_exactly(name, nibbles, p):
    want = _exact(scan.hybrid_exact_topk, p)
    got, stats = _scan(SCANS[name], p, _encoded(p.vectors, nibbles))
    assert got[3] == want[3]
    for g, w in zip(got[:3], want[:3]):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert 0 <= stats[0] <= p.alive.sum() and 0 <= stats[1] <= p.vectors.shape[0]


@pytest.mark.parametrize("nibbles", [False, True], ids=["int8", "4bit"])
@given(p=hybrid_problems(max_n=400))
def test_parallel_equals_serial_with_the_same_work(nibbles, p):
    enc = _encoded(p.vectors, nibbles)
    a, sa = _scan(scan.hybrid_scan_topk_serial, p, enc)
    b, sb = _scan(scan.hybrid_scan_topk_parallel, p, enc)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(sa, sb)


@given(p=hybrid_problems())
def test_exact_path_equals_oracle(p):
    got = _exact(scan.hybrid_exact_topk, p)
    want = _exact(ref.hybrid_exact_topk, p)
    if p.w_rec == 0.0:           # the same float64 operations in the same order: bit for bit
        assert got[3] == want[3]
        for g, w in zip(got[:3], want[:3]):
            np.testing.assert_array_equal(g, w)
    else:                        # libm's vs NumPy's exp2: last bits, near-ties tolerated
        full = _exact(ref.hybrid_exact_topk, p, p.vectors.shape[0] + 1)
        assert_topk_matches(got, want, full, 1e-6 * (1 + np.abs(p.dense).sum() + p.w_rec
                                                     + p.w_imp + (p.sp_w * p.sp_inv).sum()),
                            exact_sims=True, threshold=p.threshold)


@given(p=hybrid_problems(max_n=200, kinds=("unit",)))
def test_oracle_scan_signature(p):
    out, stats = _out(p.k), np.zeros(2, np.int64)
    c = ref.hybrid_scan_topk(p.query, _encoded(p.vectors), p.vectors, *p.after_vectors(),
                             (*out, stats))
    want = _exact(ref.hybrid_exact_topk, p)
    assert c == want[3] and (out[0] == want[0]).all()


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 50), dim=st.integers(1, 70))
def test_exact_sim_equals_oracle_bit_for_bit(seed, n, dim):
    rng = np.random.default_rng(seed)
    v = vectors_for(rng, n, dim, "unit") * np.float32(rng.uniform(0.1, 10))
    q = vectors_for(rng, 1, dim, "unit")[0]
    got = np.array([scan.exact_sim(q, v[i]) for i in range(n)])
    np.testing.assert_array_equal(got, ref.exact_sims(q, v))


def _clustered_problem(n=3000, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    centres = vectors_for(rng, 30, dim, "unit")
    x = centres[rng.integers(0, 30, n)] + 0.5 * rng.standard_normal((n, dim)) / np.sqrt(dim)
    v = np.ascontiguousarray(x / np.linalg.norm(x, axis=1, keepdims=True), np.float32)
    return v, episode_windows(np.repeat(np.arange(n // 20), 20)[:n], 2)


@pytest.mark.slow   # int64 window rows (stores before int32 postings): their own compilation
def test_int64_window_rows_rank_as_int32():
    v, (start, size, rows) = _clustered_problem(n=600)
    n = v.shape[0]
    z, e = np.zeros(0), np.zeros(0, np.int64)
    dense = np.array([0.0, 0.0, 1.0, 1.5, 0.1, 8.0])
    got = []
    for win_rows in (rows, rows.astype(np.int64)):
        for fn in (scan.hybrid_scan_topk_serial, scan.hybrid_exact_topk):
            out = _out(10)
            lead = (v[5], _encoded(v), v) if fn is scan.hybrid_scan_topk_serial else (v[5], v)
            tail = (np.zeros(2, np.int64),) if fn is scan.hybrid_scan_topk_serial else ()
            fn(*lead, (start, size, win_rows), 0.4, dense, (np.zeros(1, np.int64), e, z, z, z, z),
               (np.zeros(n), np.zeros(n, np.float32), NOW, 3600.0, 0.0, 0.0), np.ones(n, bool),
               -np.inf, (*out, *tail))
            got.append(out)
    for other in got[1:]:
        for x, y in zip(got[0], other):
            np.testing.assert_array_equal(x, y)


def test_candidates_are_a_small_fraction_on_clustered_rows():
    # Not a speed claim: on clustered rows with a clear match the bounds prune nearly all rows.
    v, win = _clustered_problem()
    n = v.shape[0]
    q = v[17].copy()
    z = np.zeros(0)
    e = np.zeros(0, np.int64)
    out, stats = _out(10), np.zeros(2, np.int64)
    dense = np.array([0.0, 0.0, 1.0, 1.5, 0.1, 8.0])
    sparse = (np.zeros(1, np.int64), e, z, z, z, z)
    decay = (np.zeros(n), np.zeros(n, np.float32), NOW, 3600.0, 0.0, 0.0)
    scan.hybrid_scan_topk_serial(q, _encoded(v), v, win, 0.4, dense, sparse, decay,
                                 np.ones(n, bool), -np.inf, (*out, stats))
    assert 10 <= stats[0] < n // 10, stats
    want = _out(10)
    scan.hybrid_exact_topk(q, v, win, 0.4, dense, sparse, decay, np.ones(n, bool), -np.inf,
                           want)
    np.testing.assert_array_equal(out[0], want[0])


def test_scores_that_underflow_to_zero_tie():
    # Found by hypothesis: inv = 1e-164 makes every score round to +-0.0 in float32, a tie;
    # the bounds' slack must cover the rounding to float32 below its normal range.
    v = np.array([[1.0], [-1.0], [1.0], [1.0]], np.float32)
    start, size, rows = episode_windows(np.full(4, -1), 0)
    z, e = np.zeros(0), np.zeros(0, np.int64)
    dense = np.array([0.0, 0.0, 0.0, 0.5, 0.0, 1.0097199e-164])
    args = ((start, size, rows), 0.0, dense, (np.zeros(1, np.int64), e, z, z, z, z),
            (np.full(4, NOW), np.ones(4, np.float32), NOW, 1.0, 0.0, 0.0), np.ones(4, bool),
            -np.inf)
    want = _out(1)
    scan.hybrid_exact_topk(np.array([-1.0], np.float32), v, *args, want)
    for fn in SCANS.values():
        out, stats = _out(1), np.zeros(2, np.int64)
        fn(np.array([-1.0], np.float32), _encoded(v), v, *args, (*out, stats))
        for g, w in zip(out, want):
            np.testing.assert_array_equal(g, w)


def test_a_subnormal_dense_weight_keeps_the_hot_level_finite_or_infinite():
    # Found by hypothesis: w_ctx = 2.2e-311 made the hot level inf - inf = NaN, and the row
    # with the largest sparse value was never flagged.
    rng = np.random.default_rng(0)
    v = (rng.integers(-2, 3, (27, 1)) / 8).astype(np.float32)
    start, size, rows = episode_windows(np.full(27, -1), 0)
    sp = (np.array([0, 5], np.int64), np.array([0, 6, 7, 19, 26], np.int64),
          np.array([6.3, 0.7, 7.5, 1.9, 7.7]), np.array([0.5]), np.zeros(1), np.ones(1))
    args = ((start, size, rows), 0.0, np.array([0.0, 0.0, 0.0, 2.22507386e-311, 0.0, 1.0]), sp,
            (np.full(27, NOW), np.ones(27, np.float32), NOW, 1.0, 0.0, 0.0), np.ones(27, bool),
            -np.inf)
    want = _out(1)
    scan.hybrid_exact_topk(np.array([0.125], np.float32), v, *args, want)
    assert want[0][0] == 26
    for fn in SCANS.values():
        out, stats = _out(1), np.zeros(2, np.int64)
        fn(np.array([0.125], np.float32), _encoded(v), v, *args, (*out, stats))
        for g, w in zip(out, want):
            np.testing.assert_array_equal(g, w)


def test_ties_go_to_the_lower_row_and_the_threshold_row_is_kept():
    v = np.tile(np.array([[0.6, 0.8]], np.float32), (6, 1))
    start, size, rows = episode_windows(np.full(6, -1), 0)
    q = v[0].copy()
    thr = scan.exact_sim(q, v[0])                        # exactly every row's similarity
    alive = np.ones(6, bool)
    alive[1] = False
    z, e = np.zeros(0), np.zeros(0, np.int64)
    for fn in SCANS.values():
        out, stats = _out(3), np.zeros(2, np.int64)
        c = fn(q, _encoded(v), v, (start, size, rows), 1.0, np.array([1.0, 0, 1, 0, 0, 0]),
               (np.zeros(1, np.int64), e, z, z, z, z),
               (np.zeros(6), np.zeros(6, np.float32), NOW, 1.0, 0.0, 0.0), alive, thr,
               (*out, stats))
        assert c == 3 and out[0].tolist() == [0, 2, 3]


@pytest.mark.slow   # all-read-only int64-window signatures: 10-20 s of cold compilation
@pytest.mark.parametrize("name", list(SCANS))
def test_read_only_inputs(name):
    """Read-only arrays give the same results (searches of read-only stores, e.g.
    tests/test_hybrid_stores.py's reopen, stay in the default run)."""
    v, win = _clustered_problem(600, 16, 3)
    n = v.shape[0]
    rng = np.random.default_rng(1)
    arrays = [*_encoded(v, True), v, *win]
    cols = [NOW - rng.uniform(0, 1e4, n), rng.random(n).astype(np.float32), rng.random(n) > 0.2]
    sp = (np.array([0, 3], np.int64), np.array([4, 9, 30], np.int64), np.array([1.0, 2.0, 3.0]),
          np.array([0.5]), np.array([0.1]), np.array([2.0]))
    dense = np.array([0.5, 0.0, 2.0, 1.0, 0.1, 4.0])

    def call(arrs, cs):
        out, stats = _out(7), np.zeros(2, np.int64)
        SCANS[name](v[3].copy(), tuple(arrs[:8]), arrs[8], tuple(arrs[9:12]), 0.4, dense, sp,
                    (cs[0], cs[1], NOW, 3600.0, 0.3, 0.2), cs[2], 0.0, (*out, stats))
        return out
    want = call(arrays, cols)
    ro = [a.copy() for a in arrays + cols]
    for a in ro:
        a.setflags(write=False)
    for g, w in zip(call(ro[:12], ro[12:]), want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("nibbles", [False, True], ids=["int8", "4bit"])
@pytest.mark.parametrize("name", list(SCANS))
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 12), alpha=st.sampled_from([0.0, 0.4]),
       w_sp=st.sampled_from([0.5, 2.0, 8.0]))
def test_sparse_signals_deciding_and_dead_rows_with_the_best_similarity(name, nibbles, seed, k,
                                                                        alpha, w_sp):
    # The bounds that carry each sparse row's gain, seed with the sparse rows and cap a window
    # mean at the largest hi: the most similar rows are dead but sit in live rows' windows,
    # and heavy sparse signals (with ties of value) decide the top rows.
    rng = np.random.default_rng(seed)
    n, dim = 500, 8
    v, win = _clustered_problem(n, dim, seed % 7)
    q = v[rng.integers(0, n)].copy()
    sims = ref.exact_sims(q, v)
    alive = sims < np.quantile(sims, 0.97)
    alive &= rng.random(n) > 0.1
    sp_rows = [np.flatnonzero(rng.random(n) < f) for f in (0.4, 0.1, 0.02)]
    sp_vals = [rng.choice([0.5, 1.0, 3.0], r.shape[0]) for r in sp_rows]
    sp = (np.cumsum([0] + [r.shape[0] for r in sp_rows]).astype(np.int64),
          np.concatenate(sp_rows).astype(np.int64), np.concatenate(sp_vals),
          np.array([w_sp, 1.0, 2.0]), np.array([0.3, 0.1, 0.0]), np.array([2.0, 1.5, 1.0]))
    cols = (NOW - rng.uniform(0, 1e5, n), rng.random(n).astype(np.float32), alive)
    dense = np.array([0.0, 0.0, 1.0, 0.5, 0.05, 6.0])
    args = (win, alpha, dense, sp, (cols[0], cols[1], NOW, 3600.0 * 24, 0.02, 0.1), cols[2],
            -np.inf)
    want = _out(k)
    scan.hybrid_exact_topk(q, v, *args, want)
    out, stats = _out(k), np.zeros(4, np.int64)
    SCANS[name](q, _encoded(v, nibbles), v, *args, (*out, stats))
    for g, w in zip(out, want):
        np.testing.assert_array_equal(g, w)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), m=st.integers(0, 4))
def test_rows_in_equals_oracle(seed, n, m):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, n).astype(np.int32)
    wanted = rng.integers(0, 8, m).astype(np.int32)
    got = scan.rows_in(values, wanted)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref.rows_in(values, wanted))
