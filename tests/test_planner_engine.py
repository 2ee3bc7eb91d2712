"""The planner on the real engine (SmolLM2-135M under vLLM): few rows, short answers."""

from __future__ import annotations

import json

import pytest

from relserve.functions import make_call
from relserve.planner import run_call, token_source

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("engine_home")]

REVIEWS = [
    "A wonderful, moving film.",
    "Boring and far too long.",
    "A wonderful, moving film.",
    None,
    "I loved every minute.",
    "Boring and far too long.",
]


def test_each_row_gets_the_answer_of_its_own_prompt(recording):
    call = make_call("llm_map", "Summarize in three words: {review}", max_tokens=6)
    out = run_call(call, [REVIEWS], engine=recording)
    # one relQuery with the three distinct prompts, sorted
    assert recording.submitted == [sorted({f"Summarize in three words: {r}" for r in REVIEWS if r})]
    expected = [recording.answers[f"Summarize in three words: {r}"] if r else None for r in REVIEWS]
    assert out.values == expected
    assert all(isinstance(v, str) and v for v in out.values if v is not None)
    assert out.errors[3] == "llm_map: placeholder {review} is NULL in this row"
    assert out.engine_stats.num_rows == 3


def test_a_repeated_call_does_not_reach_the_engine(recording):
    call = make_call("llm_map", "One word for: {review}", max_tokens=4)
    first = run_call(call, [REVIEWS], engine=recording)
    second = run_call(call, [list(reversed(REVIEWS))], engine=recording)
    assert len(recording.submitted) == 1
    assert second.values == list(reversed(first.values))
    assert second.ran == 0 and second.plan.cache_hits == 3


def test_filter_classify_extract_types_on_the_engine(recording):
    rows = [[r for r in REVIEWS if r]]
    flags = run_call(make_call("llm_filter", "Is this review positive? {review}"), rows, engine=recording).values
    assert all(type(v) is bool for v in flags)
    labels = ["positive", "negative"]
    kinds = run_call(make_call("llm_classify", "Sentiment of: {review}", labels=labels), rows, engine=recording).values
    assert all(k in labels for k in kinds)
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    extracted = run_call(
        make_call("llm_extract", "Extract the mood of: {review}", json_schema=schema, max_tokens=32), rows, engine=recording
    )
    for value, err in zip(extracted.values, extracted.errors):
        # either valid JSON with a string mood, or (if the answer was cut by max_tokens) an error
        if err is None:
            assert isinstance(json.loads(value)["mood"], str)
        else:
            assert value is None and "llm_extract" in err
    # equal reviews, equal answers
    assert kinds[0] == kinds[2] and flags[1] == flags[4]


def test_field_reordering_sends_json_fields_to_the_engine(recording):
    call = make_call("llm_map", "Title {title}. Review {review}. One word:", reorder_fields=True, max_tokens=3)
    titles = ["Alien", "Alien", "Heat"]
    reviews = ["Scary.", "Dark.", "Tense."]
    out = run_call(call, [titles, reviews], engine=recording)
    sent = recording.submitted[0]
    assert all(p.startswith("Title {title}. Review {review}. One word:\n{") for p in sent)
    assert [json.loads(p.split("\n", 1)[1]) for p in sent][0] == {"title": "Alien", "review": "Dark."}
    for i in range(3):
        prompt = next(p for p in sent if json.loads(p.split("\n", 1)[1]) == {"title": titles[i], "review": reviews[i]})
        assert out.values[i] == recording.answers[prompt]


def test_explain_uses_the_engines_tokens_and_blocks(engine):
    call = make_call("llm_map", "Summarize in three words: {review}")
    out = run_call(call, [REVIEWS], engine=engine, explain_only=True)
    ex = out.explain
    assert (ex.rows, ex.error_rows, ex.distinct_prompts, ex.to_run) == (6, 1, 3, 3)
    assert ex.token_source == "engine" and ex.block_size == engine.block_size
    assert ex.prompt_tokens_original == sum(len(engine.prompt_token_ids(f"Summarize in three words: {r}")) for r in REVIEWS if r)
    assert token_source(engine).kind == "engine"
