"""z-statistics without a scan (memcore.kernels.moments): equal to the statistics of the
exact signals, and the put/delete update rules keep the context sums equal to a rebuild."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import moments as km
from memcore.kernels import reference as ref
from strategies import episode_windows, vectors_for

kinds = st.sampled_from(["unit", "dyadic"])


def _sums(fn, V, rows):
    s1, s2 = np.zeros(V.shape[1]), np.zeros((V.shape[1], V.shape[1]))
    fn(V, rows, 1.0, s1, s2)
    return s1, s2


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80), dim=st.integers(1, 24), kind=kinds)
def test_dense_moments_are_the_statistics_of_the_similarities(seed, n, dim, kind):
    rng = np.random.default_rng(seed)
    V = vectors_for(rng, n, dim, kind)
    q = vectors_for(rng, 1, dim, "unit")[0]
    rows = np.arange(n, dtype=np.int64)
    s1, s2 = _sums(km.moments_update, V, rows)
    r1, r2 = _sums(ref.moments_update, V, rows)
    np.testing.assert_allclose(s1, r1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s2, r2, rtol=1e-12, atol=1e-12)
    mean, var = km.dense_moments(q, s1, s2, n)
    np.testing.assert_allclose((mean, var), ref.dense_moments(q, r1, r2, n), atol=1e-12)
    x = ref.exact_sims(q, V)
    if n:
        assert abs(mean - x.mean()) <= 1e-12 and abs(var - x.var()) <= 1e-12
    else:
        assert (mean, var) == (0.0, 0.0)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), dim=st.integers(1, 16),
       radius=st.integers(0, 3), alpha=st.sampled_from([0.0, 0.4, 1.0]) | st.floats(0, 1))
def test_context_moments_are_the_statistics_of_the_stencil(seed, n, dim, radius, alpha):
    rng = np.random.default_rng(seed)
    V = vectors_for(rng, n, dim, "unit")
    q = vectors_for(rng, 1, dim, "unit")[0]
    start, size, win = episode_windows(rng.integers(-1, 4, n), radius)
    s1, s2 = np.zeros(dim), np.zeros((dim, dim))
    rows = np.arange(n, dtype=np.int64)
    km.context_moments_update(V, rows, start, size, win, alpha, 1.0, s1, s2)
    r1, r2 = np.zeros(dim), np.zeros((dim, dim))
    ref.context_moments_update(V, rows, start, size, win, alpha, 1.0, r1, r2)
    np.testing.assert_allclose(s1, r1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s2, r2, rtol=1e-12, atol=1e-12)
    ctx = ref._window_ctx(ref.exact_sims(q, V), start, size, win, alpha)     # the scan's stencil
    mean, var = km.dense_moments(q, s1, s2, n)
    assert abs(mean - ctx.mean()) <= 1e-12 and abs(var - ctx.var()) <= 1e-12


@given(seed=st.integers(0, 2**32 - 1), radius=st.integers(0, 3),
       ops=st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 10**6)),
                    min_size=1, max_size=40))
def test_put_delete_update_rules_equal_a_rebuild(seed, radius, ops):
    # The caller's rule: before a write, subtract the context vectors of every row whose window
    # the write changes (their old windows); after it, add them back with their new windows.
    rng = np.random.default_rng(seed)
    dim, alpha = 6, 0.4
    V = vectors_for(rng, 64, dim, "unit")
    episodes: dict = {}
    live: list = []
    s1, s2 = np.zeros(dim), np.zeros((dim, dim))

    def windows():
        ep_of = np.full(64, -1)
        for e, members in episodes.items():
            ep_of[members] = e
        ptr = np.zeros(65, np.int64)          # windows in each episode's own order
        lists = []
        for i in range(64):
            if ep_of[i] < 0:
                lists.append([i])
            else:
                m = episodes[ep_of[i]]
                p = m.index(i)
                lists.append(m[max(0, p - radius):p + radius + 1])
        ptr[1:] = np.cumsum([len(x) for x in lists])
        return ptr[:-1], np.diff(ptr), np.array([j for x in lists for j in x], np.int64)

    def affected(e, row):
        m = episodes.get(e, [])
        if row not in m:
            return []
        p = m.index(row)
        return [r for r in m[max(0, p - radius):p + radius + 1] if r in live]

    for is_put, e, r in ops:
        if is_put or not live:
            free = [i for i in range(64) if i not in live]
            if not free:
                continue
            row = free[r % len(free)]
            m = episodes.setdefault(e, [])
            before = [x for x in m[-radius:]] if radius else []    # windows that gain row
            start, size, win = windows()
            km.context_moments_update(V, np.array(before, np.int64), start, size, win, alpha, -1.0,
                                      s1, s2)
            m.append(row)
            live.append(row)
            start, size, win = windows()
            km.context_moments_update(V, np.array(before + [row], np.int64), start, size, win, alpha,
                                      1.0, s1, s2)
        else:
            row = live[r % len(live)]
            e = next(k for k, m in episodes.items() if row in m)
            aff = affected(e, row)
            start, size, win = windows()
            km.context_moments_update(V, np.array(aff, np.int64), start, size, win, alpha, -1.0,
                                      s1, s2)
            episodes[e].remove(row)
            live.remove(row)
            aff.remove(row)
            start, size, win = windows()
            km.context_moments_update(V, np.array(aff, np.int64), start, size, win, alpha, 1.0, s1, s2)
    start, size, win = windows()
    w1, w2 = np.zeros(dim), np.zeros((dim, dim))
    km.context_moments_update(V, np.array(sorted(live), np.int64), start, size, win, alpha, 1.0,
                              w1, w2)
    np.testing.assert_allclose(s1, w1, atol=1e-9)
    np.testing.assert_allclose(s2, w2, atol=1e-9)


@given(vals=st.lists(st.floats(0, 50), max_size=30), extra=st.integers(0, 30))
def test_sparse_moments(vals, extra):
    v = np.array(vals, np.float64)
    n = v.shape[0] + extra
    got = km.sparse_moments(v, n)
    want = ref.sparse_moments(v, n)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def _stride_windows(episode_of: np.ndarray, max_window: int):
    """The hybrid index's fixed-stride windows: each row's radius-``max_window``
    neighbourhood in episode (row) order, padded with -1, its position and the count."""
    n = episode_of.shape[0]
    stride = 2 * max_window + 1
    win = np.full((n, stride), -1, np.int32)
    pos = np.zeros(n, np.int8)
    cnt = np.zeros(n, np.int8)
    members: dict = {}
    for i, e in enumerate(episode_of.tolist()):
        members.setdefault(e if e >= 0 else ("own", i), []).append(i)
    for rows in members.values():
        for p, i in enumerate(rows):
            lo = max(0, p - max_window)
            hood = rows[lo:p + max_window + 1]
            win[i, :len(hood)] = hood
            pos[i], cnt[i] = p - lo, len(hood)
    return win, pos, cnt


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), dim=st.integers(1, 20),
       kind=kinds, radius=st.integers(0, 4), alpha=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_stride_context_vectors_equal_the_oracle_bit_for_bit(seed, n, dim, kind, radius, alpha):
    """The index's context vectors from its fixed-stride windows: the kernel equals the
    NumPy oracle exactly (same float64 additions in stride order) and the CSR-window
    definition (``reference.context_vectors``) to rounding."""
    from memcore.recall.weights import MAX_WINDOW

    rng = np.random.default_rng(seed)
    V = vectors_for(rng, n, dim, kind)
    episode_of = rng.integers(-1, 4, n)
    win, pos, cnt = _stride_windows(episode_of, MAX_WINDOW)
    rows = rng.permutation(n)[:rng.integers(0, n + 1)].astype(np.int64)
    got = km.stride_context_vectors(V, rows, win, pos, cnt, alpha, radius)
    want = ref.stride_context_vectors(V, rows, win, pos, cnt, alpha, radius)
    assert got.dtype == np.float64 and got.shape == (rows.shape[0], dim)
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    r = min(radius, MAX_WINDOW)
    start, size, flat = episode_windows(episode_of, r)
    csr = ref.context_vectors(V, start, size, flat, alpha if r else 1.0)[rows]
    np.testing.assert_allclose(got, csr, rtol=1e-12, atol=1e-12)
