"""int8 codes (memcore.kernels.codes): encoder vs oracle, and the error bound holds rigorously."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memcore.kernels import codes
from memcore.kernels import reference as ref
from memcore.kernels.scan import exact_sim
from strategies import vectors_for


def _encode(fn, v):
    n, dim = v.shape
    out = (np.full((n, dim), 99, np.int8), np.full(n, 7, np.float32), np.full(n, 7, np.float32),
           np.full(n, 7, np.float32))
    fn(v, *out)
    return out


def _rows(rng, n, dim, kind):
    if kind == "gauss":                     # not unit: norms from 1e-3 to 1e3
        return np.ascontiguousarray(rng.standard_normal((n, dim))
                                    * 10.0 ** rng.uniform(-3, 3, (n, 1)), np.float32)
    if kind == "spiky":                     # one large entry: coarse scale, large residual
        v = vectors_for(rng, n, dim, "unit") * 0.01
        v[np.arange(n), rng.integers(0, dim, n)] = 1.0
        return np.ascontiguousarray(v, np.float32)
    return vectors_for(rng, n, dim, kind)


kinds = st.sampled_from(["unit", "dyadic", "gauss", "spiky"])


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), dim=st.integers(1, 40), kind=kinds)
def test_encode_rows_equals_oracle(seed, n, dim, kind):
    v = _rows(np.random.default_rng(seed), n, dim, kind)
    if n:
        v[0] = 0.0                                              # an all-zero row
    got, want = _encode(codes.encode_rows, v), _encode(ref.encode_rows, v)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    c, s, cn, rn = got
    assert (np.abs(c.astype(np.int64)) <= codes.CODE_MAX).all()
    r = v.astype(np.float64) - s.astype(np.float64)[:, None] * c
    assert (np.linalg.norm(r, axis=1) <= rn).all()              # rounded up
    assert (np.linalg.norm(c.astype(np.float64), axis=1) <= cn).all()
    assert (np.abs(r) <= s[:, None].astype(np.float64) / 2 * (1 + 1e-6) + 1e-38).all()


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), dim=st.integers(1, 400),
       kind=kinds, qkind=st.sampled_from(["unit", "row", "residual", "gauss"]))
def test_code_similarity_is_within_the_bound(seed, n, dim, kind, qkind):
    rng = np.random.default_rng(seed)
    v = _rows(rng, n, dim, kind)
    c, s, cn, rn = _encode(codes.encode_rows, v)
    for i in range(n):
        if qkind == "row":
            q = v[i].copy()
        elif qkind == "residual":   # q along row i's residual: Cauchy-Schwarz is nearly tight
            r = v[i].astype(np.float64) - np.float64(s[i]) * c[i]
            q = (r / max(np.linalg.norm(r), 1e-30)).astype(np.float32)
        elif qkind == "gauss":
            q = (rng.standard_normal(dim) * 10.0 ** rng.uniform(-2, 2)).astype(np.float32)
        else:
            q = vectors_for(rng, 1, dim, "unit")[0]
        qc = np.empty(dim, np.int8)
        qs, qres, qn = codes.quantize_query(q, qc)
        assert qn >= np.linalg.norm(q.astype(np.float64))
        assert qres >= np.linalg.norm(q.astype(np.float64) - qs * qc.astype(np.float64))
        dot = codes.code_dot(qc, c[i])
        assert dot == int(qc.astype(np.int64) @ c[i].astype(np.int64))
        approx = np.float64(s[i]) * qs * np.float64(dot)
        bound = codes.code_bound(approx, s[i], cn[i], rn[i], qres, qn, dim)
        exact = exact_sim(q, v[i])
        assert abs(exact - approx) <= bound, (i, exact, approx, bound)
        # ... and the float64 reference itself is within the bound of the real value
        real = float(np.dot(q.astype(np.longdouble), v[i].astype(np.longdouble)))
        assert abs(real - approx) <= bound


def test_bound_is_tight_enough_for_unit_rows_at_dim_384():
    # Not a speed claim: the bound that makes the first pass useful is ~0.015 at dim 384.
    rng = np.random.default_rng(0)
    v = vectors_for(rng, 200, 384, "unit")
    c, s, cn, rn = _encode(codes.encode_rows, v)
    qc = np.empty(384, np.int8)
    qs, qres, qn = codes.quantize_query(v[0], qc)
    b = [codes.code_bound(0.0, s[i], cn[i], rn[i], qres, qn, 384) for i in range(200)]
    assert 0.005 < np.median(b) < 0.03


def test_quantize_zero_query_and_zero_row():
    qc = np.empty(3, np.int8)
    assert codes.quantize_query(np.zeros(3, np.float32), qc) == (0.0, 0.0, 0.0)
    assert qc.tolist() == [0, 0, 0]
    c, s, cn, rn = _encode(codes.encode_rows, np.zeros((1, 3), np.float32))
    assert c.tolist() == [[0, 0, 0]] and s[0] == cn[0] == rn[0] == 0.0


def test_read_only_rows():
    v = vectors_for(np.random.default_rng(1), 5, 8, "unit")
    want = _encode(codes.encode_rows, v)
    v.setflags(write=False)
    for g, w in zip(_encode(codes.encode_rows, v), want):
        np.testing.assert_array_equal(g, w)
