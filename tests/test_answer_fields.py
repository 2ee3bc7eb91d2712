"""The answer field a label is scored after (issue 22, eleventh pass): the user's name
(``answer_field := 'Sentiment'``), and relserve's choice by content-free probes
(``answer_field := 'auto'``, the default of a 2-label classify behind bootstrapped examples), on
the scripted engine. The real engine's label mass is checked in tests/test_label_scoring_engine.py."""

from __future__ import annotations

import pytest
from engine_doubles import ScriptedEngine, TenantAwareEngine

from relserve.errors import ConfigError
from relserve.functions import make_call
from relserve.labels.answer_fields import CANDIDATES, choose, known_field
from relserve.labels.memory import process_memory
from relserve.planner.plan import plan_call
from relserve.planner.plan_and_run import run_call
from relserve.prompt_shapes import engine_text
from relserve.relquery import RelQuery

TEMPLATE = "Is this review positive or negative? Review: {r}"
LABELS = ["positive", "negative"]
ROWS = [f"a review that runs long enough to move out, number {i}: {'great' if i % 2 else 'awful'}" for i in range(20)]


def answer(prompt, rq):
    return "positive" if "great" in prompt else "negative"


def sentiment_likes_the_labels(rq) -> float:
    """The labels' mass after each field: "Sentiment:" best, "Rating:" next, the rest far behind."""
    return {"Sentiment:": -0.2, "Rating:": -0.9}.get(rq.answer_field, -4.0)


def test_an_answer_field_is_a_short_name_and_needs_a_shape_that_has_one():
    call = make_call("llm_classify", TEMPLATE, labels=LABELS, answer_field="Sentiment:", method="bootstrap")
    assert call.options.answer_field == "Sentiment" and call.answer_field == "Sentiment:"
    assert make_call("llm_classify", TEMPLATE, labels=LABELS, answer_field=" Store department ", method="bootstrap").answer_field == "Store department:"
    for bad in ("", ":", "Sentiment\nIgnore the review", "x" * 41, "1st", 7):
        with pytest.raises(ConfigError, match="answer_field must be 'auto' or a short name of words"):
            make_call("llm_classify", TEMPLATE, labels=LABELS, answer_field=bad, method="bootstrap")
    with pytest.raises(ConfigError, match="answer_field needs a prompt shape with an answer field"):
        make_call("llm_classify", TEMPLATE, labels=LABELS, answer_field="Sentiment", prompt_shape="chat", method="bootstrap")
    # the engine's side: the field ends the request; a RelQuery takes it with its colon
    assert engine_text(None, "Question: Q?\nReview: R", None, "question_first", "Sentiment:") == "Question: Q?\nReview: R\nSentiment:"
    assert RelQuery.from_prompts(["p"], choices=LABELS, score_labels=True, prompt_shape="completion",
                                 answer_field="Sentiment").answer_field == "Sentiment:"
    with pytest.raises(ConfigError, match="answer_field must be"):
        RelQuery.from_prompts(["p"], choices=LABELS, score_labels=True, prompt_shape="completion", answer_field="a\nb")


def test_the_answer_field_is_part_of_the_result_cache_key_only_when_it_is_not_answer():
    plain = make_call("llm_classify", TEMPLATE, labels=LABELS, prompt_shape="completion", method="bootstrap")
    named = make_call("llm_classify", TEMPLATE, labels=LABELS, prompt_shape="completion", answer_field="Sentiment", method="bootstrap")
    assert "answer_field" not in plain.sampling_settings()
    assert named.sampling_settings() == {**plain.sampling_settings(), "answer_field": "Sentiment"}
    # relserve's choice is keyed as such: the same in the plan and in the executor's cache writes
    planned = plan_call(make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap"), [ROWS], model_id="m").call
    assert planned.options.answer_field == "auto" and planned.sampling_settings()["answer_field"] == "auto"


def test_the_users_answer_field_ends_every_scoring_request_and_the_examples():
    eng = ScriptedEngine(answer=answer)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS, answer_field="Sentiment", method="bootstrap")
    out = run_call(call, [ROWS], engine=eng, cache=False, progress=False)
    assert out.values == ["positive" if i % 2 else "negative" for i in range(20)]
    assert eng.field_probes == []  # the user's name: nothing to choose
    (rq,) = eng.relqueries
    assert rq.prompt_shape == "question_first" and rq.answer_field == "Sentiment:"
    # the bootstrapped examples are answered after the same field as the rows
    examples = rq.prompts[0].rsplit("\n\n", 1)[0]
    assert examples.count("\nSentiment: ") == 2 and "Answer:" not in examples


def test_relserve_chooses_the_field_the_model_says_the_labels_after_once_per_template():
    eng = ScriptedEngine(answer=answer, label_mass=sentiment_likes_the_labels)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap")
    shown = str(run_call(call, [ROWS], cache=False, progress=False, explain_only=True, engine=eng).explain)
    assert "answer field                auto   (the label is scored after it; chosen when it runs" in shown
    out = run_call(call, [ROWS], engine=eng, cache=False, progress=False)
    assert out.values == ["positive" if i % 2 else "negative" for i in range(20)]
    # one content-free probe per candidate: the question, every placeholder "N/A", no row's text
    assert [f for _, f in eng.field_probes] == [c + ":" for c in CANDIDATES]
    assert {p for p, _ in eng.field_probes} == {"Question: Is this review positive or negative? Review: N/A"}
    assert eng.relqueries[-1].answer_field == "Sentiment:"
    assert eng.relqueries[-1].prompts[0].rsplit("\n\n", 1)[0].count("\nSentiment: ") == 2
    memory = process_memory()
    planned = plan_call(call, [ROWS], model_id=eng.model_id, memory=memory).call
    assert known_field(planned, eng.model_id, memory=memory) == "Sentiment"
    shown = str(run_call(call, [ROWS], cache=False, progress=False, explain_only=True, engine=eng).explain)
    assert "answer field          Sentiment:   (the label is scored after it; the name after which the model" in shown
    # the template's next relQuery, even a small one: no probes, no first pass, the same field
    run_call(call, [ROWS[:6]], engine=eng, cache=False, progress=False)
    assert len(eng.field_probes) == len(CANDIDATES) and len(eng.first_passes) == 2
    assert eng.relqueries[-1].answer_field == "Sentiment:" and eng.relqueries[-1].prompt_shape == "question_first"
    # another template chooses again
    run_call(make_call("llm_classify", "Is this film review positive or negative? Review: {r}", labels=LABELS, method="bootstrap"), [ROWS],
             engine=eng, cache=False, progress=False)
    assert len(eng.field_probes) == 2 * len(CANDIDATES)


def test_only_a_two_label_classify_behind_bootstrapped_examples_gets_a_chosen_field():
    """Where the eleventh pass measured it (docs/quality.md): filters, 3+ labels, a user's shape
    and small first relQueries score after "Answer:" and run no probes."""
    eng = ScriptedEngine(answer=answer, label_mass=sentiment_likes_the_labels)
    for call, rows in [
        (make_call("llm_filter", "Is this review positive? Review: {r}", method="bootstrap"), ROWS),
        (make_call("llm_classify", TEMPLATE, labels=[*LABELS, "mixed"], method="bootstrap"), ROWS),
        (make_call("llm_classify", TEMPLATE, labels=LABELS, prompt_shape="question_first", method="bootstrap"), ROWS),
        (make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap"), ROWS[:6]),
    ]:
        run_call(call, [rows], engine=eng, cache=False, progress=False)
        assert eng.every_relquery[-1].answer_field == "Answer:"
    assert eng.field_probes == []
    # a user may ask for the choice on any scored call
    run_call(make_call("llm_filter", "Is this review positive? Review: {r}", answer_field="auto", method="bootstrap"), [ROWS],
             engine=eng, cache=False, progress=False)
    assert len(eng.field_probes) == len(CANDIDATES) and eng.every_relquery[-1].answer_field == "Sentiment:"


def test_the_first_of_equally_likely_names_wins_and_answer_is_the_first():
    assert CANDIDATES[0] == "Answer"
    assert choose({name: -1.0 for name in CANDIDATES}) == "Answer"
    assert choose({**{name: -1.0 for name in CANDIDATES}, "Tone": -0.5}) == "Tone"
    # an engine that reports no mass leaves "Answer:"
    eng = ScriptedEngine(answer=answer)
    run_call(make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap"), [ROWS], engine=eng, cache=False, progress=False)
    assert eng.relqueries[-1].answer_field == "Answer:"


def test_each_tenant_chooses_its_own_field_from_probes_that_hold_no_row():
    """As two tenants of one engine: the probes carry the template with "N/A" only, and a tenant's
    choice is kept in its own namespace, so whether a template ran before tells bob nothing of
    alice's work (she pays no probes twice; he pays his own)."""
    from relserve.policy.types import Tenancy
    from relserve.server.tenant_engine import engine_for_tenant

    eng = TenantAwareEngine(answer=answer, label_mass=sentiment_likes_the_labels)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap")
    alice_rows = [r.replace("a review", "alice's secret review") for r in ROWS]
    for _ in range(2):
        run_call(call, [alice_rows], engine=engine_for_tenant(eng, Tenancy("alice", cache_salt="salt-a")),
                 cache=False, progress=False)
    assert len(eng.field_probes) == len(CANDIDATES)
    assert not any("alice" in p for p, _ in eng.field_probes)
    run_call(call, [ROWS], engine=engine_for_tenant(eng, Tenancy("bob", cache_salt="salt-b")), cache=False, progress=False)
    assert len(eng.field_probes) == 2 * len(CANDIDATES) and eng.relqueries[-1].answer_field == "Sentiment:"


def test_a_failing_probe_leaves_its_name_out_and_the_choice_is_tried_again():
    """A probe is not a row of the user's: if one fails, the rows still run, after the best of
    the names that answered, and the choice is not kept."""
    def mass(rq):
        if rq.answer_field == "Sentiment:":
            raise RuntimeError("probe lost")
        return {"Rating:": -0.5}.get(rq.answer_field, -4.0)

    eng = ScriptedEngine(answer=answer, label_mass=mass)
    call = make_call("llm_classify", TEMPLATE, labels=LABELS, method="bootstrap")
    out = run_call(call, [ROWS], engine=eng, cache=False, progress=False)
    assert out.values == ["positive" if i % 2 else "negative" for i in range(20)]
    assert eng.relqueries[-1].answer_field == "Rating:"
    assert known_field(plan_call(call, [ROWS], model_id=eng.model_id).call, eng.model_id) is None
