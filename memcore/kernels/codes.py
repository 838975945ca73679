"""int8 and 4-bit codes of float32 rows with a rigorous per-row error bound on code-based
similarities.

A row ``v`` (float32, dim entries) is stored as ``scale * c`` plus a residual: symmetric
per-row int8 quantisation (as in FAISS ``ScalarQuantizer`` QT_8bit_direct_signed, but with one
scale per row)::

    scale = float32(max_j |v_j| / 127)          # 0 for an all-zero row
    c_j   = clip(round(v_j / scale), -127, 127)  # int8
    r     = v - scale * c                        # the residual (real arithmetic)

Per row we keep ``cnorm >= ||c||_2`` and ``rnorm >= ||r||_2``, float32 rounded *up*. A query
``q`` (float32) is quantised the same way (``q = qscale * cq + rq``, :func:`quantize_query`),
so the first pass is an exact integer dot product ``I = cq . c`` (int8 x int8 products in
int16, summed in int32: exact for dim <= 133,000) and::

    q . v = scale * qscale * I  +  scale * (rq . c)  +  q . r
    |q . v - scale * qscale * I|  <=  scale * ||rq||_2 * ||c||_2  +  ||q||_2 * ||r||_2

by Cauchy-Schwarz on both remainders. :func:`code_bound` adds the floating-point slack of
computing the approximation in float64 and of the reference similarity (a float64 dot product,
:func:`memcore.kernels.scan.exact_sim`, error at most ``dim * 2**-53 * ||q|| * ||v||``,
Higham 2002, eq. 3.5), so ``|exact_sim(q, v) - approx| <= bound`` holds rigorously for finite
inputs. For unit rows at dim 384 the bound is about 0.015 (the typical error is ~20x smaller).

4-bit codes (:func:`encode_nibbles`, levels -7..7, two per byte) have the same form and the
same bound (:func:`code_bound` of their own scale and norms), with half the bytes: a scan
reads them first and tightens, through the int8 codes, only the bounds of the rows the looser
4-bit bound cannot exclude (:mod:`memcore.kernels.scan`). Their scale is ``max |v| / d`` for
the divisor ``d`` in :data:`NIBBLE_DIVISORS` with the smallest residual: rows whose entries
are small multiples of one value (hashing-trick rows) are exact, and clipping helps dense rows.

Measured at 1e6 x 384 on one core of the shared 2-core bench machine (AMD EPYC, AVX-512),
numba 0.68: the int8 x int8 pass ~11 ms at best (memory-bound, 384 MB; 15-19 ms under load);
4-bit rows through numba's loop vectoriser 14-25 ms whatever the layout (compute-bound: it
never finds ``pmaddubsw``-like code for nibbles), through :func:`nibble_dot`'s explicit
whole-chunk LLVM vector IR (portable, no target intrinsic) 6.4-7.4 ms; 1-bit (sign) codes
leave a deterministic residual of ~0.6 for unit rows (RaBitQ's tight bound is probabilistic),
which excludes almost nothing; int8 codes x float32 query ~29 ms, float32 rows ~94 ms.

Kernels are pure, ``cache=True``, no ``fastmath``; NumPy oracles of the same names live in
:mod:`memcore.kernels.reference`.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["CODE_MAX", "encode_rows", "quantize_query", "code_dot", "code_bound", "bound_slope",
           "row_bound", "NIBBLE_MAX", "NIBBLE_DIVISORS", "nibble_width", "encode_nibbles", "nibble_query",
           "nibble_dot", "nibble_dot_at"]

#: Largest code magnitude (symmetric int8).
CODE_MAX = 127

_U = 2.0 ** -53          # float64 unit roundoff


@numba.njit(cache=True)
def _up32(x):
    """The smallest float32 >= x (x >= 0 finite float64)."""
    f = np.float32(x)
    if np.float64(f) < x:
        f = np.nextafter(f, np.float32(np.inf))
    return f


@numba.njit(cache=True)
def _quantize(v, s, code, cmax):
    """``code = clip(rint(v / s), -cmax, cmax)`` for a scale ``s > 0`` (float64); returns
    ``(sum code**2, sum (v - s * code)**2)``, the second in float64 (each difference rounds
    once: ``s * code`` is exact for a float32 ``s``, within 2**-53 relative otherwise)."""
    cc = 0
    rr = 0.0
    for j in range(v.shape[0]):
        x = np.float64(v[j])
        c = np.rint(x / s)
        if c > cmax:
            c = cmax
        elif c < -cmax:
            c = -cmax
        ci = np.int64(c)
        code[j] = ci
        cc += ci * ci
        d = x - s * np.float64(ci)
        rr += d * d
    return cc, rr


@numba.njit(cache=True)
def _max_abs_and_sq(v):
    m = 0.0
    ss = 0.0
    for j in range(v.shape[0]):
        x = np.float64(v[j])
        ss += x * x
        m = max(m, abs(x))
    return m, ss


@numba.njit(cache=True)
def _encode_one(v, code, cmax):
    """Quantise one row into ``code`` (levels ``-cmax..cmax``); return (scale, cnorm, rnorm)
    as float32."""
    dim = v.shape[0]
    m, ss = _max_abs_and_sq(v)
    scale = np.float32(m / cmax)
    if scale == 0.0:          # all-zero row (or entries below float32's range / cmax)
        code[:] = 0
        return np.float32(0.0), np.float32(0.0), _up32(np.sqrt(ss) * (1.0 + (dim + 8) * _U))
    cc, rr = _quantize(v, np.float64(scale), code, cmax)
    # sqrt and the sums round a few times (relative 2**-53 each): inflate, then round up.
    cnorm = _up32(np.sqrt(np.float64(cc)))
    rnorm = _up32(np.sqrt(rr) * (1.0 + (dim + 8) * _U))          # 0 for an exact row
    return scale, cnorm, rnorm


@numba.njit(cache=True)
def encode_rows(vectors, codes, scale, cnorm, rnorm):
    """int8 codes, per-row scale and the norms the error bound needs, for each row.

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
        Finite rows (the caller validates), C-contiguous; may be read-only.
    codes : ndarray of shape (n, dim), int8
        Written: ``clip(round(v / scale), -127, 127)``.
    scale : ndarray of shape (n,), float32
        Written: ``float32(max |v| / 127)`` (0 for an all-zero row).
    cnorm : ndarray of shape (n,), float32
        Written: ``||code||_2`` rounded up.
    rnorm : ndarray of shape (n,), float32
        Written: ``||v - scale * code||_2`` rounded up (with the float64 rounding of its
        computation accounted for).

    Returns
    -------
    None

    Raises
    ------
    Nothing (not validated; NaN/inf rows give meaningless codes).

    Examples
    --------
    >>> v = np.array([[0.6, -0.8, 0.0]], np.float32)
    >>> c = np.empty((1, 3), np.int8); s, cn, rn = (np.empty(1, np.float32) for _ in range(3))
    >>> encode_rows(v, c, s, cn, rn)
    >>> c.tolist(), bool(np.abs(v - s[:, None] * c).max() <= s[0] / 2)
    ([[95, -127, 0]], True)
    """
    for i in range(vectors.shape[0]):
        s, cn, rn = _encode_one(vectors[i], codes[i], CODE_MAX)
        scale[i] = s
        cnorm[i] = cn
        rnorm[i] = rn


@numba.njit(cache=True)
def quantize_query(query, out_code):
    """Quantise a query like a row: ``query = qscale * out_code + rq``.

    Parameters
    ----------
    query : ndarray of shape (dim,), float32
    out_code : ndarray of shape (dim,), int8
        Written.

    Returns
    -------
    qscale : float
        The query's scale (float64; 0.0 for a zero query).
    qres : float
        An upper bound on ``||rq||_2``.
    qnorm : float
        An upper bound on ``||query||_2``.

    Raises
    ------
    Nothing.

    Examples
    --------
    >>> code = np.empty(2, np.int8)
    >>> qs, qres, qn = quantize_query(np.array([0.6, 0.8], np.float32), code)
    >>> code.tolist(), round(qn, 6)
    ([95, 127], 1.0)
    """
    dim = query.shape[0]
    m, qq = _max_abs_and_sq(query)
    qnorm = np.sqrt(qq) * (1.0 + (dim + 8) * _U)
    if m == 0.0:
        out_code[:] = 0
        return 0.0, 0.0, qnorm
    qscale = m / CODE_MAX
    _, rr = _quantize(query, qscale, out_code, CODE_MAX)
    # qscale * c rounds (relative 2**-53): |d| is off by at most |x| * 2**-52.
    qres = np.sqrt(rr) * (1.0 + (dim + 8) * _U) + 4 * _U * qnorm
    return qscale, qres, qnorm


@numba.njit(cache=True)
def code_dot(qcode, code):
    """Exact integer dot product of two int8 codes (int16 products, int32 sum).

    Exact while ``dim * 127 * 127 < 2**31`` (dim <= 133,000); the int16/int32 arithmetic lets
    LLVM use multiply-add instructions (about 2x the float32 conversion path).

    Examples
    --------
    >>> code_dot(np.array([1, -2], np.int8), np.array([127, 127], np.int8))
    -127
    """
    acc = np.int32(0)
    for j in range(qcode.shape[0]):
        acc = np.int32(acc + np.int32(np.int16(qcode[j]) * np.int16(code[j])))
    return acc


@numba.njit(cache=True)
def code_bound(approx, scale, cnorm, rnorm, qres, qnorm, dim):
    """Rigorous bound on ``|exact_sim(q, v) - approx|`` for ``approx = scale * qscale * I``.

    ``scale * qres * cnorm + qnorm * rnorm`` (Cauchy-Schwarz on the query's and the row's
    quantisation residuals), plus the float64 rounding of ``approx`` (3 roundings) and of the
    reference similarity (a float64 dot product of ``dim`` terms, each ``|q_j v_j|`` summing to
    at most ``qnorm * (scale * cnorm + rnorm)``), with 2x headroom on the rounding terms.
    A scan computes it as :func:`row_bound` with :func:`bound_slope` hoisted out of its loop.

    Parameters
    ----------
    approx : float
    scale, cnorm, rnorm : float
        The row's (see :func:`encode_rows`).
    qres, qnorm : float
        The query's (see :func:`quantize_query`).
    dim : int

    Returns
    -------
    float

    Examples
    --------
    >>> code_bound(0.5, 0.01, 1000.0, 0.005, 0.004, 1.0, 384) > 0.01 * 0.004 * 1000 + 0.005
    True
    """
    return row_bound(approx, scale, cnorm, rnorm, qres, qnorm, bound_slope(qnorm, dim))


@numba.njit(cache=True)
def bound_slope(qnorm, dim):
    """The per-query factor of the reference similarity's rounding term of :func:`code_bound`:
    ``2 * (dim + 2) * 2**-53 * qnorm`` (times the row's norm bound; 2x headroom).

    Examples
    --------
    >>> bound_slope(1.0, 6) == 16 * 2.0 ** -53
    True
    """
    return 2.0 * (dim + 2) * _U * qnorm


@numba.njit(cache=True)
def row_bound(approx, scale, cnorm, rnorm, qres, qnorm, slope):
    """:func:`code_bound` given the query's ``slope = bound_slope(qnorm, dim)``: branch-free
    float64 arithmetic, so a loop over rows vectorises (about 6x faster than recomputing the
    per-query factor per row, measured at 1e6 rows).

    Examples
    --------
    >>> row_bound(0.0, 0.0, 0.0, 0.5, 0.0, 2.0, 0.0) == 1.0 * (1.0 + 16 * 2.0 ** -53)
    True
    """
    s = np.float64(scale)
    cn = np.float64(cnorm)
    rn = np.float64(rnorm)
    main = s * qres * cn + qnorm * rn
    fp = slope * (s * cn + rn) + 8.0 * _U * abs(approx)
    return (main + fp) * (1.0 + 16 * _U)


# --------------------------------------------------------------------------- 4-bit codes
#: Largest 4-bit code magnitude: codes ``-7..7``, stored biased by 8 in a nibble.
NIBBLE_MAX = 7

#: Bytes per chunk of a 4-bit row (the scan's vector width).
NIBBLE_CHUNK = 64

_NIBBLE_GROUP = 8        # chunks summed in int16 lanes: 8 * 2 * 15 * 127 < 2**15


def nibble_width(dim):
    """Bytes per 4-bit row of ``dim`` entries: ``64 * ceil(dim / 128)`` (whole 64-byte
    chunks; byte ``t`` holds entries ``t`` and ``t + width``, padding entries hold code 0).

    Examples
    --------
    >>> nibble_width(384), nibble_width(1), nibble_width(129)
    (192, 64, 128)
    """
    return NIBBLE_CHUNK * max(-(-int(dim) // (2 * NIBBLE_CHUNK)), 1)


#: The 4-bit code's scale is ``max |v| / d`` for the divisor ``d`` of these giving the smallest
#: residual norm (the first on ties): 7 uses every level; 1..6 represent rows whose entries
#: are small multiples of one value exactly (hashing-trick rows: ~99.8 % exact at dim 384
#: instead of a residual of ~0.11); 8..10 clip the largest entries, which helps dense rows.
NIBBLE_DIVISORS = (7, 6, 5, 4, 3, 2, 1, 8, 9, 10)


@numba.njit(cache=True)
def encode_nibbles(vectors, codes4, scale, cnorm, rnorm):
    """4-bit codes of each row, with per-row scale and the norms the error bound needs.

    The first pass of the scan (:mod:`memcore.kernels.scan`) reads these 4-bit codes, half
    the bytes of the int8 codes (:func:`encode_rows`), with the same rigorous bound
    (:func:`code_bound` of ``scale``, ``cnorm``, ``rnorm``): ``code = clip(rint(v / scale),
    -7, 7)``, ``scale = float32(max |v| / d)`` for the ``d`` of :data:`NIBBLE_DIVISORS` with
    the smallest float64 sum of squared residuals (summed in index order; the first on ties),
    ``rnorm >= ||v - scale * code||_2``. The rows the looser bound cannot exclude are
    reranked through their int8 codes, then exactly.

    Parameters
    ----------
    vectors : ndarray of shape (n, dim), float32
        Finite rows, C-contiguous.
    codes4 : ndarray of shape (n, nibble_width(dim)), uint8
        Written: byte ``t`` of a row is ``(code[t] + 8) | ((code[t + width] + 8) << 4)``
        (``code`` 0 past ``dim``).
    scale, cnorm, rnorm : ndarray of shape (n,), float32
        Written, as in :func:`encode_rows` for the 4-bit code.

    Returns
    -------
    None

    Raises
    ------
    Nothing (not validated).

    Examples
    --------
    >>> v = np.array([[0.5, -1.0, 0.0, 0.5]], np.float32)     # multiples of 0.25: exact
    >>> c4 = np.empty((1, 64), np.uint8); s, cn, rn = (np.empty(1, np.float32) for _ in range(3))
    >>> encode_nibbles(v, c4, s, cn, rn)
    >>> [(int(b) & 15) - 8 for b in c4[0, :4]], float(s[0]), float(rn[0])
    ([2, -4, 0, 2], 0.25, 0.0)
    """
    n, dim = vectors.shape
    width = codes4.shape[1]
    code = np.zeros(2 * width, np.int8)
    for i in range(n):
        v = vectors[i]
        m, ss = _max_abs_and_sq(v)
        best = -1.0
        best_s = np.float32(0.0)
        for d in NIBBLE_DIVISORS:
            s = np.float32(m / d)
            if s == 0.0:
                break
            _, rr = _quantize(v, np.float64(s), code[:dim], NIBBLE_MAX)
            if best < 0.0 or rr < best:
                best = rr
                best_s = s
            if rr == 0.0:
                break
        if best_s == 0.0:         # all-zero row (or entries below float32's range)
            code[:] = 0
            scale[i] = 0.0
            cnorm[i] = 0.0
            rnorm[i] = _up32(np.sqrt(ss) * (1.0 + (dim + 8) * _U))
        else:
            cc, rr = _quantize(v, np.float64(best_s), code[:dim], NIBBLE_MAX)
            scale[i] = best_s
            cnorm[i] = _up32(np.sqrt(np.float64(cc)))
            rnorm[i] = _up32(np.sqrt(rr) * (1.0 + (dim + 8) * _U))
        row = codes4[i]
        for t in range(width):
            row[t] = np.uint8((code[t] + 8) | ((code[t + width] + 8) << 4))


@numba.njit(cache=True)
def nibble_query(qcode, width):
    """The query's int8 code split for :func:`nibble_dot`: ``(qlo, qhi, qsum)``, ``qlo[t] =
    qcode[t]``, ``qhi[t] = qcode[t + width]`` (int16, 0 past dim), ``qsum = sum(qcode)``.

    Examples
    --------
    >>> lo, hi, s = nibble_query(np.array([1, -2, 3], np.int8), 64)
    >>> lo[:4].tolist(), int(hi.sum()), s
    ([1, -2, 3, 0], 0, 2)
    """
    qlo = np.zeros(width, np.int16)
    qhi = np.zeros(width, np.int16)
    qsum = 0
    for j in range(qcode.shape[0]):
        qsum += np.int64(qcode[j])
        if j < width:
            qlo[j] = qcode[j]
        else:
            qhi[j - width] = qcode[j]
    return qlo, qhi, qsum


_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V8 = ir.VectorType(_I8, NIBBLE_CHUNK)
_V16 = ir.VectorType(_I16, NIBBLE_CHUNK)
_V32 = ir.VectorType(_I32, NIBBLE_CHUNK)


@intrinsic
def _nibble_group(typingctx, row, qlo, qhi, chunks):
    """``sum_t (b_t & 15) * qlo_t + (b_t >> 4) * qhi_t`` over ``chunks`` (<= 8) 64-byte chunks
    at address ``row`` (uint8) with int16 ``qlo``/``qhi`` at their addresses: whole-chunk
    vector operations in portable LLVM IR (numba's loop vectoriser does not find them: its
    nibble loops ran 2-3x slower than the int8 dot), int16 lanes (exact: at most
    ``8 * 2 * 15 * 127 < 2**15`` each), summed once in int32."""
    sig = types.int32(types.uintp, types.uintp, types.uintp, types.intp)

    def codegen(context, builder, signature, args):
        a, ql, qh, nc = args
        red = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_V32]),
                                             "llvm.vector.reduce.add.v64i32")
        acc = cgutils.alloca_once_value(builder, ir.Constant(_V16, None))
        low = ir.Constant(_V8, [15] * NIBBLE_CHUNK)
        shift = ir.Constant(_V8, [4] * NIBBLE_CHUNK)
        with cgutils.for_range(builder, nc) as loop:
            off = builder.mul(loop.index, ir.Constant(_I64, NIBBLE_CHUNK))
            off2 = builder.add(off, off)

            def load(base, offset, vtype, align):
                ptr = builder.inttoptr(builder.add(base, offset), vtype.as_pointer())
                return builder.load(ptr, align=align)

            b = load(a, off, _V8, 1)
            lo = builder.zext(builder.and_(b, low), _V16)
            hi = builder.zext(builder.lshr(b, shift), _V16)
            p = builder.add(builder.mul(lo, load(ql, off2, _V16, 2)),
                            builder.mul(hi, load(qh, off2, _V16, 2)))
            builder.store(builder.add(builder.load(acc), p), acc)
        return builder.call(red, [builder.sext(builder.load(acc), _V32)])

    return sig, codegen


@numba.njit(cache=True)
def nibble_dot(qlo, qhi, qsum, row):
    """Exact integer dot product ``sum_j qcode_j * code_j`` of the query's int8 code
    (:func:`nibble_query`) with one 4-bit row (:func:`encode_nibbles`; C-contiguous, width a
    multiple of 64). A scan calls :func:`nibble_dot_at` with the addresses hoisted (a view's
    ``ctypes`` per row costs more than the dot product).

    Examples
    --------
    >>> v = np.array([[0.6, -0.8, 0.0]], np.float32)
    >>> c4 = np.empty((1, 64), np.uint8); s, cn, rn = (np.empty(1, np.float32) for _ in range(3))
    >>> encode_nibbles(v, c4, s, cn, rn)
    >>> qlo, qhi, qsum = nibble_query(np.array([1, 1, 1], np.int8), 64)
    >>> int(nibble_dot(qlo, qhi, qsum, c4[0]))          # codes 3, -4, 0 (scale 0.2)
    -1
    """
    return nibble_dot_at(row.ctypes.data, qlo.ctypes.data, qhi.ctypes.data,
                         row.shape[0] // NIBBLE_CHUNK, qsum)


@numba.njit(cache=True)
def nibble_dot_at(row, qlo, qhi, chunks, qsum):
    """:func:`nibble_dot` of the 4-bit row at address ``row`` (``chunks`` 64-byte chunks) with
    the query's ``qlo``/``qhi`` (int16) at their addresses: the caller keeps the arrays alive.

    Examples
    --------
    >>> row = np.full(64, 0x98, np.uint8)                 # codes 0 (low) and 1 (high)
    >>> q = np.ones(64, np.int16)                          # a query of 128 ones: qsum 128
    >>> int(nibble_dot_at(row.ctypes.data, q.ctypes.data, q.ctypes.data, 1, 128))
    64
    """
    if chunks <= _NIBBLE_GROUP:                         # dim <= 1024: one group
        return np.int64(_nibble_group(row, qlo, qhi, chunks)) - 8 * qsum
    acc = np.int64(0)
    for g in range(0, chunks, _NIBBLE_GROUP):
        k = min(_NIBBLE_GROUP, chunks - g)
        acc += _nibble_group(row + g * NIBBLE_CHUNK, qlo + 2 * g * NIBBLE_CHUNK,
                             qhi + 2 * g * NIBBLE_CHUNK, k)
    return acc - 8 * qsum
