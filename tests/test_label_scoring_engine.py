"""Label scoring and calibration on the real engine (issue 12, item 2; issue 22: prompt shapes,
batch calibration, the default method's accuracy on a small labelled set)."""

from __future__ import annotations

import math

import pytest
from engine_doubles import best_label
from waits import run_within

from relserve.engine.chat_template import ChatPrompter
from relserve.functions import make_call
from relserve.labels.memory import forget_all
from relserve.prompt_rendering import render
from relserve.relquery import RelQuery

ROWS = [
    {"review": "Wonderful, I love it."},
    {"review": "Broke after a day. Awful."},
    {"review": "It is a kettle."},
]
Q = "Review: {review}\nIs this review positive?"


def test_every_label_is_scored_and_the_answer_is_the_best_after_the_prior(engine):
    plain = run_within(engine, RelQuery(Q, ROWS, choices=["yes", "no"], score_labels=True))
    assert plain.stats.num_errors == 0
    for row in plain.rows:
        assert set(row.label_logprobs) == {"yes", "no"}
        assert sum(math.exp(v) for v in row.label_logprobs.values()) == pytest.approx(1.0)
        assert row.text == best_label(row.label_logprobs, None)
    # a prior that favours the model's answer of every row flips them all: each row's
    # scores are the same, only the division by the prior changed
    flipped_prior = {"yes": 0.999, "no": 0.001} if plain.rows[0].text == "yes" else {"yes": 0.001, "no": 0.999}
    cal = run_within(engine, RelQuery(Q, ROWS, choices=["yes", "no"], score_labels=True, label_prior=flipped_prior))
    for a, b in zip(plain.rows, cal.rows):
        assert b.label_logprobs == pytest.approx(a.label_logprobs, abs=1e-3)
        assert b.text == best_label(b.label_logprobs, flipped_prior)
    assert [r.text for r in cal.rows][0] != plain.rows[0].text


def test_multi_token_labels_are_scored_whole(engine):
    labels = ["very positive", "very negative", "neutral"]
    res = run_within(engine, RelQuery(Q, ROWS, choices=labels, score_labels=True))
    assert res.stats.num_errors == 0
    trie = engine.label_trie(tuple(labels), "")
    # "very positive" is two tokens and "neutral" one: the root asks for the first tokens of all
    # six spellings, and "very"/"Very" for the second tokens of the two "very" labels, where they
    # part; "Neutral" (two tokens) parts from the others at its first, so its second is not asked
    assert len(trie.sequences[0][0]) == 2 and len(trie.sequences[2][0]) == 1
    assert [len(s) for s in trie.read()[2]] == [1, 1]
    assert res.rows[0].output_tokens == len(trie.needed_nodes()) == 3
    for row in res.rows:
        assert set(row.label_logprobs) == set(labels)
        assert row.text == best_label(row.label_logprobs, None)


def test_split_scores_labels_that_start_apart_in_one_request_per_row(engine, monkeypatch):
    """Issue 28 item 3: under the default norm ("split") four labels of two words each cost one
    request per row; each label's score is its first token's, as the "first" norm reads it."""
    from relserve.engine import label_scoring

    labels = ["home cook", "professional chef", "young child", "pet owner"]
    assert label_scoring.LABEL_NORM == "split"
    split = run_within(engine, RelQuery(Q, ROWS, choices=labels, score_labels=True, prompt_shape="completion"))
    monkeypatch.setattr(label_scoring, "LABEL_NORM", "first")
    first = run_within(engine, RelQuery(Q, ROWS, choices=labels, score_labels=True, prompt_shape="completion"))
    monkeypatch.setattr(label_scoring, "LABEL_NORM", "mean")
    mean = run_within(engine, RelQuery(Q, ROWS, choices=labels, score_labels=True, prompt_shape="completion"))
    trie = engine.label_trie(tuple(labels), " ")
    assert [r.output_tokens for r in split.rows] == [1] * len(ROWS)
    assert [r.output_tokens for r in mean.rows] == [len(trie.nodes)] * len(ROWS) and len(trie.nodes) > 1
    for s, f in zip(split.rows, first.rows):
        # no two labels share a first token here, so split reads exactly the first tokens
        assert s.label_logprobs == pytest.approx(f.label_logprobs, abs=1e-4)
        assert s.text == best_label(s.label_logprobs, None)


def test_prompt_shapes_lay_out_the_scoring_request(engine):
    prompt = "Review: Wonderful, I love it.\nIs this review positive?"
    tok = lambda text: engine.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    chat_text = ChatPrompter(engine.tokenizer).text(prompt)
    expected = {
        "chat": len(tok(chat_text)),
        "chat_answer": len(tok(chat_text + "Answer:")),
        "completion": len(tok(prompt + "\nAnswer:")),
    }
    for shape, tokens in expected.items():
        res = run_within(engine, RelQuery.from_prompts([prompt], choices=["yes", "no"], score_labels=True, prompt_shape=shape))
        assert res.rows[0].prompt_tokens == tokens, shape
        assert res.rows[0].text == best_label(res.rows[0].label_logprobs, None)
    # question_first: the planner names the question and moves the long value after it; the
    # engine adds the answer field on its own line, as for completion
    call = make_call("llm_filter", "Is this review positive? Review: {review}", prompt_shape="question_first", method="score")
    text = render(call, ("Wonderful, I love it, the best purchase this year.",))
    assert text == "Question: Is this review positive?\nReview: Wonderful, I love it, the best purchase this year."
    res = run_within(engine, RelQuery.from_prompts([text], choices=["yes", "no"], score_labels=True, prompt_shape="question_first"))
    assert res.rows[0].prompt_tokens == len(tok(text + "\nAnswer:"))
    # after an answer field the label is scored with its space: " yes" is one token
    trie = engine.label_trie(("yes", "no"), " ")
    assert trie.sequences == ((tuple(tok(" yes")), tuple(tok(" Yes"))), (tuple(tok(" no")), tuple(tok(" No"))))
    assert all(len(s) == 1 for forms in trie.sequences for s in forms)


#: a small labelled set written for this test (not from any benchmark table): 10 happy, 10 not
LABELLED = [
    ("Works perfectly and the battery lasts for days. Very happy with it.", True),
    ("Excellent quality, arrived early, I would buy it again.", True),
    ("My kids love it and it is so easy to clean. Great purchase.", True),
    ("Best kettle I have owned, boils fast and looks beautiful.", True),
    ("Comfortable, sturdy and exactly as described. Five stars.", True),
    ("Fantastic sound for the price, I use it every day.", True),
    ("The blender crushes ice in seconds. Love it!", True),
    ("Great value, it fits perfectly and feels well made.", True),
    ("Super soft blanket, warm and cosy. Highly recommend.", True),
    ("This lamp is lovely and brightens the whole room.", True),
    ("Stopped working after two days. Total waste of money.", False),
    ("Cheap plastic that cracked the first time I used it.", False),
    ("Terrible customer service and the item arrived broken.", False),
    ("It smells awful and the color faded after one wash.", False),
    ("Way too small, uncomfortable, and I am returning it.", False),
    ("The battery dies within an hour. Very disappointed.", False),
    ("Loud, slow and it leaks water everywhere. Avoid.", False),
    ("Poorly made, the zipper broke on day one.", False),
    ("Does not work with my phone at all. Useless.", False),
    ("The worst chair I have ever bought, my back hurts.", False),
]
#: the floor of the default method on that balanced set: guessing each of the 20 rows gets 14 or
#: more right with probability 5.8% (binomial, p = 1/2), answering one label for every row gets 10.
#: The default reads a relQuery it cannot split into two crowds as a selective filter (the top
#: fifth by score, docs/quality.md), which on these 10 + 10 rows keeps 4 and can be right about 14
#: at most: 14 means every kept row is a happy one
MIN_RIGHT = 14
#: the 2-label classify of those rows (bootstrap, after the field the model names): the same
#: margin over chance (15 or more of 20 right by guessing: 2.1%)
MIN_CLASSIFY_RIGHT = 15


def test_default_method_gets_a_small_labelled_set_right(engine):
    import tempfile
    from pathlib import Path

    import duckdb
    from engine_doubles import RecordingEngine

    import relserve.duckdb
    from relserve.planner.cache import ResultCache

    forget_all()
    rec = RecordingEngine(engine)
    con = duckdb.connect()
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=rec, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE t (review VARCHAR, truth BOOLEAN)")
        con.executemany("INSERT INTO t VALUES (?, ?)", LABELLED)
        got = relserve.duckdb.sql(
            con, "SELECT truth, llm_filter('Is this customer happy? Review: {review}', review) AS a FROM t"
        ).fetchall()
    # the default (adaptive) makes the call's label plan from the 20 rows: one request asking what
    # a "yes" means (the concept proposal), 8 rows in each of the five layouts (the question, and
    # the review alone after four fields, "happy" against "unhappy"), the other 12 in the two most
    # informative, then the three content-free rows and the 20 rows behind the chosen examples;
    # those last scores answer the rows (no relQuery after the plan); no calibration probes
    assert rec.probes == [] and [len(p) for p in rec.first_passes] == [1] + [8] * 5 + [12] * 2 + [3, 20]
    assert rec.relqueries == []
    right = sum(a == t for t, a in got)
    assert right >= MIN_RIGHT, (right, got)


def test_a_two_label_classify_is_scored_after_the_field_the_model_names_its_labels_by(engine):
    """The default of a 2-label llm_classify (docs/quality.md, "Eleventh pass"): one content-free
    probe per candidate name, and the rows scored after the name under which the model gives the
    labels the most probability. For positive/negative this model says "Sentiment"."""
    import math

    from engine_doubles import RecordingEngine

    from relserve.labels.answer_fields import CANDIDATES, probe_prompt
    from relserve.labels.bootstrap import in_examples_shape
    from relserve.planner.plan_and_run import run_call

    rec = RecordingEngine(engine)
    call = make_call("llm_classify", "Is this product review positive or negative? Review: {review}", labels=["positive", "negative"],
                     method="bootstrap")
    out = run_call(call, [[r for r, _ in LABELLED]], engine=rec, cache=False, progress=False)
    # the bootstrap plan: a first pass over a 10-row sample chooses the examples, the same sample
    # scored behind them gives the label means (relserve/labels/bootstrap.py)
    assert len(rec.field_probes) == len(CANDIDATES) and [len(p) for p in rec.first_passes] == [10, 10]
    (rq,) = rec.relqueries
    assert (rq.prompt_shape, rq.answer_field) == ("question_first", "Sentiment:")
    # the mass is the log-probability of answering with a label at all: on the content-free row the
    # name is chosen on (no examples in front, so no first-pass draw decides), after "Sentiment:" most
    # of the model's probability (measured -1.3), far more than after "Status:"
    content_free = probe_prompt(in_examples_shape(call))
    probe = run_within(engine, RelQuery.from_prompts([content_free], choices=["positive", "negative"], score_labels=True,
                                                     prompt_shape="question_first", answer_field="Sentiment:")).rows[0]
    status = run_within(engine, RelQuery.from_prompts([content_free], choices=["positive", "negative"], score_labels=True,
                                                      prompt_shape="question_first", answer_field="Status:")).rows[0]
    assert -3.0 < probe.label_mass < 0.0 and status.label_mass < probe.label_mass - 1.0, (probe.label_mass, status.label_mass)
    assert math.isclose(sum(math.exp(v) for v in probe.label_logprobs.values()), 1.0, rel_tol=1e-6)
    right = sum((v == "positive") == t for v, (_, t) in zip(out.values, LABELLED))
    assert right >= MIN_CLASSIFY_RIGHT, (right, out.values)


def test_small_filter_and_classify_fall_back_to_calibrated_scores(engine):
    import tempfile
    from pathlib import Path

    import duckdb
    from engine_doubles import RecordingEngine

    import relserve.duckdb
    from relserve.planner.cache import ResultCache

    forget_all()
    rec = RecordingEngine(engine)
    con = duckdb.connect()
    sql = "SELECT llm_filter('Review: {review}\nIs this review positive?', review, llm_options(method := 'bootstrap')) AS a FROM t"
    with tempfile.TemporaryDirectory() as tmp:
        relserve.duckdb.install(con, engine=rec, cache=ResultCache(Path(tmp) / "c.sqlite"), progress=False)
        con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('Wonderful, I love it.'), ('Awful.')) v(review)")
        got = relserve.duckdb.sql(con, sql).fetchall()
        gen = relserve.duckdb.sql(con, sql.replace("'bootstrap'", "'generate'")).fetchall()
    assert all(isinstance(a, bool) for (a,) in got + gen)
    # the default completion shape: the probes laid out as its rows (value in front, named), and
    # no "Answer yes or no." line before the engine's answer field
    assert rec.probes == [["Review: N/A\nIs this review positive?", "Review: \nIs this review positive?",
                           "Review: [MASK]\nIs this review positive?"]]
    # a statement of 2 rows makes no plan to keep (under 16): the call's next statement (no
    # result cache, so it runs) decides its rows again from their own scores against the
    # content-free rows' (which depend on the template alone: scored once, not probed again), and
    # picks the same labels for the same rows (a row's answer does not depend on what ran before)
    con2 = duckdb.connect()
    relserve.duckdb.install(con2, engine=rec, cache=False, progress=False)
    con2.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('Wonderful, I love it.'), ('Awful.')) v(review)")
    again = relserve.duckdb.sql(con2, sql).fetchall()
    scored, generated, scored_again = rec.relqueries
    # the probes ran beside the rows (issue 28), the executor picked with their prior
    assert scored.score_labels and scored.label_prior is None
    assert not generated.score_labels
    assert scored_again.score_labels and scored_again.label_prior is None and len(rec.probes) == 1
    assert again == got


def test_many_labels_are_scored_past_vllms_twenty_logprobs_per_request(engine):
    # 14 labels and their capitalised spellings: 28 first tokens, more than one request returns
    labels = ["red", "green", "blue", "black", "white", "pink", "gray", "brown", "gold", "silver", "cyan", "teal", "navy", "lime"]
    res = run_within(engine, RelQuery("What colour is {thing}?", [{"thing": "grass"}, {"thing": "snow"}], choices=labels, score_labels=True))
    assert res.stats.num_errors == 0, [r.error for r in res.rows]
    for row in res.rows:
        assert set(row.label_logprobs) == set(labels)
        assert row.text == best_label(row.label_logprobs, None)
