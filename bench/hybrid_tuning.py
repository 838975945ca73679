"""Research script for issue 9: hybrid recall (BM25 + dense + episodic context) on LoCoMo dev.

Reproduces the prototype's ablations with memcore's own pieces (LexicalIndex BM25 over the
shared Unicode tokenisation, MiniLMEmbedder int8 or HashingEmbedder, DefaultQueryPreparer),
tunes the fusion weights on the six LoCoMo dev conversations only, and checks the same defaults
on BEIR SciFact (no episodes there). Embeddings go through the bench cache
(``bench/results/cache``, gitignored). Data is read by path (``--data`` / ``$MEMCORE_SHARED``).

    python -m bench.hybrid_tuning locomo [--encoder minilm-int8|hashing] [--grid]
    python -m bench.hybrid_tuning scifact
    python -m bench.hybrid_tuning backend [--n 100000]

Signals per memory ``i`` of an episode (session), scored per query and z-normalised over the
namespace's memories (``z = (x - mean) / std``, 0 when std is 0):

- ``dense``: ``q . (alpha * e_i + (1 - alpha) * mean(e_{i-1}, e_i, e_{i+1}))``, the one
  combined matrix (neighbours within the same episode only);
- ``lex``: BM25 of the memory's text; ``lex_ctx``: BM25 of the +-2 window's text;
- ``speaker``: 1 when the query names the memory's speaker (a boost, not z-normalised).

``score = w_dense * z(dense) + w_lex * z(lex) + w_lex_ctx * z(lex_ctx) + w_speaker * speaker``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from bench.datasets import LOCOMO_CATEGORIES, cached_encode, locomo_conversations, scifact
from bench.metrics import ndcg_at_k, recall_accuracy
from memcore import _text
from memcore.hybrid import _stemmer
from memcore.lexical import LexicalIndex
from memcore.query_prep import DefaultQueryPreparer, identity_preparer


@dataclass(frozen=True)
class Config:
    """Fusion parameters; the defaults are the values tuned on LoCoMo dev (``--grid``)."""

    w_dense: float = 1.5
    w_lex: float = 0.25
    w_lex_ctx: float = 0.75
    w_speaker: float = 2.0
    alpha: float = 0.4      # share of the memory's own embedding in the combined dense matrix
    b: float = 0.5
    k1: float = 0.6
    lex_window: int = 2
    dense_window: int = 2
    lex_prep: bool = True
    names: str = "first_person"
    dense_text: str = "raw"      # "memory": "speaker: text"; "raw": the turn's text alone
    lex_text: str = "memory"
    self_in: bool = True         # the dense window mean includes the memory itself
    stem: bool = True            # Snowball-stemmed BM25 (memcore.hybrid: HybridWeights.stem)


# ------------------------------------------------------------------------------ encoders
def make_encoder(kind: str):
    """``encode(texts) -> (n, 384) float32`` through the bench cache (MiniLM) or direct."""
    if kind == "minilm-int8":
        from memcore.embedders import MiniLMEmbedder

        emb = MiniLMEmbedder(variant="packaged", intra_op_num_threads=1)
        state: dict = {}

        def encode(texts):
            def run(batch):
                if "m" not in state:
                    state["m"] = emb.load()
                return state["m"].encode(batch, batch_size=16)
            return cached_encode(emb.name, run, list(texts), progress=False)
        return encode
    if kind == "hashing":
        from memcore.embedders import HashingEmbedder

        emb = HashingEmbedder(dim=384)
        return lambda texts: emb.encode(list(texts))
    raise ValueError(f"unknown encoder {kind!r}")


# ------------------------------------------------------------------------------ signals
def window_means(vecs: np.ndarray, episodes: list, radius: int, self_in: bool = True
                 ) -> np.ndarray:
    """Mean of each row's +-radius neighbours within its episode (itself included or not;
    a row without neighbours uses itself)."""
    out = np.empty_like(vecs)
    n = len(episodes)
    for i in range(n):
        rows = [j for j in range(max(0, i - radius), min(n, i + radius + 1))
                if episodes[j] == episodes[i] and (self_in or j != i)]
        out[i] = vecs[rows].mean(axis=0) if rows else vecs[i]
    return out


def window_tokens(hashes, offsets, counts, episodes: list, radius: int) -> list:
    """Token hashes of each row's +-radius window (itself included) within its episode."""
    n = len(episodes)
    out = []
    for i in range(n):
        parts = [hashes[offsets[j]:offsets[j] + counts[j]] for j in range(max(0, i - radius),
                 min(n, i + radius + 1)) if episodes[j] == episodes[i]]
        out.append(np.concatenate(parts))
    return out


def bm25_matrix(doc_tokens: list, queries: list, k1: float, b: float) -> np.ndarray:
    idx = LexicalIndex(k1=k1, b=b)
    for i, toks in enumerate(doc_tokens):
        idx.add_tokens(i, toks)
    out = np.zeros((len(queries), len(doc_tokens)))
    for q, text in enumerate(queries):
        h, _, c = _text.token_hashes([text], parallel=False)
        idx.scores_tokens(h[:c[0]], out[q])
    return out


def znorm(x: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=1, keepdims=True)
    sd = x.std(axis=1, keepdims=True)
    return np.where(sd > 0, (x - mu) / np.where(sd > 0, sd, 1.0), 0.0)


class Episode:
    """One conversation's signals for every question, cached per (b, k1, prep, window) choice."""

    def __init__(self, texts, speakers, episodes, questions, encode, raw=None):
        self.texts, self.speakers, self.episodes = texts, speakers, episodes
        self.raw = raw if raw is not None else texts
        self.questions = questions
        self.encode = encode
        self._E: dict = {}
        self._h = {"memory": _text.token_hashes(texts), "raw": _text.token_hashes(self.raw)}
        stem = _stemmer()
        self._h_stem = {"memory": _text.token_hashes([stem(t) for t in texts]),
                        "raw": _text.token_hashes([stem(t) for t in self.raw])}
        self.names = sorted({s for s in speakers if s})
        self._cache: dict = {}

    def get(self, what, cfg: Config):
        if what == "dense":
            key = ("dense", cfg.names, cfg.dense_window, cfg.alpha, cfg.dense_text, cfg.self_in)
            if key not in self._cache:
                prep = DefaultQueryPreparer(names=cfg.names)
                qv = self.encode([prep(q, self.names).dense for q in self.questions])
                if cfg.dense_text not in self._E:
                    self._E[cfg.dense_text] = self.encode(
                        self.texts if cfg.dense_text == "memory" else self.raw)
                E = self._E[cfg.dense_text]
                W = window_means(E, self.episodes, cfg.dense_window, cfg.self_in) \
                    if cfg.dense_window else E
                self._cache[key] = qv @ (cfg.alpha * E + (1 - cfg.alpha) * W).T
            return self._cache[key]
        if what in ("lex", "lex_ctx"):
            radius = cfg.lex_window if what == "lex_ctx" else 0
            key = (what, cfg.k1, cfg.b, cfg.lex_prep, radius, cfg.lex_text, cfg.stem)
            if key not in self._cache:
                prep = DefaultQueryPreparer() if cfg.lex_prep else identity_preparer
                qs = [prep(q, self.names).lexical for q in self.questions]
                h = self._h_stem if cfg.stem else self._h
                if cfg.stem:
                    qs = [_stemmer()(q) for q in qs]
                docs = window_tokens(*h[cfg.lex_text], self.episodes, radius)
                self._cache[key] = bm25_matrix(docs, qs, cfg.k1, cfg.b)
            return self._cache[key]
        if what == "speaker":
            key = ("speaker",)
            if key not in self._cache:
                prep = DefaultQueryPreparer()
                m = np.zeros((len(self.questions), len(self.texts)))
                low = [s.casefold() for s in self.speakers]
                for q, text in enumerate(self.questions):
                    ents = prep(text, self.names).entities
                    m[q] = [s in ents for s in low]
                self._cache[key] = m
            return self._cache[key]
        raise KeyError(what)

    def scores(self, cfg: Config) -> np.ndarray:
        total = np.zeros((len(self.questions), len(self.texts)))
        if cfg.w_dense:
            total += cfg.w_dense * znorm(self.get("dense", cfg))
        if cfg.w_lex:
            total += cfg.w_lex * znorm(self.get("lex", cfg))
        if cfg.w_lex_ctx:
            total += cfg.w_lex_ctx * znorm(self.get("lex_ctx", cfg))
        if cfg.w_speaker:
            total += cfg.w_speaker * self.get("speaker", cfg)
        return total


# ------------------------------------------------------------------------------ LoCoMo
def load_locomo(data, encode):
    out = []
    for conv in locomo_conversations(data):
        qs = [q for q in conv.questions if q.evidence]
        ep = Episode([t.memory_text for t in conv.turns], [t.speaker for t in conv.turns],
                     [t.session for t in conv.turns], [q.question for q in qs], encode,
                     raw=[t.text for t in conv.turns])
        ep.ids = [t.dia_id for t in conv.turns]
        ep.qs = qs
        out.append(ep)
    return out


def evaluate(eps, cfg: Config, ks=(5, 10)) -> dict:
    acc = defaultdict(lambda: defaultdict(list))
    for ep in eps:
        s = ep.scores(cfg)
        # stable: ties by lower row, like the kernel
        order = np.argsort(-s, axis=1, kind="stable")[:, :max(ks)]
        for qi, q in enumerate(ep.qs):
            ranked = [ep.ids[j] for j in order[qi]]
            for k in ks:
                r = recall_accuracy(ranked, q.evidence, k)
                acc["all"][k].append(r)
                acc[q.category][k].append(r)
    return {c: {k: float(np.mean(v)) for k, v in d.items()} for c, d in acc.items()}


def fmt_row(name, res, ks=(5, 10)):
    cells = [f"{res['all'][k]:.3f}" for k in ks]
    for c in sorted(LOCOMO_CATEGORIES):
        cells.append("/".join(f"{res[c][k]:.3f}" for k in ks))
    return f"| {name} | " + " | ".join(cells) + " |"


HEADER = ("| run | R@5 | R@10 | " + " | ".join(f"{LOCOMO_CATEGORIES[c]} R@5/R@10"
                                             for c in sorted(LOCOMO_CATEGORIES)) + " |\n"
          "|---|---|---|" + "---|" * len(LOCOMO_CATEGORIES))

#: Rows reported next to the tuned hybrid (same run, same data).
BASELINES = {
    "similarity (dense only)": Config(w_lex=0, w_lex_ctx=0, w_speaker=0, alpha=1.0,
                                      dense_window=0, names="keep"),
    "bm25 (k1 1.2, b 0.75, raw question)": Config(w_dense=0, w_lex=1, w_lex_ctx=0, w_speaker=0,
                                                 k1=1.2, b=0.75, lex_prep=False, stem=False),
}


def grid(eps, base: Config) -> Config:
    """Coordinate search over the fusion parameters, maximising mean of R@5 and R@10."""
    def obj(cfg):
        r = evaluate(eps, cfg)["all"]
        return (r[5] + r[10]) / 2
    best, best_v = base, obj(base)
    axes = {
        "b": [0.1, 0.2, 0.3, 0.5, 0.75],
        "k1": [0.6, 0.9, 1.2, 1.6, 2.0],
        "alpha": [0.3, 0.4, 0.5, 0.7, 1.0],
        "w_lex": [0.0, 0.25, 0.5, 0.75, 1.0],
        "w_lex_ctx": [0.0, 0.25, 0.5, 0.75, 1.0],
        "w_speaker": [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0],
        "w_dense": [0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
        "names": ["first_person", "remove"],
        "dense_text": ["memory", "raw"],
        "lex_text": ["memory", "raw"],
        "lex_window": [1, 2, 3],
        "dense_window": [0, 1, 2],
        "self_in": [True, False],
        "stem": [True, False],
    }
    for _ in range(2):
        for ax, vals in axes.items():
            for v in vals:
                cfg = replace(best, **{ax: v})
                val = obj(cfg)
                if val > best_v + 1e-9:
                    best, best_v = cfg, val
            print(f"  {ax}: {getattr(best, ax)} -> {best_v:.4f}", file=sys.stderr)
    return best


def run_locomo(args) -> int:
    t0 = time.perf_counter()
    enc = make_encoder(args.encoder)
    eps = load_locomo(args.data, enc)
    cfg = Config(**json.loads(args.config)) if args.config else Config()
    if args.grid:
        cfg = grid(eps, cfg)
    print(f"LoCoMo dev ({sum(len(e.qs) for e in eps)} questions), encoder {args.encoder}")
    print(HEADER)
    for name, c in BASELINES.items():
        print(fmt_row(name, evaluate(eps, c)))
    abl = {
        "hybrid (tuned)": cfg,
        "  - no BM25": replace(cfg, w_lex=0, w_lex_ctx=0),
        "  - no dense": replace(cfg, w_dense=0),
        "  - no context": replace(cfg, w_lex_ctx=0, alpha=1.0),
        "  - no query prep": replace(cfg, lex_prep=False, names="keep"),
        "  - no speaker boost": replace(cfg, w_speaker=0),
        "  - b 0.75": replace(cfg, b=0.75),
        "  - no stemming": replace(cfg, stem=False),
    }
    for name, c in abl.items():
        print(fmt_row(name, evaluate(eps, c)))
    print(f"config: {json.dumps(cfg.__dict__)}  ({time.perf_counter() - t0:.0f} s)")
    return 0


# ------------------------------------------------------------------------------ SciFact
def run_scifact(args) -> int:
    ds = scifact(args.data)
    cfg = Config(**json.loads(args.config)) if args.config else Config()
    enc = make_encoder(args.encoder)
    E = enc(list(ds.corpus_texts))
    Q = enc(list(ds.query_texts))
    dense = Q @ E.T
    h = _text.token_hashes(list(ds.corpus_texts))
    docs = [h[0][h[1][i]:h[1][i] + h[2][i]] for i in range(len(ds.corpus_texts))]
    prep = DefaultQueryPreparer()
    rows = {
        "similarity (dense only)": znorm(dense),
        "bm25 (k1 1.2, b 0.75, raw query)": bm25_matrix(docs, list(ds.query_texts), 1.2, 0.75),
    }
    qs = [prep(q, ()).lexical for q in ds.query_texts]
    if cfg.stem:
        stem = _stemmer()
        hs = _text.token_hashes([stem(t) for t in ds.corpus_texts])
        docs = [hs[0][hs[1][i]:hs[1][i] + hs[2][i]] for i in range(len(ds.corpus_texts))]
        qs = [stem(q) for q in qs]
    lex = bm25_matrix(docs, qs, cfg.k1, cfg.b)
    # No episodes: the context window of a document is the document itself (lex_ctx == lex,
    # the combined dense matrix == E), and no query names a speaker.
    rows["hybrid (LoCoMo-tuned defaults)"] = (cfg.w_dense * znorm(dense)
                                              + (cfg.w_lex + cfg.w_lex_ctx) * znorm(lex))
    print(f"SciFact test ({len(ds.query_ids)} queries), encoder {args.encoder}")
    print("| run | nDCG@10 |\n|---|---|")
    for name, s in rows.items():
        order = np.argsort(-s, axis=1, kind="stable")[:, :10]
        nd = np.mean([ndcg_at_k([ds.corpus_ids[j] for j in order[i]], ds.qrels[qid], 10)
                      for i, qid in enumerate(ds.query_ids)])
        print(f"| {name} | {nd:.3f} |")
    return 0


# ------------------------------------------------------------------------------ backend
def run_backend(args) -> int:
    """Own blocked postings vs SQLite FTS5: incremental put and query at n memories."""
    import sqlite3

    from bench.datasets import tick_memories

    n = args.n
    texts = tick_memories(n, data=args.data)
    queries = [q.question for c in locomo_conversations(args.data) for q in c.questions][:200]
    prep = DefaultQueryPreparer()
    queries = [prep(q, ()).lexical for q in queries]
    h, off, cnt = _text.token_hashes(texts)
    toks = [h[off[i]:off[i] + cnt[i]] for i in range(n)]
    # own index
    idx = LexicalIndex(b=0.2)
    t = time.perf_counter()
    for i in range(n - 1000):
        idx.add_tokens(i, toks[i])
    build = time.perf_counter() - t
    put = []
    for i in range(n - 1000, n):
        t = time.perf_counter_ns()
        idx.add_tokens(i, toks[i])
        put.append(time.perf_counter_ns() - t)
    out = np.empty(n)
    qt = []
    for q in queries:
        qh, _, qc = _text.token_hashes([q], parallel=False)
        t = time.perf_counter_ns()
        idx.scores_tokens(qh[:qc[0]], out)
        qt.append(time.perf_counter_ns() - t)
    t = time.perf_counter()
    LexicalIndex(b=0.2).add_many(range(n), texts)
    rebuild = time.perf_counter() - t
    print(f"own postings: bulk {build:.2f} s for {n - 1000}, rebuild from texts {rebuild:.2f} s, "
          f"put p50 {np.median(put) / 1e3:.1f} us, query (all rows scored) p50 "
          f"{np.median(qt) / 1e6:.2f} ms")
    # FTS5 over the same tokens (hex token ids, so tokenisation is identical)
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='ascii')")
    words = [" ".join(format(x, "x") for x in tk.tolist()) for tk in toks]
    t = time.perf_counter()
    con.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)",
                    ((i, words[i]) for i in range(n - 1000)))
    con.commit()
    fbuild = time.perf_counter() - t
    fput = []
    for i in range(n - 1000, n):
        t = time.perf_counter_ns()
        con.execute("INSERT INTO t(rowid, body) VALUES (?, ?)", (i, words[i]))
        con.commit()
        fput.append(time.perf_counter_ns() - t)
    fq = []
    for q in queries:
        qh, _, qc = _text.token_hashes([q], parallel=False)
        terms = " OR ".join(f'"{x:x}"' for x in qh[:qc[0]].tolist())
        if not terms:
            continue
        t = time.perf_counter_ns()
        res = con.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ?", (terms,)).fetchall()
        dense = np.zeros(n)
        if res:
            r = np.array(res)
            dense[r[:, 0].astype(np.int64)] = -r[:, 1]
        fq.append(time.perf_counter_ns() - t)
    print(f"sqlite fts5: bulk {fbuild:.2f} s, put+commit p50 {np.median(fput) / 1e3:.1f} us, "
          f"query (matching rows, bm25() fixed k1=1.2 b=0.75) p50 {np.median(fq) / 1e6:.2f} ms")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hybrid_tuning", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("locomo", "scifact", "backend"):
        s = sub.add_parser(name)
        s.add_argument("--data", default=None, help="shared data folder (default ../shared)")
        s.add_argument("--encoder", default="minilm-int8", choices=("minilm-int8", "hashing"))
        s.add_argument("--config", default=None, help="JSON of Config fields to override")
        s.add_argument("--grid", action="store_true", help="tune by coordinate search")
        s.add_argument("--n", type=int, default=100_000)
    args = p.parse_args(argv)
    return {"locomo": run_locomo, "scifact": run_scifact, "backend": run_backend}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
