"""Replays of a conversation through :class:`~memcore.SemanticMemory`, tick by tick.

Two sources:

- the bundled robot script ``memcore/data/robot_demo.json`` (:func:`load_script`): ticks with a
  mode, the sensed input, the robot's response and the seconds since the previous tick. A tick
  that answers from memory lists the facts it ``needs``: the robot gives its scripted answer
  only when every one of them is in the memories recalled that tick, and otherwise says it does
  not remember (a stand-in for an LLM answering from its prompt);
- a LoCoMo conversation (:func:`load_locomo`): every dialog turn is one tick stored at its
  session's date (plus 30 s per turn), then each of the conversation's questions is asked and the
  evidence turns found in the top k are counted (the paper's recall accuracy).

A tick is what a runtime does before and after its LLM call: ``retrieve`` + ``format_prompt`` +
``store(background=True)``. Its latency is timed; the background write is then flushed outside
the timing (in a robot the LLM call takes that time).

Time comes from a :class:`ManualClock` advanced by the script, so replays are deterministic.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import numpy as np

from memcore.errors import InvalidArgumentError, MemcoreError

__all__ = [
    "ManualClock",
    "DemoScriptError",
    "load_script",
    "run_script",
    "answer",
    "LocomoConversation",
    "load_locomo",
    "run_locomo",
    "TURN_SPACING_S",
    "DEMO_TOP_K",
    "DEMO_THRESHOLD",
]

#: Recall of the bundled robot script: 3 memories per tick above cosine similarity 0.2. With the
#: default MiniLM embedder every fact the script asks for is recalled at this threshold; at
#: SemanticMemory's default 0.3 "Where do I live again?" misses "The user lives in Lisbon."
#: (similarity 0.26).
DEMO_TOP_K, DEMO_THRESHOLD = 3, 0.2

#: Seconds between two consecutive LoCoMo turns of a session in the replay.
TURN_SPACING_S = 30.0


class DemoScriptError(MemcoreError, ValueError):
    """A demo script or LoCoMo file is malformed or lacks the requested conversation."""


class ManualClock:
    """A clock that only moves when told to: ``clock()`` returns Unix seconds.

    Parameters
    ----------
    start : float
        Initial Unix time in seconds.

    Examples
    --------
    >>> clock = ManualClock(1_700_000_000.0)
    >>> clock.advance(60.0); clock()
    1700000060.0
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (>= 0).

        Raises
        ------
        ValueError
            If seconds is negative or not finite.
        """
        if not np.isfinite(seconds) or seconds < 0:
            raise InvalidArgumentError(f"a clock advances by a finite number of seconds >= 0, got {seconds!r}")
        self.now += float(seconds)

    def set(self, unix_seconds: float) -> None:
        """Jump to ``unix_seconds`` (forward or backward)."""
        self.now = float(unix_seconds)


def load_script(path: str | Path | None = None) -> dict[str, Any]:
    """Load a demo script (the bundled robot conversation when ``path`` is None).

    Format: ``{"title": str, "start": ISO-8601 datetime, "unknown": str (optional), "ticks":
    [{"after_s": float, "mode": str, "input": str, "response": str, "needs": [str, ...]
    (optional)}, ...]}``. ``needs`` are the facts (case-insensitive substrings) the response
    rests on; ``unknown`` is what the robot says when they were not recalled.

    Returns
    -------
    dict with ``title``, ``start`` (Unix seconds, float), ``unknown`` (str) and ``ticks``
    (list of dict, ``needs`` a list of str, empty for none).

    Raises
    ------
    DemoScriptError
        If the file is not valid JSON or lacks a field.
    FileNotFoundError
        If ``path`` does not exist.
    """
    if path is None:
        raw = resources.files("memcore").joinpath("data/robot_demo.json").read_text("utf-8")
        where = "bundled robot_demo.json"
    else:
        raw = Path(path).read_text("utf-8")
        where = str(path)
    try:
        data = json.loads(raw)
        start = datetime.fromisoformat(data["start"])
        if start.tzinfo is None:
            start = start.replace(tzinfo=timezone.utc)
        ticks = []
        for i, t in enumerate(data["ticks"]):
            tick = {"after_s": float(t["after_s"]), "mode": str(t["mode"]), "input": str(t["input"]),
                    "response": str(t["response"]), "needs": t.get("needs", [])}
            if not np.isfinite(tick["after_s"]) or tick["after_s"] < 0:
                raise InvalidArgumentError(f"tick {i}: after_s must be >= 0, got {t['after_s']!r}")
            if not isinstance(tick["needs"], list) or not all(
                    isinstance(n, str) and n.strip() for n in tick["needs"]):
                raise InvalidArgumentError(f"tick {i}: needs must be a list of non-empty str")
            ticks.append(tick)
    except (ValueError, KeyError, TypeError) as err:
        raise DemoScriptError(f"{where}: not a demo script ({type(err).__name__}: {err})") from err
    return {"title": str(data.get("title", "")), "start": start.timestamp(), "ticks": ticks,
            "unknown": str(data.get("unknown", "I don't remember that."))}


def _ms_summary(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples, np.float64)
    if arr.size == 0:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "max_ms": float("nan")}
    p50, p95 = np.percentile(arr, [50, 95])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "max_ms": float(arr.max())}


def _tick(memory: Any, text: str, response: str | Callable[[str], str], mode: str,
          **store_kwargs: Any) -> tuple[list, str, float, str]:
    """One tick: retrieve, format the prompt, answer (``response`` or ``response(prompt)``), store."""
    t0 = time.perf_counter()
    hits = memory.retrieve(text, mode)
    prompt = memory.format_prompt(hits)
    if callable(response):
        response = response(prompt)
    memory.store(text, response, mode, background=True, **store_kwargs)
    elapsed = (time.perf_counter() - t0) * 1e3
    memory.flush()  # outside the timing: a robot's LLM call takes this long and more
    return hits, prompt, elapsed, response


def answer(tick: dict[str, Any], prompt: str, unknown: str) -> str:
    """The scripted response if every fact the tick ``needs`` is in ``prompt``, else ``unknown``.

    Examples
    --------
    >>> answer({"needs": ["Lisbon"], "response": "You live in Lisbon."}, "", "I don't know.")
    "I don't know."
    """
    recalled = prompt.casefold()
    if all(fact.casefold() in recalled for fact in tick["needs"]):
        return tick["response"]
    return unknown


def run_script(memory: Any, script: dict[str, Any], clock: ManualClock,
               out: TextIO | None = None) -> dict[str, Any]:
    """Replay ``script`` tick by tick, printing each tick's memories and latency to ``out``.

    Parameters
    ----------
    memory : SemanticMemory
        Built with ``clock`` as its clock.
    script : dict
        From :func:`load_script`.
    clock : ManualClock
        Set to ``script["start"]`` and advanced by each tick's ``after_s``.
    out : text stream, optional
        Where the transcript goes; nothing is printed when None.

    Returns
    -------
    dict with ``ticks``, ``tick_ms`` ({p50_ms, p95_ms, max_ms}), ``memories`` (stats()
    tier counts after the replay), ``recalled`` (ticks that recalled at least one memory),
    ``questions`` (ticks that need facts), ``answered`` (of those, answered from memory) and
    ``transcript`` (per tick: ``input``, ``mode``, ``recalled`` (the memory lines of the
    prompt), ``response``).

    Raises
    ------
    BackgroundWriteError
        If a write failed.
    """
    say: Callable[[str], Any] = (lambda s: print(s, file=out)) if out is not None else (lambda s: None)
    clock.set(script["start"])
    latencies, recalled, transcript = [], 0, []
    unknown = script.get("unknown", "I don't remember that.")
    if script.get("title"):
        say(f"== {script['title']} ==")
    for i, tick in enumerate(script["ticks"], 1):
        clock.advance(tick["after_s"])
        hits, prompt, ms, response = _tick(memory, tick["input"],
                                           lambda p, tick=tick: answer(tick, p, unknown), tick["mode"])
        latencies.append(ms)
        recalled += bool(hits)
        transcript.append({"input": tick["input"], "mode": tick["mode"], "needs": tick["needs"],
                           "recalled": prompt.splitlines()[1:], "response": response})
        stamp = datetime.fromtimestamp(clock(), timezone.utc).strftime("%H:%M:%S")
        say(f"\n[tick {i:>2} {stamp} mode={tick['mode']}] {tick['input']}")
        say(prompt.rstrip("\n") if prompt else "(no relevant memories)")
        say(f"robot: {response}   ({ms:.2f} ms)")
    stats = memory.stats()
    questions = [t for t in transcript if t["needs"]]
    answered = sum(t["response"] != unknown for t in questions)
    summary = {"ticks": len(latencies), "tick_ms": _ms_summary(latencies), "recalled": recalled,
               "questions": len(questions), "answered": answered,
               "memories": stats["tiers"], "embedder": stats["embedder"], "transcript": transcript}
    t = summary["tick_ms"]
    say(f"\n{summary['ticks']} ticks, embedder {summary['embedder']}: tick p50 {t['p50_ms']:.2f} ms, "
        f"p95 {t['p95_ms']:.2f} ms; {recalled} ticks recalled memories; {answered} of "
        f"{len(questions)} questions answered from memory; stored "
        f"{stats['tiers']['short']} short + {stats['tiers']['long']} long")
    return summary


_LOCOMO_DATE = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True)
class LocomoConversation:
    """One LoCoMo conversation, ready to replay.

    Attributes
    ----------
    sample_id : str
    sessions : list of (float, list of dict)
        Each session's start as Unix seconds (UTC) and its turns (``speaker``, ``dia_id``,
        ``text``), in order.
    questions : list of dict
        ``question``, ``evidence`` (list of dia_id), ``category`` (int).
    """

    sample_id: str
    sessions: list
    questions: list


def load_locomo(path: str | Path, conversation: str) -> LocomoConversation:
    """Read one conversation from a LoCoMo JSON file (e.g. ``locomo_dev.json``).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    DemoScriptError
        If the file is not LoCoMo JSON or holds no conversation ``conversation`` (the message
        lists the ones it holds).
    """
    try:
        data = json.loads(Path(path).read_text("utf-8"))
        by_id = {c["sample_id"]: c for c in data}
    except (ValueError, KeyError, TypeError) as err:
        raise DemoScriptError(f"{path}: not a LoCoMo file ({type(err).__name__}: {err})") from err
    if conversation not in by_id:
        raise DemoScriptError(f"{path} has no conversation {conversation!r}; it holds "
                              f"{', '.join(sorted(by_id))}")
    conv = by_id[conversation]["conversation"]
    sessions = []
    for name in sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])):
        try:
            when = datetime.strptime(conv[f"{name}_date_time"], _LOCOMO_DATE).replace(tzinfo=timezone.utc)
        except (KeyError, ValueError) as err:
            raise DemoScriptError(f"{path}: {conversation} {name} has no readable date: {err}") from err
        sessions.append((when.timestamp(), list(conv[name])))
    questions = [q for q in by_id[conversation]["qa"] if q.get("evidence")]
    return LocomoConversation(conversation, sessions, questions)


def run_locomo(memory: Any, conv: LocomoConversation, clock: ManualClock, *, top_k: int = 5,
               out: TextIO | None = None, verbose: bool = False) -> dict[str, Any]:
    """Replay a LoCoMo conversation, then ask its questions and score evidence recall.

    Each dialog turn is a tick in mode ``conv.sample_id`` at its session's date (+
    :data:`TURN_SPACING_S` per turn): retrieve memories for ``"<speaker>: <text>"``, then store
    it (key = its dia_id). A day after the last session every question with evidence is asked
    with ``retrieve(question, top_k=top_k, threshold=-1, touch=False)`` (peeking, so one question
    does not change the next one's ranking). Recall of a question = the fraction of its evidence
    turns among the hits; the summary averages it over questions (overall and per category).

    Returns
    -------
    dict with ``conversation``, ``turns``, ``questions``, ``top_k``, ``recall`` (mean),
    ``recall_by_category`` ({category: mean}), ``tick_ms`` and ``question_ms``
    ({p50_ms, p95_ms, max_ms}), and ``memories`` (tier counts).

    Raises
    ------
    BackgroundWriteError
        If a write failed.
    """
    say: Callable[[str], Any] = (lambda s: print(s, file=out)) if out is not None else (lambda s: None)
    mode = conv.sample_id
    ticks = []
    for start, turns in conv.sessions:
        clock.set(start)
        for turn in turns:
            text = f"{turn['speaker']}: {turn['text']}"
            hits, prompt, ms, _ = _tick(memory, text, "", mode, key=turn["dia_id"],
                                     metadata={"dia_id": turn["dia_id"], "speaker": turn["speaker"]})
            ticks.append(ms)
            if verbose:
                say(f"[{turn['dia_id']}] {text}  ({ms:.2f} ms, {len(hits)} recalled)")
            clock.advance(TURN_SPACING_S)
    memory.consolidate()
    clock.set(conv.sessions[-1][0] + 86400.0)
    recalls: list[float] = []
    by_cat: dict[int, list[float]] = {}
    q_ms = []
    for q in conv.questions:
        t0 = time.perf_counter()
        hits = memory.retrieve(q["question"], mode, top_k=top_k, threshold=-1.0, touch=False)
        q_ms.append((time.perf_counter() - t0) * 1e3)
        found = {h.metadata.get("dia_id") for h in hits}
        evidence = set(q["evidence"])
        r = len(evidence & found) / len(evidence)
        recalls.append(r)
        by_cat.setdefault(int(q.get("category", 0)), []).append(r)
        if verbose:
            say(f"Q {q['question']}  evidence={sorted(evidence)} recall={r:.2f}")
    stats = memory.stats()
    summary = {
        "conversation": mode, "turns": len(ticks), "questions": len(recalls), "top_k": top_k,
        "recall": float(np.mean(recalls)) if recalls else float("nan"),
        "recall_by_category": {c: float(np.mean(v)) for c, v in sorted(by_cat.items())},
        "tick_ms": _ms_summary(ticks), "question_ms": _ms_summary(q_ms),
        "memories": stats["tiers"], "embedder": stats["embedder"],
    }
    t, qm = summary["tick_ms"], summary["question_ms"]
    say(f"{mode}: {len(ticks)} turns replayed over {len(conv.sessions)} sessions, embedder "
        f"{summary['embedder']}; tick p50 {t['p50_ms']:.2f} ms, p95 {t['p95_ms']:.2f} ms")
    cats = ", ".join(f"cat {c}: {v:.3f}" for c, v in summary["recall_by_category"].items())
    say(f"{len(recalls)} questions: evidence recall@{top_k} = {summary['recall']:.3f} ({cats}); "
        f"question p50 {qm['p50_ms']:.2f} ms, p95 {qm['p95_ms']:.2f} ms")
    return summary
