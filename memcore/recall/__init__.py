"""Hybrid recall: BM25 (:mod:`~memcore.recall.lexical`), query preparation
(:mod:`~memcore.recall.prep`) and the fused hybrid index (:mod:`~memcore.recall.hybrid`)."""
