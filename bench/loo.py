"""Leave-one-conversation-out (LOO) selection of hybrid recall settings on LoCoMo dev.

``python -m bench.loo [--kind minilm-int8|hashing] [--grid NAME]``: every candidate setting
(a :class:`memcore.recall.weights.HybridWeights` plus optional query-time ideas, see
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
from memcore.recall.words import MONTHS as _MONTHS, date_words   # the words the index uses

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


# --- issue 18 ideas: extra per-turn signals added to the preset's raw fused score --------------
# A setting ``{"hybrid": hw, "extra": {...}, "texts": variant}`` ranks every turn by the preset's
# raw fused score (``store.scan``: the z-sum before the (0, 1) map) plus the extra signals below,
# each either z-normalised over the conversation's turns (session signals, recency) or added in
# z units (date and entity matches). ``texts`` ("resolved", "dated", "both") rebuilds the store
# with date words appended to the lexical text of the turns (the vectors stay the plain turn's).

_DAY = 86400.0
_REL = re.compile(
    r"\b(yesterday|today|tonight|this morning|this afternoon|this evening|last night|"
    r"tomorrow|last weekend|this weekend|last week|this week|next week|last month|this month|"
    r"next month|last year|this year|next year|"
    r"last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?:a|one|two|three|four|five|six|a few|few|a couple of|couple of|couple)\s+"
    r"(?:days?|weeks?|months?|years?)\s+ago)\b", re.IGNORECASE)
_NUM = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a few": 3,
        "few": 3, "a couple of": 2, "couple of": 2, "couple": 2}
_WEEKDAYS = ("monday tuesday wednesday thursday friday saturday sunday").split()


def _utc(ts: float):
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


def _day_words(ts: float) -> str:
    return date_words([ts])[0]          # the words HybridWeights.dates indexes


def _month_words(ts: float) -> str:
    return _day_words(ts).split(" ", 1)[1]


def _resolve_relative(text: str, when: float) -> list:
    """``[(start, end, words)]``: each relative time expression of ``text`` resolved against
    ``when`` (Unix s) to an absolute span and its words ("7 may 2023", "may 2023")."""
    out = []
    for m in _REL.finditer(text):
        e = " ".join(m.group(1).casefold().split())
        d = _utc(when)
        if e in ("today", "tonight", "this morning", "this afternoon", "this evening"):
            t0, t1, w = when, when, _day_words(when)
        elif e in ("yesterday", "last night"):
            t0 = t1 = when - _DAY
            w = _day_words(t0)
        elif e == "tomorrow":
            t0 = t1 = when + _DAY
            w = _day_words(t0)
        elif e.startswith("last ") and e[5:] in _WEEKDAYS:
            back = (d.weekday() - _WEEKDAYS.index(e[5:])) % 7 or 7
            t0 = t1 = when - back * _DAY
            w = _day_words(t0)
        elif e in ("last week", "last weekend"):
            t0, t1 = when - 9 * _DAY, when - 2 * _DAY
            w = f"{_day_words(t0)} {_month_words(t1)}"
        elif e in ("this week", "this weekend"):
            t0, t1 = when - 6 * _DAY, when
            w = _day_words(when)
        elif e == "next week":
            t0, t1 = when + 5 * _DAY, when + 12 * _DAY
            w = _month_words(t0)
        elif e.endswith(("month", "year")):
            step = {"last": -1, "this": 0, "next": 1}[e.split()[0]]
            if e.endswith("month"):
                mo = d.month - 1 + step
                y, mo = d.year + mo // 12, mo % 12
                t0, t1 = when + step * 30 * _DAY, when + step * 30 * _DAY
                w = f"{_MONTHS[mo]} {y}"
            else:
                t0 = t1 = when + step * 365 * _DAY
                w = str(d.year + step)
        else:                                              # "<n> <unit>s ago"
            parts = e.rsplit(" ", 2)
            n, unit = _NUM.get(parts[0], 1), parts[1].rstrip("s")
            span = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * _DAY
            t0 = t1 = when - n * span
            w = _day_words(t0) if unit in ("day", "week") else (
                _month_words(t0) if unit == "month" else str(_utc(t0).year))
        out.append((t0, t1, w))
    return out


_QDATE_DAY = re.compile(
    r"\b(?:(\d{1,2})\s+(%s),?\s+(\d{4})|(%s)\s+(\d{1,2}),?\s+(\d{4}))\b"
    % ("|".join(_MONTHS), "|".join(_MONTHS)), re.IGNORECASE)
_QDATE_MONTH = re.compile(r"\b(?:in|during|of|early|late|mid)\s+(%s)(?:,?\s+(\d{4}))?\b"
                          % "|".join(_MONTHS), re.IGNORECASE)
_QDATE_YEAR = re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d\d)\b", re.IGNORECASE)


def _question_span(question: str):
    """The absolute time span a question names, ``(start, end)`` Unix s, or None: a day
    ("on 13 October, 2023" / "October 13, 2023": that day to 10 days after, when it is talked
    about), a month ("in June", "in July 2023": that month and 10 days after), a year."""
    import calendar
    import datetime as dt

    def ts(y, mo, day):
        return dt.datetime(y, mo, day, tzinfo=dt.timezone.utc).timestamp()
    m = _QDATE_DAY.search(question)
    if m:
        if m.group(1):
            day, mon, y = int(m.group(1)), m.group(2), int(m.group(3))
        else:
            mon, day, y = m.group(4), int(m.group(5)), int(m.group(6))
        mo = _MONTHS.index(mon.casefold()) + 1
        try:
            t = ts(y, mo, day)
        except ValueError:
            return None
        return t - _DAY, t + 10 * _DAY
    m = _QDATE_MONTH.search(question)
    if m:
        mo = _MONTHS.index(m.group(1).casefold()) + 1
        y = int(m.group(2)) if m.group(2) else None
        return ("month", mo, y)
    m = _QDATE_YEAR.search(question)
    if m:
        y = int(m.group(1))
        return ts(y, 1, 1), ts(y + 1, 1, 1)
    return None


def _in_span(span, times: np.ndarray) -> np.ndarray:
    """bool per time: inside the span (a month span matches any year unless one is named;
    10 days of grace after its end, as events are talked about after they happen)."""
    if span is None:
        return np.zeros(times.shape, bool)
    if span[0] == "month":
        _, mo, y = span
        out = np.zeros(times.shape, bool)
        for i, t in enumerate(times.tolist()):
            for back in (0.0, 10 * _DAY):
                d = _utc(t - back)
                if d.month == mo and (y is None or d.year == y):
                    out[i] = True
        return out
    return (times >= span[0]) & (times <= span[1])


_RECENT = re.compile(r"\b(recent|recently|latest|last time|now|currently|current|lately)\b",
                     re.IGNORECASE)
_NOT_PLURAL = frozenset("is was does has his this us its hers yours ours theirs as always perhaps "
                        "whereas news across various".split())


def _list_cue(question: str) -> bool:
    """A question asking for several things ("What books has John read?", "What are some
    ..."): "some"/"ways"/"kinds"/"types", or a plural-looking word within three words after
    what/which (before its verb). Catches 72 of 172 multi-hop questions, 41 of 480 single-hop."""
    t = re.findall(r"[a-z]+", question.lower())
    if {"some", "ways", "kinds", "types"} & set(t):
        return True
    for i, w in enumerate(t):
        if w in ("what", "which"):
            for x in t[i + 1:i + 4]:
                if x in ("is", "was", "did", "does", "do", "has", "had", "are", "were"):
                    break
                if x.endswith("s") and len(x) > 3 and x not in _NOT_PLURAL \
                        and not x.endswith("ss"):
                    return True
            break
    return False


_CAP = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-zA-Z'-]{2,})")


def _lexical_variant(conv, variant: str) -> list:
    """Turn texts with date words appended: ``resolved`` (each relative expression's absolute
    date), ``dated`` (the session's date), ``both``."""
    out = []
    for t in conv.turns:
        add = []
        if variant in ("resolved", "both"):
            add += [w for _, _, w in _resolve_relative(t.text, t.created_at)]
        if variant in ("dated", "both"):
            add.append(_day_words(conv.session_dates[t.session]))
        if variant == "dated-month":
            add.append(_month_words(conv.session_dates[t.session]))
        out.append(f"{t.text} ({'; '.join(add)})" if add else t.text)
    return out


def _variant_store(conv, kind: str, vecs: np.ndarray, texts: list, emb):
    """:func:`bench.quality.locomo_store` with other lexical texts, the same vectors."""
    from bench.quality import Clock, _memcore_store

    clock = Clock()
    store = _memcore_store(kind, "hybrid" if kind == "minilm-int8" else "no_model", clock, emb)
    ns = ("locomo", conv.sample_id)
    for t, text, v in zip(conv.turns, texts, vecs):
        clock.now = t.created_at
        store.put(ns, t.dia_id, text, vector=v, metadata={"speaker": t.speaker,
                                                         "episode": t.session})
    clock.now = conv.end_time
    return store, ns


def _z(x: np.ndarray) -> np.ndarray:
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


class _Extras:
    """One conversation's per-turn context for the extra signals."""

    def __init__(self, conv, vecs: np.ndarray, stem, embed=None):
        from memcore.recall.lexical import LexicalIndex

        turns = conv.turns
        self.turns, self.embed, self.window_vecs = turns, embed, {}
        self.n = len(turns)
        self.keys = [t.dia_id for t in turns]
        self.index = {k: i for i, k in enumerate(self.keys)}
        sessions = sorted({t.session for t in turns})
        sid = {s: j for j, s in enumerate(sessions)}
        self.sess = np.array([sid[t.session] for t in turns], np.int64)
        docs = [" ".join(stem(f"{t.speaker}: {t.text}") for t in turns if t.session == s)
                for s in sessions]
        self.slex = LexicalIndex(1.2, 0.75)
        self.slex.add_many(list(range(len(sessions))), docs)
        self.stem = stem
        mean = np.stack([vecs[self.sess == j].mean(axis=0) for j in range(len(sessions))])
        self.svec = mean / np.linalg.norm(mean, axis=1, keepdims=True)
        self.created = np.array([t.created_at for t in turns], np.float64)
        self.session_time = np.array([conv.session_dates[t.session] for t in turns], np.float64)
        self.resolved = [_resolve_relative(t.text, t.created_at) for t in turns]
        names = {t.speaker.casefold() for t in turns}
        caps = [{w.casefold() for w in _CAP.findall(t.text)} - names for t in turns]
        df: dict = {}
        for c in caps:
            for w in c:
                df[w] = df.get(w, 0) + 1
        self.caps, self.cap_df = caps, df

    def signal(self, name: str, arg, question: str, prepared, v: np.ndarray,
               base: np.ndarray) -> np.ndarray:
        if name == "session_bm25":
            s = self.slex.scores(self.stem(prepared.lexical))[:len(self.svec)]
            return arg * _z(s[self.sess])
        if name == "session_dense":
            return arg * _z((self.svec @ v)[self.sess])
        if name == "session_top":      # a session's mean of its best 3 turns' fused scores
            top = np.array([np.sort(base[self.sess == j])[-3:].mean()
                            for j in range(len(self.svec))])
            return arg * _z(top[self.sess])
        if name == "date":             # turns of a session (or resolved date) the span names
            span = _question_span(question)
            if span is None:
                return np.zeros(self.n)
            hit = _in_span(span, self.session_time)
            for i, res in enumerate(self.resolved):
                if res and not hit[i]:
                    hit[i] = _in_span(span, np.array([r[0] for r in res])).any()
            return arg * hit
        if name == "window":           # the question against an embedding of the turn's window
            w, back, ahead = arg        # (the turn and its neighbours in its session, one text)
            if (back, ahead) not in self.window_vecs:
                texts = []
                for i, t in enumerate(self.turns):
                    part = [u for u in self.turns[max(0, i - back):i + ahead + 1]
                            if u.session == t.session]
                    texts.append(" ".join(f"{u.speaker}: {u.text}" for u in part))
                self.window_vecs[(back, ahead)] = np.asarray(self.embed(texts))
            return w * _z(self.window_vecs[(back, ahead)] @ v)
        if name == "recency":
            if not _RECENT.search(question):
                return np.zeros(self.n)
            return arg * _z(self.created)
        if name == "entity":           # one hop from the top m hits over rare capitalised words
            w, m, max_df = arg
            top = np.argsort(-base, kind="stable")[:m]
            rare = {e for i in top for e in self.caps[i] if self.cap_df[e] <= max_df}
            if not rare:
                return np.zeros(self.n)
            return w * np.array([bool(c & rare) for c in self.caps], np.float64)
        raise ValueError(name)


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
        extras, bases = None, {}
        for name, st in settings.items():
            if not (st.get("extra") or st.get("texts")):
                continue
            if extras is None:
                from memcore.recall.words import stemmer as _stemmer

                extras = _Extras(conv, vecs, _stemmer(), lambda texts: emb(kind, texts))
                preps = [store.prepare(ns, q.question) for q in qs]
            tv = st.get("texts")
            if (tv, st["hybrid"]) not in bases:
                st_, ns_ = (store, ns) if tv is None else _variant_store(
                    conv, kind, vecs, _lexical_variant(conv, tv), emb)
                got = []
                for q, v in zip(qs, qvecs):
                    rq = st_.resolve(ns_, q.question, top_k=extras.n, threshold=-1.0,
                                     touch=False, query_vector=v, hybrid=st["hybrid"])
                    raw = np.full(extras.n, -np.inf)
                    for h in st_.scan(rq):
                        raw[extras.index[h.key]] = h.score
                    got.append(raw)
                bases[(tv, st["hybrid"])] = got
        for name, st in settings.items():
            rows = []
            if st.get("extra") or st.get("texts"):
                for i, (q, v) in enumerate(zip(qs, qvecs)):
                    base = bases[(st.get("texts"), st["hybrid"])][i]
                    total = base.copy()
                    for sig, arg in (st.get("extra") or {}).items():
                        total += extras.signal(sig, arg, q.question, preps[i], v, base)
                    ranked = [extras.keys[j] for j in np.argsort(-total, kind="stable")[:top_k]]
                    rows.append(tuple(recall_accuracy(ranked, q.evidence, k) for k in KS)
                                + (q.category,))
                out[name][conv.sample_id] = rows
                continue
            for q, v in zip(qs, forms[st["qform"]] if st.get("qform") else qvecs):
                hw = st["hybrid"]
                if st.get("listcue") and _list_cue(q.question):
                    lam, r = st["listcue"]
                    hw = replace(hw, diversity=lam, diversity_window=r)
                hits = store.search(ns, q.question, top_k=top_k, threshold=-1.0, touch=False,
                                    query_vector=v, hybrid=hw)
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


def candidates(grid: str, kind: str, dates: bool = True) -> dict:
    """Named candidate settings: ``default`` (the preset alone), ``weights`` (one field at a
    time around the preset), ``prf`` (Rocchio feedback strengths), ``full`` (both)."""
    from memcore.recall.weights import HybridWeights

    base = HybridWeights.hybrid() if kind == "minilm-int8" else HybridWeights.no_model()
    base = replace(base, dates=dates)
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
    if grid == "session":   # issue 18 idea 1: the question against each session as a whole
        out["preset rescored"] = {"hybrid": base, "extra": {"session_bm25": 0.0}}
        for w in (0.1, 0.25, 0.5):
            out[f"session top3 {w}"] = {"hybrid": base, "extra": {"session_top": w}}
        for w in (0.1, 0.15, 0.25, 0.5, 1.0):
            out[f"session bm25 {w}"] = {"hybrid": base, "extra": {"session_bm25": w}}
            out[f"session dense {w}"] = {"hybrid": base, "extra": {"session_dense": w}}
            out[f"session both {w}"] = {"hybrid": base, "extra": {"session_bm25": w / 2,
                                                                 "session_dense": w / 2}}
    if grid == "temporal":  # idea 2: relative dates resolved (lexical) / question dates matched
        plain = replace(base, dates=False)    # the harness's date words, not the library's
        out = {"preset dates=False": {"hybrid": plain}}
        for tv in ("resolved", "dated", "both"):
            out[f"texts {tv}"] = {"hybrid": plain, "texts": tv}
        for w in (0.25, 0.5, 1.0, 2.0):
            out[f"date match {w}"] = {"hybrid": plain, "extra": {"date": w}}
        out["texts dated-month"] = {"hybrid": plain, "texts": "dated-month"}
        for tv in ("resolved", "dated"):
            for w in (0.5, 1.0):
                out[f"texts {tv} + date match {w}"] = {"hybrid": plain, "texts": tv,
                                                       "extra": {"date": w}}
    if grid == "dates":     # the library's HybridWeights.dates (created_at day words in BM25)
        out["dates=False"] = {"hybrid": replace(base, dates=False)}
        out["dates + resolved relative dates"] = {"hybrid": base, "texts": "resolved"}
    if grid == "window":    # a second vector per memory: its window's text embedded as one
        for back, ahead in ((1, 0), (2, 0), (1, 1)):
            for w in (0.25, 0.5, 1.0):
                out[f"window -{back}/+{ahead} w={w}"] = {"hybrid": base,
                                                          "extra": {"window": (w, back, ahead)}}
    if grid == "listcue":   # episode diversity only for questions asking for several things
        for lam in (0.5, 1.0, 1.5, 2.0):
            for r in (1, 2):
                out[f"list cue: diversity={lam} window={r}"] = {"hybrid": base,
                                                                 "listcue": (lam, r)}
    if grid == "recency":   # idea 3: recency cue words raise a z(created_at) signal
        for w in (0.1, 0.25, 0.5, 1.0):
            out[f"recency cue {w}"] = {"hybrid": base, "extra": {"recency": w}}
    if grid == "entity":    # idea 4: one hop over rare capitalised words of the top hits
        for w in (0.25, 0.5, 1.0):
            for m in (3, 5):
                out[f"entity w={w} m={m}"] = {"hybrid": base, "extra": {"entity": (w, m, 5)}}
    if grid == "entity2":   # idea 4, stronger and less rare links
        for w in (1.0, 1.5, 2.0):
            for df in (10, 20):
                out[f"entity w={w} m=5 df<={df}"] = {"hybrid": base,
                                                     "extra": {"entity": (w, 5, df)}}
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
    p.add_argument("--grid", default="weights", choices=("default", "weights", "prf", "full", "diverse", "diversity", "rm3", "qform", "combo",
                            "session", "temporal", "recency", "entity", "entity2", "dates", "window", "listcue"))
    p.add_argument("--dates", default="on", choices=("on", "off"),
                   help="HybridWeights.dates of the preset every candidate starts from")
    p.add_argument("--data", default=None)
    p.add_argument("--json", default=None, help="write the per-question rows here")
    args = p.parse_args(argv)
    convs = locomo_conversations(args.data)
    emb = Embeddings(1)
    settings = candidates(args.grid, args.kind, args.dates == "on")
    t0 = time.perf_counter()
    res = evaluate(convs, args.kind, settings, emb)
    loo = loo_select(res)
    summ = summary(res)
    print(f"# LOO over {len(convs)} conversations, {args.kind}, grid {args.grid}, dates "
          f"{args.dates} "
          f"({len(settings)} candidates, {time.perf_counter() - t0:.0f} s)\n")
    print("| candidate | R@5 (all six) | R@10 (all six) | multi-hop R@10 | temporal R@10 | "
          "open-domain R@10 |")
    print("|:---|---:|---:|---:|---:|---:|")
    for name, s in sorted(summ.items(), key=lambda kv: -kv[1]["R@10"]):
        print(f"| {name} | {s['R@5']:.3f} | {s['R@10']:.3f} | {s.get('c1', (0, 0))[1]:.3f} | "
              f"{s.get('c2', (0, 0))[1]:.3f} | {s.get('c3', (0, 0))[1]:.3f} |")
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
