"""Hybrid recall, one module per concern (imports only ``memcore.kernels`` and leaf modules:
errors, types, _text, arrays, _crc, embedders):

- :mod:`~memcore.recall.weights`: :class:`HybridWeights`, presets, pooled weights;
- :mod:`~memcore.recall.prep`: query preparation (one form per signal);
- :mod:`~memcore.recall.words`: stemming and date words (what BM25 indexes);
- :mod:`~memcore.recall.lexical`: BM25 postings;
- :mod:`~memcore.recall.index`: the fused hybrid index of one namespace;
- :mod:`~memcore.recall.namespace`: a store namespace's indexes;
- :mod:`~memcore.recall.approx`: the opt-in approximate candidates (FAISS IVF);
- :mod:`~memcore.recall.diversity`, :mod:`~memcore.recall.score`: episode diversity and
  score calibration;
- :mod:`~memcore.recall.threads`: threads of a parallel kernel call.
"""
