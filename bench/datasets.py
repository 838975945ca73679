"""Benchmark datasets, read from the shared data folder by path (never copied into the repo).

Seeded and ``lru_cache``d. The folder is ``--data`` / ``$MEMCORE_SHARED`` / ``<repo>/../shared``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from memcore import evaldata

# --- issue 7: benchmark harness data (LoCoMo with dates, SciFact, tick memories, embedding cache) ---
# Everything below reads ../shared by path (``--data`` / $MEMCORE_SHARED); nothing is copied.


_REPO = Path(__file__).resolve().parents[1]


def data_root(data=None) -> Path:
    """The shared data folder: ``data`` if given, else ``$MEMCORE_SHARED``, else ``<repo>/../shared``.

    Raises
    ------
    FileNotFoundError
        If the folder does not exist (benchmarks fail loudly, never skip); the message says
        how to get it (:mod:`memcore.evaldata`).
    """
    path = Path(data) if data is not None else evaldata.data_root(_REPO.parent / "shared")
    if not path.is_dir():
        raise FileNotFoundError(
            f"shared data folder {path} not found; pass --data PATH or set MEMCORE_SHARED "
            f"(`memcore data prepare DIR` downloads the data into DIR)")
    return path


@dataclass(frozen=True)
class LocomoTurn:
    """One dialog turn. ``created_at``: its session's date (Unix seconds, UTC) + ``index`` seconds,
    so turns keep their order within a session."""

    dia_id: str
    speaker: str
    text: str
    session: int
    index: int
    created_at: float

    @property
    def memory_text(self) -> str:
        """What the benchmark stores: ``"speaker: text"``."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class LocomoQuestion:
    question: str
    evidence: tuple  # dia_ids, cleaned; may name ids absent from the conversation (kept: a miss)
    category: int


@dataclass(frozen=True)
class LocomoConversation:
    sample_id: str
    turns: tuple
    questions: tuple
    session_dates: dict  # session number -> Unix seconds

    @property
    def end_time(self) -> float:
        """Unix seconds just after the last turn: the clock while questions are asked."""
        return max(t.created_at for t in self.turns) + 60.0


_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


def parse_locomo_date(text: str) -> float:
    """LoCoMo's session date (``"1:56 pm on 8 May, 2023"``) as Unix seconds, read as UTC.

    Raises
    ------
    ValueError
        If the text does not match the format.

    Examples
    --------
    >>> parse_locomo_date("1:56 pm on 8 May, 2023")
    1683554160.0
    """
    when = dt.datetime.strptime(text.strip(), _DATE_FORMAT)
    return when.replace(tzinfo=dt.timezone.utc).timestamp()


def _clean_evidence(raw) -> tuple:
    # The release has a few malformed ids ("D8:6; D9:17", "D:11:26"): split and normalise them.
    out = []
    for item in raw or []:
        for part in re.split(r"[;,\s]+", str(item)):
            part = part.strip().replace("D:", "D")
            if re.fullmatch(r"D\d+:\d+", part) and part not in out:
                out.append(part)
    return tuple(out)


def _turn_text(turn: dict) -> str:
    # A turn that shares a photo carries the photo's BLIP-2 caption ("blip_caption"): the LoCoMo
    # paper's QA and retrieval runs read it after the turn ("... and shared <caption>."). The
    # "query" field (the image search that found the photo) is generation metadata: left out.
    text = turn["text"]
    caption = str(turn.get("blip_caption") or "").strip()
    return f"{text} and shared {caption}." if caption else text


@lru_cache(maxsize=4)
def locomo_conversations(data=None) -> tuple:
    """LoCoMo dev conversations from ``<data>/data/locomo/locomo_dev.json``.

    Returns
    -------
    tuple of LocomoConversation
        Turns in dialog order with session dates for the injected clock; questions with their
        category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial) and
        cleaned evidence ids.
    """
    path = data_root(data) / "data" / "locomo" / "locomo_dev.json"
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    convs = []
    for sample in raw:
        conv = sample["conversation"]
        sessions = sorted(int(m.group(1)) for k in conv
                          if (m := re.fullmatch(r"session_(\d+)", k)))
        dates, turns = {}, []
        for s in sessions:
            dates[s] = parse_locomo_date(conv[f"session_{s}_date_time"])
            for i, t in enumerate(conv[f"session_{s}"]):
                turns.append(LocomoTurn(t["dia_id"], t["speaker"], _turn_text(t), s, i,
                                        dates[s] + float(i)))
        questions = tuple(
            LocomoQuestion(q["question"], _clean_evidence(q.get("evidence")), int(q["category"]))
            for q in sample["qa"])
        convs.append(LocomoConversation(sample["sample_id"], tuple(turns), questions, dates))
    return tuple(convs)


LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
                     5: "adversarial"}


@dataclass(frozen=True)
class BeirDataset:
    corpus_ids: tuple
    corpus_texts: tuple  # "title text"
    query_ids: tuple
    query_texts: tuple
    qrels: dict  # query id -> {doc id: grade}


@lru_cache(maxsize=2)
def scifact(data=None, split: str = "test") -> BeirDataset:
    """BEIR SciFact from ``<data>/data/scifact/``: corpus ("title text"), the split's queries, qrels.

    Only queries with judgements in ``qrels/<split>.tsv`` are returned, in qrels order.
    """
    root = data_root(data) / "data" / "scifact"
    ids, texts = [], []
    with open(root / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            ids.append(str(doc["_id"]))
            texts.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
    qrels: dict = {}
    with open(root / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            qid, did, grade = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(grade)
    queries = {}
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qids = tuple(q for q in qrels if q in queries)
    return BeirDataset(tuple(ids), tuple(texts), qids, tuple(queries[q] for q in qids),
                       {q: qrels[q] for q in qids})


_NAMES = ("Alex", "Sam", "Jordan", "Priya", "Kenji", "Maria", "Omar", "Lena", "Tomas", "Aisha",
          "Chen", "Nora", "Diego", "Ivy", "Rafael", "Mina")
_OPENERS = ("", "By the way, ", "Earlier today, ", "Last week, ", "Honestly, ", "You know, ",
            "Remember this: ", "Just so you know, ", "Yesterday, ", "Funny thing, ")
_CLOSERS = ("", " Anyway.", " That's all.", " Talk soon!", " What do you think?", " :)",
            " Just saying.", " More later.")


def tick_memories(n: int, seed: int = 0, data=None) -> list:
    """``n`` memory texts from real dialog: LoCoMo turns, repeated with seeded variations.

    Copy 0 is every turn of the dev conversations as ``"speaker: text"``; copy ``r >= 1`` rewrites
    each turn with a speaker name, an opener and a closer drawn from ``default_rng([seed, r])``.
    The list is prefix-stable: ``tick_memories(m)[:k] == tick_memories(k)`` for k <= m, so the
    embedding cache serves every n.

    Examples
    --------
    >>> texts = tick_memories(5000)
    >>> texts[:10] == tick_memories(10)
    True
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base = [(t.speaker, t.text) for c in locomo_conversations(data) for t in c.turns]
    out = []
    copy = 0
    while len(out) < n:
        take = min(len(base), n - len(out))
        if copy == 0:
            out.extend(f"{s}: {t}" for s, t in base[:take])
        else:
            rng = np.random.default_rng([seed, copy])
            names = rng.integers(len(_NAMES), size=len(base))
            opens = rng.integers(len(_OPENERS), size=len(base))
            closes = rng.integers(len(_CLOSERS), size=len(base))
            for i in range(take):
                _, text = base[i]
                out.append(f"{_NAMES[names[i]]}: {_OPENERS[opens[i]]}{text}{_CLOSERS[closes[i]]}")
        copy += 1
    return out


def tick_metadata(n: int, seed: int = 0, data=None) -> list:
    """The ``{"speaker", "episode"}`` metadata of :func:`tick_memories` row by row.

    ``speaker`` is the name the row's text starts with; ``episode`` is its LoCoMo session
    (``1000 * conversation + session``) plus ``100_000 * copy``, so every copy of a session is an
    episode of its own for hybrid recall's context windows.

    Examples
    --------
    >>> tick_metadata(1)[0]["episode"]
    1
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base = [(t.speaker, 1000 * ci + t.session)
            for ci, c in enumerate(locomo_conversations(data)) for t in c.turns]
    out = []
    copy = 0
    while len(out) < n:
        take = min(len(base), n - len(out))
        if copy == 0:
            out.extend({"speaker": sp, "episode": ep} for sp, ep in base[:take])
        else:
            names = np.random.default_rng([seed, copy]).integers(len(_NAMES), size=len(base))
            out.extend({"speaker": _NAMES[names[i]], "episode": 100_000 * copy + base[i][1]}
                       for i in range(take))
        copy += 1
    return out


def tick_inputs(n: int, seed: int = 0, data=None) -> list:
    """``n`` (input, response) pairs for the tick loop: LoCoMo questions and their evidence turn.

    Questions are shuffled with ``default_rng(seed)`` and cycled if ``n`` exceeds their number.
    """
    pairs = []
    for conv in locomo_conversations(data):
        by_id = {t.dia_id: t for t in conv.turns}
        for q in conv.questions:
            ans = next((by_id[e].memory_text for e in q.evidence if e in by_id), "I don't know.")
            pairs.append((q.question, ans))
    order = np.random.default_rng(seed).permutation(len(pairs))
    return [pairs[order[i % len(pairs)]] for i in range(n)]


def cache_dir() -> Path:
    """Embedding cache: ``$MEMCORE_BENCH_CACHE``, else ``bench/results/cache`` (gitignored)."""
    path = Path(os.environ.get("MEMCORE_BENCH_CACHE", _REPO / "bench" / "results" / "cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _text_digest(text: str) -> bytes:
    # hex, not raw bytes: numpy's fixed-width "S" dtype drops trailing NUL bytes
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest().encode("ascii")


def cached_encode(name: str, encode, texts, *, chunk: int = 2048, progress: bool = True,
                  desc: str | None = None) -> np.ndarray:
    """Embed ``texts`` through an on-disk cache keyed by embedder ``name`` + sha1 of each text.

    Missing texts are encoded with ``encode(list_of_str) -> (m, dim) float32`` in chunks; each
    chunk is saved as one shard (``<cache>/<name>/<digest>.npz``) at once, so an interrupted run
    keeps its progress.

    Returns
    -------
    ndarray of shape (len(texts), dim), float32, C-contiguous
    """
    folder = cache_dir() / re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    folder.mkdir(parents=True, exist_ok=True)
    digests = [_text_digest(t) for t in texts]
    index: dict = {}
    shards = []
    for p in sorted(folder.glob("*.npz")):
        with np.load(p) as z:
            keys, vecs = z["keys"], z["vectors"]
        shards.append(vecs)
        for row, key in enumerate(keys.tolist()):
            index[key] = (len(shards) - 1, row)
    first: dict = {}
    for i, d in enumerate(digests):
        if d not in index:
            first.setdefault(d, i)
    missing = sorted(first.values())
    if missing:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(missing), desc=desc or f"embed {name}", unit="text",
                   disable=not progress, leave=False)
        for start in range(0, len(missing), chunk):
            rows = missing[start:start + chunk]
            vecs = np.ascontiguousarray(encode([texts[i] for i in rows]), np.float32)
            keys = np.array([digests[i] for i in rows], dtype="S40")
            tag = hashlib.sha1(keys.tobytes()).hexdigest()[:16]
            tmp = folder / f".{tag}.tmp.npz"
            np.savez(tmp, keys=keys, vectors=vecs)
            os.replace(tmp, folder / f"{tag}.npz")
            shards.append(vecs)
            for row, key in enumerate(keys.tolist()):
                index[key] = (len(shards) - 1, row)
            bar.update(len(rows))
        bar.close()
    if not texts:
        return np.zeros((0, shards[0].shape[1] if shards else 0), np.float32)
    out = np.empty((len(texts), shards[index[digests[0]][0]].shape[1]), np.float32)
    for i, d in enumerate(digests):
        s, row = index[d]
        out[i] = shards[s][row]
    return out


# --- issue 2: embedder benchmarks ---

@lru_cache(maxsize=2)
def _locomo_turn_texts(path) -> tuple:
    return tuple(t.text for conv in locomo_conversations(path) for t in conv.turns)


def locomo_turns(path=None) -> list:
    """The text of every LoCoMo dev dialog turn, in dialog order (cached; a fresh list per call).

    Parameters
    ----------
    path : str or Path, optional
        The shared data folder (see :func:`data_root`).

    Returns
    -------
    list of str

    Examples
    --------
    >>> turns = locomo_turns()
    """
    return list(_locomo_turn_texts(path))


def variant_vectors(base: np.ndarray, start: int, stop: int, seed: int = 0,
                    cosine: float = 0.9) -> np.ndarray:
    """Vectors for memories ``start..stop`` beyond the embedded ones: seeded jitter of ``base``.

    Row ``i`` is ``normalize(base[i % len(base)] + noise)`` with Gaussian noise sized so its
    expected cosine to the source row is ``cosine`` (variations of a real memory). Used by the
    tick benchmark when embedding every variant text would take longer than the run (int8
    MiniLM embeds ~50 texts/s on a busy 2-core machine); the rows are seeded per ``start``.

    Returns
    -------
    ndarray of shape (stop - start, dim), float32, unit rows

    Examples
    --------
    >>> base = np.eye(4, dtype=np.float32)
    >>> variant_vectors(base, 4, 10).shape
    (6, 4)
    """
    n_base, dim = base.shape
    rows = base[np.arange(start, stop) % n_base]
    sigma = np.sqrt((1.0 / cosine**2 - 1.0) / dim)
    noise = np.random.default_rng([seed, start]).normal(0.0, sigma, size=rows.shape)
    out = (rows + noise).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return np.ascontiguousarray(out)


# --- issue 14: the scale benchmark's corpus (LoCoMo turns recombined to any n) ---

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ScaleTurns:
    """``n`` dialog turns for the scale benchmark (see :func:`scale_turns`).

    ``texts``: list of str; ``speakers``: list of str; ``episodes``: int64 (n,); the episode id
    a turn's hybrid context comes from (real sessions ``< 10_000``, synthetic ``>= 10_000``).
    """

    texts: list
    speakers: list
    episodes: np.ndarray


def scale_turns(n: int, seed: int = 0, data=None) -> ScaleTurns:
    """``n`` LoCoMo-like dialog turns: the real dev turns first, then recombined episodes.

    Rows ``0..3434`` are every LoCoMo dev turn in dialog order (episode
    ``1000 * conversation + session``). Later rows are synthetic episodes numbered from
    10,000: each has the length of a real session drawn at random, two speakers drawn from
    the LoCoMo speakers and a pool of 16 more names, alternating turns, and each turn is
    1..k real sentences (``k`` drawn from the real turns' sentence counts) drawn from the
    pool of every sentence of every conversation. Token statistics are the real ones, turns
    are recombinations, not copies (at 1e6, 94% of the texts are distinct; the repeats are
    mostly one short sentence such as "Thanks!", as in real dialog). One
    ``default_rng([seed, 14])`` stream draws episode by episode, so the output is
    prefix-stable: ``scale_turns(m).texts[:k] == scale_turns(k).texts`` for ``k <= m``.

    Raises
    ------
    ValueError
        If ``n < 0``.

    Examples
    --------
    >>> turns = scale_turns(5000)
    >>> turns.texts[:10] == scale_turns(10).texts
    True
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    convs = locomo_conversations(data)
    texts, speakers, episodes = [], [], []
    lengths, counts, pool = [], [], []
    for ci, conv in enumerate(convs):
        per_session: dict = {}
        for t in conv.turns:
            texts.append(t.text)
            speakers.append(t.speaker)
            episodes.append(1000 * ci + t.session)
            per_session[t.session] = per_session.get(t.session, 0) + 1
            parts = [s for s in _SENTENCE_END.split(t.text.strip()) if s]
            counts.append(max(len(parts), 1))
            pool.extend(parts or [t.text])
        lengths.extend(per_session.values())
    names = sorted(set(speakers)) + [x for x in _NAMES if x not in set(speakers)]
    rng = np.random.default_rng([seed, 14])
    lengths_a, counts_a = np.asarray(lengths), np.asarray(counts)
    episode = 10_000
    while len(texts) < n:
        length = int(lengths_a[rng.integers(lengths_a.size)])
        pair = rng.choice(len(names), size=2, replace=False)
        k = counts_a[rng.integers(counts_a.size, size=length)]
        picks = rng.integers(len(pool), size=int(k.sum()))
        at = 0
        for j in range(length):
            texts.append(" ".join(pool[p] for p in picks[at:at + k[j]]))
            at += int(k[j])
            speakers.append(names[pair[j % 2]])
            episodes.append(episode)
        episode += 1
    return ScaleTurns(texts[:n], speakers[:n], np.asarray(episodes[:n], np.int64))


def repetitive_turns(n: int, data=None) -> ScaleTurns:
    """``n`` turns of the repetitive workload (issue 25): the LoCoMo dev turns repeated, the
    way a robot's observations repeat, each copy told apart by a suffix.

    Row ``i`` is turn ``j = i % T`` of the ``T`` dev turns (dialog order) followed by
    ``" #<r>"``, ``r = i // T`` the repeat (so ~``n / T`` rows share a text up to the suffix
    and the suffix number is a term of ``T`` rows), with turn ``j``'s speaker; the episode is
    ``100_000 * r + 1000 * conversation + session`` (each repeat of a session is an episode of
    its own). Deterministic, prefix-stable.

    Raises
    ------
    ValueError
        If ``n < 0``.

    Examples
    --------
    >>> turns = repetitive_turns(8000)
    >>> turns.texts[0][-3:], turns.texts[-1][-3:], int(turns.episodes[-1] // 100_000)
    (' #0', ' #2', 2)
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base, spk, epi = [], [], []
    for ci, conv in enumerate(locomo_conversations(data)):
        for t in conv.turns:
            base.append(t.text)
            spk.append(t.speaker)
            epi.append(1000 * ci + t.session)
    size = len(base)
    reps = np.arange(n) // size
    rows = np.arange(n) % size
    texts = [f"{base[j]} #{r}" for j, r in zip(rows.tolist(), reps.tolist())]
    speakers = [spk[j] for j in rows.tolist()]
    episodes = 100_000 * reps + np.asarray(epi, np.int64)[rows]
    return ScaleTurns(texts, speakers, episodes.astype(np.int64))


def scale_questions(count: int, seed: int = 0, data=None) -> list:
    """``count`` LoCoMo dev questions (those with evidence), shuffled by ``default_rng(seed)``
    and cycled if ``count`` exceeds their number (1,155 with evidence in the dev split)."""
    qs = [q.question for c in locomo_conversations(data) for q in c.questions if q.evidence]
    order = np.random.default_rng(seed).permutation(len(qs))
    return [qs[order[i % len(qs)]] for i in range(count)]
