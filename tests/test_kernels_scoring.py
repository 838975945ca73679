"""The ranking formula kernels (memcore.kernels.scoring) against their NumPy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import reference as ref
from memcore.kernels import scoring
from strategies import NOW, importance_for, timestamps_for, weights_tuples

half_lives = st.sampled_from([1.0, 3600.0, 497817.262749819]) | st.floats(1e-3, 1e9)


def _decay_inputs(seed, m, half_life):
    rng = np.random.default_rng(seed)
    sims = rng.uniform(-1, 1, m).astype(np.float32)
    return sims, timestamps_for(rng, m, NOW, half_life), importance_for(rng, m)


def _both(sims, t, imp, now, hl, w):
    got = scoring.decay_scores(sims, t, imp, now, hl, *w, np.empty(sims.shape[0], np.float32))
    want = ref.decay_scores(sims, t, imp, now, hl, *w, np.empty(sims.shape[0], np.float32))
    return got, want


@given(seed=st.integers(0, 2**32 - 1), m=st.integers(0, 200), hl=half_lives, w=weights_tuples)
def test_decay_scores_equals_oracle(seed, m, hl, w):
    sims, t, imp = _decay_inputs(seed, m, hl)
    got, want = _both(sims, t, imp, NOW, hl, w)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (m,)
    # Same sims in: only libm's vs NumPy's exp2 can differ, by a float32 rounding step.
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7 * (1 + sum(w)))
    assert np.isfinite(got).all()


def test_decay_scores_matches_oracle_exactly_without_recency():
    rng = np.random.default_rng(0)
    sims, t, imp = _decay_inputs(1, 1000, 3600.0)
    got, want = _both(sims, t, imp, NOW, 3600.0, (0.7, 0.0, 0.3))
    np.testing.assert_array_equal(got, want)
    got, want = _both(sims, t, imp, NOW, 3600.0, (rng.random(), 0.5, rng.random()))
    np.testing.assert_allclose(got, want, rtol=2e-7)


@given(hl=half_lives)
def test_recency_at_half_life_is_exactly_half_and_at_zero_is_one(hl):
    assert scoring.recency(hl, hl) == 0.5
    assert scoring.recency(0.0, hl) == 1.0
    assert scoring.recency(2 * hl, hl) == 0.25
    # Through the array kernel: age = now - t must be exactly hl, so take now = hl, t = 0.
    out = np.empty(2, np.float32)
    scoring.decay_scores(np.zeros(2, np.float32), np.array([0.0, hl]), np.zeros(2, np.float32),
                         hl, hl, 0.0, 1.0, 0.0, out)
    assert out.tolist() == [0.5, 1.0]


@given(hl=half_lives, ahead=st.floats(0.0, 1e9) | st.just(np.inf))
def test_future_timestamps_count_as_age_zero(hl, ahead):
    assert scoring.recency(-ahead, hl) == 1.0
    t = np.array([NOW + ahead, NOW])
    out = np.empty(2, np.float32)
    scoring.decay_scores(np.full(2, 0.5, np.float32), t, np.full(2, 0.25, np.float32), NOW, hl,
                         1.0, 1.0, 1.0, out)
    assert out[0] == out[1] == np.float32(0.5 + 1.0 + 0.25)


@given(seed=st.integers(0, 2**32 - 1), hl=half_lives, w=weights_tuples)
def test_score_monotone_in_sim_importance_and_age(seed, hl, w):
    rng = np.random.default_rng(seed)
    m = 64
    base_sim = np.float32(rng.uniform(-1, 1))
    base_imp = np.float32(rng.random())
    base_t = NOW - rng.uniform(0, 5 * hl)
    sims = np.sort(rng.uniform(-1, 1, m).astype(np.float32))
    imps = np.sort(rng.random(m).astype(np.float32))
    ts = np.sort(NOW - rng.uniform(-hl, 5 * hl, m))            # increasing t: decreasing age
    out = np.empty(m, np.float32)
    full = np.full(m, 1.0, np.float32)

    scoring.decay_scores(sims, np.full(m, base_t), full * base_imp, NOW, hl, *w, out)
    assert (np.diff(out) >= 0).all(), "not non-decreasing in sim"
    scoring.decay_scores(full * base_sim, np.full(m, base_t), imps, NOW, hl, *w, out)
    assert (np.diff(out) >= 0).all(), "not non-decreasing in importance"
    scoring.decay_scores(full * base_sim, ts, full * base_imp, NOW, hl, *w, out)
    assert (np.diff(out) >= 0).all(), "not non-increasing in age"


def test_fused_score_is_park_et_al_half_life_form():
    # 1.0 * 0.5 + 2.0 * 2**(-7200/3600) + 0.5 * 0.5 = 0.5 + 0.5 + 0.25
    assert scoring.fused_score(np.float32(0.5), NOW - 7200.0, np.float32(0.5), NOW, 3600.0,
                               1.0, 2.0, 0.5) == 1.25


@pytest.mark.parametrize("layout", ["read_only", "memmap"])
def test_decay_scores_accepts_read_only_inputs_and_does_not_mutate(layout, tmp_path):
    sims, t, imp = _decay_inputs(3, 50, 3600.0)
    copies = [a.copy() for a in (sims, t, imp)]
    if layout == "read_only":
        for a in (sims, t, imp):
            a.setflags(write=False)
    else:
        views = []
        for name, a in zip("sti", (sims, t, imp)):
            mm = np.memmap(tmp_path / name, dtype=a.dtype, mode="w+", shape=a.shape)
            mm[:] = a
            mm.flush()
            del mm
            views.append(np.memmap(tmp_path / name, dtype=a.dtype, mode="r", shape=a.shape))
        sims, t, imp = views
    got, want = _both(sims, t, imp, NOW, 3600.0, (1.0, 0.5, 0.25))
    np.testing.assert_allclose(got, want, rtol=2e-7)
    for before, after in zip(copies, (sims, t, imp)):
        np.testing.assert_array_equal(before, np.asarray(after))

