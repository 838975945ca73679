"""memcore's numba kernels (importable as ``memcore.kernels``).

Pure functions over arrays and scalars: they never import memcore, never validate, and write
into preallocated outputs. ``memcore`` validates and converts inputs once, then calls these.
NumPy oracles with the same names and signatures live in :mod:`memcore.kernels.reference`.
"""

if __name__ != "memcore.kernels":
    # Imported as a top-level package (``pytest --doctest-modules kernels`` names it
    # ``kernels``). numba keys its cache by source file, and a cached function's environment
    # names its module, so entries written under this name would later fail to load as
    # ``memcore.kernels`` (ModuleNotFoundError: kernels) wherever ``kernels`` is not
    # importable. Cache in a directory of our own instead.
    import os as _os
    import tempfile as _tempfile

    import numba as _numba

    _numba.config.CACHE_DIR = _os.path.join(_tempfile.gettempdir(), f"numba-cache-{__name__}")

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
