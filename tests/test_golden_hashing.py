"""Golden vectors of HashingEmbedder, from an independent pure-Python reference of each recipe.

The references below work on ``str`` with ``re``/``unicodedata`` (no byte tables, no kernels).
``tests/fixtures/golden_hashing.json`` pins their output; regenerate it only on purpose with
``MEMCORE_REGEN_GOLDEN=1 pytest tests/test_golden_hashing.py`` (a change means every stored
hashing vector changes: bump the embedder's ``name``).
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore.embedders import HashingEmbedder
from memcore.errors import InvalidTextError

FIXTURE = Path(__file__).parent / "fixtures" / "golden_hashing.json"
DIM = 384

GOLDEN_TEXTS = [
    "",
    "   \t\n ",
    "Hello, WORLD!!",
    "hello world",
    "The battery is at 12 percent; return to the dock.",
    "I'm swamped with the kids & work. What's up with you? Anything new?",
    "a b c d e f 1 2 3",
    "Der Roboter öffnet die Tür für Zoë. STRASSE Straße",
    "naïve café résumé",
    "nai\u0308ve cafe\u0301 re\u0301sume\u0301",
    "ロボットはドアを開けた。",
    "机器人打开了门。",
    "東京2024年、ｶﾀｶﾅ",
    "로봇이 문을 열었다.",
    "หุ่นยนต์เปิดประตู",
    "रोबोट ने दरवाज़ा खोला",
    "الروبوت فتح الباب",
    "ΑΒΓ αβγ Ωmega ΣΊΣΥΦΟΣ",
    "I ❤️ pizza 🍕 and 🐈 👩‍💻",
    "ﬁle ＡＢＣ ① ² ½",
    "\u212a Kelvin \u0130stanbul",
    "nul\x00inside\x00text",
    "tab\tseparated\ttext\r\nline",
    "under_score snake_case wi-fi e-mail x",
    "\u0301\u0301 leading marks",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "memory " * 40,
]

# --------------------------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------------------------


def _fnv1a32(s: str) -> int:
    h = 2166136261
    for ch in s:
        h = ((h ^ ord(ch)) * 16777619) % 2**32
    return h


def _l2(acc: dict[int, int], dim: int) -> np.ndarray:
    v = [0.0] * dim
    for j, c in acc.items():
        v[j] = float(c)
    norm = math.sqrt(sum(x * x for x in v))
    return np.array([x / norm if norm else 0.0 for x in v], np.float32)


def classic_reference(text: str, dim: int = DIM) -> np.ndarray:
    """The classic recipe, written as stated."""
    text = re.sub(r"[^a-z0-9 ]", " ", text.lower())
    acc: dict[int, int] = {}
    for tok in text.split():
        if len(tok) < 2:
            continue
        j = _fnv1a32(tok) % dim
        acc[j] = acc.get(j, 0) + (1 if ord(tok[0]) % 2 == 0 else -1)
    return _l2(acc, dim)


_NOSPACE = [(0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3005, 0x3007),
            (0x3021, 0x3029), (0x3031, 0x3035), (0x303B, 0x303C), (0x3040, 0x30FF),
            (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
            (0x1AFF0, 0x1B16F), (0x20000, 0x3FFFF)]


def _kind(ch: str) -> str:
    cat = unicodedata.category(ch)
    if cat[0] == "M" or ch in "\u200c\u200d":
        return "mark"
    if cat[0] in "LN":
        cp = ord(ch)
        return "nospace" if any(lo <= cp <= hi for lo, hi in _NOSPACE) else "word"
    return "sep"


def unicode_tokens(text: str) -> list[str]:
    """NFKC_Casefold, then words / no-space bigrams, marks glued to the preceding letter."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    tokens: list[str] = []
    word = ""
    chars: list[str] = []          # current no-space run, one entry per base + marks
    last = "sep"                   # kind of the last base character seen

    def flush():
        nonlocal word, chars
        if word:
            tokens.append(word)
        if len(chars) == 1:
            tokens.append(chars[0])
        tokens.extend(a + b for a, b in zip(chars, chars[1:]))
        word, chars = "", []

    for ch in text:
        kind = _kind(ch)
        if kind == "mark":
            if last == "word":
                word += ch
            elif last == "nospace":
                chars[-1] += ch
            continue
        if kind != last:
            flush()
        if kind == "word":
            word += ch
        elif kind == "nospace":
            chars.append(ch)
        last = kind
    flush()
    return tokens


def _token_hash(tok: str) -> int:
    m = 2**64 - 1
    h = 14695981039346656037
    for b in tok.encode("utf-8"):
        h = ((h ^ b) * 1099511628211) & m
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & m
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & m
    return h ^ (h >> 31)


def unicode_reference(text: str, dim: int = DIM) -> np.ndarray:
    acc: dict[int, int] = {}
    for tok in unicode_tokens(text):
        h = _token_hash(tok)
        j = (h & 0xFFFFFFFF) % dim
        acc[j] = acc.get(j, 0) + (-1 if h >> 63 else 1)
    return _l2(acc, dim)


REFERENCES = {"classic": classic_reference, "unicode": unicode_reference}

# --------------------------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------------------------


def _sparse(v: np.ndarray) -> list:
    nz = np.flatnonzero(v)
    return [[int(j), float(v[j])] for j in nz]


def _dense(pairs: list) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    for j, x in pairs:
        v[j] = x
    return v


def _golden() -> dict:
    if os.environ.get("MEMCORE_REGEN_GOLDEN") == "1":
        FIXTURE.parent.mkdir(exist_ok=True)
        blob = {"dim": DIM, "texts": GOLDEN_TEXTS}
        for mode, ref in REFERENCES.items():
            blob[mode] = [_sparse(ref(t)) for t in GOLDEN_TEXTS]
        FIXTURE.write_text(json.dumps(blob, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def golden() -> dict:
    return _golden()


def test_fixture_texts_are_current(golden):
    assert golden["dim"] == DIM
    assert golden["texts"] == GOLDEN_TEXTS, "texts changed: regenerate with MEMCORE_REGEN_GOLDEN=1"


@pytest.mark.parametrize("mode", ["classic", "unicode"])
def test_reference_reproduces_fixture(golden, mode):
    for text, pairs in zip(golden["texts"], golden[mode]):
        np.testing.assert_array_equal(REFERENCES[mode](text), _dense(pairs), err_msg=repr(text))


@pytest.mark.parametrize("mode", ["classic", "unicode"])
@pytest.mark.parametrize("parallel", [False, True])
def test_embedder_is_bit_exact_to_fixture(golden, mode, parallel):
    got = HashingEmbedder(DIM, mode, parallel=parallel).encode(golden["texts"])
    want = np.stack([_dense(p) for p in golden[mode]])
    for i, text in enumerate(golden["texts"]):
        np.testing.assert_array_equal(got[i], want[i], err_msg=f"{mode}: {text!r}")


def test_golden_tokens_spot_checks():
    assert unicode_tokens("ロボ ト") == ["ロボ", "ト"]
    assert unicode_tokens("東京2024年") == ["東京", "2024", "年"]
    assert unicode_tokens("nai\u0308ve STRASSE") == ["naïve", "strasse"]
    assert unicode_tokens("\u0301x \u0301") == ["x"]
    assert unicode_tokens("a\x00b") == ["a", "b"]
    assert unicode_tokens("I ❤️ 🍕") == ["i"]


# --------------------------------------------------------------------------------------------
# Arbitrary text and odd input
# --------------------------------------------------------------------------------------------

@given(st.text(max_size=60), st.sampled_from([3, 384]))
def test_unicode_mode_equals_reference_on_any_text(text, dim):
    got = HashingEmbedder(dim, "unicode").encode([text])[0]
    np.testing.assert_array_equal(got, unicode_reference(text, dim))


@given(st.text(max_size=60), st.sampled_from([3, 384]))
def test_classic_mode_equals_reference_on_any_text(text, dim):
    got = HashingEmbedder(dim, "classic").encode([text])[0]
    np.testing.assert_array_equal(got, classic_reference(text, dim))


@pytest.mark.parametrize("mode", ["classic", "unicode"])
def test_lone_surrogates_are_rejected(mode):
    emb = HashingEmbedder(mode=mode)
    with pytest.raises(InvalidTextError, match=r"texts\[1\].*surrogate"):
        emb.encode(["fine", "bad \ud800 text"])
    with pytest.raises(ValueError):               # InvalidTextError is a ValueError
        emb.encode(["\udfff"])


@pytest.mark.parametrize("mode", ["classic", "unicode"])
def test_nul_separates_tokens(mode):
    emb = HashingEmbedder(mode=mode)
    np.testing.assert_array_equal(emb.encode(["ab\x00cd"]), emb.encode(["ab cd"]))


def test_combining_marks_compose():
    emb = HashingEmbedder()
    v = emb.encode(["cafe\u0301", "café", "CAFÉ", "\u0301\u0308"])
    np.testing.assert_array_equal(v[0], v[1])
    np.testing.assert_array_equal(v[0], v[2])
    assert not v[3].any()                          # marks with no base: no token


@pytest.mark.parametrize("mode", ["classic", "unicode"])
def test_one_megabyte_text(mode):
    unit = "Robot 42 öffnet die Tür 東京タワー; "  # ends in a separator: repeats do not merge
    reps = (1 << 20) // len(unit.encode()) + 1
    big = unit * reps
    assert len(big.encode()) > 1 << 20
    v = HashingEmbedder(mode=mode).encode([big, unit])
    # Every token count scales by reps, so the direction is the unit's.
    np.testing.assert_allclose(v[0], v[1], atol=1e-6)
    assert abs(float(np.linalg.norm(v[0])) - 1.0) < 1e-6
    if mode == "classic":
        np.testing.assert_array_equal(v[0], classic_reference(big))
