"""memcore's numba kernels (importable as ``memcore.kernels``).

Pure functions over arrays and scalars: they never import memcore, never validate, and write
into preallocated outputs. ``memcore`` validates and converts inputs once, then calls these.
NumPy oracles with the same names and signatures live in :mod:`memcore.kernels.reference`.
"""

from .scoring import decay_scores, fused_score, recency
from .topk import (
    PARALLEL_MIN_ROWS,
    fused_topk,
    fused_topk_parallel,
    fused_topk_serial,
    heap_push,
    heap_sort,
    rerank,
    use_parallel,
)

__all__ = [
    "recency",
    "fused_score",
    "decay_scores",
    "PARALLEL_MIN_ROWS",
    "fused_topk",
    "fused_topk_serial",
    "fused_topk_parallel",
    "heap_push",
    "heap_sort",
    "rerank",
    "use_parallel",
]
