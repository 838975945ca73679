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


# ----------------------------------------------------------------------------- 4-bit codes
def _encode4(fn, v):
    n, dim = v.shape
    out = (np.full((n, codes.nibble_width(dim)), 99, np.uint8),
           *(np.full(n, 7, np.float32) for _ in range(3)))
    fn(v, *out)
    return out


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), dim=st.integers(1, 300), kind=kinds)
def test_encode_nibbles_equals_oracle(seed, n, dim, kind):
    v = _rows(np.random.default_rng(seed), n, dim, kind)
    got = _encode4(codes.encode_nibbles, v)
    want = _encode4(ref.encode_nibbles, v)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 1300),
       qkind=st.sampled_from(["unit", "extreme", "gauss"]))
def test_nibble_dot_is_the_exact_integer_dot(seed, dim, qkind):
    # dims past 1024 take a second group of chunks (the int16 lanes are flushed per 8 chunks)
    rng = np.random.default_rng(seed)
    v = _rows(rng, 5, dim, "gauss")
    c4 = _encode4(codes.encode_nibbles, v)[0]
    if qkind == "extreme":                       # every entry at the int8 limits
        qc = rng.choice(np.array([-127, 127], np.int8), dim)
    else:
        qc = np.empty(dim, np.int8)
        codes.quantize_query(_rows(rng, 1, dim, "unit" if qkind == "unit" else "gauss")[0], qc)
    c4[:, :] = rng.choice(np.array([0x11, 0xff, 0x1f, 0xf1], np.uint8), c4.shape) \
        if qkind == "extreme" else c4                   # codes at -7 / +7 everywhere
    qlo, qhi, qsum = codes.nibble_query(qc, c4.shape[1])
    want = ref.unpack_nibbles(c4, dim) @ qc.astype(np.int64)
    got = [int(codes.nibble_dot(qlo, qhi, qsum, c4[i])) for i in range(5)]
    assert got == want.tolist()


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), dim=st.integers(1, 200),
       kind=kinds, qkind=st.sampled_from(["unit", "row", "residual", "gauss"]))
def test_nibble_bound_holds(seed, n, dim, kind, qkind):
    """|exact_sim(q, v) - scale4 * qscale * I4| <= code_bound of the 4-bit code's norms."""
    rng = np.random.default_rng(seed)
    v = _rows(rng, n, dim, kind)
    c4, s, cn, rn = _encode4(codes.encode_nibbles, v)
    c = ref.unpack_nibbles(c4, dim)
    for i in range(n):
        if qkind == "row":
            q = v[i].copy()
        elif qkind == "residual":
            r = v[i].astype(np.float64) - np.float64(s[i]) * c[i]
            q = (r / max(np.linalg.norm(r), 1e-30)).astype(np.float32)
        elif qkind == "gauss":
            q = (rng.standard_normal(dim) * 10.0 ** rng.uniform(-2, 2)).astype(np.float32)
        else:
            q = vectors_for(rng, 1, dim, "unit")[0]
        qc = np.empty(dim, np.int8)
        qs, qres, qn = codes.quantize_query(q, qc)
        qlo, qhi, qsum = codes.nibble_query(qc, c4.shape[1])
        dot = int(codes.nibble_dot(qlo, qhi, qsum, c4[i]))
        approx = np.float64(s[i]) * qs * np.float64(dot)
        bound = codes.code_bound(approx, s[i], cn[i], rn[i], qres, qn, dim)
        assert abs(exact_sim(q, v[i]) - approx) <= bound
        real = float(np.dot(q.astype(np.longdouble), v[i].astype(np.longdouble)))
        assert abs(real - approx) <= bound
