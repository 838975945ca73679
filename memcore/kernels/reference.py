"""NumPy oracles for memcore's kernels.

Each function has the same name, signature, dtypes and results as the numba kernel it checks;
property tests compare the two. Clarity beats speed here.

Ranking contract shared by every top-k kernel: a row is a candidate when it is alive and
``sim >= threshold``; its score is computed in float64 and rounded to float32; candidates are
ordered by float32 score descending, ties by lower row id; unused output slots hold
id -1, score -inf, sim -inf.

Similarity is the one inexact step: the oracles take a float64 matmul rounded to float32, the
kernels a float32 dot product accumulated in float32 (vectorised), so for unit vectors a
kernel's ``sim`` agrees within 1e-5, not bit for bit. Within 1e-5 of the threshold the kernels
recompute ``sim`` in float64 (rounded to float32), so threshold membership agrees with the
oracles. Given the same ``sim``, scores agree to
the float32 rounding of ``2 ** x`` (NumPy's ``exp2`` may be a SIMD version a few float64 ulps
from libm's); tests therefore compare scores within 1e-5 and ranks with near-ties tolerated.
"""

from __future__ import annotations

import numpy as np


def decay_scores(sims, last_accessed_at, importance, now, half_life, w_sim, w_rec, w_imp, out):
    """Fused score of each row: ``w_sim*sim + w_rec*2**(-max(now - t, 0)/half_life) + w_imp*imp``.

    sims (m,) float32, last_accessed_at (m,) float64 Unix seconds, importance (m,) float32,
    out (m,) float32 (written and returned).
    """
    age = np.maximum(np.float64(now) - last_accessed_at.astype(np.float64), 0.0)
    rec = np.exp2(-age / np.float64(half_life))
    s = w_sim * sims.astype(np.float64) + w_rec * rec + w_imp * importance.astype(np.float64)
    out[:] = s.astype(np.float32)
    return out


def _select(ids, sims, scores32, out_ids, out_scores, out_sims):
    k = out_ids.shape[0]
    order = np.lexsort((ids, -scores32.astype(np.float64)))[:k]
    m = order.shape[0]
    out_ids[:] = -1
    out_scores[:] = -np.inf
    out_sims[:] = -np.inf
    out_ids[:m] = ids[order]
    out_scores[:m] = scores32[order]
    out_sims[:m] = sims[order]
    return m


def fused_topk(query, vectors, w_sim, decay, alive, threshold, out):
    """Exact fused top-k over all rows.

    query (dim,) float32, vectors (n, dim) float32, decay (last_accessed_at (n,) float64,
    importance (n,) float32, now, half_life, w_rec, w_imp), alive (n,) bool; out (out_ids (k,)
    int64, out_scores (k,) float32, out_sims (k,) float32) is written. Returns the number of
    filled slots.
    """
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    out_ids, out_scores, out_sims = out
    sims = (vectors.astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
    keep = np.flatnonzero(alive & (sims >= np.float32(threshold)))
    scores = np.empty(keep.shape[0], np.float32)
    decay_scores(sims[keep], last_accessed_at[keep], importance[keep], now, half_life,
                 w_sim, w_rec, w_imp, scores)
    return _select(keep.astype(np.int64), sims[keep], scores, out_ids, out_scores, out_sims)


def rerank(cand_ids, cand_sims, w_sim, decay, alive, threshold, out):
    """Fused top-k of candidates (e.g. from FAISS) given their row ids and similarities.

    cand_ids (m,) int64 (-1 entries ignored), cand_sims (m,) float32; the column arrays are
    indexed by row id; the rest as in :func:`fused_topk`. Returns the number of filled slots.
    """
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    out_ids, out_scores, out_sims = out
    valid = cand_ids >= 0
    ids = cand_ids[valid]
    sims = cand_sims[valid].astype(np.float32)
    ok = alive[ids] & (sims >= np.float32(threshold))
    ids, sims = ids[ok], sims[ok]
    scores = np.empty(ids.shape[0], np.float32)
    decay_scores(sims, last_accessed_at[ids], importance[ids], now, half_life,
                 w_sim, w_rec, w_imp, scores)
    return _select(ids.astype(np.int64), sims, scores, out_ids, out_scores, out_sims)


# --------------------------------------------------------------------------------------------
# Hashing embedder and lexical scorer (oracles of memcore.kernels.hashing): pure Python over
# bytes and str, one token at a time; the natural statement of each recipe.
# --------------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1
_HASH_SEP, _HASH_WORD, _HASH_NOSPACE, _HASH_MARK = 0, 1, 2, 3


def fnv1a32(data, start, end):
    """32-bit FNV-1a of ``bytes(data[start:end])``, as np.uint32."""
    h = 2166136261
    for b in bytes(data[start:end]):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return np.uint32(h)


def token_hash(data, start, end):
    """FNV-1a 64 of ``bytes(data[start:end])`` then the splitmix64 finaliser, as np.uint64."""
    h = 14695981039346656037
    for b in bytes(data[start:end]):
        h = ((h ^ b) * 1099511628211) & _M64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
    return np.uint64(h ^ (h >> 31))


def _normalised_row(counts, dim):
    v = np.zeros(dim, np.float64)
    for j, c in counts.items():
        v[j] = c
    norm = np.sqrt((v * v).sum())
    return (v / norm if norm > 0 else v).astype(np.float32)


def hash_embed_classic(data, offsets, out):
    """Classic hashing trick: ASCII-lowercase, tokens ``[a-z0-9]{2,}``, FNV-1a 32 bucket,
    sign by parity of the first byte. out (n, dim) float32 is written."""
    import re

    dim = out.shape[1]
    for i in range(offsets.shape[0] - 1):
        raw = bytes(data[offsets[i]:offsets[i + 1]]).lower()   # bytes.lower: ASCII only
        counts: dict = {}
        for tok in re.findall(rb"[a-z0-9]{2,}", raw):
            tok_arr = np.frombuffer(tok, np.uint8)
            j = int(fnv1a32(tok_arr, 0, len(tok))) % dim
            counts[j] = counts.get(j, 0) + (1 if tok[0] % 2 == 0 else -1)
        out[i] = _normalised_row(counts, dim)


hash_embed_classic_parallel = hash_embed_classic


def _unicode_tokens(text, char_class):
    """Token strings of one decoded text under the unicode tokenisation."""
    def cls(ch):
        cp = ord(ch)
        return int(char_class[cp]) if cp < char_class.shape[0] else _HASH_SEP

    units = []   # (class, unit str): a base char plus its trailing marks
    for ch in text:
        c = cls(ch)
        if c == _HASH_MARK and units and units[-1][0] in (_HASH_WORD, _HASH_NOSPACE) \
                and units[-1][2]:
            units[-1] = (units[-1][0], units[-1][1] + ch, True)
        elif c in (_HASH_WORD, _HASH_NOSPACE):
            units.append((c, ch, True))
        else:
            units.append((_HASH_SEP, ch, False))
    tokens = []
    i = 0
    while i < len(units):
        c = units[i][0]
        j = i
        while j < len(units) and units[j][0] == c:
            j += 1
        run = [u[1] for u in units[i:j]]
        if c == _HASH_WORD:
            tokens.append("".join(run))
        elif c == _HASH_NOSPACE:
            tokens.extend([run[0]] if len(run) == 1 else
                          [run[k] + run[k + 1] for k in range(len(run) - 1)])
        i = j
    return tokens


def unicode_token_hashes(data, offsets, char_class, out_hashes, out_counts):
    """Unicode tokenisation of each text (invalid UTF-8 decodes to U+FFFD, a separator);
    token hashes go to ``out_hashes[offsets[i]:]``, counts to out_counts."""
    for i in range(offsets.shape[0] - 1):
        text = bytes(data[offsets[i]:offsets[i + 1]]).decode("utf-8", errors="replace")
        tokens = _unicode_tokens(text, char_class)
        for t, tok in enumerate(tokens):
            b = np.frombuffer(tok.encode("utf-8"), np.uint8)
            out_hashes[offsets[i] + t] = token_hash(b, 0, b.shape[0])
        out_counts[i] = len(tokens)


unicode_token_hashes_parallel = unicode_token_hashes


def embed_token_hashes(hashes, offsets, counts, out):
    """Signed bucket sums: +1/-1 (bit 63) at ``(h & 0xFFFFFFFF) % dim``; rows L2-normalised."""
    dim = out.shape[1]
    for i in range(offsets.shape[0] - 1):
        acc: dict = {}
        for h in hashes[offsets[i]:offsets[i] + counts[i]].tolist():
            j = (h & 0xFFFFFFFF) % dim
            acc[j] = acc.get(j, 0) + (-1 if h >> 63 else 1)
        out[i] = _normalised_row(acc, dim)


embed_token_hashes_parallel = embed_token_hashes


def tf_cosine(query_hashes, hashes, offsets, counts, out):
    """Cosine of term-frequency vectors (Counter of hashes), query against each text."""
    from collections import Counter

    q = Counter(query_hashes.tolist())
    qn = np.sqrt(sum(v * v for v in q.values()))
    for i in range(offsets.shape[0] - 1):
        d = Counter(hashes[offsets[i]:offsets[i] + counts[i]].tolist())
        dn = np.sqrt(sum(v * v for v in d.values()))
        dot = sum(v * d.get(k, 0) for k, v in q.items())
        out[i] = np.float32(dot / (qn * dn)) if qn > 0 and dn > 0 else np.float32(0.0)


# --------------------------------------------------------------------------- record log
def crc32(data, start, stop, table):
    """zlib's CRC-32 of ``data[start:stop]`` (``table`` is accepted and unused)."""
    import zlib

    return zlib.crc32(bytes(data[start:stop]))


def crc_rows(a, b, table, out):
    """``out[i] = zlib.crc32(bytes(a[i]) + bytes(b[i]))`` (``table`` is accepted and
    unused)."""
    import zlib

    for i in range(a.shape[0]):
        out[i] = zlib.crc32(a[i].tobytes() + b[i].tobytes())


def scan_records(data, start, table, out_offsets):
    """Walk log frames until the end or the first bad record; ``(count, stop)``.

    Good record: the frame fits, magic 0x52434D4D, length <= 2**30 and inside ``data``, zlib
    CRC-32 of the payload matches, op 1 (PUT, >= 64 bytes, ``64 + kl + tl + ml == length``)
    or op 2 (DEL, >= 12 bytes, ``12 + kl == length``). Offsets go to ``out_offsets``.
    """
    import struct
    import zlib

    buf = bytes(data)
    size, off, count = len(buf), int(start), 0
    while off < size:
        if size - off < 12:
            break
        magic, length, crc = struct.unpack_from("<III", buf, off)
        begin, end = off + 12, off + 12 + length
        if magic != 0x52434D4D or length > (1 << 30) or end > size:
            break
        if zlib.crc32(buf[begin:end]) != crc:
            break
        op = buf[begin]
        if op == 1:
            if length < 64 or 64 + sum(struct.unpack_from("<III", buf, begin + 52)) != length:
                break
        elif op == 2:
            if length < 12 or 12 + struct.unpack_from("<I", buf, begin + 8)[0] != length:
                break
        else:
            break
        out_offsets[count] = off
        count += 1
        off = end
    return count, off


def gather_segments(data, starts, lengths, sep, out):
    """``bytes([sep]).join(data[s:s + l] for s, l in zip(starts, lengths))`` into ``out``
    (no separator when ``sep < 0``)."""
    blob = (bytes([sep]) if sep >= 0 else b"").join(bytes(data[s:s + n]) for s, n in zip(starts, lengths))
    out[:len(blob)] = np.frombuffer(blob, np.uint8)
    return len(blob)


# --------------------------------------------------------------------------------------------
# BM25 and hybrid recall (oracles of memcore.kernels.bm25 and memcore.kernels.hybrid).
# --------------------------------------------------------------------------------------------

def bm25_append(doc, term_ids, tfs, postings, n_blocks, pool_used, min_block, max_block):
    """Append one document's postings to the blocked lists (see kernels/bm25.py)."""
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    for t, tf in zip(term_ids.tolist(), tfs.tolist()):
        tail = int(term_tail[t])
        if tail < 0 or term_fill[t] == block_size[tail]:
            size = min_block if tail < 0 else min(2 * int(block_size[tail]), max_block)
            blk = n_blocks
            n_blocks += 1
            block_start[blk], block_size[blk], block_next[blk] = pool_used, size, -1
            pool_used += size
            if tail < 0:
                term_head[t] = blk
            else:
                block_next[tail] = blk
            term_tail[t], term_fill[t], tail = blk, 0, blk
        p = block_start[tail] + term_fill[t]
        pool_doc[p], pool_tf[p] = doc, tf
        term_fill[t] += 1
    return n_blocks, pool_used


def bm25_scores(q_terms, q_idf, postings, docs, k1, b, avgdl, out):
    """BM25 of every live document: walk each query term's postings into a dict, then scatter."""
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, doc_len, doc_alive = docs
    out[:] = 0.0
    for t, idf in zip(q_terms.tolist(), q_idf.tolist()):
        postings = []
        blk = int(term_head[t])
        while blk >= 0:
            stop = term_fill[t] if blk == term_tail[t] else block_size[blk]
            s = int(block_start[blk])
            postings += list(zip(pool_doc[s:s + stop].tolist(), pool_tf[s:s + stop].tolist()))
            blk = int(block_next[blk])
        for d, tf in postings:
            if doc_alive[d]:
                out[doc_row[d]] += idf * tf / (tf + k1 * (1.0 - b + b * doc_len[d] / avgdl))
    return out


def masked_stats(x, alive):
    """(mean, population std) of x[alive] in float64; (0, 0) when none is alive."""
    v = np.asarray(x, np.float64)[alive]
    if v.shape[0] == 0:
        return 0.0, 0.0
    return float(v.mean()), float(np.sqrt(((v - v.mean()) ** 2).mean()))


def hybrid_topk(query, vectors, w_dense, lexical, decay, alive, normalize, threshold, sims, out):
    """Exact hybrid top-k (see kernels/hybrid.py): z-normalised dense + lexical + decay + boost."""
    lex, w_lex, boost, w_boost = lexical
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    out_ids, out_scores, out_sims = out
    s = (vectors.astype(np.float64) @ query.astype(np.float64)).astype(np.float32)
    sims[alive] = s[alive]

    def z(x):
        if not normalize:
            return np.asarray(x, np.float64)
        m, sd = masked_stats(x, alive)
        return (np.asarray(x, np.float64) - m) / sd if sd > 0 else np.zeros(x.shape[0])

    age = np.maximum(np.float64(now) - last_accessed_at, 0.0)
    score = (w_dense * z(s) + w_rec * np.exp2(-age / half_life)
             + w_imp * importance.astype(np.float64))
    for l in range(lex.shape[0]):
        if w_lex[l] != 0.0:
            score = score + w_lex[l] * z(lex[l])
    if w_boost != 0.0:
        score = score + w_boost * boost.astype(np.float64)
    keep = np.flatnonzero(alive & (s >= np.float32(threshold)))
    return _select(keep.astype(np.int64), s[keep], score[keep].astype(np.float32),
                   out_ids, out_scores, out_sims)


def bm25_docs(tok, tok_tf, segments, term_of, n_terms, out, merge=False):
    """Distinct terms of many documents, term ids on first use (see kernels/bm25.py)."""
    seg_start, seg_count, seg_ptr = segments
    out_ptr, out_terms, out_tfs = out
    k = 0
    out_ptr[0] = 0
    for i in range(seg_ptr.shape[0] - 1):
        sel = [np.arange(seg_start[s], seg_start[s] + seg_count[s])
               for s in range(seg_ptr[i], seg_ptr[i + 1])]
        sel = np.concatenate(sel) if sel else np.zeros(0, np.int64)
        ids = np.unique(tok[sel])
        for g in ids.tolist():
            if term_of[g] < 0:
                term_of[g] = n_terms
                n_terms += 1
            out_terms[k] = term_of[g]
            out_tfs[k] = int(tok_tf[sel][tok[sel] == g].sum())
            k += 1
        out_ptr[i + 1] = k
    return n_terms


def bm25_append_many(doc0, first, ptr, term_ids, tfs, postings, n_blocks, pool_used, min_block,
                     max_block):
    """bm25_append for documents first, first + 1, ... while there is room (see kernels/bm25.py)."""
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    i = first
    while i < ptr.shape[0] - 1:
        a, m = ptr[i], ptr[i + 1] - ptr[i]
        tails = [term_tail[t] for t in term_ids[a:a + m]]
        opens = [min_block if tl < 0 else min(2 * block_size[tl], max_block)
                 for t, tl in zip(term_ids[a:a + m], tails)
                 if tl < 0 or term_fill[t] == block_size[tl]]
        if (n_blocks + len(opens) > min(block_start.shape[0], block_size.shape[0],
                                        block_next.shape[0])
                or pool_used + sum(opens) > min(pool_doc.shape[0], pool_tf.shape[0])):
            break
        n_blocks, pool_used = bm25_append(doc0 + i, term_ids[a:a + m], tfs[a:a + m], postings,
                                          n_blocks, pool_used, min_block, max_block)
        i += 1
    return i, n_blocks, pool_used


def window_means(E, rows_of, lo, k, alpha, out):
    """Combined dense rows: alpha * e + (1 - alpha) * window mean (see kernels/bm25.py)."""
    for i in range(lo.shape[0]):
        win = rows_of[lo[i]:lo[i] + k[i]]
        own = rows_of[i]
        out[own] = (alpha * E[own].astype(np.float64)
                    + (1.0 - alpha) * E[win].astype(np.float64).mean(axis=0)).astype(np.float32)


# --------------------------------------------------------------------------- codes and scan
def encode_rows(vectors, codes, scale, cnorm, rnorm):
    """Symmetric per-row int8 codes: scale = float32(max|v| / 127), code = clip(rint(v / scale)),
    cnorm >= ||code||, rnorm >= ||v - scale * code|| (float32, rounded up)."""
    v = vectors.astype(np.float64)
    m = np.abs(v).max(axis=1) if v.shape[1] else np.zeros(v.shape[0])
    s = (m / 127).astype(np.float32)
    s64 = s.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(s64 > 0, np.clip(np.rint(v / np.where(s64 > 0, s64, 1.0)), -127, 127), 0.0)
    codes[:] = c.astype(np.int8)
    scale[:] = s
    r = v - s64 * c
    cn = np.sqrt((c * c).sum(axis=1))
    rn = np.sqrt((r * r).sum(axis=1)) * (1.0 + (v.shape[1] + 8) * 2.0 ** -53)
    cnorm[:] = _up32(cn)
    rnorm[:] = _up32(rn)


def encode_nibbles(vectors, codes4, scale, cnorm, rnorm):
    """4-bit codes: levels -7..7, scale = float32(max|v| / d) for the d of
    ``codes.NIBBLE_DIVISORS`` with the smallest float64 sum of squared residuals (summed in
    index order, the first on ties), packed two per byte: byte t of a row holds code[t] + 8
    (low nibble) and code[t + width] + 8 (high nibble), code 0 past dim; cnorm, rnorm as in
    :func:`encode_rows`."""
    from memcore.kernels.codes import NIBBLE_DIVISORS
    n, dim = vectors.shape
    width = codes4.shape[1]
    v = vectors.astype(np.float64)
    full = np.zeros((n, 2 * width), np.int64)
    for i in range(n):
        m = np.abs(v[i]).max() if dim else 0.0
        best, best_s = None, np.float32(0.0)
        for d in NIBBLE_DIVISORS:
            s = np.float32(m / d)
            if s == 0.0:
                break
            c = np.clip(np.rint(v[i] / np.float64(s)), -7, 7)
            rr = np.cumsum((v[i] - np.float64(s) * c) ** 2)[-1]      # in index order
            if best is None or rr < best:
                best, best_s = rr, s
            if rr == 0.0:
                break
        s64 = np.float64(best_s)
        c = np.clip(np.rint(v[i] / s64), -7, 7) if best_s != 0.0 else np.zeros(dim)
        full[i, :dim] = c
        scale[i] = best_s
        r = v[i] - s64 * c
        cnorm[i] = _up32(np.sqrt((c * c).sum()))
        rnorm[i] = _up32(np.sqrt(np.cumsum(r * r)[-1]) * (1.0 + (dim + 8) * 2.0 ** -53))
    codes4[:] = ((full[:, :width] + 8) | ((full[:, width:] + 8) << 4)).astype(np.uint8)


def unpack_nibbles(codes4, dim):
    """(n, dim) int64 codes -7..7 of 4-bit rows (:func:`encode_nibbles`)."""
    b = np.asarray(codes4).astype(np.int64)
    return np.concatenate([(b & 15) - 8, (b >> 4) - 8], axis=1)[:, :dim]


def _up32(x):
    f = np.asarray(x, np.float64).astype(np.float32)
    low = f.astype(np.float64) < x
    return np.where(low, np.nextafter(f, np.float32(np.inf)), f)


def exact_sims(query, vectors):
    """``exact_sim(query, v)`` of every row: float64, eight partial sums over j mod 8 (the tail
    ``dim % 8`` added to the first), combined ``((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7))``."""
    n, d = vectors.shape
    q = query.astype(np.float64)
    p = np.zeros((n, 8))
    m = d - d % 8
    for j in range(0, m, 8):
        p += vectors[:, j:j + 8].astype(np.float64) * q[j:j + 8]
    for j in range(m, d):
        p[:, 0] += vectors[:, j].astype(np.float64) * q[j]
    return ((p[:, 0] + p[:, 1]) + (p[:, 2] + p[:, 3])) + ((p[:, 4] + p[:, 5]) + (p[:, 6] + p[:, 7]))


def _window_ctx(sims, win_start, win_len, win_rows, alpha, rows=None):
    """The context similarity of ``rows`` (all by default) from every row's ``sims``."""
    rows = np.arange(sims.shape[0]) if rows is None else np.asarray(rows, np.int64)
    size = np.asarray(win_len)[rows]
    start = np.asarray(win_start)[rows]
    acc = np.zeros(rows.shape[0])
    for p in range(int(size.max()) if rows.shape[0] else 0):
        has = size > p
        acc[has] += sims[win_rows[start[has] + p]]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(size > 0, acc / np.where(size > 0, size, 1), sims[rows])
    return alpha * sims[rows] + (1.0 - alpha) * mean


def hybrid_terms(rows, query, vectors, windows, alpha, dense, sparse, decay):
    """The terms of :func:`hybrid_exact_topk`'s float64 score of ``rows``, in the order it
    sums them: a list of ``(name, raw, contribution)``, ``name`` one of ``"dense"`` (own
    similarity), ``"context"`` (window similarity), ``"recency"``, ``"importance"`` or
    ``("sparse", l)``; ``raw`` the signal's value and ``contribution`` its term, (m,) float64
    each. Only terms with a non-zero weight are listed. Also the rows' float64 sims."""
    win_start, win_len, win_rows = windows
    sp_ptr, sp_rows, sp_vals, sp_w, sp_mu, sp_inv = sparse
    last_accessed_at, importance, now, half_life, w_rec, w_imp = decay
    n = vectors.shape[0]
    rows = np.asarray(rows, np.int64)
    if rows.shape[0] == n and np.array_equal(rows, np.arange(n)):
        sims = exact_sims(query, vectors)
    else:                           # the rows and their window neighbours only
        need = [rows]
        if dense[3] != 0.0:
            size, start = np.asarray(win_len)[rows], np.asarray(win_start)[rows]
            need += [win_rows[start[size > p] + p].astype(np.int64)
                     for p in range(int(size.max()) if rows.shape[0] else 0)]
        need = np.unique(np.concatenate(need))
        sims = np.zeros(n)
        sims[need] = exact_sims(query, vectors[need])
    terms = []
    if dense[0] != 0.0:
        x = sims[rows]
        terms.append(("dense", x, dense[0] * ((x - dense[1]) * dense[2])))
    if dense[3] != 0.0:
        x = _window_ctx(sims, win_start, win_len, win_rows, alpha, rows)
        terms.append(("context", x, dense[3] * ((x - dense[4]) * dense[5])))
    if w_rec != 0.0:
        age = np.maximum(np.float64(now) - np.asarray(last_accessed_at)[rows], 0.0)
        x = np.exp2(-age / np.float64(half_life))
        terms.append(("recency", x, w_rec * x))
    if w_imp != 0.0:
        x = np.asarray(importance)[rows].astype(np.float64)
        terms.append(("importance", x, w_imp * x))
    for l in range(sp_w.shape[0]):
        if sp_w[l] != 0.0:
            x = np.zeros(n)
            x[sp_rows[sp_ptr[l]:sp_ptr[l + 1]]] = sp_vals[sp_ptr[l]:sp_ptr[l + 1]]
            x = x[rows]
            terms.append((("sparse", l), x, sp_w[l] * ((x - sp_mu[l]) * sp_inv[l])))
    return terms, sims[rows]


def hybrid_exact_topk(query, vectors, windows, alpha, dense, sparse, decay, alive, threshold, out):
    """The exact hybrid path (see kernels/scan.py): float64 sims, the window stencil, z-scores
    with the given statistics, decay, sparse signals (:func:`hybrid_terms`, summed in order);
    float32 top-k, ties by lower row. ``windows``, ``sparse``, ``decay`` and ``out`` are the
    kernel's tuples."""
    out_ids, out_scores, out_sims = out
    n = vectors.shape[0]
    terms, sims = hybrid_terms(np.arange(n), query, vectors, windows, alpha, dense, sparse, decay)
    s = np.zeros(n)
    for _, _, c in terms:
        s += c
    keep = np.flatnonzero(alive & (sims >= np.float64(threshold)))
    return _select(keep.astype(np.int64), sims[keep].astype(np.float32),
                   s[keep].astype(np.float32), out_ids, out_scores, out_sims)


def hybrid_rows_topk(rows, query, vectors, windows, alpha, dense, sparse, decay, alive, threshold,
                     out):
    """:func:`hybrid_exact_topk` over the candidates ``alive & isin(arange(n), rows)``."""
    cand = np.zeros(vectors.shape[0], bool)
    cand[np.asarray(rows, np.int64)] = True
    return hybrid_exact_topk(query, vectors, windows, alpha, dense, sparse, decay, alive & cand,
                             threshold, out)


def hybrid_scan_topk(query, codes, vectors, windows, alpha, dense, sparse, decay, alive, threshold,
                     out, parallel=False):
    """:func:`hybrid_exact_topk` (the codes only change the work); ``out`` ends with ``stats``,
    set to [live rows, n]."""
    stats = out[3]
    stats[0] = int(alive.sum())
    stats[1] = vectors.shape[0]
    return hybrid_exact_topk(query, vectors, windows, alpha, dense, sparse, decay, alive,
                             threshold, out[:3])


# --------------------------------------------------------------------------- moments
def dense_moments(query, s1, s2, n):
    """(mean, var) of query . v over n rows from s1 = sum v, s2 = sum v v^T (float64)."""
    if n == 0:
        return 0.0, 0.0
    q = query.astype(np.float64)
    mean = float(q @ s1) / n
    return mean, max(float(q @ s2 @ q) / n - mean * mean, 0.0)


def context_vectors(vectors, win_start, win_len, win_rows, alpha):
    """(n, dim) float64: alpha * v_i + (1 - alpha) * mean of the rows of W(i) (W(i) empty: v_i)."""
    v = vectors.astype(np.float64)
    out = np.empty_like(v)
    for i in range(v.shape[0]):
        w = win_rows[win_start[i]:win_start[i] + win_len[i]]
        mean = v[w].mean(axis=0) if w.shape[0] else v[i]
        out[i] = alpha * v[i] + (1.0 - alpha) * mean
    return out


def stride_context_vectors(vectors, rows, win, win_pos, win_cnt, alpha, radius):
    """(len(rows), dim) float64: ``alpha * v_i + (1 - alpha) * mean(v_j, j in win[i, lo:hi])``,
    ``lo = pos - min(pos, r)``, ``hi = min(cnt, pos + r + 1)``; the own vectors for r = 0. The
    members are added in stride order (one masked gather per offset), in float64."""
    rows = np.asarray(rows, np.int64)
    X = vectors[rows].astype(np.float64)
    if radius == 0:
        return X
    pos = win_pos[rows].astype(np.int64)
    cnt = win_cnt[rows].astype(np.int64)
    lo = pos - np.minimum(pos, radius)
    hi = np.minimum(cnt, pos + radius + 1)
    out = np.zeros((rows.shape[0], vectors.shape[1]), np.float64)
    W = win[rows]
    at = np.arange(rows.shape[0])
    for off in range(2 * radius + 1):
        j = lo + off
        ok = j < hi
        idx = np.where(ok, W[at, np.minimum(j, W.shape[1] - 1)], rows)
        out += vectors[idx] * ok.astype(np.float32)[:, None]      # x * 1 or 0: exact
    return alpha * X + (1.0 - alpha) * (out / (hi - lo)[:, None])


def moments_update(vectors, rows, sign, s1, s2):
    """s1 += sign * sum v_r, s2 += sign * sum v_r v_r^T over rows (float64)."""
    x = vectors[rows].astype(np.float64)
    s1 += sign * x.sum(axis=0)
    s2 += sign * (x.T @ x)


def context_moments_update(vectors, rows, win_start, win_len, win_rows, alpha, sign, s1, s2):
    """moments_update of the context vectors of rows (see context_vectors)."""
    x = context_vectors(vectors, win_start, win_len, win_rows, alpha)[rows]
    s1 += sign * x.sum(axis=0)
    s2 += sign * (x.T @ x)


def sparse_moments(vals, n):
    """(mean, var) over n rows of a signal equal to vals on len(vals) rows, 0 elsewhere."""
    if n == 0:
        return 0.0, 0.0
    x = np.zeros(n)
    x[:vals.shape[0]] = vals
    return float(x.mean()), float(x.var())


# --------------------------------------------------------------------------- sparse BM25
def _live_row_terms(postings, docs, terms):
    """{row: {term: tf}} of the live documents, for the given terms."""
    term_head, term_tail, term_fill, block_start, block_size, block_next, pool_doc, pool_tf = \
        postings
    doc_row, _, doc_alive = docs
    out: dict = {}
    for t in set(terms):
        blk = int(term_head[t])
        while blk >= 0:
            stop = term_fill[t] if blk == term_tail[t] else block_size[blk]
            s = int(block_start[blk])
            for d, tf in zip(pool_doc[s:s + stop].tolist(), pool_tf[s:s + stop].tolist()):
                if doc_alive[d]:
                    out.setdefault(int(doc_row[d]), {})[t] = tf
            blk = int(block_next[blk])
    return out


def bm25_scores_sparse(q_terms, q_idf, postings, docs, k1, b, avgdl):
    """The non-zero rows of :func:`bm25_scores` (ascending) and their scores."""
    doc_row = docs[0]
    n_rows = int(doc_row.max()) + 1 if doc_row.shape[0] else 0
    dense = bm25_scores(q_terms, q_idf, postings, docs, k1, b, avgdl, np.zeros(n_rows))
    rows = np.flatnonzero(dense > 0).astype(np.int64)
    return rows, dense[rows]


def window_lengths(row_len, win_start, win_len, win_rows, rows, out):
    """``out[i] = sum(row_len[W(i)])`` (``row_len[i]`` for an empty window) for i in rows."""
    for i in np.asarray(rows).tolist():
        w = win_rows[win_start[i]:win_start[i] + win_len[i]]
        out[i] = int(row_len[w].sum()) if w.shape[0] else int(row_len[i])


def bm25_context_scores_sparse(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                               avgdl_ctx):
    """BM25 of each live row's window document (its window's own documents merged), by the
    definition: tf summed over the window (length ``ctx_len``), df over the window documents,
    N = n_live."""
    doc_row, _, doc_alive = docs
    win_start, win_len, win_rows = windows
    own = _live_row_terms(postings, docs, q_terms.tolist())
    live_rows = sorted({int(doc_row[d]) for d in range(doc_alive.shape[0]) if doc_alive[d]})
    ctx: dict = {}
    for i in live_rows:
        w = win_rows[win_start[i]:win_start[i] + win_len[i]].tolist() or [i]
        tfs: dict = {}
        for j in w:
            for t, tf in own.get(j, {}).items():
                tfs[t] = tfs.get(t, 0) + tf
        ctx[i] = (tfs, int(ctx_len[i]))
    scores: dict = {}
    for t in q_terms.tolist():
        df = sum(1 for i in live_rows if ctx[i][0].get(t, 0) > 0)
        if df == 0:
            continue
        idf = float(np.log1p((n_live - df + 0.5) / (df + 0.5)))
        for i in live_rows:
            tf = ctx[i][0].get(t, 0)
            if tf:
                norm = k1 * (1.0 - b + b * float(ctx[i][1]) / avgdl_ctx)
                scores[i] = scores.get(i, 0.0) + idf * tf / (tf + norm)
    rows = np.array(sorted(scores), np.int64)
    return rows, np.array([scores[i] for i in rows.tolist()], np.float64)


def bm25_context_scores_dense(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                              avgdl_ctx, scratch):
    """The same result as :func:`bm25_context_scores_sparse` (the definition; the kernels
    differ only in how they accumulate; the scratch arrays are left as given)."""
    return bm25_context_scores_sparse(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                                      avgdl_ctx)


def bm25_scores_parallel(q_terms, q_idf, postings, docs, k1, b, avgdl, out):
    """:func:`bm25_scores` (the threads change nothing)."""
    return bm25_scores(q_terms, q_idf, postings, docs, k1, b, avgdl, out)


def bm25_context_scores_dense_parallel(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                                       avgdl_ctx, scratch, parts_scratch):
    """:func:`bm25_context_scores_sparse`'s result (the threads change nothing)."""
    return bm25_context_scores_sparse(q_terms, postings, docs, windows, ctx_len, n_live, k1, b,
                                      avgdl_ctx)


def rows_in(values, wanted):
    """Rows whose value is in ``wanted``, ascending, int64."""
    return np.flatnonzero(np.isin(values, wanted)).astype(np.int64)


def _forward_terms(forward, i) -> dict:
    """Live row i's document as ``{term: tf}`` ({} without one)."""
    row_doc, doc_tptr, doc_nterm, dt_term, dt_tf, _ = forward
    d = int(row_doc[i]) - 1
    if d < 0:
        return {}
    a, m = int(doc_tptr[d]), int(doc_nterm[d])
    return dict(zip(dt_term[a:a + m].tolist(), dt_tf[a:a + m].tolist()))


def context_idf(df, n_live):
    """``ln(1 + (N - df + 0.5) / (df + 0.5))`` per term."""
    df = np.asarray(df, np.float64)
    return np.log1p((n_live - df + 0.5) / (df + 0.5))


def bm25_rows(rows, q_terms, q_idf, forward, k1, b, avgdl, out):
    """Own-text BM25 of each given row by the definition, from its ``{term: tf}``."""
    doc_len = forward[5]
    for j, i in enumerate(np.asarray(rows).tolist()):
        terms = _forward_terms(forward, i)
        s = 0.0
        for t, idf in zip(q_terms.tolist(), q_idf.tolist()):
            tf = terms.get(t, 0)
            if tf:
                dl = float(doc_len[int(forward[0][i]) - 1])
                s += idf * tf / (tf + k1 * (1.0 - b + b * dl / avgdl))
        out[j] = s
    return out


def bm25_context_rows(rows, q_terms, q_idf_ctx, forward, windows, ctx_len, k1, b, avgdl_ctx,
                      out):
    """Window-document BM25 of each given row by the definition: tf summed over its window."""
    win_start, win_len, win_rows = windows
    for j, i in enumerate(np.asarray(rows).tolist()):
        w = win_rows[win_start[i]:win_start[i] + win_len[i]].tolist() or [i]
        tfs: dict = {}
        for x in w:
            for t, tf in _forward_terms(forward, x).items():
                tfs[t] = tfs.get(t, 0) + tf
        s = 0.0
        for t, idf in zip(q_terms.tolist(), q_idf_ctx.tolist()):
            tf = tfs.get(t, 0)
            if tf:
                s += idf * tf / (tf + k1 * (1.0 - b + b * float(ctx_len[i]) / avgdl_ctx))
        out[j] = s
    return out


def window_term_counts(rows, sign, win, win_pos, win_cnt, forward, seen, tick, counts):
    """``counts[t, r - 1] += sign`` for each row and each distinct term of its radius-r window
    document (r = 1 .. counts.shape[1]); returns ``tick + len(rows)`` (``seen`` untouched)."""
    R = counts.shape[1]
    for i in np.asarray(rows).tolist():
        pos, cnt = int(win_pos[i]), int(win_cnt[i])
        for r in range(1, R + 1):
            terms = set()
            for p in range(max(0, pos - r), min(cnt, pos + r + 1)):
                terms.update(_forward_terms(forward, int(win[i, p]) if p != pos else i))
            for t in terms:
                counts[t, r - 1] += sign
    return tick + len(rows)


def bm25_scores_dense(q_terms, q_idf, postings, docs, k1, b, avgdl, scratch):
    """:func:`bm25_scores_sparse` (the accumulator changes nothing; the scratch is left as given)."""
    return bm25_scores_sparse(q_terms, q_idf, postings, docs, k1, b, avgdl)
