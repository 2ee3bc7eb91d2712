"""The planner on the real engine (SmolLM2-135M under vLLM): few rows, short answers."""

from __future__ import annotations

import json

import pytest
from waits import result_within

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

    def engine_answer(prefix: str, review: str):
        [prompt] = {p for ps in recording.submitted for p in ps if p.startswith(prefix + review)}
        return recording.answers[prompt]

    flags = run_call(make_call("llm_filter", "Is this review positive? {review}", method="score"), rows, engine=recording)
    assert flags.errors == [None] * 5
    assert flags.values == [engine_answer("Is this review positive? ", r) == "yes" for r in rows[0]]
    assert all(type(v) is bool for v in flags.values)
    labels = ["positive", "negative"]
    kinds = run_call(make_call("llm_classify", "Sentiment of: {review}", labels=labels, method="score"), rows, engine=recording)
    assert kinds.errors == [None] * 5
    assert kinds.values == [engine_answer("Sentiment of: ", r) for r in rows[0]]
    assert set(kinds.values) <= set(labels)
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    extracted = run_call(
        make_call("llm_extract", "Extract the mood of: {review}", json_schema=schema, max_tokens=48), rows, engine=recording
    )
    # 48 tokens hold the object: every row is the engine's JSON, with a string mood
    assert extracted.errors == [None] * 5
    assert [json.loads(v) for v in extracted.values] == [json.loads(engine_answer("Extract the mood of: ", r)) for r in rows[0]]
    assert all(isinstance(json.loads(v)["mood"], str) for v in extracted.values)
    # equal reviews, equal answers
    assert kinds.values[0] == kinds.values[2] and flags.values[1] == flags.values[4]


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


def test_a_row_the_engine_fails_gets_null_and_a_message_the_others_keep_answers(recording):
    # the real-engine twin of test_planner.py's failing rows: a prompt over the model's context
    from relserve.errors import RowError

    long_text = "word " * 3000
    call = make_call("llm_map", "Summarize in three words: {review}", max_tokens=6)
    out = run_call(call, [["A wonderful, moving film.", long_text, "Boring and far too long."]], engine=recording)
    assert out.values == [recording.answers["Summarize in three words: A wonderful, moving film."], None,
                          recording.answers["Summarize in three words: Boring and far too long."]]
    assert out.values[0] and out.values[2]
    assert out.errors[0] is None and out.errors[2] is None
    assert out.errors[1].startswith("llm_map: ") and "exceeds the model's context of 2048 tokens" in out.errors[1]
    # the good answers were cached, the failure was not: a rerun sends only the failed row
    again = run_call(call, [["A wonderful, moving film.", long_text, "Boring and far too long."]], engine=recording)
    assert again.values == out.values and again.plan.cache_hits == 2 and again.ran == 1
    strict = make_call("llm_map", "Summarize in three words: {review}", max_tokens=6, on_error="raise")
    with pytest.raises(RowError, match=r"row 1 \(review='word word .*exceeds the model's context of 2048 tokens"):
        run_call(strict, [["A wonderful, moving film.", long_text]], engine=recording)


class _Measuring:
    """The real engine, keeping every relQuery's result (cached and prompt tokens per row)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.handles: list = []

    def submit(self, rq):
        h = self._engine.submit(rq)
        self.handles.append(h)
        return h

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_explain_predicts_the_hit_rate_the_engine_measures_and_pins_the_prefix(engine):
    # the real-engine twin of test_planner.py's EXPLAIN hit rates and prefix pinning: a long
    # shared instruction, two documents, interleaved questions
    instruction = "Read the document and answer the question in one word. " * 6
    doc = {d: " ".join(f"{d}{i}" for i in range(60)) for d in ("red", "blue")}
    docs = [doc["red" if i % 2 == 0 else "blue"] for i in range(8)]
    questions = [f"question {i}" for i in range(8)]
    call = make_call("llm_map", instruction + "{doc}\nQ: {q}", max_tokens=2)
    engine.reset_prefix_cache()
    ex = run_call(call, [docs, questions], engine=engine, cache=False, explain_only=True).explain
    assert ex.pinned_prefix_tokens > 0 and ex.pinned_prefix_tokens % engine.block_size == 0
    measuring = _Measuring(engine)
    out = run_call(call, [docs, questions], engine=measuring, cache=False)
    assert out.errors == [None] * 8
    [result] = [result_within(h, 60, "the call's relQuery to end after the call did") for h in measuring.handles]
    # the pinned prefix was in the cache before any row ran: every row found at least that much
    assert all(r.cached_tokens >= ex.pinned_prefix_tokens for r in result.rows), [r.cached_tokens for r in result.rows]
    measured = sum(r.cached_tokens for r in result.rows) / sum(r.prompt_tokens for r in result.rows)
    assert measured == pytest.approx(ex.hit_rate_planned, abs=0.1), (measured, ex.hit_rate_planned)
