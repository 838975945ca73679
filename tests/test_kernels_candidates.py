"""Hybrid top-k over candidate rows (memcore.kernels.candidates): the exact path restricted to
the candidates, bit for bit (the same float64 operations in the same order)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.kernels import candidates, scan
from memcore.kernels import reference as ref
from strategies import hybrid_problems


def _out(k):
    return (np.full(k, 7, np.int64), np.full(k, 7, np.float32), np.full(k, 7, np.float32))


def _rows_topk(fn, rows, p):
    out = _out(p.k)
    count = fn(rows, p.query, p.vectors, *p.after_vectors(), out)
    return (*out, int(count))


def _masked(p, rows):
    cand = np.zeros(p.vectors.shape[0], bool)
    cand[rows] = True
    return dataclasses.replace(p, alive=p.alive & cand)


def _exact_masked(rows, p):
    """The compiled exact path with the candidate mask (not the NumPy oracle: exp2 differs
    from libm's in the last bits, and this comparison is bit for bit)."""
    out = _out(p.k)
    count = scan.hybrid_exact_topk(p.query, p.vectors, *_masked(p, rows).after_vectors(), out)
    return (*out, int(count))


@settings(max_examples=60, deadline=None)
@given(p=hybrid_problems(), data=st.data())
def test_candidates_equal_the_exact_path_on_them(p, data):
    n = p.vectors.shape[0]
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n)))
                    if n else [], np.int64)
    got = _rows_topk(candidates.hybrid_rows_topk, rows, p)
    want = _exact_masked(rows, p)
    assert got[3] == want[3]
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(g, w)


@settings(max_examples=30, deadline=None)
@given(p=hybrid_problems())
def test_oracle_is_the_masked_exact_oracle(p):
    n = p.vectors.shape[0]
    rows = np.arange(0, n, 2, dtype=np.int64)
    got = _rows_topk(ref.hybrid_rows_topk, rows, p)
    out = _out(p.k)
    count = ref.hybrid_exact_topk(p.query, p.vectors, *_masked(p, rows).after_vectors(), out)
    assert got[3] == count and (got[0] == out[0]).all()
