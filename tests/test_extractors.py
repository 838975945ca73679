"""Memory extractors: pairs, rule-based facts, and LLM output parsing (fake completions)."""

from __future__ import annotations

import logging

import pytest

from memcore.errors import InvalidTextError
from memcore.extractors import (
    FACT_IMPORTANCE,
    FactExtractor,
    LLMExtractor,
    MemoryExtractor,
    PairExtractor,
    Turn,
    pair_key,
    truncate,
)
from memcore.types import MemoryItem

T0 = 1_700_000_000.0


def turn(user: str, assistant: str = "ok", **kw) -> Turn:
    return Turn(user=user, assistant=assistant, timestamp=T0, namespace=("agent", "chat"), **kw)


def facts(text: str) -> dict[str, MemoryItem]:
    return {f.key: f for f in FactExtractor().extract(turn(text))}


# ---------------------------------------------------------------- PairExtractor

def test_pair_is_one_memory_with_input_text_and_response_in_metadata():
    [item] = PairExtractor().extract(turn("Is the back door open?", "Yes, closing it.", metadata={"cam": 2}))
    assert item.text == "Is the back door open?"
    assert item.metadata["response"] == "Yes, closing it."
    assert item.metadata["kind"] == "pair"
    assert item.metadata["cam"] == 2
    assert item.metadata["timestamp"] == T0
    assert "truncated" not in item.metadata
    assert item.importance == 0.5
    assert item.key == pair_key("Is the back door open?", "Yes, closing it.")


def test_pair_caps_each_side_and_records_truncation():
    ex = PairExtractor(max_input_chars=10, max_response_chars=5)
    [item] = ex.extract(turn("x" * 25, "y" * 7))
    assert len(item.text) == 10 and item.text.endswith("…")
    assert len(item.metadata["response"]) == 5
    assert item.metadata["truncated"] == ["input", "response"]
    assert item.metadata["input_chars"] == 25 and item.metadata["response_chars"] == 7
    [only_out] = ex.extract(turn("short", "y" * 7))
    assert only_out.metadata["truncated"] == ["response"]


def test_pair_blank_input_is_nothing_and_bad_text_raises():
    assert PairExtractor().extract(turn("   \n", "hi")) == []
    with pytest.raises(InvalidTextError):
        PairExtractor().extract(turn("bad \ud800 surrogate"))
    with pytest.raises(InvalidTextError):
        PairExtractor().extract(turn(b"bytes"))  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"max_input_chars": 0}, {"max_response_chars": 1.5},
                                    {"importance": 1.2}, {"max_input_chars": True}])
def test_pair_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        PairExtractor(**kwargs)


def test_pair_key_is_stable_and_distinguishes_sides():
    assert pair_key("a", "b") == pair_key("a", "b")
    assert pair_key("a", "b") != pair_key("b", "a")
    assert pair_key("a b", "") != pair_key("a", "b")
    assert truncate("abc", 3) == ("abc", False)


def test_extractors_satisfy_the_protocol():
    for ex in (PairExtractor(), FactExtractor(), LLMExtractor(lambda p: "[]")):
        assert isinstance(ex, MemoryExtractor)


# ---------------------------------------------------------------- FactExtractor

@pytest.mark.parametrize("text, key, value", [
    ("Hi there, my name is Alice.", "user.name", "Alice"),
    ("call me Bob, please", "user.name", "Bob"),
    ("I work as a nurse at the city hospital.", "user.occupation", "a nurse at the city hospital"),
    ("My job is teaching kids", "user.occupation", "teaching kids"),
    ("I live in Lisbon, near the river", "user.home", "Lisbon"),
    ("I come from Lyon!", "user.origin", "Lyon"),
    ("I'm from Spain and I love it", "user.origin", "Spain"),
    ("I'm 34 years old", "user.age", "34"),
    ("I really love green tea", "user.preference.green-tea", "green tea"),
    ("Remember that the kettle is in the left cupboard.", "reminder.the-kettle-is-in-the-left-cupboard",
     "the kettle is in the left cupboard"),
    ("My favorite color is blue.", "user.favorite-color", "blue"),
])
def test_fact_rules(text, key, value):
    found = facts(text)
    assert key in found, found
    fact = found[key]
    assert fact.metadata["value"] == value
    assert fact.metadata["kind"] == "fact" and fact.metadata["source"] == "user"
    assert fact.importance == FACT_IMPORTANCE[fact.metadata["fact_kind"]]


def test_fact_texts_read_as_statements_about_the_user():
    found = facts("My name is Ada and I hate loud noises.")
    assert found["user.name"].text == "The user's name is Ada."
    pref = found["user.preference.loud-noises"]
    assert pref.text == "The user hates loud noises."
    assert pref.metadata["sentiment"] == "negative"


def test_stable_keys_make_a_later_statement_replace_the_earlier():
    first, later = facts("My name is Alice."), facts("Actually, my name is Alicia.")
    assert first.keys() == later.keys() == {"user.name"}
    assert later["user.name"].metadata["value"] == "Alicia"
    # a change of heart about the same thing keeps its key
    assert facts("I love coffee").keys() == facts("I hate coffee").keys()
    # the correction within one text wins
    assert facts("my name is Al. No wait, my name is Alan.")["user.name"].metadata["value"] == "Alan"


def test_name_is_not_also_a_generic_attribute_and_importance_orders_kinds():
    found = facts("My name is Ada and my dog is called Rex")
    assert "user.name" in found and "user.name" == next(iter(found))
    assert all(not k.startswith("user.name.") for k in found)
    assert FACT_IMPORTANCE["name"] > FACT_IMPORTANCE["occupation"] > FACT_IMPORTANCE["preference"]


def test_facts_only_from_the_user_and_nothing_from_plain_text():
    assert FactExtractor().extract(turn("What time is it?", "My name is Robo and I live in a box.")) == []
    assert facts("") == {} and facts("the weather is nice today") == {}


def test_fact_importance_override_and_validation():
    ex = FactExtractor(importance={"preference": 0.2})
    [f] = ex.extract(turn("I like jazz"))
    assert f.importance == 0.2
    with pytest.raises(ValueError, match="unknown fact kind"):
        FactExtractor(importance={"shoe_size": 0.5})
    with pytest.raises(ValueError):
        FactExtractor(importance={"name": 2.0})


def test_fact_values_are_capped():
    [f] = FactExtractor(max_value_chars=10).extract(turn("I live in " + "a" * 50))
    assert len(f.metadata["value"]) == 10


# ---------------------------------------------------------------- LLMExtractor

GOOD = '[{"key": "user.pet", "text": "The user has a cat named Tom.", "importance": 0.6},' \
       ' {"key": "user.city", "text": "The user lives in Oslo.", "importance": 0.8}]'


def test_llm_valid_output_and_prompt_contents():
    prompts = []

    def complete(prompt: str) -> str:
        prompts.append(prompt)
        return GOOD

    items = LLMExtractor(complete).extract(turn("I have a cat named Tom", "Cute!"))
    assert [(i.key, i.importance) for i in items] == [("user.pet", 0.6), ("user.city", 0.8)]
    assert items[0].metadata["source"] == "llm"
    assert "I have a cat named Tom" in prompts[0] and "Cute!" in prompts[0]


@pytest.mark.parametrize("raw", [
    "```json\n" + GOOD + "\n```",
    "Sure! Here are the facts:\n" + GOOD + "\nHope this helps.",
])
def test_llm_tolerates_fences_and_prose(raw):
    assert [i.key for i in LLMExtractor(lambda p: raw).extract(turn("x"))] == ["user.pet", "user.city"]


def test_llm_truncated_list_yields_the_complete_items(caplog):
    raw = GOOD[:-1] + ', {"key": "user.job", "text": "The user is a pil'
    with caplog.at_level(logging.WARNING, logger="memcore.extractors"):
        items = LLMExtractor(lambda p: raw).extract(turn("x"))
    assert [i.key for i in items] == ["user.pet", "user.city"]


def test_llm_partial_items_are_repaired_or_dropped_with_warnings(caplog):
    raw = ('[{"key": "a", "text": "Fact A", "importance": 7}, {"text": "Fact B"}, '
           '{"key": "c"}, "just a string", {"key": 5, "text": "Fact D", "importance": 0.3}, '
           '{"key": "e", "text": "Fact E", "importance": true}]')
    with caplog.at_level(logging.WARNING, logger="memcore.extractors"):
        items = LLMExtractor(lambda p: raw, default_importance=0.4).extract(turn("x"))
    got = {i.key: (i.text, i.importance) for i in items}
    assert got == {"a": ("Fact A", 0.4), "fact.fact-b": ("Fact B", 0.4),
                   "fact.fact-d": ("Fact D", 0.3), "e": ("Fact E", 0.4)}
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "importance 7" in messages and "no text" in messages and "not an object" in messages


@pytest.mark.parametrize("raw", ["", "I could not find any facts.", "{{{[[[", "null", "42",
                                 '{"facts": "none"}', "[1, 2, 3]", "\x00\xff"])
def test_llm_garbage_yields_nothing_and_never_raises(raw, caplog):
    with caplog.at_level(logging.WARNING, logger="memcore.extractors"):
        assert LLMExtractor(lambda p: raw).extract(turn("x")) == []
    assert caplog.records, "garbage must be logged"


def test_llm_single_object_and_max_items():
    one = LLMExtractor(lambda p: '{"key": "k", "text": "t", "importance": 0.5}').extract(turn("x"))
    assert [i.key for i in one] == ["k"]
    many = "[" + ",".join(f'{{"key": "k{i}", "text": "t{i}"}}' for i in range(30)) + "]"
    assert len(LLMExtractor(lambda p: many, max_items=5).extract(turn("x"))) == 5


def test_llm_failing_or_non_str_completion_never_raises(caplog):
    def boom(prompt: str) -> str:
        raise ConnectionError("LLM endpoint down")

    with caplog.at_level(logging.WARNING, logger="memcore.extractors"):
        assert LLMExtractor(boom).extract(turn("x")) == []
        assert LLMExtractor(lambda p: None).extract(turn("x")) == []  # type: ignore[arg-type,return-value]
    assert "LLM endpoint down" in caplog.text


def test_llm_constructor_validation():
    with pytest.raises(TypeError):
        LLMExtractor("not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="assistant"):
        LLMExtractor(lambda p: "[]", prompt_template="only {user}")
    with pytest.raises(ValueError):
        LLMExtractor(lambda p: "[]", default_importance=-1)
