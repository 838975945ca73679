"""A user embedder by protocol: rows that are not unit norm (or float64) are normalised once."""

from __future__ import annotations

import numpy as np

from memcore import LongTermMemory, ShortTermMemory


class LetterCounts:
    """26-d letter counts, float64, not normalised: what a user might write first."""

    name = "letter-counts-v1"
    dim = 26

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float64)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1.0
        return out


def _cosine(a: str, b: str) -> float:
    enc = LetterCounts().encode([a, b])
    return float(enc[0] @ enc[1] / np.linalg.norm(enc[0]) / np.linalg.norm(enc[1]))


def test_unnormalised_embedder_output_gives_cosine_similarity(tmp_path):
    texts = ["the blue mug is on the shelf", "battery low", "zzz"]
    for store in (ShortTermMemory(embedder=LetterCounts()),
                  LongTermMemory(tmp_path / "ltm", embedder=LetterCounts())):
        try:
            for i, text in enumerate(texts):
                store.put("ns", f"k{i}", text)
            hits = store.search("ns", "where is the blue mug", top_k=3)
            assert all(-1.0 <= h.similarity <= 1.0 + 1e-6 for h in hits)
            want = {f"k{i}": _cosine("where is the blue mug", t) for i, t in enumerate(texts)}
            for h in hits:
                assert abs(h.similarity - want[h.key]) < 1e-5
            assert hits[0].key == "k0"
            # text without letters: a zero vector is kept (similarity 0), not an error
            store.put("ns", "digits", "12345")
            assert "digits" in store.keys("ns")
        finally:
            getattr(store, "close", lambda: None)()
