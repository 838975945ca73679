"""Retrieval-quality metrics: LoCoMo's recall accuracy, BEIR's nDCG@k and recall@k, latency stats.

Pure functions over plain Python/NumPy values; ``bench/test_bench_harness.py`` checks them
against hand-computed values.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["recall_accuracy", "mean_recall_accuracy", "ndcg_at_k", "recall_at_k", "percentiles"]


def recall_accuracy(ranked: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """Fraction of a question's evidence ids found in the top ``k`` of ``ranked``.

    The LoCoMo paper's retrieval metric ("recall accuracy", Maharana et al. 2024, Table 3).

    Parameters
    ----------
    ranked : sequence of str
        Retrieved ids, best first.
    evidence : iterable of str
        The ids that answer the question; duplicates count once.
    k : int
        Cut-off, >= 1.

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        If ``evidence`` is empty (such questions are excluded, not scored 0) or ``k < 1``.

    Examples
    --------
    >>> recall_accuracy(["D1:1", "D1:2", "D2:5"], ["D1:2", "D3:1"], k=2)
    0.5
    """
    gold = set(evidence)
    if not gold:
        raise ValueError("recall_accuracy needs at least one evidence id; got none")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return len(gold.intersection(ranked[:k])) / len(gold)


def mean_recall_accuracy(rankings: Sequence[Sequence[str]], evidences: Sequence[Iterable[str]],
                         k: int) -> float:
    """Mean :func:`recall_accuracy` over questions; NaN when there are none.

    Examples
    --------
    >>> mean_recall_accuracy([["a", "b"], ["c"]], [["a"], ["x"]], k=1)
    0.5
    """
    if len(rankings) != len(evidences):
        raise ValueError(f"got {len(rankings)} rankings but {len(evidences)} evidence lists")
    if not rankings:
        return float("nan")
    return float(np.mean([recall_accuracy(r, e, k) for r, e in zip(rankings, evidences)]))


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k of one query as BEIR computes it (trec_eval ``ndcg_cut``).

    ``DCG = sum_i rel_i / log2(i + 1)`` over ranks ``i = 1..k`` with the graded relevance from
    ``qrels`` (linear gain); the ideal DCG sorts all judged-relevant documents by grade.

    Parameters
    ----------
    ranked : sequence of str
        Retrieved doc ids, best first (ids not in qrels have relevance 0).
    qrels : mapping of str to int
        Relevance grade per judged doc id; grades <= 0 are not relevant.
    k : int

    Returns
    -------
    float in [0, 1]; 0.0 when no judged doc is relevant.

    Examples
    --------
    >>> round(ndcg_at_k(["x", "a"], {"a": 1}, k=10), 4)
    0.6309
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    dcg = sum(max(qrels.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Fraction of the relevant docs (grade > 0) in the top ``k``, as in BEIR's ``Recall@k``.

    Examples
    --------
    >>> recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 0}, k=2)
    0.5
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    relevant = {d for d, g in qrels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def percentiles(samples_ns: Sequence[int] | np.ndarray, qs=(50, 95, 99)) -> dict[str, float]:
    """Latency percentiles in milliseconds from samples in nanoseconds.

    Returns ``{"p50": ..., "p95": ..., "p99": ..., "mean": ..., "n": ...}``; NaNs when empty.

    Examples
    --------
    >>> percentiles([1_000_000, 2_000_000, 3_000_000])["p50"]
    2.0
    """
    a = np.asarray(samples_ns, dtype=np.float64) / 1e6
    out = {f"p{q}": (float(np.percentile(a, q)) if a.size else float("nan")) for q in qs}
    out["mean"] = float(a.mean()) if a.size else float("nan")
    out["n"] = int(a.size)
    return out
