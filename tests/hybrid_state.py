"""Comparable state of a HybridIndex (what its behaviour depends on), for the tests that
check an incrementally maintained index against one built from scratch."""

from __future__ import annotations

import numpy as np

from memcore.recall.index import HybridIndex
from memcore.recall.weights import MAX_WINDOW, HybridWeights
from memcore.recall.prep import PreparedQuery


def index_state(ix: HybridIndex) -> tuple:
    """Live rows, their windows at every radius, codes, speakers, window-document lengths,
    entities: equal for two indexes holding the same memories in the same episode order."""
    n = ix.n_rows
    live = np.flatnonzero(ix._a("alive")[:n])
    wins = []
    for r in range(MAX_WINDOW + 1):
        ws, wl, wr = ix.windows(r)
        wins.append({int(i): wr[ws[i]:ws[i] + wl[i]].tolist() for i in live})
    spk = ix._a("speaker")
    speakers = {int(i): ix._spk_names[spk[i] - 1].casefold() for i in live if spk[i]}
    return (live.tolist(), wins, ix._a("codes")[live].tobytes(), ix._a("scale")[live].tobytes(),
            ix._a("cnorm")[live].tobytes(), ix._a("rnorm")[live].tobytes(),
            *(ix._a(name)[live].tobytes() for name in ("codes4", "scale4", "cnorm4", "rnorm4")),
            speakers,
            ix._ctx_len.tolist(), sorted(ix.entities()), ix.n_live, ix.lexical.n_docs,
            ix.lexical.avgdl)


def assert_same_signals(a: HybridIndex, b: HybridIndex, weights: HybridWeights, queries,
                        query_vectors) -> None:
    """BM25 signals equal bit for bit; moments (from the float64 sums) to 1e-9."""
    for text, qv in zip(queries, query_vectors):
        p = PreparedQuery(text, text, frozenset())
        la, lb = a.lexical_signals(p, weights), b.lexical_signals(p, weights)
        for x, y in zip((la.own_rows, la.own_vals, la.ctx_rows, la.ctx_vals),
                        (lb.own_rows, lb.own_vals, lb.ctx_rows, lb.ctx_vals)):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(a.moments(p, qv, weights=weights),
                                   b.moments(p, qv, weights=weights), rtol=1e-9, atol=1e-9)
