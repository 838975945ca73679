"""Numba kernels for the hashing-trick embedder and the hashed-token lexical scorer.

Text arrives as UTF-8 ``data: uint8[:]`` plus ``offsets: int64[n + 1]``: text ``i`` is
``data[offsets[i]:offsets[i + 1]]``. Every kernel writes into preallocated outputs and never
mutates its inputs; read-only inputs (e.g. memory-mapped) are accepted. Each ``*_parallel``
kernel is the ``prange`` twin of the serial kernel of the same stem, with identical results.
The embedding kernels allocate a small int64 scratch (3 x dim) per call, or per block of 64
texts in the parallel twins: bucket counts, the list of touched buckets and their marks, so a
row costs O(tokens) plus one memset instead of passes over all dim buckets.

Two tokenisations live here:

* **classic** (:func:`hash_embed_classic`): ASCII letters are lowercased, every byte outside
  ``[a-z0-9]`` separates tokens, tokens shorter than 2 bytes are dropped; bucket =
  32-bit FNV-1a(token) mod dim, sign = +1 if the token's first byte is even, else -1.
  Callers lowercase non-ASCII text (``str.lower``) before encoding, which makes the result
  bit-identical to the classic recipe applied to the ``str``.
* **unicode** (:func:`unicode_token_hashes`): the caller normalises (NFKC + casefold) and
  passes ``char_class``, a per-code-point class table (uint8, indexed by code point; values
  :data:`SEP`, :data:`WORD`, :data:`NOSPACE`, :data:`MARK`). A *unit* is one code point of
  class WORD or NOSPACE followed by any MARK code points. A maximal run of WORD units is one
  token; a maximal run of NOSPACE units (scripts written without spaces: CJK ideographs, kana,
  Thai...) yields the bigrams of adjacent units, or the unit itself when the run has one unit.
  SEP code points, MARKs with no base, invalid or truncated UTF-8 bytes separate tokens.
  Each token is identified by :func:`token_hash` of its UTF-8 bytes (always a contiguous byte
  range), a 64-bit value from which the embedder takes a bucket (low 32 bits mod dim) and an
  independent sign (bit 63).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "SEP",
    "WORD",
    "NOSPACE",
    "MARK",
    "fnv1a32",
    "token_hash",
    "hash_embed_classic",
    "hash_embed_classic_parallel",
    "unicode_token_hashes",
    "unicode_token_hashes_parallel",
    "embed_token_hashes",
    "embed_token_hashes_parallel",
    "tf_cosine",
]

#: Code-point classes of the ``char_class`` table.
SEP = 0
WORD = 1
NOSPACE = 2
MARK = 3

_FNV32_OFFSET = np.uint32(2166136261)
_FNV32_PRIME = np.uint32(16777619)
_FNV64_OFFSET = np.uint64(14695981039346656037)
_FNV64_PRIME = np.uint64(1099511628211)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)


# --------------------------------------------------------------------------------------------
# Hashes
# --------------------------------------------------------------------------------------------

@numba.njit(cache=True, locals={"h": numba.uint32})
def fnv1a32(data, start, end):
    """32-bit FNV-1a of ``data[start:end]`` (offset 2166136261, prime 16777619).

    Parameters
    ----------
    data : ndarray of shape (n_bytes,), uint8
    start, end : int
        Byte range, ``0 <= start <= end <= n_bytes``.

    Returns
    -------
    uint32

    Examples
    --------
    >>> int(fnv1a32(np.frombuffer(b"hi", np.uint8), 0, 2))
    1748694682
    """
    h = _FNV32_OFFSET
    for p in range(start, end):
        h = (h ^ numba.uint32(data[p])) * _FNV32_PRIME
    return h


@numba.njit(cache=True, locals={"h": numba.uint64})
def token_hash(data, start, end):
    """64-bit token id: FNV-1a 64 of ``data[start:end]`` passed through the splitmix64 finaliser.

    The finaliser spreads every input bit over every output bit, so the low 32 bits (bucket)
    and bit 63 (sign) behave as independent hashes.

    Parameters
    ----------
    data : ndarray of shape (n_bytes,), uint8
    start, end : int
        Byte range.

    Returns
    -------
    uint64

    Examples
    --------
    >>> h = token_hash(np.frombuffer("ロボ".encode(), np.uint8), 0, 6)
    """
    h = _FNV64_OFFSET
    for p in range(start, end):
        h = (h ^ numba.uint64(data[p])) * _FNV64_PRIME
    h = (h ^ (h >> numba.uint64(30))) * _MIX1
    h = (h ^ (h >> numba.uint64(27))) * _MIX2
    h = h ^ (h >> numba.uint64(31))
    return h


# --------------------------------------------------------------------------------------------
# classic
# --------------------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def _bump(acc, touched, n_touched, ss, j, sign):
    """acc[j] += sign, keeping the touched list and the exact sum of squares up to date.

    ``touched[:dim]`` lists each bucket once; ``touched[dim + j] == 1`` marks bucket j as listed.
    """
    dim = acc.shape[0]
    if touched[dim + j] == 0:
        touched[dim + j] = 1
        touched[n_touched] = j
        n_touched += 1
    v = acc[j]
    acc[j] = v + sign
    return n_touched, ss + 2 * v * sign + 1


@numba.njit(cache=True)
def _write_row(acc, touched, n_touched, ss, out_row):
    """out_row = acc / ||acc|| (zeros if ss == 0); reset acc and the touched marks to zeros.

    acc holds integer counts, exact in float64; each entry is divided in float64 and rounded
    once, so rows are bit-identical to a float64 reference rounded to float32.
    """
    out_row[:] = 0.0
    norm = np.sqrt(np.float64(ss))
    dim = acc.shape[0]
    for t in range(n_touched):
        j = touched[t]
        if acc[j] != 0:           # a bucket that cancelled back to 0 stays 0
            out_row[j] = np.float32(np.float64(acc[j]) / norm)
        acc[j] = 0
        touched[dim + j] = 0


#: Classic token bytes: ``_CLASSIC_BYTE[b]`` is b lowercased if b is in ``[A-Za-z0-9]``, else 0.
_CLASSIC_BYTE = np.zeros(256, np.uint8)
_CLASSIC_BYTE[ord("0"):ord("9") + 1] = np.arange(ord("0"), ord("9") + 1)
_CLASSIC_BYTE[ord("a"):ord("z") + 1] = np.arange(ord("a"), ord("z") + 1)
_CLASSIC_BYTE[ord("A"):ord("Z") + 1] = np.arange(ord("a"), ord("z") + 1)
_CLASSIC_BYTE.setflags(write=False)


@numba.njit(cache=True, inline="always")
def _mod_magic(dim):
    """Lemire's constant for :func:`_mod`: ``floor((2**64 - 1) / dim) + 1`` (mod 2**64)."""
    return numba.uint64(0xFFFFFFFFFFFFFFFF) // numba.uint64(dim) + numba.uint64(1)


@numba.njit(cache=True, inline="always", locals={"x": numba.uint64, "d": numba.uint64})
def _mod(h, magic, dim):
    """``h % dim`` for ``h, dim < 2**32`` without a division instruction.

    Lemire, Kaser & Kurz, "Faster remainder by direct computation" (2019): exact for 32-bit
    numerators and divisors with a 64-bit magic; the high half of the 64 x 32 product is
    assembled from two 32 x 32 products (no overflow: the sum stays below 2**64).
    """
    d = numba.uint64(dim)
    x = numba.uint64(magic) * numba.uint64(h)     # uint64 x uint64 wraps mod 2**64
    return np.int64(((x >> numba.uint64(32)) * d
                     + (((x & _LOW32) * d) >> numba.uint64(32))) >> numba.uint64(32))


@numba.njit(cache=True, locals={"h": numba.uint32, "c": numba.uint32, "first": numba.uint32})
def _classic_row(data, start, end, magic, acc, touched, out_row):
    dim = out_row.shape[0]
    n_touched = 0
    ss = 0
    p = start
    while p < end:
        c = _CLASSIC_BYTE[data[p]]
        if c == 0:          # separator
            p += 1
            continue
        # A token starts at p; the loop below ends on the separator after it (or at end).
        first = c
        h = (_FNV32_OFFSET ^ c) * _FNV32_PRIME
        q = p + 1
        while q < end:
            c = _CLASSIC_BYTE[data[q]]
            if c == 0:
                break
            h = (h ^ c) * _FNV32_PRIME
            q += 1
        if q - p >= 2:
            n_touched, ss = _bump(acc, touched, n_touched, ss, _mod(h, magic, dim),
                                  1 - 2 * np.int64(first & 1))
        p = q + 1
    _write_row(acc, touched, n_touched, ss, out_row)


#: Texts per parallel work item; each item allocates its own scratch.
_BLOCK = 64


@numba.njit(cache=True)
def hash_embed_classic(data, offsets, out):
    """Classic hashing-trick vectors of ASCII-lowercased tokens ``[a-z0-9]{2,}``.

    Parameters
    ----------
    data : ndarray of shape (n_bytes,), uint8
        UTF-8 of the texts, concatenated. Bytes outside ``[A-Za-z0-9]`` separate tokens.
    offsets : ndarray of shape (n_texts + 1,), int64
        Text ``i`` is ``data[offsets[i]:offsets[i + 1]]``; non-decreasing.
    out : ndarray of shape (n_texts, dim), float32
        Written: row ``i`` is the L2-normalised sum of signed one-hot buckets of text ``i``,
        or all zeros when it has no token.

    Examples
    --------
    >>> out = np.empty((1, 384), np.float32)
    >>> hash_embed_classic(np.frombuffer(b"hello world", np.uint8), np.array([0, 11]), out)
    """
    acc = np.zeros(out.shape[1], np.int64)
    touched = np.zeros(2 * out.shape[1], np.int64)
    magic = _mod_magic(out.shape[1])
    for i in range(offsets.shape[0] - 1):
        _classic_row(data, offsets[i], offsets[i + 1], magic, acc, touched, out[i])


@numba.njit(cache=True, parallel=True)
def hash_embed_classic_parallel(data, offsets, out):
    """:func:`hash_embed_classic` with texts spread over numba's threads (same results)."""
    n = offsets.shape[0] - 1
    magic = _mod_magic(out.shape[1])
    for blk in numba.prange((n + _BLOCK - 1) // _BLOCK):
        acc = np.zeros(out.shape[1], np.int64)
        touched = np.zeros(2 * out.shape[1], np.int64)
        for i in range(blk * _BLOCK, min(n, (blk + 1) * _BLOCK)):
            _classic_row(data, offsets[i], offsets[i + 1], magic, acc, touched, out[i])


# --------------------------------------------------------------------------------------------
# unicode tokenisation
# --------------------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def _decode(data, p, end):
    """Code point at byte ``p`` and its length; (-1, 1) for an invalid or truncated sequence."""
    b0 = np.int64(data[p])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xC0:
        return -1, 1
    if b0 < 0xE0:
        n = 2
        cp = b0 & 0x1F
    elif b0 < 0xF0:
        n = 3
        cp = b0 & 0x0F
    elif b0 < 0xF8:
        n = 4
        cp = b0 & 0x07
    else:
        return -1, 1
    if p + n > end:
        return -1, 1
    for k in range(1, n):
        c = np.int64(data[p + k])
        if c & 0xC0 != 0x80:
            return -1, 1
        cp = (cp << 6) | (c & 0x3F)
    # Overlong forms and values past U+10FFFF are invalid (surrogates are SEP in the table).
    if (n == 2 and cp < 0x80) or (n == 3 and cp < 0x800) \
            or (n == 4 and (cp < 0x10000 or cp > 0x10FFFF)):
        return -1, 1
    return cp, n


@numba.njit(cache=True, inline="always")
def _unit(data, p, end, char_class):
    """Class of the code point at ``p`` and the byte just past it and its trailing MARKs."""
    if data[p] < 0x80 and (p + 1 == end or data[p + 1] < 0x80):
        # ASCII followed by ASCII (or the end): no trailing mark possible.
        if data[p] < char_class.shape[0]:
            return np.int64(char_class[data[p]]), p + 1
        return SEP, p + 1
    cp, n = _decode(data, p, end)
    if cp < 0 or cp >= char_class.shape[0]:
        return SEP, p + n
    cls = np.int64(char_class[cp])
    q = p + n
    if cls == WORD or cls == NOSPACE:
        while q < end:
            cp2, n2 = _decode(data, q, end)
            if cp2 < 0 or cp2 >= char_class.shape[0] or char_class[cp2] != MARK:
                break
            q += n2
    return cls, q


@numba.njit(cache=True)
def _unicode_row(data, start, end, char_class, out_hashes):
    """Write the token hashes of one text to ``out_hashes[start:start + n]``; return n."""
    n = 0
    kind = SEP         # class of the current run
    run_start = start  # WORD run: first byte
    prev = start       # NOSPACE run: first byte of the previous unit
    prev_end = start   # ... and the byte past it
    run = 0            # NOSPACE run: number of units
    p = start
    while p <= end:
        if p < end:
            cls, q = _unit(data, p, end, char_class)
        else:
            cls, q = SEP, end + 1   # final separator
        if cls == WORD and kind == WORD:
            pass
        elif cls == NOSPACE and kind == NOSPACE:
            out_hashes[start + n] = token_hash(data, prev, q)
            n += 1
            run += 1
            prev = p
            prev_end = q
        else:
            # The current run ends at p.
            if kind == WORD:
                out_hashes[start + n] = token_hash(data, run_start, p)
                n += 1
            elif kind == NOSPACE and run == 1:
                out_hashes[start + n] = token_hash(data, prev, prev_end)
                n += 1
            kind = cls if cls == WORD or cls == NOSPACE else SEP
            run_start = p
            prev = p
            prev_end = q
            run = 1
        p = q
    return n


@numba.njit(cache=True)
def unicode_token_hashes(data, offsets, char_class, out_hashes, out_counts):
    """Token hashes of each text under the unicode tokenisation (see the module docstring).

    A text of ``b`` bytes has at most ``b`` tokens, so text ``i``'s hashes go to
    ``out_hashes[offsets[i]:offsets[i] + out_counts[i]]``; the rest of ``out_hashes`` is left
    untouched.

    Parameters
    ----------
    data : ndarray of shape (n_bytes,), uint8
        UTF-8 of the normalised (NFKC + casefold) texts, concatenated.
    offsets : ndarray of shape (n_texts + 1,), int64
    char_class : ndarray of shape (n_code_points,), uint8
        Class of each code point (SEP/WORD/NOSPACE/MARK); code points past its end are SEP.
    out_hashes : ndarray of shape (n_bytes,), uint64
        Written: token hashes, in text order.
    out_counts : ndarray of shape (n_texts,), int64
        Written: number of tokens of each text.

    Examples
    --------
    >>> table = np.zeros(128, np.uint8); table[ord("a"):ord("z") + 1] = WORD   # a-z: WORD
    >>> hashes, counts = np.empty(5, np.uint64), np.empty(1, np.int64)
    >>> unicode_token_hashes(np.frombuffer(b"hi yo", np.uint8), np.array([0, 5]), table,
    ...                      hashes, counts)
    >>> int(counts[0]), int(hashes[1]) == int(token_hash(np.frombuffer(b"yo", np.uint8), 0, 2))
    (2, True)
    """
    for i in range(offsets.shape[0] - 1):
        out_counts[i] = _unicode_row(data, offsets[i], offsets[i + 1], char_class, out_hashes)


@numba.njit(cache=True, parallel=True)
def unicode_token_hashes_parallel(data, offsets, char_class, out_hashes, out_counts):
    """:func:`unicode_token_hashes` with texts spread over numba's threads (same results)."""
    for i in numba.prange(offsets.shape[0] - 1):
        out_counts[i] = _unicode_row(data, offsets[i], offsets[i + 1], char_class, out_hashes)


@numba.njit(cache=True, locals={"h": numba.uint64})
def _embed_row(hashes, start, count, magic, acc, touched, out_row):
    dim = out_row.shape[0]
    n_touched = 0
    ss = 0
    for t in range(start, start + count):
        h = hashes[t]
        sign = -1 if h >> numba.uint64(63) else 1
        n_touched, ss = _bump(acc, touched, n_touched, ss, _mod(h & _LOW32, magic, dim), sign)
    _write_row(acc, touched, n_touched, ss, out_row)


@numba.njit(cache=True)
def embed_token_hashes(hashes, offsets, counts, out):
    """Signed hashing-trick vectors from 64-bit token hashes.

    Token ``h`` adds ``+1`` (bit 63 clear) or ``-1`` (bit 63 set) to bucket
    ``(h & 0xFFFFFFFF) % dim``; each row is then L2-normalised (all zeros if it has no token,
    or if its tokens cancel out).

    Parameters
    ----------
    hashes : ndarray of shape (n_slots,), uint64
        Text ``i``'s tokens are ``hashes[offsets[i]:offsets[i] + counts[i]]``.
    offsets : ndarray of shape (n_texts + 1,), int64
    counts : ndarray of shape (n_texts,), int64
    out : ndarray of shape (n_texts, dim), float32
        Written.

    Examples
    --------
    >>> out = np.empty((1, 8), np.float32)
    >>> embed_token_hashes(np.array([5, 2**63 + 6], np.uint64), np.array([0, 2]),
    ...                    np.array([2]), out)
    >>> out[0].astype(np.float64).round(3).tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.707, -0.707, 0.0]
    """
    acc = np.zeros(out.shape[1], np.int64)
    touched = np.zeros(2 * out.shape[1], np.int64)
    magic = _mod_magic(out.shape[1])
    for i in range(offsets.shape[0] - 1):
        _embed_row(hashes, offsets[i], counts[i], magic, acc, touched, out[i])


@numba.njit(cache=True, parallel=True)
def embed_token_hashes_parallel(hashes, offsets, counts, out):
    """:func:`embed_token_hashes` with texts spread over numba's threads (same results)."""
    n = offsets.shape[0] - 1
    magic = _mod_magic(out.shape[1])
    for blk in numba.prange((n + _BLOCK - 1) // _BLOCK):
        acc = np.zeros(out.shape[1], np.int64)
        touched = np.zeros(2 * out.shape[1], np.int64)
        for i in range(blk * _BLOCK, min(n, (blk + 1) * _BLOCK)):
            _embed_row(hashes, offsets[i], counts[i], magic, acc, touched, out[i])


# --------------------------------------------------------------------------------------------
# lexical
# --------------------------------------------------------------------------------------------

@numba.njit(cache=True)
def tf_cosine(query_hashes, hashes, offsets, counts, out):
    """Cosine similarity of term-frequency vectors: one query against many texts.

    Terms are token hashes; ``tf`` counts how often each occurs. ``out[i]`` is
    ``sum_t tf_q[t] * tf_i[t] / (||tf_q|| * ||tf_i||)`` computed in float64, in [0, 1], and 0.0
    when either side has no token.

    Parameters
    ----------
    query_hashes : ndarray of shape (n_query_tokens,), uint64
    hashes : ndarray of shape (n_slots,), uint64
        Text ``i``'s tokens are ``hashes[offsets[i]:offsets[i] + counts[i]]``.
    offsets : ndarray of shape (n_texts + 1,), int64
    counts : ndarray of shape (n_texts,), int64
    out : ndarray of shape (n_texts,), float32
        Written.

    Examples
    --------
    >>> out = np.empty(1, np.float32)
    >>> tf_cosine(np.array([1, 2], np.uint64), np.array([2, 3], np.uint64),
    ...           np.array([0, 2]), np.array([2]), out)
    >>> float(out[0])
    0.5
    """
    q = np.sort(query_hashes)
    nq = q.shape[0]
    qq = 0.0
    i = 0
    while i < nq:
        j = i
        while j < nq and q[j] == q[i]:
            j += 1
        qq += np.float64(j - i) * np.float64(j - i)
        i = j
    for d in range(offsets.shape[0] - 1):
        doc = np.sort(hashes[offsets[d]:offsets[d] + counts[d]])
        nd = doc.shape[0]
        if nq == 0 or nd == 0:
            out[d] = 0.0
            continue
        dd = 0.0
        dot = 0.0
        a = 0
        b = 0
        while b < nd:
            e = b
            while e < nd and doc[e] == doc[b]:
                e += 1
            tf_d = np.float64(e - b)
            dd += tf_d * tf_d
            while a < nq and q[a] < doc[b]:
                a += 1
            c = a
            while c < nq and q[c] == doc[b]:
                c += 1
            dot += tf_d * np.float64(c - a)
            b = e
        out[d] = np.float32(dot / (np.sqrt(qq) * np.sqrt(dd)))
