"""Leave-one-conversation-out (LOO) selection of hybrid recall settings on LoCoMo dev.

``python -m bench.loo [--kind minilm-int8|hashing] [--grid NAME]``: every candidate setting
(a :class:`memcore.recall.hybrid.HybridWeights` plus optional query-time ideas, see
:data:`IDEAS`) ranks every question of the six dev conversations once; then, for each
conversation, the candidate with the best mean R@10 (ties: R@5) on the *other five* is scored
on the held-out one. The LOO number is the question-weighted mean of those held-out scores: a
setting chosen without seeing the questions it is scored on. The table also lists each
candidate's all-six score (in-sample, for reading only).

Each conversation's store is built once (:func:`bench.quality.locomo_store`) and queried with
``touch=False`` and ``threshold=-1`` as the harness does; embeddings come from the cache.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import asdict, replace

import numpy as np

from bench.metrics import recall_accuracy

__all__ = ["candidates", "evaluate", "loo_select", "main"]

KS = (5, 10)


def _prf_vector(q: np.ndarray, hits: list, vec_of: dict, beta: float, m: int) -> np.ndarray:
    """Rocchio pseudo-relevance feedback: ``q + beta * mean(top-m hit vectors)``, unit norm."""
    top = [vec_of[h.key] for h in hits[:m] if h.key in vec_of]
    if not top:
        return q
    v = q + beta * np.mean(top, axis=0)
    return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


def _turn_pos(key: str) -> tuple:
    s, t = key[1:].split(":")
    return int(s), int(t)


def _diverse(store, ns, question, v, hw, spec, vec_of, top_k, pool: int = 60) -> list:
    """Greedy re-rank of the top ``pool`` (raw fused scores): each pick's score less ``lam``
    per already picked hit within ``radius`` turns of the same session (``kind == "window"``)
    or less ``lam`` times its largest cosine to a picked hit (``kind == "mmr"``)."""
    kind, lam, radius = spec
    rq = store.resolve(ns, question, top_k=pool, threshold=-1.0, touch=False, query_vector=v,
                       hybrid=hw)
    cand = store.scan(rq)
    raw = np.array([h.score for h in cand], np.float64)
    pos = np.array([_turn_pos(h.key) for h in cand], np.int64).reshape(-1, 2)
    V = np.stack([vec_of[h.key] for h in cand]) if cand else np.zeros((0, 1))
    pen = np.zeros(len(cand))
    free = np.ones(len(cand), bool)
    picked: list = []
    while free.any() and len(picked) < top_k:
        s = np.where(free, raw - lam * pen, -np.inf)
        b = int(np.argmax(s))
        picked.append(b)
        free[b] = False
        if kind == "window":
            pen += (pos[:, 0] == pos[b, 0]) & (np.abs(pos[:, 1] - pos[b, 1]) <= radius)
        else:
            pen = np.maximum(pen, V @ V[b])
    return [cand[i] for i in picked]


_WORD = re.compile(r"[a-z]{3,}")


def _idf(texts: list) -> dict:
    df: dict = {}
    for t in texts:
        for w in set(_WORD.findall(t.casefold())):
            df[w] = df.get(w, 0) + 1
    n = len(texts)
    return {w: math.log((n + 1) / (c + 0.5)) for w, c in df.items()}


def _expansion(hits, spec, idf, question, names) -> str:
    """Lexical pseudo-relevance feedback (RM3-like): the ``t`` words of the top ``m`` hits
    with the largest summed idf, question words, stop words and speaker names left out."""
    from memcore.recall.prep import ENGLISH_QUESTION_WORDS

    m, t = spec
    have = set(_WORD.findall(question.casefold()))
    score: dict = {}
    for h in hits[:m]:
        for w in _WORD.findall(h.text.casefold()):
            if w in have or w in names or w in ENGLISH_QUESTION_WORDS:
                continue
            score[w] = score.get(w, 0.0) + idf.get(w, 0.0)
    return " ".join(sorted(score, key=lambda w: -score[w])[:t])


def evaluate(convs, kind: str, settings: dict, emb, top_k: int = 25) -> dict:
    """Per setting name: ``{sample_id: [(R@5, R@10, category), ...]}`` over questions with
    evidence. A setting is ``{"hybrid": HybridWeights, "prf": (beta, m) or None}``."""
    from bench.quality import locomo_store

    weights = "hybrid" if kind == "minilm-int8" else "no_model"
    out: dict = {name: {} for name in settings}
    for conv in convs:
        store, ns, vecs = locomo_store(conv, kind, weights, emb)
        vec_of = {t.dia_id: v for t, v in zip(conv.turns, vecs)}
        names = {t.speaker.casefold() for t in conv.turns}
        idf = _idf([t.text for t in conv.turns])
        qs = [q for q in conv.questions if q.evidence]
        dense = [store.prepare(ns, q.question).dense for q in qs]
        qvecs = emb(kind, dense)
        forms = {}
        for name, st in settings.items():
            if st.get("qform") and st["qform"] not in forms:
                from memcore.recall.prep import DefaultQueryPreparer

                if st["qform"] == "mean":
                    kept = emb(kind, [q.question for q in qs])
                    mixed = qvecs + kept
                    forms["mean"] = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
                else:
                    prep = DefaultQueryPreparer(names=st["qform"])
                    spk = sorted({t.speaker for t in conv.turns})
                    forms[st["qform"]] = emb(kind, [prep(q.question, spk).dense for q in qs])
        for name, st in settings.items():
            rows = []
            for q, v in zip(qs, forms[st["qform"]] if st.get("qform") else qvecs):
                hits = store.search(ns, q.question, top_k=top_k, threshold=-1.0, touch=False,
                                    query_vector=v, hybrid=st["hybrid"])
                if st.get("diverse"):
                    hits = _diverse(store, ns, q.question, v, st["hybrid"], st["diverse"],
                                    vec_of, top_k)
                if st.get("rm3"):
                    terms = _expansion(hits, st["rm3"], idf, q.question, names)
                    hits = store.search(ns, f"{q.question} {terms}", top_k=top_k,
                                        threshold=-1.0, touch=False, query_vector=v,
                                        hybrid=st["hybrid"])
                if st.get("prf"):
                    beta, m = st["prf"]
                    v2 = _prf_vector(v, hits, vec_of, beta, m)
                    hits = store.search(ns, q.question, top_k=top_k, threshold=-1.0,
                                        touch=False, query_vector=v2, hybrid=st["hybrid"])
                ranked = [h.key for h in hits]
                rows.append(tuple(recall_accuracy(ranked, q.evidence, k) for k in KS)
                            + (q.category,))
            out[name][conv.sample_id] = rows
    return out


def _mean(rows: list, i: int) -> float:
    return float(np.mean([r[i] for r in rows])) if rows else float("nan")


def loo_select(results: dict, key: int = 1) -> dict:
    """LOO: per held-out conversation the best candidate on the others (mean R@10, then R@5).

    Returns ``{"chosen": {conv: name}, "rows": [...held-out question rows...], "R@5", "R@10",
    "per_category": {cat: (R@5, R@10, n)}}``.
    """
    names = list(results)
    convs = list(results[names[0]])
    chosen, held = {}, []
    for c in convs:
        def train(name):
            rows = [r for o in convs if o != c for r in results[name][o]]
            return (_mean(rows, key), _mean(rows, 0))
        best = max(names, key=train)  # max keeps the first of equals: the grid's order
        chosen[c] = best
        held += results[best][c]
    cats = sorted({r[2] for r in held})
    return {"chosen": chosen, "R@5": _mean(held, 0), "R@10": _mean(held, 1),
            "per_category": {int(k): (_mean([r for r in held if r[2] == k], 0),
                                      _mean([r for r in held if r[2] == k], 1),
                                      sum(1 for r in held if r[2] == k)) for k in cats}}


def summary(results: dict) -> dict:
    """All-six (in-sample) R@5/R@10 and per category of each candidate."""
    out = {}
    for name, per in results.items():
        rows = [r for v in per.values() for r in v]
        cats = sorted({r[2] for r in rows})
        out[name] = {"R@5": _mean(rows, 0), "R@10": _mean(rows, 1),
                     **{f"c{k}": (_mean([r for r in rows if r[2] == k], 0),
                                  _mean([r for r in rows if r[2] == k], 1)) for k in cats}}
    return out


def candidates(grid: str, kind: str) -> dict:
    """Named candidate settings: ``default`` (the preset alone), ``weights`` (one field at a
    time around the preset), ``prf`` (Rocchio feedback strengths), ``full`` (both)."""
    from memcore.recall.hybrid import HybridWeights

    base = HybridWeights.hybrid() if kind == "minilm-int8" else HybridWeights.no_model()
    out = {"preset": {"hybrid": base}}
    if grid in ("weights", "full"):
        steps = {"dense": (1.0, 2.0, 2.5), "lexical": (0.0, 0.5), "lexical_context": (0.5, 1.0, 1.5),
                 "speaker": (1.0, 3.0), "alpha": (0.3, 0.5, 0.6), "dense_window": (1, 3, 4),
                 "lexical_window": (1, 3, 4), "k1": (0.9, 1.2), "b": (0.3, 0.75)}
        for f, vals in steps.items():
            for v in vals:
                if getattr(base, f) != v:
                    out[f"{f}={v}"] = {"hybrid": replace(base, **{f: v})}
    if grid in ("diverse", "full2"):
        for lam in (0.25, 0.5, 1.0, 2.0):
            for r in (1, 2):
                out[f"window lam={lam} r={r}"] = {"hybrid": base, "diverse": ("window", lam, r)}
            out[f"mmr lam={lam}"] = {"hybrid": base, "diverse": ("mmr", lam, 0)}
    if grid == "diversity":   # the library's HybridWeights.diversity (memcore.recall.diversity)
        for lam in (0.5, 1.0, 1.5, 2.0, 3.0):
            for r in (1, 2):
                out[f"diversity={lam} window={r}"] = {
                    "hybrid": replace(base, diversity=lam, diversity_window=r)}
    if grid == "qform":   # the dense query's form (memcore.recall.prep names=...)
        for form in ("remove", "keep", "mean"):
            out[f"dense query {form}"] = {"hybrid": base, "qform": form}
    if grid == "combo":   # pairs of the best single-field moves of --grid weights
        moves = {"b": 0.75, "k1": 1.2, "speaker": 3.0, "lexical_context": 0.5, "alpha": 0.6}
        names = list(moves)
        for i, a in enumerate(names):
            for b_ in names[i + 1:]:
                out[f"{a}={moves[a]} {b_}={moves[b_]}"] = {
                    "hybrid": replace(base, **{a: moves[a], b_: moves[b_]})}
    if grid == "rm3":
        for m in (3, 5):
            for t in (3, 6):
                out[f"rm3 m={m} t={t}"] = {"hybrid": base, "rm3": (m, t)}
    if grid in ("prf", "full"):
        for beta in (0.3, 0.6, 1.0):
            for m in (1, 3):
                out[f"prf b={beta} m={m}"] = {"hybrid": base, "prf": (beta, m)}
    return out


def main(argv=None) -> int:
    from bench.datasets import locomo_conversations
    from bench.quality import Embeddings

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", default="minilm-int8", choices=("minilm-int8", "hashing"))
    p.add_argument("--grid", default="weights", choices=("default", "weights", "prf", "full", "diverse", "diversity", "rm3", "qform", "combo"))
    p.add_argument("--data", default=None)
    p.add_argument("--json", default=None, help="write the per-question rows here")
    args = p.parse_args(argv)
    convs = locomo_conversations(args.data)
    emb = Embeddings(1)
    settings = candidates(args.grid, args.kind)
    t0 = time.perf_counter()
    res = evaluate(convs, args.kind, settings, emb)
    loo = loo_select(res)
    summ = summary(res)
    print(f"# LOO over {len(convs)} conversations, {args.kind}, grid {args.grid} "
          f"({len(settings)} candidates, {time.perf_counter() - t0:.0f} s)\n")
    print("| candidate | R@5 (all six) | R@10 (all six) | multi-hop R@10 | open-domain R@10 |")
    print("|:---|---:|---:|---:|---:|")
    for name, s in sorted(summ.items(), key=lambda kv: -kv[1]["R@10"]):
        print(f"| {name} | {s['R@5']:.3f} | {s['R@10']:.3f} | {s.get('c1', (0, 0))[1]:.3f} | "
              f"{s.get('c3', (0, 0))[1]:.3f} |")
    print(f"\nLOO: R@5 {loo['R@5']:.3f}  R@10 {loo['R@10']:.3f}; chosen: {loo['chosen']}")
    print("LOO per category (R@5 / R@10 / n): " + ", ".join(
        f"{k}: {a:.3f} / {b:.3f} ({n})" for k, (a, b, n) in loo["per_category"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"loo": loo, "summary": summ,
                       "settings": {n: {"hybrid": asdict(s["hybrid"]), "prf": s.get("prf")}
                                    for n, s in settings.items()}}, f, indent=1)
    return 0



if __name__ == "__main__":
    sys.exit(main())
